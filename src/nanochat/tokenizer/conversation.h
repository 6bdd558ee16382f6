#pragma once
// Chat conversations rendered to token ids the way nanochat renders them (nanochat/tokenizer.py
// RustBPETokenizer.render_conversation and render_for_completion, commit 92d63d4).
//
// Layout of a rendered conversation (the chat specials of tokenizer.h kSpecialTokens):
//   <|bos|>
//   per user message:       <|user_start|> encode(text) <|user_end|>                 mask 0
//   per assistant message:  <|assistant_start|>                                        mask 0
//                           per part:
//                             text          encode(text)                               mask 1
//                             python        <|python_start|> encode(text) <|python_end|>  mask 1
//                             python_output <|output_start|> encode(text) <|output_end|>  mask 0
//                           <|assistant_end|>                                          mask 1
// A leading system message is merged into the first user message as system + "\n\n" + user.
// Messages (after that merge) must alternate user, assistant, user, ... starting with a user.
// The result is cut to max_tokens ids (and masks); nothing else is dropped.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat {

/// One piece of an assistant message (nanochat's content parts {"type", "text"}).
struct ContentPart {
  enum class Kind {
    Text,          ///< "text": plain assistant text (trained)
    Python,        ///< "python": a tool call; its text is the expression (trained)
    PythonOutput,  ///< "python_output": what the tool returned (not trained: it comes from the tool)
  };
  Kind kind = Kind::Text;
  std::string text;
  bool operator==(const ContentPart&) const = default;
};

/// One message. A user or system message has exactly one Text part (nanochat's plain string
/// content); an assistant message has one or more parts (a plain string is one Text part).
struct Message {
  enum class Role { System, User, Assistant };
  Role role = Role::User;
  std::vector<ContentPart> parts;
  bool operator==(const Message&) const = default;

  /// A message whose content is the plain string `text` (one Text part).
  static Message plain(Role role, std::string text);
  /// The concatenated text of all parts (the whole string for a plain message).
  std::string text() const;
};

/// A conversation: nanochat's {"messages": [...]}.
struct Conversation {
  std::vector<Message> messages;
  bool operator==(const Conversation&) const = default;
};

/// The rendered conversation: ids and, per id, 1 where the assistant is trained on it, else 0.
struct RenderedConversation {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  ///< same length as ids
};

/// nanochat's default max_tokens of render_conversation (also what render_for_completion uses).
inline constexpr int kRenderMaxTokens = 2048;

/// Renders `conv` as laid out above and cuts ids and mask to the first max_tokens (>= 1) entries.
/// Throws nanochat::Error (naming the message index and what was expected) when the conversation
/// has no message, a system message is not first or not followed by a user message, the roles do
/// not alternate user/assistant starting with user, or a user/system message is not one Text part.
RenderedConversation render_conversation(const Tokenizer& tok, const Conversation& conv,
                                         int max_tokens = kRenderMaxTokens);

/// Ids that prime the assistant to answer (nanochat's render_for_completion): the last message,
/// which must be the assistant's, is dropped; the rest is rendered with kRenderMaxTokens; then
/// <|assistant_start|> is appended. Throws nanochat::Error like render_conversation, or when the
/// last message is not the assistant's.
std::vector<int32_t> render_for_completion(const Tokenizer& tok, const Conversation& conv);

/// Ids that prime the assistant to answer a conversation that ends with a user message (the chat
/// front ends' case: nothing to drop): render_conversation(conv, max_tokens) followed by
/// <|assistant_start|>. Same errors as render_conversation, plus when the last message is not the
/// user's. Unlike render_for_completion nothing is cut unless max_tokens says so.
std::vector<int32_t> render_for_reply(const Tokenizer& tok, const Conversation& conv, int max_tokens = 1 << 30);

/// The parts of an assistant message from the tokens a model generated for it (the inverse of the
/// assistant layout above): text outside blocks -> Text; <|python_start|> .. <|python_end|> ->
/// Python; <|output_start|> .. <|output_end|> -> PythonOutput. A block still open at the end
/// keeps what it has; <|assistant_end|> and <|bos|> end the message (nothing after them is read);
/// any other special token inside text is kept as its name. Adjacent text is one part.
std::vector<ContentPart> assistant_parts_from_tokens(const Tokenizer& tok, const std::vector<int32_t>& tokens);

/// "system" / "user" / "assistant".
const char* role_name(Message::Role role);
/// The role with that name; throws nanochat::Error listing the three names otherwise.
Message::Role parse_role(const std::string& name);
/// "text" / "python" / "python_output".
const char* part_kind_name(ContentPart::Kind kind);
/// The kind with that name; throws nanochat::Error listing the three names otherwise.
ContentPart::Kind parse_part_kind(const std::string& name);

/// A conversation from nanochat's JSON form {"messages": [{"role": ..., "content": ...}, ...]}
/// where content is a string or a list of {"type": "text"|"python"|"python_output", "text": ...}.
/// Only the shape is checked here (render_conversation checks the order of roles). Throws
/// nanochat::Error naming the message index and field that is missing or of the wrong type.
Conversation conversation_from_json(const nlohmann::json& j);
/// The JSON form above; a message of one Text part is written with a plain string content.
nlohmann::json conversation_to_json(const Conversation& conv);

}  // namespace nanochat
