// Causal / sliding-window GQA attention, forward and backward (see attention.h for the math).
#include "nanochat/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// GCC 12's AVX-512 headers pass an uninitialised pass-through operand to the unmasked forms of
// max/roundscale/scalef and trip -Wmaybe-uninitialized under -O3; the operand is never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "nanochat/core/arena.h"
#include "nanochat/core/error.h"

namespace nanochat {

namespace {

void check_shapes(int B, int T, int H, int Hkv, int D) {
  if (B <= 0 || T <= 0 || H <= 0 || Hkv <= 0 || D <= 0)
    fail("attention: sizes must be positive (B=", B, " T=", T, " H=", H, " Hkv=", Hkv, " D=", D, ")");
  if (H % Hkv != 0)
    fail("attention: the number of query heads H=", H, " must be a multiple of the number of kv heads Hkv=", Hkv);
}

// First key a query at absolute position p may see.
inline int64_t first_key(int64_t p, int window) { return window < 0 ? 0 : std::max<int64_t>(0, p - window); }
// The mean number of keys seen by queries at positions pos0 .. pos0 + Tq - 1.
inline int64_t mean_keys_per_query(int64_t pos0, int64_t Tq, int window) {
  int64_t pairs = 0;
  for (int64_t p = pos0; p < pos0 + Tq; ++p) pairs += p - first_key(p, window) + 1;
  return pairs / std::max<int64_t>(Tq, 1);
}

// Reference forward over a key/value buffer with row stride Tk (the cache length): queries
// t = 0..Tq-1 sit at absolute positions pos0 + t and see keys first_key(p) .. p.
template <typename Real>
void forward_ref_core(const Real* q, const Real* k, const Real* v, Real* out, Real* lse, int B, int Tq, int pos0,
                      int Tk, int H, int Hkv, int D, int window, Real scale) {
  const int group = H / Hkv;
  const int64_t n_rows = int64_t(B) * H * Tq;
#pragma omp parallel
  {
    std::vector<Real> s(size_t(pos0) + Tq);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n_rows; ++r) {
      const int t = int(r % Tq);
      const int h = int((r / Tq) % H);
      const int b = int(r / (int64_t(Tq) * H));
      const int hk = h / group;
      const int64_t p = int64_t(pos0) + t;
      const int64_t j0 = first_key(p, window);
      const Real* qi = q + ((int64_t(b) * Tq + t) * H + h) * D;
      Real m = -std::numeric_limits<Real>::infinity();
      for (int64_t j = j0; j <= p; ++j) {
        const Real* kj = k + ((int64_t(b) * Tk + j) * Hkv + hk) * D;
        Real acc = 0;
        for (int d = 0; d < D; ++d) acc += qi[d] * kj[d];
        s[j] = acc * scale;
        m = std::max(m, s[j]);
      }
      Real l = 0;
      for (int64_t j = j0; j <= p; ++j) {
        s[j] = std::exp(s[j] - m);
        l += s[j];
      }
      Real* oi = out + ((int64_t(b) * Tq + t) * H + h) * D;
      for (int d = 0; d < D; ++d) oi[d] = 0;
      for (int64_t j = j0; j <= p; ++j) {
        const Real* vj = v + ((int64_t(b) * Tk + j) * Hkv + hk) * D;
        const Real w = s[j] / l;
        for (int d = 0; d < D; ++d) oi[d] += w * vj[d];
      }
      if (lse) lse[(int64_t(b) * H + h) * Tq + t] = m + std::log(l);
    }
  }
}

}  // namespace

template <typename Real>
void attention_forward_reference(const Real* q, const Real* k, const Real* v, Real* out, Real* lse, int B, int T, int H,
                                 int Hkv, int D, int window, Real scale) {
  check_shapes(B, T, H, Hkv, D);
  forward_ref_core<Real>(q, k, v, out, lse, B, T, 0, T, H, Hkv, D, window, scale);
}

template <typename Real>
void attention_backward_reference(const Real* q, const Real* k, const Real* v, const Real* out, const Real* lse,
                                  const Real* dout, Real* dq, Real* dk, Real* dv, int B, int T, int H, int Hkv, int D,
                                  int window, Real scale) {
  check_shapes(B, T, H, Hkv, D);
  const int group = H / Hkv;
  auto row = [T, D](auto* base, int b, int t, int heads, int h) {
    return base + ((int64_t(b) * T + t) * heads + h) * D;
  };
  auto dot = [D](const Real* a, const Real* b) {
    Real acc = 0;
    for (int d = 0; d < D; ++d) acc += a[d] * b[d];
    return acc;
  };
  // dq: one task per query row.
  const int64_t n_q = int64_t(B) * H * T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n_q; ++r) {
    const int i = int(r % T);
    const int h = int((r / T) % H);
    const int b = int(r / (int64_t(T) * H));
    const int hk = h / group;
    const Real* qi = row(q, b, i, H, h);
    const Real* doi = row(dout, b, i, H, h);
    const Real delta = dot(doi, row(out, b, i, H, h));
    const Real li = lse[(int64_t(b) * H + h) * T + i];
    Real* dqi = row(dq, b, i, H, h);
    for (int d = 0; d < D; ++d) dqi[d] = 0;
    for (int64_t j = first_key(i, window); j <= i; ++j) {
      const Real* kj = row(k, b, int(j), Hkv, hk);
      const Real p = std::exp(scale * dot(qi, kj) - li);
      const Real ds = p * (dot(doi, row(v, b, int(j), Hkv, hk)) - delta);
      for (int d = 0; d < D; ++d) dqi[d] += scale * ds * kj[d];
    }
  }
  // dk, dv: one task per key row, summing over the query heads of its group.
  const int64_t n_k = int64_t(B) * Hkv * T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n_k; ++r) {
    const int j = int(r % T);
    const int hk = int((r / T) % Hkv);
    const int b = int(r / (int64_t(T) * Hkv));
    const Real* kj = row(k, b, j, Hkv, hk);
    const Real* vj = row(v, b, j, Hkv, hk);
    Real* dkj = row(dk, b, j, Hkv, hk);
    Real* dvj = row(dv, b, j, Hkv, hk);
    for (int d = 0; d < D; ++d) dkj[d] = dvj[d] = 0;
    const int64_t i_end = window < 0 ? int64_t(T) - 1 : std::min<int64_t>(T - 1, int64_t(j) + window);
    for (int h = hk * group; h < (hk + 1) * group; ++h)
      for (int64_t i = j; i <= i_end; ++i) {
        const Real* qi = row(q, b, int(i), H, h);
        const Real* doi = row(dout, b, int(i), H, h);
        const Real delta = dot(doi, row(out, b, int(i), H, h));
        const Real p = std::exp(scale * dot(qi, kj) - lse[(int64_t(b) * H + h) * T + i]);
        const Real ds = p * (dot(doi, vj) - delta);
        for (int d = 0; d < D; ++d) {
          dvj[d] += p * doi[d];
          dkj[d] += scale * ds * qi[d];
        }
      }
  }
}

