// chat-rl as an elastic job (`nanochat run --nnodes MIN:MAX ... chat-rl`, train/elastic.h): two
// nodes on this host (one rank each). Node 0's folder holds the chat-sft checkpoint and the
// tokenizer; node 1's is empty (rank 0 sends it both). A node that freezes during the stage is
// left behind and the stage goes on; woken, it joins again after a step. A node killed mid-stage
// costs the steps since node 0's copy, and the stage ends where one node's uninterrupted run ends:
// a step's rollouts depend on its number, its examples and the weights only, so the steps done
// again sample the same answers (within the drift of rounding: two ranks sum the examples'
// gradients in another grouping).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/safetensors.h"
#include "support/background_node.h"
#include "support/cli_util.h"
#include "support/sft_util.h"
#include "support/test_port.h"
#include "support/two_nodes.h"
#include "support/weights_compare.h"

using namespace nctest;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Conversations that teach the offline Identity task's answers (its reward: the answer names
// nanochat), so that some samples earn it and some do not: the policy gradient is not zero.
void write_identity(const std::string& path, int n) {
  const char* asks[] = {"Who are you?", "What is your name?", "Who made you?", "Hello", "Introduce yourself."};
  const char* answers[] = {"I am nanochat.", "My name is nanochat.", "nanochat.cpp trained me.",
                           "Hello! I am nanochat.", "I am a small model."};
  std::ofstream f(path);
  for (int i = 0; i < n; ++i)
    f << json::array(
             {{{"role", "user"}, {"content", asks[i % 5]}}, {{"role", "assistant"}, {"content", answers[i % 5]}}})
             .dump()
      << "\n";
}

// Node 0's folder: a small base model (kSftBase) and a chat-sft of it on those conversations, in
// chatsft_checkpoints/t.
struct RlNode0 : BaseDir {
  explicit RlNode0(const std::string& name) : BaseDir(name) {
    auto r = run(*this, kSftBase);
    if (r.code != 0) throw std::runtime_error("base-train failed:\n" + r.out);
    write_identity(dir + "/id.jsonl", 200);
    r = run(*this, " chat-sft --model-tag t --train-jsonl " + dir + "/id.jsonl --val-jsonl " + dir +
                       "/id.jsonl --num-iterations 40 --eval-every -1 --chatcore-every -1 --threads 1");
    if (r.code != 0) throw std::runtime_error("chat-sft failed:\n" + r.out);
  }
  std::string rl_ckpt() const { return dir + "/chatrl_checkpoints/t"; }
};

// chat-rl's flags: the offline Identity task, `steps` steps of 4 problems, 4 samples each, a
// checkpoint every `save_every` steps and at the end.
std::string rl_flags(int steps, int save_every, const std::string& extra = "") {
  return " chat-rl --model-tag t --task Identity --num-steps " + std::to_string(steps) +
         " --examples-per-step 4 --num-samples 4 --device-batch-size 2 --max-new-tokens 12 --eval-every 0"
         " --save-every " +
         std::to_string(save_every) + " --init-lr-frac 0.5 --threads 1 --balance even" + extra;
}

nanochat::StFile weights_of(const std::string& dir, int64_t step) {
  const std::string n = std::to_string(step);
  return nanochat::load_safetensors(dir + "/model_" + std::string(6 - n.size(), '0') + n + ".safetensors");
}

}  // namespace

