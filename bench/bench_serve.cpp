// bench_serve: generation speed of `nanochat chat-web` as clients see it. Loads a checkpoint
// (NANOCHAT_BASE_DIR, -i/-g/-s as chat-web), starts the server in this process on 127.0.0.1 with
// --workers W, and runs 1 and then C concurrent streaming clients (each --requests answers of
// --max-tokens tokens, sampled at temperature 0.8 from a fixed seed, the end-of-turn token ignored
// by counting what came). Prints per level: time to first token (median, max), each client's
// tokens/s while its answer streams, and the server's total tokens/s; and, first, the engine alone
// (no HTTP, one thread) on the same prompt as the reference. Each is warmed up with one untimed
// answer (per worker). Asserts nothing.
// --engine-only runs the engine alone and nothing else, and adds one JSON line (prompt token ids,
// per answer time to first token and tok/s, the first answer's tokens) for
// bench/peer/run_serve_peer.sh, which times nanochat's Engine on the same prompt.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/core/error.h"
#include "nanochat/core/threads.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "nanochat/serve/engine_backend.h"
#include "nanochat/serve/server.h"
#include "nanochat/tokenizer/conversation.h"

using namespace nanochat;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string source = "base", tag;
  int64_t step = -1;
  int workers = 4, clients = 4, requests = 3, max_tokens = 64, threads = 1;
  double temperature = 0.8;
  bool engine_only = false;
  std::string prompt = "Tell me about the weather today.";
};

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Sample {
  double ttft = 0, stream_s = 0;
  int tokens = 0;
};

// One streamed request: time to the first content chunk, tokens (content chunks) and the time
// from the first to the last.
Sample one_request(int port, const Args& a, uint64_t seed) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(600, 0);
  json body = {{"messages", json::array({{{"role", "user"}, {"content", a.prompt}}})},
               {"stream", true},
               {"temperature", a.temperature},
               {"max_tokens", a.max_tokens},
               {"seed", seed}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  Sample s;
  std::string buf;
  const auto t0 = Clock::now();
  Clock::time_point first{}, last{};
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    buf.append(d, n);
    size_t at;
    while ((at = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, at);
      buf.erase(0, at + 2);
      if (ev.rfind("data: {", 0) != 0) continue;
      const json j = json::parse(ev.substr(6));
      if (j.contains("error")) fail("the server answered an error: ", j.dump());
      if (!j["choices"].empty() && j["choices"][0]["delta"].contains("content") &&
          !j["choices"][0]["delta"]["content"].get<std::string>().empty()) {
        last = Clock::now();
        if (s.tokens++ == 0) first = last;
      }
    }
    return true;
  };
  auto r = c.send(req);
  if (!r || r->status != 200) fail("request failed: ", r ? std::to_string(r->status) : httplib::to_string(r.error()));
  s.ttft = secs(first - t0);
  s.stream_s = secs(last - first);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Flags as in the usage line; exits 2 on a bad one (0 for --help).
Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_serve: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "-i")
      a.source = val();
    else if (k == "-g")
      a.tag = val();
    else if (k == "-s")
      a.step = std::stoll(val());
    else if (k == "--workers")
      a.workers = std::stoi(val());
    else if (k == "--clients")
      a.clients = std::stoi(val());
    else if (k == "--requests")
      a.requests = std::stoi(val());
    else if (k == "--max-tokens")
      a.max_tokens = std::stoi(val());
    else if (k == "--threads")
      a.threads = std::stoi(val());
    else if (k == "--temperature")
      a.temperature = std::stod(val());
    else if (k == "--engine-only")
      a.engine_only = true;
    else {
      std::fprintf(stderr,
                   "usage: bench_serve [-i base|sft|rl] [-g TAG] [-s STEP] [--workers 4] [--clients 4] "
                   "[--requests 3] [--max-tokens 64] [--threads 1 (per worker)] [--temperature 0.8 (0: greedy)] "
                   "[--engine-only (the engine alone, plus a JSON line)]\n");
      std::exit(k == "--help" || k == "-h" ? 0 : 2);
    }
  }
  return a;
}

