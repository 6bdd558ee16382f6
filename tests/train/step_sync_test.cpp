// StepSync (train/sync.h) driven the way the training loop drives it, by two implementations: the
// product's Zero2Sync (two ranks as threads, even and uneven micro-batches, by speed) and the
// test's SoloSync (one process, no communicator, tests/support/solo_sync.h). Independent truth: the
// one-process run. Every split reports the step's token-weighted mean loss of the one-process
// run up to rounding, and reaches its weights within the world-size tests' tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "nanochat/core/rng.h"
#include "nanochat/train/zero2_sync.h"
#include "support/solo_sync.h"
#include "support/thread_communicator.h"
#include "support/tiny_gpt.h"

using namespace nanochat;
using nanochat::testing::ThreadCommunicator;
using nanochat::testing::ThreadHub;

namespace {

constexpr int T = 8, R = 6, kSteps = 3;

ModelConfig tiny() {
  ModelConfig c = nctest::tiny_gpt_config();
  c.sequence_len = T;
  return c;
}
void init(GPT& m) { nctest::init_tiny_gpt(m); }

std::vector<OptParam> params_of(GPT& m) {
  std::vector<OptParam> ops;
  for (const auto& p : m.params())
    ops.push_back({p.name, p.shape, m.param_data() + p.offset, m.grad_data() + p.offset});
  return ops;
}

OptimConfig optim() {
  OptimConfig o;
  o.weight_decay = 0;  // see tests/cli/dist_train_test.cpp: cautious decay flips on rounding noise
  o.model_dim = 32;
  return o;
}

// The rows of every step: R rows of T inputs and T targets, some targets ignored (-1).
struct Rows {
  std::vector<int32_t> x, y;
};
std::vector<Rows> make_data() {
  Rng rng(21);
  std::vector<Rows> d(kSteps);
  for (auto& s : d) {
    s.x.resize(R * T);
    s.y.resize(R * T);
    for (auto& v : s.x) v = static_cast<int32_t>(rng.below(40));
    for (size_t i = 0; i < s.y.size(); ++i) s.y[i] = (i % 7 == 3) ? -1 : static_cast<int32_t>(rng.below(40));
  }
  return d;
}

struct SyncRun {
  std::vector<double> losses;  // StepStats::loss per step
  std::vector<float> weights;  // after the last step
};

// The training loop's use of a StepSync (train/train_loop.cpp train_step), without the I/O.
SyncRun drive(StepSync& sync, GPT& model, const std::vector<Rows>& data) {
  SyncRun out;
  for (int64_t step = 0; step < kSteps; ++step) {
    const StepShare share = sync.begin_step(step);
    int64_t row = share.first_row;
    for (size_t m = 0; m < share.micro_batches.size(); ++m) {
      const int n = share.micro_batches[m];
      sync.micro_batch(static_cast<int>(m), data[step].x.data() + row * T, data[step].y.data() + row * T, n, T);
      row += n;
    }
    RankStep mine;
    mine.compute = 1.0;  // even "speeds": the balancer keeps its split
    mine.dt = 1.0;
    mine.opt_compute = sync.update({1.f, 0.95f, 0.f});
    const StepStats st = sync.finish(mine);
    EXPECT_EQ(st.ranks.size(), static_cast<size_t>(sync.world_size()));
    int64_t rows = 0;
    for (int64_t r : st.split) rows += r;
    EXPECT_EQ(rows, R);
    EXPECT_TRUE(sync.in_sync(step + 1));
    out.losses.push_back(st.loss);
  }
  out.weights.assign(model.param_data(), model.param_data() + model.num_params());
  return out;
}

SyncRun solo(int device_batch) {
  GPT m(tiny());
  init(m);
  MuonAdamW opt(params_of(m), optim(), nullptr);
  nctest::SoloSync sync(m, opt, R, device_batch);
  return drive(sync, m, make_data());
}

// Two ranks with device batches `B`, rows dealt by `mode`; rank 0's run.
SyncRun zero2(const std::vector<int>& B, BalanceMode mode) {
  ThreadHub hub(2);
  std::vector<SyncRun> runs(2);
  std::vector<std::thread> th;
  const std::vector<Rows> data = make_data();
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      ThreadCommunicator comm(hub, r);
      GPT m(tiny());
      init(m);
      Zero2Sync sync(m, optim(), comm, B, R, mode);
      runs[static_cast<size_t>(r)] = drive(sync, m, data);
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(runs[0].losses, runs[1].losses) << "every rank gets the same step statistics";
  EXPECT_EQ(runs[0].weights, runs[1].weights) << "ZeRO-2 replicas are bit-identical";
  return runs[0];
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(a[i])));
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return d / mx;
}

}  // namespace

TEST(StepSync, EverySplitReportsTheOneProcessLossAndReachesItsWeights) {
  const SyncRun ref = solo(R);  // one micro-batch of all R rows
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(kSteps));
  // the one-process run with other micro-batches, and two ranks: even, uneven micro-batches, by speed
  const SyncRun solo2 = solo(2);
  const SyncRun even = zero2({3, 3}, BalanceMode::Even);
  const SyncRun uneven = zero2({1, 2}, BalanceMode::Even);
  const SyncRun speed = zero2({2, 3}, BalanceMode::Speed);
  int i = 0;
  for (const SyncRun* run : {&solo2, &even, &uneven, &speed}) {
    SCOPED_TRACE(i++);
    // step 0: the same weights, so the same per-row losses: only the summation order differs
    EXPECT_NEAR(run->losses[0], ref.losses[0], 1e-6 * ref.losses[0]);
    for (int s = 1; s < kSteps; ++s) EXPECT_NEAR(run->losses[s], ref.losses[s], 1e-5 * ref.losses[s]) << "step " << s;
    EXPECT_LE(max_rel(run->weights, ref.weights), 1e-4);
    double worst = 0;
    for (int s = 0; s < kSteps; ++s) worst = std::max(worst, std::fabs(run->losses[s] - ref.losses[s]) / ref.losses[s]);
    std::printf("split %d: max relative loss difference %.3g, parameters %.3g\n", i - 1, worst,
                max_rel(run->weights, ref.weights));
  }
  // the loss is the step's, not its last micro-batch's: it moves with training
  EXPECT_NE(ref.losses[0], ref.losses[kSteps - 1]);
}
