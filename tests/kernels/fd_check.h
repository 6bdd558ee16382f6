#pragma once
// Finite-difference gradient checks in double precision for the kernel tests.
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

/// Compares analytic[i] with (loss(x + eps e_i) - loss(x - eps e_i)) / (2 eps) for every i
/// (x is restored afterwards). Tolerance: |fd - an| <= atol + rtol * max(|fd|, |an|).
inline void expect_fd_grad(const std::string& what, std::vector<double>& x,
                           const std::vector<double>& analytic, const std::function<double()>& loss,
                           double eps = 1e-6, double rtol = 1e-6, double atol = 1e-8) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + eps;
    const double lp = loss();
    x[i] = x0 - eps;
    const double lm = loss();
    x[i] = x0;
    const double fd = (lp - lm) / (2 * eps);
    const double err = std::fabs(fd - analytic[i]);
    const double tol = atol + rtol * std::max(std::fabs(fd), std::fabs(analytic[i]));
    worst = std::max(worst, err / tol);
    EXPECT_LE(err, tol) << what << "[" << i << "]: finite difference " << fd << " vs backward "
                        << analytic[i];
    if (err > tol) return;  // one message per tensor is enough
  }
}

}  // namespace nanochat::testing
