// The whole road as a job of two nodes on this host, one command each (`nanochat run --nnodes 1:2
// --node-rank K ... speedrun`, cli/road_job.h): node 0 (its own base folder) walks the road and
// writes the card; node 1 (an empty folder: only the binary) takes part in base-train, chat-sft and
// chat-rl and ends after the last of them. Node 1 freezes during chat-sft (SIGSTOP: a laptop whose lid
// closed): the stage goes on without it, and it joins again when it wakes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include "support/background_node.h"
#include "support/cli_util.h"
#include "support/proc_util.h"
#include "support/test_port.h"

using namespace nctest;

namespace {

// Both nodes of a job run `speedrun_flags` (node 0 in b0, node 1 in b1), each bounded by 600 s;
// their outputs.
std::pair<Result, Result> job_pair(const BaseDir& b0, const EmptyDir& b1, const std::string& speedrun_flags);

// "28.5s", "1m45s", "2h03m" (road/card.h duration_text) in seconds.
double seconds_of(const std::string& t) {
  double h = 0, m = 0, sec = 0;
  if (std::sscanf(t.c_str(), "%lfh%lfm", &h, &m) == 2) return 3600 * h + 60 * m;
  if (std::sscanf(t.c_str(), "%lfm%lfs", &m, &sec) == 2) return 60 * m + sec;
  return std::stod(t);
}

}  // namespace

namespace {

// The tiny preset made smaller (speedrun_test.cpp's road); chat-sft long enough for a node to
// freeze, be found gone and wake within it (node 0's rank 0 runs its training steps 8x slower).
std::string job_road() {
  return " speedrun --offline --replace-tokenizer --model-tag job"
         " --tok-train.vocab-size 512 --tok-train.max-chars 2000000"
         " --base-train.depth 2 --base-train.aspect-ratio 32 --base-train.head-dim 32 --base-train.max-seq-len 64"
         " --base-train.device-batch-size 4 --base-train.total-batch-size 512 --base-train.num-iterations 12"
         " --base-train.eval-every 6 --base-train.save-every 6 --base-train.eval-tokens 2048 --base-train.threads 1"
         " --base-eval.split-tokens 1024"
         " --chat-sft.num-iterations 200 --chat-sft.eval-every -1 --chat-sft.eval-tokens 1024 --chat-sft.threads 1"
         " --chat-sft.balance even"
         " --chat-eval.max-problems 4 --chat-eval.max-new-tokens 16 --chat-eval.threads 1"
         " --chat-rl.max-new-tokens 16 --chat-rl.eval-examples 4";
}

std::string job_flags(int node, int port) {
  return " run --nnodes 1:2 --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 --allow-loopback-master"
         " --heartbeat-timeout 3 --master-port " +
         std::to_string(port) + " --node-rank " + std::to_string(node);
}

}  // namespace

