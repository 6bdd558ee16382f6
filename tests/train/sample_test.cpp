#include "nanochat/train/sample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "nanochat/model/gpt.h"

using namespace nanochat;

namespace {
ModelConfig tiny() {
  ModelConfig c;
  c.sequence_len = 64;
  c.vocab_size = 100;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.window_pattern = "SL";
  return c;
}
// Randomise every parameter so the zero-initialised projections do not hide bugs.
void randomise(GPT& m) {
  Rng r(3);
  for (size_t i = 0; i < m.num_params(); ++i) m.param_data()[i] = static_cast<float>(r.normal() * 0.3);
}
}  // namespace

// Greedy KV-cache generation must equal the naive loop that re-runs the full forward on the
// whole sequence every step and takes the argmax of the last position (nanochat GPT.generate).
TEST(Sample, GreedyCachedGenerationEqualsNaiveFullForward) {
  GPT m(tiny());
  m.init_weights(1);
  randomise(m);
  std::vector<int32_t> seq = {5, 17, 42};
  SampleOptions o;
  o.max_tokens = 12;
  auto got = generate(m, seq, o);
  ASSERT_EQ(got.size(), 12u);
  std::vector<float> logits;
  for (int i = 0; i < 12; ++i) {
    const int T = static_cast<int>(seq.size());
    logits.resize(static_cast<size_t>(T) * 100);
    m.forward_logits(seq.data(), 1, T, logits.data());
    const float* last = logits.data() + static_cast<size_t>(T - 1) * 100;
    int32_t want = static_cast<int32_t>(std::max_element(last, last + 100) - last);
    EXPECT_EQ(got[i], want) << "step " << i;
    seq.push_back(want);
  }
}

TEST(Sample, SeedReproducibleAndTopKRespected) {
  GPT m(tiny());
  m.init_weights(1);
  randomise(m);
  SampleOptions o;
  o.max_tokens = 20;
  o.temperature = 1.0;
  o.seed = 123;
  auto a = generate(m, {1, 2}, o);
  auto b = generate(m, {1, 2}, o);
  EXPECT_EQ(a, b);
  o.seed = 124;
  // top-1 sampling is greedy whatever the seed and temperature
  o.top_k = 1;
  SampleOptions g;
  g.max_tokens = 20;
  EXPECT_EQ(generate(m, {1, 2}, o), generate(m, {1, 2}, g));
}

TEST(Sample, StopTokenEndsGeneration) {
  GPT m(tiny());
  m.init_weights(1);
  randomise(m);
  SampleOptions g;
  g.max_tokens = 10;
  auto free_run = generate(m, {7, 8}, g);
  ASSERT_FALSE(free_run.empty());
  g.stop_ids = {free_run[0]};
  EXPECT_TRUE(generate(m, {7, 8}, g).empty());
}

TEST(Sample, SampleNextTokenFollowsTheSoftmax) {
  // Two logits differing by ln(3): with temperature 1, token 0 should be drawn ~3/4 of the time.
  float logits[2] = {static_cast<float>(std::log(3.0)), 0.f};
  Rng r(9);
  int zeros = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) zeros += sample_next_token(logits, 2, 1.0, 0, r) == 0;
  EXPECT_NEAR(zeros / double(n), 0.75, 0.015);
}
