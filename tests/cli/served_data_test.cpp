// Node 0 serves the data (the default of a job with several ranks; feed/step_source.h), through the
// binary: a worker whose base directory is empty (no shards, no tokenizer) trains and evaluates as
// one process does, and node 0's files alone resume the run at 1, 2 and 3 ranks; over two network
// namespaces joined by a 1 Gbit/s link too; node 0's data errors (no shards, no val shard, a
// corrupt shard met mid-run) stop every node with one message naming the file on node 0.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <string>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/safetensors.h"
#include "support/cli_util.h"
#include "support/netns_pair.h"
#include "support/two_nodes.h"
#include "support/weights_compare.h"

using namespace nctest;

namespace {

// Settings whose runs at any world size agree to 1e-4 (depth 3, no weight decay, 12 rows per step);
// val bpb before step 0 and after the last step, over 4 batches (so each rank evaluates some).
const char* kServe =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 768 --eval-every 5 --eval-tokens 512 --sample-every -1"
    " --core-metric-every -1 --threads 1 --model-tag t --num-iterations 5 --warmup-steps 1 --weight-decay 0";

// The val bpb lines of a run: step -> bpb.
std::map<int64_t, double> val_bpb(const std::string& out) {
  std::map<int64_t, double> m;
  const std::regex re("Step 0*([0-9]+) \\| Validation bpb: ([0-9.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    m[std::stoll((*it)[1])] = std::stod((*it)[2]);
  return m;
}

void expect_same_bpb(const std::map<int64_t, double>& want, const std::map<int64_t, double>& got) {
  ASSERT_EQ(want.size(), 2u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [step, bpb] : want) {
    ASSERT_TRUE(got.count(step)) << "no val bpb at step " << step;
    EXPECT_NEAR(got.at(step), bpb, 1e-4) << "step " << step;
  }
}

bool has(const std::string& out, const std::string& s) { return out.find(s) != std::string::npos; }

std::string model_file(const std::string& base, int step) {
  char b[64];
  std::snprintf(b, sizeof b, "/base_checkpoints/t/model_%06d.safetensors", step);
  return base + b;
}

}  // namespace

// The worker holds nothing: it gets the tokenizer, its rows and its val batches from node 0, and
// the weights and val bpb equal the one-process run's; rank 1 is slowed, so the rows are split
// unevenly and re-planned. Node 0's checkpoint alone resumes with 1 rank, 3 ranks and the two
// nodes again, each ending where the uninterrupted run ends.
TEST(ServedData, AWorkerWithAnEmptyBaseDirTrainsEvaluatesAndResumesLikeOneProcess) {
  BaseDir n0("nc_sd_node0"), u("nc_sd_one");
  EmptyDir n1("nc_sd_node1");
  auto one = run(u, kServe);
  ASSERT_EQ(one.code, 0) << one.out;
  const StFile uninterrupted = load_safetensors(model_file(u.dir, 5));
  const auto bpb = val_bpb(one.out);
  auto [a0, a1] = two_nodes(n0.dir, n1.dir, std::string(kServe) + " --save-every 3", "NANOCHAT_TEST_FAULT=slow:1:3");
  ASSERT_EQ(a0.code, 0) << a0.out << "\n--- node 1:\n" << a1.out;
  ASSERT_EQ(a1.code, 0) << a1.out;
  EXPECT_TRUE(has(a0.out, "Data: node 0 reads " + n0.dir + "/base_data_climbmix and sends every rank its rows"))
      << a0.out;
  EXPECT_TRUE(has(a0.out, "All 2 ranks agree on build, model, batch, tokenizer, and flags; node 0 serves the data"))
      << a0.out;
  EXPECT_TRUE(n1.contents().empty()) << "the worker wrote " << n1.contents().front();
  EXPECT_LE(max_rel_diff(uninterrupted, load_safetensors(model_file(n0.dir, 5))), 1e-4);
  expect_same_bpb(bpb, val_bpb(a0.out));
  for (int W : {1, 3}) {
    SCOPED_TRACE("resumed by " + std::to_string(W) + " ranks");
    const std::string launch =
        W == 1 ? std::string()
               : " run --nproc-per-node 3 --threads-per-rank 1 --master-port " + std::to_string(test_port());
    auto r = run(n0, launch + kServe + " --resume-from-step 3");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(has(r.out, "Resumed from step 3")) << r.out;
    EXPECT_LE(max_rel_diff(uninterrupted, load_safetensors(model_file(n0.dir, 5))), 1e-4);
    EXPECT_NEAR(val_bpb(r.out).at(5), bpb.at(5), 1e-4);
  }
  auto [b0, b1] = two_nodes(n0.dir, n1.dir, std::string(kServe) + " --resume-from-step 3", "");
  ASSERT_EQ(b0.code, 0) << b0.out << "\n--- node 1:\n" << b1.out;
  EXPECT_LE(max_rel_diff(uninterrupted, load_safetensors(model_file(n0.dir, 5))), 1e-4);
  EXPECT_TRUE(n1.contents().empty());
}

// Node 0 without shards, and with a train shard but no val shard: both nodes stop before step 0
// with the error naming node 0's data folder (the worker prints node 0's message).
TEST(ServedData, NodeZeroWithoutShardsOrValShardStopsEveryNodeNamingItsFolder) {
  BaseDir n0("nc_sd_nodata");
  EmptyDir n1("nc_sd_nodata1");
  const std::string data = n0.dir + "/base_data_climbmix";
  const std::string flags = std::string(kServe) + " --num-iterations 2";
  fs::remove(data + "/shard_00001.parquet");
  fs::remove(data + "/shard_00002.parquet");
  auto [v0, v1] = two_nodes(n0.dir, n1.dir, flags, "");
  EXPECT_NE(v0.code, 0) << v0.out;
  EXPECT_NE(v1.code, 0) << v1.out;
  for (const Result* r : {&v0, &v1}) {
    EXPECT_TRUE(has(r->out, data)) << r->out;
    EXPECT_TRUE(has(r->out, "val")) << r->out;
    EXPECT_FALSE(has(r->out, "step 00000")) << r->out;
  }
  EXPECT_TRUE(has(v1.out, "rank 1: rank 0 (at 127.0.0.1) stopped the job: ")) << v1.out;
  fs::remove_all(data);
  auto [e0, e1] = two_nodes(n0.dir, n1.dir, flags, "");
  EXPECT_NE(e0.code, 0) << e0.out;
  EXPECT_NE(e1.code, 0) << e1.out;
  for (const Result* r : {&e0, &e1}) EXPECT_TRUE(has(r->out, data)) << r->out;
  EXPECT_TRUE(n1.contents().empty());
}

// A node with --local-data and one without would wait for different things: both stop at once
// naming the data source.
TEST(ServedData, NodesThatDisagreeOnTheDataSourceStopNamingIt) {
  BaseDir n0("nc_sd_mixed0");
  EmptyDir n1("nc_sd_mixed1");
  auto [m0, m1] = two_nodes(n0.dir, n1.dir, std::string(kServe) + " --num-iterations 1", "", " --local-data");
  for (const Result* r : {&m0, &m1}) {
    EXPECT_NE(r->code, 0) << r->out;
    EXPECT_TRUE(has(r->out, "'data source' differs:")) << r->out;
    EXPECT_TRUE(has(r->out, "'each node's own shards (--local-data)' on rank 1")) << r->out;
  }
}

// A corrupt page in the last train row group (start-up check skipped) is met while training: both
// nodes stop at the same step with rank 0's message naming the file, and the last checkpoint
// before it stays complete.
TEST(ServedData, ACorruptShardMetMidRunStopsEveryNodeNamingIt) {
  BaseDir n0("nc_sd_corrupt");
  EmptyDir n1("nc_sd_corrupt1");
  const std::string bad = n0.dir + "/base_data_climbmix/shard_00001.parquet";
  corrupt_row_group(bad, 5);
  const std::string flags =
      std::string(kServe) + " --eval-every -1 --num-iterations 400 --save-every 2 --skip-data-check";
  auto [c0, c1] = two_nodes(n0.dir, n1.dir, flags, "");
  EXPECT_NE(c0.code, 0) << c0.out;
  EXPECT_NE(c1.code, 0) << c1.out;
  EXPECT_TRUE(has(c0.out, "step 00002")) << "the corrupt row group was met before training: " << c0.out;
  for (const Result* r : {&c0, &c1}) {
    EXPECT_TRUE(has(r->out, "rank 0 (host ")) << r->out;
    EXPECT_TRUE(has(r->out, "could not serve the data: ")) << r->out;
    EXPECT_TRUE(has(r->out, bad)) << r->out;
  }
  auto steps = complete_checkpoint_steps(n0.ckpt());
  ASSERT_FALSE(steps.empty());
  auto r = run(n0, std::string(kServe) + " --eval-every -1 --num-iterations " + std::to_string(steps.back() + 1) +
                       " --skip-data-check --resume-from-step " + std::to_string(steps.back()));
  EXPECT_EQ(r.code, 0) << r.out;
}

// Two hosts (network namespaces, 1 Gbit/s, one --port-range): the worker's base directory is empty,
// the run ends where the one-process run ends, and node 0's checkpoint alone resumes it with 1
// and 3 ranks.
TEST(ServedData, OverTwoNamespacesTheWorkerNeedsNoFiles) {
  NetnsPair net("sd");
  const std::string why = net.make();
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string shaped = net.shape("1gbit");
  if (!shaped.empty()) GTEST_SKIP() << shaped;
  BaseDir n0("nc_sd_ns0"), u("nc_sd_ns_one");
  EmptyDir n1("nc_sd_ns1");
  auto one = run(u, kServe);
  ASSERT_EQ(one.code, 0) << one.out;
  const std::string args = std::string(kServe) + " --save-every 3";
  Proc p0 = net.start_node(0, NetnsPair::kAddrA, n0.dir, "served-data", args);
  Proc p1 = net.start_node(1, NetnsPair::kAddrA, n1.dir, "served-data", args);
  ASSERT_TRUE(p0.wait(Ms(240000))) << p0.output();
  ASSERT_TRUE(p1.wait(Ms(60000))) << p1.output();
  ASSERT_TRUE(p0.exited_ok()) << p0.output() << "\n--- node 1:\n" << p1.output();
  ASSERT_TRUE(p1.exited_ok()) << p1.output();
  EXPECT_TRUE(has(p0.output(), "node 0 serves the data")) << p0.output();
  // the data goes over the --port-range port Gloo's pairs used first (one range opened in a firewall)
  EXPECT_TRUE(has(p0.output(), "sends every rank its rows (port 29600)")) << p0.output();
  EXPECT_TRUE(n1.contents().empty());
  const StFile uninterrupted = load_safetensors(model_file(u.dir, 5));
  EXPECT_LE(max_rel_diff(uninterrupted, load_safetensors(model_file(n0.dir, 5))), 1e-4);
  expect_same_bpb(val_bpb(one.out), val_bpb(p0.output()));
  for (const std::string& launch :
       {std::string(), " run --nproc-per-node 3 --threads-per-rank 1 --master-port " + std::to_string(test_port())}) {
    auto r = run(n0, launch + kServe + " --resume-from-step 3");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_LE(max_rel_diff(uninterrupted, load_safetensors(model_file(n0.dir, 5))), 1e-4) << launch;
  }
}
