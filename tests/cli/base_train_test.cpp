// End-to-end tests of `nanochat base-train` through the built binary on real text (the
// Pride and Prejudice sample shard): exact resume, atomic checkpoints under SIGKILL, a failing
// final evaluation that still saves the weights, and flag errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/data/parquet.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "support/cli_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace nanochat;
using namespace nctest;

// The first 8 characters of the trainer's "Step <step> | Validation bpb: " value ("" if absent).
std::string trainer_val_bpb(const std::string& out, int step) {
  char key[64];
  std::snprintf(key, sizeof key, "Step %05d | Validation bpb: ", step);
  const auto pos = out.find(key);
  return pos == std::string::npos ? std::string() : out.substr(pos + std::strlen(key), 8);
}

// N steps straight == N/2 steps, stop, resume: identical losses and identical final weights.
TEST(BaseTrain, ResumeReproducesTheUninterruptedRunExactly) {
  BaseDir b("nc_bt_resume");
  auto r1 = run(b, std::string(kTiny) + " --num-iterations 8 --save-every 4");
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_NE(r1.out.find("Validation bpb"), std::string::npos);
  auto straight = losses(b.ckpt() + "/metrics.jsonl");
  ASSERT_EQ(straight.size(), 8u);
  const std::string final_straight = slurp(b.ckpt() + "/model_000008.safetensors");
  auto r2 = run(b, std::string(kTiny) + " --num-iterations 8 --save-every 4 --resume-from-step 4");
  ASSERT_EQ(r2.code, 0) << r2.out;
  EXPECT_NE(r2.out.find("Resumed from step 4"), std::string::npos) << r2.out;
  EXPECT_EQ(r2.out.find("step 00003/"), std::string::npos) << "steps before the resume point were rerun";
  auto resumed = losses(b.ckpt() + "/metrics.jsonl");
  ASSERT_EQ(resumed.size(), 8u);
  for (int64_t s = 4; s < 8; ++s) EXPECT_EQ(resumed[s], straight[s]) << "step " << s;
  EXPECT_TRUE(slurp(b.ckpt() + "/model_000008.safetensors") == final_straight)
      << "final weights differ between the straight and the resumed run";
  // the loss fell over the run (real text, real optimizer)
  EXPECT_LT(straight[7], straight[0]);
}

// --recompute-mlp trades memory for time without changing the run: identical losses and weights.
TEST(BaseTrain, RecomputeMlpDoesNotChangeTheRun) {
  BaseDir b("nc_bt_recompute");
  auto r1 = run(b, std::string(kTiny) + " --num-iterations 3 --eval-every -1 --model-tag plain");
  ASSERT_EQ(r1.code, 0) << r1.out;
  auto r2 = run(b, std::string(kTiny) + " --num-iterations 3 --eval-every -1 --model-tag rec --recompute-mlp");
  ASSERT_EQ(r2.code, 0) << r2.out;
  auto l1 = losses(b.ckpt("plain") + "/metrics.jsonl"), l2 = losses(b.ckpt("rec") + "/metrics.jsonl");
  ASSERT_EQ(l1.size(), 3u);
  for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(l1[s], l2[s]) << "step " << s;
  EXPECT_TRUE(slurp(b.ckpt("plain") + "/model_000003.safetensors") ==
              slurp(b.ckpt("rec") + "/model_000003.safetensors"));
}

// --profile prints every op family's share of the step time, the data loader's included.
TEST(BaseTrain, ProfilePrintsTheTimeSharePerOpFamily) {
  BaseDir b("nc_bt_profile");
  auto r = run(b, std::string(kTiny) + " --num-iterations 3 --eval-every -1 --profile");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto at = r.out.find("Profile of rank 0 over 3 steps");
  ASSERT_NE(at, std::string::npos) << r.out;
  double share_sum = 0;
  for (const char* fam : {"gemm qkv", "gemm attn proj", "gemm mlp fc", "gemm mlp proj", "attention", "lm_head + loss",
                          "norm/rotary/emb", "elementwise", "optimizer", "data", "rest"}) {
    const auto p = r.out.find(std::string("  ") + fam + " ", at);
    ASSERT_NE(p, std::string::npos) << fam << "\n" << r.out;
    const auto line = r.out.substr(p, r.out.find('\n', p) - p);
    const auto pct = line.rfind('%');
    ASSERT_NE(pct, std::string::npos) << line;
    const auto sp = line.rfind(' ', pct);
    const double share = std::stod(line.substr(sp + 1, pct - sp - 1));
    EXPECT_GE(share, 0.0) << line;
    share_sum += share;
    if (std::string(fam) != "rest") {
      const double ms = std::stod(line.substr(2 + std::strlen(fam)));
      EXPECT_GT(ms, 0.0) << "family never timed: " << line;
    }
  }
  EXPECT_NEAR(share_sum, 100.0, 0.5) << r.out.substr(at);
  // without the flag there is no profile
  auto r2 = run(b, std::string(kTiny) + " --num-iterations 1 --eval-every -1");
  ASSERT_EQ(r2.code, 0) << r2.out;
  EXPECT_EQ(r2.out.find("Profile of rank"), std::string::npos);
}

