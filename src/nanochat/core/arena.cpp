#include "nanochat/core/arena.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "nanochat/core/error.h"

namespace nanochat {

AlignedBuffer::AlignedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  size_t rounded = (bytes + 63) / 64 * 64;
  ptr_ = std::aligned_alloc(64, rounded);
  if (!ptr_) fail("out of memory: could not allocate ", bytes, " bytes; use a smaller --device-batch-size or model");
  std::memset(ptr_, 0, rounded);  // touch every page once, now, not inside a step
}

AlignedBuffer::~AlignedBuffer() { std::free(ptr_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void* Arena::alloc_bytes(size_t bytes) {
  size_t need = round_up(bytes);
  if (used_ + need > buf_.bytes())
    fail("internal: activation arena exhausted (", used_, " + ", need, " > ", buf_.bytes(), " bytes)");
  void* p = static_cast<char*>(buf_.data()) + used_;
  used_ += need;
  return p;
}

}  // namespace nanochat
