// Data-parallel base-train through the binary: 1, 2 and 3 ranks with the same global batch reach
// the same parameters after 5 steps (max abs difference <= 1e-4 x max magnitude, every tensor)
// (ZeRO-2 MuonAdamW over Gloo on loopback), whatever the split of the steps' rows between the
// ranks: even, by speed, changing mid-run, a rank with no rows, other device batch sizes; ranks
// started by hand that disagree on flags or data stop with one clear error on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "nanochat/core/safetensors.h"
#include "support/cli_util.h"
#include "support/weights_compare.h"

using namespace nctest;

namespace {

// B=2, T=64 rows; total batch 768 tokens = 12 rows = 6 micro-batches (1 rank x 6, 2 x 3, 3 x 2
// with an even split).
// Depth 3, not 2: at depth 2 the backout layer is the last one, the final norm cancels
// backout_lambda, and its gradient is pure rounding noise that Adam's sign-like first steps
// amplify differently for every summation order.
// --weight-decay 0: Muon's cautious weight decay applies lr*wd*p only where g*p >= 0, a
// discontinuous decision; where g*p is within rounding noise of 0 the ranks' different summation
// order flips it for that element (seen: one c_fc element off by lr*wd*p = 1.6e-5, 2.3e-4 of the
// tensor's max). The decay itself is tested bit-identical across world sizes in tests/optim.
const char* kDist =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 768 --eval-every -1 --sample-every -1 --core-metric-every -1"
    " --threads 1 --model-tag t --num-iterations 5 --warmup-steps 1 --weight-decay 0";

StFile final_weights(const BaseDir& b) { return load_safetensors(b.ckpt() + "/model_000005.safetensors"); }

}  // namespace