// SIGKILL while a checkpoint is being written: every step marked complete must load, and the
// run resumes from the last complete one.
TEST(BaseTrain, KillDuringSaveLeavesEarlierCheckpointsUsable) {
  BaseDir b("nc_bt_kill");
  const std::string ck = b.ckpt();
  std::string cmd = "NANOCHAT_BASE_DIR=" + b.dir + " exec " + NANOCHAT_BINARY + kTiny +
                    " --num-iterations 400 --save-every 1 --eval-every -1 > " + b.dir + "/log.txt 2>&1";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for two complete checkpoints, then kill the moment a temporary file shows up.
  bool killed_mid_save = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (complete_checkpoint_steps(ck).size() >= 2) {
      std::error_code ec;
      for (auto& e : fs::directory_iterator(ck, ec))
        if (e.path().filename().string().find(".tmp.") != std::string::npos) {
          kill(pid, SIGKILL);
          killed_mid_save = true;
          break;
        }
      if (killed_mid_save) break;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) FAIL() << "trainer exited early: " << slurp(b.dir + "/log.txt");
  }
  if (!killed_mid_save) kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(killed_mid_save) << "never caught a save in progress";
  auto steps = complete_checkpoint_steps(ck);
  ASSERT_GE(steps.size(), 2u);
  for (int64_t s : steps) {
    CheckpointPaths cp{ck, s};
    EXPECT_NO_THROW(load_safetensors(cp.model())) << "step " << s;
    EXPECT_NO_THROW(load_safetensors(cp.optim(0))) << "step " << s;
    EXPECT_NO_THROW(read_checkpoint_meta(cp)) << "step " << s;
  }
  const int64_t last = steps.back();
  auto r = run(b, std::string(kTiny) + " --num-iterations " + std::to_string(last + 2) +
                      " --save-every 1 --eval-every -1 --resume-from-step " + std::to_string(last));
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(BaseTrain, FailingFinalEvaluationStillSavesTheWeights) {
  BaseDir b("nc_bt_evalfail");
  auto r = run(b, std::string(kTiny) + " --num-iterations 3 --fault-inject final-eval");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("after the weights were saved"), std::string::npos) << r.out;
  auto steps = complete_checkpoint_steps(b.ckpt());
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back(), 3);
}

TEST(BaseTrain, FlagErrorsAreClear) {
  BaseDir b("nc_bt_flags");
  auto r = run(b, std::string(kTiny) + " --num-iterations 3 --total-batch-size 200");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--total-batch-size 200 is not divisible"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Use --total-batch-size 128 or 256"), std::string::npos) << r.out;
  r = run(b, std::string(kTiny) + " --num-iterations 3 --device-type cuda");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("CPUs only"), std::string::npos) << r.out;
  r = run(b, std::string(kTiny) + " --num-iterations 3 --resume-from-step 7");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("no complete checkpoint for step 7"), std::string::npos) << r.out;
  fs::remove_all(b.dir + "/tokenizer");
  r = run(b, std::string(kTiny) + " --num-iterations 3");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("tokenizer"), std::string::npos) << r.out;
}

