#include "nanochat/serve/request_guard.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "nanochat/serve/api.h"
#include "nanochat/serve/connection.h"

namespace nanochat::serve {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string origin_of(std::string host, int port) {
  if (host.rfind("::ffff:", 0) == 0 && host.find('.') != std::string::npos) host = host.substr(7);
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(port);
}

bool is_loopback(const std::string& h) { return h == "127.0.0.1" || h == "localhost" || h == "::1"; }
bool is_wildcard(const std::string& h) { return h == "0.0.0.0" || h == "::" || h.empty(); }

bool is_own_origin(const GuardPolicy& p, const httplib::Request& req, const std::string& origin) {
  if (origin == origin_of(p.host, p.port)) return true;
  if (is_loopback(p.host) || is_wildcard(p.host))
    for (const char* h : {"localhost", "127.0.0.1", "::1"})
      if (origin == origin_of(h, p.port)) return true;
  // Listening on every address: the address this connection came in on is the server's own.
  return is_wildcard(p.host) && !req.local_addr.empty() && origin == origin_of(req.local_addr, p.port);
}

bool is_chunked(const httplib::Request& req) {
  return lower(req.get_header_value("Transfer-Encoding")).find("chunked") != std::string::npos;
}

// Refuses a request whose body is left unread: the connection closes after the answer.
bool refuse(httplib::Response& res, int status, const std::string& message) {
  send_error(res, status, status_type(status), message);
  if (auto* c = Connection::current()) c->close_after_response();
  return true;
}

// The framing and type of a chat completion's body, before any of it is read.
bool guard_chat_post(const GuardPolicy& p, const httplib::Request& req, httplib::Response& res) {
  const std::string type = trim(
      lower(req.get_header_value("Content-Type")).substr(0, lower(req.get_header_value("Content-Type")).find(';')));
  if (type != "application/json")
    return refuse(
        res, 415,
        "POST /v1/chat/completions takes a JSON body: send it with 'Content-Type: application/json'" +
            (type.empty() ? std::string(" (the request has no Content-Type)") : " (the request says '" + type + "')"));
  if (is_chunked(req)) return false;  // counted as it is read
  if (!req.has_header("Content-Length"))
    return refuse(res, 411,
                  "POST /v1/chat/completions needs a Content-Length header (or Transfer-Encoding: chunked); "
                  "send the body with its length");
  const std::string len = trim(req.get_header_value("Content-Length"));
  if (len.empty() || len.size() > 18 ||
      !std::all_of(len.begin(), len.end(), [](unsigned char c) { return std::isdigit(c); }))
    return refuse(res, 400, "the Content-Length header '" + len + "' is not a number of bytes");
  if (std::stoll(len) > p.max_body_bytes)
    return refuse(res, 413,
                  "the request body (" + len + " bytes) is larger than this server's limit of " +
                      std::to_string(p.max_body_bytes) + " bytes (--max-body-bytes)");
  return false;
}

void preflight(const GuardPolicy& p, const httplib::Request& req, httplib::Response& res) {
  res.status = 204;
  res.set_header("Allow", "GET, POST, OPTIONS");
  if (!req.has_header("Origin")) return;
  add_cors_headers(p, req, res);
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Content-Type, Authorization" : asked);
  res.set_header("Access-Control-Max-Age", "600");
}

// A path as the log shows it: at most 200 bytes, control characters (a decoded %0a) as '?', so
// that a request cannot forge log lines.
std::string printable(const std::string& s) {
  std::string out = s.substr(0, 200);
  for (char& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return out;
}

}  // namespace

void send_error(httplib::Response& res, int status, const std::string& type, const std::string& message,
                const std::string& param) {
  res.status = status;
  res.set_content(error_json(message, type, param), "application/json");
}

const char* status_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 411:
      return "length_required";
    case 413:
      return "request_too_large";
    case 415:
      return "unsupported_media_type";
    case 429:
      return "server_busy";
    case 503:
      return "service_unavailable";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

bool origin_allowed(const GuardPolicy& p, const httplib::Request& req) {
  if (!req.has_header("Origin")) return true;
  const std::string origin = req.get_header_value("Origin");
  if (is_own_origin(p, req, origin)) return true;
  return std::find(p.allow_origins.begin(), p.allow_origins.end(), origin) != p.allow_origins.end();
}

bool guard_request(const GuardPolicy& p, const httplib::Request& req, httplib::Response& res) {
  if (!origin_allowed(p, req))
    return refuse(res, 403,
                  "requests from pages at " + req.get_header_value("Origin") +
                      " are refused: only this server's own page may call it; start chat-web with "
                      "--allow-origin " +
                      req.get_header_value("Origin") + " to allow that origin");
  if (req.method == "OPTIONS") {
    preflight(p, req, res);
    return true;
  }
  if (req.method == "POST" && req.path == "/v1/chat/completions") return guard_chat_post(p, req, res);
  return false;
}

void add_cors_headers(const GuardPolicy& p, const httplib::Request& req, httplib::Response& res) {
  if (!req.has_header("Origin") || !origin_allowed(p, req)) return;
  res.set_header("Access-Control-Allow-Origin", req.get_header_value("Origin"));
  res.set_header("Vary", "Origin");
}

std::string log_time() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char when[40];
  const size_t n = std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(when + n, sizeof when - n, ".%03dZ", static_cast<int>(ms));
  return when;
}

std::string format_seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

std::string request_log_line(const std::string& addr, int port, const httplib::Request& req, int status,
                             int prompt_tokens, int completion_tokens, double queue_wait_s, double duration_s,
                             const std::string& outcome) {
  char line[1024];
  std::snprintf(line, sizeof line, "%s %s:%d %s %s %d in=%d out=%d wait=%.3fs time=%.3fs%s%s", log_time().c_str(),
                addr.c_str(), port, req.method.c_str(), printable(req.path).c_str(), status, std::max(prompt_tokens, 0),
                std::max(completion_tokens, 0), std::max(queue_wait_s, 0.0), duration_s, outcome.empty() ? "" : " ",
                outcome.c_str());
  return line;
}

}  // namespace nanochat::serve
