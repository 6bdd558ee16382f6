#pragma once
// The product's StepSync (train/sync.h): every step synchronises every rank (ZeRO-2), and the
// step's rows are dealt to the ranks by measured speed (or evenly). Its parts:
//  * the split: a StepBalancer (train/balance.h) fed with every rank's times after each step;
//  * the micro-batches: a GradAccumulator (train/zero2_grad_accum.h; token-weighted sums, the small
//    tensors summed in stream order by OrderedGradSum), whose backward hands every finished
//    gradient to MuonAdamW::grad_ready on the step's last micro-batch (overlap);
//  * update: the token-count all-reduce (GradAccumulator::finish), then MuonAdamW::step
//    (reduce-scatter, update of this rank's shard, all-gather; optim/muon_adamw.h);
//  * finish: one all-gather of every rank's times, rows, loss sum and tokens; the next split; and,
//    with --balance speed, MuonAdamW::rebalance (the optimizer's shards follow the speeds when
//    that saves at least 10% of the optimizer's time and, once a move was timed, when the time
//    saved over 20 steps pays for the move's own time);
//  * the replica check (train/zero2_replicas.h), evaluation's sums, checkpoints (checkpoint/loop_checkpoint.h).
// The ranks' weights are identical after every step: in_sync is always true.
#include <memory>

#include "nanochat/checkpoint/job_checkpoint.h"
#include "nanochat/train/balance.h"
#include "nanochat/train/sync.h"
#include "nanochat/train/zero2_grad_accum.h"

namespace nanochat {

class Communicator;
class GPT;
class MuonAdamW;
struct OptimConfig;

class Zero2Sync final : public StepSync {
 public:
  /// model, comm: this rank's; optim: the settings of the MuonAdamW it builds over the model's
  /// parameters on `comm` (plan/plan.h optimizer_params); device_batches: every rank's device batch
  /// (train/job_layout.h); rows_per_step: R; mode: how rows are dealt. Throws nanochat::Error like
  /// StepBalancer's constructor.
  Zero2Sync(GPT& model, const OptimConfig& optim, Communicator& comm, const std::vector<int>& device_batches,
            int64_t rows_per_step, BalanceMode mode);
  ~Zero2Sync() override;

  int rank() const override;
  int world_size() const override;
  MuonAdamW& optimizer() override { return *opt_; }
  std::string describe() const override;
  StepShare begin_step(int64_t step) override;
  float micro_batch(int micro, const int32_t* idx, const int32_t* targets, int B, int T) override;
  double update(const StepSchedule& schedule) override;
  StepStats finish(RankStep mine) override;
  bool in_sync(int64_t) const override { return true; }
  void check_replicas(int64_t step) override;
  void sum_over_ranks(double* v, size_t n) override;
  void save(const std::string& dir, const RunMeta& run_meta, const LoopState& state,
            const FaultInjector& faults) override;
  LoopState resume(const TrainPlan& plan, int64_t step) override;
  void keep_copy(const RunMeta& run_meta, const LoopState& state) override;
  int64_t save_copy(const std::string& dir) override;

  /// The split of the next step (rows per rank).
  const std::vector<int64_t>& next_split() const { return balancer_.rows(); }

 private:
  // With --balance speed: the optimizer's share of each rank follows the measured speeds; returns
  // the line to print when the shards moved.
  std::string rebalance_optimizer(int64_t step, const std::vector<RankStep>& ranks);

  GPT& model_;
  Communicator& comm_;
  std::unique_ptr<MuonAdamW> opt_;
  const BalanceMode mode_;
  StepBalancer balancer_;
  std::unique_ptr<GradAccumulator> accum_;
  int64_t step_ = 0;
  std::vector<int64_t> split_;  // of the current step
  int64_t rows_ = 0;            // this rank's rows in the current step
  double loss_sum_ = 0;         // sum of (micro-batch mean loss x its valid targets), this rank
  float grad_scale_ = 0;        // 1 / valid targets of the step over all ranks
  JobStateCopy copy_;           // rank 0: the last keep_copy
  // the optimizer state's moves: this rank's seconds of the last one (sent with the next step's
  // statistics), the floats it moved (all ranks), and the measured seconds per float (0: not yet)
  double move_seconds_ = 0;
  size_t move_floats_ = 0;
  double move_rate_ = 0;
};

/// Rank 0, after a rank was lost (no communication): writes node 0's `copy` into `dir` as a
/// checkpoint (write_job_state_copy) with SIGTERM, SIGINT and SIGHUP held back until it is written
/// (the launcher stops a failed job's ranks), and says so. Returns copy.step; -1 when there is no
/// copy. Throws nanochat::Error naming the file it could not write.
int64_t write_node0_copy(const std::string& dir, const GPT& model, const JobStateCopy& copy);

}  // namespace nanochat
