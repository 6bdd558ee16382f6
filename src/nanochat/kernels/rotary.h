#pragma once
// Rotary position embeddings, nanochat's variant (docs/nanochat.md 1.5): base 100000, half-split
// (NeoX-style) pairs (x[j], x[j + D/2]), and the sign convention
//   out1 = x1*cos + x2*sin,   out2 = -x1*sin + x2*cos       (a rotation by -angle)
// with angle(t, j) = t * inv_freq_j, inv_freq_j = 1 / base^(2j/D). Backward is the inverse
// rotation: dx1 = dy1*cos - dy2*sin, dx2 = dy1*sin + dy2*cos.
// Plus the fused attention pre-processing of nanochat's CausalSelfAttention: rotary, then
// per-head RMS norm over D, times 1.2 (docs/nanochat.md 1.3, attention sub-block step 3), reading a strided input (the
// q/k columns of a fused qkv projection) and writing a contiguous (B, T, heads, D) output.
#include <cstdint>

namespace nanochat {

/// nanochat's rotary base.
inline constexpr double kRotaryBase = 100000.0;

/// Fills cos, sin: (rows, D/2) row-major, row t = position t. For float the arithmetic follows
/// nanochat's fp32 recipe (exponent (2j as float)/D in fp32, fp32 angle product t*inv_freq);
/// double computes everything in double. D must be even.
template <typename T>
void rotary_table(T* cos, T* sin, int64_t rows, int64_t D, double base = kRotaryBase);

/// In-place rotary on x: (B, T, H, D) row-major; position of (b, t) is pos0 + t (table rows).
template <typename T>
void rotary_forward(T* x, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D, int64_t pos0 = 0);
/// In-place inverse rotation of the gradient dx: (B, T, H, D).
template <typename T>
void rotary_backward(T* dx, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D, int64_t pos0 = 0);

/// Fused y = scale * rmsnorm(rotary(x)) per head. x: rows of nh*D values with leading dimension
/// ld_x (token n = b*T + t at x + n*ld_x); y: (B, T, nh, D) contiguous; rstd: (B*T*nh) receives
/// the per-head rho. Position of token (b, t) is pos0 + t.
template <typename T>
void rope_qknorm_forward(const T* x, int64_t ld_x, T* y, T* rstd, const T* cos, const T* sin, int64_t B, int64_t T_,
                         int64_t nh, int64_t D, int64_t pos0, T eps, T scale);
/// Backward of rope_qknorm_forward: y, rstd as saved, dy: (B, T, nh, D) contiguous; dx (written,
/// not accumulated) has leading dimension ld_dx.
template <typename T>
void rope_qknorm_backward(const T* y, const T* rstd, const T* dy, T* dx, int64_t ld_dx, const T* cos, const T* sin,
                          int64_t B, int64_t T_, int64_t nh, int64_t D, int64_t pos0, T scale);

}  // namespace nanochat
