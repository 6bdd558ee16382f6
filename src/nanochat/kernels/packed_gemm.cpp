#include "nanochat/kernels/packed_gemm.h"

#include <algorithm>
#include <cstring>

#include <omp.h>

#include "nanochat/core/arena.h"
#include "nanochat/core/error.h"
#include "nanochat/kernels/gemm.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_ps(), which trips
// -W(maybe-)uninitialized false positives once inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace nanochat {

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))

namespace {

#if defined(__AVX512F__)
constexpr int kMr = 6, kNr = 64;  // 24 accumulators + 4 B vectors + 1 broadcast of 32 registers
#else
constexpr int kMr = 6, kNr = 16;  // 12 accumulators + 2 B vectors + 1 broadcast of 16 registers
#endif
constexpr int64_t kKc = 256;         // k per packed block: an A micro-panel and a B micro-panel fit L1/L2
constexpr int64_t kMcMax = 8 * kMr;  // rows of A one task packs (stays in L2)
constexpr int64_t kNcMax = 512;      // columns of C one task covers (its packed B, kKc x 512, stays in L2)

// A growing 64-byte aligned scratch (the packed panels' vector loads are aligned).
struct Scratch {
  AlignedBuffer buf;
  float* get(int64_t floats) {
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    if (buf.bytes() < bytes) buf = AlignedBuffer(bytes);
    return buf.f32();
  }
};

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vload(const float* p) { return _mm512_load_ps(p); }
inline Vec vloadu(const float* p) { return _mm512_loadu_ps(p); }
inline void vstoreu(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vbroadcast(const float* p) { return _mm512_set1_ps(*p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
#else
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) { return _mm256_load_ps(p); }
inline Vec vloadu(const float* p) { return _mm256_loadu_ps(p); }
inline void vstoreu(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vbroadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
#endif
constexpr int kNv = kNr / kLanes;  // vectors per row of the tile

// One k of the tile: MR broadcasts of A times NV vectors of Bp. A's element (i, k) is at
// A[i * ars] (kDirect: MR rows of the caller's matrix, ars = its leading dimension) or at A[i]
// (a packed micro-panel); the caller advances A by 1 or MR per k. Bp holds NR floats of one k,
// aligned (packed) or not (kDirectB: a row of the caller's matrix); the caller advances it.
template <bool kDirect, bool kDirectB>
inline void tile_step(Vec (&c)[kMr][kNv], const float* __restrict A, int64_t ars, const float* __restrict Bp) {
  Vec b[kNv];
#pragma GCC unroll 8
  for (int v = 0; v < kNv; ++v) b[v] = kDirectB ? vloadu(Bp + v * kLanes) : vload(Bp + v * kLanes);
#pragma GCC unroll 16
  for (int i = 0; i < kMr; ++i) {
    const Vec a = vbroadcast(kDirect ? A + i * ars : A + i);
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) c[i][v] = vfma(a, b[v], c[i][v]);
  }
}

// The MR x NR tile C (+)= alpha * A * B over kc, A and B as in tile_step: B's k-th row at
// Bp + k * brs (brs = NR packed, the leading dimension direct).
// kAcc adds to C, otherwise C is overwritten. Kept out of line: inlined into the OpenMP body, GCC
// runs out of registers for the 24 accumulators and spills them.
template <bool kAcc, bool kDirect, bool kDirectB>
__attribute__((noinline)) void micro_kernel(int64_t kc, const float* __restrict A, int64_t ars,
                                            const float* __restrict Bp, int64_t brs, float alpha, float* __restrict C,
                                            int64_t ldc) {
  constexpr int64_t a_step = kDirect ? 1 : kMr;
  if (!kDirectB) brs = kNr;
  Vec c[kMr][kNv];
#pragma GCC unroll 16
  for (int i = 0; i < kMr; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) c[i][v] = vzero();
  for (int64_t k = 0; k < kc; ++k) {
    tile_step<kDirect, kDirectB>(c, A, ars, Bp);
    A += a_step;
    Bp += brs;
  }
  const Vec va = vbroadcast(&alpha);
#pragma GCC unroll 16
  for (int i = 0; i < kMr; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) {
      float* p = C + i * ldc + v * kLanes;
      const Vec r = alpha == 1.f ? c[i][v] : vmul(va, c[i][v]);
      vstoreu(p, kAcc ? vadd(r, vloadu(p)) : r);
    }
}

// Gathers with 32-bit indices reach up to 31 rows of ld floats.
bool gather_ok(int64_t ld) { return ld <= (int64_t{1} << 31) / (4 * 32); }

// d[0, n) = src[i * ld] for i < count, zeros past count (n is MR or NR: 6, 16 or 64).
inline void gather_column(const float* src, int64_t ld, int64_t count, float* d, int n) {
  int i = 0;
#if defined(__AVX512F__)
  const __m512i step = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(static_cast<int32_t>(ld)));
  for (; i < n; i += 16) {
    const int64_t left = std::clamp<int64_t>(count - i, 0, 16);
    const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    const int64_t lanes = std::min(16, n - i);
    const __mmask16 st = lanes >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << lanes) - 1);
    const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, step, src + i * ld, 4);
    _mm512_mask_storeu_ps(d + i, st, v);
  }
