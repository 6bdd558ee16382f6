#pragma once
// Communicator: the collectives the engine needs, behind one interface (docs/architecture.md 3.6).
// Implementations: LocalCommunicator (world size 1, no-ops, here), GlooCommunicator (TCP, cluster/);
// tests also use an in-process one (tests/support/thread_communicator.h).
// The interface is its own area (comm, on core only) so that optim and train issue collectives
// without depending on the transport.
// Every operation is asynchronous: it returns a Work handle; wait() blocks until done (with the
// communicator's deadline) and rethrows a failure as nanochat::Error naming the peer rank/host.
// All ranks must issue the same sequence of collectives. Reductions are SUMs (the engine sends
// token-weighted sums, never averages).
// Point to point (send/recv) is not a collective: only the two ranks take part, and the messages
// of one sender to one receiver arrive in the order they were sent. A send completes only once
// the receiver has posted the matching recv (Gloo's TCP transport is a rendezvous protocol, and
// one thread runs a communicator's operations in order), so two ranks that both send to each
// other before receiving wait for each other until the deadline: the lower rank sends first.
// Typed helpers over these operations (all_gather_value, gather_strings, ...): comm/typed.h.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/core/error.h"

namespace nanochat {

/// What Work::wait throws when an operation failed because a peer left the job: it died, froze or
/// was cut off (docs/architecture.md 7.7, 7.12). The message names the peer and why; `peer` is its rank.
class PeerLost : public Error {
 public:
  PeerLost(const std::string& msg, int peer) : Error(msg), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

/// Handle of an asynchronous collective. wait() is idempotent.
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until the collective has finished. Throws nanochat::Error on failure or timeout.
  virtual void wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

/// Data-parallel process group (rank in [0, world_size)).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  /// In place: data[i] <- sum over ranks of data[i], for n floats.
  virtual WorkPtr all_reduce_sum(float* data, size_t n) = 0;
  /// In place, double precision (for bpb totals and other accumulators).
  virtual WorkPtr all_reduce_sum_f64(double* data, size_t n) = 0;
  /// Reduce-scatter: `in` holds sum(counts) floats, rank-major segments (segment j has counts[j]
  /// floats). On completion out[0 .. counts[rank]) = sum over ranks of segment `rank`.
  /// Unequal counts are allowed. `in` may be modified (used as scratch).
  virtual WorkPtr reduce_scatter_sum(float* in, float* out, const std::vector<size_t>& counts) = 0;
  /// All-gather: every rank contributes counts[rank] floats from `in`; out receives the
  /// concatenation of all segments in rank order (sum(counts) floats). `in` may alias
  /// out + offset(rank).
  virtual WorkPtr all_gather(const float* in, float* out, const std::vector<size_t>& counts) = 0;
  /// The same all-gather on the side lane: it may run while the operations submitted before it
  /// on the main lane (every other operation) are still running, so that the two use both
  /// directions of a link at once (the optimizer's parameter gathers beside the gradients'
  /// reduce-scatters, docs/architecture.md 7.5). Side-lane operations run in order among
  /// themselves, and every rank must submit the same sequence of them. The caller must not
  /// submit one while an unfinished main-lane operation reads or writes `in` or `out`.
  /// Default: all_gather (one lane).
  virtual WorkPtr all_gather_side(const float* in, float* out, const std::vector<size_t>& counts) {
    return all_gather(in, out, counts);
  }
  /// Broadcast `bytes` bytes from `root` to every rank, in place.
  virtual WorkPtr broadcast(void* data, size_t bytes, int root) = 0;
  /// Returns when every rank has entered the barrier.
  virtual WorkPtr barrier() = 0;

