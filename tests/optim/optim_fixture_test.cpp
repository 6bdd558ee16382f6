// MuonAdamW against the PyTorch float64 reference (tests/fixtures/optim_mixed.safetensors, written
// by tools/reference/make_fixtures.py; cross-checked against nanochat's own optim.py): every
// parameter after each of 5 steps with a changing lr multiplier / momentum / weight decay.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>

#include "nanochat/core/safetensors.h"
#include "nanochat/optim/muon_adamw.h"
#include "support/optim_test_util.h"

namespace nanochat {
namespace {

using nlohmann::json;
using testing::ParamSet;
using testing::rel_max_err;

const char* kFixture = NANOCHAT_TEST_DATA "/optim_mixed.safetensors";

struct Loaded {
  StFile f;
  json hp, schedule, order, groups;
  ParamSet ps;
  OptimConfig cfg;
};

Loaded load_fixture() {
  Loaded L;
  L.f = load_safetensors(kFixture);
  L.hp = json::parse(L.f.metadata.at("hyperparameters"));
  L.schedule = json::parse(L.f.metadata.at("schedule"));
  L.order = json::parse(L.f.metadata.at("param_order"));
  L.groups = json::parse(L.f.metadata.at("groups"));
  for (const auto& n : L.order) {
    const std::string name = n.get<std::string>();
    const StTensor& t = L.f.at("param0." + name);
    L.ps.add(name, t.shape);
    L.ps.p.back() = t.to_f32();
  }
  L.cfg.unembedding_lr = L.hp["unembedding_lr"].get<float>();
  L.cfg.embedding_lr = L.hp["embedding_lr"].get<float>();
  L.cfg.matrix_lr = L.hp["matrix_lr"].get<float>();
  L.cfg.scalar_lr = L.hp["scalar_lr"].get<float>();
  L.cfg.weight_decay = L.hp["weight_decay"].get<float>();
  L.cfg.model_dim = L.hp["model_dim"].get<int64_t>();
  return L;
}

TEST(MuonAdamWFixture, GroupsMatchReference) {
  Loaded L = load_fixture();
  MuonAdamW opt(L.ps.views(), L.cfg);
  const auto& groups = opt.groups();
  ASSERT_EQ(groups.size(), L.groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    SCOPED_TRACE(groups[i].label);
    EXPECT_EQ(groups[i].kind == OptKind::Muon ? "muon" : "adamw", L.groups[i]["kind"].get<std::string>());
    EXPECT_EQ(groups[i].names, L.groups[i]["names"].get<std::vector<std::string>>());
    EXPECT_NEAR(groups[i].initial_lr, L.groups[i]["lr"].get<double>(), 1e-7 * groups[i].initial_lr);
  }
}

TEST(MuonAdamWFixture, FiveStepsMatchFloat64Reference) {
  Loaded L = load_fixture();
  MuonAdamW opt(L.ps.views(), L.cfg);
  ASSERT_EQ(L.schedule.size(), 5u);
  double worst = 0;
  for (size_t k = 0; k < L.schedule.size(); ++k) {
    for (size_t i = 0; i < L.ps.names.size(); ++i)
      L.ps.set_grad(i, L.f.at("grad" + std::to_string(k) + "." + L.ps.names[i]).to_f32());
    const auto& s = L.schedule[k];
    opt.step(s["lr_multiplier"].get<float>(), s["momentum"].get<float>(), s["weight_decay"].get<float>());
    for (size_t i = 0; i < L.ps.names.size(); ++i) {
      const auto truth = L.f.at("param" + std::to_string(k + 1) + "." + L.ps.names[i]).to_f32();
      const double err = rel_max_err(L.ps.p[i], truth);
      EXPECT_LE(err, 1e-5) << "step " << k + 1 << " " << L.ps.names[i];
      worst = std::max(worst, err);
    }
  }
  std::printf("optim_mixed: worst max|C++ - fp64| / max|fp64| over 5 steps = %.3g\n", worst);
  EXPECT_EQ(opt.steps_taken(), 5);
}

TEST(MuonAdamWFixture, GradScaleAndUnchangedGradients) {
  // Feeding 4x the gradient with grad_scale 0.25 must give the same first step (up to rounding),
  // and at world size 1 step() leaves the gradient buffers untouched.
  Loaded A = load_fixture();
  Loaded B = load_fixture();
  MuonAdamW oa(A.ps.views(), A.cfg), ob(B.ps.views(), B.cfg);
  for (size_t i = 0; i < A.ps.names.size(); ++i) {
    A.ps.set_grad(i, A.f.at("grad0." + A.ps.names[i]).to_f32());
    B.ps.set_grad(i, A.ps.g[i]);
    for (auto& x : B.ps.g[i]) x *= 4.f;
  }
  const auto g_before = B.ps.g;
  oa.step(1.f, 0.85f, 0.28f);
  ob.step(1.f, 0.85f, 0.28f, 0.25f);
  EXPECT_EQ(B.ps.g, g_before);
  for (size_t i = 0; i < A.ps.names.size(); ++i) EXPECT_LE(rel_max_err(B.ps.p[i], A.ps.p[i]), 1e-6) << A.ps.names[i];
}

}  // namespace
}  // namespace nanochat
