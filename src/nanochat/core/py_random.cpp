#include "nanochat/core/py_random.h"

#include <cmath>
#include <unordered_set>

#include "nanochat/core/error.h"

namespace nanochat {

namespace {
constexpr int kN = 624, kM = 397;
}

PyRandom::PyRandom(uint64_t seed) {
  // init_genrand(19650218)
  mt_[0] = 19650218u;
  for (int i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  // init_by_array(key): the seed's 32-bit words, least significant first (at least one word)
  std::vector<uint32_t> key;
  for (uint64_t s = seed; s != 0; s >>= 32) key.push_back(static_cast<uint32_t>(s & 0xffffffffu));
  if (key.empty()) key.push_back(0);
  const int len = static_cast<int>(key.size());
  int i = 1, j = 0;
  for (int k = kN > len ? kN : len; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[static_cast<size_t>(j)] +
             static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= len) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;
  index_ = kN;
}

uint32_t PyRandom::next_u32() {
  static const uint32_t mag01[2] = {0u, 0x9908b0dfu};
  if (index_ >= kN) {
    int kk = 0;
    for (; kk < kN - kM; ++kk) {
      const uint32_t y = (mt_[kk] & 0x80000000u) | (mt_[kk + 1] & 0x7fffffffu);
      mt_[kk] = mt_[kk + kM] ^ (y >> 1) ^ mag01[y & 1u];
    }
    for (; kk < kN - 1; ++kk) {
      const uint32_t y = (mt_[kk] & 0x80000000u) | (mt_[kk + 1] & 0x7fffffffu);
      mt_[kk] = mt_[kk + (kM - kN)] ^ (y >> 1) ^ mag01[y & 1u];
    }
    const uint32_t y = (mt_[kN - 1] & 0x80000000u) | (mt_[0] & 0x7fffffffu);
    mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ mag01[y & 1u];
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint32_t PyRandom::getrandbits(int k) {
  if (k < 1 || k > 32) fail("PyRandom::getrandbits: k = ", k, " is outside 1..32");
  return next_u32() >> (32 - k);
}

uint64_t PyRandom::randbelow(uint64_t n) {
  if (n == 0 || n > 0xffffffffu) fail("PyRandom::randbelow: n = ", n, " is outside 1..2^32-1");
  int k = 0;
  for (uint64_t v = n; v != 0; v >>= 1) ++k;  // n.bit_length()
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<size_t> PyRandom::sample_indices(size_t n, size_t k) {
  if (k > n) fail("PyRandom::sample: sample of ", k, " is larger than the population of ", n);
  std::vector<size_t> result(k);
  size_t setsize = 21;
  if (k > 5)
    setsize += static_cast<size_t>(std::pow(4.0, std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<size_t> pool(n);
    for (size_t i = 0; i < n; ++i) pool[i] = i;
    for (size_t i = 0; i < k; ++i) {
      const size_t j = static_cast<size_t>(randbelow(n - i));
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<size_t> selected;
    for (size_t i = 0; i < k; ++i) {
      size_t j = static_cast<size_t>(randbelow(n));
      while (selected.count(j)) j = static_cast<size_t>(randbelow(n));
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

}  // namespace nanochat
