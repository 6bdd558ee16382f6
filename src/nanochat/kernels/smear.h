#pragma once
// nanochat's "smear": previous-token mixing of the normalised token embedding (docs/nanochat.md 1.3
// step 2, backward 1.7). For each row b and t >= 1:
//   u_t = sum_{c<24} w[c] * e_t[c],  g_t = lambda * sigmoid(u_t),  s_t = e_t + g_t * e_{t-1};
//   s_0 = e_0.
// w is smear_gate.weight (1, 24), lambda is smear_lambda.
#include <cstdint>

namespace nanochat {

/// Number of leading channels the smear gate reads.
inline constexpr int kSmearChannels = 24;

/// e, s: (B, T, C) row-major (must not alias); sig: (B*T) receives sigmoid(u_t) (0 at t = 0).
template <typename T>
void smear_forward(const T* e, const T* w, T lambda, T* s, T* sig, int64_t B, int64_t T_, int64_t C);

/// Backward. ds: (B, T, C) gradient at s; de: (B, T, C) receives the gradient at e (overwritten;
/// must not alias ds). dw (24 values) and dlambda (1 value) are accumulated (+=).
template <typename T>
void smear_backward(const T* e, const T* w, T lambda, const T* sig, const T* ds, T* de, T* dw, T* dlambda, int64_t B,
                    int64_t T_, int64_t C);

/// One decode step with a previous embedding (docs/nanochat.md 1.10, T == 1 with a KV cache):
/// s = e + lambda * sigmoid(w . e[:24]) * prev, for B rows of C. s may alias e.
template <typename T>
void smear_step(const T* e, const T* prev, const T* w, T lambda, T* s, int64_t B, int64_t C);

}  // namespace nanochat
