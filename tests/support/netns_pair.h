#pragma once
// Two hosts simulated by two network namespaces joined by a veth pair (docs/architecture.md 5.5):
// "nc<pid><tag>a" with 10.78.0.1 on veth "nc<pid><tag>x" and "nc<pid><tag>b" with 10.78.0.2 on
// "nc<pid><tag>y". Needs root and `ip netns`; make() says why it cannot (the test then skips with
// that reason). The namespaces are removed by the destructor, also after a failed test.
#include <unistd.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/proc_util.h"

namespace nctest {

class NetnsPair {
 public:
  static constexpr const char* kIp = "/usr/sbin/ip";
  static constexpr const char* kAddrA = "10.78.0.1";
  static constexpr const char* kAddrB = "10.78.0.2";

  explicit NetnsPair(const std::string& tag = "") {
    const std::string id = std::to_string(getpid() % 1000000) + tag;
    a = "nc" + id + "a";
    b = "nc" + id + "b";
    va = "nc" + id + "x";
    vb = "nc" + id + "y";
  }
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;
  ~NetnsPair() {
    if (made_a_) sh({kIp, "netns", "del", a});  // deleting a namespace removes its veth end
    if (made_b_) sh({kIp, "netns", "del", b});
  }

  /// Creates both namespaces and the link. Returns "" on success, else why not.
  std::string make() {
    auto [rc, out] = sh({kIp, "netns", "add", a});
    if (rc != 0) return "`ip netns add` failed (needs root and iproute2): " + out;
    made_a_ = true;
    if (sh({kIp, "netns", "add", b}).first != 0) return "`ip netns add " + b + "` failed";
    made_b_ = true;
    for (auto cmd :
         std::vector<std::vector<std::string>>{{kIp, "link", "add", va, "type", "veth", "peer", "name", vb},
                                               {kIp, "link", "set", va, "netns", a},
                                               {kIp, "link", "set", vb, "netns", b},
                                               {kIp, "-n", a, "addr", "add", std::string(kAddrA) + "/24", "dev", va},
                                               {kIp, "-n", b, "addr", "add", std::string(kAddrB) + "/24", "dev", vb},
                                               {kIp, "-n", a, "link", "set", va, "up"},
                                               {kIp, "-n", b, "link", "set", vb, "up"},
                                               {kIp, "-n", a, "link", "set", "lo", "up"},
                                               {kIp, "-n", b, "link", "set", "lo", "up"}}) {
      auto r = sh(cmd);
      if (r.first != 0) return cmd[1] + " " + cmd[2] + " failed: " + r.second;
    }
    return "";
  }

  /// Rate-limits both ends of the link (tbf; some kernels have no netem). "" on success.
  std::string shape(const std::string& rate) {
    for (auto [ns, dev] : {std::pair{a, va}, std::pair{b, vb}}) {
      auto r = sh({kIp, "netns", "exec", ns, "/usr/sbin/tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                   "burst", "256kb", "latency", "50ms"});
      if (r.first != 0) return "tc tbf unavailable: " + r.second;
    }
    return "";
  }

  /// The argv prefix that runs a command in node `node`'s namespace (0: a, 1: b).
  std::vector<std::string> exec_in(int node) const { return {kIp, "netns", "exec", node == 0 ? a : b}; }

  /// Starts node `n` of a two-node job (one rank, one thread each) in its namespace: `nanochat
  /// run` with the master at `master`:29500 and Gloo on ports 29600-29601, then `args` (split at
  /// spaces), with NANOCHAT_BASE_DIR=`dir`, job token `token` and 60 s rendezvous/collective waits.
  Proc start_node(int n, const std::string& master, const std::string& dir, const std::string& token,
                  const std::string& args) const {
    std::vector<std::string> argv = exec_in(n);
    argv.push_back(nanochat_binary());
    std::istringstream in(" run --nnodes 2 --nproc-per-node 1 --threads-per-rank 1 --master-addr " + master +
                          " --master-port 29500 --port-range 29600-29601 --node-rank " + std::to_string(n) + " " +
                          args);
    for (std::string w; in >> w;) argv.push_back(w);
    return Proc::spawn(argv, {"NANOCHAT_BASE_DIR=" + dir, "NANOCHAT_JOB_TOKEN=" + token,
                              "NANOCHAT_RENDEZVOUS_TIMEOUT=60", "NANOCHAT_COLLECTIVE_TIMEOUT=60"});
  }

  static std::pair<int, std::string> sh(const std::vector<std::string>& argv) { return run_argv(argv); }

  std::string a, b, va, vb;

 private:
  bool made_a_ = false, made_b_ = false;
};

}  // namespace nctest
