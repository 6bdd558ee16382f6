// Tests for kernels/lm_head_loss (softcap + cross-entropy): the double row kernel against finite
// differences, the vectorised float row kernel against the double one, and the fused chunked
// lm_head against an unfused double computation (every chunking, ignored targets, padded
// vocabulary rows).
#include "nanochat/kernels/lm_head_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/core/rng.h"
#include "support/fd_check.h"

using namespace nanochat;
using nanochat::testing::expect_fd_grad;
using nanochat::testing::random_vec;
using Vec = std::vector<double>;

TEST(SoftcapCe, RowBackwardMatchesFiniteDifferences) {
  Rng rng(21);
  const int64_t V = 37;
  const double cap = 15.0, s = 0.37;
  Vec l = random_vec(rng, V, -40.0, 40.0);  // spans the linear and saturated softcap regions
  const int32_t target = 5;
  auto loss = [&] {
    Vec row = l;
    return s * softcap_ce_row(row.data(), V, target, cap, s, false);
  };
  Vec g = l;
  const double L = softcap_ce_row(g.data(), V, target, cap, s, true);
  // closed form of the loss
  double sum = 0;
  for (double x : l) sum += std::exp(cap * std::tanh(x / cap));
  EXPECT_NEAR(L, std::log(sum) - cap * std::tanh(l[target] / cap), 1e-12);
  expect_fd_grad("softcap_ce dlogits", l, g, loss, 1e-6, 1e-6, 1e-8);
}

TEST(SoftcapCe, IgnoredTargetGivesZeroLossAndGradient) {
  Rng rng(22);
  const int64_t V = 20;
  std::vector<float> row(V);
  for (auto& v : row) v = static_cast<float>(rng.uniform(-5, 5));
  EXPECT_EQ(softcap_ce_row(row.data(), V, -1, 15.f, 1.f, true), 0.0);
  for (float v : row) EXPECT_EQ(v, 0.f);
}

TEST(SoftcapCe, FloatRowMatchesDoubleRow) {
  Rng rng(23);
  for (int64_t V : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{33}, int64_t{1000}, int64_t{32768}}) {
    for (double range : {0.05, 3.0, 60.0}) {
      Vec l = random_vec(rng, V, -range, range);
      const int32_t target = static_cast<int32_t>(rng.below(V));
      const double s = 1.0 / 7.0;
      Vec gd = l;
      const double Ld = softcap_ce_row(gd.data(), V, target, 15.0, s, true);
      std::vector<float> gf(l.begin(), l.end());
      const double Lf = softcap_ce_row(gf.data(), V, target, 15.f, static_cast<float>(s), true);
      EXPECT_NEAR(Lf, Ld, 2e-6 * std::max(1.0, std::fabs(Ld))) << "V=" << V << " range=" << range;
      // dlogits = s * (p - onehot) * (1 - (z/15)^2): fp32 probabilities carry ~1e-7 absolute error
      double err = 0;
      for (int64_t j = 0; j < V; ++j) err = std::max(err, std::fabs(gf[j] - gd[j]));
      EXPECT_LE(err, 1e-6 * s) << "V=" << V << " range=" << range;
      // without gradient the row holds the softcapped logits
      std::vector<float> zf(l.begin(), l.end());
      softcap_ce_row(zf.data(), V, target, 15.f, 1.f, false);
      for (int64_t j = 0; j < V; ++j)
        EXPECT_NEAR(zf[j], 15.0 * std::tanh(l[j] / 15.0), 2e-6 * std::max(1.0, std::fabs(l[j])));
    }
  }
}

