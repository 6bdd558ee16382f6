// Conversation rendering against nanochat's own render_conversation / render_for_completion
// (tests/fixtures/chat/conversations.json, written by tools/chat/make_conversation_fixture.py
// with the small_tok tokenizer): identical ids and masks for every message shape, and the same
// conversations refused.
#include <gtest/gtest.h>

#include <algorithm>

#include "nanochat/tokenizer/conversation.h"
#include "support/error_of.h"
#include "support/tok_test_util.h"

namespace nanochat {
namespace {

const Tokenizer& small_tok() {
  static const Tokenizer t = Tokenizer::load(tok_test::fixture("small_tok"));
  return t;
}

nlohmann::json fixture() {
  return nlohmann::json::parse(tok_test::read_bytes(std::string(NANOCHAT_TEST_DATA) + "/chat/conversations.json"));
}

TEST(Conversation, RenderMatchesNanochat) {
  const auto fx = fixture();
  ASSERT_GE(fx.at("cases").size(), 10u);
  for (const auto& c : fx.at("cases")) {
    const std::string name = c.at("name");
    const Conversation conv = conversation_from_json(c.at("conversation"));
    const int max_tokens = c.at("max_tokens").is_null() ? kRenderMaxTokens : c.at("max_tokens").get<int>();
    const RenderedConversation r = render_conversation(small_tok(), conv, max_tokens);
    EXPECT_EQ(r.ids, c.at("ids").get<std::vector<int32_t>>()) << name;
    EXPECT_EQ(r.mask, c.at("mask").get<std::vector<uint8_t>>()) << name;
    if (c.contains("completion_ids")) {
      EXPECT_EQ(render_for_completion(small_tok(), conv), c.at("completion_ids").get<std::vector<int32_t>>()) << name;
    }
  }
}

TEST(Conversation, RefusesWhatNanochatRefuses) {
  const auto fx = fixture();
  ASSERT_GE(fx.at("errors").size(), 4u);
  for (const auto& c : fx.at("errors")) {
    const std::string name = c.at("name");
    const std::string err =
        nctest::error_of([&] { render_conversation(small_tok(), conversation_from_json(c.at("conversation"))); });
    EXPECT_NE(err, "") << name;
  }
}

TEST(Conversation, RoleErrorNamesTheMessage) {
  Conversation conv;
  conv.messages = {Message::plain(Message::Role::User, "a"), Message::plain(Message::Role::User, "b")};
  const std::string err = nctest::error_of([&] { render_conversation(small_tok(), conv); });
  EXPECT_NE(err.find("message 1 is from user but should be from assistant"), std::string::npos) << err;
}

TEST(Conversation, ReplyPrimesTheAssistant) {
  Conversation conv;
  conv.messages = {Message::plain(Message::Role::System, "Be brief."), Message::plain(Message::Role::User, "Hi")};
  const auto ids = render_for_reply(small_tok(), conv);
  // Same as rendering the conversation with an assistant message and priming for completion.
  Conversation with_answer = conv;
  with_answer.messages.push_back(Message::plain(Message::Role::Assistant, "anything"));
  EXPECT_EQ(ids, render_for_completion(small_tok(), with_answer));
  EXPECT_NE(nctest::error_of([&] { render_for_reply(small_tok(), with_answer); }), "");
}

TEST(Conversation, JsonRoundTrip) {
  const auto fx = fixture();
  for (const auto& c : fx.at("cases")) {
    const Conversation conv = conversation_from_json(c.at("conversation"));
    EXPECT_EQ(conversation_from_json(conversation_to_json(conv)), conv) << c.at("name");
  }
  EXPECT_NE(nctest::error_of([] {
              conversation_from_json(nlohmann::json::parse(R"({"messages": [{"role": "bot", "content": "x"}]})"));
            }),
            "");
  EXPECT_NE(
      nctest::error_of([] { conversation_from_json(nlohmann::json::parse(R"({"messages": [{"role": "user"}]})")); }),
      "");
  EXPECT_NE(nctest::error_of([] {
              conversation_from_json(nlohmann::json::parse(R"({"messages": [{"role": "user", "content": 3}]})"));
            }),
            "");
}

}  // namespace
}  // namespace nanochat

namespace nanochat {
namespace {

// Parts recovered from generated tokens render back to the same tokens (the assistant layout).
TEST(Conversation, AssistantPartsFromTokensInvertTheLayout) {
  const Tokenizer& t = small_tok();
  Conversation conv;
  conv.messages.push_back(Message::plain(Message::Role::User, "How many r's in strawberry?"));
  Message a;
  a.role = Message::Role::Assistant;
  a.parts = {{ContentPart::Kind::Text, "Let me count. "},
             {ContentPart::Kind::Python, "'strawberry'.count('r')"},
             {ContentPart::Kind::PythonOutput, "3"},
             {ContentPart::Kind::Text, "So 3."}};
  conv.messages.push_back(a);
  const auto r = render_conversation(t, conv);
  // The assistant's tokens: after <|assistant_start|> up to and including <|assistant_end|>.
  const auto as = std::find(r.ids.begin(), r.ids.end(), t.encode_special("<|assistant_start|>"));
  const std::vector<int32_t> answer(as + 1, r.ids.end());
  EXPECT_EQ(assistant_parts_from_tokens(t, answer), a.parts);
  // An unterminated tool call keeps its text; nothing after <|assistant_end|> is read.
  std::vector<int32_t> open = {t.encode_special("<|python_start|>")};
  for (int32_t id : t.encode("1+2")) open.push_back(id);
  auto parts = assistant_parts_from_tokens(t, open);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0], (ContentPart{ContentPart::Kind::Python, "1+2"}));
  std::vector<int32_t> ended = t.encode("hi");
  ended.push_back(t.encode_special("<|assistant_end|>"));
  for (int32_t id : t.encode("more")) ended.push_back(id);
  parts = assistant_parts_from_tokens(t, ended);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].text, "hi");
}

}  // namespace
}  // namespace nanochat
