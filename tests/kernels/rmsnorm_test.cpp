// Tests for kernels/rmsnorm: finite differences of the backward in double (plain and accumulating),
// unit RMS of the output, the in-place forward.
#include "nanochat/kernels/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "nanochat/core/rng.h"
#include "support/fd_check.h"

using namespace nanochat;
using nanochat::testing::dot;
using nanochat::testing::expect_fd_grad;
using nanochat::testing::random_vec;
using Vec = std::vector<double>;

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  Rng rng(1);
  const int64_t N = 3, D = 8;
  for (double scale : {1.0, 1.2}) {
    Vec x = random_vec(rng, N * D), R = random_vec(rng, N * D);
    const double eps = kRmsNormEps;
    auto loss = [&] {
      Vec y(N * D), r(N);
      rmsnorm_forward(x.data(), y.data(), r.data(), N, D, eps, scale);
      return dot(R, y);
    };
    Vec y(N * D), rstd(N), dx(N * D);
    rmsnorm_forward(x.data(), y.data(), rstd.data(), N, D, eps, scale);
    rmsnorm_backward(y.data(), rstd.data(), R.data(), dx.data(), N, D, scale);
    expect_fd_grad("rmsnorm dx", x, dx, loss);
    // accumulate mode adds to what is there
    Vec acc(N * D, 0.25);
    rmsnorm_backward(y.data(), rstd.data(), R.data(), acc.data(), N, D, scale, true);
    for (int64_t i = 0; i < N * D; ++i) EXPECT_NEAR(acc[i], 0.25 + dx[i], 1e-14);
  }
}

TEST(RmsNorm, OutputHasUnitRms) {
  Rng rng(2);
  const int64_t N = 5, D = 64;
  std::vector<float> x(N * D), y(N * D), rstd(N);
  for (auto& v : x) v = static_cast<float>(rng.uniform(-3, 3));
  rmsnorm_forward(x.data(), y.data(), rstd.data(), N, D, kRmsNormEps);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0, xs = 0;
    for (int64_t j = 0; j < D; ++j) {
      ss += double(y[n * D + j]) * y[n * D + j];
      xs += double(x[n * D + j]) * x[n * D + j];
    }
    EXPECT_NEAR(std::sqrt(ss / D), 1.0, 1e-6);
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(xs / D + kRmsNormEps), 1e-5 * rstd[n]);
  }
  EXPECT_EQ(kRmsNormEps, 1.1920928955078125e-07f);
  // in place (y aliases x) gives the same result
  std::vector<float> z = x, r2(N);
  rmsnorm_forward(z.data(), z.data(), r2.data(), N, D, kRmsNormEps);
  for (int64_t i = 0; i < N * D; ++i) EXPECT_EQ(z[i], y[i]);
}
