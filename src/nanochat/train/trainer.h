#pragma once
// base_train's main loop (nanochat scripts/base_train.py; docs/nanochat.md 3.3-3.10) for one rank of a
// data-parallel job: derivations, init or resume, gradient accumulation, MuonAdamW steps, log
// lines, val bpb, samples, atomic checkpoints, metrics JSONL and an SVG report. The command's entry,
// which chooses the job's membership, is train/base_train.h.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/checkpoint/loop_state.h"
#include "nanochat/checkpoint/run_meta.h"
#include "nanochat/feed/step_source.h"
#include "nanochat/plan/plan.h"
#include "nanochat/train/job_layout.h"
#include "nanochat/train/report.h"
#include "nanochat/train/test_fault.h"

namespace nanochat {

class Communicator;
class GPT;
class Membership;
class MuonAdamW;
class Tokenizer;
struct OptParam;
class MetricsLog;

/// base-train's job on `comm`'s ranks with `membership` (train/membership.h; an elastic job runs
/// one per generation of its ranks, train/elastic.h): the data feed, the set-up and the loop.
/// Output files go to base_dir()/base_checkpoints/<model_tag or d<depth>>/. Throws nanochat::Error
/// for user errors (missing tokenizer/data, bad flags, bad resume step), after passing it to the
/// workers (node 0 of a served job); a MembershipChange is passed through as it is.
void run_base_train_job(const BaseTrainArgs& args, Communicator& comm, const FaultInjector& faults,
                        Membership& membership);

/// A run its command has set up (base-train here, chat-sft in train/sft.h): what the loop trains,
/// on what, and what its checkpoints' meta says. The references outlive run_train_job.
class StepSync;

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
  /// The message of a lost node suggests --copy-state-every (base-train's flag; chat-sft has none).
  bool suggests_copy_state = true;
};

struct TrainJob {
  const TrainPlan& plan;
  const JobLayout& layout;  ///< agreed by every rank (agree_on_job_layout)
  const Tokenizer& tok;
  GPT& model;               ///< its weights: initialised or loaded
  StepSync& sync;           ///< make_step_sync (train/sync_factory.h): the mode, with the optimizer it owns
  RowStreamFactory stream;  ///< the one data stream (read on rank 0 only when node 0 serves)
  RunMeta run_meta;         ///< the meta fields that do not change during the run (checkpoint/run_meta.h)
  int64_t resume_from_step = -1;
  double peak_gflops = 1;  ///< the MFU reference (measure_and_print_peak)
  bool profile = false;
  bool adapt_threads = false;  ///< the thread tuner may change this rank's thread count (no --threads)
  /// Who trains (train/membership.h): what a lost peer does, whether ranks join. Null: the job's
  /// ranks are fixed (FixedMembership).
  Membership* membership = nullptr;
  StepLog step_log = {};  ///< how the log names and shows the steps
  /// The command's own evaluation at the loop's evaluation points, after val bpb (every rank calls
  /// it together with the step and whether it is the run's last; base-train's CORE, chat-sft's
  /// ChatCORE). Empty: none.
  ExtraEval extra_eval = {};
};

/// Collective: the steps of `job` on this rank, from the sync's set-up to the last step's save,
/// evaluation and the end-of-run summary and chart (docs/architecture.md 4.1), resuming first when
/// job.resume_from_step >= 0. Throws nanochat::Error like run_base_train; a failure of the final
/// evaluation after the last save is thrown at the end.
void run_train_job(const TrainJob& job, Communicator& comm, const FaultInjector& faults, DataFeed& feed);

/// Rank 0 (`master`) prints the device, threads, vocabulary and model config lines of a run's start;
/// `adapt_threads`: the threads line says the thread tuner may lower the count.
void print_device_lines(const TrainPlan& plan, const Tokenizer& tok, bool master, bool adapt_threads = false);

/// Measures this rank's peak for `dtype` (fp32 FMA or bf16 dot-product; cached in base_dir()/fma_peak.json), prints it
/// on rank 0 and returns the reference the log's MFU is computed against.
double measure_and_print_peak(bool master, ComputeDtype dtype = ComputeDtype::Float32);

}  // namespace nanochat
