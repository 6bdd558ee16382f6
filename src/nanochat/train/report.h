#pragma once
// The text base_train prints about its steps: the per-step log line (docs/nanochat.md 3.10) and
// the --profile summary at the end of the run.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nanochat {

/// One rank's part of a step, for the log line (W > 1).
struct RankReport {
  double share = 0;         ///< fraction of the step's rows this rank ran
  double compute = 0;       ///< seconds of forward+backward and optimizer math
  double wait = 0;          ///< seconds blocked on the others (collectives, the token count)
  int64_t tok_per_sec = 0;  ///< its rows x T / its step time
};

/// What one step's log line reports.
struct StepReport {
  int64_t step = 0, num_iterations = 1;
  double smooth_loss = 0;  ///< debiased EMA of the train loss (nats)
  double lrm = 0;          ///< LR multiplier
  double dt = 0;           ///< step wall time, seconds
  int64_t tok_per_sec = 0;
  double mfu = 0;                  ///< percent
  nlohmann::json loader_state;     ///< for the epoch / pq / rg fields
  double total_training_time = 0;  ///< seconds of the steps after step 10
  int world_size = 1;
  double comm_wait = 0;           ///< seconds rank 0 spent blocked on the others (shown when W > 1)
  std::vector<RankReport> ranks;  ///< per rank (shown when W > 1)
  /// Every rank's times are of this step (false under DiLoCo: the other nodes' are of their last
  /// round's end, said in the line; a rank with no times yet shows "-").
  bool times_of_this_step = true;
  double progress = -1;  ///< chat-sft: the LR schedule's progress (0..1)
};

/// "step 00005/00010 (50.00%) | loss: ... | total time: 0.01m[ | comm wait: x%][ | eta: ym]
/// [ | ranks: r0 62% 1.20s+0.05s 1,510 tok/s, r1 38% ...]" (the eta once step > 10; the ranks'
/// share of the rows, compute + wait seconds and tok/s when W > 1; "ranks (other nodes at their
/// last round's end):" when !times_of_this_step, and "r1 50% -" for a rank not timed yet).
std::string step_log_line(const StepReport& r);

/// chat-sft's line (nanochat scripts/chat_sft.py): "step 00006 (12.34%) | loss: ... | lrm: ... | dt:
/// ...ms | tok/sec: ... | mfu: ... | epoch: E | total time: ...m", the step counted after it is
/// made (r.step + 1), the percentage 100 x r.progress, the epoch from r.loader_state; then the same
/// comm wait and ranks parts as step_log_line when W > 1.
std::string sft_step_log_line(const StepReport& r);

/// The --profile summary of this rank: a header, one line per prof::Op with its milliseconds per
/// step and share of the `seconds` that `steps` profiled steps took, and the unattributed rest.
std::vector<std::string> profile_report_lines(int rank, int64_t steps, double seconds);

}  // namespace nanochat
