// DiLoCoSync (train/diloco_sync.h) driven as the training loop drives a StepSync. Independent truth:
//  * one node with --outer-lr 1 --outer-momentum 0 is the ZeRO-2 run bit for bit (the outer step
//    then applies exactly the node's own change);
//  * two nodes (ranks as threads): after a round the weights are theta0 - lr (D + mu D), D the
//    token-weighted mean of the changes each node makes alone on its rows (computed here by a
//    one-process run of each node's rows), for every wire dtype within its rounding;
//  * inside a round the nodes' weights differ (nothing is exchanged), at its end they are one.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/rng.h"
#include "nanochat/train/diloco_sync.h"
#include "nanochat/train/outer_wire.h"
#include "nanochat/train/zero2_sync.h"
#include "support/thread_communicator.h"
#include "support/tiny_gpt.h"

using namespace nanochat;
using nanochat::testing::ThreadCommunicator;
using nanochat::testing::ThreadHub;

namespace {

constexpr int T = 8, R = 6;

ModelConfig tiny() {
  ModelConfig c = nctest::tiny_gpt_config();
  c.sequence_len = T;
  return c;
}

OptimConfig optim() {
  OptimConfig o;
  o.weight_decay = 0;
  o.model_dim = 32;
  return o;
}

struct Rows {
  std::vector<int32_t> x, y;
};
std::vector<Rows> make_data(int steps) {
  Rng rng(5);
  std::vector<Rows> d(static_cast<size_t>(steps));
  for (auto& s : d) {
    s.x.resize(R * T);
    s.y.resize(R * T);
    for (auto& v : s.x) v = static_cast<int32_t>(rng.below(40));
    // rows 3..5 ignore more targets than rows 0..2: the nodes' token counts differ
    for (size_t i = 0; i < s.y.size(); ++i)
      s.y[i] = (i % (i < 3 * T ? 7 : 3) == 1) ? -1 : static_cast<int32_t>(rng.below(40));
  }
  return d;
}

TrainPlan diloco_plan(int64_t every, double lr, double mu, WireDtype wire, int64_t steps) {
  TrainPlan p;
  p.optim = optim();
  p.outer = OuterConfig{every, lr, mu, wire};
  p.num_iterations = steps;
  p.cadence = Cadence{-1, -1, -1, 0, -1, 0};
  p.balance = BalanceMode::Even;
  p.sync = SyncMode::Diloco;
  return p;
}

struct SyncRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;  // after each step
  std::vector<int64_t> tokens;              // this rank's valid targets, all steps
  std::vector<bool> times_of_this_step;     // StepStats' flag, each step
};

// The loop's use of a StepSync (train/train_loop.cpp train_step) for one step; `first`: the first
// row of each step's rows this sync sees (a node alone: its own rows only). Returns that step's
// loss, weights after it and this rank's valid targets in it.
SyncRun drive_step(StepSync& sync, const std::vector<Rows>& data, int64_t step, int first = 0) {
  SyncRun out;
  int64_t tokens = 0;
  const StepShare share = sync.begin_step(step);
  int64_t row = first + share.first_row;
  for (size_t m = 0; m < share.micro_batches.size(); ++m) {
    const int n = share.micro_batches[m];
    const int32_t* y = data[static_cast<size_t>(step)].y.data() + row * T;
    for (int i = 0; i < n * T; ++i) tokens += y[i] >= 0;
    sync.micro_batch(static_cast<int>(m), data[static_cast<size_t>(step)].x.data() + row * T, y, n, T);
    row += n;
  }
  RankStep mine;
  mine.compute = 1.0;
  mine.dt = 1.0;
  mine.opt_compute = sync.update({1.f, 0.95f, 0.f});
  const StepStats st = sync.finish(mine);
  out.losses.push_back(st.loss);
  out.times_of_this_step.push_back(st.times_of_this_step);
  out.tokens.push_back(tokens);
  return out;
}

// Every step of `data` (drive_step).
SyncRun drive(StepSync& sync, GPT& model, const std::vector<Rows>& data, int first = 0) {
  SyncRun out;
  int64_t tokens = 0;
  for (int64_t step = 0; step < static_cast<int64_t>(data.size()); ++step) {
    const SyncRun one = drive_step(sync, data, step, first);
    out.losses.push_back(one.losses[0]);
    out.times_of_this_step.push_back(one.times_of_this_step[0]);
    tokens += one.tokens[0];
    out.weights.emplace_back(model.param_data(), model.param_data() + model.num_params());
  }
  out.tokens.push_back(tokens);
  return out;
}

