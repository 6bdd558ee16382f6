// `nanochat chat-web`: serve a checkpoint to a browser (the chat page) and to OpenAI-style clients
// (POST /v1/chat/completions) over HTTP; serve/server.h has the routes, docs/architecture.md 10
// the design.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/cli/commands.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/threads.h"
#include "nanochat/serve/engine_backend.h"
#include "nanochat/serve/server.h"
#include "nanochat/train/runs.h"

namespace nanochat::cli {

namespace {
struct ChatWebArgs {
  CheckpointChoice ckpt;
  serve::ServeOptions opt;
  int threads = 0;
  bool quiet = false;
};

std::atomic<serve::ChatServer*> g_server{nullptr};

// The page's "Runs" panel: the runs under the base folder (train/runs.h) and each one's chart,
// read afresh on every request so that a run that trains shows its latest steps.
serve::RunsProvider runs_under(const std::string& base) {
  serve::RunsProvider p;
  p.list_json = [base] {
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& r : list_runs(base))
      runs.push_back({{"kind", r.kind},
                      {"tag", r.tag},
                      {"has_metrics", r.has_metrics},
                      {"last_step", r.last_step},
                      {"last_update_unix", r.last_update_unix},
                      {"live", r.live},
                      {"finished", r.finished}});
    return serve::dump_json({{"runs", runs}});
  };
  p.chart_svg = [base](const std::string& name) -> std::optional<std::string> {
    const auto slash = name.find('/');
    if (slash == std::string::npos) return std::nullopt;
    const auto run = find_run(base, name.substr(0, slash), name.substr(slash + 1));
    if (!run) return std::nullopt;
    return run_chart_svg(*run);
  };
  return p;
}

// SIGINT/SIGTERM end the server cleanly: a thread waits for them and stops it (before the server
// runs, they end the process as they would have). Called before any other thread exists, so that
// every thread inherits the blocked signals and only this one takes them.
void stop_on_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "chat-web: signal %d, stopping\n", sig);
    serve::ChatServer* server = g_server.load();
    if (!server) std::_Exit(128 + sig);
    server->stop();
  }).detach();
}
}  // namespace

// GET /report: $NANOCHAT_BASE_DIR/report/report.md when it is the card of the served model
// (`id` is "<source>-<tag>-step<N>": the card names the tag as its road's model tag or a
// stage's model).
std::function<std::optional<std::string>(std::string&)> report_card_of(const std::string& id) {
  const size_t first = id.find('-'), last = id.rfind("-step");
  const std::string tag = first != std::string::npos && last > first ? id.substr(first + 1, last - first - 1) : id;
  const std::string path = base_dir() + "/report/report.md";
  return [tag, path](std::string& why) -> std::optional<std::string> {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      why =
          "no report card in " + path + " (`nanochat speedrun` writes one, `nanochat report` renders the stages' own)";
      return std::nullopt;
    }
    std::string md = read_file(path);
    if (md.find("model tag " + tag + ",") == std::string::npos &&
        md.find("- model_tag: " + tag + "\n") == std::string::npos &&
        md.find("- model: " + tag + " step") == std::string::npos) {
      why = "the report card in " + path + " is not of model " + tag;
      return std::nullopt;
    }
    return md;
  };
}

