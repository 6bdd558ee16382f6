#pragma once
// Internal to cluster: the state of a GlooCommunicator (cluster/gloo_communicator.h), shared by
// gloo_communicator.cpp (rendezvous, the comm thread, the ring collectives, all-reduce, broadcast,
// barrier), gloo_point_to_point.cpp (send/recv, gather, scatter, the byte all-gather and split)
// and gloo_failure.cpp (failure diagnosis, the heartbeat's lost peers). Only the lanes' threads use `ctx`
// to send and receive; an operation is a Task that submit() queues for one of them.
#ifdef NANOCHAT_HAVE_GLOO
#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <nlohmann/json_fwd.hpp>

#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/cluster/heartbeat.h"

namespace nanochat::cluster {

namespace gloo_detail {

// Slot prefixes for our own collectives (Gloo's own algorithms, unused, would take 0x01..0x08).
inline constexpr uint8_t kReduceScatterSlotPrefix = 0x41;
inline constexpr uint8_t kAllgatherSlotPrefix = 0x42;
inline constexpr uint8_t kSendRecvSlotPrefix = 0x43;
inline constexpr uint8_t kGatherSlotPrefix = 0x44;
inline constexpr uint8_t kScatterSlotPrefix = 0x45;
inline constexpr uint8_t kBroadcastSlotPrefix = 0x46;
// Reduce-scatter pipelines chunks of this many floats (1 MiB) with kInFlight receives posted.
// Gloo's TCP transport sends only once the receiver has posted its receive, so more than two
// in flight keeps the link busy while this thread is descheduled or adding.
inline constexpr size_t kChunk = size_t(1) << 18;
inline constexpr size_t kInFlight = 4;
inline constexpr size_t kChunkBytes = kChunk * sizeof(float);  // the all-gather's chunk, in bytes

// Completion state shared by a Work handle and the comm thread.
struct OpState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;
  int lost_peer = -1;  // >= 0: the error is that peer's loss (Work::wait throws PeerLost)
};

struct Task {
  std::string what;
  std::function<void()> fn;
  std::shared_ptr<OpState> st;
};

// Gloo writes to its sockets without MSG_NOSIGNAL, so a peer that died turns the next write into
// SIGPIPE, which would kill this rank before it can name the peer (PyTorch survives only because
// Python ignores SIGPIPE). Rather than change the process-wide disposition, the threads that run
// Gloo code block SIGPIPE: Gloo's device loop thread inherits the mask of the thread that creates
// the device (the constructor's), and the comm thread blocks it for good. The write then fails
// with EPIPE, which Gloo reports as an error.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~SigpipeBlock() {
    // Discard a SIGPIPE raised while blocked, so unblocking does not deliver it.
    timespec zero{0, 0};
    while (sigtimedwait(&set_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t set_, old_;
};

inline std::vector<size_t> offsets_of(const std::vector<size_t>& counts) {
  std::vector<size_t> o(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) o[i + 1] = o[i] + counts[i];
  return o;
}

}  // namespace gloo_detail

struct GlooCommunicator::Impl {
  DistEnv env;  // a sub-communicator's: rank and world_size within its group
  DistOptions opts;
  Ms coll_timeout{0};
  // The rank the last failed wait of this thread (a lane) waited for, and whether it waited for
  // that rank's receive of our send (else for its data); read by diagnose() on the same thread.
  static thread_local int waiting_on;
  static thread_local bool waiting_send;
  std::string host;
  DeviceChoice dev_choice;
  std::unique_ptr<StoreServer> server;
  std::shared_ptr<StoreClient> client;  // shared with sub-communicators (split)
  std::shared_ptr<PrefixStore> store;
  std::vector<PeerInfo> peers;
  std::vector<int> job_rank;  // rank here -> rank in the job (the store's keys use the job's)
  std::string group;          // "" for the job, else "group <color> of split <k>" (for messages)
  std::string key_prefix;     // store keys of this communicator's Gloo mesh ("" for the job's)
  int gloo_port = 0;          // --port-range: the port every pair of this rank listens on
  std::string port_range;
  uint64_t splits = 0;  // split() calls so far (identical on every rank)
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::Context> ctx;

