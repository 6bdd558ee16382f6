#include "nanochat/kernels/elementwise.h"

namespace nanochat {

namespace {
constexpr int64_t kPar = 1 << 16;  // below this many elements, stay on one thread
constexpr int64_t kBlock = 1024;   // inner float sums over blocks, outer sum in double
}  // namespace

template <typename T>
void relu2_forward(const T* f, T* a, int64_t n) {
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
