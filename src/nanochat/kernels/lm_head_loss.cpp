#include "nanochat/kernels/lm_head_loss.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/gemm_bf16.h"
#include "nanochat/kernels/vecmath.h"

// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_ps(), which trips
// -W(maybe-)uninitialized false positives once inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace nanochat {

namespace {

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
// The AVX2 pass over row[0, n) in whole 8-lane vectors (j is left at the first value it did not
// process): returns the sum of e = exp(cap*t - cap), t = tanh(l/cap), and overwrites the row with
// q = e * (1 - t^2) (Store::kQ), z = cap*t (Store::kZ) or nothing (Store::kNone). Two vectors per step,
// two accumulators.
enum class Store { kNone, kQ, kZ };
float softcap_ce_avx2(float* row, int64_t n, float cap, Store store, int64_t& j) {
  const __m256 vcap = _mm256_set1_ps(cap), vinv = _mm256_set1_ps(1.f / cap), one = _mm256_set1_ps(1.f);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  auto step = [&](float* p, __m256& acc) {
    const __m256 t = vecmath::tanh8(_mm256_mul_ps(_mm256_loadu_ps(p), vinv));
    const __m256 e = vecmath::exp8(_mm256_fmsub_ps(vcap, t, vcap));  // exp(cap*t - cap)
    acc = _mm256_add_ps(acc, e);
    if (store == Store::kQ) _mm256_storeu_ps(p, _mm256_mul_ps(e, _mm256_fnmadd_ps(t, t, one)));
    if (store == Store::kZ) _mm256_storeu_ps(p, _mm256_mul_ps(vcap, t));
  };
  for (; j + 16 <= n; j += 16) {
    step(row + j, acc0);
    step(row + j + 8, acc1);
  }
  for (; j + 8 <= n; j += 8) step(row + j, acc0);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(acc0, acc1));
  float total = 0.f;
  for (float v : lanes) total += v;
  return total;
}
#endif

// float row kernel: vectorised (AVX-512 or AVX2 when available, the same algorithm in scalar
// otherwise).
// Pass 1 computes t = tanh(l/cap), z = cap*t and e = exp(z - cap) (z <= cap: no overflow) and
// sums e; with a gradient it stores q = e * (1 - t^2) in place, so that pass 2 is a scaling:
// dlogits = s * q / sum(e) (= s * softmax(z) * (1 - t^2)), minus s * (1 - t_y^2) at the target.
// Without a gradient it stores z.
double softcap_ce_row_f32(float* row, int64_t V, int32_t target, float cap, float grad_scale, bool want_grad) {
  const float inv_cap = 1.f / cap;
  // the target's softcapped logit, before the row is overwritten
  const float zt = target >= 0 ? cap * vecmath::tanh_scalar(row[target] * inv_cap) : 0.f;
  double sum;
  int64_t j = 0;
#if defined(__AVX512F__)
  {
    const __m512 vcap = _mm512_set1_ps(cap), vinv = _mm512_set1_ps(inv_cap), one = _mm512_set1_ps(1.f);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    auto step = [&](__m512 l, __m512& out) {
      const __m512 t = vecmath::tanh16(_mm512_mul_ps(l, vinv));
      const __m512 e = vecmath::exp16(_mm512_fmsub_ps(vcap, t, vcap));  // exp(cap*t - cap)
      out = want_grad ? _mm512_mul_ps(e, _mm512_fnmadd_ps(t, t, one)) : _mm512_mul_ps(vcap, t);
      return e;
    };
    for (; j + 32 <= V; j += 32) {
      __m512 o0, o1;
      acc0 = _mm512_add_ps(acc0, step(_mm512_loadu_ps(row + j), o0));
      acc1 = _mm512_add_ps(acc1, step(_mm512_loadu_ps(row + j + 16), o1));
      _mm512_storeu_ps(row + j, o0);
      _mm512_storeu_ps(row + j + 16, o1);
    }
    for (; j < V; j += 16) {
      const __mmask16 m = V - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (V - j)) - 1);
      __m512 o;
      acc0 = _mm512_add_ps(acc0, _mm512_maskz_mov_ps(m, step(_mm512_maskz_loadu_ps(m, row + j), o)));
      _mm512_mask_storeu_ps(row + j, m, o);
    }
    sum = static_cast<double>(_mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)));
  }
