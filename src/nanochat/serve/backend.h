#pragma once
// What a chat-web worker generates with (docs/architecture.md 10): one Backend per worker, each
// with its own model and KV cache, used by one thread at a time. The product's backend is the
// inference engine on a loaded checkpoint (serve/engine_backend.h); tests also use scripted ones.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/serve/api.h"

namespace nanochat::serve {

/// Sampling settings of one request (engine/engine.h GenerateOptions).
struct SampleParams {
  int n = 1;                      ///< answers sampled from the same prompt
  double temperature = 0.8;       ///< 0 = greedy
  int top_k = 50;                 ///< 0 = the whole vocabulary
  double top_p = 1.0;             ///< nucleus in (0, 1]; 1 = off
  double presence_penalty = 0.0;  ///< OpenAI's penalties (engine/engine.h apply_penalties)
  double frequency_penalty = 0.0;
  int max_tokens = 512;  ///< new tokens per answer at most
  uint64_t seed = 42;
};

/// What the caller wants after a piece of an answer.
enum class Control { Continue, StopRow, StopAll };

/// How one answer ended: "stop" (end of turn), "length" (max_tokens or the context) or
/// "cancelled" (the caller said StopRow/StopAll), and how many tokens it has.
struct RowEnd {
  std::string finish_reason;
  int tokens = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// Generates params.n answers after `prompt`, calling on_piece(row, bytes) with each new token's
  /// bytes (a token may end inside a UTF-8 character; tool calls and the tool's output come as
  /// the Markdown blocks of serve/tool_text.h, never as special-token names) until each row
  /// ends. Returns one RowEnd per row. Throws nanochat::Error on an engine failure.
  virtual std::vector<RowEnd> generate(const std::vector<int32_t>& prompt, const SampleParams& params,
                                       const std::function<Control(int row, const std::string& bytes)>& on_piece) = 0;
};

/// Makes the backend of worker `index` (0-based); called once per worker, from that worker's thread.
using BackendFactory = std::function<std::unique_ptr<Backend>(int index)>;

/// The model a server offers: its name, how a conversation becomes a prompt, its context, and how
/// each worker gets its own backend.
struct ServedModel {
  std::string id = "nanochat";  ///< the "model" of /v1/models and of every answer
  /// Tokens of the conversation rendered for the assistant's next answer (they end with
  /// <|assistant_start|>). Called from any HTTP thread, concurrently: must be thread-safe. Throws
  /// ApiError (400) when the conversation cannot be rendered.
  std::function<std::vector<int32_t>(const std::vector<ChatMessage>&)> render;
  int64_t context_len = 0;  ///< positions the model attends over: prompt + answer must fit
  BackendFactory make;
};

}  // namespace nanochat::serve
