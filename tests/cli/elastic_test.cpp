// Elastic jobs through the binary (`nanochat run --nnodes MIN:MAX`, train/elastic.h): three nodes
// on this host (one rank each, their own base folders; node 0 serves the data), one of which
// leaves mid-run. The others must regroup and end where an uninterrupted run ends (within the
// drift of rounding: the survivors sum the gradients in another grouping), bit for bit where the
// uninterrupted run's checkpoint resumed by the survivors ends, and say who left, why and how long
// the job took to go on. Bounds, not exact times. Under --sync diloco a node that leaves costs the
// round in progress (the others end bit for bit where node 0's boundary copy resumed ends) and a
// node joins at a round's boundary.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/core/safetensors.h"
#include "support/background_node.h"
#include "support/cli_util.h"
#include "support/netns_pair.h"
#include "support/test_port.h"
#include "support/two_nodes.h"
#include "support/weights_compare.h"

using namespace nctest;

namespace {

// The sanitizer build takes about four times as long per step: the runs whose length is a margin of
// seconds (for the test's kills and the heartbeat to happen before the run ends) take a quarter of
// the steps, or of the slow-down, there, the same seconds.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kStepScale = 4;
#else
constexpr int kStepScale = 1;
#endif

// 768 tokens per step = 6 rows of T 64: 2 per rank with 3 ranks, 3 per rank with 2.
const char* kElastic =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 768 --eval-every -1 --sample-every -1 --core-metric-every -1"
    " --threads 1 --model-tag t --num-iterations 10 --warmup-steps 1 --balance even --copy-state-every 1";

// `count` nodes of one rank each (node 0 in dirs[0], ...), `nnodes` ("3", "2" or "2:3"), each with
// the extra environment `env`; returns their results.
std::vector<Result> some_nodes(int count, const std::vector<std::string>& dirs, const std::string& nnodes,
                               const std::string& env, const std::string& extra_flags = "") {
  const std::string common = " run --nnodes " + nnodes +
                             " --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 "
                             "--allow-loopback-master --heartbeat-timeout 4 --master-port " +
                             std::to_string(test_port());
  std::vector<Result> r(count);
  std::vector<std::thread> t;
  for (int k = 0; k < count; ++k)
    t.emplace_back([&, k] {
      r[k] = run_at(dirs[k], common + " --node-rank " + std::to_string(k) + kElastic + extra_flags,
                    "NANOCHAT_RENDEZVOUS_TIMEOUT=60 " + env);
    });
  for (auto& x : t) x.join();
  return r;
}

std::vector<Result> three_nodes(const std::vector<std::string>& dirs, const std::string& nnodes, const std::string& env,
                                const std::string& extra_flags = "") {
  return some_nodes(3, dirs, nnodes, env, extra_flags);
}

}  // namespace

