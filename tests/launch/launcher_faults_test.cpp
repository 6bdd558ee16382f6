// Launcher and rendezvous faults that multi-node users run into, each reproduced through the
// binary with every node on 127.0.0.1 (`nanochat run` with the hidden `dist-selftest`): a
// relaunch next to a launch left waiting, a master name that is this host's loopback name, two
// nodes given one --node-rank, a worker's own start-up error, two failures one after the other.
// Each must end in a message that says what happened and what to do, on the node where the user
// looks, within the deadlines set here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "nanochat/cluster/net.h"
#include "nanochat/core/error.h"
#include "support/proc_util.h"
#include "support/test_port.h"  // ports below the ephemeral range, which client sockets of parallel tests take

using namespace nanochat;
using namespace nanochat::cluster;
using nctest::Proc;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

// Short deadlines so that a bug fails the test instead of hanging it.
std::vector<std::string> base_env() {
  return {"NANOCHAT_RENDEZVOUS_TIMEOUT=40", "NANOCHAT_COLLECTIVE_TIMEOUT=30", "NANOCHAT_JOB_TOKEN",
          "NANOCHAT_WAIT_REPORT_INTERVAL=1"};
}

Proc run_cli(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), nctest::nanochat_binary());
  auto e = base_env();
  e.insert(e.end(), env.begin(), env.end());
  return Proc::spawn(args, e);
}

// One node of a two-node job on this host, running dist-selftest with `selftest` flags.
Proc node(int port, int k, const std::vector<std::string>& selftest, int nnodes = 2) {
  std::vector<std::string> a = {
      "run",           "--nnodes",  std::to_string(nnodes),    "--node-rank",   std::to_string(k),
      "--master-addr", "127.0.0.1", "--allow-loopback-master", "--master-port", std::to_string(port),
      "dist-selftest"};
  a.insert(a.end(), selftest.begin(), selftest.end());
  return run_cli(a);
}

// Waits until something listens on `port` (node 0's store is up); false after 20 s.
bool wait_port_busy(int port) {
  for (auto until = nctest::Clock::now() + Ms(20000); nctest::Clock::now() < until;) {
    if (!tcp_port_free(port)) return true;
    usleep(50000);
  }
  return false;
}

const std::vector<std::string> kShort = {"--iterations", "2"};
const std::vector<std::string> kLong = {"--iterations", "100000", "--size", "100000"};

}  // namespace

// Node 0 left waiting for its nodes, then both commands run again, node 0 first: the new node 0
// replaces the earlier one (which stops and says so) and the new node 1 joins the new node 0.
TEST(Relaunch, ANewNode0ReplacesAnEarlierLaunchLeftWaiting) {
  const int port = nctest::test_port();
  Proc orphan = node(port, 0, kShort);
  ASSERT_TRUE(wait_port_busy(port)) << orphan.output();
  Proc n0 = node(port, 0, kShort);
  ASSERT_TRUE(n0.wait_for_output("this new launch replaces it", Ms(20000))) << n0.output();
  Proc n1 = node(port, 1, kShort);
  ASSERT_TRUE(orphan.wait(Ms(30000))) << orphan.output();
  ASSERT_TRUE(n0.wait(Ms(60000))) << n0.output();
  ASSERT_TRUE(n1.wait(Ms(60000))) << n1.output();
  EXPECT_EQ(orphan.exit_code(), 1) << orphan.output();
  EXPECT_THAT(orphan.output(),
              HasSubstr(str_cat("node 0 was launched again on host ", host_name(), " (pid ", n0.pid())));
  EXPECT_THAT(orphan.output(), Not(HasSubstr("[rank ")));  // it never started a rank
  EXPECT_THAT(n0.output(), HasSubstr(str_cat("port ", port, " is held by an earlier launch of node 0 of this job (pid ",
                                             orphan.pid(), " on host ", host_name())));
  EXPECT_THAT(n0.output(), HasSubstr("still waiting for its nodes"));
  EXPECT_TRUE(n0.exited_ok()) << n0.output();
  EXPECT_TRUE(n1.exited_ok()) << n1.output();
  EXPECT_THAT(n0.output(), HasSubstr("[rank 0] dist-selftest: rank 0 of 2: OK"));
  EXPECT_THAT(n1.output(), HasSubstr("[rank 1] dist-selftest: rank 1 of 2: OK"));
}