template void attention_forward_reference<float>(const float*, const float*, const float*, float*, float*, int, int,
                                                 int, int, int, int, float);
template void attention_forward_reference<double>(const double*, const double*, const double*, double*, double*, int,
                                                  int, int, int, int, int, double);
template void attention_backward_reference<float>(const float*, const float*, const float*, const float*, const float*,
                                                  const float*, float*, float*, float*, int, int, int, int, int, int,
                                                  float);
template void attention_backward_reference<double>(const double*, const double*, const double*, const double*,
                                                   const double*, const double*, double*, double*, double*, int, int,
                                                   int, int, int, int, double);

// ------------------------------------------------------------------------------------------------
// Fast tiled kernels (FlashAttention-2 structure, Dao 2023, on CPU).
//
// Scores are mostly computed transposed: a tile S^T (BK keys x BQ queries) = K_tile . (c Q_tile)^T
// with the query tile packed as Qt (D x BQ), so each key row of the tile is a contiguous run of
// query lanes and the per-query softmax statistics (max, sum, lse, Delta) are plain vectors over
// the lanes. c = scale * log2(e), so exponentials are exp2. The dk/dv pass of the split backward
// uses the other orientation (key tile packed, S = Q K^T row by row) so that it packs once per
// task. Products with V, dO, Q and K read those tensors in place (rows H*D or Hkv*D floats
// apart) and accumulate straight into the output rows, so the only scratch is per thread: two
// packed D x 64 tiles, two 64 x 64 score tiles and a few vectors of 64. Key tiles wholly outside
// the causal/sliding window are never visited, and inside diagonal and window-edge tiles the
// AVX-512 kernels skip the 6-row x 16-lane blocks that the mask would zero anyway (Band).
namespace {

constexpr int BQ = 64;  // queries per tile (lanes of a transposed score row)
constexpr int BK = 64;  // keys per tile
// Up to this many queries per call the forward computes score rows one query at a time (the
// tiles would leave most of their 16 query lanes empty).
constexpr int kFewQueries = 4;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Per-thread scratch, grown on demand and never shrunk (no allocation once warmed up).
struct Scratch {
  AlignedBuffer buf;
  float* qt = nullptr;     // (D, BQ): packed c * Q^T of the current query tile
  float* dot = nullptr;    // (D, BQ): packed dO^T of the current query tile
  float* st = nullptr;     // (BK, BQ): scores^T, then P^T
  float* dpt = nullptr;    // (BK, BQ): dP^T, then dS^T
  float* m = nullptr;      // (BQ) running max (log2 units)
  float* l = nullptr;      // (BQ) running sum
  float* alpha = nullptr;  // (BQ) rescale factor of the current key tile
  float* lse2 = nullptr;   // (BQ) lse * log2(e) (+inf on padded lanes)
  float* delta = nullptr;  // (BQ) rowsum(dO * O)

  AlignedBuffer row_buf;   // (n) scores of one query row (few-query path)
  AlignedBuffer head_buf;  // one task's head-major rows (fused backward)

  float* row(int64_t n) {
    const size_t bytes = size_t(n) * sizeof(float);
    if (row_buf.bytes() < bytes) row_buf = AlignedBuffer(bytes);
    return row_buf.f32();
  }
  float* heads(int64_t n) {
    const size_t bytes = size_t(n) * sizeof(float);
    if (head_buf.bytes() < bytes) head_buf = AlignedBuffer(bytes);
    return head_buf.f32();
  }

  void ensure(int D) {
    const size_t floats = 2 * size_t(D) * BQ + 2 * size_t(BK) * BQ + 5 * size_t(BQ);
    if (buf.bytes() < floats * sizeof(float)) buf = AlignedBuffer(floats * sizeof(float));
    float* p = buf.f32();  // every piece is a multiple of 64 floats, so all stay 64-byte aligned
    qt = p, p += size_t(D) * BQ;
    dot = p, p += size_t(D) * BQ;
    st = p, p += size_t(BK) * BQ;
    dpt = p, p += size_t(BK) * BQ;
    m = p, p += BQ;
    l = p, p += BQ;
    alpha = p, p += BQ;
    lse2 = p, p += BQ;
    delta = p;
  }
};

Scratch& scratch(int D) {
  thread_local Scratch s;
  s.ensure(D);
  return s;
}

// Rows 0 .. n-1 of one head of X (row t at X + t * ld) copied to Y, D floats apart.
void copy_head(const float* X, int64_t ld, int64_t n, int D, float* Y) {
  for (int64_t t = 0; t < n; ++t) std::memcpy(Y + t * D, X + t * ld, size_t(D) * sizeof(float));
}

// Rows of a (B, ., Hh, D) array addressed by (batch, head, position): either the array itself
// (row t of a head Hh * D floats after row t - 1) or a head-major copy (D floats after).
struct HeadRows {
  const float* p;
  int64_t b_stride, h_stride, ld;  // ld: from one position to the next
  const float* at(int64_t b, int64_t h, int64_t t) const { return p + b * b_stride + h * h_stride + t * ld; }
};

// The rows of X (B, Tx, Hh, D) at positions 0 .. n-1, from which the tile products stream one
// operand (the rows a 16-lane column block walks down: V in the forward, Q, dO and K in the
// backward). In X's own layout a tile's rows lie Hh * D floats apart, a power of two in every
// nanochat model (2 KB at d8), which puts a column block's 64 rows on 2 of the L1 cache's 64 sets
// and sends its loads to L2 (the AVX2 product ran 71-78 GFLOP/s on such a tile against 89 on rows
// 528 floats apart). The paths with one task per (batch, kv head) copy their head's rows into
// scratch and read them from cache right away (copy_head). The paths with one task per tile (few
// such pairs per thread) use this whole-array copy, head-major (B, Hh, n, D), made before the
// tiles into one of the calling thread's buffers (`slot`; a copy lives until the next call that
// uses its slot). It goes out to memory and comes back, so it pays only when a row takes part in
// many tile products: measured on both ISAs (d4, d6, d8 at T 512 and d8 at T 2048,
// bench/README.md), it cost more than it saved at a mean of 256 keys per query or fewer (T 512:
// plain causal or a window of 128) and gained 8-16% at 448 or more (T 2048: causal or a window
// of 512).
constexpr int64_t kHeadMajorKeys = 384;

HeadRows head_rows(const float* X, int B, int64_t Tx, int Hh, int D, int64_t n, int64_t mean_keys, int slot) {
  if (mean_keys < kHeadMajorKeys) return {X, Tx * Hh * D, D, int64_t(Hh) * D};
  thread_local AlignedBuffer bufs[3];
  AlignedBuffer& buf = bufs[slot];
  const size_t floats = size_t(B) * size_t(Hh) * size_t(n) * size_t(D);
  if (buf.bytes() < floats * sizeof(float)) buf = AlignedBuffer(floats * sizeof(float));
  float* Y = buf.f32();
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < int64_t(B) * Hh; ++bh)
    copy_head(X + ((bh / Hh) * Tx * Hh + bh % Hh) * D, int64_t(Hh) * D, n, D, Y + bh * n * D);
  return {Y, int64_t(Hh) * n * D, n * D, D};
}

