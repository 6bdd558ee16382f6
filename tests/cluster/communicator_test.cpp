// GlooCommunicator with real processes (forked copies of this test) on 127.0.0.1: every collective
// at W=2 and W=3 against closed-form sums, unequal and zero reduce-scatter / all-gather counts,
// several operations in flight, agreement of startup facts, rendezvous errors, and a rank killed
// in the middle of a collective (every survivor must fail within seconds naming it).
#include "nanochat/cluster/gloo_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <thread>

#include <signal.h>
#include <sys/socket.h>

#include <cstdint>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "nanochat/cluster/agree.h"
#include "nanochat/launch/selftest.h"
#include "support/error_of.h"
#include "support/gloo_ranks.h"
#include "support/proc_util.h"

using namespace nanochat;
using namespace nanochat::cluster;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace nctest::gloo_ranks;

namespace {

#ifdef NANOCHAT_HAVE_GLOO

void collectives_match_closed_forms(int W) {
  auto ps = run_ranks(W, [W](GlooCommunicator& c) {
    const int r = c.rank();
    const float T = W * (W + 1) / 2.0f;
    // all_reduce_sum: x[i] = (r+1) * (i % 251) -> T * (i % 251); 600001 floats spans many segments.
    std::vector<float> x(600001);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((r + 1) * (i % 251));
    c.all_reduce_sum(x.data(), x.size())->wait();
    for (size_t i = 0; i < x.size(); ++i) check_eq("all_reduce_sum", i, x[i], T * (i % 251));
    // the two all-reduce paths meet at 16,384 values: the largest gathered one, Gloo's smallest
    for (size_t n : {size_t(1), size_t(16384), size_t(16385)}) {
      std::vector<float> s(n);
      for (size_t i = 0; i < n; ++i) s[i] = static_cast<float>((r + 1) * (i % 101 + 1));
      c.all_reduce_sum(s.data(), n)->wait();
      for (size_t i = 0; i < n; ++i) check_eq("all_reduce_sum near 16,384", i, s[i], T * (i % 101 + 1));
    }
    // f64: (r+1) * 1e12 + i -> T*1e12 + W*i, exact in double; 40,001 values span three blocks.
    for (size_t n : {size_t(1001), size_t(40001)}) {
      std::vector<double> d(n);
      for (size_t i = 0; i < d.size(); ++i) d[i] = (r + 1) * 1e12 + static_cast<double>(i);
      c.all_reduce_sum_f64(d.data(), d.size())->wait();
      for (size_t i = 0; i < d.size(); ++i)
        check_eq("all_reduce_sum_f64", i, d[i], T * 1e12 + W * static_cast<double>(i));
    }
    // reduce_scatter with unequal counts, one of them zero, one larger than a pipeline chunk.
    std::vector<size_t> counts(W);
    for (int j = 0; j < W; ++j) counts[j] = 1000 + 333 * j;
    counts[W - 1] = 0;
    counts[0] = 700001;
    auto off = offsets(counts);
    std::vector<float> in(off[W]);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((r + 1) * (i % 13) + r);
    std::vector<float> out(counts[r]);
    c.reduce_scatter_sum(in.data(), out.data(), counts)->wait();
    const float sum_r = W * (W - 1) / 2.0f;  // sum over ranks of r
    for (size_t k = 0; k < counts[r]; ++k) check_eq("reduce_scatter_sum", k, out[k], T * ((off[r] + k) % 13) + sum_r);
    // all_gather with unequal counts (rank j contributes 10*j + 1 values j*1000 + k).
    std::vector<size_t> gc(W);
    for (int j = 0; j < W; ++j) gc[j] = 10 * j + 1;
    auto goff = offsets(gc);
    std::vector<float> mine(gc[r]), all(goff[W], -1.f);
    for (size_t k = 0; k < gc[r]; ++k) mine[k] = static_cast<float>(r * 1000 + k);
    c.all_gather(mine.data(), all.data(), gc)->wait();
    for (int j = 0; j < W; ++j)
      for (size_t k = 0; k < gc[j]; ++k)
        check_eq("all_gather", goff[j] + k, all[goff[j] + k], static_cast<float>(j * 1000 + k));
    // broadcast from the last rank.
    std::vector<int32_t> b(777, r == W - 1 ? 0 : -5);
    if (r == W - 1) std::iota(b.begin(), b.end(), 40);
    c.broadcast(b.data(), b.size() * sizeof(int32_t), W - 1)->wait();
    for (size_t i = 0; i < b.size(); ++i) check_eq("broadcast", i, b[i], static_cast<int32_t>(40 + i));
    // a broadcast of several chunks from the middle rank (the last one at W=2), ending mid-chunk
    const int root = W / 2;
    std::vector<uint8_t> big((size_t(5) << 20) + 3, r == root ? 0 : 1);
    if (r == root)
      for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + i / 4099);
    c.broadcast(big.data(), big.size(), root)->wait();
    for (size_t i = 0; i < big.size(); ++i) check_eq("broadcast", i, big[i], static_cast<uint8_t>(i * 7 + i / 4099));
    c.barrier()->wait();
    std::printf("rank %d ok\n", r);
  });
  expect_all_ok(ps);
  for (int r = 0; r < W; ++r) EXPECT_THAT(ps[r].output(), HasSubstr("rank " + std::to_string(r) + " ok"));
}