TEST(Elastic, AKilledNodeLeavesAndTheOthersEndWhereTheUninterruptedRunEnds) {
  BaseDir n0("nc_el_node0");
  EmptyDir n1("nc_el_node1"), n2("nc_el_node2");
  const std::vector<std::string> dirs{n0.dir, n1.dir, n2.dir};
  // node 2's rank kills itself right after the update of step 4: step 4 is interrupted
  const auto e = three_nodes(dirs, "2:3", "NANOCHAT_TEST_FAULT=die:2:4");
  ASSERT_EQ(e[0].code, 0) << e[0].out << "\n--- node 1:\n" << e[1].out << "\n--- node 2:\n" << e[2].out;
  ASSERT_EQ(e[1].code, 0) << e[1].out;
  EXPECT_NE(e[2].code, 0) << e[2].out;
  EXPECT_NE(e[2].out.find("this node left the job, which went on without it"), std::string::npos) << e[2].out;
  const std::string& out = e[0].out;
  EXPECT_NE(out.find("rank 2 (host "), std::string::npos) << out;
  EXPECT_NE(out.find("Saved checkpoint " + n0.ckpt() + "/model_000004.safetensors (node 0's copy"), std::string::npos)
      << out;
  EXPECT_NE(out.find("Rank 2 left the job in step 4 (step 4 ("), std::string::npos) << out;
  EXPECT_NE(out.find("); 2 ranks go on (old ranks [0,1]) from step 4"), std::string::npos) << out;
  EXPECT_NE(out.find("node 0's copy of step 4 (0 steps old); training again "), std::string::npos) << out;
  EXPECT_NE(out.find("step 00009/00010"), std::string::npos) << out;

  // metrics.jsonl: the change, once, with its recovery time (bounded, not exact)
  std::istringstream lines(slurp(n0.ckpt() + "/metrics.jsonl"));
  int changes = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("membership")) continue;
    ++changes;
    EXPECT_EQ(j.at("membership"), "rank 2 left");
    EXPECT_EQ(j.at("step"), 4);
    EXPECT_EQ(j.at("world_size"), 3);
    EXPECT_EQ(j.at("world_size_after"), 2);
    EXPECT_EQ(j.at("restored_steps_old"), 0);
    EXPECT_GE(j.at("recovery_s").get<double>(), 0.0);
    EXPECT_LT(j.at("recovery_s").get<double>(), 120.0);
  }
  EXPECT_EQ(changes, 1);
  const nanochat::StFile elastic = nanochat::load_safetensors(n0.ckpt() + "/model_000010.safetensors");

  // with a copy every 3 steps (K = 3; the last --copy-state-every counts) the copy of step 3 is 1 step old: steps 3 and
  // 4 are done again, and the run still ends where the uninterrupted one does (the same stream)
  fs::remove_all(n0.ckpt());
  const auto k3 =
      three_nodes(dirs, "2:3", "NANOCHAT_TEST_FAULT=die:2:4", " --copy-state-every 3 --eval-every 3 --eval-tokens 768");
  ASSERT_EQ(k3[0].code, 0) << k3[0].out;
  EXPECT_NE(k3[0].out.find("from step 3: steps 3 to 4 are done again, and the optimizer state comes from node 0's "
                           "copy of step 3 (1 step old)"),
            std::string::npos)
      << k3[0].out;
  // step 3 was evaluated before the loss and is again by the regrouped job, which goes on from it
  // (it cannot know that every rank finished that evaluation); metrics.jsonl keeps both records
  // of the step, the chart the later (train/metrics_log.h)
  EXPECT_EQ(count_of(k3[0].out, "Step 00003 | Validation bpb"), 2u) << k3[0].out;
  EXPECT_EQ(count_of(k3[0].out, "Step 00006 | Validation bpb"), 1u) << k3[0].out;
  EXPECT_EQ(count_of(slurp(n0.ckpt() + "/metrics.jsonl"), "{\"step\":3,\"val_bpb\":"), 2u);
  const nanochat::StFile elastic_k3 = nanochat::load_safetensors(n0.ckpt() + "/model_000010.safetensors");

  // the same run on three nodes, nobody leaving, saved at every step
  fs::remove_all(n0.ckpt());
  const auto u = three_nodes(dirs, "3", "", " --save-every 1");
  ASSERT_EQ(u[0].code, 0) << u[0].out;
  const nanochat::StFile uninterrupted = nanochat::load_safetensors(n0.ckpt() + "/model_000010.safetensors");
  // what the regrouped job must be: that run's checkpoint of step 4 (K = 1) or 3 (K = 3) resumed by
  // two nodes: the same sums in the same grouping, so the same bits.
  std::vector<nanochat::StFile> resumed;
  for (int from : {4, 3}) {
    const auto r = some_nodes(2, dirs, "2", "", " --resume-from-step " + std::to_string(from));
    ASSERT_EQ(r[0].code, 0) << r[0].out << "\n--- node 1:\n" << r[1].out;
    ASSERT_NE(r[0].out.find("Resumed from step " + std::to_string(from)), std::string::npos) << r[0].out;
    resumed.push_back(nanochat::load_safetensors(n0.ckpt() + "/model_000010.safetensors"));
  }
  const double r1 = max_rel_diff(resumed[0], elastic, /*verbose=*/true);
  const double r3 = max_rel_diff(resumed[1], elastic_k3, /*verbose=*/false);
  std::printf(
      "elastic run vs the same checkpoint resumed by two nodes: max relative difference %.3g (K = 1), %.3g "
      "(K = 3)\n",
      r1, r3);
  EXPECT_EQ(r1, 0.0);
  EXPECT_EQ(r3, 0.0);
  // and near the uninterrupted three-node run: only the grouping of the sums differs, but Muon's
  // orthogonalisation amplifies those last bits over the six steps after the change (6e-5 and
  // 2.6e-4 in the two builds measured)
  const double d = max_rel_diff(uninterrupted, elastic, /*verbose=*/false);
  const double d3 = max_rel_diff(uninterrupted, elastic_k3, /*verbose=*/false);
  std::printf("elastic run vs uninterrupted: max relative difference %.3g (K = 1), %.3g (K = 3)\n", d, d3);
  EXPECT_LE(d, 2e-3);
  EXPECT_LE(d3, 2e-3);
}

