#pragma once
// A byte-level tokenizer for engine tests: 256 single-byte tokens, no merges, the 9 specials at
// 256..264 (V = 265). tools/chat/make_engine_fixture.py builds the same one as a tiktoken.Encoding.
#include <string>
#include <vector>

#include "nanochat/tokenizer/tokenizer.h"

namespace nctest {

inline const nanochat::Tokenizer& byte_tokenizer() {
  static const nanochat::Tokenizer t = [] {
    std::vector<std::string> tokens;
    for (int i = 0; i < 256; ++i) tokens.push_back(std::string(1, static_cast<char>(i)));
    return nanochat::Tokenizer::from_tokens(tokens);
  }();
  return t;
}

}  // namespace nctest
