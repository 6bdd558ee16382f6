#include "nanochat/kernels/gemm.h"

#include <algorithm>

#include <oneapi/dnnl/dnnl.h>

#include "nanochat/core/error.h"

namespace nanochat {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success)
    fail("internal: dnnl_sgemm failed with status ", static_cast<int>(st), " for M=", M, " N=", N, " K=", K,
         " lda=", lda, " ldb=", ldb, " ldc=", ldc);
}

void add_transposed(const float* src, float* dst, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
#pragma omp parallel for schedule(guided) if (rows * cols > 65536)
  for (int64_t rt = 0; rt < row_tiles; ++rt) {
    const int64_t r0 = rt * kTile, r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) dst[r * cols + c] += src[c * rows + r];
    }
  }
}

void linear_bwd_w_acc(const float* dy, const float* x, float* dW, int64_t M, int64_t K, int64_t N, float* scratch) {
  if (N <= K || scratch == nullptr) {
    linear_bwd_w(dy, x, dW, M, K, N, 1.f);
    return;
  }
  sgemm(true, false, K, N, M, 1.f, x, K, dy, N, 0.f, scratch, N);  // (K, N) = x^T dy
  add_transposed(scratch, dW, N, K);
}

}  // namespace nanochat
