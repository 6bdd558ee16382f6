// Finite-difference (double precision) and closed-form checks of the model's elementwise kernels:
// rmsnorm, rotary, fused rotary + QK norm, embedding, smear, relu^2, lambda mixing, ve gate.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"
#include "nanochat/core/rng.h"
#include "nanochat/kernels/elementwise.h"
#include "nanochat/kernels/embedding.h"
#include "nanochat/kernels/rmsnorm.h"
#include "nanochat/kernels/rotary.h"
#include "nanochat/kernels/smear.h"
#include "nanochat/kernels/ve_gate.h"

using namespace nanochat;
using nanochat::testing::dot;
using nanochat::testing::expect_fd_grad;
using nanochat::testing::random_vec;
using Vec = std::vector<double>;

// ---------------------------------------------------------------------------------------------
// rmsnorm

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

// ---------------------------------------------------------------------------------------------
// rotary

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
          EXPECT_NEAR(y[o + j] * y[o + j] + y[o + j + half] * y[o + j + half], x1 * x1 + x2 * x2,
                      1e-12);
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
    rope_qknorm_forward(x.data(), ld, y.data(), r.data(), c.data(), s.data(), B, T, nh, D, pos0, eps,
                        scale);
    return dot(R, y);
  };
  Vec y(B * T * nh * D), rstd(B * T * nh);
  rope_qknorm_forward(x.data(), ld, y.data(), rstd.data(), c.data(), s.data(), B, T, nh, D, pos0,
                      eps, scale);
  Vec dx(B * T * ld, 7.0);  // padding columns must stay untouched
  rope_qknorm_backward(y.data(), rstd.data(), R.data(), dx.data(), ld, c.data(), s.data(), B, T, nh,
                       D, pos0, scale);
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
  rope_qknorm_forward(x.data(), nh * D, fused.data(), rf.data(), c.data(), s.data(), B, T, nh, D, 0,
                      kRmsNormEps, 1.2f);
  rotary_forward(comp.data(), c.data(), s.data(), B, T, nh, D, 0);
  rmsnorm_forward(comp.data(), comp.data(), rc.data(), B * T * nh, D, kRmsNormEps, 1.2f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(fused[i], comp[i]);
}

// ---------------------------------------------------------------------------------------------
// embedding

TEST(Embedding, ForwardGathersAndBackwardScatterAddsRepeatedTokens) {
  Rng rng(7);
  const int64_t rows = 6, C = 5, N = 7;
  const std::vector<int32_t> idx = {3, 1, 3, 0, 3, 5, 1};  // 3 three times, 1 twice, 2 and 4 never
  Vec table = random_vec(rng, rows * C), out(N * C);
  embedding_forward(idx.data(), table.data(), out.data(), N, C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(out[n * C + c], table[idx[n] * C + c]);
  Vec dout = random_vec(rng, N * C), dtable(rows * C, 0.5);
  embedding_backward(idx.data(), dout.data(), dtable.data(), N, C);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      double want = 0.5;
      for (int64_t n = 0; n < N; ++n)
        if (idx[n] == r) want += dout[n * C + c];
      EXPECT_NEAR(dtable[r * C + c], want, 1e-15) << "row " << r;
    }
}

