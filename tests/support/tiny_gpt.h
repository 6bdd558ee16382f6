#pragma once
// A 3-layer GPT small enough for multi-rank tests of the step (T 8, vocab 40, C 32, window SL),
// and its weights made well-conditioned for gradient comparisons.
#include <string>

#include "nanochat/core/rng.h"
#include "nanochat/model/gpt.h"

namespace nctest {

inline nanochat::ModelConfig tiny_gpt_config() {
  nanochat::ModelConfig c;
  c.sequence_len = 8;
  c.vocab_size = 40;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.n_embd = 32;
  c.window_pattern = "SL";
  return c;
}

/// nanochat's init with seed 9, then the zero-init matrices (c_proj, lm_head, smear_lambda) made
/// nonzero, so that every gradient is well above rounding noise: a gradient that is pure rounding
/// noise at init is amplified by Adam's sign-like first steps differently for every summation
/// order (tests/train/zero2_grad_accum_test.cpp).
inline void init_tiny_gpt(nanochat::GPT& m) {
  m.init_weights(9);
  nanochat::Rng rng(10);
  for (const nanochat::ParamInfo& p : m.params())
    if (p.name.find("c_proj") != std::string::npos || p.name == "lm_head.weight" || p.name == "smear_lambda") {
      float* w = m.param(p.name);
      for (size_t i = 0; i < p.numel; ++i) w[i] = static_cast<float>(rng.uniform(-0.3, 0.3));
    }
}

}  // namespace nctest