// The same relaunch with node 1 first: it joins the node 0 left waiting and the job starts; once
// the new node 0 comes, the earlier job stops on both nodes, node 1 saying what happened and to
// run its command again, which then joins the new node 0.
TEST(Relaunch, ANode1ThatJoinedTheEarlierLaunchStopsAndSaysToRunAgain) {
  const int port = nctest::test_port();
  Proc orphan = node(port, 0, kLong);
  ASSERT_TRUE(wait_port_busy(port)) << orphan.output();
  Proc n1 = node(port, 1, kLong);
  ASSERT_TRUE(n1.wait_for_output("rank 1 of 2: iteration 0 ok", Ms(30000))) << n1.output();
  Proc n0 = node(port, 0, kShort);
  ASSERT_TRUE(n1.wait(Ms(40000))) << n1.output();
  ASSERT_TRUE(orphan.wait(Ms(40000))) << orphan.output();
  EXPECT_EQ(n1.exit_code(), 1) << n1.output();
  EXPECT_THAT(n1.output(), HasSubstr(str_cat("this node joined node 0's earlier launch (pid ", orphan.pid())));
  EXPECT_THAT(n1.output(), HasSubstr(str_cat("node 0 was launched again on host ", host_name(), " (pid ", n0.pid())));
  EXPECT_THAT(n1.output(), HasSubstr("run this node's command again to join the new launch"));
  EXPECT_EQ(orphan.exit_code(), 1) << orphan.output();
  EXPECT_THAT(orphan.output(), HasSubstr("node 0 was launched again"));
  Proc again = node(port, 1, kShort);
  ASSERT_TRUE(n0.wait(Ms(60000))) << n0.output();
  ASSERT_TRUE(again.wait(Ms(60000))) << again.output();
  EXPECT_TRUE(n0.exited_ok()) << n0.output();
  EXPECT_TRUE(again.exited_ok()) << again.output();
  EXPECT_THAT(n0.output(), HasSubstr("running the job since"));
  EXPECT_THAT(again.output(), HasSubstr("[rank 1] dist-selftest: rank 1 of 2: OK"));
}

// Three nodes: node 1 waits with the node 0 left waiting (node 2 not there yet) when node 0 is
// launched again; node 1 moves over to the new launch by itself and the job runs there.
TEST(Relaunch, ANodeStillInTheRendezvousMovesToTheNewLaunch) {
  const int port = nctest::test_port();
  Proc orphan = node(port, 0, kShort, 3);
  ASSERT_TRUE(wait_port_busy(port)) << orphan.output();
  Proc n1 = node(port, 1, kShort, 3);
  ASSERT_TRUE(n1.wait_for_output("waiting for node 2 of 3", Ms(20000))) << n1.output();
  Proc n0 = node(port, 0, kShort, 3);
  ASSERT_TRUE(n1.wait_for_output("; joining the new launch", Ms(20000))) << n1.output();
  Proc n2 = node(port, 2, kShort, 3);
  for (Proc* p : {&orphan, &n0, &n1, &n2}) ASSERT_TRUE(p->wait(Ms(60000))) << p->output();
  EXPECT_EQ(orphan.exit_code(), 1) << orphan.output();
  EXPECT_THAT(n1.output(), HasSubstr(str_cat("node 0 was launched again on host ", host_name(), " (pid ", n0.pid())));
  for (Proc* p : {&n0, &n1, &n2}) EXPECT_TRUE(p->exited_ok()) << p->output();
  EXPECT_THAT(n1.output(), HasSubstr("[rank 1] dist-selftest: rank 1 of 3: OK"));
}

