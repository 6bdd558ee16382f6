// KV-cache inference (docs/nanochat.md 1.10): prefill + token-by-token decode reproduces the full forward's
// logits at every position (incl. sliding windows that cut, GQA, smear across steps), and a
// batch-1 prefill copied into a batch-2 cache continues correctly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/rng.h"
#include "nanochat/model/gpt.h"

using namespace nanochat;

namespace {

ModelConfig cache_config() {
  ModelConfig c;
  c.sequence_len = 512;  // short window = 128 < the 150 positions below
  c.vocab_size = 61;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.window_pattern = "SL";
  return c;
}

void randomize(GPT& m, uint64_t seed) {
  Rng rng(seed);
  m.init_weights(seed);
  for (const ParamInfo& p : m.params()) {
    float* w = m.param(p.name);
    if (p.name.find("c_proj") != std::string::npos || p.name == "smear_lambda" || p.name == "lm_head.weight")
      for (size_t i = 0; i < p.numel; ++i) w[i] = static_cast<float>(rng.uniform(-0.3, 0.3));
  }
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

}  // namespace

TEST(KVCache, DecodeMatchesFullForwardAtEveryPosition) {
  const ModelConfig c = cache_config();
  GPT m(c);
  randomize(m, 5);
  Rng rng(6);
  const int B = 2, T = 150, P = 136;  // prefill P tokens, then decode one at a time (window 128 cuts)
  const int64_t V = c.vocab_size;
  std::vector<int32_t> idx(B * T);
  for (auto& v : idx) v = static_cast<int32_t>(rng.below(V));
  std::vector<float> full(static_cast<size_t>(B) * T * V);
  m.forward_logits(idx.data(), B, T, full.data());
  const double tol = 1e-4 * max_abs(full);

  KVCache cache(c, B, T);
  // prefill: logits of every prefill position
  std::vector<int32_t> pre(B * P);
  for (int b = 0; b < B; ++b) std::copy(idx.begin() + b * T, idx.begin() + b * T + P, pre.begin() + b * P);
  std::vector<float> pl(static_cast<size_t>(B) * P * V);
  m.forward_cached(pre.data(), B, P, cache, pl.data(), true);
  EXPECT_EQ(cache.pos(), P);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < P; ++t)
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(pl[(b * P + t) * V + v], full[(b * T + t) * V + v], tol) << b << "," << t;
  // decode
  std::vector<int32_t> step(B);
  std::vector<float> sl(static_cast<size_t>(B) * V);
  for (int t = P; t < T; ++t) {
    for (int b = 0; b < B; ++b) step[b] = idx[b * T + t];
    m.forward_cached(step.data(), B, 1, cache, sl.data());
    for (int b = 0; b < B; ++b)
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(sl[b * V + v], full[(b * T + t) * V + v], tol) << "b=" << b << " t=" << t;
  }
  EXPECT_EQ(cache.pos(), T);
  // full: one more token overflows
  EXPECT_THROW(m.forward_cached(step.data(), B, 1, cache, sl.data()), Error);
  cache.reset();
  EXPECT_EQ(cache.pos(), 0);
}

TEST(KVCache, PrefillFromBatchOneCacheThenDiverge) {
  const ModelConfig c = cache_config();
  GPT m(c);
  randomize(m, 9);
  Rng rng(10);
  const int P = 7, T = 12;
  const int64_t V = c.vocab_size;
  std::vector<int32_t> prompt(P);
  for (auto& v : prompt) v = static_cast<int32_t>(rng.below(V));
  KVCache one(c, 1, T);
  m.forward_cached(prompt.data(), 1, P, one, nullptr);
  KVCache two(c, 2, T);
  two.prefill_from(one);
  EXPECT_EQ(two.pos(), P);
  // two different continuations; compare each with a full forward of prompt + continuation
  std::vector<int32_t> cont = {3, 40, 17, 5, 60};  // row 0: cont[j], row 1: cont[4 - j]
  std::vector<std::vector<int32_t>> rows(2, prompt);
  std::vector<float> sl(2 * V);
  for (int j = 0; j < T - P; ++j) {
    const int32_t step[2] = {cont[j], cont[4 - j]};
    rows[0].push_back(step[0]);
    rows[1].push_back(step[1]);
    m.forward_cached(step, 2, 1, two, sl.data());
    for (int b = 0; b < 2; ++b) {
      const int Tn = static_cast<int>(rows[b].size());
      std::vector<float> full(static_cast<size_t>(Tn) * V);
      m.forward_logits(rows[b].data(), 1, Tn, full.data());
      const double tol = 1e-4 * max_abs(full);
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(sl[b * V + v], full[(Tn - 1) * V + v], tol) << "b=" << b << " j=" << j;
    }
  }
}

TEST(KVCache, RejectsMismatchedUse) {
  const ModelConfig c = cache_config();
  GPT m(c);
  m.init_weights(1);
  KVCache wrong_batch(c, 3, 8);
  const int32_t tok[2] = {1, 2};
  EXPECT_THROW(m.forward_cached(tok, 2, 1, wrong_batch, nullptr), Error);
  ModelConfig other = c;
  other.n_layer = 4;
  KVCache wrong_model(other, 2, 8);
  EXPECT_THROW(m.forward_cached(tok, 2, 1, wrong_model, nullptr), Error);
}
