// Ranks of different speeds through the binary: the steps' rows are dealt by measured speed
// (train/balance.h), re-planned mid-run, down to a rank with no rows, with other device batch
// sizes per rank; the parameters still equal the one-rank run's (the tolerance of
// dist_train_test.cpp), and the step line shows each rank's share, compute and wait.
// A slower machine is NANOCHAT_TEST_FAULT=slow:<rank>:<factor> (it sleeps after each micro-batch).
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <thread>

#include "nanochat/core/safetensors.h"
#include "support/cli_util.h"
#include "support/weights_compare.h"

using namespace nctest;

namespace {

// 12 rows of T=64 per step (6 micro-batches of B=2), depth 3 (see dist_train_test.cpp for why).
const char* kTrain =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --total-batch-size 768 --eval-every -1 --sample-every -1 --core-metric-every -1"
    " --threads 1 --model-tag t --num-iterations 5 --warmup-steps 1 --weight-decay 0";

std::string launch(int W) {
  return " run --nproc-per-node " + std::to_string(W) + " --threads-per-rank 1 --master-port " +
         std::to_string(free_port());
}

StFile final_weights(const BaseDir& b) { return load_safetensors(b.ckpt() + "/model_000005.safetensors"); }

// The one-rank run every test compares with (device batch 2).
const StFile& one_rank_weights() {
  static BaseDir b("nc_ur_w1");
  static StFile w = [] {
    auto r = run(b, std::string(kTrain) + " --device-batch-size 2");
    EXPECT_EQ(r.code, 0) << r.out;
    return final_weights(b);
  }();
  return w;
}

// Each rank's (share %, compute s, wait s) of step `step`'s log line.
struct RankPart {
  int share;
  double compute, wait;
};
std::vector<RankPart> rank_parts(const std::string& out, int step) {
  char key[32];
  std::snprintf(key, sizeof key, "step %05d/", step);
  const auto at = out.find(key);
  if (at == std::string::npos) return {};
  const std::string line = out.substr(at, out.find('\n', at) - at);
  std::vector<RankPart> parts;
  const std::regex re("r[0-9]+ ([0-9]+)% ([0-9.]+)s\\+([0-9.]+)s");
  for (std::sregex_iterator it(line.begin(), line.end(), re), end; it != end; ++it)
    parts.push_back({std::stoi((*it)[1]), std::stod((*it)[2]), std::stod((*it)[3])});
  return parts;
}

}  // namespace