TEST(SoftcapCe, SoftcapIsBoundedAndAccurate) {
  std::vector<float> z;
  for (double x = -1e6; x <= 1e6; x *= (x < 0 ? 0.9 : 1.1)) {
    z.push_back(static_cast<float>(x));
    if (x < 0 && x > -1e-6) x = 1e-6;
  }
  std::vector<float> orig = z;
  softcap_inplace(z.data(), static_cast<int64_t>(z.size()), 15.f);
  for (size_t i = 0; i < z.size(); ++i) {
    EXPECT_LE(std::fabs(z[i]), 15.f);
    const double want = 15.0 * std::tanh(static_cast<double>(orig[i]) / 15.0);
    EXPECT_NEAR(z[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << orig[i];
    if (i > 0 && orig[i] > orig[i - 1]) {
      EXPECT_GE(z[i], z[i - 1]);  // monotone
    }
  }
}

namespace {

// Unfused double reference: logits = x W[:V]^T, row kernel, dx = dl W, dW += dl^T x.
struct Ref {
  double loss_sum = 0;
  Vec per_token, dx, dW;
};

Ref reference(const std::vector<float>& x, const std::vector<float>& W, const std::vector<int32_t>& t, int64_t N,
              int64_t C, int64_t V, int64_t Vp, double gs) {
  Ref r;
  r.per_token.assign(N, 0.0);
  r.dx.assign(N * C, 0.0);
  r.dW.assign(Vp * C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    Vec row(V);
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += double(x[n * C + c]) * W[v * C + c];
      row[v] = s;
    }
    const double l = softcap_ce_row(row.data(), V, t[n], 15.0, gs, true);
    r.per_token[n] = l;
    r.loss_sum += l;
    for (int64_t v = 0; v < V; ++v)
      for (int64_t c = 0; c < C; ++c) {
        r.dx[n * C + c] += row[v] * W[v * C + c];
        r.dW[v * C + c] += row[v] * x[n * C + c];
      }
  }
  return r;
}

}  // namespace

TEST(LmHeadLoss, FusedChunkedMatchesUnfusedReference) {
  for (int64_t V : {int64_t{70}, int64_t{2500}}) {  // one vocab block; several with a ragged last one
    SCOPED_TRACE("V " + std::to_string(V));
    Rng rng(24);
    const int64_t N = 13, C = 16, Vp = (V + 63) / 64 * 64 + 64;
    std::vector<float> x(N * C), W(Vp * C);
    for (auto& v : x) v = static_cast<float>(rng.uniform(-1, 1));
    for (auto& v : W) v = static_cast<float>(rng.uniform(-1.5, 1.5));  // logits up to ~20: softcap active
    std::vector<int32_t> t(N);
    for (auto& v : t) v = static_cast<int32_t>(rng.below(V));
    t[2] = -1;
    t[9] = -1;
    t[4] = V - 1;
    const double gs = 0.5 / 11.0;
    const Ref ref = reference(x, W, t, N, C, V, Vp, gs);
    double dx_max = 0, dW_max = 0;
    for (double v : ref.dx) dx_max = std::max(dx_max, std::fabs(v));
    for (double v : ref.dW) dW_max = std::max(dW_max, std::fabs(v));

    for (int64_t chunk : {int64_t{1}, int64_t{5}, int64_t{13}, int64_t{100}})
      for (bool transposed : {false, true}) {
        SCOPED_TRACE("chunk " + std::to_string(chunk) + (transposed ? " transposed dW" : ""));
        std::vector<double> scratch_d(lm_head_scratch_floats(chunk, N, C, V) / 2 + 8);  // 8-byte aligned
        float* scratch = reinterpret_cast<float*>(scratch_d.data());
        std::vector<float> ptl(N, -1.f), dx(N * C, 99.f), dW(Vp * C, 0.25f);
        std::vector<float> dWt(C * V, 1e30f);  // garbage: must be overwritten, not accumulated
        const double sum =
            lm_head_softcap_ce(x.data(), W.data(), t.data(), N, C, V, 15.f, static_cast<float>(gs), scratch, chunk,
                               ptl.data(), dx.data(), dW.data(), transposed ? dWt.data() : nullptr);
        EXPECT_NEAR(sum, ref.loss_sum, 1e-5 * ref.loss_sum);
        for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(ptl[n], ref.per_token[n], 1e-5 * (1 + ref.per_token[n]));
        EXPECT_EQ(ptl[2], 0.f);
        for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(dx[i], ref.dx[i], 1e-5 * dx_max) << i;          // overwritten
        for (int64_t i = 0; i < Vp * C; ++i) ASSERT_NEAR(dW[i], 0.25 + ref.dW[i], 1e-5 * dW_max) << i;  // accumulated
        for (int64_t i = V * C; i < Vp * C; ++i) ASSERT_EQ(dW[i], 0.25f);  // padded rows untouched

        // evaluation mode: same losses, no gradient
        std::vector<float> ptl2(N);
        const double sum2 = lm_head_softcap_ce(x.data(), W.data(), t.data(), N, C, V, 15.f, 0.f, scratch, chunk,
                                               ptl2.data(), nullptr, nullptr);
        EXPECT_DOUBLE_EQ(sum2, sum);
        for (int64_t n = 0; n < N; ++n) EXPECT_EQ(ptl2[n], ptl[n]);
      }
  }
}
