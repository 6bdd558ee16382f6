// Tests for kernels/elementwise: relu^2 and lambda mixing (closed form, finite differences of the
// backward in double), and dot / axpy / add_scaled on the parallel path.
#include "nanochat/kernels/elementwise.h"

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

TEST(Relu2, BackwardMatchesFiniteDifferences) {
  Rng rng(11);
  const int64_t n = 40;
  Vec f = random_vec(rng, n), R = random_vec(rng, n);
  for (auto& v : f)
    if (std::fabs(v) < 0.05) v = 0.3;  // keep away from the kink
  auto loss = [&] {
    Vec a(n);
    relu2_forward(f.data(), a.data(), n);
    return dot(R, a);
  };
  Vec a(n), df(n);
  relu2_forward(f.data(), a.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a[i], f[i] > 0 ? f[i] * f[i] : 0.0);
  relu2_backward(f.data(), R.data(), df.data(), n);
  expect_fd_grad("relu2 df", f, df, loss);
}

TEST(LambdaMix, BackwardMatchesFiniteDifferences) {
  Rng rng(12);
  const int64_t n = 30;
  Vec h = random_vec(rng, n), x0 = random_vec(rng, n), R = random_vec(rng, n);
  Vec r = {1.13}, a = {0.17};
  auto loss = [&] {
    Vec out(n);
    lambda_mix_forward(h.data(), x0.data(), r[0], a[0], out.data(), n);
    return dot(R, out);
  };
  Vec dout = R, dx0(n, 0.0);
  double dr = 0, da = 0;
  lambda_mix_backward(h.data(), x0.data(), r[0], a[0], dout.data(), dx0.data(), &dr, &da, n);
  Vec drv = {dr}, dav = {da};
  expect_fd_grad("mix dh", h, dout, loss);
  expect_fd_grad("mix dx0", x0, dx0, loss);
  expect_fd_grad("mix dr", r, drv, loss);
  expect_fd_grad("mix da", a, dav, loss);
}

TEST(Elementwise, DotAxpyAddScaled) {
  const int64_t n = 100000;  // parallel path
  std::vector<float> x(n), y(n), out(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 7) - 3.f;
    y[i] = static_cast<float>(i % 5) * 0.5f;
  }
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += double(x[i]) * y[i];
  EXPECT_NEAR(dot(x.data(), y.data(), n), want, 1e-9 * std::fabs(want) + 1e-9);
  add_scaled(x.data(), -0.5f, y.data(), out.data(), n);
  for (int64_t i = 0; i < n; i += 997) EXPECT_FLOAT_EQ(out[i], x[i] - 0.5f * y[i]);
  axpy(2.f, x.data(), y.data(), n);
  for (int64_t i = 0; i < n; i += 997) EXPECT_FLOAT_EQ(y[i], static_cast<float>(i % 5) * 0.5f + 2.f * x[i]);
}