TEST(Embedding, BackwardIsIndependentOfThreadCount) {
  Rng rng(8);
  const int64_t rows = 50, C = 300, N = 400;  // big enough for the parallel path
  std::vector<int32_t> idx(N);
  for (auto& i : idx) i = static_cast<int32_t>(rng.below(rows));
  std::vector<float> dout(N * C);
  for (auto& v : dout) v = static_cast<float>(rng.uniform(-1, 1));
  std::vector<float> d1(rows * C, 0.f), d2(rows * C, 0.f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  embedding_backward(idx.data(), dout.data(), d1.data(), N, C);
  omp_set_num_threads(3);
  embedding_backward(idx.data(), dout.data(), d2.data(), N, C);
  omp_set_num_threads(saved);
  for (size_t i = 0; i < d1.size(); ++i) ASSERT_EQ(d1[i], d2[i]);
}

// ---------------------------------------------------------------------------------------------
// smear

TEST(Smear, BackwardMatchesFiniteDifferences) {
  Rng rng(9);
  const int64_t B = 2, T = 4, C = 26;
  Vec e = random_vec(rng, B * T * C), w = random_vec(rng, kSmearChannels, -0.5, 0.5);
  Vec lam = {0.7};
  Vec R = random_vec(rng, B * T * C);
  auto loss = [&] {
    Vec s(B * T * C), sig(B * T);
    smear_forward(e.data(), w.data(), lam[0], s.data(), sig.data(), B, T, C);
    return dot(R, s);
  };
  Vec s(B * T * C), sig(B * T), de(B * T * C), dw(kSmearChannels, 0.0), dl = {0.0};
  smear_forward(e.data(), w.data(), lam[0], s.data(), sig.data(), B, T, C);
  // position 0 of every row is not mixed
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(s[b * T * C + c], e[b * T * C + c]);
  smear_backward(e.data(), w.data(), lam[0], sig.data(), R.data(), de.data(), dw.data(), dl.data(),
                 B, T, C);
  expect_fd_grad("smear de", e, de, loss);
  expect_fd_grad("smear dw", w, dw, loss);
  expect_fd_grad("smear dlambda", lam, dl, loss);
}

TEST(Smear, StepMatchesLastPositionOfForward) {
  Rng rng(10);
  const int64_t C = 30;
  Vec e = random_vec(rng, 2 * C), w = random_vec(rng, kSmearChannels, -0.5, 0.5);
  Vec s(2 * C), sig(2), step(C);
  smear_forward(e.data(), w.data(), 0.3, s.data(), sig.data(), 1, 2, C);
  smear_step(e.data() + C, e.data(), w.data(), 0.3, step.data(), 1, C);
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(step[c], s[C + c], 1e-15);
}

// ---------------------------------------------------------------------------------------------
// relu^2, lambda mixing

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
  for (int64_t i = 0; i < n; i += 997)
    EXPECT_FLOAT_EQ(y[i], static_cast<float>(i % 5) * 0.5f + 2.f * x[i]);
}

// ---------------------------------------------------------------------------------------------
// value-embedding gate

TEST(VeGate, BackwardMatchesFiniteDifferences) {
  Rng rng(13);
  const int64_t N = 5, C = 14, Hkv = 2, D = 4, W = Hkv * D, rows = 4, ld = W + 3;
  const std::vector<int32_t> idx = {2, 0, 2, 3, 2};  // repeated tokens
  Vec n1 = random_vec(rng, N * C), Wg = random_vec(rng, Hkv * kVeGateChannels, -0.5, 0.5);
  Vec table = random_vec(rng, rows * W), v_in = random_vec(rng, N * ld), R = random_vec(rng, N * W);
  auto loss = [&] {
    Vec out(N * W), gamma(N * Hkv);
    ve_gate_forward(n1.data(), C, Wg.data(), table.data(), idx.data(), v_in.data(), ld, out.data(),
                    gamma.data(), N, Hkv, D);
    return dot(R, out);
  };
  Vec out(N * W), gamma(N * Hkv);
  ve_gate_forward(n1.data(), C, Wg.data(), table.data(), idx.data(), v_in.data(), ld, out.data(),
                  gamma.data(), N, Hkv, D);
  for (double g : gamma) {
    EXPECT_GT(g, 0.0);
    EXPECT_LT(g, 3.0);
  }
  Vec dn1(N * C, 0.0), dWg(Hkv * kVeGateChannels, 0.0), dtable(rows * W, 0.0), dz(N * Hkv);
  ve_gate_backward(n1.data(), C, Wg.data(), table.data(), idx.data(), gamma.data(), R.data(),
                   dn1.data(), dWg.data(), dtable.data(), dz.data(), N, Hkv, D);
  expect_fd_grad("ve_gate dn1", n1, dn1, loss);  // channels >= 12 must get exactly 0
  expect_fd_grad("ve_gate dWg", Wg, dWg, loss);
  expect_fd_grad("ve_gate dtable", table, dtable, loss);
  // v_in's gradient is dv itself (identity path)
  Vec dvin(N * ld, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < W; ++j) dvin[n * ld + j] = R[n * W + j];
  expect_fd_grad("ve_gate dv_in", v_in, dvin, loss);
}

TEST(VeGate, NoTableCopiesV) {
  const int64_t N = 3, Hkv = 1, D = 4, ld = 6;
  std::vector<float> v_in(N * ld), out(N * D);
  for (size_t i = 0; i < v_in.size(); ++i) v_in[i] = static_cast<float>(i);
  ve_gate_forward<float>(nullptr, 12, nullptr, nullptr, nullptr, v_in.data(), ld, out.data(),
                         nullptr, N, Hkv, D);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(out[n * D + d], v_in[n * ld + d]);
}
