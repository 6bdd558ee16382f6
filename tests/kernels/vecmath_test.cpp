// Tests for kernels/vecmath: accuracy of the vectorised and scalar exp and tanh over their ranges,
// underflow and NaN.
#include "nanochat/kernels/vecmath.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace nanochat;

TEST(VecMath, ExpAccuracy) {
  std::vector<float> x, y;
  for (double v = -87.0; v <= 88.0; v += 0.01237) x.push_back(static_cast<float>(v));
  x.push_back(0.f);
  y.resize(x.size());
  vecmath::exp_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::fabs(y[i] - want) / want);
    EXPECT_NEAR(vecmath::exp_scalar(x[i]), want, 3e-7 * want);
  }
  EXPECT_LT(worst, 3e-7);
  float big[3] = {-100.f, -1e30f, NAN};
  vecmath::exp_array(big, big, 3);
  EXPECT_EQ(big[0], 0.f);
  EXPECT_EQ(big[1], 0.f);
  EXPECT_TRUE(std::isnan(big[2]));
}

TEST(VecMath, TanhAccuracy) {
  std::vector<float> x, y;
  for (double v = -20.0; v <= 20.0; v += 0.00731) x.push_back(static_cast<float>(v));
  for (double v = 1e-8; v < 1; v *= 1.7) {
    x.push_back(static_cast<float>(v));
    x.push_back(static_cast<float>(-v));
  }
  y.resize(x.size());
  vecmath::tanh_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::tanh(static_cast<double>(x[i]));
    EXPECT_NEAR(y[i], want, 5e-7 * std::fabs(want) + 1e-30) << x[i];
    EXPECT_NEAR(vecmath::tanh_scalar(x[i]), want, 5e-7 * std::fabs(want) + 1e-30) << x[i];
  }
  float n[1] = {NAN};
  vecmath::tanh_array(n, n, 1);
  EXPECT_TRUE(std::isnan(n[0]));
}