TEST(SpeedrunJob, TwoNodesRunTheRoadWithOneCommandEachAndAFrozenNodeRejoinsChatSft) {
  BaseDir b0("nc_roadjob0");
  EmptyDir b1("nc_roadjob1");
  const int port = test_port();
  BackgroundNode node1(b1.dir, job_flags(1, port) + job_road(), "", b0.dir + "/node1.log");
  BackgroundNode node0(b0.dir, job_flags(0, port) + job_road(), "NANOCHAT_TEST_FAULT=slow:0:8", b0.dir + "/node0.log");
  // chat-sft under way on both nodes: node 1 freezes
  ASSERT_TRUE(logged_line(node1, "takes part in node 0's chat-sft"));
  ASSERT_TRUE(logged_steps(node0, 5, "| epoch: 1 | total time"));  // chat-sft's step lines (base-train's differ)
  ASSERT_FALSE(node1.ranks().empty()) << slurp(node1.log);
  node1.signal_node(SIGSTOP);
  ASSERT_TRUE(logged_line(node0, "Rank 1 left the job"));
  node1.signal_node(SIGCONT);
  for (auto* n : {&node0, &node1})
    ASSERT_TRUE(n->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(400))) << slurp(n->log);
  const std::string out0 = slurp(node0.log), out1 = slurp(node1.log);
  EXPECT_TRUE(WIFEXITED(node0.status) && WEXITSTATUS(node0.status) == 0) << out0 << "\n--- node 1:\n" << out1;
  EXPECT_TRUE(WIFEXITED(node1.status) && WEXITSTATUS(node1.status) == 0) << out1;

  // node 0: its distributed stages had two ranks; the rest ran alone; the card is written
  EXPECT_NE(out0.find("speedrun: node 0 of a job (nanochat run "), std::string::npos) << out0;
  for (const char* stage : {"base-train", "chat-sft"}) {
    const std::string log = slurp(b0.dir + "/report/logs/" + stage + ".log");
    EXPECT_NE(log.find("[rank 0] All 2 ranks agree on build, model, batch, tokenizer, and flags"), std::string::npos)
        << stage << ":\n"
        << log;
  }
  EXPECT_NE(out0.find("A rank joined the job at step "), std::string::npos) << out0;
  EXPECT_NE(out0.find("chat-rl: sft model job step "), std::string::npos) << out0;
  EXPECT_NE(slurp(b0.dir + "/report/logs/chat-rl.log").find("), 2 rank(s)"), std::string::npos)
      << "chat-rl on both nodes:\n"
      << slurp(b0.dir + "/report/logs/chat-rl.log");
  EXPECT_NE(out0.find("speedrun: the road is done"), std::string::npos) << out0;
  // the card names both nodes with their share of base-train's rows (dealt evenly at first, then
  // by speed: neither node did all of them)
  const std::string card = slurp(b0.dir + "/report/report.md");
  EXPECT_NE(card.find("chat-sft"), std::string::npos) << card;
  // chat-sft's section says that node 1 left and joined again
  const size_t sft = card.find("## Chat SFT");
  ASSERT_NE(sft, std::string::npos) << card;
  const std::string sft_section = card.substr(sft, card.find("\n## ", sft + 1) - sft);
  EXPECT_NE(sft_section.find("- nodes that left or joined: rank 1 left at step "), std::string::npos) << sft_section;
  EXPECT_NE(sft_section.find(", 1 rank joined at step "), std::string::npos) << sft_section;
  for (const char* node : {"| 0 | ", "| 1 | "}) {
    const size_t at = card.find(node);
    ASSERT_NE(at, std::string::npos) << card;
    const std::string line = card.substr(at, card.find('\n', at) - at);
    EXPECT_NE(line.find("% of base-train's rows |"), std::string::npos) << line;
    EXPECT_EQ(line.find("| 100.0% of"), std::string::npos) << line;
  }

  // node 1: base-train, chat-sft and chat-rl, then it ends; it wrote nothing but its log
  EXPECT_NE(out1.find("takes part in node 0's base-train"), std::string::npos) << out1;
  EXPECT_NE(out1.find("asking node 0 to admit it again"), std::string::npos) << out1;
  EXPECT_NE(out1.find("takes part in node 0's chat-rl"), std::string::npos) << out1;
  EXPECT_NE(out1.find("node 0's last distributed stage is done (this node took part in 4 stages)"), std::string::npos)
      << "the speed probe, base-train, chat-sft and chat-rl:\n"
      << out1;
  EXPECT_FALSE(std::filesystem::exists(b1.dir + "/chatsft_checkpoints")) << out1;
  EXPECT_FALSE(std::filesystem::exists(b1.dir + "/chatrl_checkpoints")) << out1;
  EXPECT_FALSE(std::filesystem::exists(b1.dir + "/report")) << out1;
}

// A node that follows a node 0 running something else than a road is told so, not left waiting.
TEST(SpeedrunJob, ANodeFollowingANodeZeroThatRunsNoRoadIsToldSo) {
  BaseDir b0("nc_roadjob_other0");
  EmptyDir b1("nc_roadjob_other1");
  const int port = test_port();
  const std::string train =
      " base-train --depth 2 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --device-batch-size 2"
      " --total-batch-size 256 --num-iterations 200 --eval-every -1 --sample-every -1 --core-metric-every -1"
      " --threads 1 --model-tag t";
  BackgroundNode node0(b0.dir, job_flags(0, port) + train, "NANOCHAT_TEST_FAULT=slow:0:8 NANOCHAT_ELASTIC_LAST_CALL=1",
                       b0.dir + "/node0.log");
  ASSERT_TRUE(logged_steps(node0, 1));
  const Result r = [&] {
    auto [code, out] = shell("NANOCHAT_BASE_DIR=" + b1.dir + " timeout 120 " + NANOCHAT_BINARY + job_flags(1, port) +
                             " speedrun --offline");
    return Result{code, out};
  }();
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("published no stage: this node follows node 0's `nanochat run ... speedrun`"), std::string::npos)
      << r.out;
}

