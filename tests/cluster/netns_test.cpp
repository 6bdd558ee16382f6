// Two hosts simulated by two network namespaces joined by a veth pair (support/netns_pair.h): one
// `nanochat run` per namespace, node 0 hosting the store. Needs root and `ip netns`; where
// `ip netns add` fails the tests skip with the reason. Namespaces are removed even on failure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "nanochat/core/error.h"
#include "support/netns_pair.h"
#include "support/proc_util.h"

using nanochat::str_cat;
using nctest::Ms;
using nctest::NetnsPair;
using nctest::Proc;
using ::testing::HasSubstr;

namespace {

const char* kIp = NetnsPair::kIp;

std::pair<int, std::string> sh(const std::vector<std::string>& argv) { return nctest::run_argv(argv); }

class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = net_.make();
    if (!why.empty()) GTEST_SKIP() << why;
    a_ = net_.a;
    b_ = net_.b;
    va_ = net_.va;
    vb_ = net_.vb;
  }

  // Rate-limits both ends of the link.
  void shape(const std::string& rate) {
    const std::string why = net_.shape(rate);
    if (!why.empty()) GTEST_SKIP() << why;
  }

  Proc launcher(int node, const std::vector<std::string>& selftest_args) {
    std::vector<std::string> argv = {kIp,
                                     "netns",
                                     "exec",
                                     node == 0 ? a_ : b_,
                                     nctest::nanochat_binary(),
                                     "run",
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(node),
                                     "--nproc-per-node",
                                     "1",
                                     "--master-addr",
                                     "10.78.0.1",
                                     "--master-port",
                                     "29500",
                                     "dist-selftest"};
    argv.insert(argv.end(), selftest_args.begin(), selftest_args.end());
    return Proc::spawn(
        argv, {"NANOCHAT_JOB_TOKEN=netns-test", "NANOCHAT_RENDEZVOUS_TIMEOUT=20", "NANOCHAT_COLLECTIVE_TIMEOUT=30"});
  }

  void run_job_and_expect_success() {
    Proc n0 = launcher(0, {"--iterations", "2", "--size", "200000"});
    Proc n1 = launcher(1, {"--iterations", "2", "--size", "200000"});
    ASSERT_TRUE(n0.wait(Ms(60000))) << n0.output();
    ASSERT_TRUE(n1.wait(Ms(60000))) << n1.output();
    EXPECT_TRUE(n0.exited_ok()) << n0.output();
    EXPECT_TRUE(n1.exited_ok()) << n1.output();
    // Each launcher says at start which address and interface its ranks use, and each rank bound
    // its namespace's veth address, not a loopback address.
    EXPECT_THAT(n0.output(), HasSubstr(str_cat("Gloo on 10.78.0.1 (", va_, ", the interface that routes to")));
    EXPECT_THAT(n1.output(), HasSubstr(str_cat("Gloo on 10.78.0.2 (", vb_, ", the interface that routes to")));
    EXPECT_THAT(n0.output(), HasSubstr(str_cat("[rank 0] dist-selftest: rank 0 of 2: Gloo bound 10.78.0.1 on ", va_)));
    EXPECT_THAT(n1.output(), HasSubstr(str_cat("[rank 1] dist-selftest: rank 1 of 2: Gloo bound 10.78.0.2 on ", vb_)));
    EXPECT_THAT(n0.output(), HasSubstr("[rank 0] dist-selftest: rank 0 of 2: OK, 16 checks passed"));
    EXPECT_THAT(n1.output(), HasSubstr("[rank 1] dist-selftest: rank 1 of 2: OK, 16 checks passed"));
  }

  NetnsPair net_;
  std::string a_, b_, va_, vb_;
};

}  // namespace

TEST_F(TwoHosts, OneLauncherPerHostRunsTheJob) { run_job_and_expect_success(); }

TEST_F(TwoHosts, OneLauncherPerHostRunsTheJobOverA1GbitLink) {
  shape("1gbit");
  if (IsSkipped()) return;
  run_job_and_expect_success();
}

TEST_F(TwoHosts, ARankKilledOnOneHostStopsTheOtherHostNamingIt) {
  Proc n0 = launcher(0, {"--iterations", "1000", "--size", "200000"});
  Proc n1 = launcher(1, {"--iterations", "1000", "--size", "200000", "--die-rank", "1", "--die-at", "2"});
  ASSERT_TRUE(n0.wait(Ms(30000))) << n0.output();
  ASSERT_TRUE(n1.wait(Ms(30000))) << n1.output();
  EXPECT_EQ(n1.exit_code(), 1) << n1.output();
  EXPECT_EQ(n0.exit_code(), 1) << n0.output();
  EXPECT_THAT(n1.output(), ::testing::ContainsRegex(
                               "nanochat: error: rank 1 \\(host [^)]+\\) was killed by signal 9 \\(SIGKILL\\)"));
  // Node 0's rank names the dead peer, and node 0's launcher names it as the root cause.
  EXPECT_THAT(n0.output(),
              ::testing::ContainsRegex("\\[rank 0\\] nanochat: error: rank 0 .* rank 1 \\(host [^)]+\\) has died"));
  EXPECT_THAT(n0.output(), ::testing::ContainsRegex("nanochat: error: rank 1 \\(host [^)]+\\) was killed by signal 9"));
}

TEST_F(TwoHosts, ADroppingFirewallCannotStallTheConnectPastTheDeadline) {
  // Host a black-holes its replies to host b: b's SYNs go unanswered, as behind a DROP rule.
  ASSERT_EQ(sh({kIp, "-n", a_, "route", "add", "blackhole", "10.78.0.2/32"}).first, 0);
  Proc n1 = Proc::spawn(
      {kIp, "netns", "exec", b_, nctest::nanochat_binary(), "run", "--nnodes", "2", "--node-rank", "1", "--master-addr",
       "10.78.0.1", "--master-port", "29500", "--rendezvous-timeout", "3", "dist-selftest"},
      {"NANOCHAT_JOB_TOKEN=netns-test"});
  auto t0 = nctest::Clock::now();
  ASSERT_TRUE(n1.wait(Ms(20000))) << "the connect stalled past its deadline: " << n1.output();
  EXPECT_LT(std::chrono::duration<double>(nctest::Clock::now() - t0).count(), 15.0);
  EXPECT_EQ(n1.exit_code(), 1);
  EXPECT_THAT(n1.output(), HasSubstr("nanochat: error: cannot reach the store at 10.78.0.1:29500 after 3."));
  EXPECT_THAT(n1.output(), HasSubstr("connection attempt timed out"));
}
