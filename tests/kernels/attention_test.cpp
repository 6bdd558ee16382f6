// Tests for kernels/attention: the fp32 kernels against an independent double-precision reference
// that materialises the (T, T) masked softmax, finite differences of the backward in double, and
// the KV-cache path against rows of the full forward.
#include "nanochat/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/rng.h"
#include "support/fd_check.h"

using namespace nanochat;
using nanochat::testing::fd_gradient;

namespace {

struct Shape {
  int B, T, H, Hkv, D, window;
  std::string name() const { return str_cat("B", B, "_T", T, "_H", H, "_Hkv", Hkv, "_D", D, "_w", window); }
  size_t nq() const { return size_t(B) * T * H * D; }
  size_t nkv() const { return size_t(B) * T * Hkv * D; }
  size_t nlse() const { return size_t(B) * H * T; }
};

// Naive double reference: builds the full (T, T) score matrix per (b, h), masks it with the
// causal/window rule written independently of the kernel (allowed iff j <= i and i - j <= window,
// a negative window meaning no window), softmaxes it row by row and multiplies by V.
void naive_forward(const Shape& s, const std::vector<double>& q, const std::vector<double>& k,
                   const std::vector<double>& v, std::vector<double>& out, std::vector<double>* lse) {
  const int T = s.T, H = s.H, Hkv = s.Hkv, D = s.D;
  out.assign(s.nq(), 0.0);
  if (lse) lse->assign(s.nlse(), 0.0);
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> S(size_t(T) * T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < H; ++h) {
      const int hk = h / (H / Hkv);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          const bool allowed = j <= i && (s.window < 0 || i - j <= s.window);
          if (!allowed) {
            S[size_t(i) * T + j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double acc = 0;
          for (int d = 0; d < D; ++d)
            acc += q[((size_t(b) * T + i) * H + h) * D + d] * k[((size_t(b) * T + j) * Hkv + hk) * D + d];
          S[size_t(i) * T + j] = acc * scale;
        }
      for (int i = 0; i < T; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < T; ++j) m = std::max(m, S[size_t(i) * T + j]);
        double sum = 0;
        for (int j = 0; j < T; ++j) sum += std::exp(S[size_t(i) * T + j] - m);
        for (int j = 0; j < T; ++j) {
          const double p = std::exp(S[size_t(i) * T + j] - m) / sum;
          for (int d = 0; d < D; ++d)
            out[((size_t(b) * T + i) * H + h) * D + d] += p * v[((size_t(b) * T + j) * Hkv + hk) * D + d];
        }
        if (lse) (*lse)[(size_t(b) * H + h) * T + i] = m + std::log(sum);
      }
    }
}

std::vector<double> random_vec(size_t n, Rng& rng, double amp = 1.0) {
  std::vector<double> x(n);
  for (auto& e : x) e = amp * rng.uniform(-1, 1);
  return x;
}
std::vector<float> to_f(const std::vector<double>& x) { return {x.begin(), x.end()}; }

// max |a - b| / max(max |b|, floor): a relative error that ignores tiny reference entries.
template <typename A>
double rel_err(const std::vector<A>& a, const std::vector<double>& b, double floor = 1e-3) {
  double num = 0, den = floor;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> v = {
      {2, 33, 3, 3, 16, 33},     // plain causal, window == T
      {1, 20, 2, 2, 16, -1},     // negative window: no window
      {2, 37, 2, 2, 16, 8},      // sliding window
      {1, 37, 2, 2, 16, 0},      // window 0: each query sees only itself
      {2, 29, 4, 2, 16, 1000},   // GQA, causal
      {1, 45, 4, 2, 24, 11},     // GQA + window
      {1, 40, 6, 1, 16, 40},     // multi-query (Hkv = 1)
      {3, 1, 2, 1, 8, 1},        // T = 1
      {2, 4, 4, 2, 20, 1},       // few queries (row-at-a-time path), GQA, D = 16 + 4
      {1, 20, 2, 1, 12, 5},      // D not a multiple of 16
      {1, 150, 2, 1, 64, 70},    // several tiles, window crossing tile borders
      {1, 130, 2, 2, 128, 130},  // several tiles, D = 128, ragged last tile
      {1, 200, 2, 2, 33, 64},    // odd D, window == a tile width
      // Queries seeing 384 keys or more on average: the streamed rows are read from head-major copies.
      {1, 800, 2, 1, 16, 800},   // causal, multi-query
      {2, 1000, 4, 2, 20, 600},  // GQA + window, odd D
  };
  return v;
}

}  // namespace

