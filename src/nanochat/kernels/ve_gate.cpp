#include "nanochat/kernels/ve_gate.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace nanochat {

template <typename T>
void ve_gate_forward(const T* n1, int64_t C, const T* Wg, const T* table, const int32_t* idx, const T* v_in,
                     int64_t ld_v, T* v_out, T* gamma, int64_t N, int64_t Hkv, int64_t D) {
  const int64_t W = Hkv * D;
#pragma omp parallel for schedule(guided) if (N * W > 32768)
  for (int64_t n = 0; n < N; ++n) {
    const T* vi = v_in + n * ld_v;
    T* vo = v_out + n * W;
    if (!table) {
      std::memcpy(vo, vi, sizeof(T) * W);
      continue;
    }
    const T* x = n1 + n * C;
    const T* ve = table + static_cast<int64_t>(idx[n]) * W;
    for (int64_t h = 0; h < Hkv; ++h) {
      T z = 0;
      for (int j = 0; j < kVeGateChannels; ++j) z += x[j] * Wg[h * kVeGateChannels + j];
      const T g = T(3) / (T(1) + std::exp(-z));
      gamma[n * Hkv + h] = g;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) vo[h * D + d] = vi[h * D + d] + g * ve[h * D + d];
    }
  }
}

template <typename T>
void ve_gate_backward(const T* n1, int64_t C, const T* Wg, const T* table, const int32_t* idx, const T* gamma,
                      const T* dv, T* dn1, T* dWg, T* dtable, T* dz, int64_t N, int64_t Hkv, int64_t D) {
  const int64_t W = Hkv * D;
  // dgamma = dv . ve; dz = dgamma * 3 sig (1 - sig) = dgamma * gamma * (1 - gamma/3);
  // dn1[:12] += dz . Wg
#pragma omp parallel for schedule(guided) if (N * W > 32768)
  for (int64_t n = 0; n < N; ++n) {
    const T* ve = table + static_cast<int64_t>(idx[n]) * W;
    const T* dvn = dv + n * W;
    T* dx = dn1 + n * C;
    for (int64_t h = 0; h < Hkv; ++h) {
      T dg = 0;
#pragma omp simd reduction(+ : dg)
      for (int64_t d = 0; d < D; ++d) dg += dvn[h * D + d] * ve[h * D + d];
      const T g = gamma[n * Hkv + h];
      const T z = dg * g * (T(1) - g / T(3));
      dz[n * Hkv + h] = z;
      for (int j = 0; j < kVeGateChannels; ++j) dx[j] += z * Wg[h * kVeGateChannels + j];
    }
  }
  // dWg[h, j] += sum_n dz[n, h] * n1[n, j]
  const int64_t nw = Hkv * kVeGateChannels;
#pragma omp parallel for schedule(guided) if (N * nw > 32768)
  for (int64_t hj = 0; hj < nw; ++hj) {
    const int64_t h = hj / kVeGateChannels, j = hj % kVeGateChannels;
    double s = 0;
    for (int64_t n = 0; n < N; ++n) s += static_cast<double>(dz[n * Hkv + h]) * n1[n * C + j];
    dWg[hj] += static_cast<T>(s);
  }
  // dtable[idx[n], h*D + d] += gamma[n, h] * dv[n, h, d]; column blocks per thread (no races).
#pragma omp parallel if (N * W > 32768)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t per = (W + nt - 1) / nt;
    const int64_t c0 = std::min(W, tid * per), c1 = std::min(W, c0 + per);
    for (int64_t n = 0; n < N && c1 > c0; ++n) {
      T* dst = dtable + static_cast<int64_t>(idx[n]) * W;
      const T* src = dv + n * W;
      for (int64_t h = c0 / D; h * D < c1; ++h) {
        const T g = gamma[n * Hkv + h];
        const int64_t a = std::max(c0, h * D), b = std::min(c1, (h + 1) * D);
#pragma omp simd
        for (int64_t c = a; c < b; ++c) dst[c] += g * src[c];
      }
    }
  }
}

#define NC_INSTANTIATE(T)                                                                                              \
  template void ve_gate_forward<T>(const T*, int64_t, const T*, const T*, const int32_t*, const T*, int64_t, T*, T*,   \
                                   int64_t, int64_t, int64_t);                                                         \
  template void ve_gate_backward<T>(const T*, int64_t, const T*, const T*, const int32_t*, const T*, const T*, T*, T*, \
                                    T*, T*, int64_t, int64_t, int64_t);
NC_INSTANTIATE(float)
NC_INSTANTIATE(double)
#undef NC_INSTANTIATE

}  // namespace nanochat
