#pragma once
// What chat-web checks of a request once its headers are in and before any body is read
// (docs/architecture.md 10), and the one log line each request leaves:
//   - Origin: a browser sends it with a page's requests; one that is neither this server's own
//     (http://<host>:<port>, and the loopback names when it listens on one) nor named by
//     --allow-origin gets 403, so that no other web page can make the model generate. An allowed
//     origin gets CORS answers: OPTIONS preflight (204 with Access-Control-Allow-*) and
//     Access-Control-Allow-Origin on every response.
//   - POST /v1/chat/completions: Content-Type must be application/json (415; a form or text/plain
//     POST, which a page may send anywhere without asking, is refused), the body needs a
//     Content-Length or chunked framing (411 at once), and a Content-Length over --max-body-bytes
//     is 413 before a byte of it is read.
// Every refusal is OpenAI's error object; one that leaves a body unread closes the connection.
#include <httplib.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nanochat::serve {

struct GuardPolicy {
  std::string host;  ///< the address the server listens on
  int port = 0;
  std::vector<std::string> allow_origins;  ///< --allow-origin, e.g. "http://localhost:3000"
  int64_t max_body_bytes = 1 << 20;
};

/// Sets an OpenAI error object as the response.
void send_error(httplib::Response& res, int status, const std::string& type, const std::string& message,
                const std::string& param = "");

/// OpenAI's error type of a status ("invalid_request_error", "server_busy", ...).
const char* status_type(int status);

/// True when the request carries no Origin, or one this server answers (its own or allowed).
bool origin_allowed(const GuardPolicy& policy, const httplib::Request& req);

/// Checks a request whose headers are in; true when it answered (a refusal or a preflight).
bool guard_request(const GuardPolicy& policy, const httplib::Request& req, httplib::Response& res);

/// Adds Access-Control-Allow-Origin (and Vary: Origin) for a request from an allowed other origin.
void add_cors_headers(const GuardPolicy& policy, const httplib::Request& req, httplib::Response& res);

/// UTC now as the log writes it: 2026-01-02T03:04:05.678Z.
std::string log_time();

/// Seconds as a person reads them: 10, 0.5, 2.25.
std::string format_seconds(double s);

/// The log line of a finished request: UTC time, client address (addr:port), method, path, status,
/// prompt and answer tokens (generated so far, for an answer cut short), time waited for a
/// worker, total time and how it ended when not normally.
std::string request_log_line(const std::string& addr, int port, const httplib::Request& req, int status,
                             int prompt_tokens, int completion_tokens, double queue_wait_s, double duration_s,
                             const std::string& outcome);

}  // namespace nanochat::serve
