// ZeRO-2 sharding (docs/nanochat.md 2.4, 10.12-10.13; docs/architecture.md 3.8): W = 2 and 3 ranks (threads
// sharing memory through the test-only ThreadCommunicator) fed per-rank gradients must produce the
// parameters of one process fed the summed gradients, within 1e-6 relative; the state shards
// have the documented shapes; the collective sequence is identical on every rank.
#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "nanochat/core/rng.h"
#include "nanochat/optim/muon_adamw.h"
#include "support/optim_test_util.h"
#include "support/thread_communicator.h"

namespace nanochat {
namespace {

using testing::ParamSet;
using testing::ThreadCommunicator;
using testing::ThreadHub;

ParamSet make_params() {
  ParamSet ps;
  ps.add("resid_lambdas", {3});
  ps.add("x0_lambdas", {3});
  ps.add("smear_lambda", {1});
  ps.add("backout_lambda", {1});
  ps.add("transformer.wte.weight", {64, 16});  // 1024: sharded, W=3 -> 22, 22, 20 rows
  for (int l = 0; l < 3; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    ps.add(h + "attn.c_q.weight", {16, 16});                 // K = 3 (W=2: chunk 2, rank 1 owns 1)
    ps.add(h + "attn.c_k.weight", {8, 16});                  // K = 3, wide
    if (l == 0) ps.add(h + "attn.c_v.weight", {12, 16});     // K = 1 (W=3: ranks 1, 2 own nothing)
    if (l != 1) ps.add(h + "attn.ve_gate.weight", {2, 12});  // K = 2
    ps.add(h + "mlp.c_fc.weight", {24, 8});                  // K = 3, tall
  }
  ps.add("lm_head.weight", {68, 16});  // 68 rows: W=3 -> 23, 23, 22
  ps.add("smear_gate.weight", {1, 24});
  ps.add("value_embeds.0.weight", {2, 512});  // sharded with 2 rows: rank 2 of 3 owns none
  ps.add("value_embeds.2.weight", {40, 8});   // small: all-reduced
  return ps;
}

constexpr int kSteps = 3;
const float kLrm[kSteps] = {1.f, 0.6f, 0.3f};
const float kMom[kSteps] = {0.85f, 0.9f, 0.95f};
const float kWd[kSteps] = {0.28f, 0.1f, 0.f};

// grads[step][rank][param]
using Grads = std::vector<std::vector<std::vector<std::vector<float>>>>;

Grads make_grads(const ParamSet& ps, int W, uint64_t seed) {
  Rng rng(seed);
  Grads out(kSteps, std::vector<std::vector<std::vector<float>>>(W));
  for (int s = 0; s < kSteps; ++s)
    for (int r = 0; r < W; ++r)
      for (size_t i = 0; i < ps.names.size(); ++i) {
        std::vector<float> g(ps.g[i].size());
        for (auto& x : g) x = static_cast<float>(rng.normal() * 0.01);
        out[s][r].push_back(std::move(g));
      }
  return out;
}

OptimConfig config() {
  OptimConfig c;
  c.model_dim = 16;
  return c;
}

// early: every parameter is marked grad_ready() (last index first, like a backward) before step().
void run_world(int W, const ParamSet& init, const Grads& grads, std::vector<ParamSet>& ranks,
               std::vector<std::vector<StWriteEntry>>* shard_shapes, std::vector<uint64_t>* launched,
               bool early = false) {
  ThreadHub hub(W);
  ranks.assign(W, init);
  std::vector<std::exception_ptr> errors(W);
  std::vector<std::thread> threads;
  if (shard_shapes) shard_shapes->assign(W, {});
  for (int r = 0; r < W; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(hub, r);
        MuonAdamW opt(ranks[r].views(), config(), &comm);
        for (int s = 0; s < kSteps; ++s) {
          for (size_t i = 0; i < init.names.size(); ++i) ranks[r].set_grad(i, grads[s][r][i]);
          if (early)
            for (size_t i = init.names.size(); i-- > 0;) opt.grad_ready(i);
          opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W);
        }
        if (shard_shapes) (*shard_shapes)[r] = opt.state_entries();
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  if (launched)
    for (int r = 0; r < W; ++r) launched->push_back(hub.launched(r));
}

// One process fed the float sum of the ranks' gradients (rank order) scaled by 1/W.
ParamSet run_single(int W, const ParamSet& init, const Grads& grads) {
  ParamSet ps = init;
  MuonAdamW opt(ps.views(), config());
  for (int s = 0; s < kSteps; ++s) {
    for (size_t i = 0; i < init.names.size(); ++i) {
      std::vector<float> sum(ps.g[i].size(), 0.f);
      for (int r = 0; r < W; ++r)
        for (size_t j = 0; j < sum.size(); ++j) sum[j] += grads[s][r][i][j];
      ps.set_grad(i, sum);
    }
    opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W);
  }
  return ps;
}

class MuonAdamWDist : public ::testing::TestWithParam<int> {};

TEST_P(MuonAdamWDist, RanksMatchSingleProcess) {
  const int W = GetParam();
  ParamSet init = make_params();
  Rng rng(100 + W);
  init.fill_params(rng, -0.5, 0.5);
  const Grads grads = make_grads(init, W, 200 + W);
  const ParamSet ref = run_single(W, init, grads);
  std::vector<ParamSet> ranks;
  std::vector<std::vector<StWriteEntry>> shards;
  std::vector<uint64_t> launched;
  run_world(W, init, grads, ranks, &shards, &launched);
  double worst = 0;
  for (int r = 0; r < W; ++r)
    for (size_t i = 0; i < init.names.size(); ++i) {
      const double err = testing::rel_max_err(ranks[r].p[i], ref.p[i]);
      EXPECT_LE(err, 1e-6) << "rank " << r << " " << init.names[i];
      worst = std::max(worst, err);
      // the parameters really moved
      EXPECT_GT(testing::rel_max_err(ref.p[i], init.p[i]), 1e-4) << init.names[i];
    }
  std::printf("W=%d: worst max|rank - single| / max|single| = %.3g\n", W, worst);
  for (int r = 1; r < W; ++r) EXPECT_EQ(launched[r], launched[0]);
  if (W > 1) {
    // per step: one reduction per AdamW param (9) and Muon group (5), one gather per sharded
    // AdamW param (3) and Muon group (5)
    EXPECT_EQ(launched[0], static_cast<uint64_t>(kSteps * (9 + 5 + 3 + 5)));
  }

  // Shard shapes (docs/nanochat.md 2.4 generalised to any W): rows ceil(R/W) per rank, trailing ranks fewer.
  auto shape_of = [&](int r, const std::string& name) {
    for (const auto& e : shards[r])
      if (e.name == name) return e.shape;
    ADD_FAILURE() << "no state tensor " << name;
    return std::vector<int64_t>{};
  };
  for (int r = 0; r < W; ++r) {
    const int64_t c_lm = (68 + W - 1) / W, c_wte = (64 + W - 1) / W, c_ve = (2 + W - 1) / W;
    const int64_t lm_rows = W == 1 ? 68 : std::min<int64_t>(68, (r + 1) * c_lm) - std::min<int64_t>(68, r * c_lm);
    const int64_t wte_rows = W == 1 ? 64 : std::min<int64_t>(64, (r + 1) * c_wte) - std::min<int64_t>(64, r * c_wte);
    const int64_t ve_rows = W == 1 ? 2 : std::min<int64_t>(2, (r + 1) * c_ve) - std::min<int64_t>(2, r * c_ve);
    EXPECT_EQ(shape_of(r, "adamw.lm_head.weight.exp_avg"), (std::vector<int64_t>{lm_rows, 16}));
    EXPECT_EQ(shape_of(r, "adamw.transformer.wte.weight.exp_avg_sq"), (std::vector<int64_t>{wte_rows, 16}));
    EXPECT_EQ(shape_of(r, "adamw.value_embeds.0.weight.exp_avg"), (std::vector<int64_t>{ve_rows, 512}));
    EXPECT_EQ(shape_of(r, "adamw.value_embeds.2.weight.exp_avg"), (std::vector<int64_t>{40, 8}));
    const int64_t chunk3 = (3 + W - 1) / W, chunk1 = 1, chunk2 = (2 + W - 1) / W;
    EXPECT_EQ(shape_of(r, "muon.transformer.h.0.attn.c_q.weight.momentum_buffer"),
              (std::vector<int64_t>{chunk3, 16, 16}));
    EXPECT_EQ(shape_of(r, "muon.transformer.h.0.attn.c_v.weight.momentum_buffer"),
              (std::vector<int64_t>{chunk1, 12, 16}));
    EXPECT_EQ(shape_of(r, "muon.transformer.h.0.attn.ve_gate.weight.second_momentum_buffer"),
              (std::vector<int64_t>{chunk2, 1, 12}));
  }
}

// Reductions launched early through grad_ready() (overlapping a backward) give bit-identical
// parameters, and the same number of collectives; an index out of range is an error.
TEST_P(MuonAdamWDist, EarlyGradReadyGivesTheSameParameters) {
  const int W = GetParam();
  ParamSet init = make_params();
  Rng rng(300 + W);
  init.fill_params(rng, -0.5, 0.5);
  const Grads grads = make_grads(init, W, 400 + W);
  std::vector<ParamSet> plain, early;
  std::vector<uint64_t> n_plain, n_early;
  run_world(W, init, grads, plain, nullptr, &n_plain, false);
  run_world(W, init, grads, early, nullptr, &n_early, true);
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(n_early[r], n_plain[r]);
    for (size_t i = 0; i < init.names.size(); ++i)
      EXPECT_EQ(early[r].p[i], plain[r].p[i]) << "rank " << r << " " << init.names[i];
  }
  ParamSet ps = init;
  MuonAdamW opt(ps.views(), config());
  EXPECT_THROW(opt.grad_ready(init.names.size()), Error);
}

