// The launchers' failure reports (launch/launcher_internal.h): what one node's launcher stores when
// its rank fails, how every other launcher reads it back (while its ranks run, and on node 0 while
// it waits for the others to finish), and the final message that names the likely root cause.
#include "nanochat/launch/launcher_internal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "nanochat/core/error.h"

using namespace nanochat;
using namespace nanochat::cluster;
using namespace nanochat::cluster::launcher_detail;
using ::testing::HasSubstr;

namespace {

// A store in memory: what the launchers' keys hold at one moment.
class MapStore final : public Store {
 public:
  std::map<std::string, std::string> kv;
  bool down = false;  // every call throws, like a store whose host went away

  void set(const std::string& key, const std::string& value) override {
    ensure_up();
    kv[key] = value;
  }
  std::string get(const std::string& key, Ms) override {
    ensure_up();
    return kv.at(key);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    ensure_up();
    auto it = kv.find(key);
    if (it == kv.end()) return std::nullopt;
    return it->second;
  }
  void wait(const std::vector<std::string>&, Ms) override { ensure_up(); }
  int64_t add(const std::string& key, int64_t delta) override {
    ensure_up();
    int64_t v = kv.count(key) ? std::stoll(kv[key]) + delta : delta;
    kv[key] = std::to_string(v);
    return v;
  }
  bool check(const std::vector<std::string>&) override { return true; }
  bool erase(const std::string& key) override { return kv.erase(key) > 0; }
  std::string where() const override { return "the store in memory"; }

 private:
  void ensure_up() const {
    if (down) fail("the store in memory is down");
  }
};

NodeCtx node0_of(int nnodes) {
  NodeCtx c;
  c.N = nnodes;
  c.k = 0;
  c.master = "127.0.0.1";
  c.port = 1;
  c.rdzv = Ms(2000);
  c.tag = "test: ";
  return c;
}

}  // namespace

TEST(LauncherReport, RoundTripsThroughTheStoreFormat) {
  Failure f{"rank 3 (host h1, pid 42) was killed by signal 9 (SIGKILL)", true};
  Failure back = parse_failure_report(failure_report(f), 1);
  EXPECT_EQ(back.desc, f.desc);
  EXPECT_TRUE(back.crash);
  back = parse_failure_report(failure_report({"rank 0 (host h, pid 1) exited with status 1", false}), 0);
  EXPECT_EQ(back.desc, "rank 0 (host h, pid 1) exited with status 1");
  EXPECT_FALSE(back.crash);
}

TEST(LauncherReport, MissingFieldsReadAsAFailureOfThatNode) {
  Failure f = parse_failure_report("{}", 2);
  EXPECT_EQ(f.desc, "a rank on node 2 failed");
  EXPECT_FALSE(f.crash);
  f = parse_failure_report(R"({"crash": true})", 5);
  EXPECT_EQ(f.desc, "a rank on node 5 failed");
  EXPECT_TRUE(f.crash);
}

TEST(LauncherReport, UnreadableReportNamesTheNodeInsteadOfThrowing) {
  for (std::string bad : {"", "not json", "{\"desc\": 7}", "[1, 2]", "{\"desc\": \"x\""}) {
    Failure f;
    EXPECT_NO_THROW(f = parse_failure_report(bad, 3)) << bad;
    EXPECT_THAT(f.desc, HasSubstr("a rank on node 3 failed (its launcher's report is unreadable: ")) << bad;
    EXPECT_FALSE(f.crash);
  }
}

TEST(LauncherReport, ReadsTheReportBeforeTheWill) {
  MapStore s;
  EXPECT_FALSE(read_remote_failure(s, 1, "vanished"));
  s.kv["gone/1"] = "node 1's launcher (host b)";
  auto f = read_remote_failure(s, 1, "disappeared before its ranks finished");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->desc, "node 1's launcher (host b) disappeared before its ranks finished");
  EXPECT_TRUE(f->crash);  // a vanished launcher is the likely root cause
  s.kv["failure/1"] = failure_report({"rank 1 (host b, pid 9) exited with status 3", false});
  f = read_remote_failure(s, 1, "vanished");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->desc, "rank 1 (host b, pid 9) exited with status 3");
  EXPECT_FALSE(f->crash);
  EXPECT_FALSE(read_remote_failure(s, 2, "vanished"));  // only that node's keys
  s.down = true;
  EXPECT_THROW(read_remote_failure(s, 1, "vanished"), Error);
}

TEST(LauncherReport, Node0WaitingForTheOthersReadsTheSameReports) {
  MapStore s;
  std::optional<Failure> remote;
  s.kv["done/1"] = "1";
  s.kv["failure/2"] = failure_report({"rank 4 (host c, pid 5) was killed by signal 11 (SIGSEGV)", true});
  EXPECT_EQ(wait_for_nodes_to_finish(s, node0_of(3), remote), 0);
  ASSERT_TRUE(remote);
  EXPECT_EQ(remote->desc, "rank 4 (host c, pid 5) was killed by signal 11 (SIGSEGV)");
  EXPECT_TRUE(remote->crash);

  remote.reset();
  s.kv.erase("failure/2");
  s.kv["gone/2"] = "node 2's launcher (host c)";
  EXPECT_EQ(wait_for_nodes_to_finish(s, node0_of(3), remote), 0);
  ASSERT_TRUE(remote);
  EXPECT_EQ(remote->desc, "node 2's launcher (host c) disappeared before its ranks finished");

  remote.reset();
  s.kv.erase("gone/2");
  s.kv["done/2"] = "1";
  EXPECT_EQ(wait_for_nodes_to_finish(s, node0_of(3), remote), 0);
  EXPECT_FALSE(remote);
}

