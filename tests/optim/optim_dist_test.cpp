// ZeRO-2 sharding (docs/nanochat.md 2.4, 10.12-10.13; docs/architecture.md 3.8): W = 2 and 3 ranks (threads
// sharing memory through the test-only ThreadCommunicator) fed per-rank gradients must produce the
// parameters of one process fed the summed gradients, within 1e-6 relative; the state shards
// have the documented shapes; the collective sequence is identical on every rank.
#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <numeric>
#include <string>
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
  ps.add("transformer.wte.weight", {64, 16});  // an embedding table: replicated, rows sent sparse
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
  ps.add("value_embeds.0.weight", {2, 512});  // an embedding table of 1024 elements: replicated, sparse
  ps.add("value_embeds.2.weight", {40, 8});   // small: all-reduced
  return ps;
}

constexpr int kSteps = 3;
const float kLrm[kSteps] = {1.f, 0.6f, 0.3f};
const float kMom[kSteps] = {0.85f, 0.9f, 0.95f};
const float kWd[kSteps] = {0.28f, 0.1f, 0.f};

// grads[step][rank][param]
using Grads = std::vector<std::vector<std::vector<std::vector<float>>>>;

bool is_table(const std::string& name) {
  return name == "transformer.wte.weight" || name.rfind("value_embeds.", 0) == 0;
}

// Normal gradients; an embedding table's rows are zero except those of the tokens a rank "saw":
// a third of them, other ones per rank and step -- except wte at the last step, where every row
// is touched (its packs would be larger than the dense sum: it is all-reduced).
Grads make_grads(const ParamSet& ps, int W, uint64_t seed) {
  Rng rng(seed);
  Grads out(kSteps, std::vector<std::vector<std::vector<float>>>(W));
  for (int s = 0; s < kSteps; ++s)
    for (int r = 0; r < W; ++r)
      for (size_t i = 0; i < ps.names.size(); ++i) {
        std::vector<float> g(ps.g[i].size());
        for (auto& x : g) x = static_cast<float>(rng.normal() * 0.01);
        const bool dense = s == kSteps - 1 && ps.names[i] == "transformer.wte.weight";
        if (is_table(ps.names[i]) && !dense) {
          const size_t rows = static_cast<size_t>(ps.shapes[i][0]), cols = g.size() / rows;
          for (size_t row = 0; row < rows; ++row)
            if ((row + static_cast<size_t>(s + r)) % 3 != 0) std::fill_n(g.begin() + row * cols, cols, 0.f);
        }
        out[s][r].push_back(std::move(g));
      }
  return out;
}

// Rows of the embedding tables rank r sends as packs over the steps of `grads` (the nonzero rows
// of the steps where the packs of all ranks are smaller than twice the table).
size_t packed_rows(const ParamSet& ps, const Grads& grads, int r) {
  const int W = static_cast<int>(grads[0].size());
  if (W == 1) return 0;
  size_t n = 0;
  for (size_t s = 0; s < grads.size(); ++s)
    for (size_t i = 0; i < ps.names.size(); ++i) {
      if (!is_table(ps.names[i]) || ps.g[i].size() < 1024) continue;
      const size_t rows = static_cast<size_t>(ps.shapes[i][0]), cols = ps.g[i].size() / rows;
      std::vector<size_t> nonzero(static_cast<size_t>(W), 0);
      for (int q = 0; q < W; ++q)
        for (size_t row = 0; row < rows; ++row) {
          const float* x = grads[s][static_cast<size_t>(q)][i].data() + row * cols;
          nonzero[static_cast<size_t>(q)] += std::any_of(x, x + cols, [](float v) { return v != 0.f; }) ? 1 : 0;
        }
      const size_t floats = std::accumulate(nonzero.begin(), nonzero.end(), size_t{0}) * (cols + 1);
      if (floats < 2 * ps.g[i].size()) n += nonzero[static_cast<size_t>(r)];
    }
  return n;
}

OptimConfig config() {
  OptimConfig c;
  c.model_dim = 16;
  return c;
}