TEST(GlooCommunicator, CollectivesMatchClosedFormsAtWorldSize2) { collectives_match_closed_forms(2); }
TEST(GlooCommunicator, CollectivesMatchClosedFormsAtWorldSize3) { collectives_match_closed_forms(3); }

TEST(GlooCommunicator, SelftestPassesAtWorldSize3) {
  auto ps = run_ranks(3, [](GlooCommunicator& c) {
    SelftestOptions o;
    o.iterations = 2;
    o.size = 3000;
    std::ostringstream os;
    size_t n = run_selftest(c, o, os);
    std::printf("%s checks=%zu\n", os.str().c_str(), n);
  });
  expect_all_ok(ps);
  for (auto& p : ps) EXPECT_THAT(p.output(), HasSubstr("OK, 16 checks passed"));
}

TEST(GlooCommunicator, ReduceScatterInPlaceAndAllGatherInPlace) {
  auto ps = run_ranks(2, [](GlooCommunicator& c) {
    const int r = c.rank();
    std::vector<size_t> counts = {5, 300000};
    auto off = offsets(counts);
    std::vector<float> in(off[2]);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7 + 10 * r);
    float* dst = in.data() + off[r];  // the result lands on the rank's own segment
    c.reduce_scatter_sum(in.data(), dst, counts)->wait();
    for (size_t k = 0; k < counts[r]; ++k)
      check_eq("in-place reduce_scatter", k, dst[k], static_cast<float>(2 * ((off[r] + k) % 7) + 10));
    // all_gather in place: the rank's segment already sits in `out`.
    std::vector<float> out(off[2], -1.f);
    for (size_t k = 0; k < counts[r]; ++k) out[off[r] + k] = static_cast<float>(r + 0.5 * k);
    c.all_gather(out.data() + off[r], out.data(), counts)->wait();
    for (int j = 0; j < 2; ++j)
      for (size_t k = 0; k < counts[j]; ++k)
        check_eq("in-place all_gather", off[j] + k, out[off[j] + k], static_cast<float>(j + 0.5 * k));
  });
  expect_all_ok(ps);
}

TEST(GlooCommunicator, ManyOperationsInFlightCompleteInOrder) {
  auto ps = run_ranks(2, [](GlooCommunicator& c) {
    const int r = c.rank();
    constexpr int kOps = 20;
    std::vector<std::vector<float>> bufs(kOps, std::vector<float>(1000));
    std::vector<WorkPtr> works;
    for (int k = 0; k < kOps; ++k) {
      std::fill(bufs[k].begin(), bufs[k].end(), static_cast<float>(k * 10 + r));
      works.push_back(c.all_reduce_sum(bufs[k].data(), bufs[k].size()));
    }
    for (int k = kOps - 1; k >= 0; --k) works[k]->wait();
    for (int k = 0; k < kOps; ++k)
      check_eq("in-flight all_reduce", k, bufs[k][999], static_cast<float>(2 * k * 10 + 1));
  });
  expect_all_ok(ps);
}

