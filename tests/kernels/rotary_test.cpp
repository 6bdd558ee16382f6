// Tests for kernels/rotary: the cos/sin table, the sign convention and norm preservation of the
// rotation, finite differences of its backward in double, and the fused rotary + QK norm (finite
// differences with strided input, equality with rotary then rmsnorm).
#include "nanochat/kernels/rotary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "nanochat/core/rng.h"
#include "nanochat/kernels/rmsnorm.h"
#include "support/fd_check.h"

using namespace nanochat;
using nanochat::testing::dot;
using nanochat::testing::expect_fd_grad;
using nanochat::testing::random_vec;
using Vec = std::vector<double>;

TEST(Rotary, TableMatchesDefinition) {
  const int64_t rows = 512, D = 16, half = D / 2;
  std::vector<double> c(rows * half), s(rows * half);
  std::vector<float> cf(rows * half), sf(rows * half);
  rotary_table(c.data(), s.data(), rows, D);
  rotary_table(cf.data(), sf.data(), rows, D);
  for (int64_t t : {int64_t{0}, int64_t{1}, int64_t{77}, int64_t{511}})
    for (int64_t j = 0; j < half; ++j) {
      const double ang = t / std::pow(100000.0, 2.0 * j / D);
      EXPECT_NEAR(c[t * half + j], std::cos(ang), 1e-12);
      EXPECT_NEAR(s[t * half + j], std::sin(ang), 1e-12);
      // fp32 table: the angle is an fp32 product, so allow its rounding (~ulp(511) / 2)
      EXPECT_NEAR(cf[t * half + j], std::cos(ang), 1e-4);
      EXPECT_NEAR(sf[t * half + j], std::sin(ang), 1e-4);
    }
}

TEST(Rotary, SignConventionAndNormPreservation) {
  Rng rng(3);
  const int64_t B = 2, T = 3, H = 2, D = 8, half = D / 2, pos0 = 5;
  std::vector<double> c(16 * half), s(16 * half);
  rotary_table(c.data(), s.data(), 16, D);
  Vec x = random_vec(rng, B * T * H * D), y = x;
  rotary_forward(y.data(), c.data(), s.data(), B, T, H, D, pos0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t o = ((b * T + t) * H + h) * D;
        for (int64_t j = 0; j < half; ++j) {
          const double ang = (pos0 + t) / std::pow(100000.0, 2.0 * j / D);
          const double x1 = x[o + j], x2 = x[o + j + half];
          // nanochat: out1 = x1 cos + x2 sin, out2 = -x1 sin + x2 cos
          EXPECT_NEAR(y[o + j], x1 * std::cos(ang) + x2 * std::sin(ang), 1e-12);
          EXPECT_NEAR(y[o + j + half], -x1 * std::sin(ang) + x2 * std::cos(ang), 1e-12);
          EXPECT_NEAR(y[o + j] * y[o + j] + y[o + j + half] * y[o + j + half], x1 * x1 + x2 * x2, 1e-12);
        }
      }
  // position 0 is the identity
  Vec z = x;
  rotary_forward(z.data(), c.data(), s.data(), 1, 1, 1, D, 0);
  for (int64_t j = 0; j < D; ++j) EXPECT_DOUBLE_EQ(z[j], x[j]);
}

TEST(Rotary, BackwardMatchesFiniteDifferences) {
  Rng rng(4);
  const int64_t B = 2, T = 3, H = 2, D = 8, half = D / 2, pos0 = 2;
  std::vector<double> c(8 * half), s(8 * half);
  rotary_table(c.data(), s.data(), 8, D);
  Vec x = random_vec(rng, B * T * H * D), R = random_vec(rng, x.size());
  auto loss = [&] {
    Vec y = x;
    rotary_forward(y.data(), c.data(), s.data(), B, T, H, D, pos0);
    return dot(R, y);
  };
  Vec dx = R;
  rotary_backward(dx.data(), c.data(), s.data(), B, T, H, D, pos0);
  expect_fd_grad("rotary dx", x, dx, loss);
}

TEST(RopeQkNorm, BackwardMatchesFiniteDifferencesWithStridedInput) {
  Rng rng(5);
  const int64_t B = 2, T = 3, nh = 2, D = 8, half = D / 2, pos0 = 1, ld = nh * D + 5;
  const double scale = 1.2, eps = kRmsNormEps;
  std::vector<double> c(8 * half), s(8 * half);
  rotary_table(c.data(), s.data(), 8, D);
  Vec x = random_vec(rng, B * T * ld), R = random_vec(rng, B * T * nh * D);
  auto loss = [&] {
    Vec y(B * T * nh * D), r(B * T * nh);
    rope_qknorm_forward(x.data(), ld, y.data(), r.data(), c.data(), s.data(), B, T, nh, D, pos0, eps, scale);
    return dot(R, y);
  };
  Vec y(B * T * nh * D), rstd(B * T * nh);
  rope_qknorm_forward(x.data(), ld, y.data(), rstd.data(), c.data(), s.data(), B, T, nh, D, pos0, eps, scale);
  Vec dx(B * T * ld, 7.0);  // padding columns must stay untouched
  rope_qknorm_backward(y.data(), rstd.data(), R.data(), dx.data(), ld, c.data(), s.data(), B, T, nh, D, pos0, scale);
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t j = nh * D; j < ld; ++j) {
      EXPECT_EQ(dx[n * ld + j], 7.0);
      dx[n * ld + j] = 0.0;  // the loss does not depend on these inputs
    }
  expect_fd_grad("rope_qknorm dx", x, dx, loss);
  // forward = rmsnorm(rotary(x)) * 1.2 per head, each head has RMS 1.2
  for (int64_t r = 0; r < B * T * nh; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += y[r * D + j] * y[r * D + j];
    EXPECT_NEAR(std::sqrt(ss / D), 1.2, 1e-6);
  }
}

TEST(RopeQkNorm, FusedEqualsComposition) {
  Rng rng(6);
  const int64_t B = 1, T = 4, nh = 3, D = 16, half = D / 2;
  std::vector<float> c(8 * half), s(8 * half);
  rotary_table(c.data(), s.data(), 8, D);
  std::vector<float> x(B * T * nh * D);
  for (auto& v : x) v = static_cast<float>(rng.uniform(-2, 2));
  std::vector<float> fused(x.size()), rf(B * T * nh), comp = x, rc(B * T * nh);
  rope_qknorm_forward(x.data(), nh * D, fused.data(), rf.data(), c.data(), s.data(), B, T, nh, D, 0, kRmsNormEps, 1.2f);
  rotary_forward(comp.data(), c.data(), s.data(), B, T, nh, D, 0);
  rmsnorm_forward(comp.data(), comp.data(), rc.data(), B * T * nh, D, kRmsNormEps, 1.2f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(fused[i], comp[i]);
}
