#include "nanochat/optim/optim_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/gemm_bf16.h"

namespace nanochat {

namespace {

// Element counts below which OpenMP is not worth its fork/join.
constexpr int64_t kParElems = 1 << 15;

// PyTorch's lerp(a, b, w): a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w) (docs/nanochat.md 2.2).
inline float lerp(float a, float b, float w) { return std::fabs(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.f - w); }

// Polar Express coefficients (a, b, c) for 5 iterations (nanochat optim.py; docs/nanochat.md 2.3 step 5).
constexpr double kPolar[5][3] = {
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
};

// Sum of squares of x[0..n) in double, in eight interleaved partial sums (x[i] into sum i mod 8)
// added in a fixed order: the loop vectorizes (one sum's chain would wait on each add), and the
// result depends on n only.
double sumsq_lanes(const float* x, int64_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += static_cast<double>(x[i + k]) * x[i + k];
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]) * x[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

// Sum of squares of x[0..n) in double: blocks of kSumBlock values (sumsq_lanes) added in order,
// the same whatever the number of threads.
double sum_sq(const float* x, int64_t n) {
  constexpr int64_t kSumBlock = 1 << 14;
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> part(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (n >= kParElems)
  for (int64_t b = 0; b < blocks; ++b)
    part[static_cast<size_t>(b)] = sumsq_lanes(x + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
  double s = 0;
  for (double v : part) s += v;
  return s;
}

// out[i] = sum_j x[i, j]^2 for the rows of a row-major (m, n) matrix.
void row_sumsq(const float* x, int64_t m, int64_t n, double* out) {
#pragma omp parallel for schedule(guided) if (m * n >= kParElems)
  for (int64_t i = 0; i < m; ++i) out[i] = sumsq_lanes(x + i * n, n);
}

// out[j] = sum_i x[i, j]^2 for the columns of a row-major (m, n) matrix. Rows are walked in
// order (i ascending, the same summation order per column as a column walk) over blocks of
// columns, so memory is read contiguously and the inner loop vectorizes.
void col_sumsq(const float* x, int64_t m, int64_t n, double* out) {
  constexpr int64_t kCols = 512;
  const int64_t blocks = (n + kCols - 1) / kCols;
#pragma omp parallel for schedule(guided) if (m * n >= kParElems)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kCols, j1 = std::min(n, j0 + kCols);
    double* o = out + j0;
    for (int64_t j = 0; j < j1 - j0; ++j) o[j] = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      const float* r = x + i * n + j0;
      for (int64_t j = 0; j < j1 - j0; ++j) o[j] += static_cast<double>(r[j]) * r[j];
    }
  }
}

// p - (lr g + decay), the decay lrwd p only where g and p agree in sign (cautious weight decay).
inline float cautious_step(float pv, float g, float lr, float lrwd) {
  const float decay = (g * pv >= 0.f) ? lrwd * pv : 0.f;
  return pv - (lr * g + decay);
}

}  // namespace

void adamw_update(float* p, const float* grad, float* m, float* v, size_t n, float grad_scale, const AdamWHyper& hp) {
  NC_CHECK(hp.step >= 1, "AdamW step count must be >= 1");
  const float decay = static_cast<float>(1.0 - hp.lr * hp.weight_decay);
  const float w1 = static_cast<float>(1.0 - hp.beta1);
  const float w2 = static_cast<float>(1.0 - hp.beta2);
  const double bc1 = 1.0 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bc2 = 1.0 - std::pow(hp.beta2, static_cast<double>(hp.step));
  const float step_size = static_cast<float>(hp.lr / bc1);
  const float bc2f = static_cast<float>(bc2);
  const float eps = static_cast<float>(hp.eps);
  const int64_t N = static_cast<int64_t>(n);
#pragma omp parallel for schedule(guided) if (N >= kParElems)
  for (int64_t i = 0; i < N; ++i) {
    const float g = grad[i] * grad_scale;
    const float pi = p[i] * decay;
    const float mi = lerp(m[i], g, w1);
    const float vi = lerp(v[i], g * g, w2);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / (std::sqrt(vi / bc2f) + eps));
  }
}

