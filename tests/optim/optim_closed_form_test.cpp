// Closed forms of MuonAdamW (docs/nanochat.md 10.7-10.10) and an independent double-precision check
// of the sgemm-based Polar Express.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/rng.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/gemm_bf16.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/optim/optim_math.h"
#include "support/optim_test_util.h"

namespace nanochat {
namespace {

using testing::ParamSet;

std::vector<float> randn(Rng& rng, size_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal() * scale);
  return v;
}

// Scratch for muon_update / polar_express on an (m, n) matrix.
struct Scratch {
  std::vector<float> x, x2, a, b;
  std::vector<double> rowv;
  MuonScratch s;
  Scratch(int64_t m, int64_t n) {
    const int64_t k = std::min(m, n);
    x.resize(m * n);
    x2.resize(m * n);
    a.resize(k * k);
    b.resize(k * k);
    rowv.resize(std::max(m, n));
    s = {x.data(), x2.data(), a.data(), b.data(), rowv.data()};
  }
};

// Singular values of a row-major (m, n) matrix: sqrt of the eigenvalues of the Gram matrix of the
// smaller side, by cyclic Jacobi rotations in double (independent of the code under test).
std::vector<double> singular_values(const std::vector<float>& X, int64_t m, int64_t n) {
  const bool tall = m > n;
  const int64_t k = tall ? n : m;
  std::vector<double> A(k * k, 0.0);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      double s = 0;
      if (tall)
        for (int64_t r = 0; r < m; ++r) s += double(X[r * n + i]) * X[r * n + j];
      else
        for (int64_t c = 0; c < n; ++c) s += double(X[i * n + c]) * X[j * n + c];
      A[i * k + j] = s;
    }
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0;
    for (int64_t p = 0; p < k; ++p)
      for (int64_t q = p + 1; q < k; ++q) off += A[p * k + q] * A[p * k + q];
    if (off < 1e-24) break;
    for (int64_t p = 0; p < k; ++p)
      for (int64_t q = p + 1; q < k; ++q) {
        const double apq = A[p * k + q];
        if (std::fabs(apq) < 1e-300) continue;
        const double theta = (A[q * k + q] - A[p * k + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t r = 0; r < k; ++r) {  // A <- J^T A J
          const double arp = A[r * k + p], arq = A[r * k + q];
          A[r * k + p] = c * arp - s * arq;
          A[r * k + q] = s * arp + c * arq;
        }
        for (int64_t r = 0; r < k; ++r) {
          const double apr = A[p * k + r], aqr = A[q * k + r];
          A[p * k + r] = c * apr - s * aqr;
          A[q * k + r] = s * apr + c * aqr;
        }
      }
  }
  std::vector<double> sv(k);
  for (int64_t i = 0; i < k; ++i) sv[i] = std::sqrt(std::max(A[i * k + i], 0.0));
  return sv;
}

