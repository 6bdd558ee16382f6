#pragma once
// Communicator: the collectives the engine needs, behind one interface (docs/architecture.md 3.6).
// Implementations: LocalCommunicator (world size 1, no-ops, here), GlooCommunicator (TCP, dist/).
// The interface is its own area (comm, on core only) so that optim and train issue collectives
// without depending on the transport.
// Every operation is asynchronous: it returns a Work handle; wait() blocks until done (with the
// communicator's deadline) and rethrows a failure as nanochat::Error naming the peer rank/host.
// All ranks must issue the same sequence of collectives. Reductions are SUMs (the engine sends
// token-weighted sums, never averages).
#include <cstddef>
#include <memory>
#include <vector>

namespace nanochat {

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
  /// Broadcast `bytes` bytes from `root` to every rank, in place.
  virtual WorkPtr broadcast(void* data, size_t bytes, int root) = 0;
  /// Returns when every rank has entered the barrier.
  virtual WorkPtr barrier() = 0;
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
};

}  // namespace nanochat