  // Lane 0 (main) runs every operation but all_gather_side, lane 1 (side) only those; each lane
  // is one thread with its own FIFO queue (docs/architecture.md 7.5).
  static constexpr int kLanes = 2;
  std::thread thread[kLanes];
  std::mutex qmu;
  std::condition_variable qcv[kLanes];
  std::deque<gloo_detail::Task> queue[kLanes];
  bool stopping = false;
  std::string closed;    // close()'s reason, guarded by qmu
  std::string broken;    // first failure, guarded by qmu
  int broken_peer = -1;  // the peer whose loss broke it (-1: another failure), guarded by qmu
  // Notified (under qmu) when `broken` is set.
  std::condition_variable broken_cv;
  // A peer found lost by the heartbeat (guarded by qmu): the reason every later operation fails.
  std::string lost;
  int lost_rank = -1;
  std::vector<gloo::transport::UnboundBuffer*> live_buffers;             // (qmu) their waits end when a peer is lost
  std::vector<std::function<void(int, const std::string&)>> lost_hooks;  // guarded by qmu
  // A group from split(): the parent's heartbeat reports its losses here (the group has none of
  // its own); `impl` is cleared when the group ends, before the parent may call again.
  struct ParentLink {
    std::mutex mu;
    Impl* impl = nullptr;
  };
  std::shared_ptr<ParentLink> parent_link;
  std::unique_ptr<Heartbeat> heartbeat;  // the job's communicator only
  uint64_t seq = 0;                      // collectives submitted (for messages)
  std::vector<float> scratch;

  ~Impl() {
    bool clean = broken.empty();
    ctx.reset();
    dev.reset();
    store.reset();
    client.reset();  // goodbye: no last will
    if (server) {
      // The other ranks may still need the store (to finish, to diagnose a failure, or to learn
      // that rendezvous failed), so the host lingers until they disconnect (bounded), and says so
      // when that takes more than a moment.
      const Ms limit = clean ? Ms(60000) : Ms(10000), quiet(2000);
      if (!server->wait_clients_at_most(0, quiet)) {
        std::fprintf(stderr, "%s: keeping the job's store up until the other ranks disconnect (at most %ld s more)%s\n",
                     me().c_str(), static_cast<long>((limit - quiet).count() / 1000),
                     clean ? "" : "; this rank's error follows");
        std::fflush(stderr);
        server->wait_clients_at_most(0, limit - quiet);
      }
      server.reset();
    }
  }

  std::string me() const {
    if (group.empty()) return str_cat("rank ", env.rank, " (host ", host, ")");
    return str_cat("rank ", env.rank, " of ", group, " (job rank ", job_rank[env.rank], ", host ", host, ")");
  }
  std::string rank_desc(int r) const {
    const std::string in_group =
        group.empty() || r < 0 || r >= static_cast<int>(job_rank.size()) ? std::string() : str_cat(" of ", group);
    const std::string job = in_group.empty() ? std::string() : str_cat("job rank ", job_rank[r], ", ");
    if (r >= 0 && r < static_cast<int>(peers.size()) && !peers[r].host.empty())
      return str_cat("rank ", r, in_group, " (", job, "host ", peers[r].host, ", pid ", peers[r].pid, ")");
    return str_cat("rank ", r, in_group);
  }

