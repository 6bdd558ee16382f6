#pragma once
// World-size- and split-independent summation of small gradients (so that any world size and any
// division of a step's micro-batches between the ranks reach the same parameters).
//
// resid_lambdas, x0_lambdas and backout_lambda have an exactly zero gradient at init (docs/nanochat.md 1.7,
// 10.3): what the backward computes for them is rounding noise, and AdamW's first steps move them
// by ~lr * sign(noise). The noise of a sum depends on the order of its terms, so with the usual
// "accumulate over micro-batches, then all-reduce" the trained model would depend on the world
// size. This class keeps each micro-batch's contribution of a few small tensors apart and adds
// them in one fixed order: the order of the micro-batches in the step's data stream. A step's rows
// are dealt to the ranks in contiguous ranges in rank order (train/balance.h), so that order is
// rank-major: rank 0's micro-batches, then rank 1's, ...; with the same micro-batch size on every
// rank the sum is bit-identical to one rank running all of them, whatever the split.
#include <cstddef>
#include <vector>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/arena.h"

namespace nanochat {

class OrderedGradSum {
 public:
  /// One gradient tensor: `n` floats at `g` (the model's gradient buffer).
  struct Span {
    float* g;
    size_t n;
  };
  /// spans: the tensors to sum in order; max_micro_steps: the most micro-batches of one step, all
  /// ranks together (buffers are sized for it). Throws nanochat::Error if max_micro_steps < 1.
  OrderedGradSum(std::vector<Span> spans, int max_micro_steps, Communicator& comm);

  /// Call after micro-batch `micro` (0-based within this rank's micro-batches of the step) has
  /// added its gradient, with the spans' gradients zero before that micro-batch: moves the
  /// contribution into slot `micro` and zeros the spans. Throws nanochat::Error for a slot
  /// outside the buffers.
  void after_micro_batch(int micro);
  /// After the last micro-batch (collective: every rank calls it once per step with the same
  /// `micro_per_rank`, the micro-batches each rank ran, possibly 0): all-gathers the contributions
  /// (on the side lane, Communicator::all_gather_side) and writes their ordered float sum
  /// (rank-major, then micro-batch order) back into the spans on every rank: the spans then hold
  /// the step's sum over all ranks, and the optimizer sends nothing more for them
  /// (MuonAdamW::set_summed_by_caller). Throws nanochat::Error if the counts do not fit the
  /// buffers or do not match the world size.
  void finish(const std::vector<int>& micro_per_rank);

  /// Total floats per contribution (sum of the spans' sizes).
  size_t floats() const { return per_micro_; }

 private:
  std::vector<Span> spans_;
  int max_;
  Communicator& comm_;
  size_t per_micro_ = 0;
  AlignedBuffer mine_;  // (max, per_micro)
  AlignedBuffer all_;   // (max, per_micro): every rank's contributions, rank-major
};

}  // namespace nanochat