void register_chat_web(CLI::App& app) {
  auto a = std::make_shared<ChatWebArgs>();
  CLI::App* c = app.add_subcommand(
      "chat-web", "serve a checkpoint: a chat page and an OpenAI-compatible API (POST /v1/chat/completions)");
  add_source_option(c, a->ckpt, "sft");
  add_checkpoint_options(c, a->ckpt);
  auto& o = a->opt;
  c->add_option("--port", o.port, "TCP port (0 = any free port)")->capture_default_str();
  c->add_option("--host", o.host, "address to listen on; 0.0.0.0 opens the server to the network")
      ->capture_default_str();
  c->add_option("--workers", o.workers, "requests generated at once, each worker with its own model copy")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  c->add_option("--queue", o.queue, "requests that may wait for a worker; more get HTTP 429")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  c->add_option("--max-body-bytes", o.max_body_bytes, "largest request body (HTTP 413 above)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30))
      ->capture_default_str();
  c->add_option("--request-timeout", o.request_timeout_s,
                "seconds one request may take, waiting included (an answer is cut there)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  c->add_option("--read-timeout", o.read_timeout_s,
                "seconds a client has to send a request's headers, and again its body (slower ones are cut)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  c->add_option("--http-threads", o.http_threads,
                "connections served at once (the page, /health and requests reading or waiting), at least "
                "--workers + --queue + 8")
      ->check(CLI::Range(4, 65536))
      ->capture_default_str();
  c->add_option("--allow-origin", o.allow_origins,
                "a web origin (scheme://host:port) whose pages may call the API (CORS); repeat for more. "
                "Other pages' requests get HTTP 403")
      ->allow_extra_args(false)
      ->check([](const std::string& o) -> std::string {
        const bool scheme = o.rfind("http://", 0) == 0 || o.rfind("https://", 0) == 0;
        if (scheme && o.find('/', o.find("//") + 2) == std::string::npos) return "";
        return "'" + o + "' is not a web origin: give scheme://host[:port] with no path, e.g. http://localhost:3000";
      });
  c->add_option("--drain-timeout", o.drain_timeout_s,
                "on SIGINT/SIGTERM, seconds running answers may go on before each is ended with an error")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  c->add_flag("--quiet", a->quiet, "no log line per request on stderr");
  c->add_option("--max-messages", o.limits.max_messages, "messages per request")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  c->add_option("--max-message-bytes", o.limits.max_message_bytes, "bytes of one message")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  c->add_option("--max-tokens-limit", o.limits.max_tokens, "largest max_tokens a request may ask for")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  c->add_option("--max-n", o.limits.max_n, "largest n (answers per request)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->add_option("--threads", a->threads, "OpenMP threads per worker (0 = the cores divided among the workers)")
      ->capture_default_str();
  c->callback([a] {
    stop_on_signals();
    const CheckpointSource source = parse_checkpoint_source(a->ckpt.source);
    serve::ServedModel model = serve::engine_model(source, a->ckpt.model_tag, a->ckpt.step);
    const int threads = a->threads > 0
                            ? a->threads
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / a->opt.workers);
    auto make = model.make;
    model.make = [make, threads](int index) {
      set_num_threads(threads);  // OpenMP's thread count is per calling thread: set it on the worker
      return make(index);
    };
    std::printf("chat-web: model %s (context %lld tokens), %d worker(s) x %d thread(s), queue %d\n", model.id.c_str(),
                static_cast<long long>(model.context_len), a->opt.workers, threads, a->opt.queue);
    std::fflush(stdout);
    a->opt.runs = runs_under(base_dir());
    a->opt.report_card = report_card_of(model.id);
    if (!a->quiet)
      a->opt.log = [](const std::string& line) {
        std::fprintf(stderr, "chat-web: %s\n", line.c_str());
        std::fflush(stderr);
      };
    serve::ChatServer server(a->opt, std::move(model));
    const int port = server.bind();
    const std::string& h = a->opt.host;
    const bool local = h == "127.0.0.1" || h == "localhost" || h == "::1";
    std::printf("chat-web: listening on http://%s:%d/ (%s)\n", h.c_str(), port,
                local ? "this machine only; --host 0.0.0.0 opens it to the network"
                      : "reachable from the network: anyone who can reach this address can use the model");
    std::printf("chat-web: OpenAI-compatible API at http://%s:%d/v1 (POST /v1/chat/completions)\n", h.c_str(), port);
    if (std::string why; a->opt.report_card(why))
      std::printf("chat-web: the model's report card at http://%s:%d/report\n", h.c_str(), port);
    std::fflush(stdout);
    g_server = &server;
    server.run();
    g_server = nullptr;
  });
}

}  // namespace nanochat::cli
