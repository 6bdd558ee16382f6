#include "nanochat/cluster/startup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "nanochat/cluster/env.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/cluster/net.h"
#include "nanochat/core/error.h"
#include "nanochat/core/test_fault.h"

namespace nanochat::cluster {

namespace {

// NANOCHAT_TEST_FAULT=start-delay:R:S: rank R sleeps S seconds before arriving at its first
// barrier (tests only).
void test_start_delay(int rank) {
  static bool delayed = false;
  if (delayed) return;
  delayed = true;
  TestFault f;
  try {
    f = test_fault_from_env();
  } catch (const Error&) {  // base-train reports a malformed value itself
    return;
  }
  const double secs = f.amount;
  if (f.kind != "start-delay" || f.rank != rank || !(secs > 0)) return;
  std::fprintf(stderr, "rank %d: NANOCHAT_TEST_FAULT: delaying start-up by %g s\n", rank, secs);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::duration<double>(secs));
}

std::string rank_names(const std::vector<int>& ranks, const std::function<std::string(int)>& desc) {
  std::string s;
  const size_t shown = std::min<size_t>(ranks.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + desc(ranks[i]);
  if (ranks.size() > shown) s += str_cat(" and ", ranks.size() - shown, " more");
  return s;
}

}  // namespace

void startup_barrier(Communicator& comm, const std::string& stage) {
  const int W = comm.world_size(), r = comm.rank();
  test_start_delay(r);
  if (W == 1) return;
#ifdef NANOCHAT_HAVE_GLOO
  auto* g = dynamic_cast<GlooCommunicator*>(&comm);
  if (!g) return;
  Store& store = g->store();
  const Ms limit = startup_timeout();
  const std::string k = "startup/" + stage + "/";
  const auto t0 = Clock::now(), deadline = t0 + limit;
  store.set(str_cat(k, "arrived/", r), "1");
  if (store.add(k + "count", 1) == W) store.set(k + "all", "1");
  const Ms every = wait_report_interval();
  auto next_report = t0 + every;
  auto describe = [&](int j) { return g->describe_rank(j); };
  auto late = [&] {
    std::vector<int> v;
    for (int j = 0; j < W; ++j)
      if (!store.check({str_cat(k, "arrived/", j)})) v.push_back(j);
    return v;
  };
  const std::string limit_s = str_cat(limit.count() / 1000.0, " s");
  for (;;) {
    try {
      store.wait({k + "all"}, std::max(Ms(1), std::min(Ms(500), remaining(deadline))));
      return;
    } catch (const StoreTimeout&) {
    }
    if (auto e = store.try_get(k + "failed")) fail(*e);
    std::vector<int> missing = late();
    for (int j : missing)
      if (store.check({str_cat("dead/", j)}))
        fail(describe(j), " died during start-up (its connection to the job's store dropped) while ",
             g->describe_rank(r), " waited for it at the start-up barrier; see that rank's output for why");
    if (missing.empty()) continue;  // the last rank is setting "all"
    if (Clock::now() >= deadline) {
      std::string e = str_cat(rank_names(missing, describe), missing.size() == 1 ? " has" : " have",
                              " not finished starting within ", limit_s,
                              " (NANOCHAT_STARTUP_TIMEOUT) while the other ranks were ready to train. Look at what ",
                              missing.size() == 1 ? "it does" : "they do",
                              " (slow disk, data or checkpoint loading, a machine that started late), or raise "
                              "NANOCHAT_STARTUP_TIMEOUT");
      store.set(k + "failed", e);
      fail(e);
    }
    if (Clock::now() >= next_report) {
      next_report = Clock::now() + every;
      int lowest_arrived = 0;
      for (int j : missing)
        if (j == lowest_arrived) ++lowest_arrived;
      if (r == lowest_arrived) {  // one line per interval for the whole job
        long elapsed = std::lround(std::chrono::duration<double>(Clock::now() - t0).count());
        std::fprintf(stderr, "start-up: waiting for %s to finish starting (%ld s of %s, NANOCHAT_STARTUP_TIMEOUT)\n",
                     rank_names(missing, describe).c_str(), elapsed, limit_s.c_str());
        std::fflush(stderr);
      }
    }
  }
#else
  (void)stage;
#endif
}

Ms startup_timeout() { return env_seconds("NANOCHAT_STARTUP_TIMEOUT", Ms(900000)); }

}  // namespace nanochat::cluster
