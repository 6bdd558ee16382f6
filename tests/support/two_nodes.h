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

}  // namespace nctest
