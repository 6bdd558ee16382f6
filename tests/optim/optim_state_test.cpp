// Optimizer state save/load: a run resumed from saved state continues bit-identically; a state
// file for another layout is rejected with an error naming the tensor; the part of a whole state
// that rank 0 computes for each rank is exactly what that rank's shard holds (round trip through
// the shard files and assemble_whole_state).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/optim/muon_adamw.h"
#include "support/optim_test_util.h"
#include "support/thread_communicator.h"

namespace nanochat {
namespace {

using testing::ParamSet;

ParamSet make_params() {
  ParamSet ps;
  ps.add("resid_lambdas", {3});
  ps.add("x0_lambdas", {3});
  ps.add("smear_lambda", {1});
  ps.add("backout_lambda", {1});
  ps.add("transformer.wte.weight", {64, 24});
  ps.add("transformer.h.0.attn.c_q.weight", {24, 24});
  ps.add("transformer.h.0.mlp.c_fc.weight", {96, 24});
  ps.add("transformer.h.0.mlp.c_proj.weight", {24, 96});
  ps.add("transformer.h.1.attn.c_q.weight", {24, 24});
  ps.add("transformer.h.1.attn.ve_gate.weight", {2, 12});
  ps.add("lm_head.weight", {64, 24});
  ps.add("smear_gate.weight", {1, 24});
  ps.add("value_embeds.1.weight", {64, 24});
  return ps;
}

void random_grads(ParamSet& ps, Rng& rng) {
  for (auto& g : ps.g)
    for (auto& x : g) x = static_cast<float>(rng.normal() * 0.01);
}

std::string temp_path(const char* tag) {
  return std::string(::testing::TempDir()) + "nanochat_optim_" + tag + "_" + std::to_string(::getpid()) +
         ".safetensors";
}

TEST(MuonAdamWState, SaveLoadContinuesIdentically) {
  ParamSet a = make_params();
  Rng init(1);
  a.fill_params(init, -0.5, 0.5);
  OptimConfig cfg;
  cfg.model_dim = 24;
  MuonAdamW oa(a.views(), cfg);
  Rng rng(2);
  for (int s = 0; s < 2; ++s) {
    random_grads(a, rng);
    oa.step(1.f - 0.1f * s, 0.9f, 0.2f);
  }
  const std::string path = temp_path("roundtrip");
  save_safetensors(path, oa.state_entries(), oa.state_metadata());

  ParamSet b = make_params();
  b.p = a.p;  // same parameters (b's storage is taken before the optimizer sees it)
  MuonAdamW ob(b.views(), cfg);
  const StFile f = load_safetensors(path);
  std::remove(path.c_str());
  EXPECT_EQ(f.metadata.at("optimizer"), "MuonAdamW");
  EXPECT_EQ(f.metadata.at("world_size"), "1");
  ob.load_state(f);
  EXPECT_EQ(ob.steps_taken(), 2);

  // A fresh optimizer (no state) on the same parameters diverges: the state matters.
  ParamSet c = make_params();
  c.p = a.p;
  MuonAdamW oc(c.views(), cfg);

  for (int s = 2; s < 5; ++s) {
    random_grads(a, rng);
    for (size_t i = 0; i < a.names.size(); ++i) {
      b.set_grad(i, a.g[i]);
      c.set_grad(i, a.g[i]);
    }
    oa.step(0.8f, 0.95f, 0.1f);
    ob.step(0.8f, 0.95f, 0.1f);
    oc.step(0.8f, 0.95f, 0.1f);
  }
  for (size_t i = 0; i < a.names.size(); ++i) EXPECT_EQ(a.p[i], b.p[i]) << a.names[i];
  bool differs = false;
  for (size_t i = 0; i < a.names.size(); ++i) differs |= a.p[i] != c.p[i];
  EXPECT_TRUE(differs);

  // state entries: names and shapes as documented
  const std::map<std::string, std::vector<int64_t>> expect = {
      {"muon.transformer.h.0.attn.c_q.weight.momentum_buffer", {2, 24, 24}},
      {"muon.transformer.h.0.attn.c_q.weight.second_momentum_buffer", {2, 24, 1}},
      {"muon.transformer.h.0.mlp.c_proj.weight.second_momentum_buffer", {1, 1, 96}},
      {"muon.transformer.h.0.mlp.c_fc.weight.second_momentum_buffer", {1, 96, 1}},
      {"muon.transformer.h.1.attn.ve_gate.weight.second_momentum_buffer", {1, 1, 12}},
      {"adamw.lm_head.weight.exp_avg", {64, 24}},
      {"adamw.resid_lambdas.exp_avg_sq", {3}},
      {"adamw.lm_head.weight.step", {1}}};
  size_t found = 0;
  for (const auto& e : oa.state_entries()) {
    auto it = expect.find(e.name);
    if (it == expect.end()) continue;
    ++found;
    EXPECT_EQ(e.shape, it->second) << e.name;
    if (e.name == "adamw.lm_head.weight.step") {
      EXPECT_EQ(e.dtype, "I64");
      EXPECT_EQ(*static_cast<const int64_t*>(e.data), 5);
    }
  }
  EXPECT_EQ(found, expect.size());
  EXPECT_EQ(oa.state_entries().size(), 8u * 3 + 4 * 2);  // 8 AdamW params x 3 + 4 Muon groups x 2
}

TEST(MuonAdamWState, MismatchNamesTheTensor) {
  ParamSet a = make_params();
  OptimConfig cfg;
  cfg.model_dim = 24;
  MuonAdamW oa(a.views(), cfg);
  const std::string path = temp_path("mismatch");
  save_safetensors(path, oa.state_entries(), oa.state_metadata());
  const StFile f = load_safetensors(path);
  std::remove(path.c_str());

  // Another model: lm_head with a different number of rows.
  ParamSet b;
  for (auto [name, shape] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"resid_lambdas", {3}}, {"lm_head.weight", {128, 24}}})
    b.add(name, shape);
  MuonAdamW ob(b.views(), cfg);
  try {
    ob.load_state(f);
    FAIL() << "no error for a mismatched shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adamw.lm_head.weight.exp_avg"), std::string::npos) << e.what();
  }

  // A parameter the file does not have.
  ParamSet c;
  c.add("value_embeds.3.weight", {8, 8});
  MuonAdamW oc(c.views(), cfg);
  try {
    oc.load_state(f);
    FAIL() << "no error for a missing tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("value_embeds.3.weight"), std::string::npos) << e.what();
  }
}

