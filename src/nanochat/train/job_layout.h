#pragma once
// The second stage of base-train's set-up, after TrainPlan (plan/plan.h, this rank's flags): what
// the job as a whole is, known once every rank has said its part. Built before the first collective
// on tensors: it waits for every rank (cluster/startup.h), runs the start-up agreement
// (cluster/agree.h: model, batch, tokenizer, flags, data) and only then gathers the device batches,
// so ranks started with different flags (--depth, --resume-from-step, ...) stop with the error
// that names the flag, never in a collective of mismatched sizes (resume's weight broadcast).
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/plan/plan.h"

namespace nanochat {

class Communicator;
class Tokenizer;

struct JobLayout {
  int rank = 0;
  int world_size = 1;
  std::vector<int> device_batches;  ///< every rank's --device-batch-size, in rank order
  int64_t rows_per_step = 0;        ///< R = total_batch_size / T, all ranks together
  int eval_B = 1;                   ///< the smallest device batch: every rank evaluates (eval_B, T) batches
  int64_t eval_steps = 1;           ///< val batches of eval_B x T per evaluation (plan.eval_steps_for)
};

/// Collective: the start-up barrier, the agreement (rank 0 prints "All W ranks agree on ..."), the
/// gather of the device batches. `a`: this rank's flags (agreed without --threads and
/// --device-batch-size, which may differ per node). Throws nanochat::Error on every rank naming
/// what differs (cluster::agree), or a rank that did not arrive in time (cluster::startup_barrier).
JobLayout agree_on_job_layout(Communicator& comm, const BaseTrainArgs& a, const TrainPlan& plan, const Tokenizer& tok);

/// The same for any command: `flags` (the command's flags as JSON, agreed under the key
/// "<plan.command> flags"; "threads" and "device_batch_size" are left out, they may differ per node).
JobLayout agree_on_job_layout(Communicator& comm, const nlohmann::json& flags, const TrainPlan& plan,
                              const Tokenizer& tok);

/// base-train's flags as JSON (the meta's user_config, the agreement's "base-train flags").
nlohmann::json args_to_json(const BaseTrainArgs& a);

}  // namespace nanochat
