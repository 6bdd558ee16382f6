#include "nanochat/tokenizer/splitter.h"

#include "nanochat/core/error.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat {

// nanochat/tokenizer.py SPLIT_PATTERN (docs/nanochat.md 6.1): GPT-4's pattern with \p{N}{1,2}.
const char* const kSplitPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";

std::vector<std::string_view> split_chunks(std::string_view text) {
  std::vector<std::string_view> out;
  tok_detail::Splitter::nanochat_default().for_each(text, [&](std::string_view c) { out.push_back(c); });
  return out;
}

namespace tok_detail {

namespace {
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? std::string("unknown PCRE2 error") : std::string(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
}
// Unicode White_Space (the meaning of \s in tiktoken's fancy-regex / Rust regex and in Python's
// `regex`). PCRE2's \s with UCP also matches U+180E, so \s and \S are spelled out explicitly.
constexpr const char* kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S of a pattern into explicit White_Space classes (see kWhiteSpace).
std::string rewrite_whitespace(const std::string& pat) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pat.size(); ++i) {
    const char c = pat[i];
    if (c == '\\' && i + 1 < pat.size()) {
      const char d = pat[i + 1];
      ++i;
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpace) : std::string("[") + kWhiteSpace + "]";
      } else if (d == 'S') {
        if (in_class) fail("tokenizer: split pattern uses \\S inside a character class, which is not supported: ", pat);
        out += std::string("[^") + kWhiteSpace + "]";
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pat.size() && pat[i + 1] == '^') out += pat[++i];
      if (i + 1 < pat.size() && pat[i + 1] == ']') out += pat[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

MatchState::MatchState() {
  md = pcre2_match_data_create(1, nullptr);
  mctx = pcre2_match_context_create(nullptr);
  // A whitespace run of any length must not exhaust the JIT stack; 32 KiB .. 8 MiB.
  stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  if (!md || !mctx || !stack) fail("tokenizer: out of memory creating PCRE2 match state");
  pcre2_jit_stack_assign(mctx, nullptr, stack);
}

MatchState::~MatchState() {
  pcre2_jit_stack_free(stack);
  pcre2_match_context_free(mctx);
  pcre2_match_data_free(md);
}

MatchState& thread_match_state() {
  thread_local MatchState st;
  return st;
}

Splitter::Splitter(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE erroff = 0;
  const std::string compiled = rewrite_whitespace(pattern);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &erroff, nullptr);
  if (!code_)
    fail("tokenizer: split pattern does not compile at offset ", erroff, ": ", pcre2_message(err),
         " (pattern: ", pattern, ")");
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Splitter::~Splitter() { pcre2_code_free(code_); }

const Splitter& Splitter::nanochat_default() {
  static const Splitter s(kSplitPattern);
  return s;
}

void Splitter::match_error(int rc, size_t pos) const {
  fail("tokenizer: PCRE2 match failed at byte ", pos, ": ", pcre2_message(rc));
}

}  // namespace tok_detail
}  // namespace nanochat