// The engine alone: one thread, same prompt, same token budget (end of turn ignored by taking the
// tokens it made per second). Run before and after the server, so that a change in the machine's
// load between the two shows. Time to first token: from the call to the first token's callback
// (prefill and the first sample). With `json`, also prints one JSON line.
void engine_alone(const Args& a, CheckpointSource source, const char* when, bool json_line = false) {
  set_num_threads(a.threads);
  InferenceModel im = load_for_inference(source, a.tag, a.step);
  Engine e(*im.lm.model, im.tokenizer);
  Conversation conv;
  conv.messages.push_back(Message::plain(Message::Role::User, a.prompt));
  const auto prompt = render_for_reply(im.tokenizer, conv);
  GenerateOptions go;
  go.temperature = a.temperature;
  go.max_tokens = a.max_tokens;
  go.seed = 999;
  e.generate(prompt, go);  // warm-up: first-call allocations are not generation speed
  int toks = 0;
  double gen_s = 0;
  std::vector<double> ttft_ms, rates;
  std::vector<int32_t> first_answer;
  for (int r = 0; r < a.requests; ++r) {
    go.seed = 1000 + r;
    const auto t0 = Clock::now();
    Clock::time_point first{}, last{};
    int n = 0;
    e.generate(prompt, go, [&](const TokenEvent& ev) {
      last = Clock::now();
      if (n++ == 0) first = last;
      if (r == 0) first_answer.push_back(ev.token);
      return StreamControl::Continue;
    });
    if (n > 0) ttft_ms.push_back(secs(first - t0) * 1000);
    if (n > 1) {
      gen_s += secs(last - first);
      toks += n - 1;
      rates.push_back((n - 1) / std::max(secs(last - first), 1e-9));
    }
  }
  if (std::string(when) == "before")
    std::printf("model %s %s (prompt %zu tokens), %d thread(s) per worker\n", a.source.c_str(), im.lm.tag.c_str(),
                prompt.size(), a.threads);
  std::printf("engine alone (%s): %.1f tok/s (%d tokens after the first), time to first token median %.1f ms\n", when,
              toks / std::max(gen_s, 1e-9), toks, median(ttft_ms));
  if (json_line) {
    const json j = {{"prompt", prompt},           {"ttft_ms", ttft_ms}, {"tok_s", rates},
                    {"tokens_after_first", toks}, {"gen_s", gen_s},     {"first_answer", first_answer}};
    std::printf("%s\n", j.dump().c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  try {
    const CheckpointSource source = parse_checkpoint_source(a.source);
    if (a.engine_only) {
      engine_alone(a, source, "before", true);
      return 0;
    }
    engine_alone(a, source, "before");
    serve::ServedModel model = serve::engine_model(source, a.tag, a.step);
    auto make = model.make;
    const int threads = a.threads;
    model.make = [make, threads](int i) {
      set_num_threads(threads);
      return make(i);
    };
    serve::ServeOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.workers = a.workers;
    o.queue = 64;
    o.limits.max_tokens = std::max(a.max_tokens, 1);
    serve::ChatServer server(o, std::move(model));
    const int port = server.bind();
    std::thread srv([&] { server.run(); });
    {  // warm-up: one answer per worker, untimed
      std::vector<std::thread> warm;
      for (int w = 0; w < a.workers; ++w) warm.emplace_back([&] { one_request(port, a, 999); });
      for (auto& t : warm) t.join();
    }
    for (int clients : {1, a.clients}) {
      std::vector<Sample> samples;
      std::mutex m;
      const auto t0 = Clock::now();
      std::vector<std::thread> ts;
      for (int c = 0; c < clients; ++c)
        ts.emplace_back([&, c] {
          for (int r = 0; r < a.requests; ++r) {
            Sample s = one_request(port, a, 1000 + static_cast<uint64_t>(r));
            std::lock_guard<std::mutex> lk(m);
            samples.push_back(s);
          }
          (void)c;
        });
      for (auto& t : ts) t.join();
      const double wall = secs(Clock::now() - t0);
      std::vector<double> ttft, rate;
      int tokens = 0;
      for (const auto& s : samples) {
        ttft.push_back(s.ttft * 1000);
        if (s.tokens > 1) rate.push_back((s.tokens - 1) / std::max(s.stream_s, 1e-9));
        tokens += s.tokens;
      }
      std::printf(
          "%d client(s), %d worker(s): time to first token median %.1f ms (max %.1f ms); per client %.1f tok/s "
          "(median); server total %.1f tok/s over %.2f s (%d answers, %d tokens)\n",
          clients, a.workers, median(ttft), *std::max_element(ttft.begin(), ttft.end()), median(rate), tokens / wall,
          wall, static_cast<int>(samples.size()), tokens);
    }
    server.stop();
    srv.join();
    engine_alone(a, source, "after");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_serve: %s\n", e.what());
    return 1;
  }
  return 0;
}