#else
  const __m256i step =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int32_t>(ld)));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (; i < n; i += 8) {
    const int32_t left = static_cast<int32_t>(std::clamp<int64_t>(count - i, 0, 8));
    const int32_t lanes = std::min(8, n - i);
    const __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane));
    const __m256 v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src + i * ld, step, m, 4);
    _mm256_maskstore_ps(d + i, _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), lane), v);
  }
#endif
  for (; i < n; ++i) d[i] = i < count ? src[i * ld] : 0.f;
}

// dst[k * width + r] = src[r * ld + k] for r < count and k < kc, zeros for r in [count, width):
// `count` rows of kc floats made into a k-major micro-panel, one gather of the rows per k.
void pack_transposed(const float* src, int64_t ld, int64_t count, int64_t kc, int width, float* dst) {
  if (gather_ok(ld)) {
    for (int64_t k = 0; k < kc; ++k) gather_column(src + k, ld, count, dst + k * width, width);
    return;
  }
  for (int64_t r = 0; r < count; ++r)
    for (int64_t k = 0; k < kc; ++k) dst[k * width + r] = src[r * ld + k];
  for (int64_t r = count; r < width; ++r)
    for (int64_t k = 0; k < kc; ++k) dst[k * width + r] = 0.f;
}

// Packs rows [r0, r0 + rows) (rows <= MR) and k [p0, p0 + kc) of op(A) into one k-major
// micro-panel of MR floats per k; rows past `rows` are zero.
void pack_a_panel(bool trans_a, const float* A, int64_t lda, int64_t r0, int64_t rows, int64_t p0, int64_t kc,
                  float* dst) {
  if (trans_a) {  // op(A)[i][k] = A[k][i]: MR contiguous floats per k
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A + (p0 + k) * lda + r0;
      float* d = dst + k * kMr;
#if defined(__AVX512F__)
      static_assert(kMr <= 16);
      const __mmask16 m = static_cast<__mmask16>((1u << rows) - 1), all = static_cast<__mmask16>((1u << kMr) - 1);
      _mm512_mask_storeu_ps(d, all, _mm512_maskz_loadu_ps(m, src));
#else
      static_assert(kMr <= 8);
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(rows)), lane);
      _mm256_maskstore_ps(d, _mm256_cmpgt_epi32(_mm256_set1_epi32(kMr), lane), _mm256_maskload_ps(src, m));
#endif
    }
    return;
  }
  pack_transposed(A + r0 * lda + p0, lda, rows, kc, kMr, dst);  // op(A)[i][k] = A[i][k]
}

