// The data feed's connections (feed/feed_link.h) between thread ranks over real TCP on loopback:
// rank 0 reaches every worker, val frames pass steps queued ahead, rank 0's error reaches every
// worker as its message, and a closed connection, a lost worker or a wait past its deadline is
// a named error instead of a hang.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/feed/feed_link.h"
#include "support/error_of.h"
#include "support/thread_communicator.h"

using namespace nanochat;
using namespace nanochat::cluster;
using namespace nanochat::feed;

namespace {

using nctest::error_of;

// Runs server(FeedServer&) on rank 0 and client(rank, FeedClient&) on ranks 1..W-1, each rank a
// thread with a ThreadCommunicator; rethrows the first error.
void on_feed(int W, const std::function<void(FeedServer&)>& server,
             const std::function<void(int, FeedClient&)>& client) {
  nanochat::testing::ThreadHub hub(W);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(W));
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r)
    threads.emplace_back([&, r] {
      try {
        nanochat::testing::ThreadCommunicator comm(hub, r);
        if (r == 0) {
          FeedServer s(comm, Clock::now() + Ms(20000));
          server(s);
        } else {
          FeedClient c(comm, Clock::now() + Ms(20000));
          client(r, c);
        }
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

FeedFrame frame(FeedKind kind, int64_t seq, std::vector<int32_t> tokens = {}, std::string text = "") {
  FeedFrame f;
  f.kind = kind;
  f.seq = seq;
  f.tokens = std::move(tokens);
  f.text = std::move(text);
  return f;
}

Clock::time_point in(int ms) { return Clock::now() + Ms(ms); }

}  // namespace

// Three ranks: each worker gets its own frames in order, and a val frame sent after two steps is
// taken first (its own queue), then the steps.
TEST(FeedLink, RankZeroReachesEveryWorkerAndValFramesPassStepsSentAhead) {
  std::atomic<int> done{0};
  on_feed(
      3,
      [&](FeedServer& s) {
        EXPECT_EQ(s.world_size(), 3);
        EXPECT_GT(s.port(), 0);
        for (int r = 1; r < 3; ++r) {
          s.send(r, frame(FeedKind::Step, 0, {r, 10 * r}, "state0"), in(5000));
          s.send(r, frame(FeedKind::Step, 1, {r, 11 * r}, "state1"), in(5000));
          s.send(r, frame(FeedKind::Val, 7, {r, 7, 7}), in(5000));
        }
        EXPECT_NE(s.describe(2).find("rank 2 (host "), std::string::npos);
        while (done < 2) std::this_thread::sleep_for(Ms(5));
      },
      [&](int r, FeedClient& c) {
        const FeedFrame v = c.next(FeedKind::Val, 7, in(5000), "validation batch 7");
        EXPECT_EQ(v.tokens, (std::vector<int32_t>{r, 7, 7}));
        const FeedFrame s0 = c.next(FeedKind::Step, 0, in(5000), "the rows of step 0");
        EXPECT_EQ(s0.tokens, (std::vector<int32_t>{r, 10 * r}));
        EXPECT_EQ(s0.text, "state0");
        const FeedFrame s1 = c.next(FeedKind::Step, 1, in(5000), "the rows of step 1");
        EXPECT_EQ(s1.tokens, (std::vector<int32_t>{r, 11 * r}));
        ++done;
      });
}

// Rank 0's error reaches the worker as rank 0's message after the frames sent before it; a wrong
// sequence number is named.
TEST(FeedLink, RankZerosErrorIsTheWorkersErrorAfterTheFramesBeforeIt) {
  std::atomic<bool> done{false};
  on_feed(
      2,
      [&](FeedServer& s) {
        s.send(1, frame(FeedKind::Step, 4, {1}), in(5000));
        s.send(1, frame(FeedKind::Step, 6, {1}), in(5000));
        s.send_error("/data/shard_00001.parquet: row group 5: page CRC mismatch");
        while (!done) std::this_thread::sleep_for(Ms(5));
      },
      [&](int, FeedClient& c) {
        EXPECT_EQ(c.next(FeedKind::Step, 4, in(5000), "the rows of step 4").tokens.size(), 1u);
        const std::string wrong = error_of([&] { c.next(FeedKind::Step, 5, in(5000), "the rows of step 5"); });
        EXPECT_NE(wrong.find("expected the rows of step 5 (seq 5)"), std::string::npos) << wrong;
        EXPECT_NE(wrong.find("got seq 6"), std::string::npos) << wrong;
        const std::string e = error_of([&] { c.next(FeedKind::Step, 7, in(5000), "the rows of step 7"); });
        EXPECT_NE(e.find("rank 0 (at 127.0.0.1) stopped the job: /data/shard_00001.parquet: row group 5"),
                  std::string::npos)
            << e;
        done = true;
      });
}

// Rank 0's message is printed once: by whoever takes the error next() throws (not here), or by the
// receiver when no wait takes it, after a grace period or when the client is destroyed.
size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(FeedLink, RankZerosErrorTakenByAWaitIsNotPrintedAgain) {
  std::atomic<bool> done{false};
  ::testing::internal::CaptureStderr();
  on_feed(
      2,
      [&](FeedServer& s) {
        s.send_error("no tokenizer in /data/tokenizer");
        while (!done) std::this_thread::sleep_for(Ms(5));
      },
      [&](int, FeedClient& c) {
        const std::string e = error_of([&] { c.next(FeedKind::Step, 0, in(5000), "the rows of step 0"); });
        EXPECT_NE(e.find("rank 1: rank 0 (at 127.0.0.1) stopped the job: no tokenizer in /data/tokenizer"),
                  std::string::npos)
            << e;
        done = true;
      });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(err, "stopped the job"), 0u) << err;
}

TEST(FeedLink, RankZerosErrorNoWaitTakesIsPrintedOnce) {
  for (const bool wait_past_grace : {false, true}) {
    std::atomic<bool> done{false};
    ::testing::internal::CaptureStderr();
    on_feed(
        2,
        [&](FeedServer& s) {
          s.send_error("no tokenizer in /data/tokenizer");
          while (!done) std::this_thread::sleep_for(Ms(5));
        },
        [&](int, FeedClient&) {
          // this rank is busy elsewhere (a collective): it never calls next()
          std::this_thread::sleep_for(Ms(wait_past_grace ? 2600 : 300));
          done = true;
        });
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(count_of(err, "rank 1: rank 0 (at 127.0.0.1) stopped the job: no tokenizer in /data/tokenizer"), 1u)
        << (wait_past_grace ? "past the grace period: " : "destroyed before it: ") << err;
  }
}

// A worker whose deadline passes names what it waited for; when rank 0 closes the connection the
// worker names rank 0 instead of waiting.
TEST(FeedLink, AWorkerNamesTheWaitAndAClosedConnection) {
  std::atomic<bool> waited{false};
  on_feed(
      2,
      [&](FeedServer& s) {
        while (!waited) std::this_thread::sleep_for(Ms(5));
        s.shutdown();
      },
      [&](int, FeedClient& c) {
        const std::string late = error_of([&] { c.next(FeedKind::Step, 0, in(300), "the rows of step 0"); });
        EXPECT_NE(late.find("rank 1: waited 0 s for the rows of step 0 from rank 0 (at 127.0.0.1) and gave up"),
                  std::string::npos)
            << late;
        waited = true;
        const std::string closed = error_of([&] { c.next(FeedKind::Step, 0, in(10000), "the rows of step 0"); });
        EXPECT_NE(closed.find("rank 0 (at 127.0.0.1) closed the data connection"), std::string::npos) << closed;
      });
}

// A worker that is gone: rank 0's sends fail within their deadline, naming the worker.
TEST(FeedLink, ALostWorkerIsNamedByRankZero) {
  std::atomic<bool> gone{false};
  on_feed(
      2,
      [&](FeedServer& s) {
        while (!gone) std::this_thread::sleep_for(Ms(5));
        const std::vector<int32_t> rows(1 << 16, 3);
        const std::string e = error_of([&] {
          for (int i = 0; i < 10000; ++i) s.send(1, frame(FeedKind::Step, i, rows), in(5000));
        });
        EXPECT_NE(e.find("rank 1 (host "), std::string::npos) << e;
      },
      [&](int, FeedClient&) { gone = true; });  // the client closes on leaving
}

// Something else that connects to the data port first (a port scanner) is dropped; the workers
// still connect.
TEST(FeedLink, AStrayConnectionIsDroppedNotFatal) {
  nanochat::testing::ThreadHub hub(2);
  std::exception_ptr e0, e1;
  std::atomic<int> port{0};
  std::atomic<bool> got{false};
  std::thread t0([&] {
    try {
      nanochat::testing::ThreadCommunicator comm(hub, 0);
      FeedServer s(comm, in(20000));
      s.send(1, frame(FeedKind::Step, 0, {5}), in(5000));
      while (!got) std::this_thread::sleep_for(Ms(5));
    } catch (...) {
      e0 = std::current_exception();
    }
  });
  std::thread t1([&] {
    try {
      nanochat::testing::ThreadCommunicator comm(hub, 1);
      // learn the port as the client would, then let a stranger connect and talk first
      int64_t p = -1;
      comm.broadcast(&p, sizeof p, 0)->wait();
      port = static_cast<int>(p);
      std::string err;
      Fd stray = tcp_connect_once("127.0.0.1", port, Ms(2000), &err);
      ASSERT_TRUE(stray) << err;
      const char junk[] = "GET / HTTP/1.0\r\n\r\n0123456789abcdef0123456789";
      ::send(stray.get(), junk, sizeof junk, MSG_NOSIGNAL);
      Fd fd = tcp_connect_once("127.0.0.1", port, Ms(2000), &err);
      ASSERT_TRUE(fd) << err;
      write_feed_frame(fd.get(), frame(FeedKind::Hello, 1, {}, "me"), in(2000), "rank 0");
      FeedFrame f;
      ASSERT_TRUE(read_feed_frame(fd.get(), &f, in(5000), "rank 0"));
      EXPECT_EQ(f.tokens, std::vector<int32_t>{5});
      got = true;
    } catch (...) {
      got = true;
      e1 = std::current_exception();
    }
  });
  t0.join();
  t1.join();
  if (e0) std::rethrow_exception(e0);
  if (e1) std::rethrow_exception(e1);
}
