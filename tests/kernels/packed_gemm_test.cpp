// Tests for kernels/packed_gemm: our packed GEMM against a naive double-precision loop in every
// transpose case, on sizes that leave partial micro-panels and tiles, cross several k blocks and
// several tasks, with alpha and every kind of beta, at 1 and 2 threads; and equal to oneDNN's
// sgemm on the lm_head's shapes.
#include "nanochat/kernels/packed_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/rng.h"
#include "nanochat/core/threads.h"
#include "nanochat/kernels/gemm.h"

using namespace nanochat;

namespace {

struct Case {
  int64_t M, N, K;
};

// C = alpha op(A) op(B) + beta C0 in double; a leading dimension larger than the row shows the
// strides are honoured.
void check(const Case& c, bool ta, bool tb, float alpha, float beta, uint64_t seed) {
  Rng rng(seed);
  const int64_t lda = (ta ? c.M : c.K) + 3, ldb = (tb ? c.K : c.N) + 5, ldc = c.N + 2;
  std::vector<float> A((ta ? c.K : c.M) * lda), B((tb ? c.N : c.K) * ldb), C(c.M * ldc);
  for (auto& v : A) v = static_cast<float>(rng.uniform(-1, 1));
  for (auto& v : B) v = static_cast<float>(rng.uniform(-1, 1));
  for (auto& v : C) v = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(rng.uniform(-1, 1));
  std::vector<double> ref(c.M * c.N);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < c.K; ++k)
        s += static_cast<double>(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      ref[i * c.N + j] = alpha * s + (beta == 0.f ? 0.0 : static_cast<double>(beta) * C[i * ldc + j]);
    }
  const std::vector<float> before = C;
  packed_sgemm(ta, tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  const double tol = 2e-6 * std::sqrt(static_cast<double>(c.K)) * 4;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j)
      ASSERT_NEAR(C[i * ldc + j], ref[i * c.N + j], tol)
          << "M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << ta << " tb=" << tb << " beta=" << beta << " at ("
          << i << ", " << j << ")";
    for (int64_t j = c.N; j < ldc; ++j)  // the padding past each row is never written
      ASSERT_TRUE(std::isnan(before[i * ldc + j]) ? std::isnan(C[i * ldc + j]) : C[i * ldc + j] == before[i * ldc + j]);
  }
}

}  // namespace

// Partial panels in both directions (sizes not multiples of 6/64 or 6/16), K over two k blocks
// and a partial third, shapes with one row and one column, every transpose and beta.
TEST(PackedGemm, MatchesNaiveForAllTransposesAndEdges) {
  const std::vector<Case> cases = {{1, 1, 1},    {7, 5, 9},    {13, 33, 17}, {50, 70, 600},
                                   {1, 100, 40}, {100, 1, 40}, {37, 300, 64}};
  uint64_t seed = 1;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (float beta : {0.f, 1.f, 0.5f}) check(c, ta, tb, beta == 0.5f ? 1.5f : 1.f, beta, ++seed);
  }
  set_num_threads(1);
}

// K = 0 or alpha = 0 leaves beta * C (beta = 0 writes zeros over NaNs); empty shapes write nothing.
TEST(PackedGemm, DegenerateShapes) {
  std::vector<float> A(4, 1.f), B(4, 1.f), C(4, std::numeric_limits<float>::quiet_NaN());
  packed_sgemm(false, false, 2, 2, 0, 1.f, A.data(), 1, B.data(), 2, 0.f, C.data(), 2);
  for (float v : C) EXPECT_EQ(v, 0.f);
  std::fill(C.begin(), C.end(), 2.f);
  packed_sgemm(false, false, 2, 2, 2, 0.f, A.data(), 2, B.data(), 2, 0.5f, C.data(), 2);
  for (float v : C) EXPECT_EQ(v, 1.f);
  packed_sgemm(false, false, 0, 2, 2, 1.f, A.data(), 2, B.data(), 2, 0.f, C.data(), 2);
  for (float v : C) EXPECT_EQ(v, 1.f);
  EXPECT_THROW(packed_sgemm(false, false, 2, 2, 3, 1.f, A.data(), 2, B.data(), 2, 0.f, C.data(), 2), Error);
}