// (a) fp32 forward (out and lse) and the double reference forward vs the naive (T, T) softmax.
TEST(Attention, ForwardMatchesNaive) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(s.name());
    Rng rng(7);
    const auto q = random_vec(s.nq(), rng, 2.0), k = random_vec(s.nkv(), rng, 2.0), v = random_vec(s.nkv(), rng);
    std::vector<double> ref, ref_lse;
    naive_forward(s, q, k, v, ref, &ref_lse);

    const auto qf = to_f(q), kf = to_f(k), vf = to_f(v);
    std::vector<float> out(s.nq(), std::nanf("")), lse(s.nlse(), std::nanf(""));
    const float scale = 1.f / std::sqrt(float(s.D));
    attention_forward(qf.data(), kf.data(), vf.data(), out.data(), lse.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window,
                      scale);
    EXPECT_LT(rel_err(out, ref), 2e-6);
    EXPECT_LT(rel_err(lse, ref_lse, 1.0), 2e-6);

    // Without lse (inference use) the output is the same.
    std::vector<float> out2(s.nq(), std::nanf(""));
    attention_forward(qf.data(), kf.data(), vf.data(), out2.data(), nullptr, s.B, s.T, s.H, s.Hkv, s.D, s.window,
                      scale);
    EXPECT_EQ(out, out2);

    std::vector<double> outd(s.nq()), lsed(s.nlse());
    attention_forward_reference<double>(q.data(), k.data(), v.data(), outd.data(), lsed.data(), s.B, s.T, s.H, s.Hkv,
                                        s.D, s.window, 1.0 / std::sqrt(double(s.D)));
    EXPECT_LT(rel_err(outd, ref), 1e-12);
    EXPECT_LT(rel_err(lsed, ref_lse, 1.0), 1e-12);
  }
}

// (b) Finite differences in double: d(sum(out * R))/dx for every element of q, k, v against the
// double backward (dout = R).
TEST(Attention, BackwardMatchesFiniteDifferences) {
  const std::vector<Shape> cases = {
      {1, 7, 4, 2, 5, 3},  // GQA + window
      {2, 6, 2, 2, 4, 6},  // causal
      {1, 5, 3, 1, 3, 0},  // window 0, multi-query
  };
  for (const Shape& s : cases) {
    SCOPED_TRACE(s.name());
    Rng rng(11);
    auto q = random_vec(s.nq(), rng, 1.5), k = random_vec(s.nkv(), rng, 1.5), v = random_vec(s.nkv(), rng);
    const auto R = random_vec(s.nq(), rng);
    const double scale = 1.0 / std::sqrt(double(s.D));
    std::vector<double> out(s.nq()), lse(s.nlse());
    attention_forward_reference<double>(q.data(), k.data(), v.data(), out.data(), lse.data(), s.B, s.T, s.H, s.Hkv, s.D,
                                        s.window, scale);
    std::vector<double> dq(s.nq(), 99.0), dk(s.nkv(), 99.0), dv(s.nkv(), 99.0);
    attention_backward_reference<double>(q.data(), k.data(), v.data(), out.data(), lse.data(), R.data(), dq.data(),
                                         dk.data(), dv.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window, scale);
    auto loss = [&]() {
      std::vector<double> o;
      naive_forward(s, q, k, v, o, nullptr);
      double acc = 0;
      for (size_t i = 0; i < o.size(); ++i) acc += o[i] * R[i];
      return acc;
    };
    const double eps = 1e-6;
    auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* what) {
      const std::vector<double> fd = fd_gradient(x, loss, eps);
      double worst = 0;
      for (size_t i = 0; i < x.size(); ++i)
        worst = std::max(worst, std::abs(fd[i] - grad[i]) / std::max(1.0, std::abs(grad[i])));
      EXPECT_LT(worst, 1e-6) << what;
    };
    check(q, dq, "dq");
    check(k, dk, "dk");
    check(v, dv, "dv");
  }
}

