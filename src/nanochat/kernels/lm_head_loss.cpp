#include "nanochat/kernels/lm_head_loss.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/vecmath.h"

// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_ps(), which trips
// -W(maybe-)uninitialized false positives once inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace nanochat {

namespace {

// float row kernel: vectorised (AVX-512 when available, the same algorithm in scalar otherwise).
double softcap_ce_row_f32(float* row, int64_t V, int32_t target, float cap, float grad_scale,
                          bool want_grad) {
  const float inv_cap = 1.f / cap;
  // pass 1: z = cap*tanh(l/cap) stored in place; sum exp(z - cap) (z <= cap, so no overflow)
  double sum;
  int64_t j = 0;
#if defined(__AVX512F__)
  {
    const __m512 vcap = _mm512_set1_ps(cap), vinv = _mm512_set1_ps(inv_cap);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (; j + 32 <= V; j += 32) {
      __m512 z0 = _mm512_mul_ps(vcap, vecmath::tanh16(_mm512_mul_ps(_mm512_loadu_ps(row + j), vinv)));
      __m512 z1 =
          _mm512_mul_ps(vcap, vecmath::tanh16(_mm512_mul_ps(_mm512_loadu_ps(row + j + 16), vinv)));
      _mm512_storeu_ps(row + j, z0);
      _mm512_storeu_ps(row + j + 16, z1);
      acc0 = _mm512_add_ps(acc0, vecmath::exp16(_mm512_sub_ps(z0, vcap)));
      acc1 = _mm512_add_ps(acc1, vecmath::exp16(_mm512_sub_ps(z1, vcap)));
    }
    for (; j < V; j += 16) {
      const __mmask16 m = V - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (V - j)) - 1);
      __m512 z = _mm512_mul_ps(vcap, vecmath::tanh16(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), vinv)));
      _mm512_mask_storeu_ps(row + j, m, z);
      acc0 = _mm512_add_ps(acc0, _mm512_maskz_mov_ps(m, vecmath::exp16(_mm512_sub_ps(z, vcap))));
    }
    sum = static_cast<double>(_mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)));
  }
#else
  {
    float acc = 0.f;
    for (; j < V; ++j) {
      const float z = cap * vecmath::tanh_scalar(row[j] * inv_cap);
      row[j] = z;
      acc += vecmath::exp_scalar(z - cap);
    }
    sum = acc;
  }
#endif
  const double lse = static_cast<double>(cap) + std::log(sum);
  if (target < 0) {
    if (want_grad) std::fill(row, row + V, 0.f);
    return 0.0;
  }
  const float zt = row[target];
  const double loss = lse - static_cast<double>(zt);
  if (!want_grad) return loss;
  // pass 2: dlogits = s * softmax(z) * (1 - (z/cap)^2), minus s * (1 - (z_t/cap)^2) at the target
  const float flse = static_cast<float>(lse);
  const float inv_cap2 = inv_cap * inv_cap;
  j = 0;
#if defined(__AVX512F__)
  {
    const __m512 vl = _mm512_set1_ps(flse), vs = _mm512_set1_ps(grad_scale),
                 vic2 = _mm512_set1_ps(inv_cap2), one = _mm512_set1_ps(1.f);
    for (; j < V; j += 16) {
      const __mmask16 m = V - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (V - j)) - 1);
      const __m512 z = _mm512_maskz_loadu_ps(m, row + j);
      const __m512 p = vecmath::exp16(_mm512_sub_ps(z, vl));
      const __m512 d = _mm512_fnmadd_ps(_mm512_mul_ps(z, z), vic2, one);  // 1 - z^2/cap^2
      _mm512_mask_storeu_ps(row + j, m, _mm512_mul_ps(_mm512_mul_ps(p, vs), d));
    }
  }
#else
  for (; j < V; ++j) {
    const float z = row[j];
    row[j] = vecmath::exp_scalar(z - flse) * grad_scale * (1.f - z * z * inv_cap2);
  }
#endif
  row[target] -= grad_scale * (1.f - zt * zt * inv_cap2);
  return loss;
}

}  // namespace

template <typename T>
double softcap_ce_row(T* row, int64_t V, int32_t target, T cap, T grad_scale, bool want_grad) {
  if constexpr (std::is_same_v<T, float>) {
    return softcap_ce_row_f32(row, V, target, cap, grad_scale, want_grad);
  } else {
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) {
      row[j] = cap * std::tanh(row[j] / cap);
      sum += std::exp(static_cast<double>(row[j]) - cap);
    }
    const double lse = cap + std::log(sum);
    if (target < 0) {
      if (want_grad) std::fill(row, row + V, T(0));
      return 0.0;
    }
    const T zt = row[target];
    if (want_grad) {
      for (int64_t j = 0; j < V; ++j) {
        const T z = row[j];
        const T d = T(1) - (z / cap) * (z / cap);
        row[j] = grad_scale * (static_cast<T>(std::exp(z - lse)) - (j == target ? T(1) : T(0))) * d;
      }
    }
    return lse - zt;
  }
}

template double softcap_ce_row<float>(float*, int64_t, int32_t, float, float, bool);
template double softcap_ce_row<double>(double*, int64_t, int32_t, double, double, bool);

void softcap_inplace(float* z, int64_t n, float cap) {
  const float inv_cap = 1.f / cap;
  constexpr int64_t kBlock = 4096;
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t i0 = blk * kBlock, i1 = std::min(n, i0 + kBlock);
    int64_t i = i0;
#if defined(__AVX512F__)
    const __m512 vcap = _mm512_set1_ps(cap), vinv = _mm512_set1_ps(inv_cap);
    for (; i + 16 <= i1; i += 16)
      _mm512_storeu_ps(z + i, _mm512_mul_ps(vcap, vecmath::tanh16(_mm512_mul_ps(_mm512_loadu_ps(z + i), vinv))));
#endif
    for (; i < i1; ++i) z[i] = cap * vecmath::tanh_scalar(z[i] * inv_cap);
  }
}

double lm_head_softcap_ce(const float* x, const float* W, const int32_t* targets, int64_t N,
                          int64_t C, int64_t V, float cap, float grad_scale, float* scratch,
                          int64_t chunk_rows, float* per_token_loss, float* dx, float* dW,
                          float* dWt) {
  const bool want_grad = dx != nullptr;
  double total = 0.0;
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t m = std::min(chunk_rows, N - r0);
    linear_fwd(x + r0 * C, W, scratch, m, C, V);
    double chunk_sum = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : chunk_sum) if (m * V > 32768)
    for (int64_t i = 0; i < m; ++i) {
      const double l =
          softcap_ce_row_f32(scratch + i * V, V, targets[r0 + i], cap, grad_scale, want_grad);
      if (per_token_loss) per_token_loss[r0 + i] = static_cast<float>(l);
      chunk_sum += l;
    }
    total += chunk_sum;
    if (want_grad) {
      linear_bwd_x(scratch, W, dx + r0 * C, m, C, V, 0.f);
      if (dWt)  // dWt (C, V) (+)= x_chunk^T (C, m) * dlogits (m, V)
        sgemm(true, false, C, V, m, 1.f, x + r0 * C, C, scratch, V, r0 == 0 ? 0.f : 1.f, dWt, V);
      else
        linear_bwd_w(scratch, x + r0 * C, dW, m, C, V, 1.f);
    }
  }
  if (want_grad && dWt && N > 0) add_transposed(dWt, dW, V, C);
  return total;
}

}  // namespace nanochat