// The lm_head's three products (logits, dx, dW in its own layout) at a reduced vocabulary agree
// with oneDNN's sgemm to float rounding, at 2 threads (many tasks, several k blocks for dx).
TEST(PackedGemm, AgreesWithOneDnnOnTheLmHeadShapes) {
  set_num_threads(2);
  const int64_t N = 96, C = 64, V = 1000;
  Rng rng(7);
  std::vector<float> x(N * C), W(V * C), q(N * V);
  for (auto& v : x) v = static_cast<float>(rng.uniform(-1, 1));
  for (auto& v : W) v = static_cast<float>(rng.uniform(-1, 1));
  for (auto& v : q) v = static_cast<float>(rng.uniform(-1, 1));
  auto near = [](const std::vector<float>& a, const std::vector<float>& b, double tol) {
    for (size_t i = 0; i < a.size(); ++i)
      if (std::fabs(a[i] - b[i]) > tol) return false;
    return true;
  };
  std::vector<float> l1(N * V), l2(N * V);
  sgemm(false, true, N, V, C, 1.f, x.data(), C, W.data(), C, 0.f, l1.data(), V);
  packed_sgemm(false, true, N, V, C, 1.f, x.data(), C, W.data(), C, 0.f, l2.data(), V);
  EXPECT_TRUE(near(l1, l2, 1e-4));
  std::vector<float> d1(N * C), d2(N * C);
  sgemm(false, false, N, C, V, 1.f, q.data(), V, W.data(), C, 0.f, d1.data(), C);
  packed_sgemm(false, false, N, C, V, 1.f, q.data(), V, W.data(), C, 0.f, d2.data(), C);
  EXPECT_TRUE(near(d1, d2, 1e-3));
  std::vector<float> w1(V * C, 0.25f), w2(V * C, 0.25f);
  sgemm(true, false, V, C, N, 1.f, q.data(), V, x.data(), C, 1.f, w1.data(), C);
  packed_sgemm(true, false, V, C, N, 1.f, q.data(), V, x.data(), C, 1.f, w2.data(), C);
  EXPECT_TRUE(near(w1, w2, 1e-4));
  set_num_threads(1);
}

// op(B) packed once (both orientations, K over two blocks, a partial last panel) and used in
// column blocks starting at multiples of the panel width, as the lm_head's forward uses its
// weight: equal to the unpacked product; a misaligned column start is an error.
TEST(PackedGemm, PackedBInColumnBlocksEqualsTheWholeProduct) {
  set_num_threads(2);
  const int64_t M = 20, K = 300, N = 5 * packed_gemm_nr() + 7;
  Rng rng(11);
  std::vector<float> A(M * K), B(K * N), Bt(N * K);
  for (auto& v : A) v = static_cast<float>(rng.uniform(-1, 1));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) Bt[j * K + k] = B[k * N + j] = static_cast<float>(rng.uniform(-1, 1));
  std::vector<float> want(M * N);
  packed_sgemm(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, want.data(), N);
  for (bool trans_b : {false, true}) {
    PackedB P;
    pack_b(trans_b, K, N, trans_b ? Bt.data() : B.data(), trans_b ? K : N, P);
    std::vector<float> got(M * N, 1e30f);
    const int64_t block = 2 * packed_gemm_nr();
    for (int64_t j0 = 0; j0 < N; j0 += block)
      packed_sgemm_packed_b(false, M, std::min(block, N - j0), K, 1.f, A.data(), K, P, j0, 0.f, got.data() + j0, N);
    for (int64_t i = 0; i < M * N; ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4) << "trans_b=" << trans_b << " at " << i;
    }
    if (packed_gemm_nr() > 1) {
      EXPECT_THROW(packed_sgemm_packed_b(false, M, 4, K, 1.f, A.data(), K, P, 1, 0.f, got.data(), N), Error);
    }
  }
  set_num_threads(1);
}