// An in-memory copy of a rank's state_entries(), as load_safetensors would return the file.
StFile to_file(const std::vector<StWriteEntry>& entries, int rank) {
  StFile f;
  f.path = "rank" + std::to_string(rank) + ".safetensors";
  for (const auto& e : entries) {
    StTensor t;
    t.dtype = e.dtype;
    t.shape = e.shape;
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    t.bytes.resize(static_cast<size_t>(n) * st_dtype_size(e.dtype));
    if (!t.bytes.empty()) std::memcpy(t.bytes.data(), e.data, t.bytes.size());  // empty shards: no rows
    f.tensors[e.name] = std::move(t);
  }
  return f;
}

// Resuming at another world size: W0 ranks take 3 steps and save their shards; W1 ranks load
// the reassembled whole state and take 3 more. The result equals one process taking all 6 steps
// on the summed gradients (within 1e-6), for growing, shrinking and to/from one rank.
TEST(MuonAdamWReshard, ResumeAtAnotherWorldSizeContinuesTheSameRun) {
  for (auto [W0, W1] : {std::pair{2, 3}, {3, 1}, {1, 2}, {3, 2}}) {
    SCOPED_TRACE("W " + std::to_string(W0) + " -> " + std::to_string(W1));
    ParamSet init = make_params();
    Rng rng(500);
    init.fill_params(rng, -0.5, 0.5);
    const Grads g0 = make_grads(init, W0, 600), g1 = make_grads(init, W1, 700);
    // reference: one process
    ParamSet ref = init;
    {
      MuonAdamW opt(ref.views(), config());
      for (const auto* g : {&g0, &g1}) {
        const int W = static_cast<int>((*g)[0].size());
        for (int s = 0; s < kSteps; ++s) {
          for (size_t i = 0; i < init.names.size(); ++i) {
            std::vector<float> sum(ref.g[i].size(), 0.f);
            for (int r = 0; r < W; ++r)
              for (size_t j = 0; j < sum.size(); ++j) sum[j] += (*g)[s][r][i][j];
            ref.set_grad(i, sum);
          }
          opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W);
        }
      }
    }
    // phase A at W0, then the shards
    std::vector<ParamSet> a;
    std::vector<std::vector<StWriteEntry>> entries;
    std::vector<StFile> shards(W0);
    {
      ThreadHub hub(W0);
      a.assign(W0, init);
      std::vector<std::thread> th;
      for (int r = 0; r < W0; ++r)
        th.emplace_back([&, r] {
          ThreadCommunicator comm(hub, r);
          MuonAdamW opt(a[r].views(), config(), &comm);
          for (int s = 0; s < kSteps; ++s) {
            for (size_t i = 0; i < init.names.size(); ++i) a[r].set_grad(i, g0[s][r][i]);
            opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W0);
          }
          shards[r] = to_file(opt.state_entries(), r);
        });
      for (auto& t : th) t.join();
    }
    // phase B at W1 from the reassembled whole state
    std::vector<ParamSet> b(W1, a[0]);
    {
      ThreadHub hub(W1);
      std::vector<std::thread> th;
      std::vector<std::exception_ptr> errors(W1);
      for (int r = 0; r < W1; ++r)
        th.emplace_back([&, r] {
          try {
            ThreadCommunicator comm(hub, r);
            MuonAdamW opt(b[r].views(), config(), &comm);
            opt.load_whole_state(opt.assemble_whole_state(shards));
            EXPECT_EQ(opt.steps_taken(), kSteps);
            for (int s = 0; s < kSteps; ++s) {
              for (size_t i = 0; i < init.names.size(); ++i) b[r].set_grad(i, g1[s][r][i]);
              opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W1);
            }
          } catch (...) {
            errors[r] = std::current_exception();
          }
        });
      for (auto& t : th) t.join();
      for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    }
    for (int r = 0; r < W1; ++r)
      for (size_t i = 0; i < init.names.size(); ++i) {
        EXPECT_LE(testing::rel_max_err(b[r].p[i], ref.p[i]), 1e-6) << "rank " << r << " " << init.names[i];
        EXPECT_GT(testing::rel_max_err(b[r].p[i], a[0].p[i]), 1e-5) << "phase B moved " << init.names[i];
      }
    // a shard set with a rank missing is an error naming the file and tensor
    if (W0 > 1) {
      ParamSet c = init;
      MuonAdamW opt(c.views(), config());
      std::vector<StFile> partial(shards.begin(), shards.end() - 1);
      EXPECT_THROW(opt.assemble_whole_state(partial), Error);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MuonAdamWDist, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace nanochat
