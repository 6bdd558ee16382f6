#pragma once
// Internal open-addressing hash tables of the tokenizer (no per-entry heap nodes, linear probing,
// power-of-two capacity, load factor <= 1/2). Not part of the public API.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace nanochat::tok_detail {

/// 64-bit finaliser (splitmix64): a bijection with good avalanche.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/// Fast non-cryptographic hash of a byte string (8 bytes per step); deterministic across machines
/// of the same endianness. Used only for in-memory tables, never stored.
inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(n) * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
  }
  return mix64(h);
}

inline size_t capacity_for(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n + 2) cap <<= 1;
  return cap;
}

/// Map from a 64-bit key (a token pair packed as a << 32 | b) to an int32 value. Key and value
/// share one 16-byte slot, so a lookup touches one cache line. The key ~0 is reserved as "empty".
class PairMap {
 public:
  static constexpr uint64_t kEmpty = ~0ull;
  explicit PairMap(size_t expected = 0) { reset(expected); }
  void reset(size_t expected) {
    slots_.assign(capacity_for(expected), Slot{});
    mask_ = slots_.size() - 1;
    size_ = 0;
  }
  /// Value for key, or -1 if absent.
  int32_t find(uint64_t key) const {
    size_t i = mix64(key) & mask_;
    for (;;) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.val;
      if (s.key == kEmpty) return -1;
      i = (i + 1) & mask_;
    }
  }
  /// Slot index of key, inserting it with value `init` when absent; *inserted tells which.
  size_t find_or_insert(uint64_t key, int32_t init, bool* inserted) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = mix64(key) & mask_;
    for (;;) {
      Slot& s = slots_[i];
      if (s.key == key) {
        *inserted = false;
        return i;
      }
      if (s.key == kEmpty) {
        s.key = key;
        s.val = init;
        ++size_;
        *inserted = true;
        return i;
      }
      i = (i + 1) & mask_;
    }
  }
  int32_t& value_at(size_t slot) { return slots_[slot].val; }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    int32_t val = 0;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& o : old) {
      if (o.key == kEmpty) continue;
      size_t i = mix64(o.key) & mask_;
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = o;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

/// Counts occurrences of byte strings; keys are copied into an internal arena.
class StringCounter {
 public:
  StringCounter() { rehash(1 << 16); }
  void add(std::string_view s, int64_t count) {
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.size() * 2);
    const uint64_t h = hash_bytes(s.data(), s.size());
    size_t i = h & mask_;
    for (;;) {
      Slot& sl = slots_[i];
      if (sl.count == 0) {
        sl.hash = h;
        sl.off = arena_.size();
        sl.len = static_cast<uint32_t>(s.size());
        sl.count = count;
        arena_.append(s);
        ++size_;
        return;
      }
      if (sl.hash == h && sl.len == s.size() && std::memcmp(arena_.data() + sl.off, s.data(), s.size()) == 0) {
        sl.count += count;
        return;
      }
      i = (i + 1) & mask_;
    }
  }
  /// Calls f(string_view key, int64 count) for every entry (in table order).
  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& sl : slots_)
      if (sl.count != 0) f(std::string_view(arena_.data() + sl.off, sl.len), sl.count);
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint64_t off = 0;
    int64_t count = 0;  // 0 = empty
    uint32_t len = 0;
  };
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    for (const Slot& sl : old) {
      if (sl.count == 0) continue;
      size_t i = sl.hash & mask_;
      while (slots_[i].count != 0) i = (i + 1) & mask_;
      slots_[i] = sl;
    }
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace nanochat::tok_detail