namespace {

// Gram matrices at or above this side are computed in 2x2 blocks (3 GEMMs instead of 4 blocks'
// worth of FLOPs); smaller ones in one GEMM. The diagonal blocks are split again while their side is
// at least twice this (each split saves a quarter of that block's FLOPs; no product gets smaller
// than this side and half its length but one).
constexpr int64_t kBlockedGramSide = 128;

// G = X X^T (wide: X is (k, len) row-major, row stride ldx) or G = X^T X (tall: X is (len, k),
// row stride ldx), into the (k, k) block of G with row stride ldg, with `mul(ta, tb, M, N, K, A,
// lda, B, ldb, C, ldc)` computing C = op(A) op(B) (sgemm on fp32 X, bgemm on bf16 X). The result is
// symmetric, so X is split in two halves along k (at the top at k >= kBlockedGramSide, below while
// k >= 2 kBlockedGramSide) and only G11, G12 and G22 are multiplied, G11 and G22 the same way
// (at d8's side 512: 5/8 of one product's FLOPs); G21 is G12 transposed (the result is exactly
// symmetric). Every entry is still one dot product over len.
template <typename T, typename Mul>
void gram_block(const T* X, int64_t ldx, int64_t k, int64_t len, bool tall, float* G, int64_t ldg, bool top, Mul& mul) {
  const bool ta = tall, tb = !tall;
  if (k < (top ? kBlockedGramSide : 2 * kBlockedGramSide)) {
    mul(ta, tb, k, k, len, X, ldx, X, ldx, G, ldg);
    return;
  }
  const int64_t h = k / 2, h2 = k - h;
  // start of the second half of X: columns h.. (tall) or rows h.. (wide)
  const T* X2 = tall ? X + h : X + h * ldx;
  gram_block(X, ldx, h, len, tall, G, ldg, false, mul);                  // G11
  mul(ta, tb, h, h2, len, X, ldx, X2, ldx, G + h, ldg);                  // G12
  gram_block(X2, ldx, h2, len, tall, G + h * ldg + h, ldg, false, mul);  // G22
#pragma omp parallel for schedule(guided) if (h * h2 >= kParElems)
  for (int64_t i = 0; i < h2; ++i)  // G21 = G12^T
    for (int64_t j = 0; j < h; ++j) G[(h + i) * ldg + j] = G[j * ldg + h + i];
}

// gram_block on the whole (k, k) G: X (k, len) wide or (len, k) tall, rows contiguous.
template <typename T, typename Mul>
void gram_with(const T* X, int64_t k, int64_t len, bool tall, float* G, Mul&& mul) {
  gram_block(X, tall ? k : len, k, len, tall, G, k, true, mul);
}

void gram(const float* X, int64_t k, int64_t len, bool tall, float* G) {
  gram_with(X, k, len, tall, G,
            [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float* C, int64_t ldc) { sgemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc); });
}

// gram on bf16 X with fp32 accumulation (bgemm).
void gram_bf16(const bf16* X, int64_t k, int64_t len, bool tall, float* G) {
  gram_with(X, k, len, tall, G,
            [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
               int64_t ldb, float* C, int64_t ldc) { bgemm(ta, tb, M, N, K, A, lda, B, ldb, 0.f, C, ldc); });
}

// FLOPs of gram_block(X, k, len, top): one (k, k, len) product, or its blocks' products.
int64_t gram_flops(int64_t k, int64_t len, bool top = true) {
  if (k < (top ? kBlockedGramSide : 2 * kBlockedGramSide)) return 2 * k * k * len;
  const int64_t h = k / 2, h2 = k - h;
  return gram_flops(h, len, false) + 2 * len * h * h2 + gram_flops(h2, len, false);
}

}  // namespace

int64_t polar_express_flops(int64_t m, int64_t n, int steps) {
  NC_CHECK(steps >= 0 && steps <= 5, "Polar Express has coefficients for at most 5 steps");
  const int64_t k = std::min(m, n), len = std::max(m, n);
  return steps * (gram_flops(k, len) + gram_flops(k, k) + 2 * m * n * k);
}

float* polar_express(float* x, int64_t m, int64_t n, const MuonScratch& s, int steps) {
  NC_CHECK(steps >= 0 && steps <= 5, "Polar Express has coefficients for at most 5 steps");
  const bool tall = m > n;
  const int64_t k = tall ? n : m;
  const size_t mn = static_cast<size_t>(m * n);
  float* cur = x;
  float* nxt = s.x2;
  for (int t = 0; t < steps; ++t) {
    const float a = static_cast<float>(kPolar[t][0]);
    const float b = static_cast<float>(kPolar[t][1]);
    const float c = static_cast<float>(kPolar[t][2]);
    // A = X^T X (n, n) if tall, else X X^T (m, m)
    gram(cur, k, tall ? m : n, tall, s.a);
    // B = b A + c A A, with A A = A A^T (A is symmetric)
    gram(s.a, k, k, false, s.b);
    const int64_t kk = k * k;
#pragma omp parallel for schedule(guided) if (kk >= kParElems)
    for (int64_t i = 0; i < kk; ++i) s.b[i] = b * s.a[i] + c * s.b[i];
    // X' = a X + X B (tall) or a X + B X (wide/square)
    std::memcpy(nxt, cur, sizeof(float) * mn);
    if (tall)
      sgemm(false, false, m, n, n, 1.f, cur, n, s.b, n, a, nxt, n);
    else
      sgemm(false, false, m, n, m, 1.f, s.b, m, cur, n, a, nxt, n);
    std::swap(cur, nxt);
  }
  return cur;
}