// Node 1 freezes while chat-rl trains: node 0 finds it gone by its heartbeat, writes its copy of
// the job's state and goes on alone; node 1, woken, is told the job went on without it, asks to
// join again and is admitted after a step; both finish with status 0 and the metrics record both
// changes.
TEST(ElasticRl, AFrozenNodeIsLeftBehindTheStageGoesOnAndItRejoinsWhenItWakes) {
  RlNode0 n0("nc_elrl_f0");
  EmptyDir n1("nc_elrl_f1");
  const int port = test_port();
  const std::string flags = rl_flags(400, 1000);
  BackgroundNode node0(n0.dir, node_run_flags("1:2", 0, port, 3) + flags, "NANOCHAT_RENDEZVOUS_TIMEOUT=60",
                       n0.dir + "/node0.log");
  BackgroundNode node1(n1.dir, node_run_flags("1:2", 1, port, 3) + flags, "NANOCHAT_RENDEZVOUS_TIMEOUT=60",
                       n0.dir + "/node1.log");
  ASSERT_TRUE(logged_steps(node0, 12, "| examples per rank: 2/2"));  // node 0 holds a copy (every 10 steps)
  ASSERT_TRUE(freeze_until_let_go(node0, node1, "chat-rl"));
  std::string out0, out1;
  ASSERT_TRUE(both_end_ok(node0, node1, 240, &out0, &out1));
  expect_left_and_rejoined(out0, out1);
  EXPECT_NE(out0.find("stopped answering its heartbeat for "), std::string::npos) << out0;
  EXPECT_NE(out0.find("1 rank goes on (old rank 0) from step "), std::string::npos) << out0;
  EXPECT_NE(out0.find("the optimizer state comes from node 0's copy of step "), std::string::npos) << out0;
  EXPECT_NE(out1.find("rank 1 of 2 (job generation 2): admitted after "), std::string::npos) << out1;
  // the start-up lines once; the woken node takes problems again at the end
  EXPECT_EQ(count_of(out0, "Calculated number of steps: 400"), 1u) << out0;
  const size_t last = out0.rfind("Step 399/400 | ");
  ASSERT_NE(last, std::string::npos) << out0;
  EXPECT_NE(out0.substr(last, out0.find('\n', last) - last).find(" | examples per rank: "), std::string::npos)
      << out0.substr(last, 300);
  // metrics.jsonl: the leave and the join; every step's record
  std::ifstream m(n0.rl_ckpt() + "/metrics.jsonl");
  std::vector<std::string> changes;
  std::vector<int64_t> steps;
  for (std::string line; std::getline(m, line);) {
    const json j = json::parse(line);
    if (j.contains("membership")) changes.push_back(j.at("membership").get<std::string>());
    if (j.contains("mean_reward")) steps.push_back(j.at("step").get<int64_t>());
  }
  EXPECT_EQ(changes, (std::vector<std::string>{"rank 1 left", "1 rank joined"}));
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back(), 399);
  EXPECT_EQ(last_step(n0.rl_ckpt()), 399);
  EXPECT_TRUE(n1.contents().empty() || !fs::exists(n1.dir + "/chatrl_checkpoints")) << "node 1 saves nothing";
}

// Node 1 freezes once the job's ranks met, before the stage's set-up (it stops itself:
// NANOCHAT_TEST_FAULT stop-setup:1): node 0's first collective of the set-up finds it gone, and
// the stage goes on without it from the start instead of failing; woken, node 1 joins after a step.
TEST(ElasticRl, ANodeFrozenWhileTheStageSetsUpIsLeftBehindAndRejoins) {
  RlNode0 n0("nc_elrl_s0");
  EmptyDir n1("nc_elrl_s1");
  const int port = test_port();
  const std::string flags = rl_flags(300, 1000);
  BackgroundNode node0(n0.dir, node_run_flags("1:2", 0, port, 3) + flags, "NANOCHAT_RENDEZVOUS_TIMEOUT=60",
                       n0.dir + "/node0.log");
  BackgroundNode node1(n1.dir, node_run_flags("1:2", 1, port, 3) + flags,
                       "NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_TEST_FAULT=stop-setup:1", n0.dir + "/node1.log");
  ASSERT_TRUE(logged_line(node0, "Rank 1 left the job"));
  ASSERT_TRUE(logged_steps(node0, 3, "Step "));
  node1.signal_node(SIGCONT);
  std::string out0, out1;
  ASSERT_TRUE(both_end_ok(node0, node1, 240, &out0, &out1));
  expect_left_and_rejoined(out0, out1);
  EXPECT_NE(out0.find("(the set-up of the stage was interrupted: "), std::string::npos) << out0;
  EXPECT_NE(out0.find("1 rank goes on (old rank 0) from the start"), std::string::npos) << out0;
  EXPECT_EQ(last_step(n0.rl_ckpt()), 299);
}

