// GPT: parameter table, initialisation (docs/nanochat.md 1.2), the loss at init (10.3), exactly-zero
// gradients at init (1.7), consistency of the training / evaluation / logits paths, a
// whole-model finite-difference check, input validation, and no allocation in a steady step.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/rng.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/model/gpt.h"
#include "support/fd_check.h"

// Counts operator new calls while enabled (to prove forward_backward allocates nothing).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<bool> g_count_allocs{false};
std::atomic<long> g_allocs{0};        // allocations of more than kSmallAlloc bytes
std::atomic<long> g_small_allocs{0};  // the rest
constexpr size_t kSmallAlloc = 256;
}  // namespace
void* operator new(size_t n) {
  if (g_count_allocs.load(std::memory_order_relaxed)) (n > kSmallAlloc ? g_allocs : g_small_allocs).fetch_add(1);
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

using namespace nanochat;

namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.sequence_len = 16;
  c.vocab_size = 50;  // padded to 64
  c.n_layer = 3;
  c.n_head = 2;
  c.n_kv_head = 1;  // GQA
  c.n_embd = 32;
  c.window_pattern = "SL";
  return c;
}

std::vector<int32_t> random_tokens(Rng& rng, size_t n, int64_t V) {
  std::vector<int32_t> t(n);
  for (auto& v : t) v = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  return t;
}

// Makes every parameter non-degenerate (c_proj, mlp.c_proj, smear_lambda nonzero) and the
// logits O(1) (lm_head larger than its init), so that every gradient is well above fp32 noise.
void randomize(GPT& m, uint64_t seed, double scale = 0.3) {
  Rng rng(seed);
  m.init_weights(seed);
  for (const ParamInfo& p : m.params()) {
    float* w = m.param(p.name);
    const bool zero_init = p.name.find("c_proj") != std::string::npos || p.name == "smear_lambda";
    if (zero_init || p.name == "lm_head.weight")
      for (size_t i = 0; i < p.numel; ++i) w[i] = static_cast<float>(rng.uniform(-scale, scale));
  }
}

double max_abs(const float* x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(x[i])));
  return m;
}

}  // namespace

