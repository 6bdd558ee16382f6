#include "nanochat/serve/tool_text.h"

#include <string_view>

namespace nanochat::serve {

namespace {
constexpr std::string_view kCallOpen = "\n```calculator\n";
constexpr std::string_view kOutputOpen = "```output\n";
constexpr std::string_view kClose = "\n```\n";
constexpr std::string_view kCloseAtEnd = "\n```";

// The block body that starts at `at`: up to its closing fence (or the end); `at` moves past it.
std::string block_body(const std::string& text, size_t& at) {
  const size_t close = text.find(kClose, at);
  std::string body;
  if (close != std::string::npos) {
    body = text.substr(at, close - at);
    at = close + kClose.size();
  } else {
    body = text.substr(at);
    if (body.size() >= kCloseAtEnd.size() && body.ends_with(kCloseAtEnd)) body.resize(body.size() - kCloseAtEnd.size());
    at = text.size();
  }
  return body;
}
}  // namespace

std::string api_token_text(const Tokenizer& tok, int32_t id) {
  if (id < tok.bos_id()) return tok.decode({id});
  const std::string name = tok.decode({id});
  if (name == "<|python_start|>") return std::string(kCallOpen);
  if (name == "<|python_end|>" || name == "<|output_end|>") return std::string(kClose);
  if (name == "<|output_start|>") return std::string(kOutputOpen);
  return "";
}

std::vector<ContentPart> assistant_parts_from_text(const std::string& text) {
  std::vector<ContentPart> parts;
  auto add = [&](ContentPart::Kind kind, std::string s) {
    if (kind == ContentPart::Kind::Text && s.empty()) return;
    parts.push_back({kind, std::move(s)});
  };
  size_t at = 0;
  for (;;) {
    const size_t call = text.find(kCallOpen, at);
    if (call == std::string::npos) break;
    add(ContentPart::Kind::Text, text.substr(at, call - at));
    at = call + kCallOpen.size();
    add(ContentPart::Kind::Python, block_body(text, at));
    if (text.compare(at, kOutputOpen.size(), kOutputOpen) == 0) {
      at += kOutputOpen.size();
      add(ContentPart::Kind::PythonOutput, block_body(text, at));
    }
  }
  add(ContentPart::Kind::Text, text.substr(at));
  if (parts.empty()) parts.push_back({ContentPart::Kind::Text, ""});
  return parts;
}

}  // namespace nanochat::serve