double frob(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

// The Polar Express polynomial iteration written naively in double.
std::vector<double> polar_reference(std::vector<double> X, int64_t m, int64_t n) {
  static const double C[5][3] = {{8.156554524902461, -22.48329292557795, 15.878769915207462},
                                 {4.042929935166739, -2.808917465908714, 0.5000178451051316},
                                 {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
                                 {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
                                 {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}};
  const bool tall = m > n;
  const int64_t k = tall ? n : m;
  for (const auto& abc : C) {
    std::vector<double> A(k * k, 0.0), B(k * k, 0.0), Y(m * n, 0.0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t r = 0; r < (tall ? m : n); ++r)
          A[i * k + j] += tall ? X[r * n + i] * X[r * n + j] : X[i * n + r] * X[j * n + r];
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) {
        double s = 0;
        for (int64_t r = 0; r < k; ++r) s += A[i * k + r] * A[r * k + j];
        B[i * k + j] = abc[1] * A[i * k + j] + abc[2] * s;
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        if (tall)
          for (int64_t r = 0; r < n; ++r) s += X[i * n + r] * B[r * n + j];
        else
          for (int64_t r = 0; r < m; ++r) s += B[i * m + r] * X[r * n + j];
        Y[i * n + j] = abc[0] * X[i * n + j] + s;
      }
    X = Y;
  }
  return X;
}

TEST(PolarExpress, MatchesDoublePrecisionIteration) {
  Rng rng(7);
  // sides >= 128 take the blocked Gram path (odd 135: unequal halves); at 513 its diagonal blocks
  // (256 and 257) are split again
  for (auto [m, n] : {std::pair<int64_t, int64_t>{40, 24},
                      {24, 40},
                      {32, 32},
                      {2, 12},
                      {160, 135},
                      {135, 160},
                      {128, 128},
                      {520, 513}}) {
    SCOPED_TRACE(::testing::PrintToString(std::make_pair(m, n)));
    auto x = randn(rng, m * n);
    const double f = frob(x) * 1.01 + 1e-6;
    for (auto& v : x) v = static_cast<float>(v / f);
    std::vector<double> xd(x.begin(), x.end());
    Scratch s(m, n);
    std::copy(x.begin(), x.end(), s.x.begin());
    const float* y = polar_express(s.x.data(), m, n, s.s, 5);
    const auto ref = polar_reference(xd, m, n);
    double err = 0, mag = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      err = std::max(err, std::fabs(y[i] - ref[i]));
      mag = std::max(mag, std::fabs(ref[i]));
    }
    EXPECT_LE(err, 1e-5 * mag);
  }
}

TEST(PolarExpress, FlopCountIsWhatItRuns) {
  // The closed form against the FLOPs sgemm was actually asked for (kernels/gemm.h counter), and
  // against the plain count 2 m n k per product for a small square matrix worked out by hand.
  EXPECT_EQ(polar_express_flops(32, 32, 5), 5 * (3 * 2 * 32 * 32 * 32));
  EXPECT_EQ(polar_express_flops(32, 32, 0), 0);
  // side 512: each Gram matrix 5/8 of a product's 2 k^3 (the 256 halves split again), then B X
  EXPECT_EQ(polar_express_flops(512, 512, 1), int64_t{2} * (5 * 2 * 512 * 512 * 512 / 8) + 2 * 512 * 512 * 512);
  Rng rng(3);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{40, 24},
                      {24, 40},
                      {160, 135},
                      {135, 160},
                      {128, 384},
                      {384, 128},
                      {127, 300},
                      {513, 600},
                      {600, 513}}) {
    SCOPED_TRACE(::testing::PrintToString(std::make_pair(m, n)));
    Scratch s(m, n);
    auto x = randn(rng, m * n, 0.01);
    std::copy(x.begin(), x.end(), s.x.begin());
    for (int steps : {1, 5}) {
      const int64_t before = sgemm_flops_issued();
      polar_express(s.x.data(), m, n, s.s, steps);
      EXPECT_EQ(sgemm_flops_issued() - before, polar_express_flops(m, n, steps)) << steps << " steps";
    }
  }
  EXPECT_THROW(polar_express_flops(8, 8, 6), Error);
  // the bf16 path blocks its Gram matrices like the fp32 one (bgemm counts in the same counter)
  if (!native_bf16_available()) return;
  for (auto [m, n] : {std::pair<int64_t, int64_t>{40, 24}, {160, 135}, {135, 160}, {128, 384}, {512, 520}}) {
    Scratch s(m, n);
    for (float& v : s.x) v = bf16_to_float(float_to_bf16(static_cast<float>(rng.normal() * 0.01)));
    const int64_t before = sgemm_flops_issued();
    polar_express_bf16(s.x.data(), m, n, s.s, 5);
    EXPECT_EQ(sgemm_flops_issued() - before, polar_express_flops(m, n, 5)) << m << " x " << n << " in bf16";
  }
}

