// The rendezvous store (cluster/store.h): operations, blocking semantics with deadlines, counters
// under concurrency, job-token rejection on both sides, unreachable-master and busy-port errors,
// last wills of connections that vanish. Clients talk to a real server over 127.0.0.1.
#include "nanochat/cluster/store.h"
#include "support/error_of.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "support/proc_util.h"

using namespace nanochat;
using namespace nanochat::cluster;
using ::testing::HasSubstr;

namespace {

using nctest::error_of;

StoreClientOptions opts_for(const StoreServer& s, const std::string& token = "tok") {
  StoreClientOptions o;
  o.host = "127.0.0.1";
  o.port = s.port();
  o.job_token = token;
  o.connect_timeout = Ms(10000);
  return o;
}

}  // namespace

TEST(Store, SetGetCheckEraseAndTryGet) {
  StoreServer server(0, "tok");
  StoreClient c(opts_for(server));
  EXPECT_FALSE(c.check({"a"}));
  EXPECT_EQ(c.try_get("a"), std::nullopt);
  c.set("a", "1");
  std::string binary("x\0y\xff", 4);
  c.set("b", binary);
  EXPECT_TRUE(c.check({"a", "b"}));
  EXPECT_FALSE(c.check({"a", "zzz"}));
  EXPECT_EQ(c.get("a", Ms(1000)), "1");
  EXPECT_EQ(c.get("b", Ms(1000)), binary);
  EXPECT_EQ(c.try_get("b"), binary);
  c.set("a", "2");  // overwrite
  EXPECT_EQ(c.get("a", Ms(1000)), "2");
  c.set("empty", "");
  EXPECT_EQ(c.get("empty", Ms(1000)), "");
  EXPECT_TRUE(c.erase("a"));
  EXPECT_FALSE(c.erase("a"));
  EXPECT_FALSE(c.check({"a"}));
  EXPECT_EQ(server.num_clients(), 1u);
}

TEST(Store, GetBlocksUntilAnotherClientSetsTheKey) {
  StoreServer server(0, "tok");
  StoreClient waiter(opts_for(server));
  StoreClient setter(opts_for(server));
  std::thread t([&] {
    std::this_thread::sleep_for(Ms(100));
    setter.set("late", "value");
  });
  EXPECT_EQ(waiter.get("late", Ms(20000)), "value");
  t.join();
  // wait() on several keys, set by two other clients.
  StoreClient s2(opts_for(server));
  std::thread t2([&] {
    setter.set("k1", "x");
    s2.set("k2", "y");
  });
  waiter.wait({"k1", "k2", "late"}, Ms(20000));
  t2.join();
  EXPECT_TRUE(waiter.check({"k1", "k2"}));
}

TEST(Store, GetAndWaitTimeOutNamingTheKeysAndTheStore) {
  StoreServer server(0, "tok");
  StoreClient c(opts_for(server));
  c.set("present", "1");
  try {
    c.get("never", Ms(200));
    FAIL() << "get of a missing key returned";
  } catch (const StoreTimeout& e) {
    EXPECT_THAT(e.what(), HasSubstr("'never'"));
    EXPECT_THAT(e.what(), HasSubstr("the store at 127.0.0.1:" + std::to_string(server.port())));
  }
  try {
    c.wait({"present", "missing1", "missing2"}, Ms(200));
    FAIL() << "wait for missing keys returned";
  } catch (const StoreTimeout& e) {
    EXPECT_THAT(e.what(), HasSubstr("'missing1', 'missing2'"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("'present'")));
  }
  // The connection is still usable after a timeout.
  EXPECT_EQ(c.get("present", Ms(1000)), "1");
}

