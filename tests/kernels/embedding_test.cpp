// Tests for kernels/embedding: the forward gathers rows, the backward scatter-adds repeated tokens
// and does not depend on the thread count.
#include "nanochat/kernels/embedding.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <vector>

#include "nanochat/core/rng.h"
#include "support/fd_check.h"

using namespace nanochat;
using nanochat::testing::random_vec;
using Vec = std::vector<double>;

TEST(Embedding, ForwardGathersAndBackwardScatterAddsRepeatedTokens) {
  Rng rng(7);
  const int64_t rows = 6, C = 5, N = 7;
  const std::vector<int32_t> idx = {3, 1, 3, 0, 3, 5, 1};  // 3 three times, 1 twice, 2 and 4 never
  Vec table = random_vec(rng, rows * C), out(N * C);
  embedding_forward(idx.data(), table.data(), out.data(), N, C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(out[n * C + c], table[idx[n] * C + c]);
  Vec dout = random_vec(rng, N * C), dtable(rows * C, 0.5);
  embedding_backward(idx.data(), dout.data(), dtable.data(), N, C);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      double want = 0.5;
      for (int64_t n = 0; n < N; ++n)
        if (idx[n] == r) want += dout[n * C + c];
      EXPECT_NEAR(dtable[r * C + c], want, 1e-15) << "row " << r;
    }
}

TEST(Embedding, BackwardIsIndependentOfThreadCount) {
  Rng rng(8);
  const int64_t rows = 50, C = 300, N = 400;  // big enough for the parallel path
  std::vector<int32_t> idx(N);
  for (auto& i : idx) i = static_cast<int32_t>(rng.below(rows));
  std::vector<float> dout(N * C);
  for (auto& v : dout) v = static_cast<float>(rng.uniform(-1, 1));
  std::vector<float> d1(rows * C, 0.f), d2(rows * C, 0.f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  embedding_backward(idx.data(), dout.data(), d1.data(), N, C);
  omp_set_num_threads(3);
  embedding_backward(idx.data(), dout.data(), d2.data(), N, C);
  omp_set_num_threads(saved);
  for (size_t i = 0; i < d1.size(); ++i) ASSERT_EQ(d1[i], d2[i]);
}
