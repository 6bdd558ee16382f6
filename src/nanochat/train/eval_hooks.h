#pragma once
// Evaluations the training loop runs on its cadence besides val bpb (TrainJob::extra_eval,
// train/train_loop.h ExtraEval): base-train's CORE metric (eval/core_eval.h).
#include <cstdint>
#include <functional>

#include "nanochat/train/train_loop.h"

namespace nanochat {

class Communicator;
class GPT;
class MetricsLog;
class Tokenizer;

/// nanochat base_train.py's CORE during training: a TrainJob::extra_eval that evaluates CORE at
/// the steps that are multiples of `every` and at the last one (`max_per_task` examples per task,
/// shared by the ranks, their sums through the loop's StepSync), prints
/// "Step 00002 | CORE metric: 0.1234" on rank 0 and records {"step", "core_metric",
/// "centered/<task>"}. Collective (an all-gather of whether each rank can read
/// $NANOCHAT_BASE_DIR/eval_bundle): empty when every <= 0 or when a rank cannot (rank 0 then prints
/// a note naming it, unless `quiet`). model and tok must outlive the hook.
ExtraEval core_metric_hook(int64_t every, int64_t max_per_task, GPT& model, const Tokenizer& tok, Communicator& comm,
                           bool quiet = false);

}  // namespace nanochat