#else
  {
    float acc = 0.f;
#if defined(__AVX2__) && defined(__FMA__)
    acc = softcap_ce_avx2(row, V, cap, want_grad ? Store::kQ : Store::kZ, j);
#endif
    for (; j < V; ++j) {
      const float t = vecmath::tanh_scalar(row[j] * inv_cap);
      const float e = vecmath::exp_scalar(cap * t - cap);
      row[j] = want_grad ? e * (1.f - t * t) : cap * t;
      acc += e;
    }
    sum = acc;
  }
#endif
  const double lse = static_cast<double>(cap) + std::log(sum);
  if (target < 0) {
    if (want_grad) std::fill(row, row + V, 0.f);
    return 0.0;
  }
  const double loss = lse - static_cast<double>(zt);
  if (!want_grad) return loss;
  // pass 2: scale by s / sum(e); the one-hot term at the target
  const float f = static_cast<float>(static_cast<double>(grad_scale) / sum);
  j = 0;
#if defined(__AVX512F__)
  {
    const __m512 vf = _mm512_set1_ps(f);
    for (; j + 16 <= V; j += 16) _mm512_storeu_ps(row + j, _mm512_mul_ps(vf, _mm512_loadu_ps(row + j)));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  {
    const __m256 vf = _mm256_set1_ps(f);
    for (; j + 8 <= V; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(vf, _mm256_loadu_ps(row + j)));
  }
#endif
  for (; j < V; ++j) row[j] *= f;
  const float tt = zt * inv_cap;
  row[target] -= grad_scale * (1.f - tt * tt);
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
#pragma omp parallel for schedule(guided) if (n > 65536)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t i0 = blk * kBlock, i1 = std::min(n, i0 + kBlock);
    int64_t i = i0;
#if defined(__AVX512F__)
    const __m512 vcap = _mm512_set1_ps(cap), vinv = _mm512_set1_ps(inv_cap);
    for (; i + 16 <= i1; i += 16)
      _mm512_storeu_ps(z + i, _mm512_mul_ps(vcap, vecmath::tanh16(_mm512_mul_ps(_mm512_loadu_ps(z + i), vinv))));
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256 vcap = _mm256_set1_ps(cap), vinv = _mm256_set1_ps(inv_cap);
    for (; i + 8 <= i1; i += 8)
      _mm256_storeu_ps(z + i, _mm256_mul_ps(vcap, vecmath::tanh8(_mm256_mul_ps(_mm256_loadu_ps(z + i), vinv))));
#endif
    for (; i < i1; ++i) z[i] = cap * vecmath::tanh_scalar(z[i] * inv_cap);
  }
}

namespace {

// Pass over one segment of a row's raw logits (n values): sum of e = exp(cap*t - cap) with
// t = tanh(l/cap); if store_q, the segment is overwritten with q = e * (1 - t^2).
float softcap_segment(float* seg, int64_t n, float cap, bool store_q) {
  const float inv_cap = 1.f / cap;
  int64_t j = 0;
  float total = 0.f;
#if defined(__AVX512F__)
  const __m512 vcap = _mm512_set1_ps(cap), vinv = _mm512_set1_ps(inv_cap), one = _mm512_set1_ps(1.f);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; j + 32 <= n; j += 32) {
    const __m512 t0 = vecmath::tanh16(_mm512_mul_ps(_mm512_loadu_ps(seg + j), vinv));
    const __m512 t1 = vecmath::tanh16(_mm512_mul_ps(_mm512_loadu_ps(seg + j + 16), vinv));
    const __m512 e0 = vecmath::exp16(_mm512_fmsub_ps(vcap, t0, vcap));
    const __m512 e1 = vecmath::exp16(_mm512_fmsub_ps(vcap, t1, vcap));
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
    if (store_q) {
      _mm512_storeu_ps(seg + j, _mm512_mul_ps(e0, _mm512_fnmadd_ps(t0, t0, one)));
      _mm512_storeu_ps(seg + j + 16, _mm512_mul_ps(e1, _mm512_fnmadd_ps(t1, t1, one)));
    }
  }
  for (; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
    const __m512 t = vecmath::tanh16(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, seg + j), vinv));
    const __m512 e = _mm512_maskz_mov_ps(m, vecmath::exp16(_mm512_fmsub_ps(vcap, t, vcap)));
    acc0 = _mm512_add_ps(acc0, e);
    if (store_q) _mm512_mask_storeu_ps(seg + j, m, _mm512_mul_ps(e, _mm512_fnmadd_ps(t, t, one)));
  }
  total = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#else