// The side lane runs beside the main lane: rank 0 queues a reduce-scatter, then a side-lane
// all-gather, and waits for the gather first; the other ranks submit their reduce-scatter only
// after their side gather finished. With one lane rank 0's gather would wait behind its
// reduce-scatter, which waits for the others: each rank would wait for the other until the
// deadline (10 s). Then both lanes at once, many operations in flight, main-lane all-gathers
// beside side-lane ones (their messages must not mix), every result against its closed form.
void side_lane_runs_beside_the_main_lane(int W) {
  auto opts = [](int) {
    DistOptions o = test_options();
    o.collective_timeout = Ms(10000);
    return o;
  };
  auto ps = run_ranks(
      W,
      [W](GlooCommunicator& c) {
        const int r = c.rank();
        std::vector<size_t> counts(W, 400001);
        counts[0] = 900001;
        auto off = offsets(counts);
        std::vector<float> rs(off[W]), rs_out(counts[r]), ag(off[W], -1.f);
        for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>((r + 1) * (i % 17));
        for (size_t k = 0; k < counts[r]; ++k) ag[off[r] + k] = static_cast<float>(r * 100 + k % 11);
        const float T = W * (W + 1) / 2.0f;
        if (r == 0) {
          WorkPtr red = c.reduce_scatter_sum(rs.data(), rs_out.data(), counts);
          c.all_gather_side(ag.data() + off[r], ag.data(), counts)->wait();
          red->wait();
        } else {
          c.all_gather_side(ag.data() + off[r], ag.data(), counts)->wait();
          c.reduce_scatter_sum(rs.data(), rs_out.data(), counts)->wait();
        }
        for (size_t k = 0; k < counts[r]; ++k)
          check_eq("reduce_scatter beside a side gather", k, rs_out[k], T * ((off[r] + k) % 17));
        for (int j = 0; j < W; ++j)
          for (size_t k = 0; k < counts[j]; ++k)
            check_eq("side all_gather", off[j] + k, ag[off[j] + k], static_cast<float>(j * 100 + k % 11));
        // Both lanes busy at once: main-lane reduce-scatters and all-gathers beside side gathers.
        constexpr int kOps = 6;
        const std::vector<size_t> gc(W, 70001);
        const auto goff = offsets(gc);
        std::vector<std::vector<float>> main_g(kOps, std::vector<float>(goff[W])), side_g = main_g;
        std::vector<std::vector<float>> red_in(kOps, std::vector<float>(off[W])), red_out(kOps);
        std::vector<WorkPtr> works;
        for (int k = 0; k < kOps; ++k) {
          for (size_t i = 0; i < off[W]; ++i) red_in[k][i] = static_cast<float>(k + r);
          red_out[k].assign(counts[r], 0.f);
          for (size_t i = 0; i < gc[r]; ++i) {
            main_g[k][goff[r] + i] = static_cast<float>(1000 * k + r);
            side_g[k][goff[r] + i] = static_cast<float>(-1000 * k - r);
          }
          works.push_back(c.reduce_scatter_sum(red_in[k].data(), red_out[k].data(), counts));
          works.push_back(c.all_gather_side(side_g[k].data() + goff[r], side_g[k].data(), gc));
          works.push_back(c.all_gather(main_g[k].data() + goff[r], main_g[k].data(), gc));
        }
        for (auto& w : works) w->wait();
        for (int k = 0; k < kOps; ++k) {
          for (size_t i = 0; i < counts[r]; ++i)
            check_eq("reduce_scatter in flight", i, red_out[k][i], static_cast<float>(W * k + W * (W - 1) / 2));
          for (int j = 0; j < W; ++j)
            for (size_t i = 0; i < gc[j]; ++i) {
              check_eq("main all_gather in flight", goff[j] + i, main_g[k][goff[j] + i],
                       static_cast<float>(1000 * k + j));
              check_eq("side all_gather in flight", goff[j] + i, side_g[k][goff[j] + i],
                       static_cast<float>(-1000 * k - j));
            }
        }
        std::printf("rank %d ok\n", r);
      },
      opts);
  expect_all_ok(ps);
  for (int r = 0; r < W; ++r) EXPECT_THAT(ps[r].output(), HasSubstr("rank " + std::to_string(r) + " ok"));
}

