// The engine against nanochat's own Engine (tests/fixtures/chat/engine_*.safetensors, written by
// tools/chat/make_engine_fixture.py): greedy generations equal token for token, with the
// calculator's output forced (integer and float results) and with a refused expression, one and
// several rows, cut by max_tokens. Plus the streaming callback, sampling rules and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "nanochat/core/error.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "support/byte_tokenizer.h"
#include "support/error_of.h"

namespace nanochat {
namespace {

const Tokenizer& byte_tok() { return nctest::byte_tokenizer(); }

struct EngineFixture {
  std::string name;
  std::unique_ptr<GPT> model;
  nlohmann::json cases;
};

EngineFixture load(const std::string& name) {
  const std::string path = std::string(NANOCHAT_TEST_DATA) + "/chat/engine_" + name + ".safetensors";
  StFile f = load_safetensors(path);
  EngineFixture fx;
  fx.name = name;
  fx.model = std::make_unique<GPT>(ModelConfig::from_json(nlohmann::json::parse(f.metadata.at("config"))));
  for (const ParamInfo& p : fx.model->params()) {
    const std::vector<float> w = f.at("param." + p.name).to_f32();
    EXPECT_EQ(w.size(), p.numel) << p.name;
    std::copy(w.begin(), w.end(), fx.model->param(p.name));
  }
  fx.cases = nlohmann::json::parse(f.metadata.at("cases"));
  return fx;
}

const char* kModels[] = {"tool_int", "tool_float", "tool_refused"};

// Greedy options for `rows` rows of at most max_tokens tokens.
GenerateOptions greedy(int rows, int max_tokens) {
  GenerateOptions o;
  o.temperature = 0;
  o.num_samples = rows;
  o.max_tokens = max_tokens;
  return o;
}

// The first case's prompt of a fixture (it ends with <|assistant_start|>: the tool call follows).
std::vector<int32_t> tool_prompt(const EngineFixture& fx) {
  return fx.cases[0].at("prompt").get<std::vector<int32_t>>();
}

TEST(Engine, GreedyEqualsNanochatEngine) {
  int forced_total = 0, stopped = 0, cut = 0;
  for (const char* name : kModels) {
    EngineFixture fx = load(name);
    Engine engine(*fx.model, byte_tok());
    ASSERT_GE(fx.cases.size(), 4u);
    for (const auto& c : fx.cases) {
      SCOPED_TRACE(std::string(name) + "/" + c.at("name").get<std::string>());
      const GenerateOptions o = greedy(c.at("num_samples"), c.at("max_tokens"));
      const auto prompt = c.at("prompt").get<std::vector<int32_t>>();
      const GenerateResult r = engine.generate(prompt, o);
      ASSERT_EQ(r.rows.size(), c.at("rows").size());
      EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(prompt.size()));
      for (size_t i = 0; i < r.rows.size(); ++i) {
        const auto& want = c.at("rows")[i];
        EXPECT_EQ(r.rows[i].tokens, want.at("tokens").get<std::vector<int32_t>>()) << "row " << i;
        EXPECT_EQ(r.rows[i].sampled, want.at("mask").get<std::vector<uint8_t>>()) << "row " << i;
        const int32_t stop = want.at("stop_token");
        EXPECT_EQ(r.rows[i].stop_token, stop) << "row " << i;
        EXPECT_EQ(r.rows[i].finish, stop >= 0 ? FinishReason::Stop : FinishReason::Length) << "row " << i;
        forced_total += static_cast<int>(std::count(r.rows[i].sampled.begin(), r.rows[i].sampled.end(), 0));
        stopped += stop >= 0;
        cut += stop < 0;
      }
    }
  }
  // The fixture exercises what it claims: tool output was forced, rows stopped and rows were cut.
  EXPECT_GT(forced_total, 10);
  EXPECT_GT(stopped, 3);
  EXPECT_GT(cut, 3);
}

TEST(Engine, ToolsOffForcesNothing) {
  EngineFixture fx = load("tool_int");
  Engine engine(*fx.model, byte_tok());
  GenerateOptions o = greedy(1, 12);
  const auto prompt = tool_prompt(fx);
  const auto with = engine.generate(prompt, o);
  o.tools = false;
  const auto without = engine.generate(prompt, o);
  EXPECT_NE(std::count(with.rows[0].sampled.begin(), with.rows[0].sampled.end(), 0), 0);
  EXPECT_EQ(std::count(without.rows[0].sampled.begin(), without.rows[0].sampled.end(), 0), 0);
}

TEST(Engine, CallbackStreamsEveryTokenAndCanStop) {
  EngineFixture fx = load("tool_int");
  Engine engine(*fx.model, byte_tok());
  const GenerateOptions o = greedy(2, 30);
  const auto prompt = tool_prompt(fx);
  std::map<int, std::vector<int32_t>> seen;
  std::map<int, std::vector<uint8_t>> seen_sampled;
  const auto full = engine.generate(prompt, o, [&](const TokenEvent& e) {
    seen[e.row].push_back(e.token);
    seen_sampled[e.row].push_back(e.forced ? 0 : 1);
    return StreamControl::Continue;
  });
  for (int b = 0; b < 2; ++b) {
    EXPECT_EQ(seen[b], full.rows[b].tokens);
    EXPECT_EQ(seen_sampled[b], full.rows[b].sampled);
  }
  // Stop after 3 tokens of row 0: every row ends as cancelled with what it had.
  int n = 0;
  const auto stopped = engine.generate(prompt, o, [&](const TokenEvent& e) {
    return e.row == 0 && ++n == 3 ? StreamControl::Stop : StreamControl::Continue;
  });
  EXPECT_EQ(stopped.rows[0].tokens.size(), 3u);
  EXPECT_EQ(stopped.rows[0].finish, FinishReason::Cancelled);
  EXPECT_EQ(stopped.rows[1].finish, FinishReason::Cancelled);
  // StopRow ends only that row.
  const auto one = engine.generate(
      prompt, o, [&](const TokenEvent& e) { return e.row == 1 ? StreamControl::StopRow : StreamControl::Continue; });
  EXPECT_EQ(one.rows[1].tokens.size(), 1u);
  EXPECT_EQ(one.rows[1].finish, FinishReason::Cancelled);
  EXPECT_EQ(one.rows[0].tokens, full.rows[0].tokens);
  EXPECT_EQ(one.rows[0].finish, full.rows[0].finish);
}

TEST(Engine, ContextLimitEndsRows) {
  EngineFixture fx = load("tool_refused");  // its free text never stops by itself
  Engine engine(*fx.model, byte_tok());
  const int64_t ctx = engine.max_context();
  EXPECT_EQ(ctx, fx.model->config().sequence_len * 10);
  // The model's free text loops on "0<|python_end|>" (see the fixture): a prompt of that never stops.
  std::vector<int32_t> prompt;
  while (static_cast<int64_t>(prompt.size()) < ctx - 5) prompt.push_back(prompt.size() % 2 ? 262 : '0');
  GenerateOptions o;
  o.temperature = 0;
  const auto r = engine.generate(prompt, o);
  EXPECT_EQ(r.rows[0].finish, FinishReason::Context);
  EXPECT_EQ(r.rows[0].tokens.size(), 6u);  // 5 fed positions left + the last token, never fed
  prompt.resize(static_cast<size_t>(ctx), '0');
  const std::string err = nctest::error_of([&] { engine.generate(prompt, o); });
  EXPECT_NE(err.find("context"), std::string::npos) << err;
}

TEST(Engine, BadInputIsNamed) {
  EngineFixture fx = load("tool_int");
  Engine engine(*fx.model, byte_tok());
  GenerateOptions o;
  EXPECT_NE(nctest::error_of([&] { engine.generate({}, o); }).find("prompt"), std::string::npos);
  EXPECT_NE(nctest::error_of([&] { engine.generate({1, 9999}, o); }).find("9999"), std::string::npos);
  o.temperature = -1;
  EXPECT_NE(nctest::error_of([&] { engine.generate({1, 2}, o); }).find("temperature"), std::string::npos);
  o.temperature = 1;
  o.top_p = 0;
  EXPECT_NE(nctest::error_of([&] { engine.generate({1, 2}, o); }).find("top_p"), std::string::npos);
  o.top_p = 1;
  o.num_samples = 0;
  EXPECT_NE(nctest::error_of([&] { engine.generate({1, 2}, o); }).find("num_samples"), std::string::npos);
}

// Sampling rules on hand-made logits (closed forms): top-k 1 and a tiny top-p are greedy; the
// draw only picks tokens allowed by top-k/top-p; the same seed gives the same draws.
TEST(Engine, SampleTokenRules) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -3.0f, 1.0f};
  Rng rng(7);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(sample_token(logits.data(), 5, 1.0, 1, 1.0, rng), 1);
    EXPECT_EQ(sample_token(logits.data(), 5, 1.0, 0, 0.01, rng), 1);
    const int32_t k2 = sample_token(logits.data(), 5, 1.0, 2, 1.0, rng);
    EXPECT_TRUE(k2 == 1 || k2 == 2) << k2;
    // p(1) = 0.41, p(2) = 0.37 of the whole softmax: top_p 0.5 keeps exactly {1, 2}.
    const int32_t p = sample_token(logits.data(), 5, 1.0, 0, 0.5, rng);
    EXPECT_TRUE(p == 1 || p == 2) << p;
  }
  EXPECT_EQ(sample_token(logits.data(), 5, 0.0, 0, 1.0, rng), 1);
  Rng a(3), b(3);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(sample_token(logits.data(), 5, 1.5, 0, 1.0, a), sample_token(logits.data(), 5, 1.5, 0, 1.0, b));
}

}  // namespace
}  // namespace nanochat