  /// Sends `bytes` bytes of `data` to rank `peer` (!= rank()); `data` must stay valid and
  /// unchanged until wait() returns. The peer's matching recv must ask for the same byte count
  /// (else both fail). A zero-byte send sends nothing (and needs no recv). wait() throws
  /// nanochat::Error naming the peer when its recv does not come within the deadline. Throws at
  /// once for a peer out of range or equal to rank().
  virtual WorkPtr send(const void* data, size_t bytes, int peer) = 0;
  /// Receives `bytes` bytes from rank `peer` (!= rank()) into `data`: the next message that peer
  /// sends to this rank. A zero-byte recv receives nothing. wait() throws nanochat::Error naming
  /// the peer when its data does not come within the deadline.
  virtual WorkPtr recv(void* data, size_t bytes, int peer) = 0;
  /// Gather to `root`: every rank contributes bytes[rank] bytes from `in`; on `root`, `out`
  /// receives the concatenation of all contributions in rank order (sum(bytes) bytes); `out` is
  /// not touched on the other ranks (may be null there). Unequal and zero sizes are allowed;
  /// every rank passes the same `bytes` (one entry per rank). On root, `in` may alias
  /// out + offset(root).
  virtual WorkPtr gather(const void* in, void* out, const std::vector<size_t>& bytes, int root) = 0;
  /// Scatter from `root`: root's `in` holds sum(bytes) bytes, rank-major; every rank receives its
  /// bytes[rank] bytes into `out`. `in` is not read on the other ranks (may be null there).
  /// Unequal and zero sizes are allowed; every rank passes the same `bytes`.
  virtual WorkPtr scatter(const void* in, void* out, const std::vector<size_t>& bytes, int root) = 0;
  /// All-gather of bytes: every rank contributes bytes[rank] bytes from `in`; every rank's `out`
  /// receives the concatenation in rank order (sum(bytes) bytes). Unequal and zero sizes are
  /// allowed; `in` may alias out + offset(rank).
  virtual WorkPtr all_gather_bytes(const void* in, void* out, const std::vector<size_t>& bytes) = 0;
  /// All-gather of floats whose counts the ranks learn from each other: every rank contributes
  /// `count` floats from `in`. On completion (*counts)[j] is rank j's count (counts resized to the
  /// world size) and, when their sum is at most `max_total`, out[0 .. sum) holds every rank's
  /// floats in rank order (out grows to the sum if it is smaller; nothing is gathered and out is
  /// left as it was when the sum is larger, which the caller reads from the counts). One
  /// operation: the caller does not wait between the counts and the data. `in`, `out` and
  /// `counts` must stay valid and untouched until wait() returns. Default (communicator.cpp): the
  /// counts' all-gather is waited for here, then the data's is returned.
  virtual WorkPtr all_gather_varying(const float* in, size_t count, std::vector<float>* out,
                                     std::vector<uint64_t>* counts, size_t max_total);
  /// Collective, blocking: the ranks that pass the same `color` (>= 0) form a new communicator,
  /// ranked by their rank here (lower first). Every rank of this communicator must call it (in the
  /// same place of its sequence of operations, with no operation of its own pending). The new
  /// communicator is independent of this one (its own operations, order and deadline) and must
  /// be destroyed before this one. A group of one rank is a LocalCommunicator (nothing to send).
  /// Throws nanochat::Error for a negative color, or naming the
  /// rank at fault when the group cannot be formed within the deadline.
  virtual std::unique_ptr<Communicator> split(int color) = 0;
  /// Registers `fn`, called from another thread at most once per peer, as soon as the
  /// communicator finds that peer lost (a heartbeat it stopped answering, a death), before or
  /// while an operation waits for it; the operations then fail with PeerLost. For the parts that
  /// wait on a peer outside the communicator (a data connection). Default: never called.
  virtual void on_peer_lost(std::function<void(int peer, const std::string& why)> fn) { (void)fn; }
};

/// World size 1: every collective is an identity (reduce-scatter/all-gather copy), already done.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  WorkPtr all_reduce_sum(float*, size_t) override;
  WorkPtr all_reduce_sum_f64(double*, size_t) override;
  WorkPtr reduce_scatter_sum(float* in, float* out, const std::vector<size_t>& counts) override;
  WorkPtr all_gather(const float* in, float* out, const std::vector<size_t>& counts) override;
  WorkPtr broadcast(void*, size_t, int) override;
  WorkPtr barrier() override;
  /// send/recv throw nanochat::Error at once: a one-rank job has no peer.
  WorkPtr send(const void* data, size_t bytes, int peer) override;
  WorkPtr recv(void* data, size_t bytes, int peer) override;
  WorkPtr gather(const void* in, void* out, const std::vector<size_t>& bytes, int root) override;
  WorkPtr scatter(const void* in, void* out, const std::vector<size_t>& bytes, int root) override;
  WorkPtr all_gather_bytes(const void* in, void* out, const std::vector<size_t>& bytes) override;
  std::unique_ptr<Communicator> split(int color) override;
};

}  // namespace nanochat