std::vector<float> initial_weights() {
  GPT m(tiny());
  nctest::init_tiny_gpt(m);
  return {m.param_data(), m.param_data() + m.num_params()};
}

// One process on `rows` rows per step starting at row `first` (a node alone): ZeRO-2 at world size 1.
SyncRun alone(const std::vector<Rows>& data, int first, int rows) {
  LocalCommunicator comm;
  GPT m(tiny());
  nctest::init_tiny_gpt(m);
  Zero2Sync sync(m, optim(), comm, {rows}, rows, BalanceMode::Even);
  return drive(sync, m, data, first);
}

// Two ranks, each its own node (or both on node 0); rank r's run.
std::vector<SyncRun> two_nodes(const TrainPlan& plan, const std::vector<Rows>& data,
                               const std::vector<int>& node_of_rank = {0, 1}) {
  ThreadHub hub(2);
  std::vector<SyncRun> runs(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      ThreadCommunicator comm(hub, r);
      GPT m(tiny());
      nctest::init_tiny_gpt(m);
      DiLoCoSync sync(m, plan, comm, {3, 3}, R, node_of_rank);
      runs[static_cast<size_t>(r)] = drive(sync, m, data);
    });
  for (auto& t : th) t.join();
  return runs;
}

}  // namespace

TEST(DiLoCo, OneNodeWithOuterLrOneAndNoMomentumIsTheZero2RunBitForBit) {
  const std::vector<Rows> data = make_data(5);
  LocalCommunicator c1, c2;
  GPT a(tiny()), b(tiny());
  nctest::init_tiny_gpt(a);
  nctest::init_tiny_gpt(b);
  Zero2Sync zero2(a, optim(), c1, {2}, R, BalanceMode::Even);
  DiLoCoSync diloco(b, diloco_plan(2, 1.0, 0.0, WireDtype::Float32, 5), c2, {2}, R, {0});
  const SyncRun ra = drive(zero2, a, data), rb = drive(diloco, b, data);
  EXPECT_EQ(ra.losses, rb.losses);
  for (size_t s = 0; s < ra.weights.size(); ++s) EXPECT_EQ(ra.weights[s], rb.weights[s]) << "after step " << s + 1;
  // and the outer step does act: with lr 0.7 and momentum 0.9 the weights leave the plain run's
  GPT c(tiny());
  nctest::init_tiny_gpt(c);
  LocalCommunicator c3;
  DiLoCoSync other(c, diloco_plan(2, 0.7, 0.9, WireDtype::Float32, 5), c3, {2}, R, {0});
  const SyncRun rc = drive(other, c, data);
  EXPECT_EQ(rc.weights[0], ra.weights[0]) << "before the first boundary nothing differs";
  EXPECT_NE(rc.weights[1], ra.weights[1]);
}

TEST(DiLoCo, TwoNodesTakeTheOuterStepOnTheTokenWeightedMeanOfTheirOwnChanges) {
  constexpr int kSteps = 3;
  const std::vector<Rows> data = make_data(kSteps);
  const double lr = 0.7, mu = 0.9;
  const std::vector<float> theta0 = initial_weights();
  const SyncRun n0 = alone(data, 0, 3), n1 = alone(data, 3, 3);
  const double w0 = static_cast<double>(n0.tokens[0]), w1 = static_cast<double>(n1.tokens[0]);
  ASSERT_NE(w0, w1);
  std::vector<double> expect(theta0.size());
  double max_d = 0;
  for (size_t i = 0; i < theta0.size(); ++i) {
    const double d = (w0 * (theta0[i] - n0.weights.back()[i]) + w1 * (theta0[i] - n1.weights.back()[i])) / (w0 + w1);
    max_d = std::max(max_d, std::fabs(d));
    expect[i] = theta0[i] - lr * (d + mu * d);
  }
  ASSERT_GT(max_d, 1e-4);
  for (WireDtype wire : {WireDtype::Float32, WireDtype::BFloat16, WireDtype::Int8}) {
    SCOPED_TRACE(wire_dtype_name(wire));
    const std::vector<SyncRun> runs = two_nodes(diloco_plan(kSteps, lr, mu, wire, kSteps), data);
    // inside the round each node trained alone on its rows
    EXPECT_EQ(runs[0].weights[0], n0.weights[0]);
    EXPECT_EQ(runs[1].weights[1], n1.weights[1]);
    EXPECT_NE(runs[0].weights[1], runs[1].weights[1]);
    // at its end: one model, the outer step of the weighted mean change
    EXPECT_EQ(runs[0].weights.back(), runs[1].weights.back());
    // the wire's rounding of each node's weighted change: float32 ~1e-7, bfloat16 2^-8, int8 1/254 of the largest
    const double tol = wire == WireDtype::Float32 ? 1e-5 : wire == WireDtype::BFloat16 ? 2 * 0.0039 : 2 * 0.0079;
    double worst = 0;
    for (size_t i = 0; i < expect.size(); ++i)
      worst = std::max(worst, std::fabs(runs[0].weights.back()[i] - expect[i]) - 1e-7 * std::fabs(expect[i]));
    EXPECT_LE(worst, tol * lr * (1 + mu) * max_d);
    std::printf("%s: largest difference from the closed form %.3g (largest change %.3g)\n", wire_dtype_name(wire),
                worst, max_d);
  }
}

