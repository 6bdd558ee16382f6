// Causal / sliding-window GQA attention, forward and backward (see attention.h for the math).
#include "nanochat/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "nanochat/core/error.h"

namespace nanochat {

namespace {

void check_shapes(int B, int T, int H, int Hkv, int D) {
  if (B <= 0 || T <= 0 || H <= 0 || Hkv <= 0 || D <= 0)
    fail("attention: sizes must be positive (B=", B, " T=", T, " H=", H, " Hkv=", Hkv, " D=", D,
         ")");
  if (H % Hkv != 0)
    fail("attention: the number of query heads H=", H, " must be a multiple of the number of kv "
         "heads Hkv=", Hkv);
}

// First key a query at absolute position p may see.
inline int64_t first_key(int64_t p, int window) {
  return window < 0 ? 0 : std::max<int64_t>(0, p - window);
}

// Reference forward over a key/value buffer with row stride Tk (the cache length): queries
// t = 0..Tq-1 sit at absolute positions pos0 + t and see keys first_key(p) .. p.
template <typename Real>
void forward_ref_core(const Real* q, const Real* k, const Real* v, Real* out, Real* lse, int B,
                      int Tq, int pos0, int Tk, int H, int Hkv, int D, int window, Real scale) {
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
void attention_forward_reference(const Real* q, const Real* k, const Real* v, Real* out, Real* lse,
                                 int B, int T, int H, int Hkv, int D, int window, Real scale) {
  check_shapes(B, T, H, Hkv, D);
  forward_ref_core<Real>(q, k, v, out, lse, B, T, 0, T, H, Hkv, D, window, scale);
}

template <typename Real>
void attention_backward_reference(const Real* q, const Real* k, const Real* v, const Real* out,
                                  const Real* lse, const Real* dout, Real* dq, Real* dk, Real* dv,
                                  int B, int T, int H, int Hkv, int D, int window, Real scale) {
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

template void attention_forward_reference<float>(const float*, const float*, const float*, float*,
                                                 float*, int, int, int, int, int, int, float);
template void attention_forward_reference<double>(const double*, const double*, const double*,
                                                  double*, double*, int, int, int, int, int, int,
                                                  double);
template void attention_backward_reference<float>(const float*, const float*, const float*,
                                                  const float*, const float*, const float*, float*,
                                                  float*, float*, int, int, int, int, int, int,
                                                  float);
template void attention_backward_reference<double>(const double*, const double*, const double*,
                                                   const double*, const double*, const double*,
                                                   double*, double*, double*, int, int, int, int,
                                                   int, int, double);

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       int B, int T, int H, int Hkv, int D, int window, float scale) {
  attention_forward_reference<float>(q, k, v, out, lse, B, T, H, Hkv, D, window, scale);
}

void attention_backward(const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv,
                        int B, int T, int H, int Hkv, int D, int window, float scale) {
  attention_backward_with(AttentionBackwardMode::kAuto, q, k, v, out, lse, dout, dq, dk, dv, B, T,
                          H, Hkv, D, window, scale);
}

void attention_backward_with(AttentionBackwardMode /*mode*/, const float* q, const float* k,
                             const float* v, const float* out, const float* lse, const float* dout,
                             float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int D,
                             int window, float scale) {
  attention_backward_reference<float>(q, k, v, out, lse, dout, dq, dk, dv, B, T, H, Hkv, D, window,
                                      scale);
}

void attention_forward_cached(const float* q, const float* k_cache, const float* v_cache,
                              float* out, int B, int Tq, int pos0, int Tmax, int H, int Hkv, int D,
                              int window, float scale) {
  check_shapes(B, Tq, H, Hkv, D);
  if (pos0 < 0 || int64_t(pos0) + Tq > Tmax)
    fail("attention: the KV cache holds ", Tmax, " positions but the queries need positions ", pos0,
         " .. ", int64_t(pos0) + Tq - 1, "; use a larger cache (sequence length) or reset it");
  forward_ref_core<float>(q, k_cache, v_cache, out, nullptr, B, Tq, pos0, Tmax, H, Hkv, D, window,
                          scale);
}

}  // namespace nanochat
