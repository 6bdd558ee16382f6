#pragma once
// Our own single-precision GEMM, written for the lm_head's (tokens, vocab) products, whose
// operands stream through memory and where oneDNN's sgemm runs below its in-cache speed.
// Status: NOT used by training. bench/bench_lm_head prints it next to oneDNN on the training
// shapes; on the development VM (Xeon, AVX-512 and the AVX2 build) it runs at 0.8-1.05x oneDNN's
// speed (in cache 0.85-0.95x), so oneDNN stays. What it lacks: software prefetch of the next
// panels (its first pass over a B block waits on memory) and a transposing pack faster than
// gathers.
//
// Math: C(M,N) = alpha * op(A) * op(B) + beta * C, row-major, op as in gemm.h's sgemm.
// Method (the loop structure of Goto & van de Geijn, "Anatomy of high-performance matrix
// multiplication", ACM TOMS 2008, and of BLIS): K is cut into blocks of 256. Per block, op(B)'s
// column panels of NR are packed k-major (NR floats per k) where op(B) = B^T or a panel is
// partial; op(B) = B's full panels are read in place. Every (row block, column block) of C is a
// task. op(A) = A^T's rows are packed into k-major micro-panels of MR; op(A) = A's full
// micro-panels are read in place (MR rows at stride lda). Each B micro-panel meets all of the
// task's A micro-panels in an MR x NR register-blocked micro-kernel (AVX-512: 6 x 64, AVX2 + FMA:
// 6 x 16); partial tiles go through a small local tile. Tasks are taken dynamically (OpenMP
// dynamic schedule), so a thread slowed by another process takes fewer of them.
//
// Threads: the current OpenMP thread count (core/threads.h). Scratch: thread-local, grows only.
// Aliasing: C must not overlap A or B. Without AVX2 + FMA at compile time it calls sgemm.
// Errors: throws nanochat::Error on negative sizes or leading dimensions too small.
#include <cstdint>

#include "nanochat/core/arena.h"

namespace nanochat {

/// op(B) of a (K, N) product packed once for several products with the same B (the lm_head's
/// weight, met by every chunk of tokens): k blocks of 256, each holding column panels of
/// packed_gemm_nr() columns, zero-padded to n_padded columns.
struct PackedB {
  AlignedBuffer buf;
  int64_t K = 0, N = 0, n_padded = 0;
};

/// C(M,N) = alpha * op(A) * op(B) + beta * C, all row-major; arguments as gemm.h's sgemm.
void packed_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// Packs op(B) (B is (K, N) with ldb >= N, or (N, K) with ldb >= K when trans_b) into out
/// (its buffer grows when needed). Throws nanochat::Error on bad sizes.
void pack_b(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb, PackedB& out);

/// C(M,N) = alpha * op(A) * P[:, col0, col0 + N) + beta * C, with P = op(B) packed by pack_b.
/// col0 must be a multiple of packed_gemm_nr() and col0 + N <= B.N; throws nanochat::Error if not.
void packed_sgemm_packed_b(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                           const PackedB& B, int64_t col0, float beta, float* C, int64_t ldc);

/// Columns per packed panel (the micro-kernel's NR; 1 without our kernels).
int64_t packed_gemm_nr();

/// The micro-kernel tile this build uses ("6x64 avx512", "6x16 avx2" or "none: oneDNN").
const char* packed_gemm_kernel();

}  // namespace nanochat
