#pragma once
// Vectorised exp and tanh for the hot loops of the fused softcap + cross-entropy (lm_head) and the
// gates. 16 fp32 lanes with AVX-512 when compiled for it (-march=native), 8 with AVX2 + FMA
// (-march=x86-64-v3, CMake NANOCHAT_ISA=avx2), scalar otherwise.
//
// exp(x): x = n*ln2 + r with n = round(x/ln2), |r| <= ln2/2 (ln2 split hi/lo, Cody & Waite 1980),
// e^r by its degree-7 Taylor polynomial (truncation error < 5.2e-9 relative), then scaled by 2^n.
// Max relative error ~2 ulp over [-87, 88]; below -87.3 the result flushes towards 0.
// tanh(x): odd Taylor series through x^15 for |x| < 0.5 (truncation < 1e-8 relative), and
// sign(x) * (1 - 2/(exp(2|x|) + 1)) otherwise (absolute error ~1.5e-7 there, relative < 4e-7).
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace nanochat::vecmath {

// Coefficients: 1/k! for the exp polynomial; Taylor coefficients of tanh (odd terms): the
// tangent-number series T_{2k-1} 2^{2k}(2^{2k}-1) / (2k)! with alternating signs.
inline constexpr float kLn2Hi = 0.693145751953125f;         // ln 2, upper bits (exact product n*hi)
inline constexpr float kLn2Lo = 1.428606765330187045e-06f;  // ln 2 - kLn2Hi
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kExpC[8] = {1.0f,         1.0f,          0.5f,          1.0f / 6.0f,
                                   1.0f / 24.0f, 1.0f / 120.0f, 1.0f / 720.0f, 1.0f / 5040.0f};
inline constexpr float kTanhC[8] = {1.0f,
                                    -1.0f / 3.0f,
                                    2.0f / 15.0f,
                                    -17.0f / 315.0f,
                                    62.0f / 2835.0f,
                                    -1382.0f / 155925.0f,
                                    21844.0f / 6081075.0f,
                                    -929569.0f / 638512875.0f};

/// Scalar exp with the same algorithm as the vector version (used for tails and tests).
inline float exp_scalar(float x) {
  if (std::isnan(x)) return x;
  if (x < -87.3f) return 0.f;
  if (x > 88.7f) x = 88.7f;
  const float n = std::nearbyint(x * kLog2e);
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = kExpC[7];
  for (int i = 6; i >= 0; --i) p = p * r + kExpC[i];
  return std::ldexp(p, static_cast<int>(n));
}

/// Scalar tanh with the same algorithm as the vector version.
inline float tanh_scalar(float x) {
  const float ax = std::fabs(x);
  float t;
  if (ax < 0.5f) {
    const float x2 = ax * ax;
    float p = kTanhC[7];
    for (int i = 6; i >= 0; --i) p = p * x2 + kTanhC[i];
    t = ax * p;
  } else {
    t = 1.f - 2.f / (exp_scalar(2.f * ax) + 1.f);
  }
  return std::copysign(t, x);
}

#if defined(__AVX512F__)
/// 16-lane exp (see file comment).
inline __m512 exp16(__m512 x) {
  const __m512 lo_mask_val = _mm512_set1_ps(-87.3f);
  // min/max return their second operand when either is NaN: NaN inputs propagate.
  x = _mm512_min_ps(_mm512_set1_ps(88.7f), x);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo_mask_val, _CMP_LT_OQ);
  x = _mm512_max_ps(lo_mask_val, x);
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpC[7]);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[6]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[5]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[4]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[3]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[2]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[1]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[0]));
  const __m512 res = _mm512_scalef_ps(p, n);
  return _mm512_mask_mov_ps(res, under, _mm512_setzero_ps());
}

/// 16-lane tanh (see file comment).
inline __m512 tanh16(__m512 x) {
  const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 ax = _mm512_andnot_ps(sign_mask, x);
  const __m512 sign = _mm512_and_ps(sign_mask, x);
  // small branch: odd polynomial
  const __m512 x2 = _mm512_mul_ps(ax, ax);
  __m512 p = _mm512_set1_ps(kTanhC[7]);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kTanhC[6]));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kTanhC[5]));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kTanhC[4]));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kTanhC[3]));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kTanhC[2]));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kTanhC[1]));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kTanhC[0]));
  const __m512 small = _mm512_mul_ps(ax, p);
  const __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.5f), _CMP_LT_OQ);
  if (is_small == 0xFFFF) return _mm512_or_ps(small, sign);  // common for logits: skip exp + div
  // large branch: 1 - 2 / (exp(2|x|) + 1)
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 e = exp16(_mm512_add_ps(ax, ax));
  const __m512 large = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.f), _mm512_add_ps(e, one)));
  const __m512 t = _mm512_mask_mov_ps(large, is_small, small);
  return _mm512_or_ps(t, sign);
}
#elif defined(__AVX2__) && defined(__FMA__)
/// 8-lane exp (see file comment), the algorithm of exp16. AVX2 has no scalef: 2^n is built in
/// the exponent field as 2^(n - n/2) * 2^(n/2), both factors normal for every n in [-126, 128].
inline __m256 exp8(__m256 x) {
  const __m256 lo_mask_val = _mm256_set1_ps(-87.3f);
  // min/max return their second operand when either is NaN: NaN inputs propagate.
  x = _mm256_min_ps(_mm256_set1_ps(88.7f), x);
  const __m256 under = _mm256_cmp_ps(x, lo_mask_val, _CMP_LT_OQ);
  x = _mm256_max_ps(lo_mask_val, x);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpC[7]);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC[6]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC[5]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC[4]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC[3]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC[2]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC[1]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC[0]));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  return _mm256_andnot_ps(under, res);
}

/// 8-lane tanh (see file comment), the algorithm of tanh16.
inline __m256 tanh8(__m256 x) {
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 ax = _mm256_andnot_ps(sign_mask, x);
  const __m256 sign = _mm256_and_ps(sign_mask, x);
  const __m256 x2 = _mm256_mul_ps(ax, ax);
  __m256 p = _mm256_set1_ps(kTanhC[7]);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kTanhC[6]));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kTanhC[5]));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kTanhC[4]));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kTanhC[3]));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kTanhC[2]));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kTanhC[1]));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kTanhC[0]));
  const __m256 small = _mm256_mul_ps(ax, p);
  const __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.5f), _CMP_LT_OQ);
  if (_mm256_movemask_ps(is_small) == 0xFF) return _mm256_or_ps(small, sign);  // skip exp + div
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 e = exp8(_mm256_add_ps(ax, ax));
  const __m256 large = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(e, one)));
  return _mm256_or_ps(_mm256_blendv_ps(large, small, is_small), sign);
}
#endif

/// y[i] = exp(x[i]) for n values (vectorised; in-place allowed).
void exp_array(const float* x, float* y, int64_t n);
/// y[i] = tanh(x[i]) for n values (vectorised; in-place allowed).
void tanh_array(const float* x, float* y, int64_t n);

}  // namespace nanochat::vecmath