namespace {

// kElastic with `n` steps instead of 10.
std::string with_iterations(int n) {
  std::string flags = kElastic;
  flags.replace(flags.find("--num-iterations 10"), std::strlen("--num-iterations 10"),
                "--num-iterations " + std::to_string(n));
  return flags;
}

// Three nodes of one rank each (node 0 in dirs[0], ...) of `nnodes` ("2:3"), heartbeat 3 s, each
// running kElastic with `iterations` steps in the background.
std::vector<std::unique_ptr<BackgroundNode>> three_nodes(const std::vector<std::string>& dirs,
                                                         const std::string& nnodes, int iterations,
                                                         const std::string& extra_flags = "") {
  const std::string common = " run --nnodes " + nnodes +
                             " --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 "
                             "--allow-loopback-master --heartbeat-timeout 3 --master-port " +
                             std::to_string(test_port());
  std::vector<std::unique_ptr<BackgroundNode>> nodes;
  for (int k = 0; k < 3; ++k)
    nodes.push_back(std::make_unique<BackgroundNode>(
        dirs[k], common + " --node-rank " + std::to_string(k) + with_iterations(iterations) + extra_flags,
        "NANOCHAT_RENDEZVOUS_TIMEOUT=60", dirs[0] + "/node" + std::to_string(k) + ".log"));
  return nodes;
}

// Node 0 starts an elastic job (--nnodes 1:2) alone, its steps made 8x slower so that node 1,
// started once node 0 logged 3 steps, joins while it trains (the math does not change); both end
// within 180 s, with status 0 (checked here); their logs in out0 and out1.
void join_later(const std::string& dir0, const std::string& dir1, const std::string& flags, std::string& out0,
                std::string& out1) {
  const std::string common =
      " run --nnodes 1:2 --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 --allow-loopback-master"
      " --master-port " +
      std::to_string(test_port());
  BackgroundNode first(dir0, common + " --node-rank 0" + flags,
                       "NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_ELASTIC_LAST_CALL=1 NANOCHAT_TEST_FAULT=slow:0:8",
                       dir0 + "/node0.log");
  ASSERT_TRUE(logged_steps(first, 3));
  BackgroundNode later(dir1, common + " --node-rank 1" + flags, "NANOCHAT_RENDEZVOUS_TIMEOUT=60", dir0 + "/node1.log");
  for (auto* n : {&first, &later})
    ASSERT_TRUE(n->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(180))) << slurp(n->log);
  out0 = slurp(first.log);
  out1 = slurp(later.log);
  EXPECT_TRUE(WIFEXITED(first.status) && WEXITSTATUS(first.status) == 0) << out0;
  EXPECT_TRUE(WIFEXITED(later.status) && WEXITSTATUS(later.status) == 0) << out1;
}

}  // namespace

// A node that freezes (SIGSTOP to its launcher and rank: a laptop whose lid closed) is found by the
// heartbeat; the other two regroup and go on. When it wakes after they went on, it is told so, asks
// to join again, is admitted at a step boundary and trains with them to the end.
TEST(Elastic, AFrozenNodeIsLeftBehindAndRejoinsWhenItWakes) {
  BaseDir n0("nc_elf_node0");
  EmptyDir n1("nc_elf_node1"), n2("nc_elf_node2");
  std::vector<std::unique_ptr<BackgroundNode>> nodes = three_nodes({n0.dir, n1.dir, n2.dir}, "2:3", 200);
  ASSERT_TRUE(logged_steps(*nodes[0], 5));
  ASSERT_FALSE(nodes[2]->ranks().empty()) << "node 2's launcher has no rank";
  nodes[2]->signal_node(SIGSTOP);
  // the others go on: wait for the regroup line (heartbeat 3 s, then seconds), bounded
  const auto frozen = std::chrono::steady_clock::now();
  ASSERT_TRUE(logged_line(*nodes[0], "Rank 2 left the job"));
  std::printf("the job went on %.1f s after node 2 froze\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen).count());
  // node 2 wakes while the others train: it is told it was left out and joins again
  nodes[2]->signal_node(SIGCONT);
  for (auto& n : nodes)
    ASSERT_TRUE(n->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(240))) << slurp(n->log);
  const std::string out0 = slurp(nodes[0]->log), out2 = slurp(nodes[2]->log);
  for (auto& n : nodes) EXPECT_TRUE(WIFEXITED(n->status) && WEXITSTATUS(n->status) == 0) << slurp(n->log);
  EXPECT_NE(out2.find("the job went on without this rank"), std::string::npos) << out2;
  EXPECT_NE(out2.find("asking node 0 to admit it again"), std::string::npos) << out2;
  const size_t admitted = out2.find("rank 2 of 3 (job generation 2): admitted after ");
  EXPECT_NE(admitted, std::string::npos) << out2;
  // the generation it was left out of was closed before it asked: its heartbeat says nothing more
  if (admitted != std::string::npos) {
    EXPECT_EQ(out2.find("found gone", admitted), std::string::npos) << out2;
  }
  EXPECT_NE(out0.find("stopped answering its heartbeat for "), std::string::npos) << out0;
  EXPECT_NE(out0.find("2 ranks go on (old ranks [0,1])"), std::string::npos) << out0;
  EXPECT_NE(out0.find("A rank joined the job at step "), std::string::npos) << out0;
  EXPECT_NE(out0.find("3 ranks go on from step "), std::string::npos) << out0;
  EXPECT_NE(out0.find("step 00199/00200"), std::string::npos) << out0;
  EXPECT_EQ(count_of(out0, "left the job in step"), 1u) << out0;
  // the woken node trains again: the last step's line has three ranks' parts
  const size_t last = out0.find("step 00199/00200");
  ASSERT_NE(last, std::string::npos);
  EXPECT_NE(out0.substr(last, out0.find('\n', last) - last).find(" r2 "), std::string::npos) << out0.substr(last, 600);
}

