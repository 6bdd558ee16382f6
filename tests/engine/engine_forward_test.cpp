// The engine's cached decoding against the plain full forward (independent of any fixture): greedy
// rows equal the naive loop that reruns the whole sequence every step and takes the argmax of the
// last position (nanochat's GPT.generate), for one row and for rows copied from one prefill;
// sampling is reproducible for a seed, top-k 1 is greedy, and draws follow the softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "support/byte_tokenizer.h"

namespace nanochat {
namespace {

constexpr int kV = 265;  // 256 bytes + the 9 specials

const Tokenizer& byte_tok() { return nctest::byte_tokenizer(); }

ModelConfig tiny() {
  ModelConfig c;
  c.sequence_len = 64;
  c.vocab_size = kV;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.window_pattern = "SL";
  return c;
}

// Every parameter random, so the zero-initialised projections hide nothing.
std::unique_ptr<GPT> random_model() {
  auto m = std::make_unique<GPT>(tiny());
  m->init_weights(1);
  Rng r(3);
  for (size_t i = 0; i < m->num_params(); ++i) m->param_data()[i] = static_cast<float>(r.normal() * 0.3);
  return m;
}

TEST(EngineForward, GreedyRowsEqualTheNaiveFullForward) {
  auto m = random_model();
  Engine engine(*m, byte_tok());
  const std::vector<int32_t> prompt = {5, 17, 42, 99};
  GenerateOptions o;
  o.temperature = 0;
  o.max_tokens = 12;
  o.tools = false;
  // the naive loop, stopping where the engine stops (at <|assistant_end|> or <|bos|>)
  std::vector<int32_t> seq = prompt, want;
  std::vector<float> logits;
  for (int i = 0; i < o.max_tokens; ++i) {
    const int T = static_cast<int>(seq.size());
    logits.resize(static_cast<size_t>(T) * kV);
    m->forward_logits(seq.data(), 1, T, logits.data());
    const float* last = logits.data() + static_cast<size_t>(T - 1) * kV;
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + kV) - last);
    if (next == byte_tok().bos_id() || next == byte_tok().encode_special("<|assistant_end|>")) break;
    want.push_back(next);
    seq.push_back(next);
  }
  ASSERT_GE(want.size(), 4u);
  for (int rows : {1, 3}) {
    o.num_samples = rows;
    const GenerateResult r = engine.generate(prompt, o);
    for (int b = 0; b < rows; ++b) EXPECT_EQ(r.rows[b].tokens, want) << rows << " rows, row " << b;
  }
}

TEST(EngineForward, SeedReproducibleAndTopOneIsGreedy) {
  auto m = random_model();
  Engine engine(*m, byte_tok());
  GenerateOptions o;
  o.max_tokens = 20;
  o.temperature = 1.0;
  o.seed = 123;
  o.num_samples = 2;
  o.tools = false;
  const auto a = engine.generate({1, 2}, o), b = engine.generate({1, 2}, o);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(a.rows[r].tokens, b.rows[r].tokens);
  o.seed = 124;
  o.top_k = 1;
  GenerateOptions g = o;
  g.temperature = 0;
  EXPECT_EQ(engine.generate({1, 2}, o).rows[0].tokens, engine.generate({1, 2}, g).rows[0].tokens);
}

TEST(EngineForward, DrawsFollowTheSoftmax) {
  // Two logits differing by ln(3): at temperature 1 token 0 is drawn 3/4 of the time; at
  // temperature 2 the odds are sqrt(3):1, i.e. 0.634.
  const float logits[2] = {static_cast<float>(std::log(3.0)), 0.f};
  Rng r(9);
  const int n = 20000;
  int zeros = 0, zeros_t2 = 0;
  for (int i = 0; i < n; ++i) {
    zeros += sample_token(logits, 2, 1.0, 0, 1.0, r) == 0;
    zeros_t2 += sample_token(logits, 2, 2.0, 0, 1.0, r) == 0;
  }
  EXPECT_NEAR(zeros / double(n), 0.75, 0.015);
  EXPECT_NEAR(zeros_t2 / double(n), std::sqrt(3.0) / (1 + std::sqrt(3.0)), 0.015);
}

}  // namespace
}  // namespace nanochat
