// Elastic jobs through the binary (`nanochat run --nnodes MIN:MAX`, train/elastic.h): three nodes
// on this host (one rank each, their own base folders; node 0 serves the data), one of which
// leaves mid-run. The others must regroup and end where an uninterrupted run ends (the tolerance
// of the world-size tests: the survivors sum the redone step's gradients in another grouping), and
// say who left, why and how long the job took to go on. Bounds, not exact times.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/core/safetensors.h"
#include "support/cli_util.h"
#include "support/test_port.h"
#include "support/two_nodes.h"
#include "support/weights_compare.h"

using namespace nctest;

namespace {

// 768 tokens per step = 6 rows of T 64: 2 per rank with 3 ranks, 3 per rank with 2.
const char* kElastic =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 768 --eval-every -1 --sample-every -1 --core-metric-every -1"
    " --threads 1 --model-tag t --num-iterations 10 --warmup-steps 1 --balance even";

// Three nodes of one rank each (node 0 in dirs[0], ...), `nnodes` ("3" or "2:3"), each with the
// extra environment `env`; returns their results.
std::vector<Result> three_nodes(const std::vector<std::string>& dirs, const std::string& nnodes,
                                const std::string& env) {
  const std::string common = " run --nnodes " + nnodes +
                             " --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 "
                             "--allow-loopback-master --heartbeat-timeout 4 --master-port " +
                             std::to_string(test_port());
  std::vector<Result> r(3);
  std::vector<std::thread> t;
  for (int k = 0; k < 3; ++k)
    t.emplace_back([&, k] {
      r[k] = run_at(dirs[k], common + " --node-rank " + std::to_string(k) + kElastic,
                    "NANOCHAT_RENDEZVOUS_TIMEOUT=60 " + env);
    });
  for (auto& x : t) x.join();
  return r;
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
  EXPECT_NE(out.find("Rank 2 left the job in step 4 (why: above); 2 ranks go on (old ranks [0,1]) from step 4"),
            std::string::npos)
      << out;
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

  // the same run on three nodes, nobody leaving
  fs::remove_all(n0.ckpt());
  const auto u = three_nodes(dirs, "3", "");
  ASSERT_EQ(u[0].code, 0) << u[0].out;
  const double d =
      max_rel_diff(nanochat::load_safetensors(n0.ckpt() + "/model_000010.safetensors"), elastic, /*verbose=*/true);
  std::printf("elastic run vs uninterrupted: max relative difference %.3g\n", d);
  EXPECT_LE(d, 1e-4);
}

namespace {

// A `nanochat run` started in the background with its output in a file; killed (its process
// group: the launcher and its rank) on destruction if still running.
struct BackgroundNode {
  pid_t pid = -1;
  int status = -1;
  std::string log;
  BackgroundNode(const std::string& dir, const std::string& args, const std::string& env, const std::string& log_path)
      : log(log_path) {
    const std::string cmd =
        "NANOCHAT_BASE_DIR=" + dir + " " + env + " exec " + NANOCHAT_BINARY + args + " > " + log + " 2>&1";
    pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);  // its own group: the test can freeze the whole node
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    ::setpgid(pid, pid);
  }
  bool wait_until(std::chrono::steady_clock::time_point deadline) {
    while (status < 0) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        status = st;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return true;
  }
  // The launcher's ranks (each in its own process group), from /proc.
  std::vector<pid_t> ranks() const {
    std::vector<pid_t> out;
    std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
    for (pid_t c; in >> c;) out.push_back(c);
    return out;
  }
  // SIGSTOP / SIGCONT to the launcher and its ranks: the whole node (a laptop asleep or awake).
  void signal_node(int sig) {
    for (pid_t r : ranks()) ::kill(r, sig);
    ::kill(-pid, sig);
  }
  ~BackgroundNode() {
    if (pid > 0 && status < 0) {
      for (pid_t r : ranks())
        if (slurp("/proc/" + std::to_string(r) + "/comm").rfind("nanochat", 0) == 0) {
          ::kill(r, SIGCONT);
          ::kill(r, SIGKILL);
        }
      ::kill(-pid, SIGCONT);
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
};

}  // namespace

// A node that freezes (SIGSTOP to its launcher and rank: a laptop whose lid closed) is found by the
// heartbeat; the other two regroup and finish the run. When it wakes after they went on, it is told
// so and exits; it never joins the new group.
TEST(Elastic, AFrozenNodeIsLeftBehindAndToldSoWhenItWakes) {
  BaseDir n0("nc_elf_node0");
  EmptyDir n1("nc_elf_node1"), n2("nc_elf_node2");
  const std::string common =
      " run --nnodes 2:3 --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 --allow-loopback-master"
      " --heartbeat-timeout 3 --master-port " +
      std::to_string(test_port());
  std::string flags = kElastic;
  flags.replace(flags.find("--num-iterations 10"), std::strlen("--num-iterations 10"), "--num-iterations 150");
  std::vector<std::unique_ptr<BackgroundNode>> nodes;
  const std::vector<std::string> dirs{n0.dir, n1.dir, n2.dir};
  for (int k = 0; k < 3; ++k)
    nodes.push_back(std::make_unique<BackgroundNode>(dirs[k], common + " --node-rank " + std::to_string(k) + flags,
                                                     "NANOCHAT_RENDEZVOUS_TIMEOUT=60",
                                                     n0.dir + "/node" + std::to_string(k) + ".log"));
  const auto start = std::chrono::steady_clock::now();
  while (count_of(slurp(nodes[0]->log), "] step ") < 5) {
    ASSERT_LT(std::chrono::steady_clock::now(), start + std::chrono::seconds(120)) << slurp(nodes[0]->log);
    ASSERT_FALSE(nodes[0]->wait_until(std::chrono::steady_clock::now())) << slurp(nodes[0]->log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(nodes[2]->ranks().empty()) << "node 2's launcher has no rank";
  nodes[2]->signal_node(SIGSTOP);
  // the others go on: wait for the regroup line (heartbeat 3 s, then seconds), bounded
  const auto frozen = std::chrono::steady_clock::now();
  while (slurp(nodes[0]->log).find("Rank 2 left the job") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), frozen + std::chrono::seconds(90)) << slurp(nodes[0]->log);
    ASSERT_FALSE(nodes[0]->wait_until(std::chrono::steady_clock::now())) << slurp(nodes[0]->log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("the job went on %.1f s after node 2 froze\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen).count());
  // node 2 wakes while the others train: it must stop, saying it was left behind
  nodes[2]->signal_node(SIGCONT);
  ASSERT_TRUE(nodes[2]->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(60)))
      << slurp(nodes[2]->log);
  const std::string out2 = slurp(nodes[2]->log);
  EXPECT_NE(out2.find("the job went on without this rank"), std::string::npos) << out2;
  EXPECT_NE(out2.find("this node left the job, which went on without it"), std::string::npos) << out2;
  // the two others finish the run
  ASSERT_TRUE(nodes[0]->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(240)))
      << slurp(nodes[0]->log);
  ASSERT_TRUE(nodes[1]->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(60)))
      << slurp(nodes[1]->log);
  const std::string out0 = slurp(nodes[0]->log);
  EXPECT_TRUE(WIFEXITED(nodes[0]->status) && WEXITSTATUS(nodes[0]->status) == 0) << out0;
  EXPECT_TRUE(WIFEXITED(nodes[1]->status) && WEXITSTATUS(nodes[1]->status) == 0) << slurp(nodes[1]->log);
  EXPECT_NE(out0.find("stopped answering its heartbeat for "), std::string::npos) << out0;
  EXPECT_NE(out0.find("2 ranks go on (old ranks [0,1])"), std::string::npos) << out0;
  EXPECT_NE(out0.find("step 00149/00150"), std::string::npos) << out0;
  EXPECT_EQ(count_of(out0, "left the job in step"), 1u) << out0;
}