// Visibility band of a tile product: row m only needs inner indices (or score lanes) x with
// m + lo <= x <= m + hi; everything outside is masked (scores -inf, probabilities and dS zero),
// so the AVX-512 kernels skip it. Diagonal and window-edge tiles are about half outside.
struct Band {
  int64_t lo, hi;
};
constexpr int64_t kFar = int64_t(1) << 40;
// Rows = keys of a tile starting at absolute position j0, x = queries of a tile starting at p0:
// key j is visible from query p iff p - window <= j <= p.
Band band_keys_queries(int64_t j0, int64_t p0, int window) { return {j0 - p0, window < 0 ? kFar : j0 - p0 + window}; }
// Rows = queries (tile at p0), x = keys (tile at j0).
Band band_queries_keys(int64_t p0, int64_t j0, int window) { return {window < 0 ? -kFar : p0 - j0 - window, p0 - j0}; }

// Sets st[c][r] = -inf where key j0 + c is not visible from query position p0 + r:
// visible iff p - window <= j <= p (no lower bound when window < 0).
void apply_mask(float* st, int nk, int64_t j0, int64_t p0, int ncols, int window) {
  for (int c = 0; c < nk; ++c) {
    const int64_t j = j0 + c;
    float* row = st + size_t(c) * BQ;
    const int64_t lo = std::min<int64_t>(std::max<int64_t>(j - p0, 0), ncols);  // r < lo: p < j
    for (int r = 0; r < lo; ++r) row[r] = -kInf;
    if (window >= 0) {
      const int64_t hi = std::max<int64_t>(j + window - p0 + 1, 0);  // r >= hi: p - window > j
      for (int64_t r = hi; r < ncols; ++r) row[r] = -kInf;
    }
  }
}

// Row orientation (query rows r, key lanes c): sets s[r][c] = -inf where key j0 + c is not
// visible from query position p0 + r.
void apply_mask_rows(float* s, int nq, int64_t p0, int64_t j0, int ncols, int window) {
  for (int r = 0; r < nq; ++r) {
    const int64_t p = p0 + r;
    float* row = s + size_t(r) * BQ;
    const int64_t hi = std::max<int64_t>(p - j0 + 1, 0);  // c >= hi: key after the query
    for (int64_t c = hi; c < ncols; ++c) row[c] = -kInf;
    if (window >= 0) {
      const int64_t lo = std::min<int64_t>(std::max<int64_t>(p - window - j0, 0), ncols);
      for (int c = 0; c < lo; ++c) row[c] = -kInf;  // c < lo: key before the window
    }
  }
}

#if defined(__AVX512F__)

