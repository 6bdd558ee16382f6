#pragma once
// Single-precision GEMM through oneDNN's dnnl_sgemm (row-major). Chosen by measurement:
// on the development machines dnnl_sgemm was the fastest library at 2 threads on every training
// shape and within 3% of the best at 1 thread.
// oneDNN picks its AVX-512 kernels by itself, independent of OPENBLAS_CORETYPE; an AVX2 build
// (CMake -DNANOCHAT_ISA=avx2) caps it at AVX2 before its first call (dnnl_set_max_cpu_isa), so
// it runs the kernels an AVX2 + FMA machine without AVX-512 runs. It runs on the OpenMP threads
// set by set_num_threads (core/threads.h).
#include <cstdint>

namespace nanochat {

/// The highest instruction set oneDNN's sgemm may use in this process ("avx2", "avx512_core",
/// "avx512_core_bf16", ...: dnnl_get_effective_cpu_isa, after the build's cap). Throws
/// nanochat::Error in an AVX2 build if oneDNN could not be capped (it was called before us).
const char* gemm_isa();

/// C(M,N) = alpha * op(A) * op(B) + beta * C, all row-major.
/// op(A) is (M,K): A is (M,K) with lda >= K, or (K,M) with lda >= M when trans_a.
/// op(B) is (K,N): B is (K,N) with ldb >= N, or (N,K) with ldb >= K when trans_b.
/// Throws nanochat::Error if oneDNN rejects the arguments.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// Multiply-add FLOPs (2*M*N*K per call) that sgemm has been asked to run in this process so
/// far, over all threads. For tests and benchmarks that check a closed-form FLOP count against
/// what the code actually runs; one relaxed atomic add per call.
int64_t sgemm_flops_issued();

/// y(M,N) = x(M,K) * W(N,K)^T (+ beta*y): PyTorch's Linear forward with weight (out, in).
inline void linear_fwd(const float* x, const float* W, float* y, int64_t M, int64_t K, int64_t N, float beta = 0.f) {
  sgemm(false, true, M, N, K, 1.f, x, K, W, K, beta, y, N);
}
/// dx(M,K) (+)= dy(M,N) * W(N,K): Linear input gradient. beta=1 accumulates.
inline void linear_bwd_x(const float* dy, const float* W, float* dx, int64_t M, int64_t K, int64_t N,
                         float beta = 0.f) {
  sgemm(false, false, M, K, N, 1.f, dy, N, W, K, beta, dx, K);
}
/// dW(N,K) (+)= dy(M,N)^T * x(M,K): Linear weight gradient. beta=1 accumulates.
inline void linear_bwd_w(const float* dy, const float* x, float* dW, int64_t M, int64_t K, int64_t N,
                         float beta = 1.f) {
  sgemm(true, false, N, K, M, 1.f, dy, N, x, K, beta, dW, K);
}

/// dst[r, c] += src[c, r] for a (rows, cols) dst and a (cols, rows) src, both row-major
/// (cache-blocked, OpenMP over row tiles).
void add_transposed(const float* src, float* dst, int64_t rows, int64_t cols);

/// dW(N,K) += dy(M,N)^T * x(M,K), like linear_bwd_w with beta = 1, but when N > K it computes
/// dW^T = x^T * dy into scratch (K*N floats) and adds it transposed: oneDNN's transposed-A kernel
/// is markedly slower when its output has more rows than columns (measured 80 vs 125 GFLOP/s
/// for (1024, 256) vs (256, 1024) at K = 4096 on the development VM). scratch may be null when
/// N <= K.
void linear_bwd_w_acc(const float* dy, const float* x, float* dW, int64_t M, int64_t K, int64_t N, float* scratch);

}  // namespace nanochat
