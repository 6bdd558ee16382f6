// Tests for tokenizer/base64: the RFC 4648 test vectors both ways, and malformed input rejected.
#include "nanochat/tokenizer/base64.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace nanochat {
namespace {

TEST(Base64Test, KnownVectors) {
  // RFC 4648 section 10 test vectors.
  const std::vector<std::pair<std::string, std::string>> v = {{"", ""},
                                                              {"f", "Zg=="},
                                                              {"fo", "Zm8="},
                                                              {"foo", "Zm9v"},
                                                              {"foob", "Zm9vYg=="},
                                                              {"fooba", "Zm9vYmE="},
                                                              {"foobar", "Zm9vYmFy"}};
  for (const auto& [raw, enc] : v) {
    EXPECT_EQ(base64_encode(raw), enc);
    std::string back;
    EXPECT_TRUE(base64_decode(enc, &back));
    EXPECT_EQ(back, raw);
  }
  std::string out;
  EXPECT_FALSE(base64_decode("Zm9", &out));
  EXPECT_FALSE(base64_decode("Zm=v", &out));
  EXPECT_FALSE(base64_decode("Z*9v", &out));
  EXPECT_TRUE(base64_decode("/w==", &out));
  EXPECT_EQ(out, "\xff");
}

}  // namespace
}  // namespace nanochat
