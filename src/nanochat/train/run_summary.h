#pragma once
// What a training run did, summed up from its metrics.jsonl (train/metrics_log.h) when it ends:
// printed as its last lines and written as its report card section (core/report_log.h), so that
// the card (road/card.h) shows the numbers the stage printed.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace nanochat {

class Communicator;

struct TrainPlan;
struct LoopState;

struct RunSummary {
  int64_t steps = 0;                    ///< train records (a step logged twice, by a resumed run, counts once)
  int64_t tokens = 0;                   ///< steps x tokens per step
  double tok_per_sec = 0;               ///< mean of the records' tok_per_sec after step 10 (all of them when fewer)
  double mfu = 0;                       ///< mean of their mfu (percent), the same records
  int64_t timed_steps = 0;              ///< the records those means are over
  std::optional<double> final_val_bpb;  ///< the last val record
  std::vector<double> rank_share;       ///< each rank's share of all rows (jobs of W > 1 ranks; the last W seen)
};

/// Reads `metrics_path` (the later record of a step wins, as in the chart) with `tokens_per_step`
/// tokens per step. A missing file is an empty summary; unparsable lines are skipped.
RunSummary summarize_metrics(const std::string& metrics_path, int64_t tokens_per_step);

/// "Run summary: 60 steps, 245,760 tokens, 5,900 tok/s and MFU 47.10% (mean of steps 11..59)".
std::string run_summary_line(const RunSummary& s);

/// Collective: every rank's machine (core/machine.h) reaches rank 0, which prints the summary line
/// and writes the run's card section: "base-model-training" (base-train) or "chat-sft" (chat-sft),
/// with the plan's model, batch and ranks, the loop's training time and validation bpb, and the
/// nodes ("nodes": each node's machine, its index GROUP_RANK (0 when not launched), its ranks and
/// their share of the rows).
void report_training_run(const TrainPlan& plan, const LoopState& st, const std::string& metrics_path,
                         Communicator& comm);

}  // namespace nanochat
