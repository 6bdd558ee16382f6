#include "nanochat/train/rl_sync.h"

#include "nanochat/checkpoint/loop_checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/plan/plan.h"
#include "nanochat/train/zero2_sync.h"

namespace nanochat {

namespace {

StepBalancer make_balancer(int world_size, int examples_per_step, BalanceMode balance) {
  if (examples_per_step < 1) fail("--examples-per-step (", examples_per_step, ") must be positive");
  StepBalancer::Options bo;
  bo.mode = balance;
  // one problem per "micro-batch": a problem's samples are one unit of work
  return StepBalancer(std::vector<int>(static_cast<size_t>(world_size), 1), examples_per_step, bo);
}

}  // namespace

RlStepSync::RlStepSync(GPT& model, const OptimConfig& oc, Communicator& comm, int examples_per_step,
                       BalanceMode balance)
    : model_(model),
      comm_(comm),
      opt_(std::make_unique<MuonAdamW>(optimizer_params(model), oc, comm.world_size() > 1 ? &comm : nullptr)),
      balancer_(make_balancer(comm.world_size(), examples_per_step, balance)) {}

RlStepSync::~RlStepSync() = default;

int RlStepSync::rank() const { return comm_.rank(); }
int RlStepSync::world_size() const { return comm_.world_size(); }

RlShare RlStepSync::begin_step() const {
  return RlShare{balancer_.first_row(rank()), balancer_.rows()[static_cast<size_t>(rank())]};
}

RlRankStep RlStepSync::finish(const RlRankStep& mine, const StepSchedule& schedule, std::vector<RlRankStep>* ranks) {
  const std::vector<RlRankStep> all = world_size() > 1 ? all_gather_value(comm_, mine) : std::vector<RlRankStep>{mine};
  RlRankStep sum;
  std::vector<RankStepTimes> times;
  for (const RlRankStep& x : all) {
    sum.examples += x.examples;
    sum.seconds += x.seconds;
    sum.reward_sum += x.reward_sum;
    sum.length_sum += x.length_sum;
    sum.samples += x.samples;
    sum.joiners += x.joiners;
    times.push_back({x.examples, x.seconds});
  }
  opt_->step(schedule.lr_multiplier, schedule.muon_momentum, schedule.muon_weight_decay, 1.0f);
  model_.zero_grad();
  balancer_.observe(times);
  if (ranks != nullptr) *ranks = all;
  return sum;
}

void RlStepSync::save(const std::string& dir, const RunMeta& run_meta, const LoopState& state,
                      const FaultInjector& faults) {
  save_checkpoint(comm_, dir, model_, *opt_, run_meta, state, faults, "model checkpoint");
}

void RlStepSync::resume(const CheckpointPaths& cp) {
  bool loaded = false;
  warm_start(comm_, cp, model_, *opt_, true, &loaded);
  if (!loaded)
    fail("chat-rl: ", cp.model(), " has no optimizer state beside it (", cp.optim(0),
         "): it cannot be continued exactly; start the run again without --resume-from-step");
  model_.params_changed();
}

void RlStepSync::keep_copy(const RunMeta& run_meta, const LoopState& state) {
  if (world_size() > 1) copy_checkpoint_state(comm_, model_, *opt_, run_meta, state, &copy_);
}

int64_t RlStepSync::save_copy(const std::string& dir) {
  if (rank() != 0) return -1;
  return write_node0_copy(dir, model_, copy_);
}

}  // namespace nanochat