TEST(GlooCommunicator, SideLaneRunsBesideTheMainLaneAtWorldSize2) { side_lane_runs_beside_the_main_lane(2); }
TEST(GlooCommunicator, SideLaneRunsBesideTheMainLaneAtWorldSize3) { side_lane_runs_beside_the_main_lane(3); }

// A failure on one lane ends the operation the other lane is waiting in at once, even when that
// operation waits for a rank that is alive: rank 2 dies while rank 0's side gather waits for its
// part, and rank 0's main lane is inside a broadcast from rank 1 (which stays alive and silent).
// Gloo's broadcast receives only from rank 1, so nothing but the side lane's failure can end it
// before the 30 s collective timeout.
TEST(GlooCommunicator, AFailureOnOneLaneEndsTheOtherLanesWaitAtOnce) {
  auto ps = run_ranks(3, [](GlooCommunicator& c) {
    if (c.rank() == 2) {
      std::this_thread::sleep_for(Ms(1500));
      _exit(0);  // killed: no goodbye, no part sent
    }
    if (c.rank() == 1) {
      std::this_thread::sleep_for(Ms(9000));  // alive and silent, past rank 0's verdict
      return;
    }
    std::vector<char> bytes(64, 0);
    std::vector<float> in(8, 1.f), out(24);
    const auto t0 = Clock::now();
    WorkPtr bcast = c.broadcast(bytes.data(), bytes.size(), 1);
    WorkPtr side = c.all_gather_side(in.data(), out.data(), {8, 8, 8});
    const std::string side_error = nctest::error_of([&] { side->wait(); });
    const std::string main_error = nctest::error_of([&] { bcast->wait(); });
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("side: %s\nmain after %.1f s: %s\n", side_error.c_str(), secs, main_error.c_str());
    std::printf(secs < 7 ? "ended in time\n" : "waited too long\n");
  });
  const std::string out = ps[0].output();
  EXPECT_THAT(out, HasSubstr("ended in time")) << out;
  EXPECT_THAT(out, HasSubstr("broadcast of 64 bytes from rank 1")) << out;
  EXPECT_THAT(out, HasSubstr("rank 2 (host")) << out;
}

// A rank killed while the others are inside a broadcast or a barrier ends their waits within
// seconds, naming it. Rank 1 dies between two rounds, so the root's 64 MB for it are more than
// the sockets hold and still queued when its reset arrives; a send queued that way is ended only
// by an abort of our own buffer (Gloo's pair does not end it).
void a_killed_rank_ends_a_broadcast_and_a_barrier(bool barrier) {
  auto ps = run_ranks(3, [barrier](GlooCommunicator& c) {
    std::vector<char> bytes(size_t(64) << 20, c.rank() == 0 ? 7 : 0);
    for (int it = 0;; ++it) {
      if (c.rank() == 1 && it == 3) ::raise(SIGKILL);
      const auto t0 = Clock::now();
      const std::string error = nctest::error_of([&] {
        if (barrier)
          c.barrier()->wait();
        else
          c.broadcast(bytes.data(), bytes.size(), 0)->wait();
      });
      if (error.empty()) continue;
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("round %d failed after %.1f s: %s\n%s\n", it, secs, error.c_str(),
                  secs < 12 ? "ended in time" : "waited too long");
      return;
    }
  });
  for (int r : {0, 2}) {
    const std::string& out = ps[r].output();
    EXPECT_THAT(out, HasSubstr("ended in time")) << "rank " << r << ":\n" << out;
    EXPECT_THAT(out, HasSubstr(barrier ? "barrier" : "broadcast of 67108864 bytes from rank 0")) << out;
    EXPECT_THAT(out, HasSubstr("rank 1 (host ")) << out;
  }
}

