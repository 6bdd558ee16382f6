// Regex pre-split (docs/nanochat.md 6.1). Expected chunks below were derived by hand from the pattern
//   '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+
// (first alternative that matches at the current position wins; possessive parts never give back)
// and cross-checked at dev time with Python's `regex` module. split_fuzz.json holds 400 random
// strings split by Python's `regex` (tools/tokenizer/make_fixtures.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nanochat/tokenizer/tokenizer.h"
#include "support/tok_test_util.h"

namespace nanochat {
namespace {

using ::testing::ElementsAreArray;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  for (std::string_view c : split_chunks(s)) out.emplace_back(c);
  return out;
}

struct Case {
  std::string text;
  std::vector<std::string> chunks;
};

TEST(SplitTest, HandDerivedCases) {
  const std::vector<Case> cases = {
      // words take one optional leading non-letter/non-digit (here the space)
      {"Hello world", {"Hello", " world"}},
      // contractions are their own chunk, case-insensitively
      {"I'm here, you'll see; they've we're he'd it's",
       {"I", "'m", " here", ",", " you", "'ll", " see", ";", " they", "'ve", " we", "'re", " he", "'d", " it", "'s"}},
      {"HE'LL DON'T We'Re", {"HE", "'LL", " DON", "'T", " We", "'Re"}},
      // an apostrophe that starts no contraction is the optional prefix of the word
      {"'hello 'sup", {"'hello", " '", "sup"}},
      // digits in groups of at most two; a space before digits stays alone
      {"12345", {"12", "34", "5"}},
      {"in 2024!", {"in", " ", "20", "24", "!"}},
      {"3.14159", {"3", ".", "14", "15", "9"}},
      {"abc123def", {"abc", "12", "3", "def"}},
      {"x\xc2\xb2", {"x", "\xc2\xb2"}},                                // x² : ² is \p{No}
      {"\xd9\xa1\xd9\xa2\xd9\xa3", {"\xd9\xa1\xd9\xa2", "\xd9\xa3"}},  // Arabic-Indic ١٢٣
      // whitespace runs: all but the last space, which joins the next word
      {"a   b", {"a", "  ", " b"}},
      {"end   ", {"end", "   "}},
      {"a\tb", {"a", "\tb"}},
      // newlines: \s*[\r\n] takes the run up to and including the last newline
      {"a\n\nb", {"a", "\n\n", "b"}},
      {"x  \n  y", {"x", "  \n", " ", " y"}},
      {"a\r\nb", {"a", "\r\n", "b"}},
      {"a \nb", {"a", " \n", "b"}},
      // punctuation runs take one optional leading space and trailing newlines
      {"Wait...what?!", {"Wait", "...", "what", "?!"}},
      {"end.\n\nNext", {"end", ".\n\n", "Next"}},
      {" (hello)", {" (", "hello", ")"}},
      {"(hello", {"(hello"}},
      {"a  --  b", {"a", " ", " --", " ", " b"}},
      // non-Latin scripts
      {"\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xd0\xbc\xd0\xb8\xd1\x80!",  // Привет, мир!
       {"\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", ",", " \xd0\xbc\xd0\xb8\xd1\x80", "!"}},
      {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c",
       {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"}},  // 你好世界
      // emoji are neither letters nor digits: a punctuation-like run
      {"hi \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd there", {"hi", " \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd", " there"}},
      // U+00A0 is White_Space, yet [^\r\n\p{L}\p{N}] includes it, so it is the prefix of the word
      {"a\xc2\xa0"
       "b",
       {"a",
        "\xc2\xa0"
        "b"}},
      // U+180E is not White_Space (PCRE2's own \s would say it is): it joins the punctuation run
      {"x\xe1\xa0\x8e.", {"x", "\xe1\xa0\x8e."}},
      // the special-token text is ordinary text
      {"<|bos|>hi", {"<|", "bos", "|>", "hi"}},
  };
  for (const Case& c : cases) EXPECT_THAT(split(c.text), ElementsAreArray(c.chunks)) << "text: " << c.text;
}

TEST(SplitTest, MatchesPythonRegexOnFuzzStrings) {
  const auto cases = nlohmann::json::parse(tok_test::read_bytes(tok_test::fixture("split_fuzz.json")));
  ASSERT_GE(cases.size(), 100u);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("chunks").get<std::vector<std::string>>();
    EXPECT_THAT(split(text), ElementsAreArray(want)) << "text: " << nlohmann::json(text).dump();
  }
}

TEST(SplitTest, ChunksCoverTextExactlyEvenWithInvalidUtf8) {
  const std::string text = std::string("ok \xff\xfe bad\xc3 trunc\xe2\x82 \x80lead ") + std::string("x\0y", 3) +
                           "\xed\xa0\x80 surrogate \xf4\x90\x80\x80 too-big \xc0\xaf overlong";
  std::string joined;
  for (std::string_view c : split_chunks(text)) {
    EXPECT_FALSE(c.empty());
    joined += c;
  }
  EXPECT_EQ(joined, text);
  // Invalid bytes form chunks of their own; the valid text around them splits as usual.
  const auto ch = split(
      "ab\xff"
      "cd");
  EXPECT_THAT(ch, ElementsAreArray(std::vector<std::string>{"ab", "\xff", "cd"}));
}

TEST(SplitTest, VeryLongWhitespaceRunDoesNotOverflow) {
  const std::string text = std::string(200000, ' ') + "x" + std::string(100000, '\n');
  const auto ch = split(text);
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[0], std::string(199999, ' '));
  EXPECT_EQ(ch[1], " x");
  EXPECT_EQ(ch[2], std::string(100000, '\n'));
}

TEST(SplitTest, EmptyText) { EXPECT_TRUE(split_chunks("").empty()); }

}  // namespace
}  // namespace nanochat