// Runs body(rank, comm) for each of W ranks on its own thread (ThreadCommunicators of one hub);
// rethrows a rank's failure once all have finished; returns the collectives each rank launched.
std::vector<uint64_t> on_ranks(int W, const std::function<void(int, Communicator&)>& body) {
  ThreadHub hub(W);
  std::vector<std::exception_ptr> errors(W);
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(hub, r);
        body(r, comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<uint64_t> launched;
  for (int r = 0; r < W; ++r) launched.push_back(hub.launched(r));
  return launched;
}

// Which parameters run_world marks grad_ready() before step() (last index first, like a backward).
enum class Early { None, All, EveryOther };

void run_world(int W, const ParamSet& init, const Grads& grads, std::vector<ParamSet>& ranks,
               std::vector<std::vector<StWriteEntry>>* shard_shapes, std::vector<uint64_t>* launched,
               Early early = Early::None, std::vector<size_t>* sparse_rows = nullptr) {
  ThreadHub hub(W);
  ranks.assign(W, init);
  std::vector<std::exception_ptr> errors(W);
  std::vector<std::thread> threads;
  if (shard_shapes) shard_shapes->assign(W, {});
  if (sparse_rows) sparse_rows->assign(W, 0);
  for (int r = 0; r < W; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(hub, r);
        MuonAdamW opt(ranks[r].views(), config(), &comm);
        for (int s = 0; s < kSteps; ++s) {
          for (size_t i = 0; i < init.names.size(); ++i) ranks[r].set_grad(i, grads[s][r][i]);
          for (size_t i = init.names.size(); i-- > 0;)
            if (early == Early::All || (early == Early::EveryOther && i % 2 == 0)) opt.grad_ready(i);
          opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W);
        }
        if (shard_shapes) (*shard_shapes)[r] = opt.state_entries();
        if (sparse_rows) (*sparse_rows)[r] = opt.sparse_rows_sent();
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

// One process fed the float sum of the ranks' gradients (rank order) scaled by 1/W, for the steps
// of each phase in turn (a phase's W is its gradients' rank count).
ParamSet run_single_phases(const ParamSet& init, std::initializer_list<const Grads*> phases) {
  ParamSet ps = init;
  MuonAdamW opt(ps.views(), config());
  for (const Grads* g : phases) {
    const int W = static_cast<int>((*g)[0].size());
    for (int s = 0; s < kSteps; ++s) {
      for (size_t i = 0; i < init.names.size(); ++i) {
        std::vector<float> sum(ps.g[i].size(), 0.f);
        for (int r = 0; r < W; ++r)
          for (size_t j = 0; j < sum.size(); ++j) sum[j] += (*g)[s][r][i][j];
        ps.set_grad(i, sum);
      }
      opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W);
    }
  }
  return ps;
}

ParamSet run_single(int W, const ParamSet& init, const Grads& grads) {
  EXPECT_EQ(static_cast<int>(grads[0].size()), W);
  return run_single_phases(init, {&grads});
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
  std::vector<size_t> sparse_rows;
  run_world(W, init, grads, ranks, &shards, &launched, Early::None, &sparse_rows);
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
    // per step: one reduction per AdamW param (9) and Muon group (5), a second one for each
    // embedding table of 1024 elements or more (2: the packs' sizes, then the packs or the dense
    // sum), one gather per sharded AdamW param (lm_head) and Muon group (5)
    EXPECT_EQ(launched[0], static_cast<uint64_t>(kSteps * (9 + 5 + 2 + 1 + 5)));
  }
  // the tables' rows went as packs of the touched rows (the dense step of wte as a dense sum)
  for (int r = 0; r < W; ++r) EXPECT_EQ(sparse_rows[r], packed_rows(init, grads, r)) << "rank " << r;
  if (W > 1) {
    EXPECT_GT(sparse_rows[0], 0u);
  }

  // Shard shapes (docs/nanochat.md 2.4 generalised to any W): rows ceil(R/W) per rank, trailing ranks fewer.
  auto shape_of = [&](int r, const std::string& name) {
    for (const auto& e : shards[r])
      if (e.name == name) return e.shape;
    ADD_FAILURE() << "no state tensor " << name;
    return std::vector<int64_t>{};
  };
  for (int r = 0; r < W; ++r) {
    const int64_t c_lm = (68 + W - 1) / W;
    const int64_t lm_rows = W == 1 ? 68 : std::min<int64_t>(68, (r + 1) * c_lm) - std::min<int64_t>(68, r * c_lm);
    EXPECT_EQ(shape_of(r, "adamw.lm_head.weight.exp_avg"), (std::vector<int64_t>{lm_rows, 16}));
    // the embedding tables' state is whole on every rank
    EXPECT_EQ(shape_of(r, "adamw.transformer.wte.weight.exp_avg_sq"), (std::vector<int64_t>{64, 16}));
    EXPECT_EQ(shape_of(r, "adamw.value_embeds.0.weight.exp_avg"), (std::vector<int64_t>{2, 512}));
    EXPECT_EQ(shape_of(r, "adamw.value_embeds.2.weight.exp_avg"), (std::vector<int64_t>{40, 8}));
    // Muon: the matrices this rank owns, blocks of ceil(K/W) (no padding)
    auto owned = [&](int64_t K) {
      return std::min<int64_t>(K, (r + 1) * ((K + W - 1) / W)) - std::min<int64_t>(K, r * ((K + W - 1) / W));
    };
    const int64_t chunk3 = owned(3), chunk1 = owned(1), chunk2 = owned(2);
    EXPECT_EQ(shape_of(r, "muon.transformer.h.0.attn.c_q.weight.momentum_buffer"),
              (std::vector<int64_t>{chunk3, 16, 16}));
    EXPECT_EQ(shape_of(r, "muon.transformer.h.0.attn.c_v.weight.momentum_buffer"),
              (std::vector<int64_t>{chunk1, 12, 16}));
    EXPECT_EQ(shape_of(r, "muon.transformer.h.0.attn.ve_gate.weight.second_momentum_buffer"),
              (std::vector<int64_t>{chunk2, 1, 12}));
  }
}