// (c) fp32 backward (each work split) vs the double backward.
TEST(Attention, BackwardMatchesDoubleReference) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(s.name());
    Rng rng(5);
    const auto q = random_vec(s.nq(), rng, 2.0), k = random_vec(s.nkv(), rng, 2.0), v = random_vec(s.nkv(), rng),
               dout = random_vec(s.nq(), rng);
    const double scale = 1.0 / std::sqrt(double(s.D));
    std::vector<double> out(s.nq()), lse(s.nlse());
    attention_forward_reference<double>(q.data(), k.data(), v.data(), out.data(), lse.data(), s.B, s.T, s.H, s.Hkv, s.D,
                                        s.window, scale);
    std::vector<double> dq(s.nq()), dk(s.nkv()), dv(s.nkv());
    attention_backward_reference<double>(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                                         dk.data(), dv.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window, scale);

    // Errors are measured against the largest gradient entry of all three tensors: with window 0
    // the exact dq and dk vanish (dS = dout.v - dout.out = 0) and only rounding remains, whose
    // size follows the terms that cancel, not the zero result.
    double gscale = 1e-3;
    for (const auto* g : {&dq, &dk, &dv})
      for (double e : *g) gscale = std::max(gscale, std::abs(e));

    const auto qf = to_f(q), kf = to_f(k), vf = to_f(v), doutf = to_f(dout);
    std::vector<float> outf(s.nq()), lsef(s.nlse());
    attention_forward(qf.data(), kf.data(), vf.data(), outf.data(), lsef.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window,
                      float(scale));
    for (auto mode : {AttentionBackwardMode::kAuto, AttentionBackwardMode::kFused, AttentionBackwardMode::kSplit}) {
      SCOPED_TRACE(int(mode));
      // Garbage in the outputs: the kernel must overwrite, not accumulate.
      std::vector<float> dqf(s.nq(), std::nanf("")), dkf(s.nkv(), std::nanf("")), dvf(s.nkv(), std::nanf(""));
      attention_backward_with(mode, qf.data(), kf.data(), vf.data(), outf.data(), lsef.data(), doutf.data(), dqf.data(),
                              dkf.data(), dvf.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window, float(scale));
      EXPECT_LT(rel_err(dqf, dq, gscale), 1e-4);
      EXPECT_LT(rel_err(dkf, dk, gscale), 1e-4);
      EXPECT_LT(rel_err(dvf, dv, gscale), 1e-4);
    }
    std::vector<float> dqf(s.nq()), dkf(s.nkv()), dvf(s.nkv());
    attention_backward(qf.data(), kf.data(), vf.data(), outf.data(), lsef.data(), doutf.data(), dqf.data(), dkf.data(),
                       dvf.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window, float(scale));
    EXPECT_LT(rel_err(dqf, dq, gscale), 1e-4);
    EXPECT_LT(rel_err(dkf, dk, gscale), 1e-4);
    EXPECT_LT(rel_err(dvf, dv, gscale), 1e-4);
  }
}