// Xt[d * BQ + r] = mul * X[r * ldx + d] for r < n; lanes n .. ncols-1 (ncols a multiple of 16)
// are zeroed. 16 x 16 blocks are transposed in registers (four butterfly stages of permutes).
void pack_transposed(const float* X, int64_t ldx, int n, int ncols, int D, float mul, float* Xt) {
  // Stage with block size b swaps the off-diagonal b x b blocks of each 2b x 2b block: row i
  // (i & b == 0) takes lanes j & b == 0 from itself and j & b != 0 from row i + b at j - b.
  alignas(64) static const int32_t kIdx[4][2][16] = {{{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                                                      {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
                                                     {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                                                      {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
                                                     {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                                                      {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
                                                     {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
                                                      {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}}};
  const __m512 vm = _mm512_set1_ps(mul);
  for (int r0 = 0; r0 < ncols; r0 += 16)
    for (int d0 = 0; d0 < D; d0 += 16) {
      const int dn = std::min(16, D - d0);
      const __mmask16 mask = static_cast<__mmask16>((1u << dn) - 1u);
      __m512 x[16];
      for (int i = 0; i < 16; ++i)
        x[i] =
            r0 + i < n ? _mm512_mul_ps(vm, _mm512_maskz_loadu_ps(mask, X + (r0 + i) * ldx + d0)) : _mm512_setzero_ps();
      for (int stage = 0, b = 8; stage < 4; ++stage, b >>= 1) {
        const __m512i lo = _mm512_load_si512(kIdx[stage][0]);
        const __m512i hi = _mm512_load_si512(kIdx[stage][1]);
        for (int i = 0; i < 16; ++i) {
          if (i & b) continue;
          const __m512 a = x[i], c = x[i + b];
          x[i] = _mm512_permutex2var_ps(a, lo, c);
          x[i + b] = _mm512_permutex2var_ps(a, hi, c);
        }
      }
      for (int i = 0; i < dn; ++i) _mm512_store_ps(Xt + size_t(d0 + i) * BQ + r0, x[i]);
    }
}

// 2^x for x <= 0: 2^n * poly(f), x = n + f, |f| <= 1/2, with a degree-6 polynomial fitted to
// 2^f on [-1/2, 1/2] for minimal relative error (1.9e-9, so the result is within about one float
// ulp). Inputs below -126 (masked scores are -inf) give exactly 0 without ever forming a
// subnormal: an underflowing scalef costs a microcode assist of ~100+ cycles per instruction
// unless FTZ is set, which made masked tiles several times slower. NaN propagates.
inline __m512 exp2_ps(__m512 x) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.f), _CMP_LT_OQ);
  x = _mm512_mask_blend_ps(tiny, x, _mm512_setzero_ps());
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.534581242594868e-04f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3399930903688073e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618489071726799e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550328642129898e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022646248340607f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931471824645996f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~tiny), p, n);
}

// C(MR, 16*NV) = A(MR, K) * Bt(K, 16*NV): A rows lda apart, Bt and C rows BQ apart (aligned).
template <int MR, int NV>
void abt_block(const float* A, int64_t lda, const float* Bt, int K, float* C) {
  __m512 acc[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
  for (int d = 0; d < K; ++d) {
    __m512 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_load_ps(Bt + size_t(d) * BQ + 16 * v);
    for (int m = 0; m < MR; ++m) {
      const __m512 a = _mm512_set1_ps(A[m * lda + d]);
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(a, b[v], acc[m][v]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) _mm512_store_ps(C + size_t(m) * BQ + 16 * v, acc[m][v]);
}

// C(MR, 16*NV) = (LoadC ? diag(row_scale) C : 0) + A(MR, K) * Bm(K, 16*NV), with
// A[m][k] = A[m * sm + k * sk] (either orientation); Bm rows ldb apart, C rows ldc apart.
// (LoadC is a template parameter and there are no masked loads/stores: either makes GCC 12 keep
// the accumulators in memory, which cost 2.5x in a micro-benchmark.)
template <int MR, int NV, bool LoadC>
void ab_block(const float* A, int64_t sm, int64_t sk, int K, const float* Bm, int64_t ldb, float* C, int64_t ldc,
              const float* row_scale) {
  __m512 acc[MR][NV];
  for (int m = 0; m < MR; ++m) {
    if constexpr (LoadC) {
      const __m512 f = _mm512_set1_ps(row_scale ? row_scale[m] : 1.f);
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_mul_ps(f, _mm512_loadu_ps(C + m * ldc + 16 * v));
    } else {
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
    }
  }
  for (int k = 0; k < K; ++k) {
    __m512 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(Bm + k * ldb + 16 * v);
    for (int m = 0; m < MR; ++m) {
      const __m512 a = _mm512_set1_ps(A[m * sm + k * sk]);
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(a, b[v], acc[m][v]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + m * ldc + 16 * v, acc[m][v]);
}

constexpr int kMR = 6;  // rows per register block: 6 x 4 accumulators + 4 B vectors fit 32 zmm

using AbtFn = void (*)(const float*, int64_t, const float*, int, float*);
template <int NV>
constexpr AbtFn kAbt[kMR] = {abt_block<1, NV>, abt_block<2, NV>, abt_block<3, NV>,
                             abt_block<4, NV>, abt_block<5, NV>, abt_block<6, NV>};
using AbFn = void (*)(const float*, int64_t, int64_t, int, const float*, int64_t, float*, int64_t, const float*);
template <int NV, bool LoadC>
constexpr AbFn kAb[kMR] = {ab_block<1, NV, LoadC>, ab_block<2, NV, LoadC>, ab_block<3, NV, LoadC>,
                           ab_block<4, NV, LoadC>, ab_block<5, NV, LoadC>, ab_block<6, NV, LoadC>};

// C(M, 16*nv) = A(M, K) * Bt(K, 16*nv), 1 <= nv <= BQ/16, computing for each block of rows only
// the 16-lane vectors that meet the band (the rest is left for apply_mask* to fill with -inf).
void abt(const float* A, int64_t lda, int M, const float* Bt, int K, int nv, float* C, Band band) {
  static constexpr const AbtFn* table[4] = {kAbt<1>, kAbt<2>, kAbt<3>, kAbt<4>};
  for (int m0 = 0; m0 < M; m0 += kMR) {
    const int rows = std::min(kMR, M - m0);
    const int64_t lo = std::max<int64_t>(0, m0 + band.lo);
    const int64_t hi = std::min<int64_t>(16 * nv - 1, m0 + rows - 1 + band.hi);
    if (lo > hi) continue;
    const int v0 = int(lo / 16), v1 = int(hi / 16) + 1;
    table[v1 - v0 - 1][rows - 1](A + m0 * lda, lda, Bt + 16 * v0, K, C + size_t(m0) * BQ + 16 * v0);
  }
}

// C(M, N) = (load_c ? diag(row_scale) C : 0) + A(M, K) * Bm(K, N) with A[m][k] = A[m*sm + k*sk],
// where A is zero outside the band (each block of rows only runs over the k the band allows).
// Columns in whole 16-lane vectors go through ab_block; the last N % 16 through plain loops.
void ab(const float* A, int64_t sm, int64_t sk, int M, int K, const float* Bm, int64_t ldb, int N, float* C,
        int64_t ldc, bool load_c, const float* row_scale, Band band) {
  static constexpr const AbFn* table[2][4] = {{kAb<1, false>, kAb<2, false>, kAb<3, false>, kAb<4, false>},
                                              {kAb<1, true>, kAb<2, true>, kAb<3, true>, kAb<4, true>}};
  const int n_vec = N / 16 * 16;
  for (int n0 = 0; n0 < n_vec; n0 += 64) {
    const AbFn* fns = table[load_c][std::min(64, n_vec - n0) / 16 - 1];
    for (int m = 0; m < M; m += kMR) {
      const int rows = std::min(kMR, M - m);
      const int k0 = int(std::clamp<int64_t>(m + band.lo, 0, K));
      const int k1 = int(std::clamp<int64_t>(m + rows + band.hi, k0, K));
      fns[rows - 1](A + m * sm + k0 * sk, sm, sk, k1 - k0, Bm + k0 * ldb + n0, ldb, C + m * ldc + n0, ldc,
                    row_scale ? row_scale + m : nullptr);
    }
  }
  if (n_vec == N) return;
  for (int m = 0; m < M; ++m) {
    float* c = C + m * ldc;
    const float f = row_scale ? row_scale[m] : 1.f;
    for (int n = n_vec; n < N; ++n) c[n] = load_c ? c[n] * f : 0.f;
    for (int k = 0; k < K; ++k) {
      const float a = A[m * sm + k * sk];
      const float* b = Bm + k * ldb;
      for (int n = n_vec; n < N; ++n) c[n] += a * b[n];
    }
  }
}

// Online-softmax update for one key tile (st holds nk rows of log2-unit scores^T): updates the
// running max m and sum l per query lane, writes P^T = 2^(s - m) into st and the factor alpha
// that rescales the previous output rows.
void online_softmax(float* st, int nk, int nv, float* m, float* l, float* alpha) {
  for (int v = 0; v < nv; ++v) {
    const __m512 m_old = _mm512_load_ps(m + 16 * v);
    __m512 tmax = _mm512_set1_ps(-kInf);
    for (int c = 0; c < nk; ++c) tmax = _mm512_max_ps(tmax, _mm512_load_ps(st + size_t(c) * BQ + 16 * v));
    const __m512 m_new = _mm512_max_ps(m_old, tmax);
    // Lanes that have seen no visible key yet keep m = -inf; exponentiate them against 0.
    const __mmask16 none = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(-kInf), _CMP_EQ_OQ);
    const __m512 m_use = _mm512_mask_blend_ps(none, m_new, _mm512_setzero_ps());
    const __m512 a = exp2_ps(_mm512_sub_ps(m_old, m_use));
    __m512 sum = _mm512_setzero_ps();
    for (int c = 0; c < nk; ++c) {
      float* s = st + size_t(c) * BQ + 16 * v;
      const __m512 p = exp2_ps(_mm512_sub_ps(_mm512_load_ps(s), m_use));
      _mm512_store_ps(s, p);
      sum = _mm512_add_ps(sum, p);
    }
    _mm512_store_ps(l + 16 * v, _mm512_fmadd_ps(_mm512_load_ps(l + 16 * v), a, sum));
    _mm512_store_ps(m + 16 * v, m_new);
    _mm512_store_ps(alpha + 16 * v, a);
  }
}

// Backward tile: st (scores^T, log2 units) -> P^T = 2^(s - lse2); dpt (dP^T) -> dS^T =
// scale * P^T (dP^T - Delta).
void probs_and_dscores(float* st, float* dpt, int nk, int nv, const float* lse2, const float* delta, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int v = 0; v < nv; ++v) {
    const __m512 L = _mm512_load_ps(lse2 + 16 * v);
    const __m512 dl = _mm512_load_ps(delta + 16 * v);
    for (int c = 0; c < nk; ++c) {
      float* s = st + size_t(c) * BQ + 16 * v;
      float* g = dpt + size_t(c) * BQ + 16 * v;
      const __m512 p = exp2_ps(_mm512_sub_ps(_mm512_load_ps(s), L));
      _mm512_store_ps(s, p);
      // Lanes with P == 0 may hold stale dP (abt skipped them): force dS = 0 there.
      const __mmask16 live = _mm512_cmp_ps_mask(p, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      _mm512_store_ps(g, _mm512_maskz_mul_ps(live, _mm512_mul_ps(p, vs), _mm512_sub_ps(_mm512_load_ps(g), dl)));
    }
  }
}

// Row orientation of probs_and_dscores: s (query rows x key lanes) -> P = 2^(s - lse2[r]);
// dp -> dS = scale * P (dP - delta[r]).
void probs_and_dscores_rows(float* s, float* dp, int nq, int nv, const float* lse2, const float* delta, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int r = 0; r < nq; ++r) {
    const __m512 L = _mm512_set1_ps(lse2[r]);
    const __m512 dl = _mm512_set1_ps(delta[r]);
    for (int v = 0; v < nv; ++v) {
      float* x = s + size_t(r) * BQ + 16 * v;
      float* g = dp + size_t(r) * BQ + 16 * v;
      const __m512 p = exp2_ps(_mm512_sub_ps(_mm512_load_ps(x), L));
      _mm512_store_ps(x, p);
      const __mmask16 live = _mm512_cmp_ps_mask(p, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      _mm512_store_ps(g, _mm512_maskz_mul_ps(live, _mm512_mul_ps(p, vs), _mm512_sub_ps(_mm512_load_ps(g), dl)));
    }
  }
}

// Few-query helpers (one query row against a run of keys).
// x[i] = 2^(x[i] - sub) for i < n; returns the sum.
float exp2_sum_inplace(float* x, int64_t n, float sub) {
  const __m512 vs = _mm512_set1_ps(sub);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    const __m512 p = _mm512_maskz_mov_ps(m, exp2_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vs)));
    _mm512_mask_storeu_ps(x + i, m, p);
    acc = _mm512_add_ps(acc, p);
  }
  return _mm512_reduce_add_ps(acc);
}

// a . b over D floats.
float dot(const float* a, const float* b, int D) {
  __m512 acc = _mm512_setzero_ps();
  for (int d = 0; d < D; d += 16) {
    const __mmask16 m = D - d >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (D - d)) - 1u);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + d), _mm512_maskz_loadu_ps(m, b + d), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// o[0 .. 16*NV) = mul * sum_j p[j] * V[j * ldv + ...], accumulators in registers.
template <int NV>
void weighted_rows_block(const float* p, int64_t n, const float* V, int64_t ldv, float mul, float* o) {
  __m512 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m512 w = _mm512_set1_ps(p[j]);
    for (int v = 0; v < NV; ++v) acc[v] = _mm512_fmadd_ps(w, _mm512_loadu_ps(V + j * ldv + 16 * v), acc[v]);
  }
  for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + 16 * v, _mm512_mul_ps(acc[v], _mm512_set1_ps(mul)));
}

