#include "nanochat/kernels/elementwise.h"

#include <algorithm>
#include <type_traits>
#if !defined(__AVX512F__) && defined(__AVX2__)
#include <immintrin.h>
#endif

namespace nanochat {

namespace {
constexpr int64_t kPar = 1 << 16;  // below this many elements, stay on one thread
constexpr int64_t kBlock = 1024;   // inner float sums over blocks, outer sum in double
}  // namespace

#if !defined(__AVX512F__) && defined(__AVX2__)
// relu2_forward in AVX2: GCC 12 keeps the plain loop below scalar and branchy without AVX-512
// masking (it will not if-convert r * r, a multiply done on one branch only; measured 30x slower
// than relu2_backward). max_ps(f, 0) returns 0 for NaN and +0 for -0, as f > 0 ? f : 0 does.
namespace {
void relu2_forward_avx2(const float* f, float* a, int64_t n) {
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(guided) if (n > kPar)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t i1 = std::min(n, (blk + 1) * kBlock);
    int64_t i = blk * kBlock;
    for (; i + 8 <= i1; i += 8) {
      const __m256 r = _mm256_max_ps(_mm256_loadu_ps(f + i), _mm256_setzero_ps());
      _mm256_storeu_ps(a + i, _mm256_mul_ps(r, r));
    }
    for (; i < i1; ++i) {
      const float r = f[i] > 0.f ? f[i] : 0.f;
      a[i] = r * r;
    }
  }
}
}  // namespace
#endif

template <typename T>
void relu2_forward(const T* f, T* a, int64_t n) {
#if !defined(__AVX512F__) && defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) return relu2_forward_avx2(f, a, n);
#endif
#pragma omp parallel for simd schedule(simd : guided) if (n > kPar)
  for (int64_t i = 0; i < n; ++i) {
    const T r = f[i] > T(0) ? f[i] : T(0);
    a[i] = r * r;
  }
}

template <typename T>
void relu2_backward(const T* f, const T* da, T* df, int64_t n) {
#pragma omp parallel for simd schedule(simd : guided) if (n > kPar)
  for (int64_t i = 0; i < n; ++i) {
    const T r = f[i] > T(0) ? f[i] : T(0);
    df[i] = da[i] * T(2) * r;
  }
}

template <typename T>
void lambda_mix_forward(const T* h, const T* x0, T r, T a, T* out, int64_t n) {
#pragma omp parallel for simd schedule(simd : guided) if (n > kPar)
  for (int64_t i = 0; i < n; ++i) out[i] = r * h[i] + a * x0[i];
}

template <typename T>
void lambda_mix_backward(const T* h, const T* x0, T r, T a, T* dout, T* dx0, double* dr, double* da, int64_t n) {
  double sr = 0, sa = 0;
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) reduction(+ : sr, sa) if (n > kPar)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t i0 = blk * kBlock, i1 = i0 + kBlock < n ? i0 + kBlock : n;
    T br = 0, ba = 0;
#pragma omp simd reduction(+ : br, ba)
    for (int64_t i = i0; i < i1; ++i) {
      const T g = dout[i];
      br += g * h[i];
      ba += g * x0[i];
      dx0[i] += a * g;
      dout[i] = r * g;
    }
    sr += br;
    sa += ba;
  }
  *dr += sr;
  *da += sa;
}

template <typename T>
void axpy(T alpha, const T* x, T* y, int64_t n) {
#pragma omp parallel for simd schedule(simd : guided) if (n > kPar)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

template <typename T>
void add_scaled(const T* x, T alpha, const T* y, T* out, int64_t n) {
#pragma omp parallel for simd schedule(simd : guided) if (n > kPar)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] + alpha * y[i];
}

template <typename T>
double dot(const T* x, const T* y, int64_t n) {
  double s = 0;
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) reduction(+ : s) if (n > kPar)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t i0 = blk * kBlock, i1 = i0 + kBlock < n ? i0 + kBlock : n;
    T b = 0;
#pragma omp simd reduction(+ : b)
    for (int64_t i = i0; i < i1; ++i) b += x[i] * y[i];
    s += b;
  }
  return s;
}

#define NC_INSTANTIATE(T)                                                                            \
  template void relu2_forward<T>(const T*, T*, int64_t);                                             \
  template void relu2_backward<T>(const T*, const T*, T*, int64_t);                                  \
  template void lambda_mix_forward<T>(const T*, const T*, T, T, T*, int64_t);                        \
  template void lambda_mix_backward<T>(const T*, const T*, T, T, T*, T*, double*, double*, int64_t); \
  template void axpy<T>(T, const T*, T*, int64_t);                                                   \
  template void add_scaled<T>(const T*, T, const T*, T*, int64_t);                                   \
  template double dot<T>(const T*, const T*, int64_t);
NC_INSTANTIATE(float)
NC_INSTANTIATE(double)
#undef NC_INSTANTIATE

}  // namespace nanochat
