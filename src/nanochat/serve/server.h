#pragma once
// The HTTP server of `nanochat chat-web` (docs/architecture.md 10), on cpp-httplib:
//   GET  /                      the chat page (serve/page.h)
//   POST /v1/chat/completions   OpenAI's chat completions, whole or streamed as server-sent
//                               events ("data: {chunk}" lines, then "data: [DONE]"); while a
//                               streamed request waits for a worker the server sends SSE comment
//                               lines ": waiting <place in queue>" (clients ignore comments)
//   GET  /v1/models             the one model, OpenAI's list shape
//   GET  /health                {"status": "ok" ("stopping" while draining), workers, busy, queued,
//                               connections (open now), ...}
//   GET  /runs                  the training runs under the base folder (RunsProvider)
//   GET  /runs/<run>/chart.svg  a run's chart from its metrics, as it trains
//   OPTIONS *                   CORS preflight, answered for this server's own and --allow-origin
//                               origins (serve/request_guard.h)
// Every error is OpenAI's {"error": {...}} object with a 4xx/5xx status: 400 bad request (named
// field), 403 a foreign Origin, 404 unknown path, 405 wrong method, 408 a body slower than
// --read-timeout, 411 a POST without length, 413 body too large (any framing), 415 a body that is
// not application/json, 429 every worker busy and the queue full (with Retry-After), 503 the time
// limit passed while waiting or the server is stopping, 500 generation failed. A handler never
// lets an exception reach the library: the server keeps serving. Connections have their own
// threads and read deadlines (serve/connection.h), a whole answer whose client left is cancelled,
// and stop() lets answers finish for a while, then ends each one with an error event and
// "data: [DONE]".
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nanochat/serve/api.h"
#include "nanochat/serve/backend.h"

namespace nanochat::serve {

/// The run list and charts of the page's "Runs" panel; either may be empty (then 404).
struct RunsProvider {
  /// JSON text: {"runs": [{"name", "path", ...}, ...]}.
  std::function<std::string()> list_json;
  /// SVG of the run named as in list_json, or std::nullopt when there is no such run.
  std::function<std::optional<std::string>(const std::string& run)> chart_svg;
};

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  ///< 0 = any free port (ChatServer::bind returns it)
  int workers = 1;
  int queue = 8;  ///< requests that may wait for a worker
  int64_t max_body_bytes = 1 << 20;
  double request_timeout_s = 300;          ///< wall time of one request, waiting included
  double read_timeout_s = 10;              ///< headers, then the body, must each arrive within this
  int http_threads = 256;                  ///< connections served at once (at least workers + queue + 8)
  double drain_timeout_s = 10;             ///< stop(): how long running answers may go on
  std::vector<std::string> allow_origins;  ///< other web origins that may call the API (CORS)
  /// One line per request and per cut connection (request_guard.h); empty = no log.
  std::function<void(const std::string&)> log;
  RequestLimits limits;
  RunsProvider runs;
  /// GET /report: the report card (markdown) of the served model, or std::nullopt with the reason
  /// in `why` (then 404); empty = no card.
  std::function<std::optional<std::string>(std::string& why)> report_card;
};

class ChatServer {
 public:
  /// Starts the worker pool (model.make is called once per worker). Throws nanochat::Error if a
  /// worker cannot make its backend.
  ChatServer(const ServeOptions& opt, ServedModel model);
  ~ChatServer();
  ChatServer(const ChatServer&) = delete;
  ChatServer& operator=(const ChatServer&) = delete;

  /// Binds opt.host:opt.port; returns the port. Throws nanochat::Error naming host and port when
  /// the address cannot be bound (in use, not an address of this machine).
  int bind();
  /// Serves until stop() (from another thread or a signal-handling thread).
  void run();
  /// Refuses new answers (503), lets running ones go on for drain_timeout_s, then ends each that
  /// is left (a stream with an error event and "data: [DONE]", a whole answer with 503) and stops
  /// serving. Returns when run() is about to return.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanochat::serve