// o[0 .. D) = mul * sum_{j < n} p[j] * V[j * ldv .. + D).
void weighted_rows(const float* p, int64_t n, const float* V, int64_t ldv, int D, float mul, float* o) {
  static constexpr void (*fns[4])(const float*, int64_t, const float*, int64_t, float, float*) = {
      weighted_rows_block<1>, weighted_rows_block<2>, weighted_rows_block<3>, weighted_rows_block<4>};
  const int n_vec = D / 16 * 16;
  for (int d0 = 0; d0 < n_vec; d0 += 64) fns[std::min(64, n_vec - d0) / 16 - 1](p, n, V + d0, ldv, mul, o + d0);
  for (int d = n_vec; d < D; ++d) {
    float acc = 0.f;
    for (int64_t j = 0; j < n; ++j) acc += p[j] * V[j * ldv + d];
    o[d] = mul * acc;
  }
}

#else  // AVX2 kernels where they pay, plain loops (-O3 vectorises them) for the rest

#if defined(__AVX2__) && defined(__FMA__)
#include "nanochat/kernels/attention_avx2.inc"
#else
// Xt[d * BQ + r] = mul * X[r * ldx + d] for r < n; lanes n .. ncols-1 are zeroed.
void pack_transposed(const float* X, int64_t ldx, int n, int ncols, int D, float mul, float* Xt) {
  for (int r = 0; r < n; ++r) {
    const float* x = X + r * ldx;
    for (int d = 0; d < D; ++d) Xt[size_t(d) * BQ + r] = mul * x[d];
  }
  for (int d = 0; d < D; ++d)
    for (int r = n; r < ncols; ++r) Xt[size_t(d) * BQ + r] = 0.f;
}

// The portable kernels ignore the band (computing masked entries is harmless: they are -inf
// scores or zero probabilities).
void abt(const float* A, int64_t lda, int M, const float* Bt, int K, int nv, float* C, Band) {
  const int ncols = 16 * nv;
  for (int m = 0; m < M; ++m) {
    float* c = C + size_t(m) * BQ;
    for (int n = 0; n < ncols; ++n) c[n] = 0.f;
    for (int d = 0; d < K; ++d) {
      const float a = A[m * lda + d];
      const float* b = Bt + size_t(d) * BQ;
      for (int n = 0; n < ncols; ++n) c[n] += a * b[n];
    }
  }
}

void ab(const float* A, int64_t sm, int64_t sk, int M, int K, const float* Bm, int64_t ldb, int N, float* C,
        int64_t ldc, bool load_c, const float* row_scale, Band) {
  for (int m = 0; m < M; ++m) {
    float* c = C + m * ldc;
    const float f = load_c ? (row_scale ? row_scale[m] : 1.f) : 0.f;
    for (int n = 0; n < N; ++n) c[n] = load_c ? c[n] * f : 0.f;
    for (int k = 0; k < K; ++k) {
      const float a = A[m * sm + k * sk];
      const float* b = Bm + k * ldb;
      for (int n = 0; n < N; ++n) c[n] += a * b[n];
    }
  }
}

