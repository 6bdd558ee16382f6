#pragma once
// numpy's default generator for the one draw nanochat's tasks make with it, bit for bit:
// np.random.default_rng(seed).permutation(n) (nanochat tasks/common.py HubDataset.shuffle, the
// order of every hub dataset it loads; the same as datasets.Dataset.shuffle(seed)).
//
// numpy 1.17+ (numpy/random/bit_generator.pyx SeedSequence, _pcg64.pyx PCG64,
// distributions.c random_interval, _generator.pyx Generator.shuffle):
//  - SeedSequence(seed): the seed's 32-bit words (least significant first) hashed into a pool of
//    4 words (mix_entropy), then generate_state(4, uint64) (8 hashed words read as 4 little-endian
//    uint64s s0..s3);
//  - PCG64 (128-bit LCG, XSL-RR output), seeded with state = s0:s1, increment = s2:s3 as
//    pcg_setseq_128_srandom_r does; next_uint32 returns the low half of a 64-bit output, then the
//    high half of the same output;
//  - permutation(n): arange(n), then for i = n-1 .. 1 swap x[i] with x[j], j = random_interval(i)
//    (masked rejection: 32-bit draws when i < 2^32).
// Tests compare against numpy's own output (tests/core/np_random_test.cpp).
#include <cstdint>
#include <vector>

namespace nanochat {

class NpRandom {
 public:
  /// np.random.default_rng(seed) for a non-negative integer seed.
  explicit NpRandom(uint64_t seed);
  /// Generator.bit_generator.random_raw(): the next 64-bit PCG64 output.
  uint64_t next_u64();
  /// PCG64's next_uint32 (buffered halves of a 64-bit output, low half first).
  uint32_t next_u32();
  /// numpy's random_interval(max): a uniform integer in [0, max].
  uint64_t interval(uint64_t max);
  /// Generator.permutation(n) for n >= 0.
  std::vector<int64_t> permutation(int64_t n);

 private:
  unsigned __int128 state_ = 0, inc_ = 0;
  bool has_u32_ = false;
  uint32_t u32_ = 0;
};

}  // namespace nanochat
