// numpy's SeedSequence + PCG64 + Generator.permutation (np_random.h).
#include "nanochat/core/np_random.h"

#include <array>
#include <cstddef>
#include <utility>

namespace nanochat {

namespace {

constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixL = 0xca01f9dd, kMixR = 0x4973f715;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> 16);
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixL * x - kMixR * y;
  return r ^ (r >> 16);
}

// SeedSequence(seed).generate_state(4, np.uint64).
std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  std::array<uint32_t, 4> pool{};
  uint32_t hc = kInitA;
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0, hc);
  for (size_t s = 0; s < pool.size(); ++s)
    for (size_t d = 0; d < pool.size(); ++d)
      if (s != d) pool[d] = mix(pool[d], hashmix(pool[s], hc));
  for (size_t s = pool.size(); s < entropy.size(); ++s)
    for (size_t d = 0; d < pool.size(); ++d) pool[d] = mix(pool[d], hashmix(entropy[s], hc));
  uint32_t hb = kInitB;
  std::array<uint32_t, 8> words{};
  for (size_t i = 0; i < words.size(); ++i) {
    uint32_t v = pool[i % pool.size()] ^ hb;
    hb *= kMultB;
    v *= hb;
    words[i] = v ^ (v >> 16);
  }
  std::array<uint64_t, 4> out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint64_t(words[2 * i]) | uint64_t(words[2 * i + 1]) << 32;
  return out;
}

constexpr unsigned __int128 kPcgMult =
    (static_cast<unsigned __int128>(0x2360ED051FC65DA4ull) << 64) | 0x4385DF649FCCF645ull;

}  // namespace

NpRandom::NpRandom(uint64_t seed) {
  const auto s = seed_sequence_state(seed);
  const unsigned __int128 init_state = static_cast<unsigned __int128>(s[0]) << 64 | s[1];
  const unsigned __int128 init_seq = static_cast<unsigned __int128>(s[2]) << 64 | s[3];
  state_ = 0;
  inc_ = (init_seq << 1) | 1;
  state_ = state_ * kPcgMult + inc_;
  state_ += init_state;
  state_ = state_ * kPcgMult + inc_;
}

uint64_t NpRandom::next_u64() {
  state_ = state_ * kPcgMult + inc_;
  const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NpRandom::next_u32() {
  if (has_u32_) {
    has_u32_ = false;
    return u32_;
  }
  const uint64_t v = next_u64();
  has_u32_ = true;
  u32_ = static_cast<uint32_t>(v >> 32);
  return static_cast<uint32_t>(v);
}

uint64_t NpRandom::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s <<= 1) mask |= mask >> s;
  uint64_t v;
  if (max <= 0xffffffffull) {
    while ((v = (next_u32() & mask)) > max) {
    }
  } else {
    while ((v = (next_u64() & mask)) > max) {
    }
  }
  return v;
}

std::vector<int64_t> NpRandom::permutation(int64_t n) {
  std::vector<int64_t> x(static_cast<size_t>(n < 0 ? 0 : n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int64_t>(i);
  for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[static_cast<size_t>(interval(i))]);
  return x;
}

}  // namespace nanochat
