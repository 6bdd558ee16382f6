#pragma once
// The OpenAI-compatible chat API of `nanochat chat-web` (docs/architecture.md 10): the request a
// client sends to POST /v1/chat/completions, checked field by field, and the JSON shapes of the
// answers (OpenAI's public API reference: "chat.completion", "chat.completion.chunk", the error
// object {"error": {"message", "type", "param", "code"}}).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nanochat::serve {

/// A request the server refuses: the HTTP status, OpenAI's error type ("invalid_request_error",
/// "server_busy", ...), the offending field (empty if none), a sentence that says what to do and
/// OpenAI's error code (empty: the type; e.g. "model_not_found").
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string param, const std::string& message, std::string code = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;
  std::string param;
  std::string code;
};

/// {"error": {"message", "type", "param", "code"}} (param null when empty; code = type when empty).
std::string error_json(const std::string& message, const std::string& type, const std::string& param = "",
                       const std::string& code = "");

/// One message of the conversation: role "system", "user" or "assistant" and its text.
struct ChatMessage {
  std::string role;
  std::string content;
};

/// Bounds on what one request may ask for (chat-web's flags).
struct RequestLimits {
  int max_messages = 64;              ///< messages per request
  int64_t max_message_bytes = 16000;  ///< bytes of one message's text
  int max_tokens = 2048;              ///< upper bound of max_tokens
  int max_n = 4;                      ///< upper bound of n
};

/// The limits as the page reads them from GET /health ("limits"): {"max_messages",
/// "max_message_bytes", "max_tokens", "max_n"}.
nlohmann::json limits_json(const RequestLimits& limits);

/// A checked POST /v1/chat/completions body. Defaults when a field is absent: temperature 0.8,
/// top_k 50 (0 = the whole vocabulary), top_p 1 (off), max_tokens 512 (capped by RequestLimits), stream false, n 1.
struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  double temperature = 0.8;
  int top_k = 50;
  double top_p = 1.0;
  int max_tokens = 512;
  bool stream = false;
  bool include_usage = false;     ///< stream_options.include_usage: a last chunk with the token counts
  std::vector<std::string> stop;  ///< up to 4 non-empty strings that end the answer (not returned)
  int n = 1;                      ///< answers sampled for the same conversation
  std::optional<uint64_t> seed;
  double presence_penalty = 0.0;   ///< -2..2 (engine/engine.h apply_penalties)
  double frequency_penalty = 0.0;  ///< -2..2
};

/// Parses and checks a request body: what OpenAI's clients send is accepted unless it would change
/// what the answer means. Fields:
///  - honoured: model (kept here; prepare() checks it), messages, temperature (0..2), top_k
///    (0..1000), top_p (0 exclusive..1), max_tokens or max_completion_tokens
///    (1..limits.max_tokens), stream, stream_options ({"include_usage": bool}), stop (string or up
///    to 4 strings), n (1..limits.max_n), seed, presence_penalty and frequency_penalty (-2..2);
///  - accepted and without effect: user, metadata, store, service_tier, parallel_tool_calls,
///    prompt_cache_key, safety_identifier;
///  - accepted when neutral, else a 400 that says why: logprobs (false), top_logprobs (0),
///    response_format ({"type": "text"}), tools and functions ([]), tool_choice and
///    function_call ("none" or "auto"), logit_bias ({} or all 0), modalities (["text"]), audio,
///    prediction, web_search_options, reasoning_effort (null).
/// null is the same as absent for every field. Any other field is refused (as OpenAI does).
/// messages: 1..limits.max_messages objects with role system|developer (= system)|user|assistant,
/// content a string or a list of {"type": "text", "text": ...} parts, and optionally name
/// (ignored) and null/empty tool_calls, refusal, audio; at most one system message, first.
/// Consecutive messages of one role are joined into one, their texts separated by "\n\n" (OpenAI
/// accepts them; nanochat's template needs turns that alternate); the last message must be the
/// user's. Throws ApiError (400) naming the field for malformed JSON, an unknown field, a wrong
/// type or a value out of range.
ChatRequest parse_chat_request(const std::string& body, const RequestLimits& limits);

/// Text of a stream of tokens, released as it becomes safe to show: never half of a UTF-8
/// character, and never text that could be the start of a stop string. push() returns the new
/// text to emit; stopped() turns true once a stop string has appeared (the text before it is the
/// answer; nothing after it is released). finish() returns what is still held back at the end
/// (an incomplete UTF-8 sequence there becomes U+FFFD when the JSON is written, dump_json).
class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {}
  std::string push(const std::string& bytes);
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  std::string held_;  // decoded bytes not released yet
  bool stopped_ = false;
};

/// j.dump() with invalid UTF-8 replaced by U+FFFD (a model may emit any byte sequence).
std::string dump_json(const nlohmann::json& j);

/// Unix seconds now (the "created" field).
int64_t unix_now();

/// The id of a completion: "chatcmpl-" and 24 hex digits from a process-wide counter and the clock.
std::string new_completion_id();

}  // namespace nanochat::serve