// --nnodes MIN:MAX: a node that failed or vanished had left the job, which went on without it;
// node 0 does not report it at the end.
TEST(LauncherReport, Node0OfAnElasticJobSkipsTheNodesThatLeft) {
  MapStore s;
  std::optional<Failure> remote;
  s.kv["done/1"] = "1";
  s.kv["failure/2"] = failure_report({"rank 2 (host c, pid 5) was killed by signal 9 (SIGKILL)", true});
  s.kv["gone/3"] = "node 3's launcher (host d)";
  EXPECT_EQ(wait_for_nodes_to_finish(s, node0_of(4), remote, /*elastic=*/true), 0);
  EXPECT_FALSE(remote) << remote->desc;
}

TEST(LauncherReport, Node0StopsWaitingForASilentNodeAtTheDeadline) {
  MapStore s;
  std::optional<Failure> remote;
  NodeCtx c = node0_of(2);
  c.rdzv = Ms(300);
  EXPECT_EQ(wait_for_nodes_to_finish(s, c, remote), 0);
  ASSERT_TRUE(remote);
  EXPECT_EQ(remote->desc, "node 1 did not finish within 0.3 s after this node's ranks did");
  EXPECT_FALSE(remote->crash);
}

// The other node's stderr lines are quoted under the name of the rank that wrote them, which need
// not be the lead (here rank 0 of this node leads and rank 1 on node 1 wrote the lines).
TEST(LauncherReport, TheQuotedLinesNameTheirRank) {
  Failure remote{"rank 1 (host b, pid 9) exited with status 1", false};
  remote.tail = "nanochat: error: rank 0 stopped the job\nsecond line";
  EXPECT_EQ(describe_failures({{"rank 0 (host a, pid 1) exited with status 1", false}}, remote, false),
            "rank 0 (host a, pid 1) exited with status 1 (also: rank 1 (host b, pid 9) exited with status 1)\n"
            "  the last lines rank 1 (host b, pid 9) wrote to stderr on its node:\n"
            "    nanochat: error: rank 0 stopped the job\n"
            "    second line");
  remote.desc = "node 1 disappeared";
  EXPECT_NE(describe_failures({}, remote, false).find("the last lines that rank wrote"), std::string::npos);
}

TEST(LauncherReport, FinalMessageNamesTheCrashFirst) {
  std::vector<Failure> local = {{"rank 0 (host a, pid 1) exited with status 1", false},
                                {"rank 1 (host a, pid 2) was killed by signal 15 (SIGTERM)", false}};
  std::optional<Failure> remote = Failure{"rank 2 (host b, pid 3) was killed by signal 9 (SIGKILL)", true};
  EXPECT_EQ(describe_failures(local, remote, true),
            "rank 2 (host b, pid 3) was killed by signal 9 (SIGKILL); the launcher stopped the other ranks "
            "(also: rank 0 (host a, pid 1) exited with status 1; rank 1 (host a, pid 2) was killed by signal 15 "
            "(SIGTERM))");
  // No crash: the first failure noticed leads.
  EXPECT_EQ(describe_failures({local[0]}, std::nullopt, false), "rank 0 (host a, pid 1) exited with status 1");
  EXPECT_EQ(describe_failures({}, Failure{"node 1 did not finish", false}, false), "node 1 did not finish");
  // A rank this launcher stopped after another node's failure never leads, even when reaped first.
  Failure stopped{"rank 1 (host b, pid 4) was killed by signal 15 (SIGTERM)", false, true};
  EXPECT_EQ(describe_failures({stopped}, Failure{"rank 0 (host a, pid 1) exited with status 1", false}, true),
            "rank 0 (host a, pid 1) exited with status 1; the launcher stopped the other ranks (also: rank 1 (host b, "
            "pid 4) was killed by signal 15 (SIGTERM))");
}

// The report leads with the failure the launchers saw first in the job, from whichever node (each
// report carries its order): node 1's own rank failed after rank 0 on node 0, so node 1 names
// rank 0 first, even when it noticed its own rank before it read node 0's report.
TEST(LauncherReport, TheFailureTheLaunchersSawFirstLeads) {
  MapStore s;
  Failure theirs{"rank 0 (host a, pid 1) exited with status 1", false};
  Failure mine{"rank 1 (host b, pid 2) exited with status 1", false};
  report_failure(s, 0, theirs);
  report_failure(s, 1, mine);
  EXPECT_EQ(theirs.order, 1);
  EXPECT_EQ(mine.order, 2);
  std::optional<Failure> remote = read_remote_failure(s, 0, "vanished");
  ASSERT_TRUE(remote);
  EXPECT_EQ(remote->order, 1);
  const std::string rank0_first =
      "rank 0 (host a, pid 1) exited with status 1 (also: rank 1 (host b, pid 2) exited with status 1)";
  const std::string rank1_first =
      "rank 1 (host b, pid 2) exited with status 1 (also: rank 0 (host a, pid 1) exited with status 1)";
  EXPECT_EQ(describe_failures({mine}, remote, false), rank0_first);
  // this node's came first: it leads
  mine.order = 1;
  remote->order = 2;
  EXPECT_EQ(describe_failures({mine}, remote, false), rank1_first);
  // but a crash elsewhere, reported later, leads: a rank killed is the likely cause of the exits
  // its peers saw first (TwoHosts.ARankKilledOnOneHostStopsTheOtherHostNamingIt)
  remote->crash = true;
  EXPECT_EQ(describe_failures({mine}, remote, false), rank0_first);
  remote->crash = false;
  // an order not known (the store was gone): the crash leads, else the first noticed, as before
  remote->order = -1;
  remote->crash = true;
  EXPECT_EQ(describe_failures({mine}, remote, false), rank0_first);
  remote->crash = false;
  EXPECT_EQ(describe_failures({mine}, remote, false), rank1_first);
}
