#pragma once
// World-size-independent summation of small gradients (so that W = 1, 2 and 3 reach the same
// parameters).
//
// resid_lambdas, x0_lambdas and backout_lambda have an exactly zero gradient at init (docs/nanochat.md 1.7,
// 10.3): what the backward computes for them is rounding noise, and AdamW's first steps move them
// by ~lr * sign(noise). The noise of a sum depends on the order of its terms, so with the usual
// "accumulate over micro-batches, then all-reduce" the trained model would depend on the world
// size. This class keeps each micro-batch's contribution of a few small tensors apart and adds
// them in one fixed order, the global micro-batch index g = micro * W + rank (which is the order
// of a single rank running all W * A micro-batches with --loader-global-stream), so the sum is
// bit-identical for every world size with the same global batch.
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
  /// spans: the tensors to sum in order; micro_steps: micro-batches per step on each rank (A).
  /// Throws nanochat::Error if micro_steps < 1.
  OrderedGradSum(std::vector<Span> spans, int micro_steps, Communicator& comm);

  /// Call after micro-batch `micro` (0-based) has added its gradient, with the spans' gradients
  /// zero before that micro-batch: moves the contribution into slot `micro` and zeros the spans.
  void after_micro_batch(int micro);
  /// After the last micro-batch (collective: every rank calls it once per step): all-gathers the
  /// contributions and writes their ordered float sum back into the spans on rank 0 and zeros on
  /// the other ranks, so the optimizer's SUM reduction (all-reduce or reduce-scatter: x + 0 is
  /// exact) reproduces the ordered sum on every rank.
  void finish();

  /// Total floats per contribution (sum of the spans' sizes).
  size_t floats() const { return per_micro_; }

 private:
  std::vector<Span> spans_;
  int A_;
  Communicator& comm_;
  size_t per_micro_ = 0;
  AlignedBuffer mine_;  // (A, per_micro)
  AlignedBuffer all_;   // (W, A, per_micro)
};

}  // namespace nanochat
