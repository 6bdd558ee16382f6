#include "nanochat/kernels/rotary.h"

#include <cmath>
#include <type_traits>

#include "nanochat/kernels/rmsnorm.h"

namespace nanochat {

namespace {

template <typename T>
inline void rotate_row(const T* x, T* y, const T* c, const T* s, int64_t half) {
  // x and y may alias: read both halves before writing.
#pragma omp simd
  for (int64_t j = 0; j < half; ++j) {
    const T x1 = x[j], x2 = x[j + half];
    y[j] = x1 * c[j] + x2 * s[j];
    y[j + half] = x2 * c[j] - x1 * s[j];
  }
}

template <typename T>
inline void unrotate_row(const T* dy, T* dx, const T* c, const T* s, int64_t half) {
#pragma omp simd
  for (int64_t j = 0; j < half; ++j) {
    const T d1 = dy[j], d2 = dy[j + half];
    dx[j] = d1 * c[j] - d2 * s[j];
    dx[j + half] = d1 * s[j] + d2 * c[j];
  }
}

}  // namespace

template <typename T>
void rotary_table(T* cos, T* sin, int64_t rows, int64_t D, double base) {
  const int64_t half = D / 2;
  if constexpr (std::is_same_v<T, float>) {
    // nanochat: inv_freq = 1 / base ** (arange(0, D, 2, fp32) / D); freqs = outer(arange(T), inv_freq)
#pragma omp parallel for schedule(guided) if (rows * half > 65536)
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < half; ++j) {
        const float expo = static_cast<float>(2 * j) / static_cast<float>(D);
        const float inv_freq = 1.0f / std::pow(static_cast<float>(base), expo);
        const float ang = static_cast<float>(t) * inv_freq;
        cos[t * half + j] = std::cos(ang);
        sin[t * half + j] = std::sin(ang);
      }
  } else {
#pragma omp parallel for schedule(guided) if (rows * half > 65536)
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < half; ++j) {
        const double inv_freq = 1.0 / std::pow(base, static_cast<double>(2 * j) / D);
        const double ang = static_cast<double>(t) * inv_freq;
        cos[t * half + j] = static_cast<T>(std::cos(ang));
        sin[t * half + j] = static_cast<T>(std::sin(ang));
      }
  }
}

namespace {

// Applies row_op(row, cos_t, sin_t, half) in place to every (b, t, h) row of a (B, T, H, D)
// row-major tensor; row t uses the table row pos0 + t.
template <typename T, typename RowOp>
void for_each_rotary_row(T* x, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D, int64_t pos0,
                         RowOp row_op) {
  const int64_t half = D / 2;
#pragma omp parallel for collapse(2) schedule(guided) if (B * T_ * H * D > 32768)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const T* c = cos + (pos0 + t) * half;
      const T* s = sin + (pos0 + t) * half;
      for (int64_t h = 0; h < H; ++h) {
        T* row = x + ((b * T_ + t) * H + h) * D;
        row_op(row, c, s, half);
      }
    }
}

}  // namespace

template <typename T>
void rotary_forward(T* x, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D, int64_t pos0) {
  for_each_rotary_row(x, cos, sin, B, T_, H, D, pos0,
                      [](T* row, const T* c, const T* s, int64_t half) { rotate_row(row, row, c, s, half); });
}

template <typename T>
void rotary_backward(T* dx, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D, int64_t pos0) {
  for_each_rotary_row(dx, cos, sin, B, T_, H, D, pos0,
                      [](T* row, const T* c, const T* s, int64_t half) { unrotate_row(row, row, c, s, half); });
}

template <typename T>
void rope_qknorm_forward(const T* x, int64_t ld_x, T* y, T* rstd, const T* cos, const T* sin, int64_t B, int64_t T_,
                         int64_t nh, int64_t D, int64_t pos0, T eps, T scale) {
  const int64_t half = D / 2;
#pragma omp parallel for collapse(2) schedule(guided) if (B * T_ * nh * D > 32768)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t n = b * T_ + t;
      const T* c = cos + (pos0 + t) * half;
      const T* s = sin + (pos0 + t) * half;
      for (int64_t h = 0; h < nh; ++h) {
        T* out = y + (n * nh + h) * D;
        rotate_row(x + n * ld_x + h * D, out, c, s, half);
        rstd[n * nh + h] = detail::rmsnorm_row(out, out, D, eps, scale);
      }
    }
}

template <typename T>
void rope_qknorm_backward(const T* y, const T* rstd, const T* dy, T* dx, int64_t ld_dx, const T* cos, const T* sin,
                          int64_t B, int64_t T_, int64_t nh, int64_t D, int64_t pos0, T scale) {
  const int64_t half = D / 2;
#pragma omp parallel for collapse(2) schedule(guided) if (B * T_ * nh * D > 32768)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t n = b * T_ + t;
      const T* c = cos + (pos0 + t) * half;
      const T* s = sin + (pos0 + t) * half;
      for (int64_t h = 0; h < nh; ++h) {
        T* out = dx + n * ld_dx + h * D;
        const int64_t r = n * nh + h;
        detail::rmsnorm_row_bwd(y + r * D, rstd[r], dy + r * D, out, D, scale, false);
        unrotate_row(out, out, c, s, half);
      }
    }
}

#define NC_INSTANTIATE(T)                                                                                        \
  template void rotary_table<T>(T*, T*, int64_t, int64_t, double);                                               \
  template void rotary_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t);          \
  template void rotary_backward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t);         \
  template void rope_qknorm_forward<T>(const T*, int64_t, T*, T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                       int64_t, int64_t, T, T);                                                  \
  template void rope_qknorm_backward<T>(const T*, const T*, const T*, T*, int64_t, const T*, const T*, int64_t,  \
                                        int64_t, int64_t, int64_t, int64_t, T);
NC_INSTANTIATE(float)
NC_INSTANTIATE(double)
#undef NC_INSTANTIATE

}  // namespace nanochat
