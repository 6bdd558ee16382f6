// The per-op-family profile (core/profile.h): off by default, every family of a training step is
// recorded when on, and the families together cover the step's wall time.
#include <gtest/gtest.h>

#include <vector>

#include "nanochat/core/profile.h"
#include "nanochat/core/rng.h"
#include "nanochat/core/timer.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"

using namespace nanochat;

TEST(Profile, ScopesRecordOnlyWhenEnabled) {
  prof::reset();
  prof::enable(false);
  { prof::Scope s(prof::Op::Attention); }
  EXPECT_EQ(prof::calls(prof::Op::Attention), 0);
  prof::enable(true);
  { prof::Scope s(prof::Op::Attention); }
  prof::enable(false);
  EXPECT_EQ(prof::calls(prof::Op::Attention), 1);
  EXPECT_GE(prof::seconds(prof::Op::Attention), 0.0);
  prof::reset();
  EXPECT_EQ(prof::calls(prof::Op::Attention), 0);
  EXPECT_EQ(prof::total_seconds(), 0.0);
}

TEST(Profile, TrainingStepCoversEveryModelFamily) {
  ModelConfig cfg = ModelConfig::from_depth(3, 32, 32, 64, 300, "SL");
  GPT model(cfg);
  model.init_weights(1);
  std::vector<OptParam> ps;
  for (const auto& p : model.params())
    ps.push_back({p.name, p.shape, model.param_data() + p.offset, model.grad_data() + p.offset});
  OptimConfig oc;
  oc.model_dim = cfg.n_embd;
  MuonAdamW opt(ps, oc);
  const int B = 2, T = 64;
  Rng rng(5);
  std::vector<int32_t> idx(B * T), tgt(B * T);
  for (auto& v : idx) v = static_cast<int32_t>(rng.below(300));
  for (auto& v : tgt) v = static_cast<int32_t>(rng.below(300));
  model.zero_grad();
  model.forward_backward(idx.data(), tgt.data(), B, T, 1.f);  // warm-up (allocation)
  prof::reset();
  prof::enable(true);
  Timer t;
  model.zero_grad();
  model.forward_backward(idx.data(), tgt.data(), B, T, 1.f);
  opt.step(1.f, 0.95f, 0.f);
  const double wall = t.seconds();
  prof::enable(false);
  for (size_t k = 0; k < prof::kNumOps; ++k) {
    const auto op = static_cast<prof::Op>(k);
    if (op == prof::Op::Data) {
      EXPECT_EQ(prof::calls(op), 0);
      continue;
    }
    EXPECT_GT(prof::calls(op), 0) << prof::name(op);
  }
  // 3 layers: each GEMM family is entered in the forward and the backward of every layer
  EXPECT_EQ(prof::calls(prof::Op::GemmQKV), 6);
  EXPECT_EQ(prof::calls(prof::Op::Attention), 6);
  EXPECT_EQ(prof::calls(prof::Op::LmHeadLoss), 1);
  EXPECT_EQ(prof::calls(prof::Op::Optimizer), 1);
  // exclusive scopes: their sum cannot exceed the wall time of the step
  EXPECT_LE(prof::total_seconds(), wall * 1.0001 + 1e-6);
  EXPECT_GT(prof::total_seconds(), 0.5 * wall);
  prof::reset();
}
