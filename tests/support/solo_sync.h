#pragma once
// A second StepSync (train/sync.h), for tests: one process and no communicator. It runs every row
// of a step itself in micro-batches of one device batch, sums the token losses' gradients and
// updates with a MuonAdamW built without a communicator. What it shows: the loop's contract is
// complete without ZeRO-2 -- a mode is one class behind this interface.
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/timer.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/train/sync.h"

namespace nctest {

class SoloSync final : public nanochat::StepSync {
 public:
  /// opt: built on `model` with no communicator; rows_per_step: R; device_batch: rows per micro-batch.
  SoloSync(nanochat::GPT& model, nanochat::MuonAdamW& opt, int64_t rows_per_step, int device_batch)
      : model_(model), opt_(opt), R_(rows_per_step), B_(device_batch) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  nanochat::MuonAdamW& optimizer() override { return opt_; }
  std::string describe() const override { return "one process, no communicator"; }
  nanochat::StepShare begin_step(int64_t) override {
    loss_sum_ = 0;
    tokens_ = 0;
    nanochat::StepShare s;
    for (int64_t left = R_; left > 0; left -= B_)
      s.micro_batches.push_back(static_cast<int>(std::min<int64_t>(left, B_)));
    return s;
  }
  float micro_batch(int, const int32_t* idx, const int32_t* targets, int B, int T) override {
    int64_t valid = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(B) * T; ++i) valid += targets[i] >= 0;
    const float loss = model_.forward_backward(idx, targets, B, T, static_cast<float>(valid));  // sum of token losses
    loss_sum_ += static_cast<double>(loss) * static_cast<double>(valid);
    tokens_ += valid;
    return loss;
  }
  double update(const nanochat::StepSchedule& s) override {
    if (tokens_ == 0) nanochat::fail("SoloSync: a step without a valid target");
    nanochat::Timer t;
    opt_.step(s.lr_multiplier, s.muon_momentum, s.muon_weight_decay, 1.f / static_cast<float>(tokens_));
    model_.zero_grad();
    return t.seconds();
  }
  nanochat::StepStats finish(nanochat::RankStep mine) override {
    mine.rows = static_cast<double>(R_);
    mine.loss_sum = loss_sum_;
    mine.tokens = static_cast<double>(tokens_);
    nanochat::StepStats st;
    st.ranks = {mine};
    st.split = {R_};
    st.speeds = {0.0};
    st.loss = loss_sum_ / static_cast<double>(tokens_);
    return st;
  }
  bool in_sync(int64_t) const override { return true; }
  void check_replicas(int64_t) override {}
  void sum_over_ranks(double*, size_t) override {}
  void save(const std::string&, const nanochat::RunMeta&, const nanochat::LoopState&,
            const nanochat::FaultInjector&) override {
    nanochat::fail("SoloSync keeps no checkpoints");
  }
  nanochat::LoopState resume(const nanochat::TrainPlan&, int64_t) override {
    nanochat::fail("SoloSync keeps no checkpoints");
  }

 private:
  nanochat::GPT& model_;
  nanochat::MuonAdamW& opt_;
  int64_t R_;
  int B_;
  double loss_sum_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace nctest
