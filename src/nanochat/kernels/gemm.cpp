#include "nanochat/kernels/gemm.h"

#include <algorithm>
#include <atomic>

#include <oneapi/dnnl/dnnl.h>

#include "nanochat/core/error.h"
#include "nanochat/kernels/gemm_internal.h"

namespace nanochat {

namespace {

// The ISA cap of an avx2 build (CMake NANOCHAT_ISA=avx2): oneDNN would otherwise pick its AVX-512
// kernels on a machine that has them, and the build would not run what an AVX2 machine runs.
// dnnl_set_max_cpu_isa only works before oneDNN first reads its ISA setting (it reads
// ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA then); it wins over those variables, so a user's
// environment cannot raise the cap. Every oneDNN call of the program goes through this file.
bool apply_isa_cap() {
#if defined(NANOCHAT_ISA_AVX2)
  const dnnl_status_t st = dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
  const unsigned effective = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  if ((effective & ~static_cast<unsigned>(dnnl_cpu_isa_avx2)) != 0)
    fail("this build targets AVX2 (NANOCHAT_ISA=avx2) but oneDNN could not be capped at AVX2 (status ",
         static_cast<int>(st), ", effective ISA code ", effective,
         "): something called oneDNN before nanochat did; rebuild with -DNANOCHAT_ISA=native to use its AVX-512 "
         "kernels");
#endif
  return true;
}

std::atomic<int64_t> g_flops_issued{0};

void ensure_isa_cap() {
  static const bool capped = apply_isa_cap();  // once, thread-safe
  (void)capped;
}

}  // namespace

void detail::gemm_enter(int64_t flops) {
  ensure_isa_cap();
  g_flops_issued.fetch_add(flops, std::memory_order_relaxed);
}

const char* gemm_isa() {
  ensure_isa_cap();
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  ensure_isa_cap();
  g_flops_issued.fetch_add(2 * M * N * K, std::memory_order_relaxed);
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success)
    fail("internal: dnnl_sgemm failed with status ", static_cast<int>(st), " for M=", M, " N=", N, " K=", K,
         " lda=", lda, " ldb=", ldb, " ldc=", ldc);
}

int64_t sgemm_flops_issued() { return g_flops_issued.load(std::memory_order_relaxed); }

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
