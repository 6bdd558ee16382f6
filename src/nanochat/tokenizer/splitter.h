#pragma once
// Internal: the regex pre-split of the tokenizer (docs/nanochat.md 6.1) on top of PCRE2 with JIT.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace nanochat::tok_detail {

/// Per-thread PCRE2 match state (match data + JIT stack); created lazily, one per thread.
struct MatchState {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState();
  ~MatchState();
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};
MatchState& thread_match_state();

/// A compiled split pattern. Compiled with UTF + UCP (so \p{L}, \p{N} are Unicode classes, as in
/// tiktoken's fancy-regex), with \s / \S rewritten to the Unicode White_Space property (Rust regex's
/// meaning; PCRE2's own \s also matches U+180E), and with MATCH_INVALID_UTF, so invalid UTF-8 never makes matching
/// fail: the bytes between two matches (only ever invalid UTF-8, since the pattern matches every valid character) are
/// reported as a chunk of their own. Chunks therefore cover the text exactly. Thread-safe (the compiled code is
/// read-only; match state is per thread).
class Splitter {
 public:
  /// Throws nanochat::Error if the pattern does not compile.
  explicit Splitter(const std::string& pattern);
  ~Splitter();
  Splitter(const Splitter&) = delete;
  Splitter& operator=(const Splitter&) = delete;

  /// The shared splitter of kSplitPattern.
  static const Splitter& nanochat_default();

  /// Calls f(std::string_view chunk) for every chunk of text, in order.
  template <typename F>
  void for_each(std::string_view text, F&& f) const {
    MatchState& st = thread_match_state();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const size_t n = text.size();
    size_t pos = 0;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
    while (pos < n) {
      int rc = jit_ ? pcre2_jit_match(code_, subject, n, pos, 0, st.md, st.mctx)
                    : pcre2_match(code_, subject, n, pos, 0, st.md, st.mctx);
      if (rc == PCRE2_ERROR_NOMATCH) {
        f(text.substr(pos));
        return;
      }
      if (rc < 0) match_error(rc, pos);
      const size_t s = ov[0], e = ov[1];
      if (s > pos) f(text.substr(pos, s - pos));
      if (e == s) {  // cannot happen with nanochat's pattern; guard against custom ones
        f(text.substr(s, 1));
        pos = s + 1;
        continue;
      }
      f(text.substr(s, e - s));
      pos = e;
    }
  }

  const std::string& pattern() const { return pattern_; }

 private:
  [[noreturn]] void match_error(int rc, size_t pos) const;
  std::string pattern_;
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace nanochat::tok_detail