TEST(Gpt, ParameterTableOrderShapesOffsets) {
  const ModelConfig c = tiny_config();
  GPT m(c);
  const std::vector<std::string> want = {"resid_lambdas",
                                         "x0_lambdas",
                                         "smear_lambda",
                                         "backout_lambda",
                                         "transformer.wte.weight",
                                         "transformer.h.0.attn.c_q.weight",
                                         "transformer.h.0.attn.c_k.weight",
                                         "transformer.h.0.attn.c_v.weight",
                                         "transformer.h.0.attn.c_proj.weight",
                                         "transformer.h.0.attn.ve_gate.weight",
                                         "transformer.h.0.mlp.c_fc.weight",
                                         "transformer.h.0.mlp.c_proj.weight",
                                         "transformer.h.1.attn.c_q.weight",
                                         "transformer.h.1.attn.c_k.weight",
                                         "transformer.h.1.attn.c_v.weight",
                                         "transformer.h.1.attn.c_proj.weight",
                                         "transformer.h.1.mlp.c_fc.weight",
                                         "transformer.h.1.mlp.c_proj.weight",
                                         "transformer.h.2.attn.c_q.weight",
                                         "transformer.h.2.attn.c_k.weight",
                                         "transformer.h.2.attn.c_v.weight",
                                         "transformer.h.2.attn.c_proj.weight",
                                         "transformer.h.2.attn.ve_gate.weight",
                                         "transformer.h.2.mlp.c_fc.weight",
                                         "transformer.h.2.mlp.c_proj.weight",
                                         "lm_head.weight",
                                         "smear_gate.weight",
                                         "value_embeds.0.weight",
                                         "value_embeds.2.weight"};
  ASSERT_EQ(m.params().size(), want.size());
  size_t off = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(m.params()[i].name, want[i]);
    EXPECT_EQ(m.params()[i].offset, off);
    off += m.params()[i].numel;
  }
  EXPECT_EQ(off, m.num_params());
  EXPECT_EQ(m.param_info("transformer.wte.weight").shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(m.param_info("transformer.h.1.attn.c_k.weight").shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(m.param_info("transformer.h.0.attn.ve_gate.weight").shape, (std::vector<int64_t>{1, 12}));
  EXPECT_EQ(m.param_info("value_embeds.2.weight").shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(m.param_info("smear_gate.weight").shape, (std::vector<int64_t>{1, 24}));
  EXPECT_EQ(m.grad("lm_head.weight") - m.grad_data(), m.param("lm_head.weight") - m.param_data());
  EXPECT_THROW(m.param("transformer.h.1.attn.ve_gate.weight"), Error);  // layer 1 has no VE
  EXPECT_THROW(m.grad("nope"), Error);
}

TEST(Gpt, InitWeightsFollowsNanochat) {
  ModelConfig c = tiny_config();
  c.n_embd = 64;
  c.vocab_size = 4096;
  GPT m(c);
  m.init_weights(7);
  const double s = std::sqrt(3.0 / 64.0);
  auto stats = [&](const std::string& n, double& mean, double& sd, double& lo, double& hi) {
    const ParamInfo& p = m.param_info(n);
    const float* w = m.param(n);
    double s1 = 0, s2 = 0;
    lo = 1e30;
    hi = -1e30;
    for (size_t i = 0; i < p.numel; ++i) {
      s1 += w[i];
      s2 += double(w[i]) * w[i];
      lo = std::min(lo, double(w[i]));
      hi = std::max(hi, double(w[i]));
    }
    mean = s1 / p.numel;
    sd = std::sqrt(s2 / p.numel - mean * mean);
  };
  double mean, sd, lo, hi;
  stats("transformer.wte.weight", mean, sd, lo, hi);
  EXPECT_NEAR(sd, 0.8, 0.01);
  EXPECT_NEAR(mean, 0.0, 0.01);
  stats("lm_head.weight", mean, sd, lo, hi);
  EXPECT_NEAR(sd, 0.001, 1.5e-5);
  stats("transformer.h.0.attn.c_q.weight", mean, sd, lo, hi);
  EXPECT_GE(lo, -s);
  EXPECT_LE(hi, s);
  EXPECT_NEAR(sd, s / std::sqrt(3.0), 0.05 * s);
  stats("transformer.h.1.mlp.c_fc.weight", mean, sd, lo, hi);
  EXPECT_GE(lo, -0.4 * s);
  EXPECT_LE(hi, 0.4 * s);
  EXPECT_GT(hi, 0.35 * s);
  stats("value_embeds.2.weight", mean, sd, lo, hi);
  EXPECT_GE(lo, -s);
  EXPECT_LE(hi, s);
  for (const char* n : {"transformer.h.0.attn.ve_gate.weight", "smear_gate.weight"}) {
    stats(n, mean, sd, lo, hi);
    EXPECT_GE(lo, 0.0) << n;
    EXPECT_LE(hi, 0.02) << n;
    EXPECT_GT(hi, 0.0) << n;
  }
  for (const char* n : {"transformer.h.0.attn.c_proj.weight", "transformer.h.2.mlp.c_proj.weight"}) {
    stats(n, mean, sd, lo, hi);
    EXPECT_EQ(lo, 0.0) << n;
    EXPECT_EQ(hi, 0.0) << n;
  }
  // L = 3: resid = 1.15 - 0.1 i / 2, x0 = 0.20 - 0.15 i / 2
  const float* r = m.param("resid_lambdas");
  const float* a = m.param("x0_lambdas");
  for (int i = 0; i < 3; ++i) {
    EXPECT_FLOAT_EQ(r[i], static_cast<float>(1.15 - 0.05 * i));
    EXPECT_FLOAT_EQ(a[i], static_cast<float>(0.20 - 0.075 * i));
  }
  EXPECT_EQ(*m.param("smear_lambda"), 0.f);
  EXPECT_EQ(*m.param("backout_lambda"), 0.2f);
  // deterministic per seed
  GPT m2(c);
  m2.init_weights(7);
  EXPECT_TRUE(std::equal(m.param_data(), m.param_data() + m.num_params(), m2.param_data()));
  m2.init_weights(8);
  EXPECT_FALSE(std::equal(m.param_data(), m.param_data() + m.num_params(), m2.param_data()));
}

// docs/nanochat.md 1.7 end and 10.3/10.6: at init the loss is ~ln(V) and these gradients are exactly zero.
TEST(Gpt, InitLossIsLnVAndSomeGradientsAreExactlyZero) {
  const ModelConfig c = ModelConfig::from_depth(2, 64, 64, 64, 32768, "SSSL");  // C = 128
  GPT m(c);
  m.init_weights(42);
  Rng rng(3);
  const int B = 2, T = 64;
  const auto idx = random_tokens(rng, B * T, c.vocab_size);
  const auto tgt = random_tokens(rng, B * T, c.vocab_size);
  m.zero_grad();
  const float loss = m.forward_backward(idx.data(), tgt.data(), B, T);
  EXPECT_NEAR(loss, std::log(32768.0), 0.05);
  for (const ParamInfo& p : m.params()) {
    const bool zero = p.name.find("c_q") != std::string::npos || p.name.find("c_k") != std::string::npos ||
                      p.name.find("c_v") != std::string::npos || p.name.find("ve_gate") != std::string::npos ||
                      p.name.find("c_fc") != std::string::npos || p.name.rfind("value_embeds", 0) == 0 ||
                      p.name == "smear_gate.weight";
    const double g = max_abs(m.grad(p.name), p.numel);
    if (zero)
      EXPECT_EQ(g, 0.0) << p.name;
    else
      EXPECT_GT(g, 0.0) << p.name;
  }
}

TEST(Gpt, TrainingEvalAndLogitsPathsAgree) {
  const ModelConfig c = tiny_config();
  GPT m(c);
  randomize(m, 11);
  Rng rng(12);
  const int B = 3, T = 9;
  const int64_t N = B * T, V = c.vocab_size;
  const auto idx = random_tokens(rng, N, V);
  auto tgt = random_tokens(rng, N, V);
  tgt[4] = -1;
  tgt[20] = -1;
  m.zero_grad();
  const float train_loss = m.forward_backward(idx.data(), tgt.data(), B, T);
  std::vector<float> ptl(N);
  const float eval_loss = m.forward_loss(idx.data(), tgt.data(), B, T, ptl.data());
  EXPECT_FLOAT_EQ(train_loss, eval_loss);
  std::vector<float> logits(N * V);
  m.forward_logits(idx.data(), B, T, logits.data());
  double sum = 0;
  int valid = 0;
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits.data() + n * V;
    for (int64_t v = 0; v < V; ++v) EXPECT_LE(std::fabs(z[v]), 15.f);
    if (tgt[n] < 0) {
      EXPECT_EQ(ptl[n], 0.f);
      continue;
    }
    double se = 0;
    for (int64_t v = 0; v < V; ++v) se += std::exp(static_cast<double>(z[v]));
    const double l = std::log(se) - z[tgt[n]];
    EXPECT_NEAR(ptl[n], l, 1e-5 * std::max(1.0, l)) << n;
    sum += l;
    ++valid;
  }
  EXPECT_NEAR(eval_loss, sum / valid, 1e-5 * eval_loss);
}

TEST(Gpt, AllIgnoredTargetsGiveZeroLossAndNoGradient) {
  GPT m(tiny_config());
  randomize(m, 5);
  m.zero_grad();
  const std::vector<int32_t> idx(8, 3), tgt(8, -1);
  EXPECT_EQ(m.forward_backward(idx.data(), tgt.data(), 2, 4), 0.f);
  EXPECT_EQ(max_abs(m.grad_data(), m.num_params()), 0.0);
  EXPECT_EQ(m.forward_loss(idx.data(), tgt.data(), 2, 4), 0.f);
}

TEST(Gpt, RejectsBadInputs) {
  const ModelConfig c = tiny_config();
  GPT m(c);
  m.init_weights(1);
  std::vector<int32_t> idx(8, 1), tgt(8, 2);
  idx[3] = 50;  // == V
  EXPECT_THROW(m.forward_backward(idx.data(), tgt.data(), 2, 4), Error);
  idx[3] = -1;
  EXPECT_THROW(m.forward_loss(idx.data(), tgt.data(), 2, 4), Error);
  idx[3] = 1;
  tgt[5] = -2;
  EXPECT_THROW(m.forward_backward(idx.data(), tgt.data(), 2, 4), Error);
  std::vector<int32_t> long_idx(161, 1), long_tgt(161, 1);  // > 10 x sequence_len
  EXPECT_THROW(m.forward_backward(long_idx.data(), long_tgt.data(), 1, 161), Error);
  EXPECT_THROW(m.forward_backward(idx.data(), tgt.data(), 0, 4), Error);
}

// Results do not depend on the lm_head chunking or on earlier calls with other shapes (the
// activation arena is reused / regrown).
TEST(Gpt, ChunkingAndArenaReuseDoNotChangeResults) {
  const ModelConfig c = tiny_config();
  Rng rng(21);
  const int B = 2, T = 12;
  const auto idx = random_tokens(rng, 3 * T, c.vocab_size);
  const auto tgt = random_tokens(rng, 3 * T, c.vocab_size);
  GPT a(c), b(c);
  randomize(a, 3);
  randomize(b, 3);
  a.zero_grad();
  const float la = a.forward_backward(idx.data(), tgt.data(), B, T);
  b.set_lm_head_chunk(5);
  b.forward_loss(idx.data(), tgt.data(), 1, 3);   // small arena first
  b.forward_loss(idx.data(), tgt.data(), 3, 12);  // grows
  b.zero_grad();
  const float lb = b.forward_backward(idx.data(), tgt.data(), B, T);  // reuses the larger one
  EXPECT_NEAR(la, lb, 1e-6 * la);
  const double gmax = max_abs(a.grad_data(), a.num_params());
  for (size_t i = 0; i < a.num_params(); ++i) ASSERT_NEAR(a.grad_data()[i], b.grad_data()[i], 1e-5 * gmax) << i;
}

// MLP activation recompute: bit-identical loss and gradients, less activation memory.
TEST(Gpt, RecomputeMlpGivesIdenticalGradientsWithLessMemory) {
  const ModelConfig c = tiny_config();
  Rng rng(23);
  const int B = 2, T = 12;
  const auto idx = random_tokens(rng, B * T, c.vocab_size);
  const auto tgt = random_tokens(rng, B * T, c.vocab_size);
  GPT a(c), b(c);
  randomize(a, 5);
  randomize(b, 5);
  b.set_recompute_mlp(true);
  EXPECT_TRUE(b.recompute_mlp());
  a.zero_grad();
  b.zero_grad();
  const float la = a.forward_backward(idx.data(), tgt.data(), B, T);
  const float lb = b.forward_backward(idx.data(), tgt.data(), B, T);
  EXPECT_EQ(la, lb);
  for (size_t i = 0; i < a.num_params(); ++i) ASSERT_EQ(a.grad_data()[i], b.grad_data()[i]) << i;
  // (L - 1) buffers of (N, 4C) floats fewer, up to the arena's per-buffer rounding
  const size_t saved = static_cast<size_t>(c.n_layer - 1) * B * T * 4 * c.n_embd * sizeof(float);
  EXPECT_LE(b.activation_bytes() + saved, a.activation_bytes() + 64 * c.n_layer);
  EXPECT_GE(b.activation_bytes() + saved + 64 * c.n_layer, a.activation_bytes());
}

// grad_ready reports every parameter exactly once, lm_head first, and only once its gradient is
// final: the gradient seen at the callback equals the one after the backward, bit for bit, and the
// gradients equal those of a run without the callback. Accumulation into an earlier micro-batch's
// gradient is covered (the second call accumulates).
TEST(Gpt, GradReadyReportsEachParameterOnceWhenItsGradientIsFinal) {
  const ModelConfig c = tiny_config();
  Rng rng(22);
  const int B = 2, T = 12;
  const auto idx = random_tokens(rng, B * T, c.vocab_size);
  const auto tgt = random_tokens(rng, B * T, c.vocab_size);
  GPT a(c), b(c);
  randomize(a, 4);
  randomize(b, 4);
  a.zero_grad();
  b.zero_grad();
  a.forward_backward(idx.data(), tgt.data(), B, T);
  a.forward_backward(idx.data(), tgt.data(), B, T);
  b.forward_backward(idx.data(), tgt.data(), B, T);
  std::vector<size_t> order;
  std::vector<std::vector<float>> at_ready(b.params().size());
  b.forward_backward(idx.data(), tgt.data(), B, T, 1.f, [&](size_t k) {
    order.push_back(k);
    const ParamInfo& p = b.params()[k];
    at_ready[k].assign(b.grad_data() + p.offset, b.grad_data() + p.offset + p.numel);
  });
  ASSERT_EQ(order.size(), b.params().size());
  EXPECT_EQ(b.params()[order[0]].name, "lm_head.weight");
  std::vector<size_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 0; k < sorted.size(); ++k) ASSERT_EQ(sorted[k], k) << "reported twice or never";
  // the last block's tensors come before the first block's
  const auto pos = [&](const std::string& name) {
    for (size_t i = 0; i < order.size(); ++i)
      if (b.params()[order[i]].name == name) return i;
    return order.size();
  };
  EXPECT_LT(pos("transformer.h.2.mlp.c_fc.weight"), pos("transformer.h.0.mlp.c_fc.weight"));
  EXPECT_LT(pos("value_embeds.2.weight"), pos("value_embeds.0.weight"));
  // the order a rank without micro-batches replays (every rank must issue the same collectives)
  EXPECT_EQ(b.grad_ready_order(), order);
  std::vector<size_t> masked_order;  // a micro-batch without valid targets reports in the same order
  const std::vector<int32_t> none(tgt.size(), -1);
  b.forward_backward(idx.data(), none.data(), B, T, 1.f, [&](size_t k) { masked_order.push_back(k); });
  EXPECT_EQ(masked_order, order);
  for (size_t k = 0; k < b.params().size(); ++k) {
    const ParamInfo& p = b.params()[k];
    for (size_t i = 0; i < p.numel; ++i) {
      ASSERT_EQ(at_ready[k][i], b.grad_data()[p.offset + i]) << p.name << " changed after grad_ready";
      ASSERT_EQ(a.grad_data()[p.offset + i], b.grad_data()[p.offset + i]) << p.name;
    }
  }
}