TEST(PolarExpress, SingularValuesClusteredAndMuonPlusNorm) {
  // docs/nanochat.md 10.9: singular values of the first Muon update of a random full-rank gradient lie in a
  // band (max/min < 4 after normalising by the mean); with wd = 0, ||dP||_F = lr_eff sqrt(min(m, n)).
  Rng rng(11);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{64, 32}, {32, 64}, {48, 16}}) {
    SCOPED_TRACE(::testing::PrintToString(std::make_pair(m, n)));
    std::vector<float> p(m * n, 0.f), mom(m * n, 0.f), v(std::max(m, n), 0.f);
    const auto g = randn(rng, m * n);
    Scratch s(m, n);
    MuonHyper hp;
    hp.lr = 0.5;
    hp.momentum = 0.95;
    hp.weight_decay = 0.0;
    muon_update(p.data(), g.data(), mom.data(), v.data(), m, n, 1.f, hp, s.s);
    const double lr_eff = 0.5 * std::sqrt(std::max(1.0, double(m) / n));
    EXPECT_NEAR(frob(p), lr_eff * std::sqrt(double(std::min(m, n))), 1e-5 * frob(p));
    auto sv = singular_values(p, m, n);
    double mean = 0;
    for (double x : sv) mean += x / sv.size();
    const double mx = *std::max_element(sv.begin(), sv.end()) / mean;
    const double mn = *std::min_element(sv.begin(), sv.end()) / mean;
    EXPECT_GT(mn, 0);
    EXPECT_LT(mx / mn, 4.0) << "max " << mx << " min " << mn;

    // A second step with wd = 0 again moves P by exactly lr_eff sqrt(min(m, n)) in Frobenius norm.
    const auto p1 = p;
    const auto g2 = randn(rng, m * n, 0.3);
    muon_update(p.data(), g2.data(), mom.data(), v.data(), m, n, 1.f, hp, s.s);
    std::vector<float> d(m * n);
    for (int64_t i = 0; i < m * n; ++i) d[i] = p[i] - p1[i];
    EXPECT_NEAR(frob(d), lr_eff * std::sqrt(double(std::min(m, n))), 2e-5 * frob(d));
  }
}

OptimConfig small_cfg() {
  OptimConfig c;
  c.model_dim = 48;
  return c;
}

TEST(MuonAdamWClosedForm, AdamWFirstStepIsSignStepPlusDecay) {
  // docs/nanochat.md 10.7: m_hat = g, v_hat = g^2, so p1 = p0 (1 - lr wd) - lr g / (|g| + eps) ~ -lr sign(g).
  ParamSet ps;
  ps.add("lm_head.weight", {64, 48});  // lr 0.008 * (48/768)^-0.5, wd 0.01
  ps.add("resid_lambdas", {4});        // lr 0.5 * 0.01, wd 0.05
  ps.add("x0_lambdas", {4});           // lr 0.5, wd 0
  ps.add("smear_lambda", {1});         // lr 0.2, wd 0
  Rng rng(3);
  ps.fill_params(rng, -1, 1);
  for (auto& g : ps.g)
    for (auto& x : g) x = static_cast<float>(rng.normal() * 1e-3);
  ps.g[3][0] = -2e-4f;
  const auto p0 = ps.p;
  MuonAdamW opt(ps.views(), small_cfg());
  const double lrm = 0.6;
  opt.step(static_cast<float>(lrm), 0.9f, 0.1f);
  const double lr[4] = {0.008 * 4.0, 0.5 * 0.01, 0.5, 0.2};
  const double wd[4] = {0.01, 0.05, 0.0, 0.0};
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < ps.p[i].size(); ++j) {
      const double l = lr[i] * lrm, g = ps.g[i][j];
      const double expect = p0[i][j] * (1 - l * wd[i]) - l * g / (std::fabs(g) + 1e-10);
      ASSERT_NEAR(ps.p[i][j], expect, 2e-6 * std::max(1.0, std::fabs(expect))) << ps.names[i] << "[" << j << "]";
    }
  // smear_lambda had g < 0, wd 0: it moved up by exactly lr (0.2 * 0.6) up to rounding.
  EXPECT_NEAR(ps.p[3][0] - p0[3][0], 0.12, 1e-6);
}