// Node 0 dies (SIGKILL, no word to anyone) while node 1 waits with it for node 2: node 1 says
// that node 0's store dropped it before the job started and waits for node 0 to come back; a new
// node 0 and node 2 then start, and the job runs with node 1 there.
TEST(Relaunch, ANodeWhoseNode0DiedBeforeTheStartWaitsForTheNextLaunch) {
  const int port = nctest::test_port();
  Proc first = node(port, 0, kShort, 3);
  ASSERT_TRUE(wait_port_busy(port)) << first.output();
  Proc n1 = node(port, 1, kShort, 3);
  ASSERT_TRUE(n1.wait_for_output("waiting for node 2 of 3", Ms(20000))) << n1.output();
  first.signal(SIGKILL);
  ASSERT_TRUE(first.wait(Ms(10000))) << first.output();
  ASSERT_TRUE(n1.wait_for_output("before the job started; waiting for node 0 to come back", Ms(20000))) << n1.output();
  Proc n0 = node(port, 0, kShort, 3);
  Proc n2 = node(port, 2, kShort, 3);
  for (Proc* p : {&n0, &n1, &n2}) ASSERT_TRUE(p->wait(Ms(60000))) << p->output();
  for (Proc* p : {&n0, &n1, &n2}) EXPECT_TRUE(p->exited_ok()) << p->output();
  EXPECT_THAT(n1.output(), HasSubstr(str_cat("the store at 127.0.0.1:", port)));
  EXPECT_THAT(n1.output(), HasSubstr("[rank 1] dist-selftest: rank 1 of 3: OK"));
}

namespace {

// Runs `args` of the binary with /etc/hosts replaced (in a private mount namespace) by one that
// maps `name` to 127.0.1.1, as Debian and Ubuntu map a machine's own name. "" when that cannot be
// set up here (needs root and unshare), else the output; *rc gets the exit code.
std::string with_hosts_entry(const std::string& name, const std::string& args, int* rc) {
  char tmpl[] = "/tmp/nc_hosts_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return "";
  const std::string entry = "127.0.0.1 localhost\n127.0.1.1 " + name + "\n";
  if (write(fd, entry.data(), entry.size()) != static_cast<ssize_t>(entry.size())) return "";
  close(fd);
  const std::string hosts = tmpl;
  auto probe = nctest::shell("unshare -m sh -c 'mount --bind " + hosts + " /etc/hosts && getent hosts " + name + "'");
  if (probe.first != 0 || probe.second.find("127.0.1.1") == std::string::npos) {
    unlink(hosts.c_str());
    return "";
  }
  auto r = nctest::shell("NANOCHAT_RENDEZVOUS_TIMEOUT=40 timeout 30 unshare -m sh -c 'mount --bind " + hosts +
                         " /etc/hosts && exec " + nctest::nanochat_binary() + " " + args + "'");
  unlink(hosts.c_str());
  *rc = r.first;
  return r.second;
}

}  // namespace

