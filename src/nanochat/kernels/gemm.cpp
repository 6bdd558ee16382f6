#include "nanochat/kernels/gemm.h"

#include <omp.h>

#include <oneapi/dnnl/dnnl.h>

#include "nanochat/core/error.h"

namespace nanochat {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc);
  if (st != dnnl_success)
    fail("internal: dnnl_sgemm failed with status ", static_cast<int>(st), " for M=", M, " N=", N,
         " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
}

void set_num_threads(int n) { omp_set_num_threads(n < 1 ? 1 : n); }

int num_threads() { return omp_get_max_threads(); }

}  // namespace nanochat
