// The data plane's ports and the startup mesh check through the binary (cluster/mesh.h).
// Three hosts simulated by network namespaces on one bridge (a fourth namespace holds it), each
// with its own hostname (unshare --uts); one `nanochat run` per host. A worker whose firewall
// silently drops the connections the others open to it (its SYN-ACKs black-holed by an
// `ip rule`: iproute2 only, no iptables) must stop every node within seconds with a message
// naming that host, its address and port. Needs root and `ip netns`; skips otherwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cstring>

#include <sstream>
#include <string>
#include <vector>

#include "nanochat/core/error.h"
#include "support/proc_util.h"

using nanochat::str_cat;
using nctest::Ms;
using nctest::Proc;
using ::testing::HasSubstr;

namespace {

const char* kIp = "/usr/sbin/ip";
// TCP by its IP protocol number: `ip rule ... ipproto tcp` needs /etc/protocols, which a minimal
// Debian (no netbase) lacks.
const char* kTcp = "6";
const int kMasterPort = 34100;
const char* kRange = "34110-34119";

std::pair<int, std::string> sh(const std::vector<std::string>& argv) { return nctest::run_argv(argv); }

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  for (size_t j; (j = s.find('\n', i)) != std::string::npos; i = j + 1) out.push_back(s.substr(i, j - i));
  if (i < s.size()) out.push_back(s.substr(i));
  return out;
}

double seconds_since(nctest::Clock::time_point t0) {
  return std::chrono::duration<double>(nctest::Clock::now() - t0).count();
}

// Namespaces mesh<id>a/b/c (hosts mesh-node0/1/2 at 10.79.0.1/2/3) and mesh<id>s (the bridge).
class ThreeHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    id_ = "mesh" + std::to_string(getpid() % 100000);
    auto [rc, out] = sh({kIp, "netns", "add", ns(3)});
    if (rc != 0) GTEST_SKIP() << "`ip netns add` failed (needs root and iproute2): " << out;
    made_ = 1;
    std::vector<std::vector<std::string>> cmds = {{kIp, "-n", ns(3), "link", "add", "br0", "type", "bridge"},
                                                  {kIp, "-n", ns(3), "link", "set", "br0", "up"}};
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(sh({kIp, "netns", "add", ns(k)}).first, 0);
      made_ = k + 2;
      const std::string n = veth(k, 'n'), s = veth(k, 's');
      for (auto cmd :
           std::vector<std::vector<std::string>>{{kIp, "link", "add", n, "type", "veth", "peer", "name", s},
                                                 {kIp, "link", "set", n, "netns", ns(k)},
                                                 {kIp, "link", "set", s, "netns", ns(3)},
                                                 {kIp, "-n", ns(3), "link", "set", s, "master", "br0"},
                                                 {kIp, "-n", ns(3), "link", "set", s, "up"},
                                                 {kIp, "-n", ns(k), "addr", "add", addr(k) + "/24", "dev", n},
                                                 {kIp, "-n", ns(k), "link", "set", n, "up"},
                                                 {kIp, "-n", ns(k), "link", "set", "lo", "up"}})
        cmds.push_back(cmd);
    }
    for (const auto& cmd : cmds) {
      auto r = sh(cmd);
      ASSERT_EQ(r.first, 0) << cmd[1] << " " << cmd[2] << " " << cmd[3] << ": " << r.second;
    }
  }
  void TearDown() override {
    if (made_ >= 1) sh({kIp, "netns", "del", ns(3)});  // deleting a namespace removes its veth ends
    for (int k = 0; k + 2 <= made_; ++k) sh({kIp, "netns", "del", ns(k)});
  }

  std::string ns(int k) const { return id_ + "abcs"[k]; }
  std::string veth(int k, char end) const { return id_ + "abc"[k] + end; }
  static std::string addr(int k) { return "10.79.0." + std::to_string(k + 1); }

  // `nanochat run` for node k in its namespace, with its own hostname mesh-node<k>.
  Proc node(int k, const std::vector<std::string>& run_flags,
            const std::vector<std::string>& selftest_flags = {"--iterations", "2"}) {
    std::vector<std::string> argv = {kIp,
                                     "netns",
                                     "exec",
                                     ns(k),
                                     "unshare",
                                     "--uts",
                                     "sh",
                                     "-c",
                                     "hostname mesh-node" + std::to_string(k) + " && exec \"$0\" \"$@\"",
                                     nctest::nanochat_binary(),
                                     "run",
                                     "--nnodes",
                                     "3",
                                     "--node-rank",
                                     std::to_string(k),
                                     "--master-addr",
                                     addr(0),
                                     "--master-port",
                                     std::to_string(kMasterPort)};
    argv.insert(argv.end(), run_flags.begin(), run_flags.end());
    argv.push_back("dist-selftest");
    argv.insert(argv.end(), selftest_flags.begin(), selftest_flags.end());
    return Proc::spawn(
        argv, {"NANOCHAT_JOB_TOKEN=mesh-test", "NANOCHAT_RENDEZVOUS_TIMEOUT=20", "NANOCHAT_COLLECTIVE_TIMEOUT=60"});
  }

  // Starts the three nodes, waits for all; returns their outputs and whether each succeeded.
  struct Outcome {
    std::vector<std::string> out;
    std::vector<int> code;
    double seconds = 0;
  };
  Outcome run_job(const std::vector<std::string>& run_flags) {
    const auto t0 = nctest::Clock::now();
    std::vector<Proc> nodes;
    for (int k = 0; k < 3; ++k) nodes.push_back(node(k, run_flags));
    Outcome o;
    for (auto& p : nodes) {
      EXPECT_TRUE(p.wait(Ms(90000))) << "a node did not finish: " << p.output();
      o.out.push_back(p.output());
      o.code.push_back(p.exit_code());
    }
    o.seconds = seconds_since(t0);
    return o;
  }

  std::string id_;
  int made_ = 0;  // 1: the bridge namespace, k+2: node k's namespace too
};

}  // namespace

