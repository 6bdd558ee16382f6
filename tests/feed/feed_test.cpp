// The data feed's wire format and queue (feed/feed.h): frames round-trip over a real socket pair
// bit for bit, a damaged or cut frame is a named error (never garbage rows), a clean close between
// frames is told apart, and the bounded queue blocks its producer, delivers what was queued before
// a close, and names what a consumer waited for when its deadline passes.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "nanochat/core/error.h"
#include "nanochat/feed/feed.h"
#include "support/error_of.h"

using namespace nanochat;
using namespace nanochat::cluster;
using namespace nanochat::feed;

namespace {

using nctest::error_of;

struct Pair {
  Fd a, b;
  Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    a.reset(sv[0]);
    b.reset(sv[1]);
  }
};

Clock::time_point in(int ms) { return Clock::now() + Ms(ms); }

FeedFrame step_frame(int64_t step, int rows, int T1) {
  FeedFrame f;
  f.kind = FeedKind::Step;
  f.seq = step;
  for (int i = 0; i < rows * T1; ++i) f.tokens.push_back(static_cast<int32_t>((i * 2654435761u) % 32768));
  f.text = R"({"pq_idx":1,"rg_idx":2,"buffer":[[0,1,2]]})";
  return f;
}

}  // namespace

TEST(Feed, StepFrameRoundTripsOverASocketWhileTheReaderReads) {
  Pair p;
  // a whole step of 512 rows x 65 tokens (130 KB) is larger than the socket buffer: the writer
  // must block until the reader drains it
  const FeedFrame out = step_frame(7, 512, 65);
  std::thread w([&] { write_feed_frame(p.a.get(), out, in(10000), "rank 1 (host b)"); });
  FeedFrame got;
  ASSERT_TRUE(read_feed_frame(p.b.get(), &got, in(10000), "rank 0 (host a)"));
  w.join();
  EXPECT_EQ(got.kind, FeedKind::Step);
  EXPECT_EQ(got.seq, 7);
  EXPECT_EQ(got.tokens, out.tokens);
  EXPECT_EQ(got.text, out.text);
}

