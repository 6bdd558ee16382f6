#pragma once
// Python's `random.Random(seed)` for the draws nanochat's evaluations make with it
// (nanochat core_eval.py evaluate_example: rng.sample; scripts/base_eval.py: rng.shuffle), bit for
// bit: the Mersenne Twister MT19937 of CPython's _randommodule.c (init_genrand(19650218), then
// init_by_array with the seed's 32-bit words, least significant first) and the algorithms of
// CPython 3.11's Lib/random.py: getrandbits(k) for k <= 32 is the next word >> (32 - k);
// _randbelow(n) draws getrandbits(n.bit_length()) until the value is < n; shuffle swaps x[i] with
// x[randbelow(i + 1)] for i = len-1 .. 1; sample(population, k) takes the pool path when
// len <= 21 + (k > 5 ? 4^ceil(log_4(3k)) : 0) and the set-rejection path otherwise.
// Tests compare against Python's own output (tests/core/py_random_test.cpp).
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace nanochat {

class PyRandom {
 public:
  /// random.Random(seed) for a non-negative integer seed.
  explicit PyRandom(uint64_t seed);

  /// The next 32-bit output of MT19937 (genrand_uint32).
  uint32_t next_u32();
  /// random.getrandbits(k) for 1 <= k <= 32.
  uint32_t getrandbits(int k);
  /// random._randbelow(n) for n >= 1: an integer in [0, n).
  uint64_t randbelow(uint64_t n);

  /// random.shuffle(x): permutes x in place exactly as Python does.
  template <class T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) {
      const size_t j = static_cast<size_t>(randbelow(i + 1));
      std::swap(x[i], x[j]);
    }
  }

  /// random.sample(population, k) as indices into population (the values Python returns are
  /// population[result[i]]). Throws nanochat::Error when k > n.
  std::vector<size_t> sample_indices(size_t n, size_t k);

 private:
  uint32_t mt_[624];
  int index_ = 624;
};

}  // namespace nanochat
