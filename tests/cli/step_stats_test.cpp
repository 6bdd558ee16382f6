// The step's statistics and the resume claims through the binary (docs/architecture.md "One step").
//  * The logged loss is the step's token-weighted mean over all its rows, so runs of the same rows
//    under different splits (1 rank in micro-batches of 2 rows, 2 ranks in micro-batches of 3)
//    log the same loss per step up to rounding.
//  * Resume is exact (same losses bit for bit, same weights byte for byte) with --balance even and
//    an unchanged split; resumed under another split (here another device batch) it continues the
//    run up to rounding (losses and weights within the world-size tests' tolerance).
//  * Ranks started with different --depth and --resume-from-step stop at the start-up agreement
//    naming the flag, before resume's weight broadcast of mismatched size.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "nanochat/core/safetensors.h"
#include "support/cli_util.h"
#include "support/weights_compare.h"

using namespace nctest;

namespace {

// 12 rows of T=64 per step, depth 3 (see dist_train_test.cpp for why depth 3 and no weight decay).
const char* kRun =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --total-batch-size 768 --eval-every -1 --sample-every -1 --core-metric-every -1"
    " --threads 1 --model-tag t --num-iterations 6 --warmup-steps 1 --weight-decay 0";

std::string two_ranks() {
  return " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(free_port());
}

StFile weights_at(const BaseDir& b, int step) {
  char name[64];
  std::snprintf(name, sizeof name, "/model_%06d.safetensors", step);
  return load_safetensors(b.ckpt() + name);
}

// Relative difference of two losses.
double rel(double a, double b) { return std::fabs(a - b) / std::fabs(a); }

}  // namespace

TEST(StepStats, TheLoggedLossDoesNotDependOnTheSplit) {
  BaseDir one("nc_ss_one"), two("nc_ss_two");
  auto r1 = run(one, std::string(kRun) + " --device-batch-size 2");
  ASSERT_EQ(r1.code, 0) << r1.out;
  // rank 0 runs rows 0-5 as 3+3, rank 1 rows 6-11 as 3+3: no micro-batch is the one-rank run's
  auto r2 = run(two, two_ranks() + kRun + " --device-batch-size 3 --balance even");
  ASSERT_EQ(r2.code, 0) << r2.out;
  const auto l1 = losses(one.ckpt() + "/metrics.jsonl"), l2 = losses(two.ckpt() + "/metrics.jsonl");
  ASSERT_EQ(l1.size(), 6u);
  ASSERT_EQ(l2.size(), 6u);
  double worst = 0;
  for (const auto& [step, loss] : l1) worst = std::max(worst, rel(loss, l2.at(step)));
  std::printf("max relative loss difference, 1 rank x B=2 vs 2 ranks x B=3: %.3g\n", worst);
  EXPECT_LE(worst, 1e-5);
  EXPECT_LE(max_rel_diff(weights_at(one, 6), weights_at(two, 6)), 1e-4);
}

TEST(StepStats, ResumeIsExactWithAnUnchangedSplitAndUpToRoundingWithAnother) {
  BaseDir b("nc_ss_resume");
  const std::string even = two_ranks() + kRun + " --device-batch-size 2 --balance even";
  auto straight = run(b, even + " --save-every 3");
  ASSERT_EQ(straight.code, 0) << straight.out;
  const auto l_straight = losses(b.ckpt() + "/metrics.jsonl");
  ASSERT_EQ(l_straight.size(), 6u);
  const std::string w_straight = slurp(b.ckpt() + "/model_000006.safetensors");
  const StFile final_straight = weights_at(b, 6);
  // the same split: bit-identical
  auto same = run(b, two_ranks() + kRun + " --device-batch-size 2 --balance even --resume-from-step 3");
  ASSERT_EQ(same.code, 0) << same.out;
  EXPECT_NE(same.out.find("Resumed from step 3"), std::string::npos) << same.out;
  const auto l_same = losses(b.ckpt() + "/metrics.jsonl");
  for (int64_t s = 3; s < 6; ++s) EXPECT_EQ(l_same.at(s), l_straight.at(s)) << "step " << s;
  EXPECT_TRUE(slurp(b.ckpt() + "/model_000006.safetensors") == w_straight) << "final weights differ";
  // another split of the same rows (one rank, micro-batches of 3): equal up to rounding
  auto other = run(b, std::string(kRun) + " --device-batch-size 3 --resume-from-step 3");
  ASSERT_EQ(other.code, 0) << other.out;
  const auto l_other = losses(b.ckpt() + "/metrics.jsonl");
  for (int64_t s = 3; s < 6; ++s) EXPECT_LE(rel(l_other.at(s), l_straight.at(s)), 1e-5) << "step " << s;
  EXPECT_LE(max_rel_diff(final_straight, weights_at(b, 6)), 1e-4);
}

// Rank 1 has another --depth: before, rank 0's resume broadcast the weights of its model to a
// rank expecting another size; now the agreement runs first and names the flag on both ranks.
TEST(StepStats, RanksWithAnotherDepthStopAtTheAgreementBeforeResuming) {
  BaseDir b("nc_ss_depth");
  auto saved = run(b, std::string(kRun) + " --device-batch-size 2 --num-iterations 3");
  ASSERT_EQ(saved.code, 0) << saved.out;
  std::string flags0 = std::string(kRun) + " --device-batch-size 2 --resume-from-step 3";
  std::string flags1 = flags0;
  flags1.replace(flags1.find("--depth 3"), 9, "--depth 4");
  const std::string port = std::to_string(free_port());
  auto env = [&](int r) {
    return "RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) +
           " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
           " NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_COLLECTIVE_TIMEOUT=60";
  };
  Result r0, r1;
  std::thread t0([&] { r0 = run(b, flags0, env(0)); });
  std::thread t1([&] { r1 = run(b, flags1, env(1)); });
  t0.join();
  t1.join();
  for (const Result* r : {&r0, &r1}) {
    EXPECT_NE(r->code, 0);
    EXPECT_NE(r->out.find("base-train flags"), std::string::npos) << r->out;
    EXPECT_NE(r->out.find("depth: 3 on rank 0"), std::string::npos) << r->out;
    EXPECT_EQ(r->out.find("Resumed from step"), std::string::npos) << r->out;
  }
}