TEST(Store, AddIsAtomicAcrossConcurrentClients) {
  StoreServer server(0, "tok");
  constexpr int kClients = 4, kAdds = 50;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::thread> ts;
  for (int i = 0; i < kClients; ++i)
    ts.emplace_back([&, i] {
      StoreClient c(opts_for(server));
      for (int k = 0; k < kAdds; ++k) seen[i].push_back(c.add("counter", 1));
    });
  for (auto& t : ts) t.join();
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  // Every increment returned a distinct value and together they are exactly 1..200.
  ASSERT_EQ(all.size(), size_t(kClients * kAdds));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kClients * kAdds);
  StoreClient c(opts_for(server));
  EXPECT_EQ(c.add("counter", -10), kClients * kAdds - 10);
  EXPECT_EQ(c.get("counter", Ms(1000)), std::to_string(kClients * kAdds - 10));
  c.set("text", "abc");
  EXPECT_THAT(error_of([&] { c.add("text", 1); }), HasSubstr("does not hold an integer"));
}

TEST(Store, AddWakesAGetOnTheCounter) {
  StoreServer server(0, "tok");
  StoreClient a(opts_for(server)), b(opts_for(server));
  std::thread t([&] { b.add("n", 5); });
  EXPECT_EQ(a.get("n", Ms(20000)), "5");
  t.join();
}

TEST(Store, PrefixStoreNamespacesKeys) {
  StoreServer server(0, "tok");
  StoreClient c(opts_for(server));
  PrefixStore g0(c, "nc/g0/"), g1(c, "nc/g1/");
  g0.set("rank_0", "a");
  g1.set("rank_0", "b");
  EXPECT_EQ(g0.get("rank_0", Ms(1000)), "a");
  EXPECT_EQ(g1.get("rank_0", Ms(1000)), "b");
  EXPECT_EQ(c.get("nc/g1/rank_0", Ms(1000)), "b");
  EXPECT_EQ(g0.add("n", 2), 2);
  EXPECT_TRUE(g0.check({"rank_0", "n"}));
  EXPECT_FALSE(g1.check({"n"}));
  g1.wait({"rank_0"}, Ms(1000));
  EXPECT_TRUE(g0.erase("n"));
  EXPECT_EQ(c.try_get("nc/g0/n"), std::nullopt);
}

TEST(Store, WrongJobTokenIsRejectedOnBothSides) {
  StoreServer server(0, "right-token");
  std::string msg = error_of([&] {
    auto o = opts_for(server, "wrong-token");
    o.identity = "rank 7 on test";
    StoreClient c(o);
  });
  EXPECT_THAT(msg, HasSubstr("the store at 127.0.0.1:" + std::to_string(server.port()) + " refused this process"));
  EXPECT_THAT(msg, HasSubstr("job token (NANOCHAT_JOB_TOKEN) does not match"));
  EXPECT_EQ(server.num_rejected(), 1u);  // the server side logged and counted it
  EXPECT_EQ(server.num_clients(), 0u);
  StoreClient ok(opts_for(server, "right-token"));  // the server keeps serving
  ok.set("k", "v");
  EXPECT_EQ(ok.get("k", Ms(1000)), "v");
}

TEST(Store, AClientThatIsNotAStoreClientIsDropped) {
  StoreServer server(0, "tok");
  std::string err;
  Fd fd = tcp_connect_once("127.0.0.1", server.port(), Ms(2000), &err);
  ASSERT_TRUE(fd) << err;
  const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  send_all(fd.get(), http, sizeof(http) - 1, Clock::now() + Ms(2000), "store");
  char b[16];
  // The server closes the connection without answering.
  EXPECT_FALSE(recv_all(fd.get(), b, 1, Clock::now() + Ms(5000), "store"));
  EXPECT_EQ(server.num_rejected(), 1u);
  StoreClient ok(opts_for(server));
  ok.set("still", "works");
}

