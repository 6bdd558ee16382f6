// chat-sft as an elastic job (`nanochat run --nnodes MIN:MAX ... chat-sft`, train/elastic.h): two
// nodes on this host (one rank each, their own base folders; node 0 holds the base checkpoint and
// the conversations and serves the rows). A node that freezes during the stage (SIGSTOP: a laptop
// whose lid closed) is left behind and the stage goes on; when it wakes it joins again at a step
// boundary. A node killed mid-stage costs the steps since node 0's copy: the stage ends where the
// uninterrupted one ends (within the drift of rounding: the ranks sum the rows' gradients in
// another grouping), as base-train's elastic job does (elastic_test.cpp).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
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

namespace {

// Node 0's folder: a base checkpoint (base_checkpoints/t, step 4) and `n` training conversations.
struct SftNode0 : BaseDir {
  SftNode0(const std::string& name, int n) : BaseDir(name) {
    auto r = run(*this, kSftBase);
    if (r.code != 0) throw std::runtime_error("base-train failed:\n" + r.out);
    write_conversations(dir + "/train.jsonl", n, 1);
    write_conversations(dir + "/val.jsonl", 8, 2);
  }
  std::string sft_ckpt() const { return dir + "/chatsft_checkpoints/t"; }
  // chat-sft's flags: rows of 65 tokens, 4 a step (2 a rank on two nodes), evaluated at the end only
  std::string flags(const std::string& extra = "") const {
    return " chat-sft --model-tag t --train-jsonl " + dir + "/train.jsonl --val-jsonl " + dir +
           "/val.jsonl --eval-every -1 --eval-tokens 260 --chatcore-every -1 --threads 1 --balance even" + extra;
  }
};

}  // namespace

// Node 1 freezes while chat-sft trains: node 0 finds it gone by its heartbeat, writes its copy of
// the job's state and goes on alone; node 1, woken, is told the job went on without it, asks to
// join again and is admitted at a step boundary; both finish the stage with status 0, and the
// metrics record both changes.
TEST(ElasticSft, AFrozenNodeIsLeftBehindTheStageGoesOnAndItRejoinsWhenItWakes) {
  SftNode0 n0("nc_elsft_f0", 1500);
  EmptyDir n1("nc_elsft_f1");
  const int port = test_port();
  BackgroundNode node0(n0.dir, node_run_flags("1:2", 0, port, 3) + n0.flags(), "NANOCHAT_RENDEZVOUS_TIMEOUT=60",
                       n0.dir + "/node0.log");
  BackgroundNode node1(n1.dir, node_run_flags("1:2", 1, port, 3) + n0.flags(), "NANOCHAT_RENDEZVOUS_TIMEOUT=60",
                       n0.dir + "/node1.log");
  ASSERT_TRUE(logged_steps(node0, 5, "] step 0"));
  ASSERT_TRUE(freeze_until_let_go(node0, node1, "chat-sft"));
  std::string out0, out1;
  ASSERT_TRUE(both_end_ok(node0, node1, 240, &out0, &out1));
  expect_left_and_rejoined(out0, out1);
  EXPECT_NE(out0.find("stopped answering its heartbeat for "), std::string::npos) << out0;
  EXPECT_NE(out1.find("rank 1 of 2 (job generation 2): admitted after "), std::string::npos) << out1;
  // the stage's start-up lines once, its end once; the woken node trains again at the end
  EXPECT_EQ(count_of(out0, "nanochat.cpp chat-sft"), 1u) << out0;
  EXPECT_EQ(count_of(out0, "Run summary: "), 1u) << out0;
  const size_t last = out0.rfind("] step ");
  ASSERT_NE(last, std::string::npos);
  EXPECT_NE(out0.substr(last, out0.find('\n', last) - last).find(" r1 "), std::string::npos) << out0.substr(last, 600);
  // metrics.jsonl: the leave and the join
  std::ifstream m(n0.sft_ckpt() + "/metrics.jsonl");
  std::vector<std::string> changes;
  for (std::string line; std::getline(m, line);) {
    const json j = json::parse(line);
    if (j.contains("membership")) changes.push_back(j.at("membership").get<std::string>());
  }
  EXPECT_EQ(changes, (std::vector<std::string>{"rank 1 left", "1 rank joined"}));
  EXPECT_GE(last_step(n0.sft_ckpt()), 10);
}

// Node 1 dies after the update of step 6 (--copy-state-every 3: node 0's copy of step 6 is the
// one the stage goes on from); node 0 finishes alone where one node alone ends the same stage.
TEST(ElasticSft, AKilledNodeCostsTheStepsSinceTheCopyAndTheStageEndsWhereTheUninterruptedOneEnds) {
  SftNode0 n0("nc_elsft_k0", 160);
  EmptyDir n1("nc_elsft_k1");
  const std::string flags = n0.flags(" --copy-state-every 3");
  const auto [r0, r1] = elastic_pair(n0.dir, n1.dir, flags, "NANOCHAT_TEST_FAULT=die:1:7");
  ASSERT_EQ(r0.code, 0) << r0.out << "\n--- node 1:\n" << r1.out;
  EXPECT_NE(r1.code, 0) << r1.out;
  EXPECT_NE(r0.out.find("Rank 1 left the job in step 7"), std::string::npos) << r0.out;
  EXPECT_NE(r0.out.find("from step 6: steps 6 to 7 are done again"), std::string::npos) << r0.out;
  const int64_t end = last_step(n0.sft_ckpt());
  ASSERT_GT(end, 8) << r0.out;
  const nanochat::StFile elastic =
      nanochat::load_safetensors(n0.sft_ckpt() + "/model_" + std::string(6 - std::to_string(end).size(), '0') +
                                 std::to_string(end) + ".safetensors");
  // the same stage on node 0 alone, uninterrupted
  std::filesystem::remove_all(n0.sft_ckpt());
  auto u = run(n0, flags);
  ASSERT_EQ(u.code, 0) << u.out;
  ASSERT_EQ(last_step(n0.sft_ckpt()), end) << u.out;
  const nanochat::StFile uninterrupted =
      nanochat::load_safetensors(n0.sft_ckpt() + "/model_" + std::string(6 - std::to_string(end).size(), '0') +
                                 std::to_string(end) + ".safetensors");
  const double d = max_rel_diff(uninterrupted, elastic);
  std::printf("elastic chat-sft vs uninterrupted: max relative difference %.3g over %lld steps\n", d,
              static_cast<long long>(end));
  EXPECT_LE(d, 2e-3);
}