// `--master-addr $(hostname)` on a host whose name maps to 127.0.1.1: refused at once (not after
// the rendezvous timeout) by `run` on any node and by `doctor`, naming what the name resolved to.
TEST(LoopbackName, AMasterNameThatResolvesToLoopbackIsRefusedAtOnce) {
  const int port = nctest::test_port();
  int rc = -1;
  const std::string run = with_hosts_entry(
      "nc-desk", str_cat("run --nnodes 2 --node-rank 1 --master-addr nc-desk --master-port ", port, " dist-selftest"),
      &rc);
  if (run.empty()) GTEST_SKIP() << "cannot replace /etc/hosts in a private mount namespace here (needs root)";
  EXPECT_EQ(rc, 1) << run;  // 124 would be the 30 s bound: a wait for the rendezvous
  EXPECT_THAT(run, HasSubstr("nanochat: error: --master-addr nc-desk resolves to 127.0.1.1 on this host"));
  EXPECT_THAT(run, HasSubstr("which no other host can reach"));
  EXPECT_THAT(run, HasSubstr("in /etc/hosts on every node"));
  EXPECT_THAT(run, Not(HasSubstr("[rank ")));
  // Node 0 too (its ranks would bind the loopback address).
  const std::string run0 = with_hosts_entry(
      "nc-desk", str_cat("run --nnodes 2 --node-rank 0 --master-addr nc-desk --master-port ", port, " dist-selftest"),
      &rc);
  EXPECT_EQ(rc, 1) << run0;
  EXPECT_THAT(run0, HasSubstr("--master-addr nc-desk resolves to 127.0.1.1"));
  const std::string doctor =
      with_hosts_entry("nc-desk", str_cat("doctor --nnodes 2 --master-addr nc-desk --master-port ", port), &rc);
  EXPECT_EQ(rc, 1) << doctor;
  EXPECT_THAT(doctor, HasSubstr("--master-addr nc-desk resolves to 127.0.1.1"));
  EXPECT_THAT(doctor, Not(HasSubstr("no problems found")));
  // With every node on this machine on purpose, the name is accepted.
  const std::string allowed = with_hosts_entry(
      "nc-desk", str_cat("run --nnodes 1 --master-addr nc-desk --master-port ", port, " dist-selftest --iterations 1"),
      &rc);
  EXPECT_EQ(rc, 0) << allowed;
}

// Two launchers given --node-rank 1 of three nodes: the second stops at once (as before), and the
// launchers already waiting (node 0 and the first node 1) say so at once instead of only blaming a
// missing node when the rendezvous times out; node 0's final error names the duplicate too.
TEST(DuplicateRank, TheLaunchersAlreadyWaitingAreToldAtOnce) {
  const int port = nctest::test_port();
  auto start = [&](int k) {
    return run_cli({"run", "--nnodes", "3", "--node-rank", std::to_string(k), "--master-addr", "127.0.0.1",
                    "--allow-loopback-master", "--master-port", std::to_string(port), "--rendezvous-timeout", "10",
                    "dist-selftest"});
  };
  Proc n0 = start(0);
  Proc first = start(1);
  ASSERT_TRUE(n0.wait_for_output("waiting for node 2 of 3 to join", Ms(20000))) << n0.output();
  ASSERT_TRUE(first.wait_for_output("waiting for node 2 of 3 to join", Ms(20000))) << first.output();
  Proc second = start(1);
  ASSERT_TRUE(second.wait(Ms(20000))) << second.output();
  EXPECT_EQ(second.exit_code(), 1);
  EXPECT_THAT(second.output(), HasSubstr("--node-rank 1 is used twice"));
  const std::string notice = str_cat("(pid ", second.pid(), ") was also started with --node-rank 1");
  // Told while still waiting (the notice, with what is still missing, is not part of the final
  // error): node 0 and the launcher that holds --node-rank 1.
  for (Proc* p : {&n0, &first}) {
    ASSERT_TRUE(p->wait_for_output(notice, Ms(20000))) << p->output();
    ASSERT_TRUE(p->wait_for_output("Still missing: node 2 of 3", Ms(20000))) << p->output();
  }
  ASSERT_TRUE(n0.wait(Ms(30000))) << n0.output();
  ASSERT_TRUE(first.wait(Ms(30000))) << first.output();
  EXPECT_EQ(n0.exit_code(), 1);
  EXPECT_THAT(n0.output(), HasSubstr("node 2 of --nnodes 3 never joined"));
  EXPECT_THAT(n0.output(), HasSubstr("meanwhile a launcher on host"));
}

