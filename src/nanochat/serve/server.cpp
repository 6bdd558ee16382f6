#include "nanochat/serve/server.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

#include "nanochat/core/error.h"
#include "nanochat/serve/card_page.h"
#include "nanochat/serve/completion.h"
#include "nanochat/serve/connection.h"
#include "nanochat/serve/page.h"
#include "nanochat/serve/pool.h"
#include "nanochat/serve/request_guard.h"

namespace nanochat::serve {

using json = nlohmann::json;

namespace {

ConnectionLimits connection_limits(const ServeOptions& o) {
  ConnectionLimits l;
  // Every admitted answer holds its connection's thread; a few more stay for the page and /health.
  l.threads = std::max(o.http_threads, o.workers + o.queue + 8);
  l.read_timeout_s = o.read_timeout_s;
  // Chunk framing may add a few bytes per body byte; the chat route counts the body itself.
  l.max_body_raw = 8 * o.max_body_bytes + (64 << 10);
  return l;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

struct ChatServer::Impl {
  ServeOptions opt;
  ServedModel model;
  WorkerPool pool;
  GuardedServer http;
  GuardPolicy policy;
  int port = -1;
  std::atomic<bool> draining{false};  // stop(): new answers are refused, running ones go on
  std::atomic<bool> stopping{false};  // the drain ended: waiting handlers give up, jobs are cancelled
  std::atomic<int> active{0};         // answers admitted and not yet written out
  std::mutex stop_m;                  // one stop() at a time

  Impl(const ServeOptions& o, ServedModel m)
      : opt(o), model(std::move(m)), pool(o.workers, o.queue, model.make), http(connection_limits(o)) {
    policy.host = o.host;
    policy.allow_origins = o.allow_origins;
    policy.max_body_bytes = o.max_body_bytes;
  }

  void configure();
  void hooks();
  void routes();
  void log(const std::string& line) const {
    if (opt.log) opt.log(line);
  }
  bool wait_idle(Clock::time_point until) const;
  void chat_post(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read);
  void chat(const std::string& body, httplib::Response& res, bool close_delimited);
  void finish_whole(const std::shared_ptr<Job>& job, const Prepared& p, httplib::Response& res);
  void stream(const std::shared_ptr<Job>& job, const Prepared& p, httplib::Response& res, bool close_delimited);
};

ChatServer::ChatServer(const ServeOptions& opt, ServedModel model) {
  // A client that goes away mid-answer must not kill the process with SIGPIPE; the failed write
  // is seen and the job cancelled instead.
  ::signal(SIGPIPE, SIG_IGN);
  impl_ = std::make_unique<Impl>(opt, std::move(model));
  impl_->configure();
  impl_->hooks();
  impl_->routes();
}

ChatServer::~ChatServer() { stop(); }

int ChatServer::bind() {
  auto& s = impl_->http;
  const auto& o = impl_->opt;
  const int port = o.port == 0 ? s.bind_to_any_port(o.host) : (s.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0)
    fail("cannot listen on ", o.host, ":", o.port,
         ": the port is in use, needs privileges (below 1024) or the host is not an address of this "
         "machine; choose another --port or --host");
  impl_->port = port;
  impl_->policy.port = port;
  s.widen_backlog();
  return port;
}

void ChatServer::run() {
  if (impl_->port < 0) bind();
  impl_->http.listen_after_bind();
}

bool ChatServer::Impl::wait_idle(Clock::time_point until) const {
  while (active.load() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return active.load() == 0;
}

void ChatServer::stop() {
  if (!impl_) return;
  auto& m = *impl_;
  std::lock_guard<std::mutex> lk(m.stop_m);
  m.draining = true;
  const auto drain_end = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(m.opt.drain_timeout_s * 1000));
  if (!m.wait_idle(drain_end) && m.opt.log)
    m.log(log_time() + " stopping: " + std::to_string(m.active.load()) + " answer(s) still running after " +
          format_seconds(m.opt.drain_timeout_s) + " s (--drain-timeout); ending them");
  m.stopping = true;
  m.wait_idle(Clock::now() + std::chrono::seconds(2));  // each left answer writes its end
  if (m.http.is_running()) m.http.stop();
}

// Limits, timeouts and the JSON answers of errors that no route writes (404, 413, exceptions).
void ChatServer::Impl::configure() {
  http.set_payload_max_length(static_cast<size_t>(opt.max_body_bytes));
  http.set_tcp_nodelay(true);  // each streamed token leaves at once
  // SO_REUSEADDR only: the library's default also sets SO_REUSEPORT, with which a second server on
  // the same port would start and silently share the requests instead of being refused.
  http.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    auto* c = Connection::current();
    if (c && c->body_over_limit()) {  // a body to another path passed the bound while read
      res.status = 413;
      res.body.clear();
      c->close_after_response();
    } else if (c && c->timed_out()) {  // the headers stalled (the library says 400)
      res.status = 408;
      res.set_content(error_json("the request's headers did not arrive within " + format_seconds(opt.read_timeout_s) +
                                     " s (--read-timeout); send them at once",
                                 "request_timeout"),
                      "application/json");
      c->close_after_response();
    }
    if (!res.body.empty() || res.content_provider_) return;
    std::string msg;
    if (res.status == 404)
      msg = "no such path: " + req.method + " " + req.path +
            " (try GET /, POST /v1/chat/completions, GET /v1/models, GET /health, GET /runs)";
    else if (res.status == 413)
      msg = "the request body is larger than this server's limit of " + std::to_string(opt.max_body_bytes) +
            " bytes (--max-body-bytes)";
    else
      msg = "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path;
    res.set_content(error_json(msg, status_type(res.status)), "application/json");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, "server_error", "internal error: " + what);
  });
}