// Whole-model check independent of PyTorch: for each parameter tensor, the loss change along its
// gradient direction u = g/|g| matches |g| (central differences of the fp32 loss).
TEST(Gpt, WholeModelGradientMatchesFiniteDifferences) {
  const ModelConfig c = tiny_config();
  GPT m(c);
  randomize(m, 31);
  Rng rng(32);
  const int B = 2, T = 8;
  const auto idx = random_tokens(rng, B * T, c.vocab_size);
  auto tgt = random_tokens(rng, B * T, c.vocab_size);
  tgt[3] = -1;
  m.zero_grad();
  m.forward_backward(idx.data(), tgt.data(), B, T);
  std::vector<float> grad(m.grad_data(), m.grad_data() + m.num_params());
  for (const ParamInfo& p : m.params()) {
    const float* g = grad.data() + p.offset;
    double norm = 0;
    for (size_t i = 0; i < p.numel; ++i) norm += double(g[i]) * g[i];
    norm = std::sqrt(norm);
    if (norm < 1e-7) {  // value_embeds rows etc. are never zero here; padded rows only
      ADD_FAILURE() << p.name << " has a zero gradient";
      continue;
    }
    float* w = m.param(p.name);
    std::vector<float> w0(w, w + p.numel);
    const double eps = 1e-2;
    auto loss_at = [&](double t) {
      for (size_t i = 0; i < p.numel; ++i) w[i] = static_cast<float>(w0[i] + t * g[i] / norm);
      return static_cast<double>(m.forward_loss(idx.data(), tgt.data(), B, T));
    };
    const double fd = nanochat::testing::central_difference(loss_at, eps);
    std::copy(w0.begin(), w0.end(), w);
    EXPECT_NEAR(fd, norm, 3e-3 * norm + 3e-5) << p.name;
  }
}

