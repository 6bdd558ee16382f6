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
std::vector<Result> three_nodes(const std::vector<std::string>& dirs, const std::string& nnodes, const std::string& env) {
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