// Packs columns [c0, c0 + cols) (cols <= NR) and k [p0, p0 + kc) of op(B) into one k-major
// micro-panel of NR floats per k; columns past `cols` are zero.
void pack_b_panel(bool trans_b, const float* B, int64_t ldb, int64_t c0, int64_t cols, int64_t p0, int64_t kc,
                  float* dst) {
  if (!trans_b) {  // op(B)[k][j] = B[k][j]: NR contiguous floats per k
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + (p0 + k) * ldb + c0;
      float* d = dst + k * kNr;
      if (cols == kNr) {
        std::memcpy(d, src, sizeof(float) * kNr);
      } else {
        std::memcpy(d, src, sizeof(float) * static_cast<size_t>(cols));
        std::fill(d + cols, d + kNr, 0.f);
      }
    }
    return;
  }
  pack_transposed(B + c0 * ldb + p0, ldb, cols, kc, kNr, dst);  // op(B)[k][j] = B[j][k]
}

// C(M,N) *= beta (beta = 0 writes zeros, so NaNs in C do not survive, as in BLAS).
void scale_c(float* C, int64_t M, int64_t N, int64_t ldc, float beta) {
#pragma omp parallel for schedule(static) if (M * N > 65536)
  for (int64_t i = 0; i < M; ++i) {
    float* row = C + i * ldc;
    if (beta == 0.f)
      std::fill(row, row + N, 0.f);
    else
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
  }
}

// micro_kernel with its template arguments chosen at run time.
using Kernel = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float, float*, int64_t);
template <int kWhich>
constexpr Kernel kernel_of = &micro_kernel<(kWhich & 4) != 0, (kWhich & 2) != 0, (kWhich & 1) != 0>;
constexpr Kernel kKernels[8] = {kernel_of<0>, kernel_of<1>, kernel_of<2>, kernel_of<3>,
                                kernel_of<4>, kernel_of<5>, kernel_of<6>, kernel_of<7>};

void run_kernel(bool acc, bool direct_a, bool direct_b, int64_t kc, const float* A, int64_t ars, const float* B,
                int64_t brs, float alpha, float* C, int64_t ldc) {
  kKernels[(acc ? 4 : 0) | (direct_a ? 2 : 0) | (direct_b ? 1 : 0)](kc, A, ars, B, brs, alpha, C, ldc);
}

// How the C matrix is cut into tasks: row blocks of `panels` A micro-panels and column blocks of
// nc columns (a multiple of NR), at least ~4 tasks per thread where the shape allows.
struct TaskGrid {
  int64_t panels, mt, nc, nt;
};
TaskGrid plan_tasks(int64_t M, int64_t N, int threads) {
  const int64_t want = 4 * static_cast<int64_t>(threads);
  const int64_t a_panels = (M + kMr - 1) / kMr;
  TaskGrid g{};
  g.nc = std::min((N + kNr - 1) / kNr * kNr, kNcMax);
  g.nt = (N + g.nc - 1) / g.nc;
  const int64_t row_blocks = std::max<int64_t>(1, (want + g.nt - 1) / g.nt);
  g.panels = std::clamp<int64_t>((a_panels + row_blocks - 1) / row_blocks, 1, kMcMax / kMr);
  g.mt = (a_panels + g.panels - 1) / g.panels;
  if (g.mt * g.nt < want && g.nc > kNr) {  // few rows: cut the columns finer
    const int64_t col_blocks = (want + g.mt - 1) / g.mt;
    g.nc = std::max<int64_t>(kNr, ((N + col_blocks - 1) / col_blocks + kNr - 1) / kNr * kNr);
    g.nt = (N + g.nc - 1) / g.nc;
  }
  return g;
}

}  // namespace

const char* packed_gemm_kernel() {
#if defined(__AVX512F__)
  return "6x64 avx512";
#else
  return "6x16 avx2";
#endif
}