// Small tensors whose gradients the caller has summed over the ranks (as the stream-order sum of
// train/zero2_ordered_sum.h leaves them: the step's sum on every rank) are updated with nothing
// sent for them, and the ranks still end where one process does; only small tensors qualify.
void check_summed_by_caller(int W) {
  ParamSet init = make_params();
  Rng rng(300 + W);
  init.fill_params(rng, -0.5, 0.5);
  Grads grads = make_grads(init, W, 400 + W);
  const ParamSet ref = run_single(W, init, grads);
  std::vector<bool> summed(init.names.size(), false);
  size_t small = 0;
  for (size_t i = 0; i < init.names.size(); ++i) {
    const bool matrix = init.names[i].rfind("transformer.h.", 0) == 0;
    if (matrix || init.g[i].size() >= 1024) continue;
    summed[i] = true;
    ++small;
    for (int s = 0; s < kSteps; ++s) {  // rank order, as run_single adds them
      std::vector<float> sum(init.g[i].size(), 0.f);
      for (int r = 0; r < W; ++r)
        for (size_t j = 0; j < sum.size(); ++j) sum[j] += grads[s][r][i][j];
      for (int r = 0; r < W; ++r) grads[s][r][i] = sum;
    }
  }
  ASSERT_EQ(small, 6u);  // the four lambdas, smear_gate, value_embeds.2
  std::vector<ParamSet> ranks(W, init);
  const std::vector<uint64_t> launched = on_ranks(W, [&](int r, Communicator& comm) {
    MuonAdamW opt(ranks[r].views(), config(), &comm);
    opt.set_summed_by_caller(summed);
    for (int s = 0; s < kSteps; ++s) {
      for (size_t i = 0; i < init.names.size(); ++i) ranks[r].set_grad(i, grads[s][r][i]);
      opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W);
    }
  });
  for (int r = 0; r < W; ++r)
    for (size_t i = 0; i < init.names.size(); ++i)
      EXPECT_LE(testing::rel_max_err(ranks[r].p[i], ref.p[i]), 1e-6) << "rank " << r << " " << init.names[i];
  // per step the collectives of RanksMatchSingleProcess less one all-reduce per small tensor
  EXPECT_EQ(launched[0], static_cast<uint64_t>(kSteps * (9 + 5 + 2 + 1 + 5 - 6)));
  for (int r = 1; r < W; ++r) EXPECT_EQ(launched[r], launched[0]);

  // a Muon matrix, a sharded tensor or an embedding table is summed by the optimizer; a list of
  // another length is refused
  on_ranks(W, [&](int r, Communicator& comm) {
    ParamSet ps = init;
    MuonAdamW opt(ps.views(), config(), &comm);
    for (const char* name : {"transformer.h.0.attn.c_q.weight", "lm_head.weight", "transformer.wte.weight"}) {
      std::vector<bool> bad(init.names.size(), false);
      bad[static_cast<size_t>(std::find(init.names.begin(), init.names.end(), name) - init.names.begin())] = true;
      try {
        opt.set_summed_by_caller(bad);
        ADD_FAILURE() << "rank " << r << ": " << name << " was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "'"), std::string::npos) << e.what();
      }
    }
    EXPECT_THROW(opt.set_summed_by_caller(std::vector<bool>(3, false)), Error);
  });
}