TEST(Feed, EveryKindAndEmptyPayloadsRoundTrip) {
  Pair p;
  for (FeedKind k :
       {FeedKind::Tokenizer, FeedKind::Val, FeedKind::Step, FeedKind::Error, FeedKind::End, FeedKind::Hello}) {
    FeedFrame f;
    f.kind = k;
    f.seq = -3;
    if (k == FeedKind::Error) f.text = "no parquet shards in /x on node 0";
    const std::string bytes = encode_feed_frame(f);
    ASSERT_EQ(::write(p.a.get(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    FeedFrame g;
    ASSERT_TRUE(read_feed_frame(p.b.get(), &g, in(5000), "rank 0"));
    EXPECT_EQ(g.kind, k);
    EXPECT_EQ(g.seq, -3);
    EXPECT_EQ(g.text, f.text);
    EXPECT_TRUE(g.tokens.empty());
  }
}

TEST(Feed, ADamagedByteIsNamedByTheCrcCheck) {
  std::string bytes = encode_feed_frame(step_frame(3, 2, 9));
  for (size_t at : {size_t{8}, kFeedHeaderBytes + 5, bytes.size() - 1}) {  // seq, a token, the state text
    Pair p;
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    ASSERT_EQ(::write(p.a.get(), bad.data(), bad.size()), static_cast<ssize_t>(bad.size()));
    FeedFrame g;
    const std::string e = error_of([&] { read_feed_frame(p.b.get(), &g, in(5000), "rank 0 (host a)"); });
    EXPECT_NE(e.find("failed its CRC-32 check"), std::string::npos) << at << ": " << e;
    EXPECT_NE(e.find("rank 0 (host a)"), std::string::npos) << e;
  }
}

TEST(Feed, ACutFrameAStrangerAndACleanCloseAreToldApart) {
  {
    Pair p;  // closed between frames: false, no error
    p.a.reset();
    FeedFrame g;
    EXPECT_FALSE(read_feed_frame(p.b.get(), &g, in(5000), "rank 0"));
  }
  {
    Pair p;  // cut inside the payload
    const std::string bytes = encode_feed_frame(step_frame(1, 4, 9));
    ASSERT_EQ(::write(p.a.get(), bytes.data(), bytes.size() - 10), static_cast<ssize_t>(bytes.size() - 10));
    p.a.reset();
    FeedFrame g;
    const std::string e = error_of([&] { read_feed_frame(p.b.get(), &g, in(5000), "rank 0 (host a)"); });
    EXPECT_NE(e.find("rank 0 (host a) in the middle of a"), std::string::npos) << e;
  }
  {
    Pair p;  // another protocol on the port
    const std::string junk = "GET / HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n";
    ASSERT_EQ(::write(p.a.get(), junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    FeedFrame g;
    const std::string e = error_of([&] { read_feed_frame(p.b.get(), &g, in(5000), "rank 0"); });
    EXPECT_NE(e.find("not a data feed frame"), std::string::npos) << e;
  }
  {
    Pair p;  // nothing arrives: the deadline, naming the peer
    FeedFrame g;
    const std::string e = error_of([&] { read_feed_frame(p.b.get(), &g, in(200), "rank 0 (host a)"); });
    EXPECT_NE(e.find("timed out"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 0 (host a)"), std::string::npos) << e;
  }
}

TEST(Feed, WritingToAClosedPeerIsAnErrorNamingIt) {
  Pair p;
  p.b.reset();
  const std::string e =
      error_of([&] { write_feed_frame(p.a.get(), step_frame(1, 64, 65), in(5000), "rank 1 (host b)"); });
  EXPECT_NE(e.find("rank 1 (host b)"), std::string::npos) << e;
}

TEST(FeedQueue, TheProducerWaitsWhileTheQueueIsFull) {
  FeedQueue q(2);
  std::atomic<int> pushed{0};
  std::thread prod([&] {
    for (int i = 0; i < 5; ++i) {
      FeedFrame f;
      f.kind = FeedKind::Step;
      f.seq = i;
      ASSERT_TRUE(q.push(std::move(f)));
      ++pushed;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(pushed.load(), 2);  // bounded: the third push waits
  EXPECT_EQ(q.size(), 2u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q.pop(in(5000), "rank 1", "step rows").seq, i);  // in order
  prod.join();
}

TEST(FeedQueue, FramesBeforeACloseAreDeliveredThenItsReason) {
  FeedQueue q(4);
  FeedFrame f;
  f.kind = FeedKind::Step;
  f.seq = 9;
  ASSERT_TRUE(q.push(f));
  q.close("rank 0 (host a) closed the data connection");
  EXPECT_FALSE(q.push(f));
  EXPECT_EQ(q.pop(in(1000), "rank 1", "rows").seq, 9);
  const std::string e = error_of([&] { q.pop(in(1000), "rank 1", "rows"); });
  EXPECT_EQ(e, "rank 0 (host a) closed the data connection");
}

TEST(FeedQueue, AConsumerDeadlineNamesTheWait) {
  FeedQueue q(1);
  const auto t0 = Clock::now();
  const std::string e = error_of([&] { q.pop(in(300), "rank 1 (host b)", "step 12's rows from rank 0 (host a)"); });
  EXPECT_GE(Clock::now() - t0, Ms(290));
  EXPECT_NE(e.find("rank 1 (host b): waited"), std::string::npos) << e;
  EXPECT_NE(e.find("for step 12's rows from rank 0 (host a)"), std::string::npos) << e;
}

TEST(FeedQueue, ACloseWakesAWaitingProducer) {
  FeedQueue q(1);
  ASSERT_TRUE(q.push(FeedFrame{}));
  std::atomic<int> result{-1};
  std::thread prod([&] { result = q.push(FeedFrame{}) ? 1 : 0; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(result.load(), -1);
  q.close("stopped");
  prod.join();
  EXPECT_EQ(result.load(), 0);
}