namespace {

// --outer-overlap K in plain terms, in double, on each node's own inner steps (a one-process ZeRO-2
// run per node whose weights are set where the exchange lands): at a boundary every node's change
// from theta_outer goes out and the nodes train on; K steps later theta_outer, m take the outer
// step on the token-weighted mean and each node's weights become theta_outer minus what it trained
// since; a boundary at the last step waits (applying first what is still in flight).
std::vector<std::vector<std::vector<float>>> late_reference(const std::vector<Rows>& data, int64_t every, int64_t k,
                                                            double lr, double mu) {
  const std::vector<float> theta0 = initial_weights();
  const size_t n = theta0.size();
  std::vector<std::unique_ptr<LocalCommunicator>> comms;
  std::vector<std::unique_ptr<GPT>> models;
  std::vector<std::unique_ptr<Zero2Sync>> syncs;
  for (int q = 0; q < 2; ++q) {
    comms.push_back(std::make_unique<LocalCommunicator>());
    models.push_back(std::make_unique<GPT>(tiny()));
    nctest::init_tiny_gpt(*models.back());
    syncs.push_back(
        std::make_unique<Zero2Sync>(*models.back(), optim(), *comms.back(), std::vector<int>{3}, 3, BalanceMode::Even));
  }
  std::vector<double> G(theta0.begin(), theta0.end()), M(n, 0.0), mean(n), tokens(2, 0.0);
  std::vector<std::vector<float>> sent(2);
  int64_t apply_at = -1;
  auto outer = [&] {  // theta_outer, m <- the outer step on `mean`
    for (size_t i = 0; i < n; ++i) {
      M[i] = mu * M[i] + mean[i];
      G[i] = static_cast<float>(G[i] - lr * (mean[i] + mu * M[i]));
    }
  };
  auto land = [&] {  // the mean arrives: each node keeps what it trained since it sent
    outer();
    for (size_t q = 0; q < 2; ++q) {
      float* w = models[q]->param_data();
      for (size_t i = 0; i < n; ++i) w[i] = static_cast<float>(G[i] - (sent[q][i] - w[i]));
    }
    apply_at = -1;
  };
  const int64_t steps = static_cast<int64_t>(data.size());
  std::vector<std::vector<std::vector<float>>> out(2);
  for (int64_t step = 0; step < steps; ++step) {
    for (int q = 0; q < 2; ++q)  // node q's inner step on its rows 3q..3q+2
      tokens[static_cast<size_t>(q)] +=
          static_cast<double>(drive_step(*syncs[static_cast<size_t>(q)], data, step, 3 * q).tokens[0]);
    const int64_t done = step + 1;
    if (done % every == 0 || done == steps) {
      if (apply_at >= 0) land();  // the last step inside K steps of a send
      for (size_t i = 0; i < n; ++i) {
        mean[i] = 0;
        for (size_t q = 0; q < 2; ++q)
          mean[i] += tokens[q] / (tokens[0] + tokens[1]) * (G[i] - static_cast<double>(models[q]->param_data()[i]));
      }
      tokens.assign(2, 0.0);
      if (k > 0 && done < steps) {
        for (size_t q = 0; q < 2; ++q) sent[q].assign(models[q]->param_data(), models[q]->param_data() + n);
        apply_at = done + k;
      } else {
        outer();
        for (size_t q = 0; q < 2; ++q) std::copy(G.begin(), G.end(), models[q]->param_data());
      }
    } else if (done == apply_at) {
      land();
    }
    for (size_t q = 0; q < 2; ++q) out[q].emplace_back(models[q]->param_data(), models[q]->param_data() + n);
  }
  return out;
}

// Largest |a - b| over every node's weights after every step from `from` on.
double largest_difference(const std::vector<std::vector<std::vector<float>>>& a, const std::vector<SyncRun>& b,
                          size_t from = 0) {
  double worst = 0;
  for (size_t q = 0; q < 2; ++q)
    for (size_t s = from; s < a[q].size(); ++s)
      for (size_t i = 0; i < a[q][s].size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(a[q][s][i]) - b[q].weights[s][i]));
  return worst;
}

}  // namespace

