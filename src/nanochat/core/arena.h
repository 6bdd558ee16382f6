#pragma once
// Arena: one 64-byte-aligned allocation, pre-touched once, handed out by a bump pointer.
// First-touch page faults cost ~13 us per 4 KiB page on our VMs, so activations are carved from
// an arena sized once per (B, T) and never allocated inside a training step (docs/architecture.md 3.4).
#include <cstddef>
#include <cstdint>
#include <memory>

namespace nanochat {

/// Aligned, zero-filled, owning float/byte buffer (64-byte aligned). Pages are touched on creation.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  /// Allocates `bytes` bytes, zero-filled. Throws nanochat::Error when out of memory.
  explicit AlignedBuffer(size_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() { return ptr_; }
  const void* data() const { return ptr_; }
  float* f32() { return static_cast<float*>(ptr_); }
  const float* f32() const { return static_cast<const float*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Bump allocator over an AlignedBuffer. Two-phase use: first `reserve` sizes with a
/// measuring pass (capacity 0 => counts only), then `reset` and allocate for real.
class Arena {
 public:
  Arena() = default;
  /// Creates an arena of `bytes` capacity (rounded up to 64). Memory is zeroed and pre-touched.
  explicit Arena(size_t bytes) : buf_(round_up(bytes)) {}

  /// Returns `n` floats, 64-byte aligned. Throws nanochat::Error if the arena is exhausted.
  float* alloc_f32(size_t n) { return static_cast<float*>(alloc_bytes(n * sizeof(float))); }
  /// Returns `n` int32 values, 64-byte aligned.
  int32_t* alloc_i32(size_t n) { return static_cast<int32_t*>(alloc_bytes(n * sizeof(int32_t))); }
  /// Returns `bytes` bytes, 64-byte aligned.
  void* alloc_bytes(size_t bytes);
  /// Forgets every allocation (memory is kept and not cleared).
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t capacity() const { return buf_.bytes(); }
  static size_t round_up(size_t b) { return (b + 63) / 64 * 64; }

 private:
  AlignedBuffer buf_;
  size_t used_ = 0;
};

}  // namespace nanochat