// Rank 0 computes every rank's part of a whole state (what a resume sends it); each rank loads
// its part; their shards, written and read back, reassemble into the same whole state bit for
// bit (assemble_whole_state reads the files by their recorded layout). At W = 2 and 3 under the
// equal layout, and at W = 3 under a layout in proportion to unequal speeds.
TEST(MuonAdamWState, EachRanksPartOfTheWholeStateRoundTripsThroughItsShard) {
  OptimConfig cfg;
  cfg.model_dim = 24;
  for (const auto& [W, speeds] :
       std::vector<std::pair<int, std::vector<double>>>{{2, {}}, {3, {}}, {3, {1.0, 3.0, 0.5}}}) {
    testing::ThreadHub hub(W);
    std::vector<ParamSet> sets(static_cast<size_t>(W), make_params());
    std::vector<std::unique_ptr<testing::ThreadCommunicator>> comms;
    std::vector<std::unique_ptr<MuonAdamW>> opts;
    for (int r = 0; r < W; ++r) {
      comms.push_back(std::make_unique<testing::ThreadCommunicator>(hub, r));
      opts.push_back(std::make_unique<MuonAdamW>(sets[static_cast<size_t>(r)].views(), cfg, comms.back().get()));
    }
    if (!speeds.empty()) {  // a collective: every rank at once
      const OptLayout l = opts[0]->layout_for(speeds);
      ASSERT_NE(l, opts[0]->equal_layout());
      std::vector<std::thread> ts;
      for (int r = 0; r < W; ++r) ts.emplace_back([&, r] { opts[static_cast<size_t>(r)]->set_layout(l); });
      for (auto& t : ts) t.join();
    }
    MuonAdamW::WholeState whole;
    whole.values.resize(opts[0]->whole_state_floats());
    for (size_t i = 0; i < whole.values.size(); ++i) whole.values[i] = 0.001f * static_cast<float>(i) + 1.f;
    for (size_t k = 0; k < 8; ++k) whole.steps.push_back(static_cast<int64_t>(10 + k));
    std::vector<StFile> shards;
    size_t total = 0;
    for (int r = 0; r < W; ++r) {
      const std::vector<float> part = opts[0]->whole_state_part(whole, r);
      EXPECT_EQ(part.size(), opts[static_cast<size_t>(r)]->whole_state_part_floats(r));
      total += part.size();
      opts[static_cast<size_t>(r)]->load_whole_state_part(part, whole.steps);
      EXPECT_EQ(opts[static_cast<size_t>(r)]->steps_taken(), 17);
      const std::string path = temp_path(("part" + std::to_string(r)).c_str());
      save_safetensors(path, opts[static_cast<size_t>(r)]->state_entries(),
                       opts[static_cast<size_t>(r)]->state_metadata());
      shards.push_back(load_safetensors(path));
      std::remove(path.c_str());
    }
    EXPECT_LT(total, 2 * whole.values.size()) << "each rank holds its part, not the whole";
    const MuonAdamW::WholeState back = opts[0]->assemble_whole_state(shards);
    EXPECT_EQ(back.values, whole.values) << "W=" << W;
    EXPECT_EQ(back.steps, whole.steps) << "W=" << W;
    try {
      opts[1]->load_whole_state_part(std::vector<float>(3), whole.steps);
      FAIL() << "no error for a part of the wrong size";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1's part has 3 values"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nanochat