// Two nodes leave one after the other (--nnodes 1:3): node 2 is killed, the job goes on as a new
// generation, then node 1 is killed and node 0 trains alone to the end. Once alone, node 0's rank
// has no communicator thread or heartbeat left: the first generation's communicator (which the
// command owns) was closed when the job left it, the second one freed.
TEST(Elastic, TwoNodesLeaveOneAfterTheOtherAndNoThreadOfTheirGenerationsStays) {
  BaseDir n0("nc_el2_node0");
  EmptyDir n1("nc_el2_node1"), n2("nc_el2_node2");
  const int steps = 400 / kStepScale;
  std::vector<std::unique_ptr<BackgroundNode>> nodes = three_nodes({n0.dir, n1.dir, n2.dir}, "1:3", steps);
  ASSERT_TRUE(logged_steps(*nodes[0], 4));
  const std::vector<pid_t> rank0 = nodes[0]->ranks();
  ASSERT_EQ(rank0.size(), 1u);
  auto threads_named = [&](const std::string& prefix) {  // "": every thread
    size_t n = 0;
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(rank0[0]) + "/task", ec))
      if (slurp(t.path().string() + "/comm").rfind(prefix, 0) == 0) ++n;
    return n;
  };
  EXPECT_GE(threads_named("nc-comm"), 1u);
  EXPECT_EQ(threads_named("nc-heartbeat"), 1u);
  nodes[2]->signal_node(SIGKILL);
  ASSERT_TRUE(logged_line(*nodes[0], "Rank 2 left the job"));
  ASSERT_TRUE(logged_steps(*nodes[0], count_of(slurp(nodes[0]->log), "] step ") + 2));
  nodes[1]->signal_node(SIGKILL);
  ASSERT_TRUE(logged_line(*nodes[0], "Rank 1 left the job"));
  ASSERT_TRUE(logged_steps(*nodes[0], count_of(slurp(nodes[0]->log), "] step ") + 2));
  const size_t comm_threads = threads_named("nc-comm"), heartbeats = threads_named("nc-heartbeat");
  ASSERT_GE(threads_named(""), 1u) << "node 0's rank had ended before its threads were counted";
  ASSERT_TRUE(nodes[0]->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(240)))
      << slurp(nodes[0]->log);
  const std::string out0 = slurp(nodes[0]->log);
  char last_step[32];
  std::snprintf(last_step, sizeof last_step, "step %05d/%05d", steps - 1, steps);
  EXPECT_NE(out0.find(last_step), std::string::npos) << out0;
  EXPECT_EQ(comm_threads, 0u);
  EXPECT_EQ(heartbeats, 0u);
  EXPECT_TRUE(WIFEXITED(nodes[0]->status) && WEXITSTATUS(nodes[0]->status) == 0) << out0;
  EXPECT_EQ(count_of(out0, "left the job in step"), 2u) << out0;
}