TEST(MuonAdamWClosedForm, MuonZeroGradientIsPureDecay) {
  // docs/nanochat.md 10.8: with zero gradient every Muon path yields g = 0 and the update is
  // P (1 - lr_eff wd).
  ParamSet ps;
  ps.add("transformer.h.0.attn.c_q.weight", {16, 16});    // lr factor 1
  ps.add("transformer.h.0.mlp.c_fc.weight", {64, 16});    // tall 4:1, lr factor 2
  ps.add("transformer.h.0.mlp.c_proj.weight", {16, 64});  // wide, lr factor 1
  Rng rng(5);
  ps.fill_params(rng, -1, 1);
  OptimConfig cfg = small_cfg();
  cfg.matrix_lr = 0.02f;
  MuonAdamW opt(ps.views(), cfg);
  for (int step = 0; step < 2; ++step) {
    const auto p0 = ps.p;
    const double lrm = step == 0 ? 0.025 : 1.0, wd = step == 0 ? 0.2349029 : 0.1;
    opt.step(static_cast<float>(lrm), 0.85f, static_cast<float>(wd));
    const double factor[3] = {1.0, 2.0, 1.0};
    for (size_t i = 0; i < 3; ++i) {
      const double keep = 1 - 0.02 * lrm * factor[i] * wd;
      for (size_t j = 0; j < ps.p[i].size(); ++j)
        ASSERT_NEAR(ps.p[i][j], p0[i][j] * keep, 1e-7 * std::fabs(p0[i][j]) + 1e-12) << ps.names[i];
    }
  }
}

TEST(MuonAdamWClosedForm, CautiousWeightDecayOnlyWhereUpdateAgreesWithParam) {
  // With a huge wd the decay term dominates wherever it applies: entries where g*p >= 0 shrink
  // by lr_eff*wd*p, the others move by the update only. Compare two runs that differ only in wd.
  ParamSet a, b;
  for (ParamSet* ps : {&a, &b}) ps->add("transformer.h.0.attn.c_q.weight", {16, 16});
  Rng rng(9);
  a.fill_params(rng, -1, 1);
  b.p = a.p;
  for (auto& x : a.g[0]) x = static_cast<float>(rng.normal());
  b.g = a.g;
  OptimConfig cfg = small_cfg();
  MuonAdamW oa(a.views(), cfg), ob(b.views(), cfg);
  const float wd = 3.f;
  oa.step(1.f, 0.9f, 0.f);
  ob.step(1.f, 0.9f, wd);
  int decayed = 0, kept = 0;
  // run a: p1 = p0 - lr*u; run b: p1' = p1 - lr*wd*p0*[u*p0 >= 0]
  ParamSet c;
  c.add("transformer.h.0.attn.c_q.weight", {16, 16});
  Rng rng2(9);
  c.fill_params(rng2, -1, 1);  // same p0 as a and b had
  for (size_t j = 0; j < c.p[0].size(); ++j) {
    const double p0 = c.p[0][j];
    const double u = (p0 - a.p[0][j]) / 0.02;  // the Muon direction (lr 0.02)
    const double diff = a.p[0][j] - b.p[0][j];
    if (u * p0 >= 0) {
      EXPECT_NEAR(diff, 0.02 * wd * p0, 1e-6);
      ++decayed;
    } else {
      EXPECT_NEAR(diff, 0.0, 1e-7);
      ++kept;
    }
  }
  EXPECT_GT(decayed, 20);
  EXPECT_GT(kept, 20);
}