#if defined(__AVX2__) && defined(__FMA__)
  total = softcap_ce_avx2(seg, n, cap, store_q ? Store::kQ : Store::kNone, j);
#endif
  for (; j < n; ++j) {
    const float t = vecmath::tanh_scalar(seg[j] * inv_cap);
    const float e = vecmath::exp_scalar(cap * t - cap);
    total += e;
    if (store_q) seg[j] = e * (1.f - t * t);
  }
#endif
  return total;
}

// Whether the fp32 weight gradient dWt = xs^T q runs as a plain product of the transposed scaled
// rows (xs^T stored (C, m)) instead of oneDNN's transposed-A product: measured faster with
// oneDNN's AVX2 kernels (the fused kernel at d4: 2.33-2.45 s against 2.51-2.64 s, +8%), slower
// with its AVX-512 ones (1.17-1.19 s against 1.09-1.16 s), bench/README.md "The lm_head's
// weight gradient on AVX2". Decided once, by the ISA oneDNN runs.
bool weight_grad_as_plain_product() {
  static const bool plain = std::strncmp(gemm_isa(), "avx512", 6) != 0;
  return plain;
}

}  // namespace

int64_t lm_head_scratch_floats(int64_t chunk_rows, int64_t N, int64_t C, int64_t V) {
  const int64_t cr = std::max<int64_t>(1, std::min(chunk_rows, N));
  return 2 * cr /* row sums (double) */ + 2 * cr /* z_target, scale */ + cr * C + cr * V;
}

int64_t lm_head_bf16_scratch(int64_t chunk_rows, int64_t N, int64_t C, int64_t V) {
  const int64_t cr = std::max<int64_t>(1, std::min(chunk_rows, N));
  return cr * (C + V);
}