TEST(DistTrain, OneTwoAndThreeRanksReachTheSameParameters) {
  BaseDir b1("nc_dt_w1"), b2("nc_dt_w2"), b3("nc_dt_w3");
  auto r1 = run(b1, kDist);
  ASSERT_EQ(r1.code, 0) << r1.out;
  auto r2 =
      run(b2, " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(free_port()) + kDist);
  ASSERT_EQ(r2.code, 0) << r2.out;
  EXPECT_NE(r2.out.find("All 2 ranks agree"), std::string::npos) << r2.out;
  EXPECT_NE(r2.out.find("comm wait"), std::string::npos) << r2.out;
  auto r3 =
      run(b3, " run --nproc-per-node 3 --threads-per-rank 1 --master-port " + std::to_string(free_port()) + kDist);
  ASSERT_EQ(r3.code, 0) << r3.out;
  const StFile w1 = final_weights(b1), w2 = final_weights(b2), w3 = final_weights(b3);
  const double d12 = max_rel_diff(w1, w2, true), d13 = max_rel_diff(w1, w3, true);
  EXPECT_LE(d12, 1e-4) << "W=1 vs W=2";
  EXPECT_LE(d13, 1e-4) << "W=1 vs W=3 (uneven row shards of every AdamW matrix)";
  // every rank wrote its optimizer shard, and the run moved the weights
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(fs::exists(b3.ckpt() + "/optim_000005_rank" + std::to_string(r) + ".safetensors"));
  auto l1 = losses(b1.ckpt() + "/metrics.jsonl");
  EXPECT_LT(l1[4], l1[0]);
  std::printf("max relative parameter difference: W1-W2 %.3g, W1-W3 %.3g\n", d12, d13);
}

// Two ranks started by hand with torchrun's variables, one with a different --seed: both stop
// naming the differing flags; then with different data: both name the data manifest.
TEST(DistTrain, RanksThatDisagreeStopWithOneClearErrorEach) {
  BaseDir a("nc_dt_agree_a"), b("nc_dt_agree_b", 5);
  // `both`: flags of both ranks; `extra1`: of rank 1 only
  auto start_pair = [&](const BaseDir& d0, const BaseDir& d1, const std::string& both, const std::string& extra1) {
    const std::string port = std::to_string(free_port());
    auto env = [&](int r) {
      return "RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) +
             " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
             " NANOCHAT_RENDEZVOUS_TIMEOUT=60";
    };
    Result res0, res1;
    std::thread t0([&] { res0 = run(d0, std::string(kDist) + both, env(0)); });
    std::thread t1([&] { res1 = run(d1, std::string(kDist) + both + extra1, env(1)); });
    t0.join();
    t1.join();
    return std::make_pair(res0, res1);
  };
  auto [f0, f1] = start_pair(a, a, "", " --seed 7");
  EXPECT_NE(f0.code, 0);
  EXPECT_NE(f1.code, 0);
  EXPECT_NE(f0.out.find("base-train flags"), std::string::npos) << f0.out;
  EXPECT_NE(f1.out.find("base-train flags"), std::string::npos) << f1.out;
  auto [d0, d1] = start_pair(a, b, " --local-data", "");  // each rank reads its own shards
  EXPECT_NE(d0.code, 0);
  EXPECT_NE(d1.code, 0);
  EXPECT_NE(d0.out.find("data manifest"), std::string::npos) << d0.out;
  EXPECT_NE(d1.out.find("data manifest"), std::string::npos) << d1.out;
}

// Resuming at another world size and split: a 2-rank run (rank 1 three times slower, so the rows
// are dealt by speed) saved at step 3 and resumed by 3 ranks dealing evenly (and by 1 rank) ends
// where the 1-rank run does (the optimizer state is re-sharded; the one data stream carries over
// exactly).
TEST(DistTrain, ResumeAtAnotherWorldSizeContinuesTheRun) {
  BaseDir b1("nc_dt_rs_w1"), b2("nc_dt_rs_w2");
  auto r1 = run(b1, kDist);
  ASSERT_EQ(r1.code, 0) << r1.out;
  const StFile w1 = final_weights(b1);
  auto r2 = run(b2,
                " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(free_port()) + kDist +
                    " --save-every 3",
                "NANOCHAT_TEST_FAULT=slow:1:3");
  ASSERT_EQ(r2.code, 0) << r2.out;
  for (int W : {3, 1}) {
    SCOPED_TRACE("resumed by " + std::to_string(W) + " ranks");
    const std::string launch = W == 1 ? std::string()
                                      : " run --nproc-per-node " + std::to_string(W) +
                                            " --threads-per-rank 1 --master-port " + std::to_string(free_port());
    auto r = run(b2, launch + kDist + " --resume-from-step 3 --balance even");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("Re-sharded the optimizer state of 2 ranks for " + std::to_string(W) + " ranks"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("Resumed from step 3"), std::string::npos) << r.out;
    EXPECT_LE(max_rel_diff(w1, final_weights(b2)), 1e-4);
  }
  // a missing old shard: one clear error on every new rank (rank 0 tells the others), no hang
  fs::remove(b2.ckpt() + "/optim_000003_rank1.safetensors");
  auto bad = run(b2,
                 " run --nproc-per-node 3 --threads-per-rank 1 --master-port " + std::to_string(free_port()) + kDist +
                     " --resume-from-step 3",
                 "NANOCHAT_COLLECTIVE_TIMEOUT=600");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("optim_000003_rank1.safetensors is missing"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("[rank 1] nanochat: error: resuming the 2-rank checkpoint"), std::string::npos) << bad.out;
}

// Val bpb of given weights does not depend on the world size: every rank reads the one-rank val
// stream and evaluates every W-th batch. Same init: the step-0 values of 1, 2 and 3 ranks agree to
// the printed 6 decimals (nanochat's rank-strided val slices differ by ~2% here).
TEST(DistTrain, ValBpbDoesNotDependOnTheWorldSize) {
  std::string flags = std::string(kDist) + " --eval-every 5 --eval-tokens 768";
  flags = flags.replace(flags.find(" --eval-every -1"), std::strlen(" --eval-every -1"), "");
  std::vector<std::string> at0;
  for (int W : {1, 2, 3}) {
    BaseDir b("nc_dt_val" + std::to_string(W));
    const std::string launch = W == 1 ? std::string()
                                      : " run --nproc-per-node " + std::to_string(W) +
                                            " --threads-per-rank 1 --master-port " + std::to_string(free_port());
    auto r = run(b, launch + flags);
    ASSERT_EQ(r.code, 0) << r.out;
    const std::string key = "Step 00000 | Validation bpb: ";
    const auto pos = r.out.find(key);
    ASSERT_NE(pos, std::string::npos) << r.out;
    at0.push_back(r.out.substr(pos + key.size(), 8));
  }
  EXPECT_EQ(at0[1], at0[0]);
  EXPECT_EQ(at0[2], at0[0]);
}
