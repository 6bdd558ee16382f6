#pragma once
// A training job of one rank of a data-parallel job around its loop (train/train_loop.h):
// run_train_job takes a run its command has set up (TrainJob) through the resume, the data
// source, the checkpoint folder, the metrics log, the loop and the end-of-run summary and chart.
// base-train's set-up (nanochat scripts/base_train.py; docs/nanochat.md 3.3-3.10: derivations,
// init, the sync with its optimizer) ends in it (run_base_train_job), as chat-sft's does
// (train/sft.h). The command's entry, which chooses the job's membership, is train/base_train.h.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/checkpoint/loop_state.h"
#include "nanochat/checkpoint/run_meta.h"
#include "nanochat/feed/step_source.h"
#include "nanochat/plan/plan.h"
#include "nanochat/train/job_layout.h"
#include "nanochat/train/test_fault.h"
#include "nanochat/train/train_loop.h"

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

/// A command's job on this rank with its data (feed/step_source.h): opens the data feed on `comm`
/// (node 0 serves the rows unless `local_data`), lets a lost peer reach it (a wait for rows then
/// ends at once) and runs `body` with it. A failure other than a MembershipChange is passed to the
/// workers (every node then shows node 0's error) and rethrown.
void with_data_feed(Communicator& comm, bool local_data, const std::function<void(DataFeed&)>& body);

/// A run its command has set up (base-train here, chat-sft in train/sft.h): what the loop trains,
/// on what, and what its checkpoints' meta says. The references outlive run_train_job.
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
