#include "nanochat/serve/server.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <exception>

#include "nanochat/core/error.h"
#include "nanochat/serve/completion.h"
#include "nanochat/serve/page.h"
#include "nanochat/serve/pool.h"

namespace nanochat::serve {

using json = nlohmann::json;

namespace {

void send_error(httplib::Response& res, int status, const std::string& type, const std::string& message,
                const std::string& param = "") {
  res.status = status;
  res.set_content(error_json(message, type, param), "application/json");
}

const char* status_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "request_too_large";
    case 429:
      return "server_busy";
    case 503:
      return "service_unavailable";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

struct ChatServer::Impl {
  ServeOptions opt;
  ServedModel model;
  WorkerPool pool;
  httplib::Server http;
  int port = -1;
  std::atomic<bool> stopping{false};  // stop(): waiting handlers give up, their jobs are cancelled

  Impl(const ServeOptions& o, ServedModel m) : opt(o), model(std::move(m)), pool(o.workers, o.queue, model.make) {}

  void configure();
  void routes();
  void chat(const httplib::Request& req, httplib::Response& res);
  void finish_whole(const std::shared_ptr<Job>& job, const Prepared& p, httplib::Response& res);
  void stream(const std::shared_ptr<Job>& job, const Prepared& p, httplib::Response& res);
};

ChatServer::ChatServer(const ServeOptions& opt, ServedModel model) {
  // A client that goes away mid-answer must not kill the process with SIGPIPE; the failed write
  // is seen and the job cancelled instead.
  ::signal(SIGPIPE, SIG_IGN);
  impl_ = std::make_unique<Impl>(opt, std::move(model));
  impl_->configure();
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
  return port;
}

void ChatServer::run() {
  if (impl_->port < 0) bind();
  impl_->http.listen_after_bind();
}

void ChatServer::stop() {
  if (!impl_) return;
  impl_->stopping = true;
  if (impl_->http.is_running()) impl_->http.stop();
}

// Limits, timeouts and the JSON answers of errors that no route writes (404, 413, exceptions).
void ChatServer::Impl::configure() {
  // Enough connection threads for every admitted request plus a few for the page, /health and the
  // answers that refuse a request; more connections wait in the kernel's accept queue.
  const size_t threads = static_cast<size_t>(opt.workers + opt.queue + 8);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(static_cast<size_t>(opt.max_body_bytes));
  http.set_tcp_nodelay(true);  // each streamed token leaves at once
  // SO_REUSEADDR only: the library's default also sets SO_REUSEPORT, with which a second server on
  // the same port would start and silently share the requests instead of being refused.
  http.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.set_keep_alive_timeout(2);
  http.set_read_timeout(10);
  http.set_write_timeout(10);
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
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

void ChatServer::Impl::routes() {
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(chat_page_html(), "text/html; charset=utf-8");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const auto s = pool.stats();
    json j = {{"status", "ok"},     {"model", model.id},      {"workers", s.workers},
              {"busy", s.busy},     {"queued", s.queued},     {"queue_capacity", s.queue_capacity},
              {"served", s.served}, {"rejected", s.rejected}, {"context_len", model.context_len}};
    j["limits"] = limits_json(opt.limits);  // the page's max-tokens box takes its bound from here
    res.set_content(dump_json(j), "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", model.id}, {"object", "model"}, {"created", 0}, {"owned_by", "nanochat"}};
    res.set_content(dump_json(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { chat(req, res); });
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

void ChatServer::Impl::chat(const httplib::Request& req, httplib::Response& res) {
  Prepared p;
  try {
    p = prepare(req.body, opt.limits, model);
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
  if (p.req.stream)
    stream(job, p, res);
  else
    finish_whole(job, p, res);
}

void ChatServer::Impl::finish_whole(const std::shared_ptr<Job>& job, const Prepared& p, httplib::Response& res) {
  WholeAnswer whole(p);
  JobEvent e;
  for (;;) {
    if (stopping) {
      pool.cancel(job);
      return send_error(res, 503, "server_shutting_down", "the server is shutting down");
    }
    if (!job->next(e, std::chrono::milliseconds(200))) {
      if (!job->started() && Clock::now() >= job->deadline()) {
        pool.cancel(job);
        return send_error(res, 503, "timeout",
                          "the request waited for a free worker until its time limit (" +
                              std::to_string(opt.request_timeout_s) + " s); try again later");
      }
      continue;
    }
    if (e.kind == JobEvent::Kind::Failed) return send_error(res, e.status, e.type, e.text);
    if (e.kind == JobEvent::Kind::Finished) break;
    whole.add(e);
  }
  res.set_content(whole.json_text(), "application/json");
}

void ChatServer::Impl::stream(const std::shared_ptr<Job>& job, const Prepared& p, httplib::Response& res) {
  auto chunks = std::make_shared<ChunkWriter>(p);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job, chunks](size_t, httplib::DataSink& sink) {
        JobEvent e;
        if (stopping) return false;  // the releaser cancels the job
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
          return sink.write(beat.data(), beat.size());
        }
        const std::string s = chunks->event(e);
        if (!s.empty() && !sink.write(s.data(), s.size())) return false;
        if (chunks->done()) sink.done();
        return true;
      },
      [this, job](bool) { pool.cancel(job); });
}

}  // namespace nanochat::serve