TEST(MuonAdamWSummedByCaller, SmallTensorsSummedByTheCallerSendNothing) {
  for (int W : {2, 3}) {
    SCOPED_TRACE("W = " + std::to_string(W));
    check_summed_by_caller(W);
  }
}

// Reductions launched early through grad_ready() (overlapping a backward) give bit-identical
// parameters, whether every parameter or only some were marked. Marked Muon matrices are
// reduce-scattered and gathered one by one (a group with a marked matrix sends all its matrices
// alone): every parameter marked, the groups' K = 3, 3, 1, 2, 3 matrices are twice
// (3-1) + (3-1) + 0 + (2-1) + (3-1) collectives more per step than one reduce-scatter and one
// all-gather per group (at W > 1; at W = 1 nothing is sent). An index out of range is an error.
TEST_P(MuonAdamWDist, EarlyGradReadyGivesTheSameParameters) {
  const int W = GetParam();
  ParamSet init = make_params();
  Rng rng(300 + W);
  init.fill_params(rng, -0.5, 0.5);
  const Grads grads = make_grads(init, W, 400 + W);
  std::vector<ParamSet> plain, early, some;
  std::vector<uint64_t> n_plain, n_early, n_some;
  run_world(W, init, grads, plain, nullptr, &n_plain, Early::None);
  run_world(W, init, grads, early, nullptr, &n_early, Early::All);
  run_world(W, init, grads, some, nullptr, &n_some, Early::EveryOther);
  const uint64_t pieces = W == 1 ? 0 : 2 * kSteps * ((3 - 1) + (3 - 1) + 0 + (2 - 1) + (3 - 1));
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(n_early[r], n_plain[r] + pieces);
    EXPECT_EQ(n_some[r] > n_plain[r], W > 1);
    for (size_t i = 0; i < init.names.size(); ++i) {
      EXPECT_EQ(early[r].p[i], plain[r].p[i]) << "rank " << r << " " << init.names[i];
      EXPECT_EQ(some[r].p[i], plain[r].p[i]) << "rank " << r << " " << init.names[i] << " (some marked)";
    }
  }
  ParamSet ps = init;
  MuonAdamW opt(ps.views(), config());
  EXPECT_THROW(opt.grad_ready(init.names.size()), Error);
}

