#pragma once
// The data feed's wire format and its bounded queue (docs/architecture.md 7.11): in a job whose data is
// served by node 0, rank 0 reads, tokenizes and packs the one data stream and sends each step's rows
// (and, at start-up, the tokenizer and the validation batches) to the other ranks over a TCP
// connection of its own, never the Gloo connections that carry gradients. A worker's receiver
// thread puts the frames into a FeedQueue of a few steps, so a step's rows are there before the
// trainer asks for them.
//
// Frame on the wire (little-endian; x86-64 and aarch64 Linux are little-endian):
//   u32 magic "NCFD" | u32 kind | i64 seq | u64 n_tokens | u32 n_text | u32 crc32
//   then n_tokens int32 token ids and n_text bytes of text.
// crc32 (zlib's) covers the header's first 28 bytes and the payload, so a damaged frame is named
// instead of training on garbage. A step frame carries the step's rows, (rows, T+1) int32, and the
// loader state after them as JSON text; an error frame carries rank 0's message as text.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "nanochat/cluster/net.h"

namespace nanochat::feed {

using cluster::Clock;

/// What a frame holds.
enum class FeedKind : uint32_t {
  Tokenizer = 1,  ///< text: the tokenizer's files (see the trainer); seq: the tokenizer hash's low 63 bits
  Val = 2,        ///< tokens: one validation batch (B, T+1); seq: its index in the val stream
  Step = 3,       ///< tokens: a step's rows (R, T+1); text: loader state after them (JSON); seq: step
  Error = 4,      ///< text: rank 0's error message; the job stops
  End = 5,        ///< no more frames follow (the sender is done)
  Hello = 6,      ///< a worker's first frame: seq = its rank, text = its host name
};

/// One frame. Limits: at most kMaxTokens token ids and kMaxText bytes of text.
struct FeedFrame {
  FeedKind kind = FeedKind::End;
  int64_t seq = 0;
  std::vector<int32_t> tokens;
  std::string text;
  static constexpr uint64_t kMaxTokens = uint64_t{1} << 30;
  static constexpr uint32_t kMaxText = uint32_t{1} << 30;
};

/// Bytes of the frame header.
constexpr size_t kFeedHeaderBytes = 32;

/// The frame as bytes on the wire. Throws nanochat::Error when it exceeds the limits.
std::string encode_feed_frame(const FeedFrame& f);

/// Writes one frame to `fd` before `deadline`. Throws nanochat::Error naming `what` (e.g. "the data
/// connection to rank 1 (host b)") on a failure, a closed peer or the deadline.
void write_feed_frame(int fd, const FeedFrame& f, Clock::time_point deadline, const std::string& what);

/// Reads one frame from `fd` before `deadline` into *f. Returns false when the peer closed the
/// connection cleanly between frames; throws nanochat::Error naming `what` on a timeout, a
/// connection cut inside a frame, a bad magic, an unknown kind, a size over the limits or a CRC
/// mismatch.
bool read_feed_frame(int fd, FeedFrame* f, Clock::time_point deadline, const std::string& what);

/// A bounded FIFO of frames between one producer thread (the receiver) and one consumer (the
/// trainer). Thread-safe.
class FeedQueue {
 public:
  /// capacity >= 1 frames.
  explicit FeedQueue(size_t capacity);
  /// Appends f, waiting while the queue is full. Returns false (dropping f) when the queue was
  /// closed. Blocks until there is room or close(): the consumer's own deadline bounds the job.
  bool push(FeedFrame f);
  /// Takes the oldest frame, waiting until `deadline`. Frames queued before close() are still
  /// delivered; after them pop throws nanochat::Error with close()'s reason. On the deadline it
  /// throws nanochat::Error "<who>: waited N s for <what>; ..." so the message names the wait.
  FeedFrame pop(Clock::time_point deadline, const std::string& who, const std::string& what);
  /// Like pop, but returns false at `until` instead of throwing (for waits that report progress).
  bool try_pop(Clock::time_point until, FeedFrame* out);
  /// No more frames: wakes both sides; `reason` is what pop throws once the queue is drained.
  void close(const std::string& reason);
  /// Whether pop or try_pop has thrown close()'s reason (the consumer has it in hand).
  bool reason_delivered() const;
  /// Frames queued now.
  size_t size() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<FeedFrame> q_;
  bool closed_ = false;
  bool delivered_ = false;  // close()'s reason was thrown to the consumer
  std::string reason_;
};

}  // namespace nanochat::feed
