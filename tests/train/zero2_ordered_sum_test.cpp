// OrderedGradSum: the micro-batch contributions of a step, dealt to W ranks in contiguous ranges
// (any split, zero included), are added in the stream order, bit for bit what one rank adding all
// of them in order gets, and every rank holds that value after finish().
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "nanochat/train/zero2_ordered_sum.h"
#include "support/thread_communicator.h"

using namespace nanochat;
using nanochat::testing::ThreadCommunicator;
using nanochat::testing::ThreadHub;

namespace {

// Contribution of global micro-batch g to element i: magnitudes chosen so that float addition is
// far from associative (a different order gives a different result).
float contrib(int g, size_t i) {
  const float base[6] = {1.f, 1e8f, -1e8f, 1.f, 0.5f, 0.25f};
  return base[(g + i) % 6] * (1.f + 0.1f * static_cast<float>(i));
}

// Runs W = split.size() ranks, rank r running split[r] micro-batches (global micro-batches
// [start_r, start_r + split[r])); returns every rank's two spans after finish() (the step's sum on
// every rank: the optimizer sends nothing more for them).
std::vector<std::vector<float>> run(const std::vector<int>& split) {
  const int W = static_cast<int>(split.size());
  int total = 0;
  for (int m : split) total += m;
  ThreadHub hub(W);
  std::vector<std::vector<float>> out(W);
  std::vector<std::thread> th;
  for (int r = 0; r < W; ++r)
    th.emplace_back([&, r] {
      ThreadCommunicator comm(hub, r);
      std::vector<float> g1(3, 0.f), g2(2, 0.f);  // two small "gradient tensors"
      OrderedGradSum sum({{g1.data(), g1.size()}, {g2.data(), g2.size()}}, total, comm);
      int start = 0;
      for (int q = 0; q < r; ++q) start += split[q];
      for (int micro = 0; micro < split[r]; ++micro) {
        const int g = start + micro;  // the micro-batch of the step's stream this rank runs
        for (size_t i = 0; i < 3; ++i) g1[i] += contrib(g, i);
        for (size_t i = 0; i < 2; ++i) g2[i] += contrib(g, 3 + i);
        sum.after_micro_batch(micro);
        for (float v : g1) EXPECT_EQ(v, 0.f);  // spans are zeroed for the next micro-batch
      }
      sum.finish(split);
      std::vector<float> all = g1;
      all.insert(all.end(), g2.begin(), g2.end());
      out[r] = all;
    });
  for (auto& t : th) t.join();
  return out;
}

}  // namespace

TEST(OrderedGradSum, EveryWorldSizeAndSplitGetsTheSingleRankSumBitForBit) {
  const int total = 6;  // micro-batches of the step
  std::vector<float> want(5);
  for (size_t i = 0; i < 5; ++i) {
    float acc = 0.f;
    for (int g = 0; g < total; ++g) acc += contrib(g, i);
    want[i] = acc;
  }
  // the test data is order-sensitive: summing in another order gives another result
  float interleaved = 0.f;
  for (int r = 0; r < 3; ++r)
    for (int micro = 0; micro < 2; ++micro) interleaved += contrib(micro * 3 + r, 0);
  ASSERT_NE(interleaved, want[0]);
  const std::vector<std::vector<int>> splits = {{6}, {3, 3}, {2, 2, 2}, {5, 1}, {1, 5}, {0, 6}, {4, 0, 2}, {0, 0, 6}};
  for (const auto& split : splits) {
    const auto got = run(split);
    for (size_t r = 0; r < split.size(); ++r)
      for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(got[r][i], want[i]) << "split " << ::testing::PrintToString(split) << " rank " << r << " i " << i;
  }
}

TEST(OrderedGradSum, RejectsBadArguments) {
  LocalCommunicator c;
  EXPECT_THROW(OrderedGradSum({}, 0, c), Error);
  float g = 0;
  OrderedGradSum s({{&g, 1}}, 2, c);
  EXPECT_THROW(s.after_micro_batch(2), Error);
  EXPECT_THROW(s.finish({3}), Error);     // more micro-batches than the buffers hold
  EXPECT_THROW(s.finish({1, 1}), Error);  // counts for another world size
}