void online_softmax(float* st, int nk, int nv, float* m, float* l, float* alpha) {
  const int ncols = 16 * nv;
  for (int r = 0; r < ncols; ++r) {
    float tmax = -kInf;
    for (int c = 0; c < nk; ++c) tmax = std::max(tmax, st[size_t(c) * BQ + r]);
    const float m_new = std::max(m[r], tmax);
    const float m_use = m_new == -kInf ? 0.f : m_new;
    const float a = std::exp2(m[r] - m_use);
    float sum = 0.f;
    for (int c = 0; c < nk; ++c) {
      float& s = st[size_t(c) * BQ + r];
      s = std::exp2(s - m_use);
      sum += s;
    }
    l[r] = l[r] * a + sum;
    m[r] = m_new;
    alpha[r] = a;
  }
}

void probs_and_dscores(float* st, float* dpt, int nk, int nv, const float* lse2, const float* delta, float scale) {
  const int ncols = 16 * nv;
  for (int c = 0; c < nk; ++c)
    for (int r = 0; r < ncols; ++r) {
      float& s = st[size_t(c) * BQ + r];
      s = std::exp2(s - lse2[r]);
      float& g = dpt[size_t(c) * BQ + r];
      g = s * scale * (g - delta[r]);
    }
}

void probs_and_dscores_rows(float* s, float* dp, int nq, int nv, const float* lse2, const float* delta, float scale) {
  const int ncols = 16 * nv;
  for (int r = 0; r < nq; ++r)
    for (int c = 0; c < ncols; ++c) {
      float& x = s[size_t(r) * BQ + c];
      x = std::exp2(x - lse2[r]);
      float& g = dp[size_t(r) * BQ + c];
      g = x * scale * (g - delta[r]);
    }
}

float exp2_sum_inplace(float* x, int64_t n, float sub) {
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp2(x[i] - sub));
  return sum;
}
#endif

float dot(const float* a, const float* b, int D) {
  float acc = 0.f;
  for (int d = 0; d < D; ++d) acc += a[d] * b[d];
  return acc;
}

void weighted_rows(const float* p, int64_t n, const float* V, int64_t ldv, int D, float mul, float* o) {
  for (int d = 0; d < D; ++d) o[d] = 0.f;
  for (int64_t j = 0; j < n; ++j)
    for (int d = 0; d < D; ++d) o[d] += p[j] * V[j * ldv + d];
  for (int d = 0; d < D; ++d) o[d] *= mul;
}

#endif

// Forward for very few queries (decode: Tq = 1): one task per (b, h, query) computes its score
// row directly (vector dot products over D), so no work is wasted on empty query lanes.
void forward_rows(const float* q, const float* k, const float* v, float* out, float* lse, int B, int Tq, int pos0,
                  int Tk, int H, int Hkv, int D, int window, float scale) {
  const int group = H / Hkv;
  const int64_t ldk = int64_t(Hkv) * D;
  const float c = scale * kLog2e;
  const int64_t n_tasks = int64_t(B) * H * Tq;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < n_tasks; ++task) {
    const int t = int(task % Tq);
    const int h = int((task / Tq) % H);
    const int b = int(task / (int64_t(Tq) * H));
    const int64_t p = int64_t(pos0) + t, j0 = first_key(p, window), n = p - j0 + 1;
    const float* qi = q + ((int64_t(b) * Tq + t) * H + h) * D;
    const float* kb = k + ((int64_t(b) * Tk + j0) * Hkv + h / group) * D;
    const float* vb = v + ((int64_t(b) * Tk + j0) * Hkv + h / group) * D;
    float* sc = scratch(D).row(n);
    float m = -kInf;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, sc[j] = c * dot(qi, kb + j * ldk, D));
    const float l = exp2_sum_inplace(sc, n, m);
    weighted_rows(sc, n, vb, ldk, D, 1.f / l, out + ((int64_t(b) * Tq + t) * H + h) * D);
    if (lse) lse[(int64_t(b) * H + h) * Tq + t] = (m + std::log2(l)) * kLn2;
  }
}

// One query tile of the forward: queries i0 .. i0 + nq - 1 of head h in batch b (absolute
// positions pos0 + i0 ..) against the keys of kb (rows ldk apart) and the values of vb (rows ldv
// apart), both starting at key 0 of the tile's kv head.
void forward_query_tile(const float* q, const float* kb, int64_t ldk, const float* vb, int64_t ldv, float* out,
                        float* lse, int b, int h, int i0, int Tq, int pos0, int H, int D, int window, float c) {
  const int nq = std::min(BQ, Tq - i0), nv = (nq + 15) / 16;
  const int64_t ldq = int64_t(H) * D;
  const int64_t p0 = int64_t(pos0) + i0, p_last = p0 + nq - 1;
  Scratch& s = scratch(D);
  const float* qrow = q + ((int64_t(b) * Tq + i0) * H + h) * D;
  float* orow = out + ((int64_t(b) * Tq + i0) * H + h) * D;
  pack_transposed(qrow, ldq, nq, 16 * nv, D, c, s.qt);
  for (int r = 0; r < BQ; ++r) s.m[r] = -kInf, s.l[r] = 0.f;
  bool first = true;
  for (int64_t j0 = first_key(p0, window); j0 <= p_last; j0 += BK) {
    const int nk = int(std::min<int64_t>(BK, p_last + 1 - j0));
    abt(kb + j0 * ldk, ldk, nk, s.qt, D, nv, s.st, band_keys_queries(j0, p0, window));
    apply_mask(s.st, nk, j0, p0, 16 * nv, window);
    online_softmax(s.st, nk, nv, s.m, s.l, s.alpha);
    ab(s.st, 1, BQ, nq, nk, vb + j0 * ldv, ldv, D, orow, ldq, !first, s.alpha, band_queries_keys(p0, j0, window));
    first = false;
  }
  for (int r = 0; r < nq; ++r) {
    const float inv = 1.f / s.l[r];
    float* o = orow + r * ldq;
    for (int d = 0; d < D; ++d) o[d] *= inv;
    if (lse) lse[(int64_t(b) * H + h) * Tq + i0 + r] = (s.m[r] + std::log2(s.l[r])) * kLn2;
  }
}

