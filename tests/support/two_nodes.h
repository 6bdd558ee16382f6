#pragma once
// Two-node jobs on this host for the CLI tests: each node a `nanochat run` with its own
// NANOCHAT_BASE_DIR (no shared files), node 0 hosting the store on 127.0.0.1.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include "nanochat/checkpoint/checkpoint.h"
#include "support/cli_util.h"
#include "support/test_port.h"

namespace nctest {

/// Runs the binary with NANOCHAT_BASE_DIR=dir, extra environment `env`, bounded by 300 s.
inline Result run_at(const std::string& dir, const std::string& args, const std::string& env) {
  std::string cmd = "NANOCHAT_BASE_DIR=" + dir + " " + env + " timeout 300 " + NANOCHAT_BINARY + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

/// Runs `flags` as two nodes of one rank each, node 0 in n0 and node 1 in n1 (no shared files), with
/// extra environment `fault` (e.g. NANOCHAT_TEST_FAULT=...) and node 1 also given `extra1`.
inline std::pair<Result, Result> two_nodes(const std::string& n0, const std::string& n1, const std::string& flags,
                                           const std::string& fault, const std::string& extra1 = "") {
  const std::string common =
      " run --nnodes 2 --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 --allow-loopback-master"
      " --master-port " +
      std::to_string(test_port());
  const std::string env = "NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_COLLECTIVE_TIMEOUT=60 " + fault;
  Result r0, r1;
  std::thread t0([&] { r0 = run_at(n0, common + " --node-rank 0" + flags, env); });
  std::thread t1([&] { r1 = run_at(n1, common + " --node-rank 1" + flags + extra1, env); });
  t0.join();
  t1.join();
  return {r0, r1};
}

/// `nanochat run` of `nnodes` ("2", or elastic "1:2") for node `k` on this host: one rank, one
/// thread, loopback master on `port`, heartbeat timeout `hb` seconds.
inline std::string node_run_flags(const std::string& nnodes, int k, int port, int hb) {
  return " run --nnodes " + nnodes +
         " --nproc-per-node 1 --threads-per-rank 1 --master-addr 127.0.0.1 --allow-loopback-master"
         " --heartbeat-timeout " +
         std::to_string(hb) + " --master-port " + std::to_string(port) + " --node-rank " + std::to_string(k);
}

/// The last complete checkpoint step in `dir`; -1 when there is none.
inline int64_t last_step(const std::string& dir) {
  auto s = nanochat::last_complete_step(dir);
  return s ? *s : -1;
}

/// Runs `flags` as an elastic job of two nodes (`--nnodes 1:2`, node_run_flags with a 4 s
/// heartbeat), node 0 in n0 and node 1 in n1, both with extra environment `env`.
inline std::pair<Result, Result> elastic_pair(const std::string& n0, const std::string& n1, const std::string& flags,
                                              const std::string& env) {
  const int port = test_port();
  Result r0, r1;
  std::thread t1([&] { r1 = run_at(n1, node_run_flags("1:2", 1, port, 4) + flags, env); });
  r0 = run_at(n0, node_run_flags("1:2", 0, port, 4) + flags, env);
  t1.join();
  return {r0, r1};
}

}  // namespace nctest