// Node 1 dies after the update of step 7 (--copy-state-every 3: node 0 holds a copy after step 5);
// node 0 does steps 6 to 8 again alone and ends where one node alone ends the same run. A run
// stopped part-way continues from a checkpoint with --resume-from-step to the same end.
TEST(ElasticRl, AKilledNodeCostsTheStepsSinceTheCopyAndTheRunEndsWhereTheUninterruptedOneEnds) {
  RlNode0 n0("nc_elrl_k0");
  EmptyDir n1("nc_elrl_k1");
  const std::string flags = rl_flags(12, 1000, " --copy-state-every 3");
  const auto [r0, r1] = elastic_pair(n0.dir, n1.dir, flags, "NANOCHAT_TEST_FAULT=die:1:7");
  ASSERT_EQ(r0.code, 0) << r0.out << "\n--- node 1:\n" << r1.out;
  EXPECT_NE(r1.code, 0) << r1.out;
  EXPECT_NE(r0.out.find("Rank 1 left the job in step 8"), std::string::npos) << r0.out;
  EXPECT_NE(r0.out.find("from step 6: steps 6 to 8 are done again"), std::string::npos) << r0.out;
  ASSERT_EQ(last_step(n0.rl_ckpt()), 11) << r0.out;
  const nanochat::StFile elastic = weights_of(n0.rl_ckpt(), 11);
  // the same run on node 0 alone, uninterrupted
  fs::remove_all(n0.rl_ckpt());
  auto u = run(n0, rl_flags(12, 4));
  ASSERT_EQ(u.code, 0) << u.out;
  ASSERT_EQ(last_step(n0.rl_ckpt()), 11) << u.out;
  const nanochat::StFile uninterrupted = weights_of(n0.rl_ckpt(), 11);
  const double d = max_rel_diff(uninterrupted, elastic);
  // what RL changed: the rewards differ between samples, so the steps move the weights
  const std::string sft = n0.dir + "/chatsft_checkpoints/t";
  const double moved = max_rel_diff(weights_of(sft, *nanochat::last_complete_step(sft)), uninterrupted);
  std::printf("elastic chat-rl vs uninterrupted: max relative difference %.3g over 12 steps (RL moved them %.3g)\n", d,
              moved);
  EXPECT_LE(d, 2e-3);
  EXPECT_GT(moved, 100 * std::max(d, 1e-5));
  // continued after its checkpoint of step 4 (weights and optimizer state): the same end
  auto c = run(n0, rl_flags(12, 4, " --resume-from-step 4"));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(c.out.find("Step 4/12"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("Step 5/12"), std::string::npos) << c.out;
  EXPECT_EQ(max_rel_diff(uninterrupted, weights_of(n0.rl_ckpt(), 11)), 0.0);
}

// A job of fixed nodes (--nnodes 2) that loses node 1 after step 5 stops, naming node 0's last
// checkpoint (step 4: --save-every 2) and the flag that continues from it; node 0 alone then
// continues from it to the run's end.
TEST(ElasticRl, AFixedJobThatLosesANodeStopsNamingTheCheckpointToContinueFrom) {
  RlNode0 n0("nc_elrl_x0");
  EmptyDir n1("nc_elrl_x1");
  const std::string flags = rl_flags(10, 2);
  const auto [r0, r1] = two_nodes(n0.dir, n1.dir, flags, "NANOCHAT_TEST_FAULT=die:1:5");
  EXPECT_NE(r0.code, 0) << r0.out;
  EXPECT_NE(r0.out.find("chat-rl stopped in step 6 (training the step): "), std::string::npos) << r0.out;
  EXPECT_NE(r0.out.find("The last checkpoint is step 4 in node 0's " + n0.rl_ckpt() +
                        ": to continue, run the same command with --resume-from-step 4"),
            std::string::npos)
      << r0.out;
  EXPECT_EQ(last_step(n0.rl_ckpt()), 4);
  auto c = run(n0, flags + " --resume-from-step 4");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("Step 5/10 | "), std::string::npos) << c.out;
  EXPECT_EQ(last_step(n0.rl_ckpt()), 9);
}

// GSM8K is read from downloaded files, which only node 0 has: node 1 takes them from rank 0 into
// its own base folder, and the two nodes share the steps.
TEST(ElasticRl, ANodeWithoutTheTasksFilesTakesThemFromRankZero) {
  RlNode0 n0("nc_elrl_g0");
  EmptyDir n1("nc_elrl_g1");
  fs::copy(std::string(NANOCHAT_TEST_DATA) + "/tasks/task_data", n0.dir + "/task_data", fs::copy_options::recursive);
  const std::string gsm8k = n0.dir + "/task_data/openai--gsm8k/main";
  fs::copy(gsm8k + "/test", gsm8k + "/train", fs::copy_options::recursive);  // the fixture has the test split only
  std::string flags = rl_flags(2, 1000);
  flags.replace(flags.find("--task Identity"), 15, "--task GSM8K");
  const auto [r0, r1] = two_nodes(n0.dir, n1.dir, flags, "");
  ASSERT_EQ(r0.code, 0) << r0.out << "\n--- node 1:\n" << r1.out;
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_NE(r1.out.find("rank 1: took GSM8K's files from rank 0 ("), std::string::npos) << r1.out;
  EXPECT_NE(r0.out.find("Step 1/2 | Average reward: "), std::string::npos) << r0.out;
  EXPECT_NE(r0.out.find(" | examples per rank: 2/2"), std::string::npos) << r0.out;
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(n0.dir + "/task_data/openai--gsm8k")) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), n0.dir).string();
    EXPECT_EQ(slurp(n1.dir + "/" + rel), slurp(e.path().string())) << rel;
    ++files;
  }
  EXPECT_GE(files, 4);  // the train and test splits: a manifest and a shard each
}
