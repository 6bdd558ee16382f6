#pragma once
// Gradient accumulation of one optimizer step on one rank (docs/nanochat.md 3.3, generalised for
// data parallelism: token-weighted SUM, overlap with the backward, any world size).
//
//  * Every micro-batch adds the gradient of the SUM of its token losses (targets != -1), so ranks
//    and micro-batches may hold different numbers of valid tokens; finish() returns the scale
//    1 / (valid tokens of the whole step over all ranks) that turns the ranks' SUMmed gradients
//    into the gradient of the mean loss over every valid token (what one process computing the
//    whole batch at once gets). In base training every target is valid and the scale is
//    1 / (B * T * micro_steps * W).
//  * The small non-matrix tensors are summed in one global micro-batch order (OrderedGradSum),
//    so the result does not depend on the world size.
//  * On the last micro-batch every other gradient is handed to `on_ready` as soon as the backward
//    has finished it (e.g. MuonAdamW::grad_ready, to overlap its reduction with the backward).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nanochat/comm/communicator.h"
#include "nanochat/model/gpt.h"
#include "nanochat/train/ordered_grad_sum.h"

namespace nanochat {

class GradAccumulator {
 public:
  /// model: this rank's model (gradients must be zero at the start of each step);
  /// micro_steps: micro-batches per step on this rank (A >= 1); comm: the job's communicator;
  /// on_ready: optional, see above. Throws nanochat::Error if micro_steps < 1.
  GradAccumulator(GPT& model, int micro_steps, Communicator& comm, std::function<void(size_t)> on_ready = {});

  /// Forward + backward of micro-batch `micro` (0-based, in order): idx, targets (B, T) int32.
  /// Returns its mean loss in nats over its valid targets (0 if none).
  float micro_batch(int micro, const int32_t* idx, const int32_t* targets, int B, int T);
  /// After the last micro-batch (collective: every rank calls it once per step): finishes the
  /// ordered small-tensor sums and returns the gradient scale for the optimizer (1 / global valid
  /// tokens). Throws nanochat::Error if no rank had a valid target.
  float finish();

  /// Valid targets of this rank in the current step so far.
  int64_t local_tokens() const { return local_tokens_; }

 private:
  GPT& model_;
  int A_;
  Communicator& comm_;
  std::function<void(size_t)> on_ready_;
  std::vector<bool> ordered_;  // per parameter: summed by OrderedGradSum
  std::unique_ptr<OrderedGradSum> small_;
  int64_t local_tokens_ = 0;
};

}  // namespace nanochat