namespace {

std::string job_flags_of(int node, int port) {
  return " run --nnodes 1:2 --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 --allow-loopback-master"
         " --master-port " +
         std::to_string(port) + " --node-rank " + std::to_string(node);
}

std::pair<Result, Result> job_pair(const BaseDir& b0, const EmptyDir& b1, const std::string& speedrun_flags) {
  const int port = test_port();
  auto at = [&](const std::string& dir, int node) {
    auto [code, out] = shell("cd " + dir + " && NANOCHAT_BASE_DIR=" + dir + " timeout 600 " + NANOCHAT_BINARY +
                             job_flags_of(node, port) + speedrun_flags + " 2>&1");
    return Result{code, out};
  };
  Result r0, r1;
  std::thread t1([&] { r1 = at(b1.dir, 1); });
  r0 = at(b0.dir, 0);
  t1.join();
  return {r0, r1};
}

}  // namespace

// --hours on a job of two nodes: node 0 measures itself, then both nodes together on the road's
// model (the other node takes part), and plans base-train and chat-sft at the pair's speed; the
// road it plans ends within a fifth of its ETA. The budget comes from this machine, as in
// speedrun_test.cpp's one-node test (1.6 x the depth-2 road a plan gives, under depth 3's).
TEST(SpeedrunJob, ATimeBudgetOnAPairPlansWithTheNodesMeasuredTogether) {
  BaseDir b0("nc_roadjob_hours0");
  EmptyDir b1("nc_roadjob_hours1");
  const std::string flags =
      " speedrun --offline --replace-tokenizer --base-train.target-param-data-ratio 1.2 --tok-train.vocab-size 512"
      " --tok-train.max-chars 2000000 --base-eval.split-tokens 1024 --chat-eval.max-problems 8"
      " --chat-eval.max-new-tokens 16 --chat-rl.max-new-tokens 16 --chat-rl.eval-examples 4";
  const auto [plan, plan1] = job_pair(b0, b1, flags + " --hours 10 --plan-only");
  ASSERT_EQ(plan.code, 0) << plan.out << "\n--- node 1:\n" << plan1.out;
  ASSERT_EQ(plan1.code, 0) << plan1.out;
  EXPECT_NE(plan1.out.find("takes part in node 0's speed-probe"), std::string::npos) << plan1.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(plan.out, m,
                                std::regex(R"(2 ranks measured together in [^:]+: the training stages run ([\d.]+)x)")))
      << plan.out;
  const std::regex roads(R"(: d2 \(width \d+\) ([^ ,]+), d3 \(width \d+\) ([^ ,]+))");
  ASSERT_TRUE(std::regex_search(plan.out, m, roads)) << plan.out;
  const double d2 = seconds_of(m[1]), d3 = seconds_of(m[2]);
  ASSERT_LT(1.6 * d2, d3) << plan.out;
  char hours[32];
  std::snprintf(hours, sizeof hours, "%.5f", 1.6 * d2 / 3600.0);
#if defined(__SANITIZE_ADDRESS__)
  return;  // the plan against the road's real time is the Release suite's (speedrun_test.cpp says why)
#endif
  const auto [r, r1] = job_pair(b0, b1, flags + " --hours " + hours);
  ASSERT_EQ(r.code, 0) << r.out << "\n--- node 1:\n" << r1.out;
  EXPECT_EQ(r1.code, 0) << r1.out;
  EXPECT_NE(r1.out.find("takes part in node 0's base-train"), std::string::npos) << r1.out;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(the road is done: ([^ ]+) of stages \(planned ([^)]+)\))")))
      << r.out;
  const double took = seconds_of(m[1]), planned = seconds_of(m[2]);
  for (const std::regex line(R"(speedrun: \[\d+/\d+\] [^\n]* done in [^\n]*|[^\n]*measured together[^\n]*)");
       const auto& x : std::vector<std::smatch>(std::sregex_iterator(r.out.begin(), r.out.end(), line), {}))
    std::printf("%s\n", x.str().c_str());
  std::printf("the pair's road took %.1f s, planned %.1f s (%+.0f%%)\n", took, planned,
              100.0 * (planned - took) / took);
  EXPECT_LE(std::abs(planned - took), 0.2 * took) << "planned " << planned << " s, took " << took << " s\n" << r.out;
}
