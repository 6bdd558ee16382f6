// OpenAI's presence and frequency penalties (engine/engine.h apply_penalties): the closed form
// logits[t] - frequency * count(t) - presence * (count(t) > 0) on a small vocabulary, nothing
// changed when both are 0, and in generate(): a large frequency penalty makes a greedy answer
// repeat no token where the same answer without it does.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "nanochat/core/safetensors.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "support/byte_tokenizer.h"

namespace nanochat {
namespace {

TEST(Penalties, ClosedForm) {
  const std::vector<float> base = {0.5f, -1.0f, 2.0f, 0.0f, 3.25f, 1.0f};
  const std::vector<int32_t> answer = {2, 4, 2, 2, 0, -1, 6, 4};  // -1 and 6 are outside [0, 6)
  for (const double presence : {0.0, 0.7, -1.5}) {
    for (const double frequency : {0.0, 0.3, 2.0}) {
      std::vector<float> l = base;
      apply_penalties(l.data(), static_cast<int64_t>(l.size()), answer, presence, frequency);
      std::map<int32_t, int> count;
      for (const int32_t t : answer)
        if (t >= 0 && t < 6) ++count[t];
      for (int32_t t = 0; t < 6; ++t) {
        const int c = count.count(t) ? count[t] : 0;
        const double want = base[static_cast<size_t>(t)] - frequency * c - (c > 0 ? presence : 0.0);
        EXPECT_NEAR(l[static_cast<size_t>(t)], want, 1e-6) << "t=" << t << " p=" << presence << " f=" << frequency;
      }
    }
  }
}

TEST(Penalties, NoneChangesNothingAndAnEmptyAnswerNothing) {
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  apply_penalties(l.data(), 3, {0, 1, 1}, 0.0, 0.0);
  EXPECT_EQ(l, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  apply_penalties(l.data(), 3, {}, 1.0, 1.0);
  EXPECT_EQ(l, (std::vector<float>{1.0f, 2.0f, 3.0f}));
}

std::unique_ptr<GPT> fixture_model() {
  StFile f = load_safetensors(std::string(NANOCHAT_TEST_DATA) + "/chat/engine_tool_int.safetensors");
  auto model = std::make_unique<GPT>(ModelConfig::from_json(nlohmann::json::parse(f.metadata.at("config"))));
  for (const ParamInfo& p : model->params()) {
    const std::vector<float> w = f.at("param." + p.name).to_f32();
    std::copy(w.begin(), w.end(), model->param(p.name));
  }
  return model;
}

TEST(Penalties, AGreedyAnswerWithALargeFrequencyPenaltyRepeatsNoToken) {
  auto model = fixture_model();
  Engine engine(*model, nctest::byte_tokenizer());
  GenerateOptions o;
  o.temperature = 0;
  o.max_tokens = 40;
  o.tools = false;
  const std::vector<int32_t> prompt = nctest::byte_tokenizer().encode("abababab");
  const auto plain = engine.generate(prompt, o);
  const auto& p = plain.rows[0].tokens;
  ASSERT_LT(std::set<int32_t>(p.begin(), p.end()).size(), p.size()) << "the plain answer repeats nothing already";
  o.frequency_penalty = 1e4;
  const auto penalised = engine.generate(prompt, o);
  const auto& q = penalised.rows[0].tokens;
  ASSERT_FALSE(q.empty());
  EXPECT_EQ(std::set<int32_t>(q.begin(), q.end()).size(), q.size()) << "a token came twice";
}

}  // namespace
}  // namespace nanochat
