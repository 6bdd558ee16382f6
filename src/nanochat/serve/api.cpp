#include "nanochat/serve/api.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>

namespace nanochat::serve {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", param, message);
}

double number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) bad(name, "'" + name + "' must be a number");
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) {
    char b[160];
    std::snprintf(b, sizeof b, "'%s' is %g; it must be between %g and %g", name.c_str(), x, lo, hi);
    bad(name, b);
  }
  return x;
}

int integer(const json& v, const std::string& name, int lo, int hi) {
  if (!v.is_number_integer()) bad(name, "'" + name + "' must be an integer");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(name, "'" + name + "' is " + std::to_string(x) + "; it must be between " + std::to_string(lo) + " and " +
                  std::to_string(hi));
  return static_cast<int>(x);
}

// A message's content: a string, or OpenAI's list of parts of which only text parts are accepted.
std::string content_text(const json& c, const std::string& name) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array())
    bad(name, "'" + name + "' must be a string or a list of {\"type\": \"text\", \"text\": ...} parts");
  std::string out;
  for (const auto& part : c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      bad(name,
          "'" + name + "' has a part that is not {\"type\": \"text\", \"text\": \"...\"}; this model reads text only");
    out += part["text"].get<std::string>();
  }
  return out;
}

bool neutral(const json& v) { return v.is_null() || (v.is_array() && v.empty()) || (v.is_object() && v.empty()); }

// One message's role; "developer" (OpenAI's newer name for it) is the system message.
std::string message_role(const json& m, const std::string& at) {
  if (!m.contains("role") || !m["role"].is_string()) bad(at + ".role", "'" + at + ".role' must be a string");
  const std::string role = m["role"].get<std::string>();
  if (role == "developer") return "system";
  if (role != "system" && role != "user" && role != "assistant")
    bad(at + ".role", "'" + at + ".role' is '" + role +
                          "'; this model knows the roles system (or developer), user and assistant (it calls no "
                          "tools of the client's)");
  return role;
}

ChatMessage parse_message(const json& m, const std::string& at, const RequestLimits& limits) {
  if (!m.is_object()) bad(at, "'" + at + "' must be an object {\"role\", \"content\"}");
  for (const auto& [key, val] : m.items()) {
    if (key == "role" || key == "content" || key == "name") continue;
    if ((key == "tool_calls" || key == "function_call" || key == "refusal" || key == "audio") && neutral(val)) continue;
    bad(at + "." + key, "'" + at + "' has the field '" + key +
                            "' with a value; this server takes role, content and name (tool_calls, function_call, "
                            "refusal and audio only as null or empty)");
  }
  const std::string role = message_role(m, at);
  if (!m.contains("content") || m["content"].is_null()) bad(at + ".content", "'" + at + ".content' is missing");
  ChatMessage msg{role, content_text(m["content"], at + ".content")};
  if (static_cast<int64_t>(msg.content.size()) > limits.max_message_bytes)
    bad(at + ".content", "'" + at + ".content' is " + std::to_string(msg.content.size()) +
                             " bytes; this server takes at most " + std::to_string(limits.max_message_bytes));
  return msg;
}

std::vector<ChatMessage> parse_messages(const json& v, const RequestLimits& limits) {
  if (!v.is_array() || v.empty()) bad("messages", "'messages' must be a non-empty list of {\"role\", \"content\"}");
  if (static_cast<int64_t>(v.size()) > limits.max_messages)
    bad("messages", "'messages' has " + std::to_string(v.size()) + " messages; this server takes at most " +
                        std::to_string(limits.max_messages) + " (start a new conversation)");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    ChatMessage msg = parse_message(v[i], at, limits);
    if (msg.role == "system" && i != 0) bad(at + ".role", "a system message may only come first ('" + at + "')");
    // nanochat's turns alternate: messages of one role in a row become one, as OpenAI reads them.
    if (!out.empty() && out.back().role == msg.role) {
      out.back().content += "\n\n" + msg.content;
      continue;
    }
    out.push_back(std::move(msg));
  }
  if (out.back().role != "user")
    bad("messages", "the last message must be the user's (the model answers it); it is '" + out.back().role + "'");
  return out;
}

std::vector<std::string> parse_stop(const json& v) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array() && v.size() <= 4) {
    for (const auto& s : v) {
      if (!s.is_string()) bad("stop", "'stop' must be a string or a list of up to 4 strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", "'stop' must be a string or a list of up to 4 strings");
  }
  for (const auto& s : out)
    if (s.empty()) bad("stop", "'stop' has an empty string");
  return out;
}

}  // namespace

std::string error_json(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code.empty() ? type : code}};
  if (!param.empty()) e["param"] = param;
  return dump_json(json{{"error", e}});
}

json limits_json(const RequestLimits& limits) {
  return {{"max_messages", limits.max_messages},
          {"max_message_bytes", limits.max_message_bytes},
          {"max_tokens", limits.max_tokens},
          {"max_n", limits.max_n}};
}

