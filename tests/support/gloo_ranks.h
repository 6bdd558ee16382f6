#pragma once
// Test helpers for GlooCommunicator tests with real processes: fork W copies of the test, each
// joins a job on 127.0.0.1 and runs a lambda; a child that throws prints "ERROR: <message>" and
// exits with kExitError. Every wait has a deadline.
#ifdef NANOCHAT_HAVE_GLOO
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "nanochat/cluster/gloo_communicator.h"
#include "support/proc_util.h"

namespace nctest::gloo_ranks {

using nanochat::cluster::DistEnv;
using nanochat::cluster::DistOptions;
using nanochat::cluster::GlooCommunicator;
using nanochat::cluster::Ms;
using nanochat::cluster::pick_free_port;

inline DistEnv env_for(int rank, int world, int port) {
  DistEnv e;
  e.rank = rank;
  e.local_rank = rank;
  e.world_size = world;
  e.local_world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

inline DistOptions test_options() {
  DistOptions o;
  o.iface = "";
  o.collective_timeout = Ms(30000);
  o.rendezvous_timeout = Ms(30000);
  o.job_token = "test";
  return o;
}

// Child exit codes.
constexpr int kExitError = 3;

// Runs fn(comm) in W forked processes; returns them after they exited (deadline 40 s).
inline std::vector<nctest::Proc> run_ranks(int W, const std::function<void(GlooCommunicator&)>& fn,
                                           const std::function<DistOptions(int)>& opts_of = nullptr, int world = 0) {
  const int port = pick_free_port();
  std::vector<nctest::Proc> ps;
  for (int r = 0; r < W; ++r) {
    ps.push_back(nctest::Proc::start([&, r] {
      try {
        GlooCommunicator comm(env_for(r, world ? world : W, port), opts_of ? opts_of(r) : test_options());
        fn(comm);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ERROR: %s\n", e.what());
        std::fflush(stderr);
        _exit(kExitError);
      }
      std::fflush(stdout);
      _exit(0);
    }));
  }
  for (auto& p : ps) EXPECT_TRUE(p.wait(Ms(40000))) << "a rank did not finish within 40 s: " << p.output();
  return ps;
}

inline void expect_all_ok(std::vector<nctest::Proc>& ps) {
  for (size_t r = 0; r < ps.size(); ++r) EXPECT_TRUE(ps[r].exited_ok()) << "rank " << r << ":\n" << ps[r].output();
}

// Throws (so the child exits with kExitError) on the first element that differs.
template <typename T>
void check_eq(const char* what, size_t i, T got, T want) {
  if (got != want) {
    std::ostringstream os;
    os << what << "[" << i << "] = " << got << ", expected " << want;
    throw std::runtime_error(os.str());
  }
}

inline std::vector<size_t> offsets(const std::vector<size_t>& c) {
  std::vector<size_t> o(c.size() + 1, 0);
  std::partial_sum(c.begin(), c.end(), o.begin() + 1);
  return o;
}

}  // namespace nctest::gloo_ranks
#endif
