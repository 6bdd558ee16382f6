// The launchers' rendezvous through the binary on 127.0.0.1: while `nanochat run` waits for other
// nodes it says what it waits for and still obeys Ctrl-C / SIGTERM; SIGHUP stops a launcher and its
// ranks; a busy store port names the process holding it; a loopback master with several nodes is
// refused at once (by `run` and by `doctor`).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <map>

#include "nanochat/cluster/net.h"
#include "nanochat/core/error.h"
#include "support/proc_util.h"

using namespace nanochat;
using namespace nanochat::cluster;
using nctest::Proc;
using ::testing::HasSubstr;

namespace {

// Progress lines every second; a rendezvous window far longer than any wait below, so a launcher
// that ignores signals or stays silent fails the test instead of timing out on its own.
Proc run_cli(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), nctest::nanochat_binary());
  std::vector<std::string> e = {"NANOCHAT_RENDEZVOUS_TIMEOUT=60", "NANOCHAT_COLLECTIVE_TIMEOUT=30",
                                "NANOCHAT_WAIT_REPORT_INTERVAL=1", "NANOCHAT_JOB_TOKEN=rdzv-test",
                                "NANOCHAT_ALLOW_LOOPBACK_MASTER"};
  e.insert(e.end(), env.begin(), env.end());
  return Proc::spawn(args, e);
}

