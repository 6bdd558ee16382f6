#pragma once
// bfloat16 matrix products with fp32 accumulation, the numerics of PyTorch's autocast(bfloat16)
// for Linear layers (nanochat trains its GPU runs that way: docs/architecture.md 3.2): operands
// are rounded to bf16 (8 mantissa bits, round to nearest even), every product of two bf16 values
// is exact in fp32 and the sums run in fp32; the result is written in fp32.
//
// Runs through oneDNN's matmul primitive (bf16 src and weights, f32 dst), which uses the CPU's
// native bf16 dot-product instructions (AVX512_BF16 vdpbf16ps, or AMX tiles). Only CPUs with
// those instructions are supported: require_native_bf16 refuses the others with a message (an
// emulated bf16 product would be slower than fp32). Primitives are created once per shape and
// thread and cached (thread-local); threads: the current OpenMP thread count (core/threads.h).
//
// Aliasing: C must not overlap A or B. Errors: throws nanochat::Error when oneDNN rejects a shape.
#include <cstdint>
#include <string>

namespace nanochat {

/// A bfloat16 value: the upper 16 bits of an IEEE fp32.
using bf16 = uint16_t;

/// fp32 -> bf16, round to nearest even; NaN stays NaN (quiet). Scalar reference of to_bf16.
inline bf16 float_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16>(u >> 16);
}

/// bf16 -> fp32 (exact).
inline float bf16_to_float(bf16 h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

/// True when this CPU executes bf16 dot products natively (cpuid AVX512_BF16 or AMX-BF16, with the
/// operating system saving the AVX-512 registers) and this build lets oneDNN use them (not the
/// AVX2 build, NANOCHAT_ISA=avx2).
bool native_bf16_available();

/// A sentence saying why native bf16 is or is not available here (cpuid flags and oneDNN's ISA).
std::string native_bf16_status();

/// Throws nanochat::Error naming `flag` (e.g. "--dtype bfloat16") and what the CPU lacks when
/// native_bf16_available() is false.
void require_native_bf16(const std::string& flag);

/// dst[i] = float_to_bf16(src[i]) for n values (vectorised with the CPU's own conversion
/// instruction where it has AVX512_BF16; both round to nearest even). OpenMP over blocks when n is
/// large. src and dst must not overlap.
void to_bf16(const float* src, bf16* dst, int64_t n);

/// The (rows, cols) block of a row-major matrix with leading dimension ld_src, converted into a
/// dense (rows, cols) bf16 matrix.
void to_bf16_rows(const float* src, int64_t ld_src, bf16* dst, int64_t rows, int64_t cols);

/// C(M,N) = op(A) * op(B) + beta * C with bf16 A and B, fp32 accumulation and fp32 C, all row-major;
/// op and leading dimensions as gemm.h's sgemm (op(A) is (M,K): A is (M,K) with lda >= K, or
/// (K,M) with lda >= M when trans_a; op(B) is (K,N): B is (K,N) with ldb >= N, or (N,K) with
/// ldb >= K when trans_b). Counted in sgemm_flops_issued. Requires native_bf16_available()
/// (throws nanochat::Error otherwise).
void bgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
           int64_t ldb, float beta, float* C, int64_t ldc);

/// The oneDNN implementation that runs the bf16 product of the given shape (e.g.
/// "brg:avx512_core_bf16"), for benchmarks and the start-up line.
std::string bgemm_impl(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);

/// y(M,N) (+)= x(M,K) * W(N,K)^T: Linear forward in bf16 (gemm.h's linear_fwd).
inline void linear_fwd_bf16(const bf16* x, const bf16* W, float* y, int64_t M, int64_t K, int64_t N, float beta = 0.f) {
  bgemm(false, true, M, N, K, x, K, W, K, beta, y, N);
}
/// dx(M,K) (+)= dy(M,N) * W(N,K): Linear input gradient in bf16.
inline void linear_bwd_x_bf16(const bf16* dy, const bf16* W, float* dx, int64_t M, int64_t K, int64_t N,
                              float beta = 0.f) {
  bgemm(false, false, M, K, N, dy, N, W, K, beta, dx, K);
}
/// dW(N,K) += dy(M,N)^T * x(M,K): Linear weight gradient in bf16, accumulated into the fp32 dW.
inline void linear_bwd_w_bf16(const bf16* dy, const bf16* x, float* dW, int64_t M, int64_t K, int64_t N) {
  bgemm(true, false, N, K, M, dy, N, x, K, 1.f, dW, K);
}

}  // namespace nanochat
