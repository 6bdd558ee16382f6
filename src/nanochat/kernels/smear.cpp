#include "nanochat/kernels/smear.h"

#include <cmath>

namespace nanochat {

namespace {
template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
template <typename T>
inline T gate_dot(const T* w, const T* e) {
  T u = 0;
  for (int c = 0; c < kSmearChannels; ++c) u += w[c] * e[c];
  return u;
}
}  // namespace

template <typename T>
void smear_forward(const T* e, const T* w, T lambda, T* s, T* sig, int64_t B, int64_t T_, int64_t C) {
#pragma omp parallel for collapse(2) schedule(guided) if (B * T_ * C > 65536)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t n = b * T_ + t;
      const T* et = e + n * C;
      T* st = s + n * C;
      if (t == 0) {
        sig[n] = 0;
        for (int64_t c = 0; c < C; ++c) st[c] = et[c];
        continue;
      }
      const T sg = sigmoid(gate_dot(w, et));
      sig[n] = sg;
      const T g = lambda * sg;
      const T* ep = et - C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) st[c] = et[c] + g * ep[c];
    }
}

template <typename T>
void smear_backward(const T* e, const T* w, T lambda, const T* sig, const T* ds, T* de, T* dw, T* dlambda, int64_t B,
                    int64_t T_, int64_t C) {
  double acc_w[kSmearChannels] = {};
  double acc_l = 0;
#pragma omp parallel for collapse(2) schedule(static) reduction(+ : acc_w[:kSmearChannels], acc_l) \
    if (B * T_ * C > 65536)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t n = b * T_ + t;
      const T* dst = ds + n * C;
      T* det = de + n * C;
      // de_t = ds_t + g_{t+1} * ds_{t+1}   (the next position mixes this one in)
      if (t + 1 < T_) {
        const T gn = lambda * sig[n + 1];
        const T* dsn = dst + C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) det[c] = dst[c] + gn * dsn[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) det[c] = dst[c];
      }
      if (t == 0) continue;
      // gate of position t: dg = ds_t . e_{t-1}
      const T* ep = e + (n - 1) * C;
      T dg = 0;
#pragma omp simd reduction(+ : dg)
      for (int64_t c = 0; c < C; ++c) dg += dst[c] * ep[c];
      const T sg = sig[n];
      acc_l += static_cast<double>(dg * sg);
      const T du = dg * lambda * sg * (T(1) - sg);
      const T* et = e + n * C;
      for (int c = 0; c < kSmearChannels; ++c) {
        acc_w[c] += static_cast<double>(du * et[c]);
        det[c] += du * w[c];
      }
    }
  for (int c = 0; c < kSmearChannels; ++c) dw[c] += static_cast<T>(acc_w[c]);
  *dlambda += static_cast<T>(acc_l);
}

template <typename T>
void smear_step(const T* e, const T* prev, const T* w, T lambda, T* s, int64_t B, int64_t C) {
  for (int64_t b = 0; b < B; ++b) {
    const T g = lambda * sigmoid(gate_dot(w, e + b * C));
    for (int64_t c = 0; c < C; ++c) s[b * C + c] = e[b * C + c] + g * prev[b * C + c];
  }
}

#define NC_INSTANTIATE(T)                                                                                            \
  template void smear_forward<T>(const T*, const T*, T, T*, T*, int64_t, int64_t, int64_t);                          \
  template void smear_backward<T>(const T*, const T*, T, const T*, const T*, T*, T*, T*, int64_t, int64_t, int64_t); \
  template void smear_step<T>(const T*, const T*, const T*, T, T*, int64_t, int64_t);
NC_INSTANTIATE(float)
NC_INSTANTIATE(double)
#undef NC_INSTANTIATE

}  // namespace nanochat