TEST(Store, UnreachableMasterFailsAtItsDeadlineNamingHostAndPort) {
  const int port = pick_free_port();  // nothing listens there
  StoreClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.connect_timeout = Ms(1500);
  auto t0 = Clock::now();
  std::string msg;
  int attempts = 0;
  try {
    StoreClient c(o);
    attempts = c.connect_attempts();
  } catch (const Error& e) {
    msg = e.what();
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_THAT(msg, HasSubstr("cannot reach the store at 127.0.0.1:" + std::to_string(port) + " after "));
  EXPECT_THAT(msg, HasSubstr("Connection refused"));
  EXPECT_THAT(msg, ::testing::ContainsRegex("\\([0-9]+ attempts\\)"));  // it retried
  EXPECT_EQ(attempts, 0);
  EXPECT_GE(secs, 1.4);   // it kept trying until the deadline ...
  EXPECT_LT(secs, 10.0);  // ... and not much longer
}

TEST(Store, ClientRetriesUntilTheServerComesUp) {
  const int port = pick_free_port();
  std::unique_ptr<StoreServer> server;
  std::thread t([&] {
    std::this_thread::sleep_for(Ms(400));
    server = std::make_unique<StoreServer>(port, "tok");
  });
  StoreClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.job_token = "tok";
  o.connect_timeout = Ms(20000);
  {
    StoreClient c(o);
    EXPECT_GE(c.connect_attempts(), 2);
    c.set("k", "v");
    EXPECT_EQ(c.get("k", Ms(1000)), "v");
    t.join();
  }
}

TEST(Store, BusyPortIsAClearError) {
  StoreServer first(0, "tok", "testhost");
  std::string msg = error_of([&] { StoreServer second(first.port(), "tok", "testhost"); });
  // The holder is this process: the message names it and says what to do.
  EXPECT_EQ(msg.rfind("port " + std::to_string(first.port()) + " on testhost is already in use by pid " +
                          std::to_string(getpid()) + " (",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("stop it (`kill " + std::to_string(getpid()) + "`)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("otherwise pick another --master-port"), std::string::npos) << msg;
}

TEST(Store, LastWillIsAppliedWhenAConnectionVanishesButNotAfterGoodbye) {
  StoreServer server(0, "tok");
  StoreClient watcher(opts_for(server));
  {
    StoreClient polite(opts_for(server));
    polite.set_will("dead/polite", "x");
  }  // goodbye: the destructor waits for the server's acknowledgement
  EXPECT_EQ(watcher.try_get("dead/polite"), std::nullopt);

  // A child process sets a will and dies without a goodbye (as SIGKILL would).
  auto o = opts_for(server);
  nctest::Proc child = nctest::Proc::start([&] {
    StoreClient c(o);
    c.set_will("dead/3", "rank 3 (host h)");
    c.set("ready", "1");
    std::fflush(stdout);
    _exit(0);  // no destructors: the socket is closed by the kernel
  });
  EXPECT_EQ(watcher.get("dead/3", Ms(20000)), "rank 3 (host h)");
  ASSERT_TRUE(child.wait(Ms(20000)));
  EXPECT_TRUE(child.exited_ok()) << child.output();
  EXPECT_EQ(watcher.get("ready", Ms(1000)), "1");
  EXPECT_TRUE(server.wait_clients_at_most(1, Ms(20000)));
}

TEST(Store, LostServerIsAClearErrorForTheClient) {
  auto server = std::make_unique<StoreServer>(0, "tok");
  StoreClient c(opts_for(*server));
  c.set("k", "v");
  const int port = server->port();
  server.reset();
  std::string msg = error_of([&] { c.get("k2", Ms(5000)); });
  EXPECT_THAT(msg, HasSubstr("127.0.0.1:" + std::to_string(port)));
  // Later requests fail at once with the same explanation.
  EXPECT_THAT(error_of([&] { c.set("a", "b"); }), HasSubstr("was lost earlier"));
}

// A connection to a port of this host where nothing listens yet never comes back connected to
// itself. Linux gives connect() even ephemeral ports (bind(0) odd ones): attempts on a free even
// port of that range reach the port itself within the range's size, and TCP's simultaneous open
// then connects the socket to itself (15,971 attempts here), which would also hold the port that a
// store was about to bind. Such a connection reads as refused.
TEST(Net, AConnectionToAPortNobodyListensOnIsNeverToItself) {
  int port = pick_free_port();
  port += port % 2;  // connect()'s parity
  if (!tcp_port_free(port)) GTEST_SKIP() << "port " << port << " is busy";
  int connected = 0, attempts = 0;
  for (; attempts < 40000 && !connected; ++attempts) {
    std::string err;
    if (tcp_connect_once("127.0.0.1", port, Ms(1000), &err)) ++connected;
  }
  EXPECT_EQ(connected, 0) << "attempt " << attempts << " came back connected to port " << port;
}
