// `nanochat run` (launch/launcher.h) and hand-started ranks, as real processes of the CLI on
// 127.0.0.1: the hidden `dist-selftest` subcommand checks every collective against closed forms.
// Failures must end the job with an error naming the rank and host, never hang.
#include "nanochat/launch/launcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "nanochat/cluster/net.h"
#include "nanochat/cluster/store.h"
#include "support/proc_util.h"
#include "support/test_port.h"  // below the ephemeral range: no other process binds there meanwhile

using namespace nanochat;
using namespace nanochat::cluster;
using nctest::Proc;
using ::testing::HasSubstr;

namespace {

// Environment for every CLI process: short deadlines so a bug fails the test instead of hanging.
std::vector<std::string> base_env() {
  return {"NANOCHAT_RENDEZVOUS_TIMEOUT=20", "NANOCHAT_COLLECTIVE_TIMEOUT=30", "NANOCHAT_JOB_TOKEN"};
}

Proc run_cli(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), nctest::nanochat_binary());
  auto e = base_env();
  e.insert(e.end(), env.begin(), env.end());
  return Proc::spawn(args, e);
}

// Every "rank R of W: pid P" in the output (no std::regex: its libstdc++ code trips
// -Wmaybe-uninitialized in the sanitizer build).
std::map<int, long> rank_pids(const std::string& out) {
  std::map<int, long> m;
  for (size_t at = out.find("rank "); at != std::string::npos; at = out.find("rank ", at + 1)) {
    int r = -1, w = -1;
    long pid = -1;
    int used = 0;
    if (std::sscanf(out.c_str() + at, "rank %d of %d: pid %ld%n", &r, &w, &pid, &used) == 3 && used > 0) m[r] = pid;
  }
  return m;
}

bool process_gone(long pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

std::string port_str(int p) { return std::to_string(p); }

}  // namespace

TEST(Launcher, RunsTwoRanksAndPrefixesEveryOutputLine) {
  int port = nctest::test_port();
  Proc p =
      run_cli({"run", "--nproc-per-node", "2", "--master-port", port_str(port), "dist-selftest", "--iterations", "2"});
  ASSERT_TRUE(p.wait(Ms(60000)));
  const std::string& out = p.output();
  EXPECT_TRUE(p.exited_ok()) << out;
  EXPECT_THAT(out, HasSubstr("[rank 0] dist-selftest: rank 0 of 2: OK, 16 checks passed"));
  EXPECT_THAT(out, HasSubstr("[rank 1] dist-selftest: rank 1 of 2: OK, 16 checks passed"));
  std::istringstream is(out);
  std::string line;
  while (std::getline(is, line))
    EXPECT_TRUE(line.rfind("[rank ", 0) == 0 || line.rfind("nanochat run (node 0 on ", 0) == 0) << line;
}

// The ranks run under the program's own name (not "exe", as a copy started as /proc/self/exe is
// called), so that `ps`, `pgrep -x nanochat` and `killall nanochat` find them.
TEST(Launcher, RanksRunUnderTheProgramsName) {
  int port = nctest::test_port();
  Proc p = run_cli({"run", "--nproc-per-node", "2", "--master-port", port_str(port), "dist-selftest", "--iterations",
                    "100000", "--size", "1000"});
  ASSERT_TRUE(p.wait_for_output("rank 1 of 2: iteration 0 ok", Ms(60000))) << p.output();
  ASSERT_TRUE(p.wait_for_output("rank 0 of 2: iteration 0 ok", Ms(60000))) << p.output();
  const auto pids = rank_pids(p.output());
  ASSERT_EQ(pids.size(), 2u) << p.output();
  const std::string name = std::filesystem::path(nctest::nanochat_binary()).filename().string();
  for (const auto& [rank, pid] : pids) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string got;
    std::getline(comm, got);
    EXPECT_EQ(got, name.substr(0, 15)) << "rank " << rank;  // comm holds 15 characters
  }
  p.signal(SIGTERM);
  EXPECT_TRUE(p.wait(Ms(30000)));
}

TEST(Launcher, ThreeRanksGetTorchrunVariablesAndTheirThreadCount) {
  int port = nctest::test_port();
  Proc p = run_cli({"run", "--nproc-per-node", "3", "--master-port", port_str(port), "--threads-per-rank", "3",
                    "dist-selftest", "--iterations", "3"});
  ASSERT_TRUE(p.wait(Ms(60000)));
  const std::string& out = p.output();
  EXPECT_TRUE(p.exited_ok()) << out;
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(out, HasSubstr(str_cat("[rank ", r, "] dist-selftest: rank ", r, " of 3: pid ")));
    EXPECT_THAT(out, HasSubstr(str_cat("rank ", r, " of 3: OK, 24 checks passed")));
  }
  EXPECT_EQ(nctest::count_of(out, "OMP_NUM_THREADS=3\n"), 3u) << out;
  EXPECT_THAT(out, HasSubstr("rank 2 of 3: pid"));
  EXPECT_THAT(out, HasSubstr("LOCAL_RANK=2,"));
}

