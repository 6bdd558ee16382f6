#pragma once
// Weight-less RMS norm over the last dimension (docs/nanochat.md 1.4): y = scale * x * rho,
// rho = (mean(x^2) + eps)^(-1/2). nanochat uses eps = 2^-23 (fp32 machine epsilon, F.rms_norm with
// eps unset) and scale = 1, or scale = 1.2 for the QK norm (docs/nanochat.md 1.3, attention sub-block step 3).
// Backward (docs/nanochat.md 1.7): with yhat = x * rho, dx = scale * rho * (dy - yhat * mean(dy * yhat)).
// Kernels are templates instantiated for float (the model) and double (finite-difference tests).
#include <cmath>
#include <cstdint>

namespace nanochat {

/// nanochat's RMS norm epsilon: 2^-23 = 1.1920928955078125e-07.
inline constexpr float kRmsNormEps = 1.1920928955078125e-07f;

/// x, y: (N, D) row-major (y may alias x); rstd: (N) receives rho per row (for the backward).
template <typename T>
void rmsnorm_forward(const T* x, T* y, T* rstd, int64_t N, int64_t D, T eps, T scale = T(1));

/// y, rstd: as written by rmsnorm_forward with the same scale; dy: (N, D) upstream gradient.
/// dx: (N, D) receives the input gradient; if accumulate, it is added to dx instead.
/// dx may alias dy when !accumulate.
template <typename T>
void rmsnorm_backward(const T* y, const T* rstd, const T* dy, T* dx, int64_t N, int64_t D, T scale = T(1),
                      bool accumulate = false);

namespace detail {
/// One row of the forward (shared by rmsnorm and the fused rotary + QK-norm kernel).
template <typename T>
inline T rmsnorm_row(const T* x, T* y, int64_t D, T eps, T scale) {
  T ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t j = 0; j < D; ++j) ss += x[j] * x[j];
  const T rho = T(1) / std::sqrt(ss / T(D) + eps);
  const T f = rho * scale;
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) y[j] = x[j] * f;
  return rho;
}
/// One row of the backward; dx overwritten (aliasing dx == dy allowed) or accumulated.
template <typename T>
inline void rmsnorm_row_bwd(const T* y, T rho, const T* dy, T* dx, int64_t D, T scale, bool accumulate) {
  T dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < D; ++j) dot += dy[j] * y[j];
  // yhat = y/s: dx = s*rho*(dy - yhat*mean(dy*yhat)) = s*rho*dy - rho*y*dot/(s*D)
  const T a = scale * rho;
  const T b = rho * dot / (scale * T(D));
  if (accumulate) {
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) dx[j] += a * dy[j] - b * y[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) dx[j] = a * dy[j] - b * y[j];
  }
}
}  // namespace detail

}  // namespace nanochat