// base-eval, sample and chat on the checkpoint a run leaves behind. base-eval's val bpb over the
// same val batches must equal the trainer's final "Validation bpb" line.
TEST(BaseTrain, CheckpointServesBaseEvalSampleAndChat) {
  BaseDir b("nc_bt_use");
  auto r = run(b, std::string(kTiny) + " --num-iterations 3");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string trainer_bpb = trainer_val_bpb(r.out, 3);
  ASSERT_FALSE(trainer_bpb.empty()) << r.out;
  auto e = run(b, " base-eval -g t --split-tokens 256");
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("val bpb: " + trainer_bpb), std::string::npos) << e.out << "\ntrainer: " << trainer_bpb;
  EXPECT_NE(e.out.find("train bpb: "), std::string::npos) << e.out;
  auto s = run(b, " sample -g t -p Elizabeth -n 6 -t 0");
  ASSERT_EQ(s.code, 0) << s.out;
  EXPECT_NE(s.out.find("---\nElizabeth"), std::string::npos) << s.out;
  auto c = run(b, " chat -i base -g t -s 3 --threads 1 -p hello --max-tokens 5");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("Assistant: "), std::string::npos) << c.out;
  auto missing = run(b, " sample -g nope");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("no complete checkpoint"), std::string::npos) << missing.out;
  auto no_step = run(b, " base-eval -g t -s 99 --threads 1");  // only step 3 was saved
  EXPECT_EQ(no_step.code, 1);
  EXPECT_NE(no_step.out.find("no complete checkpoint for step 99"), std::string::npos) << no_step.out;
  EXPECT_NE(no_step.out.find("-s/--step"), std::string::npos) << no_step.out;
}

// base-eval reports progress on rank 0: a line at every tenth of each split's batches with the
// batches done, the tokens (batches x B x T, here 2 x 64) and the throughput, then the split's
// bpb, which still equals the trainer's final val bpb over the same batches.
TEST(BaseTrain, BaseEvalPrintsProgressLinesAndTheBpb) {
  BaseDir b("nc_bt_evalprog");
  auto r = run(b, std::string(kTiny) + " --num-iterations 1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string trainer_bpb = trainer_val_bpb(r.out, 1);
  ASSERT_FALSE(trainer_bpb.empty()) << r.out;

  // 256 tokens per split = 2 batches: a line after each, before the split's bpb.
  auto e = run(b, " base-eval -g t --split-tokens 256");
  ASSERT_EQ(e.code, 0) << e.out;
  const auto train_1 = e.out.find("train: 1/2 batches (50%) | 128 tokens | ");
  const auto train_2 = e.out.find("train: 2/2 batches (100%) | 256 tokens | ");
  const auto train_bpb = e.out.find("train bpb: ");
  const auto val_1 = e.out.find("val: 1/2 batches (50%) | 128 tokens | ");
  const auto val_2 = e.out.find("val: 2/2 batches (100%) | 256 tokens | ");
  const auto val_bpb = e.out.find("val bpb: " + trainer_bpb);
  for (auto p : {train_1, train_2, train_bpb, val_1, val_2, val_bpb}) ASSERT_NE(p, std::string::npos) << e.out;
  EXPECT_TRUE(train_1 < train_2 && train_2 < train_bpb && train_bpb < val_1 && val_1 < val_2 && val_2 < val_bpb)
      << e.out;
  // elapsed seconds and tok/s are numbers, the rate positive
  const std::string line = e.out.substr(val_2, e.out.find('\n', val_2) - val_2);
  const auto s_at = line.find(" s | ");
  ASSERT_NE(s_at, std::string::npos) << line;
  EXPECT_GE(std::stod(line.substr(line.rfind("| ", s_at) + 2)), 0.0) << line;
  EXPECT_GT(std::stod(line.substr(s_at + 5)), 0.0) << line;
  EXPECT_NE(line.find(" tok/s"), std::string::npos) << line;

  // 20 batches: a line at every tenth, i.e. after batches 2, 4, ..., 20.
  auto e20 = run(b, " base-eval -g t --split-tokens 2560");
  ASSERT_EQ(e20.code, 0) << e20.out;
  for (const char* split : {"train", "val"})
    for (int k = 1; k <= 10; ++k) {
      const std::string want = std::string(split) + ": " + std::to_string(2 * k) + "/20 batches (" +
                               std::to_string(10 * k) + "%) | " + std::to_string(256 * k) + " tokens | ";
      EXPECT_NE(e20.out.find(want), std::string::npos) << want << "\n" << e20.out;
    }
  EXPECT_NE(e20.out.find("train bpb: "), std::string::npos) << e20.out;
  EXPECT_NE(e20.out.find("val bpb: "), std::string::npos) << e20.out;

  // Another rank of a job prints the results but no progress.
  auto r1 = run(b, " base-eval -g t --split-tokens 256", "RANK=1");
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_EQ(r1.out.find(" batches ("), std::string::npos) << r1.out;
  EXPECT_NE(r1.out.find("val bpb: " + trainer_bpb), std::string::npos) << r1.out;
}