// Below its minimum (--nnodes 3:3 and a node killed) the job waits, saying who is missing; the
// killed node's command run again joins, and the run ends where an uninterrupted run ends.
TEST(Elastic, BelowItsMinimumTheJobWaitsForANodeToJoinAndEndsWhereTheUninterruptedRunEnds) {
  BaseDir n0("nc_elm_node0");
  EmptyDir n1("nc_elm_node1"), n2("nc_elm_node2");
  const std::string common =
      " run --nnodes 3:3 --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 --allow-loopback-master"
      " --heartbeat-timeout 4 --master-port " +
      std::to_string(test_port());
  const std::vector<std::string> dirs{n0.dir, n1.dir, n2.dir};
  std::vector<std::unique_ptr<BackgroundNode>> nodes;
  const std::string env = "NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_WAIT_REPORT_INTERVAL=1 NANOCHAT_TEST_FAULT=die:2:4";
  for (int k = 0; k < 3; ++k)
    nodes.push_back(std::make_unique<BackgroundNode>(dirs[k], common + " --node-rank " + std::to_string(k) + kElastic,
                                                     env, n0.dir + "/node" + std::to_string(k) + ".log"));
  // node 2's rank dies in step 4; its launcher exits; node 0 waits below the minimum
  ASSERT_TRUE(nodes[2]->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(120)))
      << slurp(nodes[2]->log);
  const auto t0 = std::chrono::steady_clock::now();
  while (slurp(nodes[0]->log).find("Elastic job below its minimum: 2 of at least 3 ranks") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), t0 + std::chrono::seconds(60)) << slurp(nodes[0]->log);
    ASSERT_FALSE(nodes[0]->wait_until(std::chrono::steady_clock::now())) << slurp(nodes[0]->log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // the same command again on node 2 (the fault gone): it joins
  BackgroundNode again(dirs[2], common + " --node-rank 2" + kElastic, "NANOCHAT_RENDEZVOUS_TIMEOUT=60",
                       n0.dir + "/node2b.log");
  for (auto* n : {nodes[0].get(), nodes[1].get(), &again})
    ASSERT_TRUE(n->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(180))) << slurp(n->log);
  const std::string out0 = slurp(nodes[0]->log), out2 = slurp(again.log);
  EXPECT_TRUE(WIFEXITED(nodes[0]->status) && WEXITSTATUS(nodes[0]->status) == 0) << out0;
  EXPECT_TRUE(WIFEXITED(again.status) && WEXITSTATUS(again.status) == 0) << out2;
  EXPECT_NE(out0.find("rank 2 (host "), std::string::npos) << out0;
  EXPECT_NE(out0.find("waiting for a node to join"), std::string::npos) << out0;
  EXPECT_NE(out0.find("3 ranks go on (old ranks [0,1]) with 1 that joined (rank 2: local rank 0 of node 2 (host "),
            std::string::npos)
      << out0;
  EXPECT_NE(out2.find("is already training: this node's 1 rank asks node 0 to admit them"), std::string::npos) << out2;
  EXPECT_NE(out2.find("admitted after "), std::string::npos) << out2;
  std::istringstream lines(slurp(n0.ckpt() + "/metrics.jsonl"));
  std::vector<std::string> changes;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("membership")) changes.push_back(j.at("membership").get<std::string>());
  }
  EXPECT_EQ(changes, (std::vector<std::string>{"rank 2 left", "1 rank joined"}));
  const nanochat::StFile elastic = nanochat::load_safetensors(n0.ckpt() + "/model_000010.safetensors");

  fs::remove_all(n0.ckpt());
  const auto u = three_nodes(dirs, "3", "");
  ASSERT_EQ(u[0].code, 0) << u[0].out;
  const double d =
      max_rel_diff(nanochat::load_safetensors(n0.ckpt() + "/model_000010.safetensors"), elastic, /*verbose=*/true);
  std::printf("left, waited, joined vs uninterrupted: max relative difference %.3g\n", d);
  EXPECT_LE(d, 1e-4);
}

// Nobody joins in time: node 0 stops the job with its checkpoint and says how to resume.
TEST(Elastic, BelowItsMinimumUntilTheTimeoutTheJobStopsWithItsCheckpoint) {
  BaseDir n0("nc_elt_node0");
  EmptyDir n1("nc_elt_node1");
  const std::string common =
      " run --nnodes 2:2 --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 --allow-loopback-master"
      " --heartbeat-timeout 4 --min-nodes-timeout 3 --master-port " +
      std::to_string(test_port());
  std::vector<Result> r(2);
  std::vector<std::thread> t;
  const std::vector<std::string> dirs{n0.dir, n1.dir};
  for (int k = 0; k < 2; ++k)
    t.emplace_back([&, k] {
      r[k] = run_at(dirs[k], common + " --node-rank " + std::to_string(k) + kElastic,
                    "NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_WAIT_REPORT_INTERVAL=1 NANOCHAT_TEST_FAULT=die:1:3");
    });
  for (auto& x : t) x.join();
  const std::string& out = r[0].out;
  EXPECT_NE(r[0].code, 0) << out;
  EXPECT_NE(out.find("Elastic job below its minimum: 1 of at least 2 ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("no node joined within 3 s: the job stops; node 0 saved step 3: continue later with "
                     "--resume-from-step 3"),
            std::string::npos)
      << out;
  EXPECT_TRUE(fs::exists(n0.ckpt() + "/model_000003.safetensors")) << out;
  EXPECT_TRUE(fs::exists(n0.ckpt() + "/optim_000003_rank1.safetensors")) << out;
}