TEST_F(ThreeHosts, PinnedPortsCarryTheJob) {
  std::vector<Proc> nodes;
  for (int k = 0; k < 3; ++k)
    nodes.push_back(node(k, {"--port-range", kRange}, {"--iterations", "150", "--size", "100000"}));
  ASSERT_TRUE(nodes[0].wait_for_output("iteration 1 ok", Ms(30000))) << nodes[0].output();
  // Gloo's connections end on the pinned ports: node 0 (the lowest address) accepted ranks 1 and 2
  // on 34110, node 1 accepted rank 2 on 34110; no connection ends on another port of node 0.
  auto [rc0, ss0] = sh({kIp, "netns", "exec", ns(0), "ss", "-Htn", "state", "established"});
  auto [rc1, ss1] = sh({kIp, "netns", "exec", ns(1), "ss", "-Htn", "state", "established"});
  for (auto& p : nodes) {
    ASSERT_TRUE(p.wait(Ms(90000))) << p.output();
    EXPECT_TRUE(p.exited_ok()) << p.output();
  }
  EXPECT_THAT(nodes[2].output(), HasSubstr("[rank 2] dist-selftest: rank 2 of 3: OK"));
  EXPECT_THAT(ss0, ::testing::ContainsRegex("10\\.79\\.0\\.1:34110 +10\\.79\\.0\\.2:"));
  EXPECT_THAT(ss0, ::testing::ContainsRegex("10\\.79\\.0\\.1:34110 +10\\.79\\.0\\.3:"));
  EXPECT_THAT(ss1, ::testing::ContainsRegex("10\\.79\\.0\\.2:34110 +10\\.79\\.0\\.3:"));
  for (const auto& line : lines_of(ss0)) {
    std::istringstream fields(line);
    std::string rq, sq, local, peer;
    fields >> rq >> sq >> local >> peer;
    // ss writes the store's dual-stack sockets as [::ffff:10.79.0.1]:34100
    const std::string port = local.substr(local.rfind(':') + 1);
    if (peer.find("10.79.0.1") == std::string::npos) {  // a connection with another node
      EXPECT_TRUE(port == "34110" || port == "34100") << "outside the master port and the range: " << line;
    }
  }
}