namespace {

// Where op(B) comes from: the caller's matrix (packed here per k block where it must be), or a
// PackedB made by pack_b whose panels start at column col0.
struct BSource {
  const float* B = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  const PackedB* packed = nullptr;
  int64_t col0 = 0;
};

void gemm(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const BSource& src,
          float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const bool no_product = K == 0 || alpha == 0.f;
  if (beta != 1.f && (beta != 0.f || no_product)) scale_c(C, M, N, ldc, beta);
  if (no_product) return;
  const bool small = M * N * K < (int64_t{1} << 18);
  const int threads = small ? 1 : omp_get_max_threads();
  const TaskGrid g = plan_tasks(M, N, threads);
  const int64_t b_panels = (N + kNr - 1) / kNr;
  const bool trans_b = src.trans_b;
  thread_local Scratch b_scratch;
  float* const Bp = src.packed ? nullptr : b_scratch.get(b_panels * kNr * kKc);
  const int64_t tasks = g.mt * g.nt;

#pragma omp parallel num_threads(threads)
  {
    thread_local Scratch a_scratch;
    float* const Ap = a_scratch.get((kMcMax + kMr) * kKc);  // a row block's packed panels, then one edge panel
    float* const edge = Ap + kMcMax * kKc;
    alignas(64) float tile[kMr * kNr];
    for (int64_t p0 = 0; p0 < K; p0 += kKc) {
      const int64_t kc = std::min(kKc, K - p0);
      const bool acc = p0 > 0 || beta != 0.f;
      // this k block's B panels: packed by pack_b, or packed now where op(B) = B^T or a last
      // panel is partial (op(B) = B's full panels are read where they are)
      const float* const Bk = src.packed ? src.packed->buf.f32() + p0 * src.packed->n_padded + src.col0 * kc : Bp;
      if (!src.packed) {
#pragma omp for schedule(dynamic, 4)
        for (int64_t q = trans_b ? 0 : N / kNr; q < b_panels; ++q)
          pack_b_panel(trans_b, src.B, src.ldb, q * kNr, std::min<int64_t>(kNr, N - q * kNr), p0, kc,
                       Bp + q * kNr * kc);
      }
      int64_t packed_rows = -1;  // the row block whose A panels Ap holds for this p0 (op(A) = A^T only)
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t ib = t % g.mt, jb = t / g.mt;
        const int64_t r_begin = ib * g.panels * kMr, r_end = std::min(M, r_begin + g.panels * kMr);
        const int64_t c_begin = jb * g.nc, c_end = std::min(N, c_begin + g.nc);
        if (trans_a && packed_rows != ib) {
          for (int64_t r0 = r_begin, p = 0; r0 < r_end; r0 += kMr, ++p)
            pack_a_panel(true, A, lda, r0, std::min<int64_t>(kMr, r_end - r0), p0, kc, Ap + p * kMr * kc);
          packed_rows = ib;
        }
        // each B micro-panel, read from memory once, meets all of the task's A micro-panels
        if (!trans_a)  // op(A) = A: rows past the last full micro-panel are packed (zero-padded)
          for (int64_t r0 = r_begin + (r_end - r_begin) / kMr * kMr; r0 < r_end; r0 += kMr)
            pack_a_panel(false, A, lda, r0, r_end - r0, p0, kc, edge);
        for (int64_t c0 = c_begin; c0 < c_end; c0 += kNr) {
          const int64_t cols = std::min<int64_t>(kNr, c_end - c0);
          const bool direct_b = !src.packed && !trans_b && cols == kNr;
          const float* Bq = direct_b ? src.B + p0 * src.ldb + c0 : Bk + (c0 / kNr) * kNr * kc;
          const int64_t brs = direct_b ? src.ldb : kNr;
          for (int64_t r0 = r_begin, p = 0; r0 < r_end; r0 += kMr, ++p) {
            const int64_t rows = std::min<int64_t>(kMr, r_end - r0);
            const bool direct = !trans_a && rows == kMr;  // op(A) = A: its rows are read where they are
            const float* Ai = trans_a ? Ap + p * kMr * kc : direct ? A + r0 * lda + p0 : edge;
            float* Ct = C + r0 * ldc + c0;
            const bool full = rows == kMr && cols == kNr;
            float* out = full ? Ct : tile;
            const int64_t ldo = full ? ldc : kNr;
            const bool add = full && acc;
            run_kernel(add, direct, direct_b, kc, Ai, lda, Bq, brs, alpha, out, ldo);
            if (full) continue;
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t j = 0; j < cols; ++j) Ct[i * ldc + j] = (acc ? Ct[i * ldc + j] : 0.f) + tile[i * kNr + j];
          }
        }
      }
    }
  }
}