// An elastic job starts with the nodes that are there (node 0 alone, after the last call) and a
// node started later joins at a step boundary and gets rows; the run ends where the one-process
// run ends (the same rows, summed in another grouping). With --eval-every 1 every step is
// evaluated, the boundary where the node joined included (the job's next generation evaluates it:
// the one before ended without doing so).
TEST(Elastic, TheJobStartsWithTheNodesThereAndANodeStartedLaterJoins) {
  BaseDir n0("nc_elj_node0");
  EmptyDir n1("nc_elj_node1");
  // 20 steps (the tolerance below holds over a few tens of steps)
  std::string flags = with_iterations(20);
  flags.replace(flags.find("--eval-every -1"), std::strlen("--eval-every -1"), "--eval-every 1 --eval-tokens 128");
  std::string out0, out1;
  ASSERT_NO_FATAL_FAILURE(join_later(n0.dir, n1.dir, flags, out0, out1));
  EXPECT_NE(out0.find("1 of 2 nodes are here (at least 1 needed): the job starts with them in "), std::string::npos)
      << out0;
  EXPECT_NE(out0.find("rank 0 of WORLD_SIZE=1"), std::string::npos) << out0;
  EXPECT_NE(out0.find("A rank joined the job at step "), std::string::npos) << out0;
  EXPECT_NE(out1.find("is already training"), std::string::npos) << out1;
  const size_t last = out0.find("step 00019/00020");
  ASSERT_NE(last, std::string::npos) << out0;
  EXPECT_NE(out0.substr(last, out0.find('\n', last) - last).find(" r1 "), std::string::npos) << out0.substr(last, 600);
  const nanochat::StFile elastic = nanochat::load_safetensors(n0.ckpt() + "/model_000020.safetensors");
  // the step where the node joined has its val bpb, in the log and in metrics.jsonl, as every step
  const size_t joined = out0.find("A rank joined the job at step ");
  ASSERT_NE(joined, std::string::npos) << out0;
  const int join_step = std::stoi(out0.substr(joined + std::strlen("A rank joined the job at step ")));
  char val_line[64];
  std::snprintf(val_line, sizeof val_line, "Step %05d | Validation bpb: ", join_step);
  EXPECT_NE(out0.find(val_line), std::string::npos) << out0;
  std::set<int64_t> evaluated;
  {
    std::ifstream in(n0.ckpt() + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (const json j = json::parse(line); j.contains("val_bpb")) evaluated.insert(j["step"].get<int64_t>());
  }
  for (int64_t step = 0; step <= 20; ++step)
    EXPECT_EQ(evaluated.count(step), 1u) << "step " << step << ", joined at " << join_step;

  fs::remove_all(n0.ckpt());
  const Result one = run_at(n0.dir, flags, "");
  ASSERT_EQ(one.code, 0) << one.out;
  const double d =
      max_rel_diff(nanochat::load_safetensors(n0.ckpt() + "/model_000020.safetensors"), elastic, /*verbose=*/true);
  std::printf("one node, then two vs one process: max relative difference %.3g\n", d);
  // every step trained the one-process stream's rows: the same loss at every step (printed to 6
  // decimals; the grouping of the sums moves the last one), and weights within rounding's drift
  const auto losses = [](const std::string& out) {
    std::vector<double> l;
    for (size_t at = out.find("| loss: "); at != std::string::npos; at = out.find("| loss: ", at + 1))
      l.push_back(std::stod(out.substr(at + 8, 9)));
    return l;
  };
  const std::vector<double> a = losses(out0), b = losses(one.out);
  ASSERT_EQ(a.size(), 20u) << out0;
  ASSERT_EQ(b.size(), 20u) << one.out;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << "step " << i;
  EXPECT_LE(d, 2e-3);
}

// A worker whose network goes away (its link cut: Wi-Fi dropped) is found by the heartbeat within
// seconds; the other two go on and finish, and the cut-off node stops with a message that says it
// lost node 0. Nodes 0 and 1 share one network namespace, node 2 is in another, joined by a veth
// link that the test takes down.
TEST(Elastic, ANodeCutOffByItsLinkIsLeftBehindAndTheOthersFinish) {
  NetnsPair net("el");
  const std::string why = net.make();
  if (!why.empty()) GTEST_SKIP() << why;
  BaseDir n0("nc_elc_node0");
  EmptyDir n1("nc_elc_node1"), n2("nc_elc_node2");
  const std::string common = std::string(" run --nnodes 2:3 --nproc-per-node 1 --threads-per-rank 1 --master-addr ") +
                             NetnsPair::kAddrA + " --heartbeat-timeout 3 --master-port 29500";
  const std::string flags = with_iterations(60);
  const std::vector<std::string> dirs{n0.dir, n1.dir, n2.dir};
  std::vector<std::unique_ptr<BackgroundNode>> nodes;
  for (int k = 0; k < 3; ++k) {
    const std::string ns = k < 2 ? net.a : net.b;
    nodes.push_back(std::make_unique<BackgroundNode>(dirs[k], common + " --node-rank " + std::to_string(k) + flags,
                                                     "NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_JOB_TOKEN=cut",
                                                     n0.dir + "/node" + std::to_string(k) + ".log",
                                                     std::string(NetnsPair::kIp) + " netns exec " + ns));
  }
  ASSERT_TRUE(logged_steps(*nodes[0], 5));
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_EQ(NetnsPair::sh({NetnsPair::kIp, "-n", net.b, "link", "set", net.vb, "down"}).first, 0);
  for (auto& n : nodes)
    ASSERT_TRUE(n->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(180))) << slurp(n->log);
  const std::string out0 = slurp(nodes[0]->log), out2 = slurp(nodes[2]->log);
  EXPECT_TRUE(WIFEXITED(nodes[0]->status) && WEXITSTATUS(nodes[0]->status) == 0) << out0;
  EXPECT_TRUE(WIFEXITED(nodes[1]->status) && WEXITSTATUS(nodes[1]->status) == 0) << slurp(nodes[1]->log);
  EXPECT_NE(out0.find("rank 2 (host "), std::string::npos) << out0;
  EXPECT_NE(out0.find("stopped answering its heartbeat for "), std::string::npos) << out0;
  EXPECT_NE(out0.find("Rank 2 left the job in step "), std::string::npos) << out0;
  EXPECT_NE(out0.find("step 00059/00060"), std::string::npos) << out0;
  // the cut-off node stops (non-zero) saying it cannot reach node 0
  EXPECT_FALSE(WIFEXITED(nodes[2]->status) && WEXITSTATUS(nodes[2]->status) == 0) << out2;
  EXPECT_NE(out2.find("cannot be reached: the job's store at 10.78.0.1:29500 (node 0)"), std::string::npos) << out2;
  std::printf("the cut-off node ended %.1f s after the cut\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count());
}

// --sync diloco in an elastic job: node 2 dies inside the round after step 3's boundary. Node 0
// writes its copy of that boundary, the other two go on from it as a new generation (the round in
// progress is trained again; node 1 starts its inner optimizer state afresh, as on a resume
// without its own folder) and end bit for bit where two nodes resuming that copy end.
TEST(Elastic, ADiLoCoNodeThatLeavesCostsTheRoundInProgressOnly) {
  BaseDir n0("nc_eld_node0");
  EmptyDir n1("nc_eld_node1"), n2("nc_eld_node2"), fresh("nc_eld_fresh");
  const std::vector<std::string> dirs{n0.dir, n1.dir, n2.dir};
  const std::string diloco = " --sync diloco --sync-every 3";
  const auto e = three_nodes(dirs, "2:3", "NANOCHAT_TEST_FAULT=die:2:4", diloco);
  ASSERT_EQ(e[0].code, 0) << e[0].out << "\n--- node 1:\n" << e[1].out << "\n--- node 2:\n" << e[2].out;
  ASSERT_EQ(e[1].code, 0) << e[1].out;
  EXPECT_NE(e[2].code, 0) << e[2].out;
  const std::string& out = e[0].out;
  EXPECT_NE(out.find("Saved checkpoint " + n0.ckpt() +
                     "/model_000003.safetensors (node 0's copy of its state at step 3, the last boundary)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("); 2 ranks go on (old ranks [0,1]) from step 3: steps 3 to "), std::string::npos) << out;
  EXPECT_NE(out.find("DiLoCo: 2 nodes (2 ranks)"), std::string::npos) << out;
  EXPECT_NE(out.find("Node 1 (rank 1) has no inner optimizer state of step 3"), std::string::npos) << out;
  EXPECT_NE(out.find("step 00009/00010"), std::string::npos) << out;
  const nanochat::StFile elastic = nanochat::load_safetensors(n0.ckpt() + "/model_000010.safetensors");
  // the truth: node 0's copy of step 3 resumed by two nodes, node 1 without a folder of its own
  const auto r = some_nodes(2, {n0.dir, fresh.dir}, "2", "", diloco + " --resume-from-step 3");
  ASSERT_EQ(r[0].code, 0) << r[0].out << "\n--- node 1:\n" << r[1].out;
  ASSERT_NE(r[0].out.find("Resumed from step 3"), std::string::npos) << r[0].out;
  EXPECT_EQ(max_rel_diff(nanochat::load_safetensors(n0.ckpt() + "/model_000010.safetensors"), elastic), 0.0);
}

// A node started later joins a --sync diloco job at a round's boundary, takes the outer weights
// and trains its share of the rows to the end.
TEST(Elastic, ANodeJoinsADiLoCoJobAtARoundsBoundary) {
  BaseDir n0("nc_eldj_node0");
  EmptyDir n1("nc_eldj_node1");
  std::string out0, out1;
  ASSERT_NO_FATAL_FAILURE(
      join_later(n0.dir, n1.dir, with_iterations(24) + " --sync diloco --sync-every 4", out0, out1));
  const size_t joined = out0.find("A rank joined the job at step ");
  ASSERT_NE(joined, std::string::npos) << out0;
  const int join_step = std::stoi(out0.substr(joined + std::strlen("A rank joined the job at step ")));
  EXPECT_EQ(join_step % 4, 0) << out0;
  EXPECT_NE(out0.find("DiLoCo: 2 nodes (2 ranks)"), std::string::npos) << out0;
  EXPECT_NE(out0.find("Outer step after step " + std::to_string(join_step + 4) + ": 2 nodes"), std::string::npos)
      << out0;
  const size_t last = out0.find("step 00023/00024");
  ASSERT_NE(last, std::string::npos) << out0;
  EXPECT_NE(out0.substr(last, out0.find('\n', last) - last).find(" r1 "), std::string::npos) << out0.substr(last, 600);
}

// A frozen --sync diloco node (SIGSTOP inside a round) is found by the heartbeat although no
// collective crosses nodes then; the others go on from node 0's copy of the last boundary, and the
// node, woken, joins again at a boundary and trains to the end.
TEST(Elastic, AFrozenDiLoCoNodeIsLeftBehindAndRejoinsAtABoundary) {
  BaseDir n0("nc_eldf_node0");
  EmptyDir n1("nc_eldf_node1"), n2("nc_eldf_node2");
  std::vector<std::unique_ptr<BackgroundNode>> nodes =
      three_nodes({n0.dir, n1.dir, n2.dir}, "2:3", 200, " --sync diloco --sync-every 5");
  ASSERT_TRUE(logged_steps(*nodes[0], 7));
  nodes[2]->signal_node(SIGSTOP);
  const auto frozen = std::chrono::steady_clock::now();
  ASSERT_TRUE(logged_line(*nodes[0], "Rank 2 left the job"));
  const double went_on = std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen).count();
  std::printf("the DiLoCo job went on %.1f s after node 2 froze\n", went_on);
  EXPECT_LT(went_on, 60.0);
  nodes[2]->signal_node(SIGCONT);
  for (auto& n : nodes)
    ASSERT_TRUE(n->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(240))) << slurp(n->log);
  for (auto& n : nodes) EXPECT_TRUE(WIFEXITED(n->status) && WEXITSTATUS(n->status) == 0) << slurp(n->log);
  const std::string out0 = slurp(nodes[0]->log);
  EXPECT_NE(out0.find("(node 0's copy of its state at step "), std::string::npos) << out0;
  EXPECT_NE(out0.find("2 ranks go on (old ranks [0,1])"), std::string::npos) << out0;
  const size_t joined = out0.find("A rank joined the job at step ");
  ASSERT_NE(joined, std::string::npos) << out0;
  EXPECT_EQ(std::stoi(out0.substr(joined + std::strlen("A rank joined the job at step "))) % 5, 0) << out0;
  const size_t last = out0.find("step 00199/00200");
  ASSERT_NE(last, std::string::npos) << out0;
  EXPECT_NE(out0.substr(last, out0.find('\n', last) - last).find(" r2 "), std::string::npos) << out0.substr(last, 600);
}