TEST(GlooCommunicator, AKilledRankEndsABroadcastAtOnce) { a_killed_rank_ends_a_broadcast_and_a_barrier(false); }
TEST(GlooCommunicator, AKilledRankEndsABarrierAtOnce) { a_killed_rank_ends_a_broadcast_and_a_barrier(true); }

// close() leaves the group while the object lives on (an elastic rank left out of the next
// generation): its heartbeat, lane and Gloo threads stop, a later operation fails at once quoting
// the reason, and the other rank is told goodbye: it does not report the closed rank as lost while
// that rank stays alive (heartbeat timeout 2 s, 6 s of watching).
size_t threads_of_this_process() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(GlooCommunicator, CloseStopsItsThreadsSaysGoodbyeAndLaterOperationsFailAtOnce) {
  ::setenv("NANOCHAT_HEARTBEAT_TIMEOUT", "2", 1);
  auto ps = run_ranks(2, [](GlooCommunicator& c) {
    c.on_peer_lost([](int r, const std::string& why) { std::printf("LOST rank %d: %s\n", r, why.c_str()); });
    c.barrier()->wait();
    if (c.rank() == 0) {
      std::this_thread::sleep_for(Ms(6000));
      std::printf("watched 6 s\n");
      return;
    }
    const size_t before = threads_of_this_process();
    c.close("left out of the next generation");
    const size_t after = threads_of_this_process();
    const auto t0 = Clock::now();
    const std::string error = nctest::error_of([&] { c.barrier()->wait(); });
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    c.close("again");  // does nothing
    std::printf("threads %zu -> %zu; rank %d of %d; after %.3f s: %s\n", before, after, c.rank(), c.world_size(), secs,
                error.c_str());
    if (after + 3 <= before && secs < 0.5) std::printf("closed in time\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(Ms(6000));  // alive, not answering the closed heartbeat
  });
  ::unsetenv("NANOCHAT_HEARTBEAT_TIMEOUT");
  expect_all_ok(ps);
  const std::string out0 = ps[0].output(), out1 = ps[1].output();
  EXPECT_THAT(out0, HasSubstr("watched 6 s")) << out0;
  EXPECT_THAT(out0, Not(HasSubstr("LOST"))) << out0;
  EXPECT_THAT(out1, HasSubstr("closed in time")) << out1;
  EXPECT_THAT(out1, HasSubstr("rank 1 of 2")) << out1;
  EXPECT_THAT(out1, HasSubstr("barrier cannot run: the communicator was closed: left out of the next generation"))
      << out1;
}

TEST(GlooCommunicator, BadCountsAreRejectedBeforeAnythingIsSent) {
  auto ps = run_ranks(2, [](GlooCommunicator& c) {
    float x = 0;
    try {
      c.reduce_scatter_sum(&x, &x, {1, 1, 1});
      throw std::runtime_error("3 counts at W=2 were accepted");
    } catch (const Error& e) {
      if (std::string(e.what()).find("one count per rank (2)") == std::string::npos) throw;
    }
    c.barrier()->wait();  // the communicator is still healthy
  });
  expect_all_ok(ps);
}

TEST(Agree, IdenticalFactsPassAndADifferenceFailsOnEveryRankNamingIt) {
  auto ok = run_ranks(3, [](GlooCommunicator& c) {
    agree(c, {{"model", "d4"}, {"tokenizer", "abc"}});
    std::printf("agreed\n");
  });
  expect_all_ok(ok);
  auto bad = run_ranks(3, [](GlooCommunicator& c) {
    std::map<std::string, std::string> f = {{"model", "d4"}, {"tokenizer", c.rank() == 1 ? "OTHER" : "abc"}};
    if (c.rank() == 2) f["only_on_2"] = "x";
    agree(c, f);
  });
  for (int r = 0; r < 3; ++r) {
    const std::string& out = bad[r].output();
    EXPECT_EQ(bad[r].exit_code(), kExitError) << out;
    EXPECT_THAT(out, HasSubstr("disagree on 2 settings"));
    EXPECT_THAT(out, HasSubstr("'tokenizer' differs"));
    EXPECT_THAT(out, HasSubstr("'OTHER' on rank 1 (host "));
    EXPECT_THAT(out, HasSubstr("'abc' on ranks 0, 2 (host "));
    EXPECT_THAT(out, HasSubstr("'only_on_2' differs"));
    EXPECT_THAT(out, HasSubstr("(missing) on ranks 0-1"));
    EXPECT_THAT(out, ::testing::Not(HasSubstr("'model' differs")));
  }
}

TEST(Agree, WorldSizeOneIsANoOp) {
  LocalCommunicator c;
  agree(c, {{"a", "b"}});  // returns without collectives
  SUCCEED();
}

TEST(GlooCommunicator, AKilledRankMakesEverySurvivorFailNamingIt) {
  // Rank 1 SIGKILLs itself while the others are inside a large all-reduce loop.
  auto ps = run_ranks(3, [](GlooCommunicator& c) {
    std::vector<float> x(1 << 20, 1.f);
    for (int it = 0;; ++it) {
      if (c.rank() == 1 && it == 3) ::raise(SIGKILL);
      auto t0 = Clock::now();
      try {
        c.all_reduce_sum(x.data(), x.size())->wait();
      } catch (const Error& e) {
        double s = std::chrono::duration<double>(Clock::now() - t0).count();
        std::printf("FAILED after %.3f s: %s\n", s, e.what());
        // Later operations fail at once with the same diagnosis.
        try {
          c.barrier()->wait();
        } catch (const Error& e2) {
          std::printf("THEN: %s\n", e2.what());
        }
        std::fflush(stdout);
        throw;  // unwinds through the communicator's destructor, as the CLI does
      }
    }
  });
  EXPECT_TRUE(WIFSIGNALED(ps[1].status()) && WTERMSIG(ps[1].status()) == SIGKILL);
  for (int r : {0, 2}) {
    const std::string& out = ps[r].output();
    EXPECT_EQ(ps[r].exit_code(), kExitError) << out;
    EXPECT_THAT(out, HasSubstr("rank " + std::to_string(r) + " (host "));
    EXPECT_THAT(out, HasSubstr("all_reduce_sum of 1048576 floats"));
    EXPECT_THAT(out, HasSubstr("rank 1 (host "));
    EXPECT_THAT(out, HasSubstr("has died"));
    EXPECT_THAT(out, HasSubstr("THEN: "));
    EXPECT_THAT(out, HasSubstr("the communicator failed earlier"));
    double secs = 1e9;
    auto p = out.find("FAILED after ");
    ASSERT_NE(p, std::string::npos) << out;
    secs = std::stod(out.substr(p + 13));
    EXPECT_LT(secs, 10.0) << out;  // far below the 30 s collective timeout: the death was noticed
  }
}

TEST(GlooCommunicator, ASilentPeerOfATwoRankJobIsNamedInASmallAllReduce) {
  // Rank 1 stays alive (its store connection up, no error reported) but never joins rank 0's
  // one-float all-reduce: rank 0's timeout must name rank 1.
  auto ps = run_ranks(
      2,
      [](GlooCommunicator& c) {
        if (c.rank() == 1) {
          std::this_thread::sleep_for(Ms(6000));
          return;
        }
        float x = 1.f;
        c.all_reduce_sum(&x, 1)->wait();
      },
      [](int) {
        DistOptions o = test_options();
        o.collective_timeout = Ms(2000);
        return o;
      });
  const std::string& out = ps[0].output();
  EXPECT_EQ(ps[0].exit_code(), kExitError) << out;
  EXPECT_THAT(out, HasSubstr("all_reduce_sum of 1 floats"));
  EXPECT_THAT(out, HasSubstr("no data from rank 1 (host "));
  EXPECT_THAT(out, HasSubstr("NANOCHAT_COLLECTIVE_TIMEOUT"));
}

// Rank 1 stays alive and silent while rank 0 waits on both lanes: a reduce-scatter on the main
// lane, then (1 s later) a gather on the side lane. The main lane's wait times out first, and
// Gloo closes the pair to rank 1, which ends the side lane's wait too. The reason both operations
// give is the main lane's timeout, naming rank 1; the side lane says it was ended by it rather
// than giving a diagnosis of its own that cannot know which rank was silent.
TEST(GlooCommunicator, TheLaneThatTimedOutFirstGivesTheReason) {
  auto ps = run_ranks(
      2,
      [](GlooCommunicator& c) {
        if (c.rank() == 1) {
          std::this_thread::sleep_for(Ms(9000));  // alive and silent, past rank 0's verdict
          return;
        }
        std::vector<float> x(64, 1.f), y(32), in(8, 1.f), out(16);
        WorkPtr rs = c.reduce_scatter_sum(x.data(), y.data(), {32, 32});
        std::this_thread::sleep_for(Ms(1000));
        WorkPtr side = c.all_gather_side(in.data(), out.data(), {8, 8});
        const std::string main_error = nctest::error_of([&] { rs->wait(); });
        const std::string side_error = nctest::error_of([&] { side->wait(); });
        std::printf("main: %s\nside: %s\n", main_error.c_str(), side_error.c_str());
      },
      [](int) {
        DistOptions o = test_options();
        o.collective_timeout = Ms(2000);
        return o;
      });
  const std::string& out = ps[0].output();
  const size_t side_at = out.find("\nside: ");
  ASSERT_NE(side_at, std::string::npos) << out;
  const std::string main_line = out.substr(0, side_at), side_line = out.substr(side_at);
  EXPECT_THAT(main_line, HasSubstr("reduce_scatter_sum of 64 floats")) << out;
  EXPECT_THAT(main_line, HasSubstr("no data from rank 1 (host ")) << out;
  EXPECT_THAT(main_line, HasSubstr("NANOCHAT_COLLECTIVE_TIMEOUT")) << out;
  EXPECT_THAT(side_line, HasSubstr("side lane) was ended by a failure on the other lane: ")) << out;
  EXPECT_THAT(side_line, HasSubstr("no data from rank 1 (host ")) << out;
  EXPECT_THAT(out, Not(HasSubstr("no other rank reported a failure"))) << out;
}

TEST(GlooCommunicator, RendezvousNamesRanksThatNeverJoined) {
  // WORLD_SIZE=3 but only ranks 0 and 1 start.
  auto ps = run_ranks(
      2, [](GlooCommunicator&) {},
      [](int) {
        DistOptions o = test_options();
        o.rendezvous_timeout = Ms(1500);
        return o;
      },
      3);
  for (auto& p : ps) {
    EXPECT_EQ(p.exit_code(), kExitError) << p.output();
    EXPECT_THAT(p.output(), HasSubstr("rendezvous timed out after 1.5 s"));
    EXPECT_THAT(p.output(), HasSubstr("rank 2 of WORLD_SIZE=3 never joined"));
  }
}

TEST(GlooCommunicator, DuplicateRankIsAClearError) {
  const int port = pick_free_port();
  auto start = [&](int rank) {
    return nctest::Proc::start([=] {
      try {
        DistOptions o = test_options();
        o.rendezvous_timeout = Ms(3000);
        GlooCommunicator c(env_for(rank, 3, port), o);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ERROR: %s\n", e.what());
        _exit(kExitError);
      }
      _exit(0);
    });
  };
  auto a = start(0);
  auto b = start(1);
  auto c = start(1);  // a second RANK=1
  for (auto* p : {&a, &b, &c}) ASSERT_TRUE(p->wait(Ms(30000)));
  std::string all = a.output() + b.output() + c.output();
  EXPECT_THAT(all, HasSubstr("RANK=1 is used by two processes"));
  EXPECT_FALSE(a.exited_ok());  // rank 2 never came: rank 0 times out
}

TEST(GlooCommunicator, WrongJobTokenStopsTheRankWithAClearError) {
  auto ps = run_ranks(
      2, [](GlooCommunicator&) {},
      [](int r) {
        DistOptions o = test_options();
        o.rendezvous_timeout = Ms(3000);
        if (r == 1) o.job_token = "someone-else";
        return o;
      });
  EXPECT_THAT(ps[1].output(), HasSubstr("refused this process"));
  EXPECT_THAT(ps[1].output(), HasSubstr("job token"));
  EXPECT_THAT(ps[0].output(), HasSubstr("refused a connection from"));  // the store host says so too
  EXPECT_FALSE(ps[0].exited_ok());
}

#endif  // NANOCHAT_HAVE_GLOO

TEST(DistEnv, ReadsTorchrunVariablesAndRejectsInconsistentOnes) {
  struct Saved {
    std::vector<std::pair<std::string, std::optional<std::string>>> v;
    void set(const char* k, const char* val) {
      const char* old = std::getenv(k);
      v.push_back({k, old ? std::optional<std::string>(old) : std::nullopt});
      if (val)
        setenv(k, val, 1);
      else
        unsetenv(k);
    }
    ~Saved() {
      for (auto it = v.rbegin(); it != v.rend(); ++it) {
        if (it->second)
          setenv(it->first.c_str(), it->second->c_str(), 1);
        else
          unsetenv(it->first.c_str());
      }
    }
  } s;
  s.set("WORLD_SIZE", nullptr);
  EXPECT_EQ(DistEnv::from_env().world_size, 1);
  EXPECT_EQ(make_communicator_from_env()->world_size(), 1);  // LocalCommunicator
  s.set("WORLD_SIZE", "4");
  s.set("RANK", "3");
  s.set("LOCAL_RANK", "1");
  s.set("LOCAL_WORLD_SIZE", "2");
  s.set("MASTER_ADDR", "10.1.2.3");
  s.set("MASTER_PORT", "29555");
  s.set("NANOCHAT_STORE_HOSTED", "1");
  DistEnv e = DistEnv::from_env();
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.1.2.3");
  EXPECT_EQ(e.master_port, 29555);
  EXPECT_TRUE(e.store_hosted);
  s.set("RANK", "4");
  EXPECT_THAT([] { DistEnv::from_env(); },
              ::testing::ThrowsMessage<Error>(HasSubstr("RANK=4 is outside [0, WORLD_SIZE=4)")));
  s.set("RANK", "x");
  EXPECT_THAT([] { DistEnv::from_env(); }, ::testing::ThrowsMessage<Error>(HasSubstr("RANK='x' is not an integer")));
  s.set("RANK", "0");
  s.set("MASTER_ADDR", nullptr);
  EXPECT_THAT([] { DistEnv::from_env(); }, ::testing::ThrowsMessage<Error>(HasSubstr("MASTER_ADDR is not set")));
  s.set("NANOCHAT_COLLECTIVE_TIMEOUT", "2.5");
  s.set("NANOCHAT_SOCKET_IFNAME", "eth7,eth8");
  DistOptions o = DistOptions{}.resolved();
  EXPECT_EQ(o.collective_timeout->count(), 2500);
  EXPECT_EQ(*o.iface, "eth7");
  s.set("NANOCHAT_COLLECTIVE_TIMEOUT", "soon");
  EXPECT_THROW(DistOptions{}.resolved(), Error);
}

TEST(ChooseDevice, RoutesToTheMasterOrUsesTheNamedInterface) {
  DeviceChoice d = choose_device("127.0.0.1", 29500, "");
  EXPECT_EQ(d.address, "127.0.0.1");
  EXPECT_EQ(d.iface, "lo");
  DeviceChoice l = choose_device("127.0.0.1", 29500, "lo");
  EXPECT_EQ(l.address, "127.0.0.1");
  EXPECT_THAT([] { choose_device("127.0.0.1", 29500, "nosuchif0"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("network interface 'nosuchif0'")));
  // A non-loopback master is reached from a non-loopback address (never the hostname's 127.x).
  for (const auto& i : list_interfaces()) {
    if (i.loopback || i.family != AF_INET || !i.up) continue;
    DeviceChoice r = choose_device(i.address, 29500, "");
    EXPECT_EQ(r.address, i.address);
    EXPECT_EQ(r.iface, i.name);
    break;
  }
}

TEST(Selftest, PassesOnTheLocalCommunicator) {
  LocalCommunicator c;
  SelftestOptions o;
  o.iterations = 2;
  o.size = 100;
  std::ostringstream os;
  EXPECT_EQ(run_selftest(c, o, os), 16u);
  EXPECT_THAT(os.str(), HasSubstr("rank 0 of 1: OK"));
}

}  // namespace