std::vector<std::string> node_args(int node, int port, std::vector<std::string> extra = {"dist-selftest"}) {
  std::vector<std::string> a = {"run",
                                "--nnodes",
                                "2",
                                "--node-rank",
                                std::to_string(node),
                                "--master-addr",
                                "127.0.0.1",
                                "--allow-loopback-master",
                                "--master-port",
                                std::to_string(port)};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

double seconds_since(nctest::Clock::time_point t0) {
  return std::chrono::duration<double>(nctest::Clock::now() - t0).count();
}

bool process_gone(long pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// Every "rank R of W: pid P" in the output.
std::map<int, long> rank_pids(const std::string& out) {
  std::map<int, long> m;
  for (size_t at = out.find("rank "); at != std::string::npos; at = out.find("rank ", at + 1)) {
    int r = -1, w = -1, used = 0;
    long pid = -1;
    if (std::sscanf(out.c_str() + at, "rank %d of %d: pid %ld%n", &r, &w, &pid, &used) == 3 && used > 0) m[r] = pid;
  }
  return m;
}

}  // namespace

TEST(Rendezvous, NodeZeroSaysWhichNodeItWaitsForAndStopsOnSigterm) {
  int port = pick_free_port();
  Proc n0 = run_cli(node_args(0, port));
  ASSERT_TRUE(n0.wait_for_output(str_cat("waiting for node 1 of 2 to join at 127.0.0.1:", port, " ("), Ms(10000)))
      << n0.output();
  ASSERT_TRUE(n0.wait_for_output(" s of 60 s)", Ms(5000))) << n0.output();
  auto t0 = nctest::Clock::now();
  n0.signal(SIGTERM);
  ASSERT_TRUE(n0.wait(Ms(5000))) << "still waiting 5 s after SIGTERM:\n" << n0.output();
  EXPECT_LT(seconds_since(t0), 2.5);
  EXPECT_EQ(n0.exit_code(), 128 + SIGTERM) << n0.output();
  EXPECT_THAT(n0.output(), HasSubstr("got SIGTERM while waiting for the other nodes"));
  EXPECT_TRUE(tcp_port_free(port)) << "the store port is still held";
}

TEST(Rendezvous, ANodeRetryingTheStoreSaysSoAndStopsOnCtrlC) {
  int port = pick_free_port();
  Proc n1 = run_cli(node_args(1, port));
  ASSERT_TRUE(n1.wait_for_output(str_cat("waiting for node 0's store at 127.0.0.1:", port, ": "), Ms(10000)))
      << n1.output();
  auto t0 = nctest::Clock::now();
  n1.signal(SIGINT);
  ASSERT_TRUE(n1.wait(Ms(5000))) << "still retrying 5 s after SIGINT:\n" << n1.output();
  EXPECT_LT(seconds_since(t0), 2.5);
  EXPECT_EQ(n1.exit_code(), 128 + SIGINT) << n1.output();
  EXPECT_THAT(n1.output(), HasSubstr("got SIGINT while waiting for the other nodes"));
}

// Ranks started by hand (or by srun/mpirun) say which ranks they wait for at the rendezvous.
TEST(Rendezvous, ARankStartedByHandSaysWhichRanksItWaitsFor) {
  int port = pick_free_port();
  Proc r0 = run_cli({"dist-selftest"}, {"WORLD_SIZE=3", "RANK=0", "MASTER_ADDR=127.0.0.1",
                                        "MASTER_PORT=" + std::to_string(port), "NANOCHAT_STORE_HOSTED"});
  ASSERT_TRUE(r0.wait_for_output(
      str_cat("waiting for ranks 1, 2 of WORLD_SIZE=3 to join the store at 127.0.0.1:", port, " ("), Ms(10000)))
      << r0.output();
  ASSERT_TRUE(r0.wait_for_output(" s of 60 s)", Ms(5000))) << r0.output();
  r0.signal(SIGKILL);
}

// A rank started before the store is up (rank 0 late under srun, or node 0 not started yet) says
// where it keeps trying, instead of retrying silently until the rendezvous window ends.
TEST(Rendezvous, ARankRetryingTheStoreSaysSo) {
  int port = pick_free_port();
  Proc r1 = run_cli({"dist-selftest"},
                    {"WORLD_SIZE=2", "RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)});
  ASSERT_TRUE(r1.wait_for_output(str_cat("rank 1: waiting for the job's store at 127.0.0.1:", port, ": "), Ms(10000)))
      << r1.output();
  ASSERT_TRUE(r1.wait_for_output(" s of 60 s)", Ms(5000))) << r1.output();
  r1.signal(SIGKILL);
}

TEST(Rendezvous, SighupStopsALauncherAndItsRanks) {
  ::signal(SIGHUP, SIG_DFL);  // the launcher inherits this (an ignored SIGHUP, e.g. under nohup, stays ignored)
  int port = pick_free_port();
  Proc p = run_cli({"run", "--nproc-per-node", "2", "--master-port", std::to_string(port), "dist-selftest",
                    "--iterations", "100000", "--size", "100000"});
  ASSERT_TRUE(p.wait_for_output("rank 0 of 2: iteration 0 ok", Ms(30000))) << p.output();
  ASSERT_TRUE(p.wait_for_output("rank 1 of 2: iteration 0 ok", Ms(30000))) << p.output();
  auto pids = rank_pids(p.output());
  ASSERT_EQ(pids.size(), 2u) << p.output();
  p.signal(SIGHUP);
  ASSERT_TRUE(p.wait(Ms(20000))) << p.output();
  EXPECT_TRUE(WIFEXITED(p.status())) << "the launcher died of the signal instead of stopping its ranks";
  EXPECT_EQ(p.exit_code(), 128 + SIGHUP) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("got SIGHUP, stopping the ranks with SIGTERM"));
  EXPECT_THAT(p.output(), HasSubstr("stopped all ranks after SIGHUP"));
  for (auto [r, pid] : pids) EXPECT_TRUE(process_gone(pid)) << "rank " << r << " (pid " << pid << ") survived";
}

// The terminal of node 1 goes away: node 0's final error names node 1's launcher and the signal,
// not its own rank 0 that broke after it.
TEST(Rendezvous, ANodeStoppedBySighupIsNamedByTheOtherNode) {
  ::signal(SIGHUP, SIG_DFL);
  int port = pick_free_port();
  const std::vector<std::string> work = {"dist-selftest", "--iterations", "100000", "--size", "100000"};
  Proc n0 = run_cli(node_args(0, port, work));
  Proc n1 = run_cli(node_args(1, port, work));
  ASSERT_TRUE(n0.wait_for_output("iteration 0 ok", Ms(30000))) << n0.output();
  ASSERT_TRUE(n1.wait_for_output("iteration 0 ok", Ms(30000))) << n1.output();
  n1.signal(SIGHUP);
  ASSERT_TRUE(n1.wait(Ms(20000))) << n1.output();
  ASSERT_TRUE(n0.wait(Ms(30000))) << n0.output();
  EXPECT_NE(n0.exit_code(), 0);
  const std::string lead = str_cat("nanochat: error: node 1's launcher (host ");
  EXPECT_THAT(n0.output(), HasSubstr(lead)) << n0.output();
  EXPECT_THAT(n0.output(), HasSubstr(str_cat(", pid ", n1.pid(), ") got SIGHUP and stopped its ranks"))) << n0.output();
}

// A node 0 started while a node 0 of another job (another token) still holds the port, e.g. one
// whose SSH session dropped: the error names the old launcher by pid and command line, and the
// old launcher is left alone (only an earlier launch of the same job is replaced:
// launcher_faults_test.cpp).
TEST(Rendezvous, ARelaunchedNodeZeroNamesTheLauncherHoldingItsPort) {
  int port = pick_free_port();
  Proc old = run_cli(node_args(0, port));
  ASSERT_TRUE(old.wait_for_output("waiting for node 1 of 2", Ms(10000))) << old.output();
  Proc again = run_cli(node_args(0, port, {"--job-token", "another-job", "dist-selftest"}));
  ASSERT_TRUE(again.wait(Ms(10000))) << again.output();
  EXPECT_FALSE(old.done()) << old.output();
  EXPECT_EQ(again.exit_code(), 1) << again.output();
  EXPECT_THAT(again.output(), HasSubstr(str_cat("is already in use by pid ", old.pid(), " (")));
  EXPECT_THAT(again.output(), HasSubstr(str_cat("nanochat run --nnodes 2 --node-rank 0")));
  EXPECT_THAT(again.output(), HasSubstr(str_cat("stop it (`kill ", old.pid(), "`)")));
  old.signal(SIGTERM);
  ASSERT_TRUE(old.wait(Ms(5000)));
}

// A relaunched node 1 while the old node 1's launcher still waits (its SSH session dropped): the
// new one names the old launcher's host and pid and says to stop it, instead of a bare "used twice".
TEST(Rendezvous, ASecondLauncherForANodeRankNamesTheFirstOne) {
  int port = pick_free_port();
  auto node = [&](int k) {
    return run_cli({"run", "--nnodes", "3", "--node-rank", std::to_string(k), "--master-addr", "127.0.0.1",
                    "--allow-loopback-master", "--master-port", std::to_string(port), "dist-selftest"});
  };
  Proc n0 = node(0);
  ASSERT_TRUE(n0.wait_for_output("waiting for nodes 1, 2 of 3", Ms(10000))) << n0.output();
  Proc old1 = node(1);
  ASSERT_TRUE(n0.wait_for_output("waiting for node 2 of 3", Ms(10000))) << n0.output();
  Proc new1 = node(1);
  ASSERT_TRUE(new1.wait(Ms(10000))) << new1.output();
  EXPECT_EQ(new1.exit_code(), 1) << new1.output();
  EXPECT_THAT(new1.output(), HasSubstr(str_cat("--node-rank 1 is used twice: by this launcher")));
  EXPECT_THAT(new1.output(), HasSubstr(str_cat("(pid ", old1.pid(), ")")));
  EXPECT_THAT(new1.output(), HasSubstr(str_cat("stop it (`kill ", old1.pid(), "` on that host)")));
  old1.signal(SIGKILL);
  n0.signal(SIGKILL);
}

TEST(Rendezvous, ALoopbackMasterWithSeveralNodesIsRefusedAtOnce) {
  int port = pick_free_port();
  for (std::string addr : {"127.0.0.1", "localhost", "::1", "127.0.1.1"}) {
    SCOPED_TRACE(addr);
    auto t0 = nctest::Clock::now();
    Proc p = run_cli({"run", "--nnodes", "2", "--node-rank", "1", "--master-addr", addr, "--master-port",
                      std::to_string(port), "dist-selftest"});
    ASSERT_TRUE(p.wait(Ms(10000))) << "not refused at once:\n" << p.output();
    EXPECT_LT(seconds_since(t0), 5.0);
    EXPECT_EQ(p.exit_code(), 1) << p.output();
    EXPECT_THAT(p.output(), HasSubstr(str_cat("nanochat: error: --master-addr ", addr, " is a loopback address")));
    EXPECT_THAT(p.output(), HasSubstr("--allow-loopback-master"));
  }
  // The environment variable opts in like the flag: node 1 then waits for node 0 as usual.
  Proc ok = run_cli({"run", "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port",
                     std::to_string(port), "--rendezvous-timeout", "1", "dist-selftest"},
                    {"NANOCHAT_ALLOW_LOOPBACK_MASTER=1"});
  ASSERT_TRUE(ok.wait(Ms(10000))) << ok.output();
  EXPECT_THAT(ok.output(), HasSubstr("cannot reach the store at 127.0.0.1:"));
  EXPECT_THAT(ok.output(), ::testing::Not(HasSubstr("loopback")));
}

TEST(Rendezvous, DoctorWithSeveralNodesReportsALoopbackMaster) {
  int port = pick_free_port();
  Proc p = run_cli({"doctor", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", std::to_string(port)});
  ASSERT_TRUE(p.wait(Ms(15000)));
  EXPECT_EQ(p.exit_code(), 1) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("[FAIL] --master-addr 127.0.0.1 is a loopback address, but with --nnodes 2"));
  EXPECT_THAT(p.output(), ::testing::Not(HasSubstr("no problems found")));
  Proc one = run_cli({"doctor", "--nnodes", "1", "--master-addr", "127.0.0.1", "--master-port", std::to_string(port)});
  ASSERT_TRUE(one.wait(Ms(15000)));
  EXPECT_TRUE(one.exited_ok()) << one.output();
  Proc opted = run_cli({"doctor", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", std::to_string(port)},
                       {"NANOCHAT_ALLOW_LOOPBACK_MASTER=1"});
  ASSERT_TRUE(opted.wait(Ms(15000)));
  EXPECT_TRUE(opted.exited_ok()) << opted.output();
  EXPECT_THAT(opted.output(), HasSubstr("[warn] master 127.0.0.1 is a loopback address"));
}
