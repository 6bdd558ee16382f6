#include "nanochat/tokenizer/conversation.h"

#include "nanochat/core/error.h"

namespace nanochat {

Message Message::plain(Role role, std::string text) {
  Message m;
  m.role = role;
  m.parts.push_back({ContentPart::Kind::Text, std::move(text)});
  return m;
}

std::string Message::text() const {
  std::string s;
  for (const auto& p : parts) s += p.text;
  return s;
}

const char* role_name(Message::Role role) {
  switch (role) {
    case Message::Role::System:
      return "system";
    case Message::Role::User:
      return "user";
    case Message::Role::Assistant:
      return "assistant";
  }
  return "?";
}

Message::Role parse_role(const std::string& name) {
  if (name == "system") return Message::Role::System;
  if (name == "user") return Message::Role::User;
  if (name == "assistant") return Message::Role::Assistant;
  fail("unknown message role '", name, "' (want system, user or assistant)");
}

const char* part_kind_name(ContentPart::Kind kind) {
  switch (kind) {
    case ContentPart::Kind::Text:
      return "text";
    case ContentPart::Kind::Python:
      return "python";
    case ContentPart::Kind::PythonOutput:
      return "python_output";
  }
  return "?";
}

ContentPart::Kind parse_part_kind(const std::string& name) {
  if (name == "text") return ContentPart::Kind::Text;
  if (name == "python") return ContentPart::Kind::Python;
  if (name == "python_output") return ContentPart::Kind::PythonOutput;
  fail("unknown content part type '", name, "' (want text, python or python_output)");
}

namespace {

struct Specials {
  int32_t bos, user_start, user_end, assistant_start, assistant_end, python_start, python_end, output_start, output_end;
  explicit Specials(const Tokenizer& tok)
      : bos(tok.bos_id()),
        user_start(tok.encode_special("<|user_start|>")),
        user_end(tok.encode_special("<|user_end|>")),
        assistant_start(tok.encode_special("<|assistant_start|>")),
        assistant_end(tok.encode_special("<|assistant_end|>")),
        python_start(tok.encode_special("<|python_start|>")),
        python_end(tok.encode_special("<|python_end|>")),
        output_start(tok.encode_special("<|output_start|>")),
        output_end(tok.encode_special("<|output_end|>")) {}
};

// A user or system message must be one plain Text part (nanochat asserts a string).
const std::string& plain_text(const Message& m, size_t index) {
  if (m.parts.size() != 1 || m.parts[0].kind != ContentPart::Kind::Text)
    fail("conversation message ", index, " (", role_name(m.role), ") must be plain text, not a list of parts");
  return m.parts[0].text;
}

}  // namespace

RenderedConversation render_conversation(const Tokenizer& tok, const Conversation& conv, int max_tokens) {
  if (max_tokens < 1) fail("render_conversation: max_tokens must be >= 1, got ", max_tokens);
  if (conv.messages.empty()) fail("conversation has no message");
  const Specials sp(tok);
  RenderedConversation out;
  auto add = [&](int32_t id, uint8_t m) {
    out.ids.push_back(id);
    out.mask.push_back(m);
  };
  auto add_text = [&](const std::string& text, uint8_t m) {
    for (int32_t id : tok.encode(text)) add(id, m);
  };
  // A leading system message is merged into the user message that must follow it.
  size_t first = 0;
  std::string merged_user;
  const bool has_system = conv.messages[0].role == Message::Role::System;
  if (has_system) {
    if (conv.messages.size() < 2 || conv.messages[1].role != Message::Role::User)
      fail("conversation message 0 is a system message, so message 1 must be from the user");
    merged_user = plain_text(conv.messages[0], 0) + "\n\n" + plain_text(conv.messages[1], 1);
    first = 1;
  }
  add(sp.bos, 0);
  for (size_t i = first; i < conv.messages.size(); ++i) {
    const Message& m = conv.messages[i];
    const bool user_turn = (i - first) % 2 == 0;
    const Message::Role want = user_turn ? Message::Role::User : Message::Role::Assistant;
    if (m.role != want)
      fail("conversation message ", i, " is from ", role_name(m.role), " but should be from ", role_name(want),
           " (after an optional leading system message, turns alternate user, assistant, ...)");
    if (user_turn) {
      add(sp.user_start, 0);
      add_text(i == first && has_system ? merged_user : plain_text(m, i), 0);
      add(sp.user_end, 0);
      continue;
    }
    add(sp.assistant_start, 0);
    for (const ContentPart& p : m.parts) {
      switch (p.kind) {
        case ContentPart::Kind::Text:
          add_text(p.text, 1);
          break;
        case ContentPart::Kind::Python:
          add(sp.python_start, 1);
          add_text(p.text, 1);
          add(sp.python_end, 1);
          break;
        case ContentPart::Kind::PythonOutput:  // comes from the tool at inference: not trained
          add(sp.output_start, 0);
          add_text(p.text, 0);
          add(sp.output_end, 0);
          break;
      }
    }
    add(sp.assistant_end, 1);
  }
  if (out.ids.size() > static_cast<size_t>(max_tokens)) {
    out.ids.resize(static_cast<size_t>(max_tokens));
    out.mask.resize(static_cast<size_t>(max_tokens));
  }
  return out;
}

std::vector<int32_t> render_for_completion(const Tokenizer& tok, const Conversation& conv) {
  if (conv.messages.empty() || conv.messages.back().role != Message::Role::Assistant)
    fail("render_for_completion: the last message of the conversation must be the assistant's");
  Conversation head = conv;
  head.messages.pop_back();
  std::vector<int32_t> ids = render_conversation(tok, head, kRenderMaxTokens).ids;
  ids.push_back(tok.encode_special("<|assistant_start|>"));
  return ids;
}

std::vector<int32_t> render_for_reply(const Tokenizer& tok, const Conversation& conv, int max_tokens) {
  if (conv.messages.empty() || conv.messages.back().role != Message::Role::User)
    fail("the last message of the conversation must be the user's to prime a reply");
  std::vector<int32_t> ids = render_conversation(tok, conv, max_tokens).ids;
  ids.push_back(tok.encode_special("<|assistant_start|>"));
  return ids;
}

std::vector<ContentPart> assistant_parts_from_tokens(const Tokenizer& tok, const std::vector<int32_t>& tokens) {
  const Specials sp(tok);
  std::vector<ContentPart> parts;
  ContentPart::Kind kind = ContentPart::Kind::Text;
  std::vector<int32_t> run;
  auto flush = [&] {
    if (run.empty() && kind == ContentPart::Kind::Text) return;
    std::string text = tok.decode(run);
    if (kind == ContentPart::Kind::Text && !parts.empty() && parts.back().kind == ContentPart::Kind::Text)
      parts.back().text += text;
    else
      parts.push_back({kind, std::move(text)});
    run.clear();
  };
  for (int32_t id : tokens) {
    if (id == sp.assistant_end || id == sp.bos) break;
    if (id == sp.python_start || id == sp.output_start) {
      flush();
      kind = id == sp.python_start ? ContentPart::Kind::Python : ContentPart::Kind::PythonOutput;
    } else if ((id == sp.python_end && kind == ContentPart::Kind::Python) ||
               (id == sp.output_end && kind == ContentPart::Kind::PythonOutput)) {
      flush();
      kind = ContentPart::Kind::Text;
    } else {
      run.push_back(id);
    }
  }
  flush();
  return parts;
}

Conversation conversation_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
    fail("a conversation must be a JSON object with a \"messages\" array");
  Conversation conv;
  const auto& msgs = j["messages"];
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& mj = msgs[i];
    if (!mj.is_object() || !mj.contains("role") || !mj["role"].is_string())
      fail("conversation message ", i, ": want an object with a string \"role\"");
    if (!mj.contains("content")) fail("conversation message ", i, ": \"content\" is missing");
    Message m;
    m.role = parse_role(mj["role"].get<std::string>());
    const auto& c = mj["content"];
    if (c.is_string()) {
      m.parts.push_back({ContentPart::Kind::Text, c.get<std::string>()});
    } else if (c.is_array()) {
      for (size_t k = 0; k < c.size(); ++k) {
        const auto& pj = c[k];
        if (!pj.is_object() || !pj.contains("type") || !pj["type"].is_string() || !pj.contains("text") ||
            !pj["text"].is_string())
          fail("conversation message ", i, " part ", k, ": want {\"type\": string, \"text\": string}");
        m.parts.push_back({parse_part_kind(pj["type"].get<std::string>()), pj["text"].get<std::string>()});
      }
    } else {
      fail("conversation message ", i, ": \"content\" must be a string or a list of parts");
    }
    conv.messages.push_back(std::move(m));
  }
  return conv;
}

nlohmann::json conversation_to_json(const Conversation& conv) {
  nlohmann::json msgs = nlohmann::json::array();
  for (const Message& m : conv.messages) {
    nlohmann::json mj = {{"role", role_name(m.role)}};
    if (m.parts.size() == 1 && m.parts[0].kind == ContentPart::Kind::Text) {
      mj["content"] = m.parts[0].text;
    } else {
      nlohmann::json parts = nlohmann::json::array();
      for (const auto& p : m.parts) parts.push_back({{"type", part_kind_name(p.kind)}, {"text", p.text}});
      mj["content"] = parts;
    }
    msgs.push_back(std::move(mj));
  }
  return {{"messages", msgs}};
}

}  // namespace nanochat
