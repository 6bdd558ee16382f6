#pragma once
// One chat completion from request to answer (docs/architecture.md 10): the checked request and
// its prompt (prepare, on the HTTP thread), the generation on a worker (run_completion), and the
// two answer shapes of OpenAI's API built from the worker's events: one "chat.completion" object
// (WholeAnswer) or a stream of "chat.completion.chunk" server-sent events (ChunkWriter).
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/serve/api.h"
#include "nanochat/serve/backend.h"
#include "nanochat/serve/pool.h"

namespace nanochat::serve {

/// A request ready for a worker.
struct Prepared {
  ChatRequest req;
  std::vector<int32_t> prompt;
  SampleParams params;  ///< max_tokens already cut to the room the context leaves
  std::string id;       ///< "chatcmpl-..."
  std::string model;    ///< the served model's id
  int64_t created = 0;
};

/// Parses the body (parse_chat_request), checks its model (absent, "" or the served id; another is
/// ApiError 404 with code "model_not_found"), renders the prompt and fits max_tokens into the
/// context. Throws ApiError 400 ("context_length_exceeded") when the prompt leaves no room for one token,
/// naming both lengths.
Prepared prepare(const std::string& body, const RequestLimits& limits, const ServedModel& model);

/// Worker side: posts Started (prompt length), Piece events as text becomes safe to show
/// (TextStream: whole UTF-8 characters, stop strings cut), then one RowDone per answer. Stops all
/// rows when the job is cancelled or its deadline passes ("length").
void run_completion(Backend& backend, Job& job, const Prepared& p);

/// Collects events into one "chat.completion" object.
class WholeAnswer {
 public:
  explicit WholeAnswer(const Prepared& p);
  void add(const JobEvent& e);
  std::string json_text() const;

 private:
  const Prepared& p_;
  std::vector<std::string> text_;
  std::vector<std::string> finish_;
  int prompt_tokens_ = 0, completion_tokens_ = 0;
};

/// Turns events into SSE lines: per answer a first chunk with the role, one chunk per piece, a
/// last chunk with finish_reason; a usage chunk if asked (stream_options.include_usage); then
/// "data: [DONE]". A failure becomes "data: {"error": ...}" and ends the stream.
class ChunkWriter {
 public:
  explicit ChunkWriter(const Prepared& p) : p_(p) {}
  /// SSE text for the event ("" when none is due).
  std::string event(const JobEvent& e);
  /// An error event followed by "data: [DONE]" (ends the stream).
  std::string error(const std::string& message, const std::string& type);
  bool done() const { return done_; }

 private:
  std::string chunk(const nlohmann::json& choices, const nlohmann::json* usage = nullptr) const;
  Prepared p_;
  int prompt_tokens_ = 0, completion_tokens_ = 0;
  bool done_ = false;
};

}  // namespace nanochat::serve