// Rank 1 five times slower: after the even first step it gets fewer rows (a re-plan mid-run), a
// sixth or so of the 12 by the last step (1-3 rows: the measured ratio moves with the load of the
// machine, 5:1 on an idle one, up to 12:1 on a loaded one) and a smaller part of the optimizer's
// work (its state moved mid-run), and the parameters equal the one-rank run's.
TEST(UnequalRanks, ASlowRankGetsFewerRowsAndTheRunEqualsOneRank) {
  BaseDir b("nc_ur_slow");
  auto r = run(b, launch(2) + kTrain + " --device-batch-size 2", "NANOCHAT_TEST_FAULT=slow:1:5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("first split 50% / 50%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Rows per rank from step 1 on: "), std::string::npos) << r.out;  // re-planned at once
  // the optimizer's work follows the speeds too: its state moved to the new owners mid-run (the
  // step it moves at depends on how steady the first measurements are on a loaded machine)
  EXPECT_NE(r.out.find("Optimizer work per rank from step "), std::string::npos) << r.out;
  const auto p0 = rank_parts(r.out, 0), p4 = rank_parts(r.out, 4);
  ASSERT_EQ(p0.size(), 2u) << r.out;
  ASSERT_EQ(p4.size(), 2u) << r.out;
  EXPECT_EQ(p0[1].share, 50);
  EXPECT_GE(p4[1].share, 8) << r.out;  // 1 to 3 rows of 12
  EXPECT_LE(p4[1].share, 25) << r.out;
  EXPECT_LE(max_rel_diff(one_rank_weights(), final_weights(b)), 1e-4);
}

// Rank 2 twenty times slower gets no rows at all, still takes part in every collective, and the
// parameters equal the one-rank run's.
TEST(UnequalRanks, ARankWithNoRowsStillTakesPartAndTheRunEqualsOneRank) {
  BaseDir b("nc_ur_zero");
  auto r = run(b, launch(3) + kTrain + " --device-batch-size 2", "NANOCHAT_TEST_FAULT=slow:2:20");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto p3 = rank_parts(r.out, 3);
  ASSERT_EQ(p3.size(), 3u) << r.out;
  EXPECT_EQ(p3[2].share, 0) << r.out;
  EXPECT_EQ(p3[0].share + p3[1].share, 100) << r.out;
  EXPECT_LE(max_rel_diff(one_rank_weights(), final_weights(b)), 1e-4);
}

// Ranks started by hand with other device batch sizes (a node with less memory runs smaller
// micro-batches of the same rows): they agree, train, and reach the one-rank run's parameters.
TEST(UnequalRanks, RanksWithOtherDeviceBatchSizesTrainTogether) {
  BaseDir b("nc_ur_batch");
  const std::string port = std::to_string(free_port());
  auto env = [&](int r) {
    return "RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) +
           " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
           " NANOCHAT_RENDEZVOUS_TIMEOUT=60";
  };
  Result r0, r1;
  std::thread t0([&] { r0 = run(b, std::string(kTrain) + " --device-batch-size 4", env(0)); });
  std::thread t1([&] { r1 = run(b, std::string(kTrain) + " --device-batch-size 2", env(1)); });
  t0.join();
  t1.join();
  ASSERT_EQ(r0.code, 0) << r0.out << r1.out;
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_NE(r0.out.find("All 2 ranks agree"), std::string::npos) << r0.out;
  EXPECT_NE(r0.out.find("device batch per rank: [4,2]"), std::string::npos) << r0.out;
  EXPECT_LE(max_rel_diff(one_rank_weights(), final_weights(b)), 1e-4);
}

// An even split with rank 1 eight times slower: rank 0's wait in the step line is the time it spends
// waiting for rank 1 (in the token count all-reduce, the optimizer's collectives), rank 1's is small
// (summed over steps 1-4, so that a moment of load on a busy test machine does not decide).
TEST(UnequalRanks, TheStepLineShowsTheWaitForASlowerRank) {
  BaseDir b("nc_ur_wait");
  auto r = run(b, launch(2) + kTrain + " --device-batch-size 2 --balance even", "NANOCHAT_TEST_FAULT=slow:1:8");
  ASSERT_EQ(r.code, 0) << r.out;
  double behind = 0, wait0 = 0, wait1 = 0;
  for (int step : {1, 2, 3, 4}) {
    const auto p = rank_parts(r.out, step);
    ASSERT_EQ(p.size(), 2u) << r.out;
    EXPECT_EQ(p[0].share, 50);
    behind += p[1].compute - p[0].compute;  // what rank 0 must wait for
    wait0 += p[0].wait;
    wait1 += p[1].wait;
  }
  EXPECT_GT(behind, 0.2) << r.out;
  EXPECT_GE(wait0, 0.7 * behind) << r.out;
  EXPECT_LT(wait1, 0.5 * wait0) << r.out;
}

// With an even split and rank 1 four times slower, the job is slower than rank 0 alone would be:
// it says so once, naming the rank and what to do.
TEST(UnequalRanks, AJobThatWouldBeFasterWithoutARankSaysSo) {
  BaseDir b("nc_ur_note");
  std::string flags = std::string(kTrain) + " --device-batch-size 2 --balance even";
  flags.replace(flags.find("--num-iterations 5"), 18, "--num-iterations 12");
  auto r = run(b, launch(2) + flags, "NANOCHAT_TEST_FAULT=slow:1:4");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string note = "NOTE: this job would be faster without rank 1";
  ASSERT_NE(r.out.find(note), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(note), r.out.rfind(note)) << "said more than once";
  EXPECT_NE(r.out.find("leave that node out, or raise --total-batch-size"), std::string::npos) << r.out;
}