// The checks before a body is read, the CORS headers of every answer, and the log.
void ChatServer::Impl::hooks() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (auto* c = Connection::current()) c->begin_body();
    return guard_request(policy, req, res) ? httplib::Server::HandlerResponse::Handled
                                           : httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    add_cors_headers(policy, req, res);
    auto* c = Connection::current();
    // One "Connection: close" for every answer after which the connection closes (the library
    // adds its own when it closes for its reasons).
    if (c && c->closing() && !res.has_header("Connection")) res.set_header("Connection", "close");
  });
  if (!opt.log) return;
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    auto* c = Connection::current();
    if (!c) return;
    const auto& n = c->note;
    std::string ip = req.remote_addr;
    int port = req.remote_port;
    if (port < 0) {  // the request line could not be read: no more requests on this connection
      c->get_remote_ip_and_port(ip, port);
      c->close_after_response();
    }
    log(request_log_line(ip, port, req, res.status, n.prompt_tokens, std::max(n.completion_tokens, n.generated_tokens),
                         n.queue_wait_s, seconds_since(n.start), n.outcome));
  });
  http.on_read_timeout = [this](const Connection& c) {
    std::string ip;
    int port = 0;
    c.get_remote_ip_and_port(ip, port);
    log(log_time() + " " + ip + ":" + std::to_string(port) + " connection cut: the request did not arrive within " +
        format_seconds(opt.read_timeout_s) + " s (--read-timeout)");
  };
}