  // Joins the job: the store, this rank's claim and info, every rank's info, the mesh check and
  // Gloo's pairs, all within the rendezvous timeout.
  void rendezvous();
  // Connects to the job's store (hosting it on rank 0 unless the launcher does), reporting every
  // interval while it is not up, and leaves this rank's will there.
  void open_store(Clock::time_point t0);
  // Waits until every rank has published its info; on the deadline throws naming the missing ones.
  void wait_for_every_rank(Clock::time_point deadline);
  // Reads every rank's info into peers and returns it; throws when the ranks' WORLD_SIZE differ.
  std::vector<nlohmann::json> read_peer_infos(Clock::time_point deadline);
  // Connects Gloo's pairs, all on `port` when it is not 0 (--port-range `range`).
  void connect_gloo(int port, const std::string& range, Clock::time_point deadline);
  void run_thread(int lane);
  // The message of a failed operation; *lost_peer = the rank whose loss caused it (else -1).
  std::string diagnose(const std::string& what, const std::string& gloo_msg, int* lost_peer);
  // Starts the heartbeat (cluster/heartbeat.h) unless its timeout is 0.
  void start_heartbeat();
  // The heartbeat found job rank `r` lost: remember why, fail the Gloo pair to it (a wait on it
  // ends now), call the hooks.
  void peer_lost(int r, const std::string& why);
  // An operation failed with `why`: fail every pair, so that the other lane's wait (on any pair)
  // ends now rather than at the collective timeout, later operations fail at once, and the other
  // ranks notice the closed connections at once.
  void end_every_pair(const std::string& why);
  WorkPtr submit(std::string what, std::function<void()> fn, int lane = 0);
  void recv_from(gloo::transport::UnboundBuffer& buf, int peer);
  // Waits for the next of this buffer's sends to `peer` (the ring's next rank) to complete; on a
  // timeout or an abort records the peer for the diagnosis and rethrows.
  void send_to_done(gloo::transport::UnboundBuffer& buf, int peer);
  // True when `gloo_msg` says another wait's timeout closed the pair and the other lane's
  // diagnosis of it became `broken` (gloo_communicator.cpp).
  bool closed_by_other_lane(const std::string& gloo_msg);
  // An unbound buffer whose waits peer_lost() aborts (a posted receive from a rank that died waits
  // for its remote's notification, which a failed pair never delivers), deregistered when freed.
  struct UnboundDeleter {
    Impl* impl;
    void operator()(gloo::transport::UnboundBuffer* b) const;
  };
  using Unbound = std::unique_ptr<gloo::transport::UnboundBuffer, UnboundDeleter>;
  Unbound unbound(void* data, size_t bytes);
  // Waits for one send / receive per rank of `pending` (any order), naming the first one still
  // pending when the deadline passes.
  void wait_sends(gloo::transport::UnboundBuffer& buf, std::vector<int> pending);
  void wait_recvs(gloo::transport::UnboundBuffer& buf, std::vector<int> pending);
  void ring_reduce_scatter(float* in, float* out, const std::vector<size_t>& counts);
  // `lane` picks the slot, so that the two lanes' gathers never take each other's messages.
  void ring_all_gather(const void* in, void* out, const std::vector<size_t>& bytes, int lane = 0);
  // All-reduce (sum) of n values on the ring above: all-gathered, then added in rank order, in
  // blocks of kGatherSumMax values.
  template <typename T>
  void gather_sum(T* data, size_t n);
  void ring_all_reduce(float* data, size_t n);
  // The root's bytes down the ring, chunk by chunk; the rank before the root forwards nothing.
  void ring_broadcast(void* data, size_t bytes, int root);
  // Every rank's one byte all-gathered on the ring: no rank returns before every rank entered.
  void ring_barrier();
  void gather_to(const void* in, void* out, const std::vector<size_t>& bytes, int root);
  void scatter_from(const void* in, void* out, const std::vector<size_t>& bytes, int root);
  // A sub-communicator of this one: the ranks `members` (ascending, this rank among them).
  std::unique_ptr<Impl> child(uint64_t split, int color, const std::vector<int>& members) const;
};

}  // namespace nanochat::cluster
#endif
