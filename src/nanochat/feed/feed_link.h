#pragma once
// The data feed's connections (docs/architecture.md 7.11): in a job whose data node 0 serves, rank 0
// holds one TCP connection to every other rank and writes frames (feed/feed.h) on it; each other
// rank (a worker) reads them on a receiver thread into queues its trainer takes them from. These
// connections are the feed's own, never the Gloo pairs that carry gradients.
//
// Port: rank 0 listens on its --port-range port (NANOCHAT_PORT_RANGE's first port + LOCAL_RANK),
// which is free again once Gloo's pairs are connected, so the range a firewall already opens for
// the job serves the feed too; without a range, on a port the kernel picks. The port travels to
// the workers in a broadcast over the communicator; they connect to MASTER_ADDR (node 0, where rank
// 0 hosts the job's store), or 127.0.0.1 when it is unset (ranks in one process, tests).
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/cluster/net.h"
#include "nanochat/feed/feed.h"

namespace nanochat {
class Communicator;
}

namespace nanochat::feed {

using cluster::Clock;
using cluster::Fd;

/// Rank 0's ends of the data connections, one per other rank.
class FeedServer {
 public:
  /// Collective with FeedClient's constructor on every other rank of `comm` (world size >= 2).
  /// Listens (see above), broadcasts the port, and accepts one connection from every other rank
  /// before `deadline` (each first sends a Hello frame with its rank and host). Throws
  /// nanochat::Error naming the port and its holder when it cannot listen (the workers then throw
  /// too), or the ranks that did not connect by the deadline.
  FeedServer(Communicator& comm, Clock::time_point deadline);
  ~FeedServer();
  FeedServer(const FeedServer&) = delete;
  FeedServer& operator=(const FeedServer&) = delete;

  int world_size() const { return static_cast<int>(peers_.size()); }
  int port() const { return port_; }
  /// "rank r (host h)".
  std::string describe(int r) const;
  /// Writes f to rank r (1 <= r < world size) before `deadline`. Safe to call from several threads:
  /// frames to one rank never interleave. Throws nanochat::Error naming rank r and its host when the
  /// connection is lost or the deadline passes. A rank dropped (it left the job) is skipped: the job
  /// regroups without it, and the ranks that remain must not fail on its rows.
  void send(int r, const FeedFrame& f, Clock::time_point deadline);
  /// An Error frame with `message` to every other rank, each within a few seconds; a rank that cannot
  /// be reached is skipped. Never throws.
  void send_error(const std::string& message) noexcept;
  /// Shuts every connection down (a blocked send() then fails at once). Never throws.
  void shutdown() noexcept;
  /// Shuts rank r's connection down (it left the job: a send to it is skipped, one in progress ends
  /// at once). Never throws.
  void drop(int r) noexcept;

 private:
  struct Peer {
    Fd fd;
    std::string host;
    std::unique_ptr<std::mutex> mu = std::make_unique<std::mutex>();
    std::unique_ptr<std::atomic<bool>> left = std::make_unique<std::atomic<bool>>(false);  // drop()ped
  };
  std::vector<Peer> peers_;  // index = rank; peers_[0] unused
  int port_ = 0;
};

/// A worker's end: the connection to rank 0 and the receiver thread that fills the queues.
class FeedClient {
 public:
  /// Collective with FeedServer's constructor on rank 0. Connects to rank 0 at the broadcast port,
  /// retrying until `deadline`, says its rank and host, and starts the receiver. Throws
  /// nanochat::Error naming the address, the port and what to open when it cannot connect.
  FeedClient(Communicator& comm, Clock::time_point deadline);
  ~FeedClient();
  FeedClient(const FeedClient&) = delete;
  FeedClient& operator=(const FeedClient&) = delete;

  /// The next frame of `kind` (Tokenizer, Step or Val; Val frames have a queue of their own, so an
  /// evaluation never waits behind steps sent ahead) whose seq must be `seq`. Waits until
  /// `deadline`, printing "rank r: waiting for <what> from rank 0 (host h) (N s of M s)" to stderr
  /// every wait_report_interval(). Throws nanochat::Error with rank 0's message when it sent an
  /// Error frame, naming rank 0 when the connection closed or broke, and naming the wait at the
  /// deadline or when an unexpected frame arrives.
  FeedFrame next(FeedKind kind, int64_t seq, Clock::time_point deadline, const std::string& what);
  /// The same without the check of seq.
  FeedFrame next_any(FeedKind kind, Clock::time_point deadline, const std::string& what);
  /// "rank 0 (host h)".
  const std::string& server() const { return server_; }
  /// Rank 0 is gone (its heartbeat stopped, cluster/heartbeat.h): a wait in next() ends now and
  /// throws `reason` (frames already queued are still delivered). Never throws.
  void abort(const std::string& reason) noexcept;

 private:
  void receive_loop();
  /// Prints rank 0's `reason` to stderr unless next() throws it within a grace period (2 s) or
  /// before the client is destroyed: the user sees it once either way.
  void echo_unless_delivered(const std::string& reason);

  int rank_ = 0;
  Fd fd_;
  std::string server_;
  FeedQueue main_q_{static_cast<size_t>(-1)};  // unbounded: rank 0 bounds how far it sends ahead
  FeedQueue val_q_{static_cast<size_t>(-1)};
  std::atomic<bool> stop_{false};
  std::thread receiver_;
};

/// The deadline of the feed's set-up and first frames: now + NANOCHAT_STARTUP_TIMEOUT (900 s).
Clock::time_point feed_startup_deadline();
/// The deadline of one step's frame or one write: now + NANOCHAT_COLLECTIVE_TIMEOUT (300 s).
Clock::time_point feed_step_deadline();

}  // namespace nanochat::feed