void ChatServer::Impl::routes() {
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(chat_page_html(), "text/html; charset=utf-8");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const auto s = pool.stats();
    json j = {{"status", draining ? "stopping" : "ok"},
              {"connections", http.connections()},
              {"model", model.id},
              {"workers", s.workers},
              {"busy", s.busy},
              {"queued", s.queued},
              {"queue_capacity", s.queue_capacity},
              {"served", s.served},
              {"rejected", s.rejected},
              {"context_len", model.context_len}};
    j["limits"] = limits_json(opt.limits);  // the page's max-tokens box takes its bound from here
    res.set_content(dump_json(j), "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", model.id}, {"object", "model"}, {"created", 0}, {"owned_by", "nanochat"}};
    res.set_content(dump_json(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                           const httplib::ContentReader& read) { chat_post(req, res, read); });
  for (const char* path : {"/v1/chat/completions", "/v1/models", "/health"}) {
    auto wrong = [](const httplib::Request& req, httplib::Response& res) {
      send_error(res, 405, "method_not_allowed", req.method + " is not allowed on " + req.path);
    };
    if (std::string(path) == "/v1/chat/completions")
      http.Get(path, wrong);
    else
      http.Post(path, wrong);
  }
  http.Get("/runs", [this](const httplib::Request&, httplib::Response& res) {
    if (!opt.runs.list_json) return send_error(res, 404, "not_found", "this server lists no training runs");
    try {
      res.set_content(opt.runs.list_json(), "application/json");
    } catch (const std::exception& e) {
      send_error(res, 404, "not_found", e.what());
    }
  });
  // The report card as a page of its own (serve/card_page.h), its markdown at /report.md.
  http.Get(R"(/report(\.md)?)", [this](const httplib::Request& req, httplib::Response& res) {
    std::string why = "this server shows no report card";
    const std::optional<std::string> md = opt.report_card ? opt.report_card(why) : std::nullopt;
    if (!md) return send_error(res, 404, "not_found", why);
    res.set_header("Cache-Control", "no-store");
    if (req.matches[1].length() > 0) return res.set_content(*md, "text/markdown; charset=utf-8");
    res.set_content(card_page(*md), "text/html; charset=utf-8");
  });
  http.Get(R"(/runs/(.+)/chart\.svg)", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string run = req.matches[1];
    std::optional<std::string> svg;
    try {
      if (opt.runs.chart_svg) svg = opt.runs.chart_svg(run);
    } catch (const std::exception& e) {
      return send_error(res, 400, "invalid_request_error", e.what());
    }
    if (!svg) return send_error(res, 404, "not_found", "no training run named '" + run + "' (see GET /runs)");
    res.set_header("Cache-Control", "no-store");
    res.set_content(*svg, "image/svg+xml");
  });
}

