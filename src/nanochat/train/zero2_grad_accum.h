#pragma once
// Gradient accumulation of one optimizer step on one rank (docs/nanochat.md 3.3, generalised for
// data parallelism: token-weighted SUM, overlap with the backward, any world size).
//
//  * Every micro-batch adds the gradient of the SUM of its token losses (targets != -1), so ranks
//    and micro-batches may hold different numbers of valid tokens; finish() returns the scale
//    1 / (valid tokens of the whole step over all ranks) that turns the ranks' SUMmed gradients
//    into the gradient of the mean loss over every valid token (what one process computing the
//    whole batch at once gets). In base training every target is valid and the scale is
//    1 / (rows of the step * T).
//  * Each step says how many micro-batches each rank runs (begin_step; the split of train/balance.h,
//    0 allowed); the small non-matrix tensors are summed in the step's stream order
//    (OrderedGradSum), so the result does not depend on the world size or the split.
//  * On the last micro-batch every other gradient is handed to `on_ready` as soon as the backward
//    has finished it (e.g. MuonAdamW::grad_ready, to overlap its reduction with the backward); a
//    rank without micro-batches hands its zero gradients over in finish(), in the backward's order
//    (GPT::grad_ready_order), so every rank issues the same collectives.
//  * The step's valid-token count is all-reduced before the step's first gradient reduction is
//    launched (at the start of the last micro-batch, or in finish() on a rank without one), and
//    the small tensors' slots are gathered on the communicator's side lane: neither waits behind
//    the reduce-scatters that the last backward queued.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nanochat/comm/communicator.h"
#include "nanochat/model/gpt.h"
#include "nanochat/train/zero2_ordered_sum.h"

namespace nanochat {

class GradAccumulator {
 public:
  /// model: this rank's model (gradients must be zero at the start of each step);
  /// max_micro_steps: the most micro-batches of one step, all ranks together; comm: the job's
  /// communicator; on_ready: optional, see above. Throws nanochat::Error if max_micro_steps < 1.
  GradAccumulator(GPT& model, int max_micro_steps, Communicator& comm, std::function<void(size_t)> on_ready = {});

  /// Starts a step in which rank q runs micro_per_rank[q] micro-batches (the same vector on every
  /// rank, one count per rank). Throws nanochat::Error for a vector of another size, a negative
  /// count or more micro-batches than max_micro_steps.
  void begin_step(const std::vector<int>& micro_per_rank);
  /// Forward + backward of micro-batch `micro` (0-based, in order, < this rank's count of the
  /// step): idx, targets (B, T) int32; B may differ between micro-batches. Returns its mean loss
  /// in nats over its valid targets (0 if none).
  float micro_batch(int micro, const int32_t* idx, const int32_t* targets, int B, int T);
  /// After the last micro-batch (collective: every rank calls it once per step): finishes the
  /// ordered small-tensor sums and returns the gradient scale for the optimizer (1 / global valid
  /// tokens). Throws nanochat::Error if no rank had a valid target.
  float finish();

  /// Per parameter: true for the small tensors summed over the ranks here (OrderedGradSum), whose
  /// gradients finish() leaves as the step's sum on every rank; the hook is never called for them.
  const std::vector<bool>& summed_here() const { return ordered_; }
  /// Valid targets of this rank in the current step so far.
  int64_t local_tokens() const { return local_tokens_; }
  /// After finish(): the step's valid targets over all ranks.
  double step_tokens() const { return step_tokens_; }

 private:
  GPT& model_;
  int max_;
  std::vector<int> split_;  // micro-batches per rank in the current step
  int A_ = 0;               // this rank's
  Communicator& comm_;
  std::function<void(size_t)> on_ready_;
  std::vector<bool> ordered_;  // per parameter: summed by OrderedGradSum
  std::unique_ptr<OrderedGradSum> small_;
  int64_t local_tokens_ = 0;
  double step_tokens_ = 0;  // the buffer of the count's all-reduce
  WorkPtr count_;           // that all-reduce, once submitted
  void submit_count();
};

}  // namespace nanochat