// Forward over a key/value buffer with row stride Tk: queries t at absolute positions pos0 + t.
// With at least two (batch, kv head) pairs per thread, one task per pair copies that head's V
// rows head-major into its thread's scratch (read from cache right after) and runs all its query
// tiles; otherwise one task per (batch, head, query tile), the V rows copied beforehand when
// queries see enough keys for that to pay (head_rows).
void forward_fast(const float* q, const float* k, const float* v, float* out, float* lse, int B, int Tq, int pos0,
                  int Tk, int H, int Hkv, int D, int window, float scale) {
  if (Tq <= kFewQueries) return forward_rows(q, k, v, out, lse, B, Tq, pos0, Tk, H, Hkv, D, window, scale);
  const int group = H / Hkv;
  const int nqt = (Tq + BQ - 1) / BQ;
  const int64_t ldk = int64_t(Hkv) * D;
  const float c = scale * kLog2e;
  const int64_t n_keys = int64_t(pos0) + Tq;  // keys any query sees
  if (int64_t(B) * Hkv >= 2 * int64_t(omp_get_max_threads())) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < int64_t(B) * Hkv; ++task) {
      const int hk = int(task % Hkv), b = int(task / Hkv);
      const int64_t kv_off = (int64_t(b) * Tk * Hkv + hk) * D;
      float* vc = scratch(D).heads(n_keys * D);
      copy_head(v + kv_off, ldk, n_keys, D, vc);
      for (int h = hk * group; h < (hk + 1) * group; ++h)
        for (int qt = nqt - 1; qt >= 0; --qt)
          forward_query_tile(q, k + kv_off, ldk, vc, D, out, lse, b, h, qt * BQ, Tq, pos0, H, D, window, c);
    }
    return;
  }
  const HeadRows vr = head_rows(v, B, Tk, Hkv, D, n_keys, mean_keys_per_query(pos0, Tq, window), 0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < int64_t(B) * H * nqt; ++task) {
    const int qt = nqt - 1 - int(task % nqt);  // longest (latest) query tiles first
    const int h = int((task / nqt) % H);
    const int b = int(task / (int64_t(nqt) * H));
    const int hk = h / group;
    forward_query_tile(q, k + (int64_t(b) * Tk * Hkv + hk) * D, ldk, vr.at(b, hk, 0), vr.ld, out, lse, b, h, qt * BQ,
                       Tq, pos0, H, D, window, c);
  }
}

// Per-query statistics of rows i0 .. i0+nq-1 of one head: lse2 = lse * log2(e) and
// delta = rowsum(dout * out) (FlashAttention-2's D_i); lanes nq .. BQ-1 get +inf and 0 so that
// padded query lanes produce P = 0.
void row_stats(const float* out, const float* dout, const float* lse, int nq, int64_t ldq, int D, float* lse2,
               float* delta) {
  for (int r = 0; r < BQ; ++r) {
    if (r >= nq) {
      lse2[r] = kInf;
      delta[r] = 0.f;
      continue;
    }
    const float* o = out + r * ldq;
    const float* g = dout + r * ldq;
    // 16 partial sums (one vector register) instead of one serial chain of D dependent adds.
    float part[16] = {};
    int d = 0;
    for (; d + 16 <= D; d += 16)
      for (int u = 0; u < 16; ++u) part[u] += o[d + u] * g[d + u];
    float acc = 0.f;
    for (; d < D; ++d) acc += o[d] * g[d];
    for (int u = 0; u < 16; ++u) acc += part[u];
    delta[r] = acc;
    lse2[r] = lse[r] * kLog2e;
  }
}

// Fused backward: one task per (b, kv head) owns dk, dv of that head and dq of its group's query
// heads, so all three accumulate without races. The task copies its kv head's K rows and each
// query head's Q and dO rows head-major (see HeadRows: the products stream them) into its
// thread's scratch, where they are read right away, from cache. Query tiles are packed
// transposed (query lanes); key tiles are aligned to multiples of BK so the first product into a
// dk/dv tile (query tile == key tile, first head of the group) can overwrite instead of
// accumulate (no zeroing pass).
void backward_fused(const float* q, const float* k, const float* v, const float* out, const float* lse,
                    const float* dout, float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int D, int window,
                    float scale) {
  static_assert(BQ == BK, "the first-touch rule below needs query and key tiles of one size");
  const int group = H / Hkv;
  const int64_t ldq = int64_t(H) * D, ldk = int64_t(Hkv) * D;
  const float c = scale * kLog2e;
  const int64_t TD = int64_t(T) * D;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < int64_t(B) * Hkv; ++task) {
    const int hk = int(task % Hkv), b = int(task / Hkv);
    Scratch& s = scratch(D);
    float* const kc = s.heads(3 * TD);  // K of this kv head, then Q and dO of the current query head
    float* const qc = kc + TD;
    float* const dc = qc + TD;
    const int64_t kv_off = (int64_t(b) * T * Hkv + hk) * D;
    copy_head(k + kv_off, ldk, T, D, kc);
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      copy_head(q + (int64_t(b) * T * H + h) * D, ldq, T, D, qc);
      copy_head(dout + (int64_t(b) * T * H + h) * D, ldq, T, D, dc);
      for (int i0 = 0; i0 < T; i0 += BQ) {
        const int nq = std::min(BQ, T - i0), nv = (nq + 15) / 16;
        const int64_t q_off = ((int64_t(b) * T + i0) * H + h) * D;
        const float* const qi = qc + int64_t(i0) * D;
        const float* const di = dc + int64_t(i0) * D;
        pack_transposed(qi, D, nq, 16 * nv, D, c, s.qt);
        pack_transposed(di, D, nq, 16 * nv, D, 1.f, s.dot);
        row_stats(out + q_off, dout + q_off, lse + (int64_t(b) * H + h) * T + i0, nq, ldq, D, s.lse2, s.delta);
        const int64_t i_last = i0 + nq - 1;
        for (int64_t j0 = first_key(i0, window) / BK * BK; j0 <= i_last; j0 += BK) {
          const int nk = int(std::min<int64_t>(BK, T - j0));
          const float* kt = kc + j0 * D;
          const float* vt = v + kv_off + j0 * ldk;
          const Band kq = band_keys_queries(j0, i0, window);
          abt(kt, D, nk, s.qt, D, nv, s.st, kq);  // S^T (keys x query lanes), log2 units
          apply_mask(s.st, nk, j0, i0, 16 * nv, window);
          abt(vt, ldk, nk, s.dot, D, nv, s.dpt, kq);  // dP^T
          probs_and_dscores(s.st, s.dpt, nk, nv, s.lse2, s.delta, scale);
          const bool first_kv = h == hk * group && j0 == i0;
          ab(s.st, BQ, 1, nk, nq, di, D, D, dv + kv_off + j0 * ldk, ldk, !first_kv, nullptr, kq);
          ab(s.dpt, BQ, 1, nk, nq, qi, D, D, dk + kv_off + j0 * ldk, ldk, !first_kv, nullptr, kq);
          const bool first_q = j0 == first_key(i0, window) / BK * BK;
          ab(s.dpt, 1, BQ, nq, nk, kt, D, D, dq + q_off, ldq, !first_q, nullptr, band_queries_keys(i0, j0, window));
        }
      }
    }
  }
}