void check_sizes(bool trans_a, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldc) {
  if (M < 0 || N < 0 || K < 0) fail("internal: packed_sgemm with negative sizes M=", M, " N=", N, " K=", K);
  if (lda < std::max<int64_t>(1, trans_a ? M : K) || ldc < std::max<int64_t>(1, N))
    fail("internal: packed_sgemm leading dimensions too small: lda=", lda, " ldc=", ldc, " for M=", M, " N=", N,
         " K=", K, trans_a ? " (A transposed)" : "");
}

}  // namespace

void packed_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_sizes(trans_a, M, N, K, lda, ldc);
  if (ldb < std::max<int64_t>(1, trans_b ? K : N))
    fail("internal: packed_sgemm leading dimension ldb=", ldb, " too small for K=", K, " N=", N,
         trans_b ? " (B transposed)" : "");
  gemm(trans_a, M, N, K, alpha, A, lda, BSource{B, ldb, trans_b, nullptr, 0}, beta, C, ldc);
}

int64_t packed_gemm_nr() { return kNr; }

void pack_b(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb, PackedB& out) {
  if (K < 0 || N < 0 || ldb < std::max<int64_t>(1, trans_b ? K : N))
    fail("internal: pack_b with K=", K, " N=", N, " ldb=", ldb);
  out.K = K;
  out.N = N;
  out.n_padded = (N + kNr - 1) / kNr * kNr;
  const size_t bytes = static_cast<size_t>(K * out.n_padded) * sizeof(float);
  if (out.buf.bytes() < bytes) out.buf = AlignedBuffer(bytes);
  const int64_t panels = out.n_padded / kNr;
  for (int64_t p0 = 0; p0 < K; p0 += kKc) {
    const int64_t kc = std::min(kKc, K - p0);
    float* block = out.buf.f32() + p0 * out.n_padded;
#pragma omp parallel for schedule(dynamic, 8) if (panels * kc > 65536)
    for (int64_t q = 0; q < panels; ++q)
      pack_b_panel(trans_b, B, ldb, q * kNr, std::min<int64_t>(kNr, N - q * kNr), p0, kc, block + q * kNr * kc);
  }
}

void packed_sgemm_packed_b(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                           const PackedB& B, int64_t col0, float beta, float* C, int64_t ldc) {
  check_sizes(trans_a, M, N, K, lda, ldc);
  if (K != B.K || col0 < 0 || col0 % kNr != 0 || col0 + N > B.N)
    fail("internal: packed_sgemm_packed_b: columns [", col0, ", ", col0 + N, ") and K=", K,
         " do not fit the packed B (K=", B.K, ", N=", B.N, ", panels of ", kNr, " columns)");
  gemm(trans_a, M, N, K, alpha, A, lda, BSource{nullptr, 0, false, &B, col0}, beta, C, ldc);
}

#else  // neither AVX-512 nor AVX2 + FMA at compile time: oneDNN's sgemm

const char* packed_gemm_kernel() { return "none: oneDNN"; }

void packed_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int64_t packed_gemm_nr() { return 1; }

// Without our kernels "packing" keeps op(B) as a row-major (K, N) copy for sgemm.
void pack_b(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb, PackedB& out) {
  out.K = K;
  out.N = N;
  out.n_padded = N;
  const size_t bytes = static_cast<size_t>(K * N) * sizeof(float);
  if (out.buf.bytes() < bytes) out.buf = AlignedBuffer(bytes);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) out.buf.f32()[k * N + j] = trans_b ? B[j * ldb + k] : B[k * ldb + j];
}

void packed_sgemm_packed_b(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                           const PackedB& B, int64_t col0, float beta, float* C, int64_t ldc) {
  sgemm(trans_a, false, M, N, K, alpha, A, lda, B.buf.f32() + col0, B.N, beta, C, ldc);
}

#endif

}  // namespace nanochat
