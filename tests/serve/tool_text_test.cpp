// The API text of the calculator (serve/tool_text.h): special tokens become Markdown blocks and
// never their names, and an answer's text read back gives the parts the model generated.
#include <gtest/gtest.h>

#include "nanochat/serve/tool_text.h"
#include "support/byte_tokenizer.h"

using namespace nanochat;
using namespace nanochat::serve;

namespace {

std::string api_text(const std::vector<int32_t>& ids) {
  std::string out;
  for (const int32_t id : ids) out += api_token_text(nctest::byte_tokenizer(), id);
  return out;
}

std::vector<int32_t> ids_of(const std::vector<ContentPart>& parts) {
  const Tokenizer& tok = nctest::byte_tokenizer();
  std::vector<int32_t> ids;
  auto add = [&](const std::vector<int32_t>& v) { ids.insert(ids.end(), v.begin(), v.end()); };
  for (const auto& p : parts) {
    if (p.kind == ContentPart::Kind::Text) add(tok.encode(p.text));
    if (p.kind == ContentPart::Kind::Python) {
      ids.push_back(tok.encode_special("<|python_start|>"));
      add(tok.encode(p.text));
      ids.push_back(tok.encode_special("<|python_end|>"));
    }
    if (p.kind == ContentPart::Kind::PythonOutput) {
      ids.push_back(tok.encode_special("<|output_start|>"));
      add(tok.encode(p.text));
      ids.push_back(tok.encode_special("<|output_end|>"));
    }
  }
  return ids;
}

using K = ContentPart::Kind;

TEST(ToolText, ACalculatorCallReadsAsTwoBlocksWithoutSpecialTokenNames) {
  const std::vector<ContentPart> parts = {
      {K::Text, "2+3 is "}, {K::Python, "2+3"}, {K::PythonOutput, "5"}, {K::Text, "."}};
  const std::string text = api_text(ids_of(parts));
  EXPECT_EQ(text, "2+3 is \n```calculator\n2+3\n```\n```output\n5\n```\n.");
  EXPECT_EQ(text.find("<|"), std::string::npos);
  EXPECT_EQ(assistant_parts_from_text(text), parts);
}

TEST(ToolText, EveryOtherSpecialTokenIsDropped) {
  const Tokenizer& tok = nctest::byte_tokenizer();
  for (const char* name : kSpecialTokens) {
    const std::string t = api_token_text(tok, tok.encode_special(name));
    EXPECT_EQ(t.find("<|"), std::string::npos) << name;
  }
  EXPECT_EQ(api_token_text(tok, tok.encode_special("<|user_start|>")), "");
  EXPECT_EQ(api_token_text(tok, 'a'), "a");
}

TEST(ToolText, AnswersReadBackAsTheirParts) {
  const std::vector<std::vector<ContentPart>> answers = {
      {{K::Text, "plain ```code``` stays text"}},
      {{K::Python, "1/0"}, {K::Text, "refused, no output"}},
      {{K::Python, "7*6"}, {K::PythonOutput, "42"}},
      {{K::Text, "a"},
       {K::Python, "1+1"},
       {K::PythonOutput, "2"},
       {K::Text, "b"},
       {K::Python, "2*2"},
       {K::PythonOutput, "4"}},
  };
  for (const auto& parts : answers) EXPECT_EQ(assistant_parts_from_text(api_text(ids_of(parts))), parts);
  // Cut mid-block (max_tokens): the open block keeps what it has.
  EXPECT_EQ(assistant_parts_from_text("x\n```calculator\n3*"),
            (std::vector<ContentPart>{{K::Text, "x"}, {K::Python, "3*"}}));
  EXPECT_EQ(assistant_parts_from_text(""), (std::vector<ContentPart>{{K::Text, ""}}));
}

}  // namespace