// The step line's rank times (train/report.h): on one node of two ranks every step gathers both
// ranks' times of that step; with two nodes the other node's are of its last boundary (the line
// says so).
TEST(DiLoCo, TheStepsRankTimesAreOfThatStepOnOneNodeAndOfTheLastBoundaryAcrossNodes) {
  const std::vector<Rows> data = make_data(4);
  const TrainPlan plan = diloco_plan(2, 1.0, 0.0, WireDtype::Float32, 4);
  const std::vector<SyncRun> one = two_nodes(plan, data, {0, 0});
  for (const SyncRun& r : one) EXPECT_EQ(r.times_of_this_step, std::vector<bool>(4, true));
  EXPECT_EQ(one[0].weights.back(), one[1].weights.back()) << "one node's ranks hold one model";
  const std::vector<SyncRun> two = two_nodes(plan, data);
  for (const SyncRun& r : two) EXPECT_EQ(r.times_of_this_step, std::vector<bool>(4, false));
}

TEST(DiLoCo, AnOverlappedExchangeLandsKStepsLaterKeepingWhatEachNodeTrainedMeanwhile) {
  const double lr = 0.7, mu = 0.9;
  // (H, K, steps): boundaries 3 and 6 land after 4 and 7, 8 waits; and 3 lands after 5, 6 is sent
  // and the last step 7 lands it before its own exchange
  for (const auto& [every, k, steps] : std::vector<std::array<int64_t, 3>>{{3, 1, 8}, {3, 2, 7}}) {
    SCOPED_TRACE(::testing::Message() << "H " << every << ", K " << k << ", " << steps << " steps");
    const std::vector<Rows> data = make_data(static_cast<int>(steps));
    const auto want = late_reference(data, every, k, lr, mu);
    TrainPlan plan = diloco_plan(every, lr, mu, WireDtype::Float32, steps);
    plan.outer.overlap_steps = k;
    const std::vector<SyncRun> got = two_nodes(plan, data);
    const std::vector<SyncRun> waiting = two_nodes(diloco_plan(every, lr, mu, WireDtype::Float32, steps), data);
    double scale = 0;
    for (const auto& w : want[0])
      for (float v : w) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    const double worst = largest_difference(want, got), apart = largest_difference(want, waiting, 3);
    std::printf(
        "H %lld K %lld: largest difference from the reference %.3g, from the waiting run %.3g (weights up to "
        "%.3g)\n",
        static_cast<long long>(every), static_cast<long long>(k), worst, apart, scale);
    // float32 against double, grown by Muon's orthogonalisation over the steps: 1.9e-5 and 8.8e-5 in
    // the release build, 3.2e-5 and 1.8e-4 in the sanitizer build; a landing that keeps half the K
    // steps' progress is 4-6 away
    EXPECT_LE(worst, 1e-4 * scale);
    EXPECT_GT(apart, 100 * worst) << "the overlapped run must differ from the waiting one after the first boundary";
    // before the first boundary nothing differs; after it the nodes differ; at the last step they
    // are one model
    for (size_t q = 0; q < 2; ++q)
      for (int s = 0; s < 2; ++s)
        EXPECT_EQ(got[q].weights[static_cast<size_t>(s)], waiting[q].weights[static_cast<size_t>(s)]);
    EXPECT_NE(got[0].weights[2], got[1].weights[2]);
    EXPECT_NE(got[0].weights[3], got[1].weights[3]);
    EXPECT_EQ(got[0].weights.back(), got[1].weights.back());
  }
}
