// The Communicator's point-to-point, gather/scatter, byte all-gather and split operations:
// GlooCommunicator with real processes (forked copies of this test) on 127.0.0.1 at W=2, 3 and 4
// against values every rank can compute (rank-dependent patterns), unequal and zero sizes, groups
// formed by split() running collectives of their own, and a send or recv whose peer never answers
// failing at the deadline with a message naming that peer; LocalCommunicator at W=1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "support/error_of.h"
#include "support/gloo_ranks.h"
#include "support/test_port.h"

using namespace nanochat;
using ::testing::HasSubstr;

namespace {

// Byte k of rank j's contribution to an operation (distinct per rank, position and operation).
uint8_t pattern(int op, int j, size_t k) { return static_cast<uint8_t>((op * 131 + j * 31 + k * 7 + k / 251) & 0xff); }

std::vector<uint8_t> contribution(int op, int j, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = pattern(op, j, k);
  return v;
}

// Throws naming the operation and position on the first byte that differs.
void check_bytes(const char* what, int j, const uint8_t* got, int op, size_t n) {
  for (size_t k = 0; k < n; ++k)
    if (got[k] != pattern(op, j, k))
      throw std::runtime_error(str_cat(what, ": byte ", k, " of rank ", j, "'s part is ", int(got[k]), ", expected ",
                                       int(pattern(op, j, k))));
}

#ifdef NANOCHAT_HAVE_GLOO
using namespace nctest::gloo_ranks;

// Unequal sizes, rank 1 contributing nothing, rank 0 more than one all-gather chunk (1 MiB).
std::vector<size_t> sizes_for(int W) {
  std::vector<size_t> s(static_cast<size_t>(W));
  for (int j = 0; j < W; ++j) s[static_cast<size_t>(j)] = 1000 + 77 * static_cast<size_t>(j);
  s[0] = (size_t(5) << 19) + 3;  // 2.5 MiB + 3
  s[1] = 0;
  return s;
}

void p2p_and_gathers(int W) {
  auto ps = run_ranks(W, [W](GlooCommunicator& c) {
    const int r = c.rank(), next = (r + 1) % W, prev = (r + W - 1) % W;
    // A ring of sends: rank 0 sends first, the others receive first (a send completes only once
    // its receive is posted). Sizes differ per sender; two messages to the same peer keep order.
    const std::vector<uint8_t> a = contribution(1, r, 3000 + 1000 * r), b = contribution(2, r, 17 + r);
    std::vector<uint8_t> ga(3000 + 1000 * prev), gb(17 + prev);
    auto send_both = [&] {
      auto w1 = c.send(a.data(), a.size(), next);
      auto w2 = c.send(b.data(), b.size(), next);
      w1->wait();
      w2->wait();
    };
    auto recv_both = [&] {
      c.recv(ga.data(), ga.size(), prev)->wait();
      c.recv(gb.data(), gb.size(), prev)->wait();
    };
    if (r == 0) {
      send_both();
      recv_both();
    } else {
      recv_both();
      send_both();
    }
    check_bytes("recv (first message)", prev, ga.data(), 1, ga.size());
    check_bytes("recv (second message)", prev, gb.data(), 2, gb.size());
    c.send(nullptr, 0, next)->wait();  // zero bytes: nothing travels, nothing to receive
    c.recv(nullptr, 0, prev)->wait();

    const std::vector<size_t> sz = sizes_for(W);
    const auto off = offsets(sz);
    // gather to the last rank
    const std::vector<uint8_t> g_in = contribution(3, r, sz[r]);
    std::vector<uint8_t> g_out(r == W - 1 ? off[W] : 0);
    c.gather(g_in.data(), g_out.empty() ? nullptr : g_out.data(), sz, W - 1)->wait();
    if (r == W - 1)
      for (int j = 0; j < W; ++j) check_bytes("gather", j, g_out.data() + off[j], 3, sz[j]);
    // scatter from rank 0
    std::vector<uint8_t> s_in;
    if (r == 0)
      for (int j = 0; j < W; ++j) {
        auto part = contribution(4, j, sz[j]);
        s_in.insert(s_in.end(), part.begin(), part.end());
      }
    std::vector<uint8_t> s_out(sz[r]);
    c.scatter(r == 0 ? s_in.data() : nullptr, s_out.data(), sz, 0)->wait();
    check_bytes("scatter", r, s_out.data(), 4, sz[r]);
    // all-gather of bytes, once from a separate buffer and once in place
    const std::vector<uint8_t> ag_in = contribution(5, r, sz[r]);
    std::vector<uint8_t> ag(off[W], 0);
    c.all_gather_bytes(ag_in.data(), ag.data(), sz)->wait();
    for (int j = 0; j < W; ++j) check_bytes("all_gather_bytes", j, ag.data() + off[j], 5, sz[j]);
    std::vector<uint8_t> inplace(off[W], 0);
    std::copy(ag_in.begin(), ag_in.end(), inplace.begin() + static_cast<std::ptrdiff_t>(off[r]));
    c.all_gather_bytes(inplace.data() + off[r], inplace.data(), sz)->wait();
    if (inplace != ag) throw std::runtime_error("in-place all_gather_bytes differs");
    // all zero sizes
    c.all_gather_bytes(nullptr, nullptr, std::vector<size_t>(W, 0))->wait();
    c.gather(nullptr, nullptr, std::vector<size_t>(W, 0), 0)->wait();
    // typed helpers
    const auto vals = all_gather_value<double>(c, 0.25 + r);
    for (int j = 0; j < W; ++j) check_eq("all_gather_value", j, vals[j], 0.25 + j);
    const auto strs = gather_strings(c, std::string(static_cast<size_t>(r) * 5, static_cast<char>('a' + r)), 0);
    if (r == 0) {
      for (int j = 0; j < W; ++j)
        if (strs[j] != std::string(static_cast<size_t>(j) * 5, static_cast<char>('a' + j)))
          throw std::runtime_error(str_cat("gather_strings: rank ", j, "'s string is '", strs[j], "'"));
    } else if (!strs.empty()) {
      throw std::runtime_error("gather_strings: a rank other than the root got strings");
    }
    std::printf("rank %d ok\n", r);
  });
  expect_all_ok(ps);
  for (int r = 0; r < W; ++r) EXPECT_THAT(ps[r].output(), HasSubstr("rank " + std::to_string(r) + " ok"));
}

TEST(GlooCommunicatorP2P, SendRecvGatherScatterAllGatherBytesAtWorldSize2) { p2p_and_gathers(2); }
TEST(GlooCommunicatorP2P, SendRecvGatherScatterAllGatherBytesAtWorldSize3) { p2p_and_gathers(3); }

TEST(GlooCommunicatorP2P, BadPeersAndSizesAreRejectedAtOnce) {
  auto ps = run_ranks(2, [](GlooCommunicator& c) {
    const std::string self = nctest::error_of([&] { c.send(nullptr, 4, c.rank()); });
    const std::string out = nctest::error_of([&] { c.recv(nullptr, 4, 2); });
    const std::string sizes = nctest::error_of([&] { c.gather(nullptr, nullptr, {1, 2, 3}, 0); });
    const std::string root = nctest::error_of([&] { c.scatter(nullptr, nullptr, {1, 2}, 5); });
    if (self.find("is not another rank") == std::string::npos || out.find("peer 2") == std::string::npos ||
        sizes.find("one size per rank (2), got 3") == std::string::npos ||
        root.find("root 5 is not a rank") == std::string::npos)
      throw std::runtime_error(str_cat("unexpected messages: ", self, " | ", out, " | ", sizes, " | ", root));
    c.barrier()->wait();  // nothing was sent: the communicator still works
    std::printf("ok\n");
  });
  expect_all_ok(ps);
}

// W=4 split by parity into {0, 2} and {1, 3}; each group runs an all-reduce, a byte all-gather
// and a send/recv of its own at the same time; then a split with one color per rank (groups of
// one), and the job's communicator still works afterwards.
TEST(GlooCommunicatorSplit, GroupsRunTheirOwnCollectives) {
  auto ps = run_ranks(4, [](GlooCommunicator& c) {
    const int r = c.rank();
    std::unique_ptr<Communicator> g = c.split(r % 2);
    check_eq("group size", 0, g->world_size(), 2);
    check_eq("group rank", 0, g->rank(), r / 2);
    std::vector<float> x(100000, static_cast<float>(r + 1));
    g->all_reduce_sum(x.data(), x.size())->wait();
    const float want = r % 2 == 0 ? 1 + 3 : 2 + 4;  // job ranks {0, 2} or {1, 3}, values r + 1
    for (size_t i = 0; i < x.size(); i += 997) check_eq("group all_reduce", i, x[i], want);
    const auto members = all_gather_value<int>(*g, r);
    check_eq("group member 0", 0, members[0], r % 2);
    check_eq("group member 1", 1, members[1], r % 2 + 2);
    int token = r * 10;
    if (g->rank() == 0) {
      g->send(&token, sizeof token, 1)->wait();
    } else {
      g->recv(&token, sizeof token, 0)->wait();
      check_eq("group recv", 0, token, (r - 2) * 10);
    }
    g.reset();
    std::unique_ptr<Communicator> alone = c.split(r);
    check_eq("single group size", 0, alone->world_size(), 1);
    float y = 2.5f;
    alone->all_reduce_sum(&y, 1)->wait();
    check_eq("single group all_reduce", 0, y, 2.5f);
    // the gathers too (a one-rank Gloo group has no peer for its ring: the group is local)
    const float z[2] = {1.f, 2.f};
    float zo[2] = {0.f, 0.f};
    alone->all_gather(z, zo, {2})->wait();
    check_eq("single group all_gather", 0, zo[1], 2.f);
    const unsigned char bytes[3] = {7, 8, 9};
    unsigned char bo[3] = {0, 0, 0};
    alone->all_gather_bytes(bytes, bo, {3})->wait();
    check_eq("single group all_gather_bytes", 0, static_cast<int>(bo[2]), 9);
    alone.reset();
    double s = r;
    c.all_reduce_sum_f64(&s, 1)->wait();
    check_eq("job all_reduce after splits", 0, s, 6.0);
    std::printf("rank %d ok\n", r);
  });
  expect_all_ok(ps);
  for (int r = 0; r < 4; ++r) EXPECT_THAT(ps[r].output(), HasSubstr("rank " + std::to_string(r) + " ok"));
}

// With --port-range every pair of a rank listens on its one pinned port; a group's new mesh binds
// that port again, pair by pair.
TEST(GlooCommunicatorSplit, GroupsFormOnPinnedDataPlanePorts) {
  // four ports of this process's own block, below the ephemeral range the job's master port is
  // picked from (a free ephemeral port and its next three could include that master port), all
  // four free now (test_port checks only the one it returns)
  int first = nctest::test_port();
  for (int tries = 0; tries < 20 && !(nctest::port_free_now(first + 1) && nctest::port_free_now(first + 2) &&
                                      nctest::port_free_now(first + 3));
       ++tries)
    first = nctest::test_port();
  ASSERT_EQ(::setenv("NANOCHAT_PORT_RANGE", str_cat(first, "-", first + 3).c_str(), 1), 0);
  auto ps = run_ranks(4, [](GlooCommunicator& c) {
    const int r = c.rank();
    std::unique_ptr<Communicator> g = c.split(r < 3 ? 0 : 1);  // {0, 1, 2} and {3}
    std::vector<float> x(1000, static_cast<float>(r + 1));
    g->all_reduce_sum(x.data(), x.size())->wait();
    check_eq("group all_reduce", 0, x[999], r < 3 ? 6.f : 4.f);
    g.reset();
    double s = 1;
    c.all_reduce_sum_f64(&s, 1)->wait();
    check_eq("job all_reduce after the split", 0, s, 4.0);
    std::printf("rank %d ok\n", r);
  });
  ::unsetenv("NANOCHAT_PORT_RANGE");
  expect_all_ok(ps);
  for (int r = 0; r < 4; ++r) EXPECT_THAT(ps[r].output(), HasSubstr("rank " + std::to_string(r) + " ok"));
}

TEST(GlooCommunicatorSplit, ANegativeColorIsAClearError) {
  auto ps = run_ranks(2, [](GlooCommunicator& c) {
    const std::string e = nctest::error_of([&] { c.split(-1); });
    if (e.find("color -1 is negative") == std::string::npos) throw std::runtime_error("unexpected: " + e);
    std::printf("ok\n");
  });
  expect_all_ok(ps);
}

// The deadline: rank 0's operation waits for rank 1, which stays alive but never answers; rank 0
// must fail after the short collective timeout naming rank 1 and what it waited for.
void unanswered(bool send) {
  auto ps = run_ranks(
      2,
      [send](GlooCommunicator& c) {
        if (c.rank() == 1) {
          std::this_thread::sleep_for(Ms(9000));  // alive, silent, past rank 0's diagnosis
          std::printf("rank 1 done\n");
          return;
        }
        std::vector<char> buf(100, 'x');
        const auto t0 = std::chrono::steady_clock::now();
        const std::string e = nctest::error_of(
            [&] { (send ? c.send(buf.data(), buf.size(), 1) : c.recv(buf.data(), buf.size(), 1))->wait(); });
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("after %.1f s: %s\n", secs, e.c_str());
      },
      [](int) {
        DistOptions o = test_options();
        o.collective_timeout = Ms(1500);
        return o;
      });
  expect_all_ok(ps);
  const std::string out = ps[0].output();
  EXPECT_THAT(out, HasSubstr(send ? "send of 100 bytes to rank 1" : "recv of 100 bytes from rank 1")) << out;
  EXPECT_THAT(out, HasSubstr(send ? "rank 1 (host" : "no data from rank 1 (host")) << out;
  if (send) {
    EXPECT_THAT(out, HasSubstr("did not receive this rank's data within the collective timeout")) << out;
  }
  EXPECT_THAT(out, HasSubstr("NANOCHAT_COLLECTIVE_TIMEOUT")) << out;
}

TEST(GlooCommunicatorP2P, ASendWithNoMatchingRecvFailsAtTheDeadlineNamingThePeer) { unanswered(true); }
TEST(GlooCommunicatorP2P, ARecvWithNoMatchingSendFailsAtTheDeadlineNamingThePeer) { unanswered(false); }

// A rank that dies just before the root posts a gather for its part (its connection already
// closed, the heartbeat not yet beaten): the root's wait ends within seconds (the heartbeat finds
// the death through the store), naming the rank, not at the 30 s collective timeout (a receive
// posted on a pair that already failed is not ended by that pair).
TEST(GlooCommunicatorP2P, AGatherWaitingForARankThatDiesEndsInSecondsNamingIt) {
  auto ps = run_ranks(2, [](GlooCommunicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(Ms(1500));
      _exit(0);  // killed: no goodbye to the store, no part sent
    }
    std::this_thread::sleep_for(Ms(1700));
    std::vector<char> in(100, 'a'), out(200);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string e = nctest::error_of([&] { c.gather(in.data(), out.data(), {100, 100}, 0)->wait(); });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("after %.1f s: %s\n", secs, e.c_str());
    std::printf(secs < 15 ? "ended in time\n" : "waited too long\n");
  });
  const std::string out = ps[0].output();
  EXPECT_THAT(out, HasSubstr("ended in time")) << out;
  EXPECT_THAT(out, HasSubstr("rank 1 (host")) << out;
  EXPECT_THAT(out, HasSubstr("died")) << out;
}