TEST_F(ThreeHosts, AWorkerDroppingConnectionsToItsPinnedPortStopsEveryNodeWithinSeconds) {
  // Host mesh-node1 answers no connection attempt to its data-plane port 34110 (a DROP rule).
  ASSERT_EQ(sh({kIp, "-n", ns(1), "rule", "add", "ipproto", kTcp, "sport", "34110", "blackhole"}).first, 0);
  auto o = run_job({"--port-range", kRange});
  EXPECT_LT(o.seconds, 15.0) << "the nodes must stop within seconds, not at the collective timeout";
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE("node " + std::to_string(k));
    EXPECT_EQ(o.code[k], 1) << o.out[k];
    // Gloo makes the higher address connect: rank 2 (10.79.0.3) connects to rank 1's port.
    EXPECT_THAT(o.out[k], HasSubstr("rank 2 (host mesh-node2) cannot connect to rank 1 (host mesh-node1) at "
                                    "10.79.0.2:34110: connection attempt timed out"));
    EXPECT_THAT(o.out[k], HasSubstr("Open TCP ports 34110-34119 (--port-range) for the other nodes in the firewall of "
                                    "mesh-node1 (10.79.0.2:34110)"));
  }
}

TEST_F(ThreeHosts, AWorkerDroppingIncomingConnectionsIsNamedWithoutAPortRange) {
  // Host mesh-node1 black-holes every TCP packet to mesh-node2: mesh-node2's connection attempts
  // to it go unanswered, as behind a firewall that drops incoming connections. (Node 1 opens no
  // connection to node 2 itself: Gloo makes the higher address connect.)
  ASSERT_EQ(sh({kIp, "-n", ns(1), "rule", "add", "to", addr(2), "ipproto", kTcp, "blackhole"}).first, 0);
  auto o = run_job({});
  EXPECT_LT(o.seconds, 15.0) << "the nodes must stop within seconds, not at the collective timeout";
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE("node " + std::to_string(k));
    EXPECT_EQ(o.code[k], 1) << o.out[k];
    EXPECT_THAT(o.out[k],
                ::testing::ContainsRegex("rank 2 \\(host mesh-node2\\) cannot connect to rank 1 \\(host "
                                         "mesh-node1\\) at 10\\.79\\.0\\.2:[0-9]+: connection attempt timed"));
    EXPECT_THAT(o.out[k], HasSubstr("pin them with `nanochat run --port-range A-B`"));
  }
}

// Not a namespace test: a port of the range held by another process is named, on loopback.
TEST(PortRange, ABusyPortIsNamed) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(34131);  // local rank 1's port of 34130-34139
  // an earlier test's connection on this port may linger in TIME_WAIT; a listener still blocks it
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(fd, 1), 0);
  Proc p = Proc::spawn({nctest::nanochat_binary(), "run", "--nproc-per-node", "2", "--master-port", "34120",
                        "--port-range", "34130-34139", "dist-selftest"},
                       {"NANOCHAT_RENDEZVOUS_TIMEOUT=20"});
  ASSERT_TRUE(p.wait(Ms(30000))) << p.output();
  ::close(fd);
  EXPECT_NE(p.exit_code(), 0);
  EXPECT_THAT(p.output(), HasSubstr("rank 1 (host "));
  EXPECT_THAT(p.output(), HasSubstr("cannot listen on its data-plane port 34131 (--port-range 34130-34139, local "
                                    "rank 1) on 127.0.0.1: Address already in use; it is held by pid "));
  // The holder is this test process, named by its pid and program.
  EXPECT_THAT(p.output(), HasSubstr(str_cat("it is held by pid ", getpid(), " (")));
  EXPECT_THAT(p.output(), HasSubstr("test_cluster"));
}

TEST(PortRange, ARangeSmallerThanTheNodeIsRefused) {
  Proc p = Proc::spawn({nctest::nanochat_binary(), "run", "--nproc-per-node", "3", "--master-port", "34120",
                        "--port-range", "34130-34131", "dist-selftest"},
                       {});
  ASSERT_TRUE(p.wait(Ms(30000))) << p.output();
  EXPECT_EQ(p.exit_code(), 1);
  EXPECT_THAT(p.output(), HasSubstr("--port-range 34130-34131 has 2 ports but this node runs 3 ranks"));
}
