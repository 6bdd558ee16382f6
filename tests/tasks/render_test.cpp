// Every example of every task renders as nanochat's chat template requires (roles alternate,
// the system message first, the answer last): render_conversation trains on at least the
// assistant's answer, render_for_completion primes the assistant, and the tool parts of GSM8K
// and the synthetic tasks come out between their special tokens.
#include <gtest/gtest.h>

#include <algorithm>

#include "nanochat/tasks/registry.h"
#include "nanochat/tokenizer/conversation.h"
#include "support/byte_tokenizer.h"

namespace nanochat::tasks {
namespace {

TEST(TaskRender, EveryExampleRenders) {
  const Tokenizer& tok = nctest::byte_tokenizer();
  TaskOptions o;
  o.base_dir = std::string(NANOCHAT_TEST_DATA) + "/tasks";
  const int python_start = tok.encode_special("<|python_start|>");
  const int output_start = tok.encode_special("<|output_start|>");
  const int assistant_start = tok.encode_special("<|assistant_start|>");
  for (const char* name : {"SmolTalk", "MMLU", "GSM8K", "ARC-Easy", "ARC-Challenge", "HumanEval", "SpellingBee",
                           "Arithmetic", "Identity"}) {
    SCOPED_TRACE(name);
    const TaskPtr t = open_task(name, "", std::string(name) == "SmolTalk" ? "test" : "", o);
    const int64_t n = std::min<int64_t>(t->size(), 40);
    ASSERT_GT(n, 0);
    int tool_calls = 0;
    for (int64_t i = 0; i < n; ++i) {
      const Example ex = t->get(i);
      const RenderedConversation r = render_conversation(tok, ex.conversation);
      ASSERT_EQ(r.ids.size(), r.mask.size());
      // the answer's bytes and <|assistant_end|> are trained
      const auto trained = std::count(r.mask.begin(), r.mask.end(), 1);
      EXPECT_GE(trained, 2) << "example " << i;
      const auto prime = render_for_completion(tok, ex.conversation);
      EXPECT_EQ(prime.back(), assistant_start);
      tool_calls += static_cast<int>(std::count(r.ids.begin(), r.ids.end(), python_start));
      EXPECT_EQ(std::count(r.ids.begin(), r.ids.end(), python_start),
                std::count(r.ids.begin(), r.ids.end(), output_start));
    }
    const std::string s = name;
    if (s == "GSM8K" || s == "Arithmetic" || s == "SpellingBee") {
      EXPECT_GT(tool_calls, 0);
    } else {
      EXPECT_EQ(tool_calls, 0);
    }
  }
}

}  // namespace
}  // namespace nanochat::tasks
