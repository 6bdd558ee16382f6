#include "nanochat/plan/schedules.h"

#include <gtest/gtest.h>

using namespace nanochat;

// Worked values of docs/nanochat.md 3.4 (runcpu.sh: N = 5000, defaults for the rest).
TEST(Schedules, RuncpuLrMultiplier) {
  LrSchedule s;
  s.num_iterations = 5000;
  EXPECT_EQ(s.warmdown_iters(), 3250);
  EXPECT_NEAR(s.lr_multiplier(0), 0.025, 1e-12);
  EXPECT_NEAR(s.lr_multiplier(39), 1.0, 1e-12);
  EXPECT_NEAR(s.lr_multiplier(1750), 1.0, 1e-12);
  EXPECT_NEAR(s.lr_multiplier(1751), 0.99970769, 1e-8);
  EXPECT_NEAR(s.lr_multiplier(3000), 0.63461538, 1e-8);
  EXPECT_NEAR(s.lr_multiplier(4999), 0.05029231, 1e-8);
}

TEST(Schedules, RuncpuMuonMomentumAndWeightDecay) {
  LrSchedule s;
  s.num_iterations = 5000;
  EXPECT_NEAR(s.muon_momentum(0), 0.85, 1e-12);
  EXPECT_NEAR(s.muon_momentum(399), 0.9697, 1e-12);
  EXPECT_NEAR(s.muon_momentum(1000), 0.97, 1e-12);
  EXPECT_NEAR(s.muon_momentum(1751), 0.96997846, 1e-8);
  EXPECT_NEAR(s.muon_momentum(4999), 0.90002154, 1e-8);
  const double wd = 0.2349029;
  EXPECT_NEAR(s.muon_weight_decay(0, wd), 0.23490293, 1e-7);
  EXPECT_NEAR(s.muon_weight_decay(1750, wd), 0.17077331, 1e-7);
  EXPECT_NEAR(s.muon_weight_decay(4999, wd), 2.32e-08, 1e-9);
}

TEST(Schedules, RoundHalfEvenLikePython) {
  EXPECT_EQ(round_half_even(0.5), 0.0);
  EXPECT_EQ(round_half_even(1.5), 2.0);
  EXPECT_EQ(round_half_even(2.5), 2.0);
  EXPECT_EQ(round_half_even(-0.5), 0.0);
  // warmdown_iters = round(0.65 * N): N = 10 -> 6.5 -> 6 (half-to-even), N = 30 -> 19.5 -> 20
  LrSchedule s;
  s.num_iterations = 10;
  EXPECT_EQ(s.warmdown_iters(), 6);
  s.num_iterations = 30;
  EXPECT_EQ(s.warmdown_iters(), 20);
}

TEST(Schedules, SmallHorizonMomentumWarmupWins) {
  // With N = 20 (< 400) the warmup branch of the momentum schedule applies to every step.
  LrSchedule s;
  s.num_iterations = 20;
  EXPECT_NEAR(s.muon_momentum(19), 0.85 + 0.12 * 19 / 400.0, 1e-12);
}