TEST(MuonAdamWGroups, OrderShapesAndLearningRates) {
  // docs/nanochat.md 2.1: AdamW groups 0-5 then Muon groups sorted by shape ascending, params in model order.
  ParamSet ps;
  ps.add("resid_lambdas", {2});
  ps.add("x0_lambdas", {2});
  ps.add("smear_lambda", {1});
  ps.add("backout_lambda", {1});
  ps.add("transformer.wte.weight", {64, 32});
  ps.add("transformer.h.0.attn.c_q.weight", {32, 32});
  ps.add("transformer.h.0.mlp.c_fc.weight", {128, 32});
  ps.add("transformer.h.0.mlp.c_proj.weight", {32, 128});
  ps.add("transformer.h.1.attn.c_q.weight", {32, 32});
  ps.add("transformer.h.1.attn.ve_gate.weight", {2, 12});
  ps.add("lm_head.weight", {64, 32});
  ps.add("smear_gate.weight", {1, 24});
  ps.add("value_embeds.1.weight", {64, 32});
  OptimConfig cfg;
  cfg.model_dim = 384;
  cfg.unembedding_lr = 0.008f * 0.1767767f;
  cfg.embedding_lr = 0.3f * 0.1767767f;
  cfg.scalar_lr = 0.5f * 0.1767767f;
  cfg.matrix_lr = 0.02f * 0.1767767f;
  MuonAdamW opt(ps.views(), cfg);
  const auto& g = opt.groups();
  ASSERT_EQ(g.size(), 6u + 4u);
  const char* labels[6] = {"lm_head", "wte", "value_embeds", "resid", "x0", "smear"};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(g[i].label, labels[i]);
  // runcpu effective lrs (docs/nanochat.md 2.1): lm_head 0.002, wte 0.075, value_embeds 0.0375,
  // resid 0.000883883, x0 0.0883883, smear 0.2, Muon 0.00353553.
  EXPECT_NEAR(g[0].initial_lr, 0.002, 1e-8);
  EXPECT_NEAR(g[1].initial_lr, 0.075, 1e-7);
  EXPECT_NEAR(g[2].initial_lr, 0.0375, 1e-7);
  EXPECT_NEAR(g[3].initial_lr, 0.000883883, 1e-9);
  EXPECT_NEAR(g[4].initial_lr, 0.0883883, 1e-7);
  EXPECT_NEAR(g[5].initial_lr, 0.2, 1e-12);
  EXPECT_EQ(g[5].names, (std::vector<std::string>{"smear_lambda", "backout_lambda", "smear_gate.weight"}));
  EXPECT_EQ(g[3].beta1, 0.8);
  EXPECT_EQ(g[4].beta1, 0.96);
  EXPECT_EQ(g[1].beta2, 0.995);
  EXPECT_EQ(g[0].weight_decay, 0.01);
  EXPECT_EQ(g[1].weight_decay, 0.001);
  EXPECT_EQ(g[3].weight_decay, 0.05);
  const std::pair<int64_t, int64_t> shapes[4] = {{2, 12}, {32, 32}, {32, 128}, {128, 32}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(g[6 + i].kind, OptKind::Muon);
    EXPECT_EQ(std::make_pair(g[6 + i].rows, g[6 + i].cols), shapes[i]);
    EXPECT_NEAR(g[6 + i].initial_lr, 0.00353553, 1e-8);
  }
  EXPECT_EQ(g[7].names,
            (std::vector<std::string>{"transformer.h.0.attn.c_q.weight", "transformer.h.1.attn.c_q.weight"}));
  // every parameter is in exactly one group
  size_t total = 0;
  for (const auto& gr : g) total += gr.params.size();
  EXPECT_EQ(total, ps.names.size());
}

TEST(MuonAdamWGroups, RejectsUnknownNamesAndBadShapes) {
  std::vector<float> p(8), g(8);
  auto build = [](std::vector<OptParam> v) { MuonAdamW opt(std::move(v), OptimConfig{}); };
  const std::vector<OptParam> unknown = {{"transformer.norm.weight", {8}, p.data(), g.data()}};
  const std::vector<OptParam> vector_muon = {{"transformer.h.0.attn.bias", {8}, p.data(), g.data()}};
  const std::vector<OptParam> null_ptr = {{"resid_lambdas", {8}, nullptr, g.data()}};
  const std::vector<OptParam> twice = {{"resid_lambdas", {8}, p.data(), g.data()},
                                       {"resid_lambdas", {8}, p.data(), g.data()}};
  EXPECT_THROW(build(unknown), Error);
  EXPECT_THROW(build(vector_muon), Error);
  EXPECT_THROW(build(null_ptr), Error);
  EXPECT_THROW(build(twice), Error);
  try {
    build({{"mystery", {8}, p.data(), g.data()}});
    FAIL() << "no error for an unknown parameter name";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mystery"), std::string::npos);
  }
}

}  // namespace
}  // namespace nanochat