// An in-memory copy of a rank's state_entries(), as load_safetensors would return the file.
StFile to_file(const std::vector<StWriteEntry>& entries, int rank,
               const std::map<std::string, std::string>& metadata = {}) {
  StFile f;
  f.path = "rank" + std::to_string(rank) + ".safetensors";
  f.metadata = metadata;
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
    const ParamSet ref = run_single_phases(init, {&g0, &g1});
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
          shards[r] = to_file(opt.state_entries(), r, opt.state_metadata());
        });
      for (auto& t : th) t.join();
    }
    // phase B at W1 from the reassembled whole state
    std::vector<ParamSet> b(W1, a[0]);
    on_ranks(W1, [&](int r, Communicator& comm) {
      MuonAdamW opt(b[r].views(), config(), &comm);
      opt.load_whole_state(opt.assemble_whole_state(shards));
      EXPECT_EQ(opt.steps_taken(), kSteps);
      for (int s = 0; s < kSteps; ++s) {
        for (size_t i = 0; i < init.names.size(); ++i) b[r].set_grad(i, g1[s][r][i]);
        opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W1);
      }
    });
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

// --- layouts: who owns which rows and matrices (OptLayout) -----------------------------------------

// A random layout: random row counts per rank (some zero) and random owners.
OptLayout random_layout(const MuonAdamW& opt, Rng& rng) {
  OptLayout l = opt.equal_layout();
  const int W = opt.world_size();
  for (auto& rows : l.adam_rows) {
    if (rows.empty()) continue;
    int64_t left = std::accumulate(rows.begin(), rows.end(), int64_t{0});
    for (int r = 0; r + 1 < W; ++r) {
      rows[r] = static_cast<int64_t>(rng.uniform() * static_cast<double>(left + 1));
      rows[r] = std::min(rows[r], left);
      left -= rows[r];
    }
    rows[W - 1] = left;
  }
  for (auto& owner : l.muon_owner)
    for (int& o : owner) o = std::min(W - 1, static_cast<int>(rng.uniform() * W));
  return l;
}

// Every step under another layout: the equal one, the one of speeds 3:1(:2), a random one. The
// parameters equal one process's (bit for bit at W = 2, whose sums do not depend on the order);
// every rank launches the same collectives; the state held adds up to the whole state.
TEST(MuonAdamWLayout, AnyLayoutAndAChangeBetweenStepsGiveTheSingleProcessParameters) {
  for (int W : {2, 3}) {
    SCOPED_TRACE("W " + std::to_string(W));
    ParamSet init = make_params();
    Rng rng0(800 + W);
    init.fill_params(rng0, -0.5, 0.5);
    const Grads grads = make_grads(init, W, 900 + W);
    const ParamSet ref = run_single(W, init, grads);
    std::vector<ParamSet> ranks(W, init);
    std::vector<size_t> held(W), whole(W), moved(W);
    const std::vector<uint64_t> launched = on_ranks(W, [&](int r, Communicator& comm) {
      MuonAdamW opt(ranks[r].views(), config(), &comm);
      Rng rng(77);  // the same on every rank
      std::vector<double> speeds = {3.0, 1.0, 2.0};
      speeds.resize(W);
      for (int s = 0; s < kSteps; ++s) {
        if (s == 1) opt.set_layout(opt.layout_for(speeds));
        if (s == 2) opt.set_layout(random_layout(opt, rng));
        for (size_t i = 0; i < init.names.size(); ++i) ranks[r].set_grad(i, grads[s][r][i]);
        opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W);
        if (s == 2) moved[r] = opt.last_moved_floats();
      }
      held[r] = opt.state_floats();
      whole[r] = opt.whole_state_floats();
    });
    for (int r = 0; r < W; ++r) {
      EXPECT_EQ(launched[r], launched[0]);
      for (size_t i = 0; i < init.names.size(); ++i) {
        if (W == 2)
          EXPECT_EQ(ranks[r].p[i], ref.p[i]) << "rank " << r << " " << init.names[i];
        else
          EXPECT_LE(testing::rel_max_err(ranks[r].p[i], ref.p[i]), 1e-6) << "rank " << r << " " << init.names[i];
      }
    }
    // sharded state adds up to the whole state (small AdamW tensors and the embedding tables are
    // held by every rank)
    size_t small = 0;
    for (size_t i = 0; i < init.names.size(); ++i)
      if ((init.p[i].size() < 1024 || is_table(init.names[i])) && init.names[i].rfind("transformer.h.", 0) != 0)
        small += 2 * init.p[i].size();
    EXPECT_EQ(std::accumulate(held.begin(), held.end(), size_t{0}) - (W - 1) * small, whole[0]);
    EXPECT_GT(std::accumulate(moved.begin(), moved.end(), size_t{0}), 0u);
  }
}