// (d) The KV-cache forward equals rows of the full forward: a prefill of all T tokens, a chunk at
// an offset, and one-token decode steps, with unused cache slots poisoned with NaN.
TEST(Attention, CachedForwardMatchesFullForward) {
  const std::vector<Shape> cases = {
      {2, 40, 4, 2, 16, 40},    // causal
      {2, 40, 4, 2, 16, 5},     // decode with a window smaller than the cache
      {1, 90, 2, 1, 64, 70},    // several tiles
      {1, 23, 2, 2, 12, 1000},  // odd D
      {1, 800, 2, 1, 16, 800},  // long prefills (head-major copy of the cache's first rows)
  };
  for (const Shape& s : cases) {
    SCOPED_TRACE(s.name());
    Rng rng(3);
    const auto q = random_vec(s.nq(), rng, 2.0), k = random_vec(s.nkv(), rng, 2.0), v = random_vec(s.nkv(), rng);
    std::vector<double> ref;
    naive_forward(s, q, k, v, ref, nullptr);
    const auto qf = to_f(q), kf = to_f(k), vf = to_f(v);
    const float scale = 1.f / std::sqrt(float(s.D));
    std::vector<float> full(s.nq());
    attention_forward(qf.data(), kf.data(), vf.data(), full.data(), nullptr, s.B, s.T, s.H, s.Hkv, s.D, s.window,
                      scale);

    const int Tmax = s.T + 9;
    const size_t kv_row = size_t(s.Hkv) * s.D, q_row = size_t(s.H) * s.D;
    std::vector<float> kc(size_t(s.B) * Tmax * kv_row, std::nanf("")), vc = kc;
    // Fill cache positions [0, n) from the full k, v.
    auto fill = [&](int n) {
      for (int b = 0; b < s.B; ++b)
        for (int t = 0; t < n; ++t)
          for (size_t e = 0; e < kv_row; ++e) {
            kc[(size_t(b) * Tmax + t) * kv_row + e] = kf[(size_t(b) * s.T + t) * kv_row + e];
            vc[(size_t(b) * Tmax + t) * kv_row + e] = vf[(size_t(b) * s.T + t) * kv_row + e];
          }
    };
    // Runs queries [pos0, pos0 + Tq) and compares them with the full forward's rows.
    auto run = [&](int pos0, int Tq) {
      std::vector<float> qs(size_t(s.B) * Tq * q_row), o(qs.size(), std::nanf(""));
      for (int b = 0; b < s.B; ++b)
        for (int t = 0; t < Tq; ++t)
          for (size_t e = 0; e < q_row; ++e)
            qs[(size_t(b) * Tq + t) * q_row + e] = qf[(size_t(b) * s.T + pos0 + t) * q_row + e];
      attention_forward_cached(qs.data(), kc.data(), vc.data(), o.data(), s.B, Tq, pos0, Tmax, s.H, s.Hkv, s.D,
                               s.window, scale);
      double worst_full = 0, worst_ref = 0;
      for (int b = 0; b < s.B; ++b)
        for (int t = 0; t < Tq; ++t)
          for (size_t e = 0; e < q_row; ++e) {
            const size_t src = (size_t(b) * s.T + pos0 + t) * q_row + e;
            const float got = o[(size_t(b) * Tq + t) * q_row + e];
            worst_full = std::max(worst_full, double(std::abs(got - full[src])));
            worst_ref = std::max(worst_ref, std::abs(double(got) - ref[src]));
          }
      EXPECT_LT(worst_full, 1e-5) << "pos0=" << pos0 << " Tq=" << Tq;
      EXPECT_LT(worst_ref, 1e-5) << "pos0=" << pos0 << " Tq=" << Tq;
    };
    fill(s.T);
    run(0, s.T);  // prefill of the whole sequence
    // Chunked prefill: the cache holds exactly the positions written so far.
    std::fill(kc.begin(), kc.end(), std::nanf(""));
    std::fill(vc.begin(), vc.end(), std::nanf(""));
    const int split = s.T / 3;
    fill(split);
    run(0, split);
    fill(s.T - 2);
    run(split, s.T - 2 - split);
    // Decode, one token at a time.
    for (int t = s.T - 2; t < s.T; ++t) {
      fill(t + 1);
      run(t, 1);
    }
    // A short chunk (few-query path) at the end of the cache contents.
    run(s.T - 3, 3);
  }
}

TEST(Attention, RejectsBadShapes) {
  std::vector<float> x(64, 0.f), lse(64);
  EXPECT_THROW(attention_forward(x.data(), x.data(), x.data(), x.data(), lse.data(), 1, 2, 3, 2, 4, 2, 0.5f),
               Error);  // H % Hkv != 0
  EXPECT_THROW(attention_forward(x.data(), x.data(), x.data(), x.data(), lse.data(), 1, 0, 2, 2, 4, 2, 0.5f),
               Error);  // T = 0
  EXPECT_THROW(attention_forward_cached(x.data(), x.data(), x.data(), x.data(), 1, 2, 7, 8, 1, 1, 4, 8, 0.5f),
               Error);  // pos0 + Tq > Tmax
}