// The same with long rounds: node 1 dies inside a round that node 0 (made 40x slower) has seconds
// left of. Node 0's data feed finds the broken connection and its heartbeat the death long before
// the boundary: the feed stops sending node 1's rows (it does not stop the job), the next step
// ends the generation, and node 0 goes on alone from its copy of step 5 to the end.
TEST(Elastic, ADiLoCoNodeThatDiesMidRoundIsLetGoBeforeTheBoundary) {
  BaseDir n0("nc_eldl_node0");
  EmptyDir n1("nc_eldl_node1");
  const std::string common =
      " run --nnodes 1:2 --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 "
      "--allow-loopback-master --heartbeat-timeout 4 --master-port " +
      std::to_string(test_port());
  const std::string flags = with_iterations(12) + " --sync diloco --sync-every 5";
  Result r0, r1;
  std::thread t0([&] {
    r0 = run_at(n0.dir, common + " --node-rank 0" + flags,
                "NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_TEST_FAULT=slow:0:" + std::to_string(40 / kStepScale));
  });
  std::thread t1([&] {
    r1 =
        run_at(n1.dir, common + " --node-rank 1" + flags, "NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_TEST_FAULT=die:1:6");
  });
  t0.join();
  t1.join();
  ASSERT_EQ(r0.code, 0) << r0.out << "\n--- node 1:\n" << r1.out;
  EXPECT_EQ(r0.out.find("could not serve the data"), std::string::npos) << r0.out;
  EXPECT_NE(r0.out.find("(node 0's copy of its state at step 5, the last boundary)"), std::string::npos) << r0.out;
  EXPECT_NE(r0.out.find("1 rank goes on (old rank 0) from step 5"), std::string::npos) << r0.out;
  EXPECT_EQ(r0.out.find("Outer step after step 10: 2 nodes"), std::string::npos) << "node 0 waited for the boundary";
  EXPECT_NE(r0.out.find("step 00011/00012"), std::string::npos) << r0.out;
}