// rebalance(): switches to the layout of the speeds when that is at least min_gain faster, then
// stays; the work per rank follows the speeds; unmeasured (zero) speeds change nothing.
TEST(MuonAdamWLayout, RebalanceFollowsTheSpeedsWithHysteresis) {
  ParamSet init = make_params();
  Rng rng0(1000);
  init.fill_params(rng0, -0.5, 0.5);
  std::vector<ParamSet> ranks(2, init);
  std::vector<std::vector<int>> changed(2);
  std::vector<std::vector<double>> work(2);
  on_ranks(2, [&](int r, Communicator& comm) {
    MuonAdamW opt(ranks[r].views(), config(), &comm);
    changed[r].push_back(opt.rebalance({0.0, 1.0}));  // rank 0 not measured yet
    changed[r].push_back(opt.rebalance({3.0, 1.0}));  // 3:1: the slow rank gets about a quarter
    work[r] = opt.work_per_rank(opt.layout());
    changed[r].push_back(opt.rebalance({3.0, 1.0}));  // the same speeds: no change
    changed[r].push_back(opt.rebalance({3.2, 1.0}));  // under the 10% gain: no change
    changed[r].push_back(opt.rebalance({1.0, 1.0}));  // equal again: back
  });
  EXPECT_EQ(changed[0], (std::vector<int>{0, 1, 0, 0, 1}));
  EXPECT_EQ(changed[1], changed[0]);
  const double share1 = work[0][1] / (work[0][0] + work[0][1]);
  EXPECT_GT(share1, 0.15);
  EXPECT_LT(share1, 0.35);
}