// Split backward. Pass 1 (dq): one task per (b, h, query tile), query tile packed transposed.
// Pass 2 (dk, dv): one task per (b, kv head, key tile); here the key tile is packed transposed
// (key lanes, S = Q K^T row by row) so Q and dO are read in place and nothing is re-packed per
// (key tile, query tile) pair.
void backward_split(const float* q, const float* k, const float* v, const float* out, const float* lse,
                    const float* dout, float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int D, int window,
                    float scale) {
  const int group = H / Hkv;
  const int64_t ldq = int64_t(H) * D, ldk = int64_t(Hkv) * D;
  const float c = scale * kLog2e;
  const int nqt = (T + BQ - 1) / BQ;
  const int nkt = (T + BK - 1) / BK;
  const int64_t kpq = mean_keys_per_query(0, T, window);
  const HeadRows qr = head_rows(q, B, T, H, D, T, kpq, 0), dor = head_rows(dout, B, T, H, D, T, kpq, 1);
  const HeadRows kr = head_rows(k, B, T, Hkv, D, T, kpq, 2);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < int64_t(B) * H * nqt; ++task) {
    const int qt = nqt - 1 - int(task % nqt);  // longest rows first
    const int h = int((task / nqt) % H);
    const int b = int(task / (int64_t(nqt) * H));
    Scratch& s = scratch(D);
    const int i0 = qt * BQ, nq = std::min(BQ, T - i0), nv = (nq + 15) / 16;
    const int64_t q_off = ((int64_t(b) * T + i0) * H + h) * D;
    const int64_t kv_off = (int64_t(b) * T * Hkv + h / group) * D;
    pack_transposed(q + q_off, ldq, nq, 16 * nv, D, c, s.qt);
    pack_transposed(dout + q_off, ldq, nq, 16 * nv, D, 1.f, s.dot);
    row_stats(out + q_off, dout + q_off, lse + (int64_t(b) * H + h) * T + i0, nq, ldq, D, s.lse2, s.delta);
    const int64_t i_last = i0 + nq - 1, j_first = first_key(i0, window);
    for (int64_t j0 = j_first; j0 <= i_last; j0 += BK) {
      const int nk = int(std::min<int64_t>(BK, i_last + 1 - j0));
      const float* kt = kr.at(b, h / group, j0);
      const Band kq = band_keys_queries(j0, i0, window);
      abt(kt, kr.ld, nk, s.qt, D, nv, s.st, kq);
      apply_mask(s.st, nk, j0, i0, 16 * nv, window);
      abt(v + kv_off + j0 * ldk, ldk, nk, s.dot, D, nv, s.dpt, kq);
      probs_and_dscores(s.st, s.dpt, nk, nv, s.lse2, s.delta, scale);
      ab(s.dpt, 1, BQ, nq, nk, kt, kr.ld, D, dq + q_off, ldq, j0 != j_first, nullptr,
         band_queries_keys(i0, j0, window));
    }
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < int64_t(B) * Hkv * nkt; ++task) {
    const int kt_idx = int(task % nkt);
    const int hk = int((task / nkt) % Hkv);
    const int b = int(task / (int64_t(nkt) * Hkv));
    Scratch& s = scratch(D);
    const int64_t j0 = int64_t(kt_idx) * BK;
    const int nk = int(std::min<int64_t>(BK, T - j0)), nvk = (nk + 15) / 16;
    const int64_t kv_off = (int64_t(b) * T * Hkv + hk) * D + j0 * ldk;
    pack_transposed(k + kv_off, ldk, nk, 16 * nvk, D, c, s.qt);     // c * K^T (D x key lanes)
    pack_transposed(v + kv_off, ldk, nk, 16 * nvk, D, 1.f, s.dot);  // V^T
    const int64_t i_end = window < 0 ? T - 1 : std::min<int64_t>(T - 1, j0 + nk - 1 + window);
    bool first = true;
    for (int h = hk * group; h < (hk + 1) * group; ++h)
      for (int64_t i0 = j0; i0 <= i_end; i0 += BQ) {
        const int nq = int(std::min<int64_t>(BQ, i_end + 1 - i0));
        const int64_t q_off = ((int64_t(b) * T + i0) * H + h) * D;
        row_stats(out + q_off, dout + q_off, lse + (int64_t(b) * H + h) * T + i0, nq, ldq, D, s.lse2, s.delta);
        const Band qk = band_queries_keys(i0, j0, window), kq = band_keys_queries(j0, i0, window);
        abt(q + q_off, ldq, nq, s.qt, D, nvk, s.st, qk);  // S (query rows x key lanes), log2 units
        apply_mask_rows(s.st, nq, i0, j0, 16 * nvk, window);
        abt(dout + q_off, ldq, nq, s.dot, D, nvk, s.dpt, qk);  // dP
        probs_and_dscores_rows(s.st, s.dpt, nq, nvk, s.lse2, s.delta, scale);
        ab(s.st, 1, BQ, nk, nq, dor.at(b, h, i0), dor.ld, D, dv + kv_off, ldk, !first, nullptr, kq);
        ab(s.dpt, 1, BQ, nk, nq, qr.at(b, h, i0), qr.ld, D, dk + kv_off, ldk, !first, nullptr, kq);
        first = false;
      }
  }
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int B, int T, int H,
                       int Hkv, int D, int window, float scale) {
  check_shapes(B, T, H, Hkv, D);
  forward_fast(q, k, v, out, lse, B, T, 0, T, H, Hkv, D, window, scale);
}

void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int D,
                        int window, float scale) {
  attention_backward_with(AttentionBackwardMode::kAuto, q, k, v, out, lse, dout, dq, dk, dv, B, T, H, Hkv, D, window,
                          scale);
}

void attention_backward_with(AttentionBackwardMode mode, const float* q, const float* k, const float* v,
                             const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv,
                             int B, int T, int H, int Hkv, int D, int window, float scale) {
  check_shapes(B, T, H, Hkv, D);
  if (mode == AttentionBackwardMode::kAuto)
    mode = int64_t(B) * Hkv >= 2 * int64_t(omp_get_max_threads()) ? AttentionBackwardMode::kFused
                                                                  : AttentionBackwardMode::kSplit;
  if (mode == AttentionBackwardMode::kFused)
    backward_fused(q, k, v, out, lse, dout, dq, dk, dv, B, T, H, Hkv, D, window, scale);
  else
    backward_split(q, k, v, out, lse, dout, dq, dk, dv, B, T, H, Hkv, D, window, scale);
}

void attention_forward_cached(const float* q, const float* k_cache, const float* v_cache, float* out, int B, int Tq,
                              int pos0, int Tmax, int H, int Hkv, int D, int window, float scale) {
  check_shapes(B, Tq, H, Hkv, D);
  if (pos0 < 0 || int64_t(pos0) + Tq > Tmax)
    fail("attention: the KV cache holds ", Tmax, " positions but the queries need positions ", pos0, " .. ",
         int64_t(pos0) + Tq - 1, "; use a larger cache (sequence length) or reset it");
  forward_fast(q, k_cache, v_cache, out, nullptr, B, Tq, pos0, Tmax, H, Hkv, D, window, scale);
}

}  // namespace nanochat
