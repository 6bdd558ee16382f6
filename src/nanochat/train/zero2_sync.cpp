#include "nanochat/train/zero2_sync.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <functional>

#include "nanochat/checkpoint/loop_checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/timer.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/plan/plan.h"
#include "nanochat/train/zero2_replicas.h"

namespace nanochat {

Zero2Sync::Zero2Sync(GPT& model, const OptimConfig& optim, Communicator& comm, const std::vector<int>& device_batches,
                     int64_t rows_per_step, BalanceMode mode)
    : model_(model),
      comm_(comm),
      opt_(std::make_unique<MuonAdamW>(optimizer_params(model), optim, &comm)),
      mode_(mode),
      balancer_(device_batches, rows_per_step, {mode}) {
  // On the last micro-batch each finished gradient starts its reduction (zero2_grad_accum.h).
  std::function<void(size_t)> ready;
  if (comm.world_size() > 1) ready = [this](size_t k) { opt_->grad_ready(k); };
  accum_ =
      std::make_unique<GradAccumulator>(model, static_cast<int>(balancer_.max_micro_batches()), comm, std::move(ready));
  opt_->set_summed_by_caller(accum_->summed_here());  // the small tensors: summed in stream order, sent once
}

Zero2Sync::~Zero2Sync() = default;

std::string Zero2Sync::describe() const {
  if (world_size() < 2) return {};
  return str_cat("Rows per step: ", balancer_.step_rows(), ", dealt ",
                 mode_ == BalanceMode::Even ? "evenly" : "by measured speed",
                 "; device batch per rank: ", nlohmann::json(balancer_.device_batches()).dump(), "; first split ",
                 split_percentages(balancer_.rows()));
}

int Zero2Sync::rank() const { return comm_.rank(); }
int Zero2Sync::world_size() const { return comm_.world_size(); }

StepShare Zero2Sync::begin_step(int64_t step) {
  step_ = step;
  split_ = balancer_.rows();
  rows_ = 0;
  loss_sum_ = 0;
  accum_->begin_step(balancer_.micro_batch_counts());
  return StepShare{balancer_.first_row(rank()), balancer_.micro_batches(rank())};
}

float Zero2Sync::micro_batch(int micro, const int32_t* idx, const int32_t* targets, int B, int T) {
  const int64_t before = accum_->local_tokens();
  const float loss = accum_->micro_batch(micro, idx, targets, B, T);
  loss_sum_ += static_cast<double>(loss) * static_cast<double>(accum_->local_tokens() - before);
  rows_ += B;
  return loss;
}

double Zero2Sync::update(const StepSchedule& s) {
  grad_scale_ = accum_->finish();  // 1 / valid tokens of the step over all ranks
  const double wait0 = opt_->comm_wait_seconds();
  Timer t;
  opt_->step(s.lr_multiplier, s.muon_momentum, s.muon_weight_decay, grad_scale_);
  const double opt_compute = t.seconds() - (opt_->comm_wait_seconds() - wait0);
  model_.zero_grad();
  return opt_compute;
}

StepStats Zero2Sync::finish(RankStep mine) {
  mine.rows = static_cast<double>(rows_);
  mine.loss_sum = loss_sum_;
  mine.tokens = static_cast<double>(accum_->local_tokens());
  mine.move_seconds = move_seconds_;
  move_seconds_ = 0;
  // every rank's part of the step to every rank
  StepStats st;
  st.split = split_;
  st.ranks = world_size() > 1 ? all_gather_value<RankStep>(comm_, mine) : std::vector<RankStep>{mine};
  double loss_sum = 0, tokens = 0;
  for (const RankStep& x : st.ranks) {
    loss_sum += x.loss_sum;
    tokens += x.tokens;
  }
  st.loss = tokens > 0 ? loss_sum / tokens : 0.0;
  std::vector<RankStepTimes> times;
  for (const RankStep& x : st.ranks) times.push_back({x.rows, x.compute});
  if (balancer_.observe(times)) {
    std::string speeds;
    for (size_t r = 0; r < balancer_.speeds().size(); ++r)
      speeds += str_cat(r ? " / " : "", fixed(balancer_.speeds()[r], 1));
    st.notes.push_back(str_cat("Rows per rank from step ", step_ + 1, " on: ", split_percentages(balancer_.rows()),
                               " (measured speeds, rows/s: ", speeds, ")"));
  }
  st.speeds = balancer_.speeds();
  const std::string moved = rebalance_optimizer(step_, st.ranks);
  if (!moved.empty()) st.notes.push_back(moved);
  return st;
}

std::string Zero2Sync::rebalance_optimizer(int64_t step, const std::vector<RankStep>& ranks) {
  if (mode_ == BalanceMode::Even || world_size() < 2) return {};
  // the last move's rate: its slowest rank's seconds over the floats it moved (the same on every rank)
  double slowest = 0;
  for (const RankStep& x : ranks) slowest = std::max(slowest, x.move_seconds);
  if (move_floats_ > 0 && slowest > 0) move_rate_ = slowest / static_cast<double>(move_floats_);
  MuonAdamW::MoveCosts costs;
  for (const RankStep& x : ranks) costs.opt_seconds.push_back(x.opt_compute);
  costs.seconds_per_float = move_rate_;
  Timer t;
  if (!opt_->rebalance(balancer_.speeds(), 0.1, &costs)) return {};
  const double seconds = t.seconds();  // outside every step's time: said here
  move_seconds_ = seconds;
  move_floats_ = opt_->last_floats_leaving();
  const std::vector<double> work = opt_->work_per_rank(opt_->layout());
  std::vector<int64_t> parts;
  for (double w : work) parts.push_back(static_cast<int64_t>(w));
  return str_cat("Optimizer work per rank from step ", step + 1, " on: ", split_percentages(parts), " (moved ",
                 fixed(static_cast<double>(opt_->last_moved_floats()) * 4e-6, 1),
                 " MB of optimizer state on rank 0 in ", fixed(seconds, 2), " s)");
}

void Zero2Sync::check_replicas(int64_t step) { nanochat::check_replicas(model_, comm_, step); }

void Zero2Sync::sum_over_ranks(double* v, size_t n) {
  if (world_size() > 1) comm_.all_reduce_sum_f64(v, n)->wait();
}

void Zero2Sync::save(const std::string& dir, const RunMeta& run_meta, const LoopState& state,
                     const FaultInjector& faults) {
  save_checkpoint(comm_, dir, model_, *opt_, run_meta, state, faults);
}

void Zero2Sync::keep_copy(const RunMeta& run_meta, const LoopState& state) {
  if (world_size() > 1) copy_checkpoint_state(comm_, model_, *opt_, run_meta, state, &copy_);
}

namespace {

volatile std::sig_atomic_t g_deferred_signal = 0;
extern "C" void remember_signal(int sig) { g_deferred_signal = sig; }

// While it lives, SIGTERM, SIGINT and SIGHUP are remembered instead of ending the process, and
// the first one takes effect when it ends: the launcher stops a failed job's ranks (SIGTERM 3 s
// after the failure, SIGKILL --grace later), and node 0's copy must not be cut off by it.
class DeferStopSignals {
 public:
  DeferStopSignals() {
    struct sigaction sa {};
    sa.sa_handler = remember_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~DeferStopSignals() {
    for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    if (g_deferred_signal != 0) ::raise(g_deferred_signal);
  }
  DeferStopSignals(const DeferStopSignals&) = delete;
  DeferStopSignals& operator=(const DeferStopSignals&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGHUP};
  struct sigaction old_[3];
};

}  // namespace

int64_t write_node0_copy(const std::string& dir, const GPT& model, const JobStateCopy& copy) {
  if (copy.step < 0) return -1;
  const DeferStopSignals defer;
  const CheckpointPaths cp = write_job_state_copy(dir, model, copy);
  std::printf("Saved checkpoint %s (node 0's copy of the job's state at step %lld)\n", cp.model().c_str(),
              static_cast<long long>(copy.step));
  std::fflush(stdout);
  return copy.step;
}

int64_t Zero2Sync::save_copy(const std::string& dir) {
  if (rank() != 0) return -1;
  return write_node0_copy(dir, model_, copy_);
}

LoopState Zero2Sync::resume(const TrainPlan& plan, int64_t step) {
  return nanochat::resume(comm_, plan, step, model_, *opt_);
}

}  // namespace nanochat