// floats_leaving() counts every float that changes rank (each is sent once and received once:
// the ranks' last_moved_floats add up to twice it). A move must pay for itself: with the move's
// measured rate, speeds that swap between two nearly equal ranks every step (a loaded machine)
// move nothing, where without costs the state went back and forth every step; a cheap move, or
// the first one (no rate measured yet), is made.
TEST(MuonAdamWLayout, RebalanceMovesOnlyWhenTheMovePaysForItself) {
  ParamSet init = make_params();
  Rng rng0(1050);
  init.fill_params(rng0, -0.5, 0.5);
  std::vector<ParamSet> ranks(2, init);
  std::vector<size_t> leaving(2), moved(2), recorded(2);
  std::vector<int> swaps_costed(2), swaps_free(2);
  std::vector<std::vector<int>> changed(2);
  on_ranks(2, [&](int r, Communicator& comm) {
    MuonAdamW opt(ranks[r].views(), config(), &comm);
    const std::vector<double> a{1.25, 1.0}, b{1.0, 1.25};
    const OptLayout to_a = opt.layout_for(a);
    leaving[r] = opt.floats_leaving(opt.layout(), to_a);
    MuonAdamW::MoveCosts costs;
    costs.opt_seconds = {0.2, 0.2};
    // the move to `a` costs 100 s: no gain of a 0.2 s step repays it in 20 steps
    costs.seconds_per_float = 100.0 / static_cast<double>(leaving[r]);
    changed[r].push_back(opt.rebalance(a, 0.1, &costs));
    // swapping speeds, a move costed at 10 s (50 of these 0.2 s optimizer steps; the swaps save
    // about a quarter of one per step): nothing moves
    costs.seconds_per_float = 10.0 / static_cast<double>(leaving[r]);
    for (int i = 0; i < 10; ++i) swaps_costed[r] += opt.rebalance(i % 2 ? b : a, 0.1, &costs);
    // 1 ms a move: it pays
    costs.seconds_per_float = 1e-3 / static_cast<double>(leaving[r]);
    changed[r].push_back(opt.rebalance(a, 0.1, &costs));
    moved[r] = opt.last_moved_floats();
    recorded[r] = opt.last_floats_leaving();
    // not costed (the first move of a run): the swaps move the state every time
    for (int i = 0; i < 10; ++i) swaps_free[r] += opt.rebalance(i % 2 ? a : b, 0.1, nullptr);
  });
  EXPECT_GT(leaving[0], 0u);
  EXPECT_EQ(leaving[1], leaving[0]);
  EXPECT_EQ(moved[0] + moved[1], 2 * leaving[0]);
  EXPECT_EQ(recorded[0], leaving[0]);  // what set_layout records for the move's rate
  EXPECT_EQ(recorded[1], leaving[0]);
  EXPECT_EQ(changed[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(changed[1], changed[0]);
  EXPECT_EQ(swaps_costed[0], 0);
  EXPECT_EQ(swaps_free[0], 10);
  EXPECT_EQ(swaps_costed[1], swaps_costed[0]);
  EXPECT_EQ(swaps_free[1], swaps_free[0]);
}

// A run saved under an uneven layout (speeds 3:1) resumes at 1, 2 (another layout) and 3 ranks
// and continues the one-process run; shards of the earlier format (no layout recorded, Muon
// tensors padded to ceil(K/W) matrices, embedding tables split by rows) assemble to the same whole
// state; a rank's own shard loads under its own layout, and one of another layout (the 3:1 one,
// or the earlier format's split tables) is refused by load_state.
TEST(MuonAdamWLayout, SavedUnderAnUnevenLayoutResumesAtAnyWorldSizeAndLayout) {
  ParamSet init = make_params();
  Rng rng0(1100);
  init.fill_params(rng0, -0.5, 0.5);
  const int W0 = 2;
  const Grads g0 = make_grads(init, W0, 1200);
  std::vector<ParamSet> a(W0, init);
  std::vector<StFile> shards(W0), equal_shards(W0);
  on_ranks(W0, [&](int r, Communicator& comm) {
    MuonAdamW opt(a[r].views(), config(), &comm);
    for (int s = 0; s < kSteps; ++s) {
      if (s == 1) opt.set_layout(opt.layout_for({3.0, 1.0}));
      for (size_t i = 0; i < init.names.size(); ++i) a[r].set_grad(i, g0[s][r][i]);
      opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W0);
    }
    shards[r] = to_file(opt.state_entries(), r, opt.state_metadata());
    opt.set_layout(opt.equal_layout());
    equal_shards[r] = to_file(opt.state_entries(), r, opt.state_metadata());
  });
  ParamSet probe = init;
  MuonAdamW one(probe.views(), config());
  const MuonAdamW::WholeState whole = one.assemble_whole_state(shards);
  EXPECT_EQ(one.assemble_whole_state(equal_shards).values, whole.values);
  // the earlier format: no layout entry, Muon tensors padded with zero matrices to ceil(K/W),
  // the embedding tables' moments split in blocks of ceil(R/W) rows like any large tensor
  std::vector<StFile> padded = equal_shards;
  for (size_t r = 0; r < padded.size(); ++r) {
    StFile& f = padded[r];
    f.metadata.erase("layout");
    for (auto& [name, t] : f.tensors) {
      const bool table_moment =
          (name.rfind("adamw.transformer.wte.", 0) == 0 || name.rfind("adamw.value_embeds.0.", 0) == 0) &&
          name.find(".step") == std::string::npos;
      if (table_moment) {
        const int64_t R = t.shape[0], c = (R + W0 - 1) / W0;
        const int64_t first = std::min<int64_t>(R, static_cast<int64_t>(r) * c);
        const int64_t rows = std::min<int64_t>(R, first + c) - first;
        const size_t per = t.bytes.size() / static_cast<size_t>(R);
        t.bytes = std::vector<uint8_t>(t.bytes.begin() + first * static_cast<int64_t>(per),
                                       t.bytes.begin() + (first + rows) * static_cast<int64_t>(per));
        t.shape[0] = rows;
      }
      if (name.rfind("muon.", 0) == 0) {
        const int64_t K = name.find("c_v.") != std::string::npos      ? 1
                          : name.find("ve_gate") != std::string::npos ? 2
                                                                      : 3;
        const size_t per = t.shape[0] > 0 ? t.bytes.size() / static_cast<size_t>(t.shape[0]) : t.bytes.size();
        const int64_t c = (K + W0 - 1) / W0;
        if (t.shape[0] == 0) {  // an empty tensor: its per-matrix size from the shape
          size_t n = sizeof(float);
          for (size_t d = 1; d < t.shape.size(); ++d) n *= static_cast<size_t>(t.shape[d]);
          t.bytes.assign(static_cast<size_t>(c) * n, 0);
        } else {
          t.bytes.resize(static_cast<size_t>(c) * per, 0);
        }
        t.shape[0] = c;
      }
    }
  }
  EXPECT_EQ(one.assemble_whole_state(padded).values, whole.values);
  EXPECT_EQ(one.assemble_whole_state(padded).steps, whole.steps);

  for (int W1 : {1, 2, 3}) {
    SCOPED_TRACE("resumed by " + std::to_string(W1));
    const Grads g1 = make_grads(init, W1, 1300 + W1);
    // reference: one process for all 6 steps
    const ParamSet ref = run_single_phases(init, {&g0, &g1});
    std::vector<ParamSet> b(W1, a[0]);
    on_ranks(W1, [&](int r, Communicator& comm) {
      MuonAdamW opt(b[r].views(), config(), &comm);
      if (W1 == 2) {
        // a rank's own shard of the equal layout loads at its world size; the earlier format's
        // (its tables split by rows) needs the whole checkpoint
        opt.load_state(equal_shards[r]);
        const StFile mine = to_file(opt.state_entries(), r);
        for (const auto& [name, t] : equal_shards[r].tensors) EXPECT_EQ(mine.at(name).bytes, t.bytes) << name;
        EXPECT_THROW(opt.load_state(padded[r]), Error);
        opt.set_layout(opt.layout_for({1.0, 4.0}));  // another split than the saved one
      }
      opt.load_whole_state(whole);
      if (W1 == 2) {
        EXPECT_THROW(opt.load_state(shards[r]), Error);  // its own file, but of the 3:1 layout
        opt.load_whole_state(whole);
      }
      for (int s = 0; s < kSteps; ++s) {
        for (size_t i = 0; i < init.names.size(); ++i) b[r].set_grad(i, g1[s][r][i]);
        opt.step(kLrm[s], kMom[s], kWd[s], 1.f / W1);
      }
    });
    for (int r = 0; r < W1; ++r)
      for (size_t i = 0; i < init.names.size(); ++i)
        EXPECT_LE(testing::rel_max_err(b[r].p[i], ref.p[i]), 1e-6) << "rank " << r << " " << init.names[i];
  }
}

// A layout that does not fit is refused before anything moves, naming what is wrong.
TEST(MuonAdamWLayout, ABadLayoutIsNamed) {
  ParamSet init = make_params();
  ThreadHub hub(1);
  ThreadCommunicator comm(hub, 0);
  MuonAdamW opt(init.views(), config(), &comm);
  OptLayout l = opt.equal_layout();
  l.muon_owner[0][0] = 1;
  try {
    opt.set_layout(l);
    ADD_FAILURE() << "an owner out of range was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("owner rank 1"), std::string::npos) << e.what();
  }
  l = opt.equal_layout();
  l.adam_rows[0] = {1};
  EXPECT_THROW(opt.set_layout(l), Error);           // a small tensor is not split
  EXPECT_THROW(opt.layout_for({1.0, 2.0}), Error);  // two speeds for one rank
  EXPECT_EQ(opt.layout(), opt.equal_layout());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MuonAdamWDist, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace nanochat
