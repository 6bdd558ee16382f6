#include "nanochat/feed/feed.h"

#include <bit>
#include <cstring>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/zip_store.h"

namespace nanochat::feed {

using namespace cluster;  // the sockets and deadlines (cluster/net.h) the feed runs on

static_assert(std::endian::native == std::endian::little, "the data feed's frames are little-endian");

namespace {

constexpr uint32_t kMagic = 0x4446434e;  // "NCFD" read as a little-endian u32

struct Header {
  uint32_t magic, kind;
  int64_t seq;
  uint64_t n_tokens;
  uint32_t n_text, crc;
};
static_assert(sizeof(Header) == kFeedHeaderBytes);

uint32_t frame_crc(const Header& h, const void* tokens, size_t token_bytes, const std::string& text) {
  uint32_t c = zip_crc32(0, &h, offsetof(Header, crc));
  c = zip_crc32(c, tokens, token_bytes);
  return zip_crc32(c, text.data(), text.size());
}

Header make_header(const FeedFrame& f) {
  if (f.tokens.size() > FeedFrame::kMaxTokens || f.text.size() > FeedFrame::kMaxText)
    fail("a data feed frame of ", f.tokens.size(), " tokens and ", f.text.size(), " bytes of text exceeds the limits (",
         FeedFrame::kMaxTokens, " tokens, ", FeedFrame::kMaxText, " bytes)");
  Header h{kMagic, static_cast<uint32_t>(f.kind), f.seq, f.tokens.size(), static_cast<uint32_t>(f.text.size()), 0};
  h.crc = frame_crc(h, f.tokens.data(), f.tokens.size() * sizeof(int32_t), f.text);
  return h;
}

}  // namespace

std::string encode_feed_frame(const FeedFrame& f) {
  const Header h = make_header(f);
  std::string out(kFeedHeaderBytes + f.tokens.size() * sizeof(int32_t) + f.text.size(), '\0');
  std::memcpy(out.data(), &h, sizeof h);
  if (!f.tokens.empty()) std::memcpy(out.data() + sizeof h, f.tokens.data(), f.tokens.size() * sizeof(int32_t));
  if (!f.text.empty())
    std::memcpy(out.data() + sizeof h + f.tokens.size() * sizeof(int32_t), f.text.data(), f.text.size());
  return out;
}

void write_feed_frame(int fd, const FeedFrame& f, Clock::time_point deadline, const std::string& what) {
  const Header h = make_header(f);
  send_all(fd, &h, sizeof h, deadline, what);
  if (!f.tokens.empty()) send_all(fd, f.tokens.data(), f.tokens.size() * sizeof(int32_t), deadline, what);
  if (!f.text.empty()) send_all(fd, f.text.data(), f.text.size(), deadline, what);
}

bool read_feed_frame(int fd, FeedFrame* f, Clock::time_point deadline, const std::string& what) {
  Header h{};
  if (!recv_all(fd, &h, sizeof h, deadline, what)) return false;
  if (h.magic != kMagic)
    fail("the data connection from ", what, " sent something that is not a data feed frame (magic ", h.magic,
         "); is another program on that port, or a build of another version?");
  if (h.kind < static_cast<uint32_t>(FeedKind::Tokenizer) || h.kind > static_cast<uint32_t>(FeedKind::Hello))
    fail("the data connection from ", what, " sent a frame of unknown kind ", h.kind);
  if (h.n_tokens > FeedFrame::kMaxTokens || h.n_text > FeedFrame::kMaxText)
    fail("the data connection from ", what, " announced a frame of ", h.n_tokens, " tokens and ", h.n_text,
         " bytes of text, over the limits: the frame is damaged");
  f->kind = static_cast<FeedKind>(h.kind);
  f->seq = h.seq;
  f->tokens.resize(h.n_tokens);
  f->text.resize(h.n_text);
  const auto payload = [&](void* p, size_t n) {
    if (n > 0 && !recv_all(fd, p, n, deadline, what))
      fail("lost the connection to ", what, " in the middle of a data feed frame");
  };
  payload(f->tokens.data(), f->tokens.size() * sizeof(int32_t));
  payload(f->text.data(), f->text.size());
  if (frame_crc(h, f->tokens.data(), f->tokens.size() * sizeof(int32_t), f->text) != h.crc)
    fail("a data feed frame from ", what, " (kind ", h.kind, ", seq ", h.seq,
         ") failed its CRC-32 check: the data was damaged on the way");
  return true;
}

FeedQueue::FeedQueue(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

bool FeedQueue::push(FeedFrame f) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return closed_ || q_.size() < capacity_; });
  if (closed_) return false;
  q_.push_back(std::move(f));
  cv_.notify_all();
  return true;
}

FeedFrame FeedQueue::pop(Clock::time_point deadline, const std::string& who, const std::string& what) {
  const auto start = Clock::now();
  FeedFrame f;
  if (!try_pop(deadline, &f))
    fail(who, ": waited ", fixed(std::chrono::duration<double>(Clock::now() - start).count(), 0), " s for ", what,
         " and gave up");
  return f;
}

bool FeedQueue::try_pop(Clock::time_point until, FeedFrame* out) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_until(lk, until, [&] { return closed_ || !q_.empty(); })) return false;
  if (q_.empty()) {
    delivered_ = true;
    fail(reason_);
  }
  *out = std::move(q_.front());
  q_.pop_front();
  cv_.notify_all();
  return true;
}

void FeedQueue::close(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return;
  closed_ = true;
  reason_ = reason;
  cv_.notify_all();
}

bool FeedQueue::reason_delivered() const {
  std::lock_guard<std::mutex> lk(mu_);
  return delivered_;
}

size_t FeedQueue::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return q_.size();
}

}  // namespace nanochat::feed
