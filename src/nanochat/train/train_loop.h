#pragma once
// The training loop of one rank (docs/architecture.md 4, 4.1): for each step, the replica check,
// val bpb and samples, the save (these three only when the step's sync says the ranks hold one
// model), then one optimizer step; the last step is saved, then evaluated. It issues no collective:
// it drives the StepSync it is given (train/sync.h), reads its rows from a StepSource
// (feed/step_source.h), asks the job's Membership at a lost peer and after each step
// (train/membership.h), and takes the step's schedule and the command's differences from the plan
// (TrainPlan::step_schedule, run_end) and a StepLog chosen once by the command. run_train_job
// (train/trainer.h) builds all of it; a test can build it too (tests/train/train_loop_test.cpp).
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/checkpoint/faults.h"
#include "nanochat/checkpoint/loop_state.h"
#include "nanochat/checkpoint/run_meta.h"
#include "nanochat/core/thread_tuner.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/feed/step_source.h"
#include "nanochat/plan/plan.h"
#include "nanochat/train/job_layout.h"
#include "nanochat/train/report.h"
#include "nanochat/train/sync.h"

namespace nanochat {

class GPT;
class Membership;
class MetricsLog;
class PeerLost;
class Tokenizer;

/// An evaluation the loop runs at its evaluation points (TrainJob::extra_eval): step, whether it is
/// the run's last, the run's metrics log, and the step's synchronisation, whose sum_over_ranks adds
/// the ranks' totals (only called when the ranks' weights are in sync).
using ExtraEval = std::function<void(int64_t step, bool last, MetricsLog& metrics, StepSync& sync)>;

/// How a command's loop names and shows its steps, chosen once by the command: base-train's (these
/// defaults) or chat-sft's (train/sft.cpp).
struct StepLog {
  /// The step's log line (train/report.h): base_train.py's, or chat_sft.py's.
  std::function<std::string(const StepReport&)> line = step_log_line;
  /// Added to a step's 0-based index where the log line and metrics.jsonl name it: base_train.py
  /// names the index (0), chat_sft.py the steps done (1: it counts the step before it logs it).
  int64_t name_offset = 0;
  /// Rank 0's line at the end of the run about the data stream's state after the last rows read
  /// (chat-sft's packing summary); empty: none.
  std::function<std::string(const nlohmann::json& stream_state)> summary = {};
};

/// Everything the loop works with: the settings (plan, job layout), the parts it drives, and the
/// run's state. The references outlive the loop.
struct TrainContext {
  const TrainPlan& plan;  ///< its step_schedule must be set
  const JobLayout& layout;
  const Tokenizer& tok;
  GPT& model;
  StepSync& sync;  ///< every collective of the loop goes through it (train/sync.h)
  StepSource& data;
  MetricsLog& metrics;
  LoopState& st;  ///< where the loop starts (a resume's), and where it is
  const FaultInjector& faults;
  RunMeta run_meta;  ///< meta fields that do not change during the run
  double peak_gflops = 0;
  bool profile = false;
  bool adapt_threads = false;  ///< --threads not given: the count follows the measured steps (core/thread_tuner.h)
  Membership& membership;      ///< a lost peer, ranks that join (train/membership.h)
  StepLog step_log;            ///< TrainJob::step_log
  ExtraEval extra_eval = {};   ///< TrainJob::extra_eval
};

/// One rank's run of a training command after its set-up: the loop and its parts.
class TrainLoop {
 public:
  explicit TrainLoop(TrainContext& c);

  /// The steps from c.st.step to the last, which is saved and evaluated. Returns the final
  /// evaluation's error ("" = none). Collective through the sync. A lost peer (PeerLost) stops the
  /// job with a message naming the step, what it was doing and what is saved (nanochat::Error),
  /// unless the membership goes on without it (it throws its MembershipChange); ranks that join end
  /// the run the same way at a step boundary.
  std::string run();

  double profiled_seconds() const { return profiled_seconds_; }
  int64_t profiled_steps() const { return profiled_steps_; }
  /// The stream's state after the last rows read (those of the step that ended the run, if one did).
  const nlohmann::json& stream_state() const { return pending_ ? pending_->loader_state : loader_state_; }

 private:
  std::string run_steps();
  [[noreturn]] void admit_joiners();
  void keep_copy_if_due();
  bool is_last(int64_t step);
  void prefetch(int64_t step);
  void save();
  std::string peer_lost_message(const PeerLost& e) const;
  std::string finish_last_step();
  void evaluate_and_sample(bool last);
  void run_micro_batches(const StepRows& rows, const StepShare& share, RankStep& my);
  void train_step();
  void adapt_threads(const StepShare& share, const RankStep& my, const Timer& step_timer);
  void note_a_rank_that_slows_the_job(const StepStats& s);
  void log_step(const StepStats& s, double lrm);
  void print0(const std::string& s) const;

  TrainContext& c_;
  const TrainPlan& plan_;
  GPT& model_;
  StepSync& sync_;
  LoopState& st_;
  nlohmann::json loader_state_;        // after the last step trained
  std::unique_ptr<StepRows> pending_;  // RunEnd::Stream: the step's rows, fetched before its evaluation
  double pending_data_s_ = 0;
  double progress_ = 0;  // the largest progress the stream reported (chat-sft; nanochat's progress = max(...))
  bool noted_slow_rank_ = false;
  ThreadTuner tuner_{num_threads(), 1, "row"};
  int64_t run_delay_at_start_ = -1;  // process_run_delay_ns() when the step began
  int64_t last_saved_;               // the last step on disk (-1: none)
  int64_t copied_ = -1;              // the step node 0 last copied (keep_copy)
  bool join_due_ = false;            // ranks join at the end of this step (membership)
  const char* phase_ = "starting";   // what the loop is doing, for a failure's message
  double dt_ema_ = 0;
  const int64_t flops_per_token_;
  const std::vector<int32_t> token_bytes_;
  std::vector<int32_t> x_, y_;
  double profiled_seconds_ = 0.0;  // --profile: wall time of the profiled steps
  int64_t profiled_steps_ = 0;
};

}  // namespace nanochat
