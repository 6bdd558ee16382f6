#pragma once
// StepSync: the one owner of how a data-parallel step synchronises the ranks. The training loop
// (train/train_loop.cpp) runs a step as
//
//   share = sync.begin_step(step)                  this rank's rows of the step's R rows
//   for each micro-batch m of share:               (x, y from the step's rows)
//     loss = sync.micro_batch(m, x, y, B, T)       forward+backward; the sync hooks the backward's
//                                                  gradient-ready signal and works after each one
//   opt_s = sync.update(step_schedule)             reduce the gradients, update the weights
//   stats = sync.finish(my_times)                  the step's statistics over all ranks, the next split
//
// and issues no collective of its own: every collective of a step, and those of evaluation,
// the replica check and the checkpoint (sum_over_ranks, check_replicas, save, resume), go through
// this interface. Between steps the ranks' weights may differ (a mode that synchronises every H
// steps); in_sync(step) says when they are one model, and only then does the loop evaluate,
// save or check the replicas.
//
// Implementations, built by make_step_sync (train/sync_factory.h) from TrainPlan::sync, each with
// the optimizer it owns: train/zero2_sync.h (ZeRO-2 every step, rows dealt by measured speed; the
// LAN's mode) and train/diloco_sync.h (each node trains alone for H steps, then an outer step on
// the nodes' averaged change; for slow links). A new mode is one new implementation and a value
// of SyncMode. Membership (a rank that leaves or joins an elastic job) is not a sync's concern:
// the loop asks its Membership (train/membership.h; elastic jobs: train/elastic.h).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/checkpoint/faults.h"
#include "nanochat/checkpoint/loop_state.h"
#include "nanochat/checkpoint/run_meta.h"
#include "nanochat/plan/schedules.h"

namespace nanochat {

class MuonAdamW;
struct TrainPlan;

/// This rank's part of a step: a contiguous range of the step's rows, in micro-batches.
struct StepShare {
  int64_t first_row = 0;           ///< index of its first row among the step's rows
  std::vector<int> micro_batches;  ///< rows of each micro-batch, in order (possibly none)
};

/// One rank's part of a finished step.
struct RankStep {
  double rows = 0;          ///< rows it ran
  double compute = 0;       ///< forward+backward seconds
  double opt_compute = 0;   ///< optimizer seconds not spent waiting for other ranks
  double data = 0;          ///< seconds reading the step's rows
  double dt = 0;            ///< the step's wall seconds on that rank
  double loss_sum = 0;      ///< sum over its micro-batches of (mean loss in nats x valid targets)
  double tokens = 0;        ///< its valid targets
  double joiners = 0;       ///< rank 0: ranks asking to join (Membership::joiners_waiting); 0 elsewhere
  double move_seconds = 0;  ///< seconds the optimizer state's last move took on it (0: none since the last step)
};

/// A finished step, the same on every rank.
struct StepStats {
  std::vector<RankStep> ranks;  ///< index = rank
  std::vector<int64_t> split;   ///< rows per rank of the step just made
  std::vector<double> speeds;   ///< measured rows/s per rank after the step (0 = not measured)
  /// Token-weighted mean loss in nats over every valid target of the step, all ranks: what one
  /// process running the step's rows reports, whatever the split (up to rounding).
  double loss = 0;
  std::vector<std::string> notes;  ///< lines for rank 0 to print after the step's line
  /// Every rank's times are of this step (false: a mode that gathers them only now and then,
  /// DiLoCo between its boundaries; the loop then judges no rank slow from them).
  bool times_of_this_step = true;
};

class StepSync {
 public:
  virtual ~StepSync() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// The optimizer whose state the steps update (a mode with an outer step: the inner one), for a
  /// command's set-up before the first step (chat-sft's warm start and initial lrs).
  virtual MuonAdamW& optimizer() = 0;
  /// The line rank 0 prints at the start: how the ranks share a step and keep one model.
  virtual std::string describe() const = 0;

  /// Starts step `step` (weights' gradients zero): this rank's rows of it. Every rank calls it.
  virtual StepShare begin_step(int64_t step) = 0;
  /// Forward+backward of this rank's micro-batch `micro` (0-based, in order) of the current step:
  /// idx, targets (B, T) int32. Returns its mean loss in nats over its valid targets.
  virtual float micro_batch(int micro, const int32_t* idx, const int32_t* targets, int B, int T) = 0;
  /// After the last micro-batch: the gradient reduction and the weights' update of the step with
  /// `schedule`; zeroes the gradients. Returns the optimizer's seconds not spent waiting for other
  /// ranks. Collective where the mode communicates.
  virtual double update(const StepSchedule& schedule) = 0;
  /// After update: gathers every rank's `mine` (its rows, loss_sum and tokens are filled in here)
  /// and plans the next step's split. Collective where the mode communicates. Throws
  /// nanochat::Error when no rank had a valid target.
  virtual StepStats finish(RankStep mine) = 0;

  /// True when after `step` steps every rank holds the same weights (evaluate, save, compare then).
  virtual bool in_sync(int64_t step) const = 0;
  /// Stops the job with an error naming the rank and tensor when the ranks' weights differ at
  /// `step` (only called when in_sync(step)). Collective.
  virtual void check_replicas(int64_t step) = 0;
  /// Adds `n` doubles over the ranks in place (evaluation's totals). Collective.
  virtual void sum_over_ranks(double* v, size_t n) = 0;

  /// The checkpoint's parts: saves step state.step (weights, optimizer state, meta = run_meta +
  /// state) into `dir` (checkpoint/loop_checkpoint.h). Collective.
  virtual void save(const std::string& dir, const RunMeta& run_meta, const LoopState& state,
                    const FaultInjector& faults) = 0;
  /// Loads step `step` of plan.checkpoint_dir into the weights and optimizer state; returns the
  /// loop state with this rank's loader state (checkpoint/loop_checkpoint.h resume). Collective.
  virtual LoopState resume(const TrainPlan& plan, int64_t step) = 0;

  /// Node 0 keeps in memory a copy of what save would write for `state` (the weights, every rank's
  /// optimizer shard), so that a rank lost later costs no step up to state.step (save_copy).
  /// Collective where the mode communicates. Default: keeps nothing.
  virtual void keep_copy(const RunMeta& run_meta, const LoopState& state) {
    (void)run_meta;
    (void)state;
  }
  /// After a rank was lost (the group is broken: no collective), on rank 0: writes the last copy
  /// into `dir` as a checkpoint and returns its step; -1 when there is none. Throws
  /// nanochat::Error naming the file it could not write.
  virtual int64_t save_copy(const std::string& dir) {
    (void)dir;
    return -1;
  }
};

}  // namespace nanochat