#endif  // NANOCHAT_HAVE_GLOO

TEST(LocalCommunicator, ByteOperationsCopyAndPointToPointHasNoPeer) {
  LocalCommunicator c;
  const std::vector<uint8_t> in = contribution(6, 0, 33);
  for (int op = 0; op < 3; ++op) {
    std::vector<uint8_t> out(33, 0);
    if (op == 0) c.gather(in.data(), out.data(), {33}, 0)->wait();
    if (op == 1) c.scatter(in.data(), out.data(), {33}, 0)->wait();
    if (op == 2) c.all_gather_bytes(in.data(), out.data(), {33})->wait();
    EXPECT_EQ(out, in) << "op " << op;
  }
  EXPECT_THAT(nctest::error_of([&] { c.send(in.data(), 33, 1); }), HasSubstr("a one-rank job has no other rank"));
  EXPECT_THAT(nctest::error_of([&] { c.gather(in.data(), nullptr, {33, 1}, 0); }), HasSubstr("exactly one size"));
  EXPECT_EQ(all_gather_value<int>(c, 7), std::vector<int>{7});
  EXPECT_EQ(gather_strings(c, "abc", 0), std::vector<std::string>{"abc"});
  auto g = c.split(3);
  EXPECT_EQ(g->world_size(), 1);
  EXPECT_THAT(nctest::error_of([&] { c.split(-2); }), HasSubstr("negative"));
}

}  // namespace