// Reads the body, counting it whatever its framing: past --max-body-bytes the read stops and the
// answer is 413 (the rest is never read; the connection closes).
void ChatServer::Impl::chat_post(const httplib::Request& req, httplib::Response& res,
                                 const httplib::ContentReader& read) {
  auto* c = Connection::current();
  std::string body;
  bool over = false;
  const bool ok = read([&](const char* data, size_t n) {
    if (static_cast<int64_t>(body.size() + n) > opt.max_body_bytes) {
      over = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (c) c->end_body();
  if (ok && !over) return chat(body, res, req.version == "HTTP/1.0");
  if (c) c->close_after_response();
  if (over || (c && c->body_over_limit()))
    return send_error(res, 413, "request_too_large",
                      "the request body is larger than this server's limit of " + std::to_string(opt.max_body_bytes) +
                          " bytes (--max-body-bytes)");
  if (c && c->timed_out())
    return send_error(res, 408, "request_timeout",
                      "the request body did not arrive within " + format_seconds(opt.read_timeout_s) +
                          " s (--read-timeout); send it at once after the headers");
  send_error(res, 400, "invalid_request_error",
             "the request body could not be read: it ended before its length or its chunked framing is broken");
}

void ChatServer::Impl::chat(const std::string& body, httplib::Response& res, bool close_delimited) {
  if (draining)
    return send_error(res, 503, "server_shutting_down", "the server is shutting down; try again when it is back");
  Prepared p;
  try {
    p = prepare(body, opt.limits, model);
  } catch (const ApiError& e) {
    res.status = e.status;
    return res.set_content(error_json(e.what(), e.type, e.param, e.code), "application/json");
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt.request_timeout_s * 1000.0));
  auto job = pool.submit([p](Backend& b, Job& j) { run_completion(b, j, p); }, deadline);
  if (!job) {
    const auto s = pool.stats();
    res.set_header("Retry-After", "1");
    return send_error(res, 429, "server_busy",
                      "all " + std::to_string(s.workers) + " workers are busy and " + std::to_string(s.queue_capacity) +
                          " requests already wait; try again in a moment");
  }
  if (p.req.stream) return stream(job, p, res, close_delimited);
  ++active;
  struct Done {
    std::atomic<int>& n;
    ~Done() { --n; }
  } done{active};
  finish_whole(job, p, res);
}

namespace {

// Notes a job's event for the request's log line: the prompt, the time waited, the answer's tokens.
void note_event(Connection* c, const JobEvent& e, Clock::time_point submitted) {
  if (!c) return;
  auto& n = c->note;
  if (e.kind == JobEvent::Kind::Started) {
    n.prompt_tokens = e.prompt_tokens;
    n.queue_wait_s = seconds_since(submitted);
  } else if (e.kind == JobEvent::Kind::RowDone) {
    n.completion_tokens = std::max(n.completion_tokens, 0) + e.end.tokens;
  } else if (e.kind == JobEvent::Kind::Piece) {
    n.generated_tokens = std::max(n.generated_tokens, e.generated);
  }
}

}  // namespace

// Waits for the whole answer, checking every 200 ms that the client is still there: one that
// left has its job cancelled, which frees the worker at its next token.
void ChatServer::Impl::finish_whole(const std::shared_ptr<Job>& job, const Prepared& p, httplib::Response& res) {
  auto* c = Connection::current();
  const auto submitted = Clock::now();
  WholeAnswer whole(p);
  JobEvent e;
  auto next_check = Clock::now();
  for (;;) {
    if (stopping) {
      pool.cancel(job);
      if (c) c->note.outcome = "shutdown";
      return send_error(res, 503, "server_shutting_down", "the server is shutting down; try again when it is back");
    }
    if (c && Clock::now() >= next_check) {  // at most every 200 ms, tokens or not
      next_check = Clock::now() + std::chrono::milliseconds(200);
      if (c->client_gone()) {
        pool.cancel(job);
        c->note.outcome = "client gone";
        c->close_after_response();
        return send_error(res, 499, "client_closed", "the client closed the connection");
      }
    }
    if (!job->next(e, std::chrono::milliseconds(200))) {
      if (!job->started() && Clock::now() >= job->deadline()) {
        pool.cancel(job);
        return send_error(res, 503, "timeout",
                          "the request waited for a free worker until its time limit (" +
                              format_seconds(opt.request_timeout_s) + " s); try again later");
      }
      continue;
    }
    note_event(c, e, submitted);
    if (e.kind == JobEvent::Kind::Failed) return send_error(res, e.status, e.type, e.text);
    if (e.kind == JobEvent::Kind::Finished) break;
    whole.add(e);
  }
  res.set_content(whole.json_text(), "application/json");
}

// Server-sent events, chunked; to an HTTP/1.0 client (no chunked encoding) the stream is ended by
// closing the connection instead.
void ChatServer::Impl::stream(const std::shared_ptr<Job>& job, const Prepared& p, httplib::Response& res,
                              bool close_delimited) {
  auto chunks = std::make_shared<ChunkWriter>(p);
  auto* c = Connection::current();
  const auto submitted = Clock::now();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  ++active;
  auto provider = [this, job, chunks, c, submitted](size_t, httplib::DataSink& sink) {
    JobEvent e;
    if (stopping) {  // the drain ended: the answer ends with an error event and [DONE]
      pool.cancel(job);
      if (c) c->note.outcome = "shutdown";
      const std::string s = chunks->error("the server is shutting down", "server_shutting_down");
      sink.write(s.data(), s.size());
      sink.done();
      return true;
    }
    if (!job->next(e, std::chrono::milliseconds(250))) {
      // Nothing new: tell the client where it stands; a failed write means it went away.
      if (!job->started() && Clock::now() >= job->deadline()) {
        pool.cancel(job);
        const std::string s = chunks->error("the request waited for a free worker until its time limit", "timeout");
        sink.write(s.data(), s.size());
        sink.done();
        return true;
      }
      const int place = pool.position(*job);
      const std::string beat = place > 0 ? ": waiting " + std::to_string(place) + "\n\n" : ": working\n\n";
      if (sink.write(beat.data(), beat.size())) return true;
      if (c) c->note.outcome = "client gone";
      return false;
    }
    note_event(c, e, submitted);
    const std::string s = chunks->event(e);
    if (!s.empty() && !sink.write(s.data(), s.size())) {
      if (c) c->note.outcome = "client gone";
      return false;
    }
    if (chunks->done()) sink.done();
    return true;
  };
  auto release = [this, job](bool) {
    pool.cancel(job);
    --active;
  };
  if (!close_delimited) return res.set_chunked_content_provider("text/event-stream", provider, release);
  if (c) c->close_after_response();
  res.set_content_provider("text/event-stream", provider, release);
}

}  // namespace nanochat::serve