namespace {

// Fields OpenAI's clients send that have no effect on this server's answer.
const std::set<std::string> kIgnored = {
    "user", "metadata", "store", "service_tier", "parallel_tool_calls", "prompt_cache_key", "safety_identifier"};

// Fields accepted only with a value that asks for nothing this server lacks; refuses others.
void check_neutral(const json& j) {
  auto refuse = [](const std::string& k, const std::string& why) {
    bad(k, "'" + k + "' " + why + "; this server (a nanochat model) cannot, and would answer something else");
  };
  auto set = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  if (set("logprobs") && j["logprobs"] != false) refuse("logprobs", "asks for token log-probabilities");
  if (set("top_logprobs") && j["top_logprobs"] != 0) refuse("top_logprobs", "asks for token log-probabilities");
  if (set("response_format") && j["response_format"] != json{{"type", "text"}})
    refuse("response_format", "asks for a format other than {\"type\": \"text\"} (JSON mode or a schema)");
  for (const char* k : {"tools", "functions"})
    if (set(k) && !(j[k].is_array() && j[k].empty())) refuse(k, "offers tools for the model to call");
  for (const char* k : {"tool_choice", "function_call"})
    if (set(k) && j[k] != "none" && j[k] != "auto") refuse(k, "requires a tool call");
  if (set("logit_bias")) {
    if (!j["logit_bias"].is_object()) bad("logit_bias", "'logit_bias' must be an object {token id: bias}");
    for (const auto& [id, b] : j["logit_bias"].items())
      if (b != 0) refuse("logit_bias", "biases token " + id);
  }
  if (set("modalities") && j["modalities"] != json::array({"text"}))
    refuse("modalities", "asks for output other than [\"text\"]");
  for (const char* k : {"audio", "prediction", "web_search_options", "reasoning_effort"})
    if (set(k)) refuse(k, "is set (only null is accepted)");
}

// Every field of the body is known: honoured, ignored or checked by check_neutral.
void check_known(const json& j) {
  static const std::set<std::string> known = {"model",
                                              "messages",
                                              "temperature",
                                              "top_k",
                                              "top_p",
                                              "max_tokens",
                                              "max_completion_tokens",
                                              "stream",
                                              "stream_options",
                                              "stop",
                                              "n",
                                              "seed",
                                              "presence_penalty",
                                              "frequency_penalty",
                                              "logprobs",
                                              "top_logprobs",
                                              "response_format",
                                              "tools",
                                              "functions",
                                              "tool_choice",
                                              "function_call",
                                              "logit_bias",
                                              "modalities",
                                              "audio",
                                              "prediction",
                                              "web_search_options",
                                              "reasoning_effort"};
  for (const auto& [key, _] : j.items())
    if (!known.count(key) && !kIgnored.count(key))
      bad(key, "unknown field '" + key +
                   "'; this server takes OpenAI's chat completion fields and top_k (README.md, chat-web)");
  check_neutral(j);
}

void parse_sampling(const json& j, const RequestLimits& limits, ChatRequest& r) {
  auto given = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  if (given("temperature")) r.temperature = number(j["temperature"], "temperature", 0.0, 2.0);
  if (given("top_k")) r.top_k = integer(j["top_k"], "top_k", 0, 1000);
  if (given("top_p")) {
    r.top_p = number(j["top_p"], "top_p", 0.0, 1.0);
    if (r.top_p <= 0.0) bad("top_p", "'top_p' must be above 0 (1 = off)");
  }
  if (given("presence_penalty")) r.presence_penalty = number(j["presence_penalty"], "presence_penalty", -2.0, 2.0);
  if (given("frequency_penalty")) r.frequency_penalty = number(j["frequency_penalty"], "frequency_penalty", -2.0, 2.0);
  if (given("max_tokens")) r.max_tokens = integer(j["max_tokens"], "max_tokens", 1, limits.max_tokens);
  if (given("max_completion_tokens"))
    r.max_tokens = integer(j["max_completion_tokens"], "max_completion_tokens", 1, limits.max_tokens);
  if (given("n")) r.n = integer(j["n"], "n", 1, limits.max_n);
  if (given("seed")) {
    if (!j["seed"].is_number_integer()) bad("seed", "'seed' must be an integer");
    r.seed = static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  if (j.contains("stop")) r.stop = parse_stop(j["stop"]);
}

}  // namespace

ChatRequest parse_chat_request(const std::string& body, const RequestLimits& limits) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    bad("", std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad("", "the request body must be a JSON object");
  check_known(j);
  ChatRequest r;
  r.max_tokens = std::min(r.max_tokens, limits.max_tokens);
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) bad("model", "'model' must be a string");
    r.model = j["model"].get<std::string>();
  }
  if (!j.contains("messages")) bad("messages", "'messages' is missing");
  r.messages = parse_messages(j["messages"], limits);
  parse_sampling(j, limits, r);
  auto given = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  if (given("stream")) {
    if (!j["stream"].is_boolean()) bad("stream", "'stream' must be true or false");
    r.stream = j["stream"].get<bool>();
  }
  if (given("stream_options")) {
    const json& so = j["stream_options"];
    if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
    for (const auto& [key, val] : so.items()) {
      if ((key != "include_usage" && key != "include_obfuscation") || !val.is_boolean())
        bad("stream_options." + key, "'stream_options' takes include_usage and include_obfuscation: true or false");
      if (key == "include_usage") r.include_usage = val.get<bool>();
    }
  }
  if (given("user") && !j["user"].is_string()) bad("user", "'user' must be a string");
  return r;
}

namespace {
// Bytes at the end of s that begin a UTF-8 character whose continuation bytes have not come yet.
size_t incomplete_utf8_tail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}
}  // namespace

std::string TextStream::push(const std::string& bytes) {
  if (stopped_) return {};
  held_ += bytes;
  size_t first = std::string::npos;
  for (const auto& s : stop_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest end of held_ that a stop string starts with, and a split character.
  size_t keep = 0;
  for (const auto& s : stop_)
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len)
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
  keep = std::max(keep, incomplete_utf8_tail(held_));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextStream::finish() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_completion_id() {
  static std::atomic<uint64_t> counter{0};
  const uint64_t t = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  char b[48];
  std::snprintf(b, sizeof b, "chatcmpl-%016llx%08llx", static_cast<unsigned long long>(t),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffffffffu));
  return b;
}

}  // namespace nanochat::serve
