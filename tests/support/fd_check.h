#pragma once
// Finite-difference gradient checks in double precision, shared by every finite-difference test
// (kernels, whole model).
// A kernel y = f(x) is checked through the scalar L(x) = sum(R * y(x)) for a fixed random R:
// its backward, fed dy = R, must give dL/dx, which is compared with central differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "nanochat/core/rng.h"

namespace nanochat::testing {

inline std::vector<double> random_vec(Rng& rng, size_t n, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

/// (f(eps) - f(-eps)) / (2 eps): the central-difference derivative of f at 0 (f(eps) first).
inline double central_difference(const std::function<double(double)>& f, double eps) {
  const double lp = f(eps);
  const double lm = f(-eps);
  return (lp - lm) / (2 * eps);
}

/// d loss / d x[i] by central differences: x[i] moved to x[i] +- eps, then restored.
inline double fd_partial(std::vector<double>& x, size_t i, const std::function<double()>& loss, double eps) {
  const double x0 = x[i];
  const double d = central_difference(
      [&](double t) {
        x[i] = x0 + t;
        return loss();
      },
      eps);
  x[i] = x0;
  return d;
}

/// fd_partial for every element of x.
inline std::vector<double> fd_gradient(std::vector<double>& x, const std::function<double()>& loss, double eps = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) g[i] = fd_partial(x, i, loss, eps);
  return g;
}

/// Compares analytic[i] with fd_partial(x, i, loss, eps) for every i (x is restored afterwards).
/// Tolerance: |fd - an| <= atol + rtol * max(|fd|, |an|).
inline void expect_fd_grad(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                           const std::function<double()>& loss, double eps = 1e-6, double rtol = 1e-6,
                           double atol = 1e-8) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    const double fd = fd_partial(x, i, loss, eps);
    const double err = std::fabs(fd - analytic[i]);
    const double tol = atol + rtol * std::max(std::fabs(fd), std::fabs(analytic[i]));
    EXPECT_LE(err, tol) << what << "[" << i << "]: finite difference " << fd << " vs backward " << analytic[i];
    if (err > tol) return;  // one message per tensor is enough
  }
}

}  // namespace nanochat::testing