TEST(Gpt, FlopsPerFamilyAddUpAndMatchTheGemmsATrainingStepRuns) {
  // Per family the FLOPs sum to estimate_flops, and the GEMM families' share is exactly the
  // multiply-adds sgemm runs in a forward + backward (vocab 64: no padding, so the lm_head's
  // padded rows do not differ from what the fused loss multiplies).
  ModelConfig c = tiny_config();
  c.vocab_size = 64;
  for (int64_t heads : {1, 2}) {  // head_dim 32 (MHA), then 16 (GQA, one kv head)
    c.n_head = heads;
    c.n_kv_head = 1;
    const auto f = GPT::flops_per_token_by_family(c);
    int64_t sum = 0;
    for (int64_t v : f) sum += v;
    EXPECT_EQ(sum, GPT::flops_per_token(c));
    const auto at = [&f](prof::Op op) { return f[static_cast<size_t>(op)]; };
    const int64_t C = c.n_embd, Dq = c.n_head * c.head_dim(), Dkv = c.n_kv_head * c.head_dim();
    EXPECT_EQ(at(prof::Op::GemmQKV), 6 * c.n_layer * C * (Dq + 2 * Dkv));
    EXPECT_EQ(at(prof::Op::GemmMlpFc), 6 * c.n_layer * C * 4 * C);
    EXPECT_EQ(at(prof::Op::LmHeadLoss), 6 * 64 * C);
    EXPECT_EQ(at(prof::Op::Optimizer), 0);

    GPT m(c);
    randomize(m, 5);
    Rng rng(9);
    const int B = 2, T = 16;
    const auto idx = random_tokens(rng, B * T, c.vocab_size), tgt = random_tokens(rng, B * T, c.vocab_size);
    m.zero_grad();
    const int64_t before = sgemm_flops_issued();
    m.forward_backward(idx.data(), tgt.data(), B, T, 1.f);
    const int64_t gemm_families = at(prof::Op::GemmQKV) + at(prof::Op::GemmAttnProj) + at(prof::Op::GemmMlpFc) +
                                  at(prof::Op::GemmMlpProj) + at(prof::Op::LmHeadLoss);
    EXPECT_EQ(sgemm_flops_issued() - before, int64_t{B} * T * gemm_families);
  }
}

TEST(Gpt, SteadyStateTrainingStepAllocatesNothing) {
  GPT m(tiny_config());
  randomize(m, 41);
  Rng rng(42);
  const int B = 2, T = 16;
  const auto idx = random_tokens(rng, B * T, 50);
  const auto tgt = random_tokens(rng, B * T, 50);
  m.forward_backward(idx.data(), tgt.data(), B, T);  // warm-up sizes the arena
  g_allocs = g_small_allocs = 0;
  g_count_allocs = true;
  m.forward_backward(idx.data(), tgt.data(), B, T);
  m.forward_backward(idx.data(), tgt.data(), 1, T);  // fewer tokens reuse the arena
  g_count_allocs = false;
  EXPECT_EQ(g_allocs.load(), 0);
  // oneDNN's sgemm below AVX-512 (an AVX2 build, or an AVX2 machine) allocates a 192-byte object
  // per call on some small shapes (18 in these two steps); with its AVX-512 kernels nothing.
  if (std::string(gemm_isa()).rfind("avx512", 0) == 0) {
    EXPECT_EQ(g_small_allocs.load(), 0);
  }
}