// A worker's own start-up error (here a malformed flag that only node 1 was given) reaches node 0's
// terminal as that rank's last stderr lines, not only as "exited with status 1".
TEST(WorkerError, NodeZeroShowsTheWorkersOwnMessage) {
  const int port = nctest::test_port();
  Proc n0 = node(port, 0, kShort);
  Proc n1 = node(port, 1, {"--iterations", "2", "--fact-on-rank", "not-a-fact"});
  ASSERT_TRUE(n0.wait(Ms(60000))) << n0.output();
  ASSERT_TRUE(n1.wait(Ms(60000))) << n1.output();
  EXPECT_EQ(n1.exit_code(), 1);
  EXPECT_EQ(n0.exit_code(), 1);
  // Node 0's own output: it names rank 1 and quotes rank 1's error, which only node 1's rank printed.
  const std::string own = "--fact-on-rank expects R:KEY=VALUE, got 'not-a-fact'";
  EXPECT_THAT(n0.output(), HasSubstr("nanochat: error: rank 1 (host "));
  EXPECT_THAT(n0.output(), HasSubstr(") wrote to stderr on its node:\n    nanochat: error: " + own));
  EXPECT_THAT(n0.output(), HasSubstr("the last lines rank 1 (host "));
  EXPECT_THAT(n0.output(), Not(HasSubstr("[rank 1]")));
}

// Rank 0 on node 0 fails with an error of its own; rank 1 on node 1 fails as soon as node 0's
// launcher has reported it (a rank that fails a moment later, before its own launcher looked at the
// other nodes). Both nodes lead with rank 0's failure, the first in the job; before, node 1 led
// with its own rank, the first it noticed.
TEST(WorkerError, BothNodesLeadWithTheFirstFailureInTheJob) {
  const int port = nctest::test_port();
  const std::vector<std::string> fail = {"--iterations", "100000", "--size", "1000", "--fail-at", "2", "--fail-rank"};
  std::vector<std::string> f0 = fail, f1 = fail;
  f0.push_back("0");
  f1.insert(f1.end(), {"1", "--fail-after-key", "nc/launch/failure/0"});
  Proc n0 = node(port, 0, f0);
  Proc n1 = node(port, 1, f1);
  ASSERT_TRUE(n0.wait(Ms(60000))) << n0.output();
  ASSERT_TRUE(n1.wait(Ms(60000))) << n1.output();
  for (Proc* n : {&n0, &n1}) {
    EXPECT_EQ(n->exit_code(), 1) << n->output();
    EXPECT_THAT(n->output(), HasSubstr("nanochat: error: rank 0 (host ")) << n->output();
    EXPECT_THAT(n->output(), Not(HasSubstr("nanochat: error: rank 1 (host "))) << n->output();
  }
  // node 1 read node 0's report before its own rank failed: it names both
  EXPECT_THAT(n1.output(),
              ::testing::ContainsRegex("nanochat: error: rank 0 \\(host [^)]+\\) exited with status 1[^\n]*"
                                       "\\(also: rank 1 \\(host [^)]+\\) exited with status 1\\)"))
      << n1.output();
  EXPECT_THAT(n1.output(), HasSubstr("rank 0 fails on purpose at iteration 2 (--fail-rank)"));  // rank 0's own words
}

// SIGTERM to node 0's launcher while the job runs: node 1 names the signal and node 0's launcher
// as the cause (not only a vanished peer).
TEST(Signal, NodeOneNamesTheSignalThatStoppedNodeZero) {
  const int port = nctest::test_port();
  Proc n0 = node(port, 0, kLong);
  Proc n1 = node(port, 1, kLong);
  ASSERT_TRUE(n0.wait_for_output("rank 0 of 2: iteration 0 ok", Ms(30000))) << n0.output();
  ASSERT_TRUE(n1.wait_for_output("rank 1 of 2: iteration 0 ok", Ms(30000))) << n1.output();
  n0.signal(SIGTERM);
  ASSERT_TRUE(n0.wait(Ms(40000))) << n0.output();
  ASSERT_TRUE(n1.wait(Ms(40000))) << n1.output();
  EXPECT_EQ(n0.exit_code(), 128 + SIGTERM) << n0.output();
  EXPECT_EQ(n1.exit_code(), 1) << n1.output();
  EXPECT_THAT(n1.output(), HasSubstr(str_cat("nanochat: error: node 0's launcher (host ", host_name(), ", pid ",
                                             n0.pid(), ") got SIGTERM and stopped its ranks")));
}