TEST(Launcher, DefaultThreadsSplitThePhysicalCoresBetweenRanks) {
  int port = nctest::test_port();
  Proc p =
      run_cli({"run", "--nproc-per-node", "2", "--master-port", port_str(port), "dist-selftest", "--iterations", "1"},
              {"OMP_NUM_THREADS"});
  ASSERT_TRUE(p.wait(Ms(60000)));
  EXPECT_TRUE(p.exited_ok()) << p.output();
  const std::string want = str_cat("OMP_NUM_THREADS=", std::max(1, physical_cores() / 2), "\n");
  EXPECT_EQ(nctest::count_of(p.output(), want), 2u) << p.output();
}

TEST(Launcher, AKilledRankStopsTheJobAndEveryoneNamesIt) {
  int port = nctest::test_port();
  Proc p = run_cli({"run", "--nproc-per-node", "3", "--master-port", port_str(port), "dist-selftest", "--iterations",
                    "1000", "--size", "300000", "--die-rank", "1", "--die-at", "2"});
  ASSERT_TRUE(p.wait(Ms(30000))) << p.output();
  const std::string& out = p.output();
  EXPECT_EQ(p.exit_code(), 1) << out;
  EXPECT_THAT(out, ::testing::ContainsRegex(
                       "nanochat: error: rank 1 \\(host [^,]+, pid [0-9]+\\) was killed by signal 9 \\(SIGKILL\\)"));
  for (int r : {0, 2}) {
    EXPECT_THAT(out,
                ::testing::ContainsRegex(str_cat("\\[rank ", r, "\\] nanochat: error: rank ", r,
                                                 " \\(host [^)]+\\): .* failed: rank 1 \\(host [^)]+\\) has died")))
        << out;
  }
}