namespace {

// The bf16 value nearest to v, as an fp32 number (what a bf16 tensor holds).
inline float rb(float v) { return bf16_to_float(float_to_bf16(v)); }

// x[i] <- rb(x[i]) for n values.
void round_to_bf16(float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParElems)
  for (int64_t i = 0; i < n; ++i) x[i] = rb(x[i]);
}

// A thread's bf16 operand buffer `which` (0 or 1), at least n values.
bf16* operand_buffer(int which, size_t n) {
  thread_local std::vector<bf16> buf[2];
  if (buf[which].size() < n) buf[which].resize(n);
  return buf[which].data();
}

}  // namespace

float* polar_express_bf16(float* x, int64_t m, int64_t n, const MuonScratch& s, int steps) {
  NC_CHECK(steps >= 0 && steps <= 5, "Polar Express has coefficients for at most 5 steps");
  require_native_bf16("--dtype bfloat16 (Muon's Polar Express in bf16)");
  const bool tall = m > n;
  const int64_t k = tall ? n : m, kk = k * k, mn = m * n;
  bf16* xh = operand_buffer(0, static_cast<size_t>(mn));
  bf16* ah = operand_buffer(1, static_cast<size_t>(kk));
  float* cur = x;
  float* nxt = s.x2;
  for (int t = 0; t < steps; ++t) {
    const float a = static_cast<float>(kPolar[t][0]);
    const float b = static_cast<float>(kPolar[t][1]);
    const float c = static_cast<float>(kPolar[t][2]);
    to_bf16(cur, xh, mn);  // exact: cur holds bf16 values
    // A = X^T X (n, n) if tall, else X X^T (m, m)
    gram_bf16(xh, k, tall ? m : n, tall, s.a);
    round_to_bf16(s.a, kk);
    to_bf16(s.a, ah, kk);
    // A A: in blocks as A A^T where gram built A exactly symmetric, else one full product
    if (k >= kBlockedGramSide)
      gram_bf16(ah, k, k, false, s.b);
    else
      bgemm(false, false, k, k, k, ah, k, ah, k, 0.f, s.b, k);
#pragma omp parallel for schedule(static) if (kk >= kParElems)
    for (int64_t i = 0; i < kk; ++i) s.b[i] = rb(rb(b * s.a[i]) + rb(c * rb(s.b[i])));
    to_bf16(s.b, ah, kk);  // B
    if (tall)
      bgemm(false, false, m, n, n, xh, n, ah, n, 0.f, nxt, n);  // X B
    else
      bgemm(false, false, m, n, m, ah, m, xh, n, 0.f, nxt, n);  // B X
#pragma omp parallel for schedule(static) if (mn >= kParElems)
    for (int64_t i = 0; i < mn; ++i) nxt[i] = rb(rb(a * cur[i]) + rb(nxt[i]));
    std::swap(cur, nxt);
  }
  return cur;
}

