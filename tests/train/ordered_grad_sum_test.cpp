// OrderedGradSum: the micro-batch contributions of W ranks x A micro-batches are added in the
// global order g = micro * W + rank, bit for bit what one rank adding all W * A contributions
// in order gets; after the optimizer's SUM reduction every rank holds that value.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "nanochat/train/ordered_grad_sum.h"
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

// Runs W ranks x A micro-batches; returns every rank's two spans after finish() and the
// all-reduce the optimizer would do.
std::vector<std::vector<float>> run(int W, int A) {
  ThreadHub hub(W);
  std::vector<std::vector<float>> out(W);
  std::vector<std::thread> th;
  for (int r = 0; r < W; ++r)
    th.emplace_back([&, r] {
      ThreadCommunicator comm(hub, r);
      std::vector<float> g1(3, 0.f), g2(2, 0.f);  // two small "gradient tensors"
      OrderedGradSum sum({{g1.data(), g1.size()}, {g2.data(), g2.size()}}, A, comm);
      for (int micro = 0; micro < A; ++micro) {
        const int g = micro * W + r;  // the micro-batch this rank runs (--loader-global-stream)
        for (size_t i = 0; i < 3; ++i) g1[i] += contrib(g, i);
        for (size_t i = 0; i < 2; ++i) g2[i] += contrib(g, 3 + i);
        sum.after_micro_batch(micro);
        for (float v : g1) EXPECT_EQ(v, 0.f);  // spans are zeroed for the next micro-batch
      }
      sum.finish();
      std::vector<float> all = g1;
      all.insert(all.end(), g2.begin(), g2.end());
      comm.all_reduce_sum(all.data(), all.size())->wait();  // what the optimizer does next
      out[r] = all;
    });
  for (auto& t : th) t.join();
  return out;
}

}  // namespace

TEST(OrderedGradSum, EveryWorldSizeGetsTheSingleRankSumBitForBit) {
  const int total = 6;  // global micro-batches
  std::vector<float> want(5);
  for (size_t i = 0; i < 5; ++i) {
    float acc = 0.f;
    for (int g = 0; g < total; ++g) acc += contrib(g, i);
    want[i] = acc;
  }
  // the test data is order-sensitive: summing rank-major instead gives another result
  float rank_major = 0.f;
  for (int r = 0; r < 3; ++r)
    for (int micro = 0; micro < 2; ++micro) rank_major += contrib(micro * 3 + r, 0);
  ASSERT_NE(rank_major, want[0]);
  for (int W : {1, 2, 3}) {
    const auto got = run(W, total / W);
    for (int r = 0; r < W; ++r)
      for (size_t i = 0; i < 5; ++i) EXPECT_EQ(got[r][i], want[i]) << "W=" << W << " rank " << r << " i " << i;
  }
}

TEST(OrderedGradSum, RejectsBadArguments) {
  LocalCommunicator c;
  EXPECT_THROW(OrderedGradSum({}, 0, c), Error);
  float g = 0;
  OrderedGradSum s({{&g, 1}}, 2, c);
  EXPECT_THROW(s.after_micro_batch(2), Error);
}