TEST(Launcher, RanksStartedByHandNameAPeerKilledMidCollective) {
  for (int victim : {2, 0}) {  // 0 also hosts the store
    int port = nctest::test_port();
    std::vector<Proc> ranks;
    for (int r = 0; r < 3; ++r)
      ranks.push_back(
          run_cli({"dist-selftest", "--iterations", "100000", "--size", "200000"},
                  {"WORLD_SIZE=3", "RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=3",
                   "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port_str(port), "NANOCHAT_STORE_HOSTED"}));
    for (auto& p : ranks) ASSERT_TRUE(p.wait_for_output("iteration 0 ok", Ms(30000))) << p.output();
    ranks[victim].signal(SIGKILL);
    auto t0 = Clock::now();
    std::vector<bool> in_time(3, true);
    for (int r = 0; r < 3; ++r)
      if (r != victim) in_time[r] = ranks[r].wait(std::chrono::duration_cast<Ms>(t0 + Ms(10000) - Clock::now()));
    // a late rank: what it and the others printed, and whether it ends at all (for the diagnosis)
    std::string all;
    for (int r = 0; r < 3; ++r) {
      if (!in_time[r]) all += str_cat("(rank ", r, " ended within 20 s more: ", ranks[r].wait(Ms(20000)), ")\n");
      all += str_cat("--- rank ", r, ":\n", ranks[r].output());
    }
    for (int r = 0; r < 3; ++r) {
      if (r == victim) continue;
      ASSERT_TRUE(in_time[r]) << "rank " << r << " still running 10 s after rank " << victim << " was killed:\n" << all;
      const std::string& out = ranks[r].output();
      EXPECT_EQ(ranks[r].exit_code(), 1) << out;
      EXPECT_THAT(out, HasSubstr(str_cat("nanochat: error: rank ", r, " (host ")));
      if (victim == 0) {
        EXPECT_THAT(out,
                    ::testing::ContainsRegex("is unreachable as well, so the process hosting it \\(rank 0 \\(host"))
            << out;
      } else {
        EXPECT_THAT(out, ::testing::ContainsRegex(str_cat("rank ", victim, " \\(host [^)]+\\) has died"))) << out;
      }
    }
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  }
}

TEST(Launcher, MismatchedFactsAreAnErrorOnEveryRank) {
  int port = nctest::test_port();
  Proc p = run_cli({"run", "--nproc-per-node", "3", "--master-port", port_str(port), "dist-selftest", "--fact",
                    "tokenizer=abc", "--fact", "depth=4", "--fact-on-rank", "2:tokenizer=xyz"});
  ASSERT_TRUE(p.wait(Ms(30000)));
  const std::string& out = p.output();
  EXPECT_EQ(p.exit_code(), 1) << out;
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(out, HasSubstr(str_cat("[rank ", r, "] nanochat: error: the ranks of this job disagree on 1 setting")));
    EXPECT_THAT(out, HasSubstr(str_cat("[rank ", r, "]     'xyz' on rank 2 (host ")));
    EXPECT_THAT(out, HasSubstr(str_cat("[rank ", r, "]     'abc' on ranks 0-1 (host ")));
  }
  EXPECT_THAT(out, HasSubstr("nanochat: error: rank "));
}

TEST(Launcher, TwoNodesOnOneHostFormOneJob) {
  int port = nctest::test_port();
  auto node = [&](int k) {
    return run_cli(
        {"run", "--nnodes", "2", "--node-rank", std::to_string(k), "--nproc-per-node", "2", "--master-addr",
         "127.0.0.1", "--allow-loopback-master", "--master-port", port_str(port), "dist-selftest", "--iterations", "2"},
        {"NANOCHAT_JOB_TOKEN=shared"});
  };
  Proc n1 = node(1);  // the second node may start first: it retries until node 0's store is up
  Proc n0 = node(0);
  ASSERT_TRUE(n0.wait(Ms(60000)));
  ASSERT_TRUE(n1.wait(Ms(60000)));
  EXPECT_TRUE(n0.exited_ok()) << n0.output();
  EXPECT_TRUE(n1.exited_ok()) << n1.output();
  for (int r : {0, 1})
    EXPECT_THAT(n0.output(), HasSubstr(str_cat("[rank ", r, "] dist-selftest: rank ", r, " of 4: OK")));
  for (int r : {2, 3})
    EXPECT_THAT(n1.output(), HasSubstr(str_cat("[rank ", r, "] dist-selftest: rank ", r, " of 4: OK")));
}

TEST(Launcher, MismatchedNnodesIsAnErrorOnBothNodesNotAHang) {
  int port = nctest::test_port();
  Proc a = run_cli({"run", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--allow-loopback-master",
                    "--master-port", port_str(port), "dist-selftest"},
                   {"NANOCHAT_JOB_TOKEN=t"});
  Proc b = run_cli({"run", "--nnodes", "3", "--node-rank", "1", "--master-addr", "127.0.0.1", "--allow-loopback-master",
                    "--master-port", port_str(port), "dist-selftest"},
                   {"NANOCHAT_JOB_TOKEN=t"});
  ASSERT_TRUE(a.wait(Ms(15000))) << a.output();
  ASSERT_TRUE(b.wait(Ms(15000))) << b.output();
  for (Proc* p : {&a, &b}) {
    EXPECT_EQ(p->exit_code(), 1) << p->output();
    EXPECT_THAT(p->output(), HasSubstr("the nodes of this job disagree"));
    EXPECT_THAT(p->output(), HasSubstr("has --nnodes 3"));
    EXPECT_THAT(p->output(), HasSubstr("has --nnodes 2"));
  }
  EXPECT_THAT(a.output(), ::testing::Not(HasSubstr("[rank ")));  // no rank was started
}

// The port is held by this test process: the error names it (pid and command) and what to do.
TEST(Launcher, BusyPortIsAClearErrorNamingTheProcessHoldingIt) {
  StoreServer holder(0, "other-job");
  Proc p = run_cli({"run", "--nproc-per-node", "2", "--master-port", port_str(holder.port()), "dist-selftest"});
  ASSERT_TRUE(p.wait(Ms(15000)));
  EXPECT_EQ(p.exit_code(), 1);
  EXPECT_THAT(p.output(), HasSubstr(str_cat("nanochat: error: port ", holder.port(), " on ")));
  EXPECT_THAT(p.output(), HasSubstr(str_cat("is already in use by pid ", getpid(), " (")));
  EXPECT_THAT(p.output(), HasSubstr("test_launch"));
  EXPECT_THAT(p.output(), HasSubstr(str_cat("stop it (`kill ", getpid(), "`)")));
  EXPECT_THAT(p.output(), HasSubstr("otherwise pick another --master-port"));
}

TEST(Launcher, UnreachableMasterIsAClearErrorAfterTheDeadline) {
  int port = nctest::test_port();
  Proc p = run_cli({"run", "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port",
                    port_str(port), "--rendezvous-timeout", "2", "dist-selftest"},
                   {"NANOCHAT_ALLOW_LOOPBACK_MASTER=1"});
  ASSERT_TRUE(p.wait(Ms(15000))) << p.output();
  EXPECT_EQ(p.exit_code(), 1);
  EXPECT_THAT(p.output(),
              HasSubstr(str_cat("nanochat: error: cannot reach the store at 127.0.0.1:", port, " after 2.")));
}

TEST(Launcher, CtrlCIsForwardedAndStopsEveryRank) {
  int port = nctest::test_port();
  Proc p = run_cli({"run", "--nproc-per-node", "2", "--master-port", port_str(port), "dist-selftest", "--iterations",
                    "100000", "--size", "100000"});
  ASSERT_TRUE(p.wait_for_output("rank 0 of 2: iteration 0 ok", Ms(30000))) << p.output();
  ASSERT_TRUE(p.wait_for_output("rank 1 of 2: iteration 0 ok", Ms(30000))) << p.output();
  auto pids = rank_pids(p.output());
  ASSERT_EQ(pids.size(), 2u) << p.output();
  p.signal(SIGINT);
  ASSERT_TRUE(p.wait(Ms(20000))) << p.output();
  EXPECT_EQ(p.exit_code(), 130) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("got SIGINT, forwarding it to the ranks"));
  for (auto [r, pid] : pids) EXPECT_TRUE(process_gone(pid)) << "rank " << r << " (pid " << pid << ") survived";
}

TEST(Launcher, NeedsASubcommand) {
  Proc p = run_cli({"run", "--nproc-per-node", "2"});
  ASSERT_TRUE(p.wait(Ms(15000)));
  EXPECT_EQ(p.exit_code(), 1);
  EXPECT_THAT(p.output(), HasSubstr("nanochat run needs a subcommand"));
}

TEST(Doctor, ReportsTheDeviceAndThePort) {
  int port = nctest::test_port();
  Proc p = run_cli({"doctor", "--master-addr", "127.0.0.1", "--master-port", port_str(port)});
  ASSERT_TRUE(p.wait(Ms(15000)));
  EXPECT_TRUE(p.exited_ok()) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("Gloo would bind 127.0.0.1 on lo"));
  EXPECT_THAT(p.output(), HasSubstr(str_cat("port ", port, " is free here")));
  EXPECT_THAT(p.output(), HasSubstr("doctor: no problems found"));
  // With a store up on the port, doctor says it answers.
  StoreServer s(port, "");
  Proc q = run_cli({"doctor", "--master-addr", "127.0.0.1", "--master-port", port_str(port)});
  ASSERT_TRUE(q.wait(Ms(15000)));
  EXPECT_THAT(q.output(), HasSubstr("a nanochat store answers at 127.0.0.1:" + port_str(port)));
  Proc bad = run_cli({"doctor", "--iface", "nosuchif0"});
  ASSERT_TRUE(bad.wait(Ms(15000)));
  EXPECT_EQ(bad.exit_code(), 1);
  EXPECT_THAT(bad.output(), HasSubstr("network interface 'nosuchif0'"));
  // an elastic job's --nnodes as `run` takes it: its MAX counts (a loopback master is named)
  Proc el = run_cli({"doctor", "--nnodes", "1:2", "--master-addr", "127.0.0.1"});
  ASSERT_TRUE(el.wait(Ms(15000)));
  EXPECT_THAT(el.output(), HasSubstr("with --nnodes 2")) << el.output();
  EXPECT_THAT(el.output(), HasSubstr("[FAIL]")) << el.output();
  // ... and accepted, as by `run`, with --allow-loopback-master (all nodes on this machine)
  Proc lo = run_cli({"doctor", "--nnodes", "2", "--master-addr", "127.0.0.1", "--allow-loopback-master"});
  ASSERT_TRUE(lo.wait(Ms(15000)));
  EXPECT_THAT(lo.output(), HasSubstr("every node must run on this machine (--allow-loopback-master)")) << lo.output();
  EXPECT_THAT(lo.output(), ::testing::Not(HasSubstr("[FAIL]"))) << lo.output();
  Proc nn = run_cli({"doctor", "--nnodes", "2:x"});
  ASSERT_TRUE(nn.wait(Ms(15000)));
  EXPECT_EQ(nn.exit_code(), 1);
  EXPECT_THAT(nn.output(), HasSubstr("--nnodes 2:x: expected a number of nodes N, or MIN:MAX")) << nn.output();
}
