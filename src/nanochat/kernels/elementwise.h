#pragma once
// Elementwise pieces of the nanochat block and trunk (docs/nanochat.md 1.3, backward 1.7):
// relu^2 MLP activation, per-layer residual mixing h_in = r*h + a*x0 with scalar lambdas, and the
// small vector helpers used for backout (h_f = h - beta*hb). OpenMP over elements.
#include <cstdint>

namespace nanochat {

/// a[i] = max(f[i], 0)^2 for n values (a may alias f).
template <typename T>
void relu2_forward(const T* f, T* a, int64_t n);
/// df[i] = da[i] * 2 * max(f[i], 0) (df may alias da, not f).
template <typename T>
void relu2_backward(const T* f, const T* da, T* df, int64_t n);

/// out = r*h + a*x0 over n values (nanochat's resid_lambdas[i] / x0_lambdas[i] mixing).
template <typename T>
void lambda_mix_forward(const T* h, const T* x0, T r, T a, T* out, int64_t n);
/// Backward of lambda_mix_forward. dout: gradient at out, on return holds r*dout (= the gradient
/// at h); dx0 += a*dout; *dr += sum(dout*h); *da += sum(dout*x0) (double accumulators).
template <typename T>
void lambda_mix_backward(const T* h, const T* x0, T r, T a, T* dout, T* dx0, double* dr, double* da, int64_t n);

/// y[i] += alpha * x[i].
template <typename T>
void axpy(T alpha, const T* x, T* y, int64_t n);
/// out[i] = x[i] + alpha * y[i] (out may alias x or y).
template <typename T>
void add_scaled(const T* x, T alpha, const T* y, T* out, int64_t n);
/// sum(x[i] * y[i]) accumulated in double.
template <typename T>
double dot(const T* x, const T* y, int64_t n);

}  // namespace nanochat
