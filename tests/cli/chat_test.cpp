// `nanochat chat` and `nanochat sample` through the binary on a tiny trained checkpoint: the
// one-shot answer (-p) is the engine's greedy answer to the conversation rendered with the chat
// template, -i picks the checkpoint folder (a missing one is named with what writes it), the
// interactive loop keeps and clears the conversation, and sample batches several rows.
#include <gtest/gtest.h>

#include <cstdlib>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tokenizer/conversation.h"
#include "support/cli_util.h"

using namespace nctest;

namespace {

// kTiny with samples printed at the last step (base-train's samples come from the engine too).
std::string tiny_with_samples() {
  std::string a = kTiny;
  const std::string off = "--sample-every -1";
  return a.replace(a.find(off), off.size(), "--sample-every 2");
}

// A tiny base checkpoint, also copied to chatsft_checkpoints/ (the same file format).
struct ChatDir {
  BaseDir b{"nc_chat"};
  Result train;
  ChatDir() {
    train = run(b, tiny_with_samples() + " --num-iterations 2");
    fs::create_directories(b.dir + "/chatsft_checkpoints");
    if (train.code == 0) fs::copy(b.ckpt(), b.dir + "/chatsft_checkpoints/t", fs::copy_options::recursive);
  }
};

ChatDir& chat_dir() {
  static ChatDir d;
  return d;
}

// The greedy answer the engine gives to one user message, decoded.
std::string engine_answer(const std::string& base_dir, const std::string& user, int max_tokens) {
  ::setenv("NANOCHAT_BASE_DIR", base_dir.c_str(), 1);
  InferenceModel im = load_for_inference(CheckpointSource::Sft, "t", -1);
  Engine engine(*im.lm.model, im.tokenizer);
  Conversation conv;
  conv.messages.push_back(Message::plain(Message::Role::User, user));
  GenerateOptions o;
  o.temperature = 0;
  o.max_tokens = max_tokens;
  const auto r = engine.generate(render_for_reply(im.tokenizer, conv), o);
  return im.tokenizer.decode(r.rows[0].tokens);
}

TEST(Chat, OneShotPromptIsTheEnginesAnswerToTheRenderedConversation) {
  ChatDir& d = chat_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  const std::string want = engine_answer(d.b.dir, "Hello there", 12);
  ASSERT_FALSE(want.empty()) << "the tiny model ended its answer at once: nothing to compare";
  auto c = run(d.b, " chat -i sft -g t -p 'Hello there' -t 0 --max-tokens 12 --threads 1");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("Assistant: " + want + "\n"), std::string::npos) << c.out << "\nwant: " << want;
  // sft is the default source, like nanochat's chat_cli; -i base reads base_checkpoints/ (same weights here)
  auto dflt = run(d.b, " chat -g t -p 'Hello there' -t 0 --max-tokens 12 --threads 1");
  ASSERT_EQ(dflt.code, 0) << dflt.out;
  EXPECT_NE(dflt.out.find("Assistant: " + want + "\n"), std::string::npos) << dflt.out;
  auto base = run(d.b, " chat -i base -g t -p 'Hello there' -t 0 --max-tokens 12 --threads 1");
  ASSERT_EQ(base.code, 0) << base.out;
  EXPECT_NE(base.out.find("Assistant: " + want + "\n"), std::string::npos) << base.out;
}

// base-train's samples: each prompt after BOS, then at most 16 greedy tokens from the engine.
TEST(Chat, BaseTrainPrintsEngineSamples) {
  ChatDir& d = chat_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  const auto at = d.train.out.find("<|bos|>The capital of France is");
  ASSERT_NE(at, std::string::npos) << d.train.out;
  // the same text as `sample` greedy with 16 tokens on the saved weights
  auto s = run(d.b, " sample -g t -p 'The capital of France is' -n 16 -t 0 --threads 1");
  ASSERT_EQ(s.code, 0) << s.out;
  const std::string line = d.train.out.substr(at + 7, d.train.out.find('\n', at) - at - 7);
  EXPECT_NE(s.out.find("---\n" + line + "\n"), std::string::npos) << s.out << "\ntrainer: " << line;
}

TEST(Chat, SourceFolderErrors) {
  ChatDir& d = chat_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  auto rl = run(d.b, " chat -i rl -p hi --threads 1");
  EXPECT_EQ(rl.code, 1) << rl.out;
  EXPECT_NE(rl.out.find(d.b.dir + "/chatrl_checkpoints does not exist"), std::string::npos) << rl.out;
  EXPECT_NE(rl.out.find("it is written by 'nanochat chat-rl'"), std::string::npos) << rl.out;
  EXPECT_NE(rl.out.find("pass -i base"), std::string::npos) << rl.out;
  auto bad = run(d.b, " chat -i tuned -p hi");
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_NE(bad.out.find("tuned"), std::string::npos) << bad.out;
}

TEST(Chat, InteractiveLoopKeepsAndClearsTheConversation) {
  ChatDir& d = chat_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  auto [code, out] = nctest::shell("printf 'hi\\n\\nclear\\nHello there\\nquit\\n' | NANOCHAT_BASE_DIR=" + d.b.dir +
                                   " timeout 300 " + NANOCHAT_BINARY + " chat -i sft -t 0 --max-tokens 12 --threads 1");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("(conversation cleared)"), std::string::npos) << out;
  // After 'clear' the second question is answered as a fresh conversation: the one-shot answer.
  const std::string want = engine_answer(d.b.dir, "Hello there", 12);
  const auto cleared = out.find("(conversation cleared)");
  EXPECT_NE(out.find("Assistant: " + want + "\n", cleared), std::string::npos) << out;
  size_t n = 0;
  for (size_t p = out.find("Assistant: "); p != std::string::npos; p = out.find("Assistant: ", p + 1)) ++n;
  EXPECT_EQ(n, 2u) << out;  // the empty line is skipped
}

TEST(Sample, SeveralRowsFromOnePrompt) {
  ChatDir& d = chat_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  auto s = run(d.b, " sample -g t -p Elizabeth -n 5 -t 0 --num-samples 3 --threads 1");
  ASSERT_EQ(s.code, 0) << s.out;
  // greedy rows are identical: the same text three times
  const auto first = s.out.find("---\nElizabeth");
  ASSERT_NE(first, std::string::npos) << s.out;
  const std::string line = s.out.substr(first, s.out.find('\n', first + 4) - first);
  size_t n = 0;
  for (size_t p = s.out.find(line); p != std::string::npos; p = s.out.find(line, p + 1)) ++n;
  EXPECT_EQ(n, 3u) << s.out;
  auto one = run(d.b, " sample -g t -p Elizabeth -n 5 -t 0 --threads 1");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_NE(one.out.find(line + "\n"), std::string::npos) << one.out;
}

}  // namespace