void muon_update(float* p, const float* grad, float* momentum, float* second_moment, int64_t m, int64_t n,
                 float grad_scale, const MuonHyper& hp, const MuonScratch& s) {
  const int64_t mn = m * n;
  float* x = s.x;
  double* acc = s.rowv;

  // 1. Nesterov momentum via two lerps: M <- lerp(M, G, 1 - mu); X <- lerp(G, M, mu).
  const float mu = static_cast<float>(hp.momentum);
  const float one_minus_mu = static_cast<float>(1.0 - hp.momentum);
#pragma omp parallel for schedule(guided) if (mn >= kParElems)
  for (int64_t i = 0; i < mn; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = lerp(momentum[i], g, one_minus_mu);
    momentum[i] = mi;
    x[i] = lerp(g, mi, mu);
  }
  if (hp.bf16) round_to_bf16(x, mn);  // nanochat: X = g.bfloat16()

  // 3. MuonEq: every row scaled to norm target = ||X||_F / sqrt(m) (row norms clamped at 1e-6).
  row_sumsq(x, m, n, acc);
  double fro2 = 0;
  for (int64_t i = 0; i < m; ++i) fro2 += acc[i];
  const double target = std::sqrt(fro2) / std::sqrt(static_cast<double>(m));
#pragma omp parallel for schedule(guided) if (mn >= kParElems)
  for (int64_t i = 0; i < m; ++i) {
    float f = static_cast<float>(target / std::max(std::sqrt(acc[i]), 1e-6));
    float* r = x + i * n;
    if (hp.bf16) {  // the factor .to(bf16), the product rounded
      f = rb(f);
      for (int64_t j = 0; j < n; ++j) r[j] = rb(r[j] * f);
    } else {
      for (int64_t j = 0; j < n; ++j) r[j] *= f;
    }
  }

  // 4. Pre-scale: X / (||X||_F * 1.01 + 1e-6).
  {
    if (hp.bf16) {  // the norm of a bf16 tensor is bf16, and so is every result after it
      const float d = rb(rb(rb(static_cast<float>(std::sqrt(sum_sq(x, mn)))) * 1.01f) + 1e-6f);
#pragma omp parallel for schedule(guided) if (mn >= kParElems)
      for (int64_t i = 0; i < mn; ++i) x[i] = rb(x[i] / d);
    } else {
      const float d = static_cast<float>(std::sqrt(sum_sq(x, mn)) * 1.01 + 1e-6);
#pragma omp parallel for schedule(guided) if (mn >= kParElems)
      for (int64_t i = 0; i < mn; ++i) x[i] /= d;
    }
  }

  // 5. Polar Express.
  float* y = hp.bf16 ? polar_express_bf16(x, m, n, s, hp.ns_steps) : polar_express(x, m, n, s, hp.ns_steps);

  // 7. Muon+: ||g||_F <- sqrt(min(m, n)).
  {
    const double f = std::sqrt(static_cast<double>(std::min(m, n))) / std::max(std::sqrt(sum_sq(y, mn)), 1e-6);
    const float ff = static_cast<float>(f);
#pragma omp parallel for schedule(guided) if (mn >= kParElems)
    for (int64_t i = 0; i < mn; ++i) y[i] *= ff;
  }

  // 8. NorMuon: per-row (m >= n) or per-column (m < n) running second moment.
  const bool rows = m >= n;
  const int64_t nv = rows ? m : n;  // number of second-moment entries
  const double R = rows ? n : m;    // size of the reduced dimension
  if (rows)
    row_sumsq(y, m, n, acc);
  else
    col_sumsq(y, m, n, acc);
  const float w2 = static_cast<float>(1.0 - hp.beta2);
  double vnorm2 = 0, vnorm_new2 = 0;
  for (int64_t k = 0; k < nv; ++k) {
    const float vmean = static_cast<float>(acc[k] / R);
    vnorm2 += static_cast<double>(vmean) * R;
    second_moment[k] = lerp(second_moment[k], vmean, w2);
    const double step = 1.0 / std::sqrt(std::max(static_cast<double>(second_moment[k]), 1e-10));
    vnorm_new2 += static_cast<double>(vmean) * R * step * step;
    acc[k] = step;  // reuse: per-entry step size
  }
  const double ratio = std::sqrt(vnorm2) / std::max(std::sqrt(vnorm_new2), 1e-10);

  // 9-10. lr_eff = lr sqrt(max(1, m/n)); cautious weight decay (mask g*p >= 0) and update. Each
  // entry's scale as a float first (in the buffer polar_express left free), so that the loop over
  // a row vectorizes.
  const double lr_eff = hp.lr * std::sqrt(std::max(1.0, static_cast<double>(m) / n));
  const float lr = static_cast<float>(lr_eff);
  const float lrwd = static_cast<float>(lr_eff * hp.weight_decay);
  float* scale = y == s.x ? s.x2 : s.x;  // mn >= nv floats
  for (int64_t k = 0; k < nv; ++k) scale[k] = static_cast<float>(acc[k] * ratio);
#pragma omp parallel for schedule(guided) if (mn >= kParElems)
  for (int64_t i = 0; i < m; ++i) {
    const float* yr = y + i * n;
    float* pr = p + i * n;
    if (rows) {
      const float sc = scale[i];
      for (int64_t j = 0; j < n; ++j) pr[j] = cautious_step(pr[j], yr[j] * sc, lr, lrwd);
    } else {
      for (int64_t j = 0; j < n; ++j) pr[j] = cautious_step(pr[j], yr[j] * scale[j], lr, lrwd);
    }
  }
}

}  // namespace nanochat
