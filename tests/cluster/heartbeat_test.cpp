// The heartbeat (cluster/heartbeat.h) against a real store on loopback: a rank whose counter stops
// changing is reported once, with the time it was silent, after at least the timeout; a rank that
// says goodbye is never reported; a rank whose last will fired is reported as dead (in the words of
// the communicator's failure diagnosis); a rank that keeps beating is never reported. Bounds, not exact times: a report
// may come late on a loaded machine, never early.
#include "nanochat/cluster/heartbeat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/cluster/store.h"
#include "support/gloo_ranks.h"

using namespace nanochat::cluster;

namespace {

StoreClientOptions opts_for(const StoreServer& s) {
  StoreClientOptions o;
  o.host = "127.0.0.1";
  o.port = s.port();
  o.job_token = "tok";
  o.connect_timeout = Ms(10000);
  return o;
}

// Records the reports of one Heartbeat.
struct Reports {
  std::mutex mu;
  std::vector<std::pair<int, std::string>> got;
  std::vector<Clock::time_point> at;
  Heartbeat::OnLost fn() {
    return [this](int r, const std::string& why) {
      std::lock_guard<std::mutex> lk(mu);
      got.emplace_back(r, why);
      at.push_back(Clock::now());
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lk(mu);
    return got.size();
  }
  // Waits up to `limit` for `n` reports.
  bool wait_for(size_t n, Ms limit) {
    const auto end = Clock::now() + limit;
    while (count() < n && Clock::now() < end) std::this_thread::sleep_for(Ms(20));
    return count() >= n;
  }
};

}  // namespace

TEST(Heartbeat, SilentRankIsReportedOnceAfterTheTimeout) {
  StoreServer server(0, "tok");
  StoreClient frozen(opts_for(server));
  frozen.set("nc/g0/hb/1", "0");  // rank 1 beat once, then froze (its connection stays open)
  Reports r;
  const auto start = Clock::now();
  Heartbeat hb(opts_for(server), "nc/g0/", 0, 2, Ms(600), r.fn());
  ASSERT_TRUE(r.wait_for(1, Ms(20000))) << "rank 1 was never reported";
  const double after = std::chrono::duration<double>(r.at[0] - start).count();
  EXPECT_GE(after, 0.6) << "reported before the timeout";
  EXPECT_EQ(r.got[0].first, 1);
  EXPECT_NE(r.got[0].second.find("stopped answering its heartbeat for "), std::string::npos) << r.got[0].second;
  EXPECT_NE(r.got[0].second.find("NANOCHAT_HEARTBEAT_TIMEOUT 0.6 s"), std::string::npos) << r.got[0].second;
  std::this_thread::sleep_for(Ms(800));
  EXPECT_EQ(r.count(), 1u) << "a lost rank is reported once";
  // rank 0's own beats reach the store
  const std::string mine = frozen.get("nc/g0/hb/0", Ms(1000));
  EXPECT_GT(std::atol(mine.c_str()), 0);
}

TEST(Heartbeat, BeatingRanksAreNotReportedAndAGoodbyeIsNotALoss) {
  StoreServer server(0, "tok");
  Reports r0, r1;
  auto h0 = std::make_unique<Heartbeat>(opts_for(server), "nc/g0/", 0, 2, Ms(600), r0.fn());
  auto h1 = std::make_unique<Heartbeat>(opts_for(server), "nc/g0/", 1, 2, Ms(600), r1.fn());
  std::this_thread::sleep_for(Ms(1500));  // more than twice the timeout, both beating
  EXPECT_EQ(r0.count(), 0u);
  EXPECT_EQ(r1.count(), 0u);
  h1.reset();  // rank 1 finishes: goodbye
  std::this_thread::sleep_for(Ms(1500));
  EXPECT_EQ(r0.count(), 0u) << (r0.count() ? r0.got[0].second : "");
  StoreClient c(opts_for(server));
  EXPECT_EQ(c.try_get("nc/g0/hb/1"), std::optional<std::string>("left"));
}

TEST(Heartbeat, RankWhoseLastWillFiredIsReportedDead) {
  StoreServer server(0, "tok");
  StoreClient other(opts_for(server));
  other.set("nc/g0/hb/2", "7");
  Reports r;
  Heartbeat hb(opts_for(server), "nc/g0/", 0, 3, Ms(60000), r.fn());  // a timeout far away
  other.set("nc/g0/dead/2", "rank 2 (host h, pid 9)");                // what its will sets
  ASSERT_TRUE(r.wait_for(1, Ms(20000)));
  EXPECT_EQ(r.got[0].first, 2);
  EXPECT_EQ(r.got[0].second, kDiedWhy);  // the communicator names the rank before it
}

#ifdef NANOCHAT_HAVE_GLOO
// A rank killed between two operations: the others' heartbeats (period 0.1 s) find its will before
// any operation fails, and the next operation's error names it in the words the failure diagnosis
// uses when it finds the death first ("has died ..."). Before, the heartbeat worded it otherwise,
// so a survivor's error depended on which of its threads ran first (Launcher.RanksStartedByHand...
// could fail that way).
TEST(Heartbeat, ADeathItFindsFirstReadsAsTheDiagnosisSaysIt) {
  ::setenv("NANOCHAT_HEARTBEAT_TIMEOUT", "1", 1);  // inherited by the ranks
  auto ps = nctest::gloo_ranks::run_ranks(3, [](GlooCommunicator& c) {
    c.barrier()->wait();
    if (c.rank() == 2) ::raise(SIGKILL);
    std::this_thread::sleep_for(Ms(3000));  // no operation waits for rank 2 meanwhile
    c.barrier()->wait();
  });
  ::unsetenv("NANOCHAT_HEARTBEAT_TIMEOUT");
  for (int r : {0, 1}) {
    const std::string& out = ps[r].output();
    EXPECT_EQ(ps[r].exit_code(), nctest::gloo_ranks::kExitError) << out;
    EXPECT_THAT(out, ::testing::ContainsRegex("barrier.* failed: rank 2 \\(host [^)]+\\) has died \\(killed or "
                                              "crashed: its connection to the store dropped\\)"))
        << out;
  }
}
#endif  // NANOCHAT_HAVE_GLOO

TEST(Heartbeat, TimeoutComesFromTheEnvironment) {
  ::setenv("NANOCHAT_HEARTBEAT_TIMEOUT", "2.5", 1);
  EXPECT_EQ(heartbeat_timeout(), Ms(2500));
  ::setenv("NANOCHAT_HEARTBEAT_TIMEOUT", "0", 1);
  EXPECT_EQ(heartbeat_timeout(), Ms(0));
  ::setenv("NANOCHAT_HEARTBEAT_TIMEOUT", "soon", 1);
  try {
    heartbeat_timeout();
    ADD_FAILURE() << "no error for a malformed value";
  } catch (const nanochat::Error& e) {
    EXPECT_NE(std::string(e.what()).find("NANOCHAT_HEARTBEAT_TIMEOUT='soon'"), std::string::npos) << e.what();
  }
  ::unsetenv("NANOCHAT_HEARTBEAT_TIMEOUT");
  EXPECT_EQ(heartbeat_timeout(), Ms(10000));
}
