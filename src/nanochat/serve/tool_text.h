#pragma once
// How chat-web's API text carries the calculator (docs/architecture.md 10). The model writes a
// tool call as <|python_start|> expr <|python_end|> and the engine forces the result as
// <|output_start|> result <|output_end|>; no special-token name reaches a client. Instead the
// answer's text holds two Markdown code blocks, which any chat client shows readably:
//   <|python_start|>  -> "\n```calculator\n"     <|python_end|>  -> "\n```\n"
//   <|output_start|>  -> "```output\n"           <|output_end|>  -> "\n```\n"
// so "2+3 is <call 2+3><output 5>." reads "2+3 is \n```calculator\n2+3\n```\n```output\n5\n```\n.".
// Every other special token (the turn markers a small model may emit) becomes "". When a client
// sends such an answer back as an assistant message, assistant_parts_from_text turns the blocks
// into the tool parts again, so the model sees its own tokens on the next turn. The page draws the
// two blocks as one tool block (serve/page.h).
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/tokenizer/conversation.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat::serve {

/// The API text of one generated token: its bytes, or for a special token the text above.
std::string api_token_text(const Tokenizer& tok, int32_t id);

/// The parts of an assistant message's API text (the inverse of api_token_text over an answer):
/// each "\n```calculator\n" expr "\n```\n" is a Python part and a "```output\n" result "\n```\n"
/// right after it a PythonOutput part (a block still open at the end keeps what it has); the
/// text around them is Text parts (none when empty). A text without blocks is one Text part.
std::vector<ContentPart> assistant_parts_from_text(const std::string& text);

}  // namespace nanochat::serve