double lm_head_softcap_ce(const float* x, const float* W, const int32_t* targets, int64_t N, int64_t C, int64_t V,
                          float cap, float grad_scale, float* scratch, int64_t chunk_rows, float* per_token_loss,
                          float* dx, float* dW, float* dWt, const LmHeadBf16* bf) {
  const bool want_grad = dx != nullptr;
  const int64_t cr = std::max<int64_t>(1, std::min(chunk_rows, N));
  double* row_sum = reinterpret_cast<double*>(scratch);  // scratch is 64-byte aligned
  float* zt = scratch + 2 * cr;
  float* scale = zt + cr;
  float* xs = scale + cr;
  float* q = xs + cr * C;
  const float inv_cap = 1.f / cap;
  const bool xs_transposed = dWt != nullptr && bf == nullptr && weight_grad_as_plain_product();
  bf16* xb = bf ? bf->scratch : nullptr;  // (cr, C): the chunk's x rows, then its scaled rows
  bf16* qb = bf ? xb + cr * C : nullptr;  // (cr, V): the chunk's dlogits
  double total = 0.0;
  for (int64_t r0 = 0; r0 < N; r0 += cr) {
    const int64_t m = std::min(cr, N - r0);
    const float* xr = x + r0 * C;
    const int32_t* tr = targets + r0;
    std::fill(row_sum, row_sum + m, 0.0);
    if (bf) to_bf16(xr, xb, m * C);
    // logits block by block (each block is consumed while it is hot in cache)
    for (int64_t j0 = 0; j0 < V; j0 += kLmHeadVocabBlock) {
      const int64_t nb = std::min(kLmHeadVocabBlock, V - j0);
      if (bf)
        bgemm(false, true, m, nb, C, xb, C, bf->W + j0 * C, C, 0.f, q + j0, V);
      else
        sgemm(false, true, m, nb, C, 1.f, xr, C, W + j0 * C, C, 0.f, q + j0, V);
#pragma omp parallel for schedule(guided) if (m * nb > 32768)
      for (int64_t i = 0; i < m; ++i) {
        float* seg = q + i * V + j0;
        const int32_t y = tr[i];
        if (y >= j0 && y < j0 + nb) zt[i] = cap * vecmath::tanh_scalar(seg[y - j0] * inv_cap);
        row_sum[i] += softcap_segment(seg, nb, cap, want_grad);
      }
    }
    // losses; dlogits = scale_i * q_i with the one-hot term folded into q at the target
    double chunk_sum = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : chunk_sum) if (m * C > 32768)
    for (int64_t i = 0; i < m; ++i) {
      const int32_t y = tr[i];
      double l = 0.0;
      float f = 0.f;
      if (y >= 0) {
        l = static_cast<double>(cap) + std::log(row_sum[i]) - static_cast<double>(zt[i]);
        if (want_grad) {
          f = static_cast<float>(static_cast<double>(grad_scale) / row_sum[i]);
          const float t = zt[i] * inv_cap;
          q[i * V + y] -= static_cast<float>((1.0 - static_cast<double>(t) * t) * row_sum[i]);
        }
      }
      if (per_token_loss) per_token_loss[r0 + i] = static_cast<float>(l);
      chunk_sum += l;
      scale[i] = f;
      if (want_grad && !xs_transposed)
        for (int64_t c = 0; c < C; ++c) xs[i * C + c] = f * xr[i * C + c];
    }
    // the scaled rows transposed, xs^T (C, m), where dWt's product runs faster as a plain one
    // (weight_grad_as_plain_product)
    if (want_grad && xs_transposed) {
#pragma omp parallel for schedule(static) if (m * C > 32768)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < m; ++i) xs[c * m + i] = scale[i] * xr[i * C + c];
    }
    total += chunk_sum;
    if (!want_grad) continue;
    // dx = diag(scale) (q W); dW += q^T diag(scale) x
    float* dxr = dx + r0 * C;
    if (bf) {
      to_bf16(q, qb, m * V);
      to_bf16(xs, xb, m * C);
      linear_bwd_x_bf16(qb, bf->W, dxr, m, C, V, 0.f);
    } else {
      linear_bwd_x(q, W, dxr, m, C, V, 0.f);
    }
#pragma omp parallel for schedule(guided) if (m * C > 32768)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < C; ++c) dxr[i * C + c] *= scale[i];
    if (bf && dWt)  // dWt (C, V) (+)= xs^T (C, m) * q (m, V)
      bgemm(true, false, C, V, m, xb, C, qb, V, r0 == 0 ? 0.f : 1.f, dWt, V);
    else if (bf)
      linear_bwd_w_bf16(qb, xb, dW, m, C, V);
    else if (dWt && xs_transposed)  // dWt (C, V) (+)= xs^T (C, m) * q (m, V), xs^T stored
      sgemm(false, false, C, V, m, 1.f, xs, m, q, V, r0 == 0 ? 0.f : 1.f, dWt, V);
    else if (dWt)
      sgemm(true, false, C, V, m, 1.f, xs, C, q, V, r0 == 0 ? 0.f : 1.f, dWt, V);
    else
      linear_bwd_w(q, xs, dW, m, C, V, 1.f);
  }
  if (want_grad && dWt && N > 0) add_transposed(dWt, dW, V, C);
  return total;
}

}  // namespace nanochat
