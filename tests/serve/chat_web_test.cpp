// `nanochat chat-web` end to end: the built binary serves a tiny checkpoint trained through the
// binary (tests/support/cli_util.h), on 127.0.0.1 only. The greedy answer equals the engine run
// directly on the same checkpoint and conversation, whole and streamed; the context, disconnects,
// parallel clients, the runs panel, start-up errors and SIGTERM are checked through the socket.
#include <gtest/gtest.h>

#include <httplib.h>
#include <signal.h>
#include <filesystem>
#include <fstream>

#include <cstdlib>
#include <regex>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "nanochat/serve/tool_text.h"
#include "nanochat/tokenizer/conversation.h"
#include "serve/serve_util.h"
#include "support/cli_util.h"

using json = nlohmann::json;

namespace {

// One checkpoint for the whole suite: base_checkpoints/t, 4 steps of the tiny model.
nctest::BaseDir* g_base = nullptr;

class ChatWeb : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_base = new nctest::BaseDir("nc_chat_web");
    auto r = nctest::run(*g_base, std::string(nctest::kTiny) + " --num-iterations 4 --eval-every -1");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() {
    delete g_base;
    g_base = nullptr;
  }

  // Starts chat-web on a free port with extra flags; returns its port (-1 on failure).
  int start(nctest::Proc& p, const std::string& flags = "", int threads = 1) {
    std::vector<std::string> argv = {NANOCHAT_BINARY, "chat-web", "-i", "base", "-g", "t", "--port", "0", "--threads"};
    argv.push_back(std::to_string(threads));
    std::istringstream extra(flags);
    for (std::string f; extra >> f;) argv.push_back(f);
    p = nctest::Proc::spawn(argv, {"NANOCHAT_BASE_DIR=" + g_base->dir});
    if (!p.wait_for_output("chat-web: OpenAI-compatible API", nctest::Ms(60000))) return -1;
    std::smatch m;
    const std::string out = p.output();
    if (!std::regex_search(out, m, std::regex("listening on http://127\\.0\\.0\\.1:(\\d+)/"))) return -1;
    return std::stoi(m[1]);
  }
};

json chat(const std::string& text, json extra = json::object()) {
  json j = {{"messages", json::array({{{"role", "user"}, {"content", text}}})}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

std::string streamed_text(const std::string& body) {
  std::string text;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string d = body.substr(at + 6, end - at - 6);
    at = end;
    if (d == "[DONE]") break;
    json c = json::parse(d);
    if (c["choices"].size() && c["choices"][0]["delta"].contains("content"))
      text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  return text;
}

}  // namespace

TEST_F(ChatWeb, GreedyAnswerEqualsTheEngineOnTheSameCheckpointWholeAndStreamed) {
  nctest::Proc p;
  const int port = start(p);
  ASSERT_GT(port, 0) << p.output();
  EXPECT_NE(p.output().find("this machine only"), std::string::npos) << p.output();
  // The truth: the engine run in this process on the same checkpoint and conversation.
  ::setenv("NANOCHAT_BASE_DIR", g_base->dir.c_str(), 1);
  nanochat::InferenceModel im = nanochat::load_for_inference(nanochat::CheckpointSource::Base, "t", -1);
  nanochat::Engine engine(*im.lm.model, im.tokenizer);
  nanochat::Conversation conv;
  conv.messages.push_back(nanochat::Message::plain(nanochat::Message::Role::User, "Mr. Darcy said"));
  nanochat::GenerateOptions go;
  go.temperature = 0;
  go.max_tokens = 24;
  const auto truth = engine.generate(nanochat::render_for_reply(im.tokenizer, conv), go);
  // A tiny model emits bytes that are not UTF-8; the server sends each such byte as U+FFFD (JSON
  // text is UTF-8), the replacement nlohmann::json's dump makes. Special tokens are the API's text
  // for them (serve/tool_text.h), not their names.
  std::string decoded;
  for (const int32_t id : truth.rows[0].tokens) decoded += nanochat::serve::api_token_text(im.tokenizer, id);
  const std::string expected =
      json::parse(json(decoded).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
  ASSERT_FALSE(expected.empty());

  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "base-t-step4");
  auto whole = c.Post("/v1/chat/completions", chat("Mr. Darcy said", {{"temperature", 0}, {"max_tokens", 24}}).dump(),
                      "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  json j = json::parse(whole->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], expected);
  EXPECT_EQ(j["choices"][0]["finish_reason"], truth.rows[0].finish == nanochat::FinishReason::Stop ? "stop" : "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], static_cast<int>(truth.rows[0].tokens.size()));
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(truth.prompt_tokens));
  auto streamed = c.Post("/v1/chat/completions",
                         chat("Mr. Darcy said", {{"temperature", 0}, {"max_tokens", 24}, {"stream", true}}).dump(),
                         "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed_text(streamed->body), expected);
  EXPECT_NE(streamed->body.find("data: [DONE]"), std::string::npos);
}

TEST_F(ChatWeb, LimitsDisconnectsAndParallelClientsOnTheRealModel) {
  nctest::Proc p;
  const int port = start(p, "--workers 2 --queue 1 --max-messages 3", 2);  // 2 threads per worker
  ASSERT_GT(port, 0) << p.output();
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  // A prompt longer than the context (10 x 64 positions).
  std::string novel;
  while (novel.size() < 6000) novel += "It is a truth universally acknowledged. ";
  auto longp = c.Post("/v1/chat/completions", chat(novel).dump(), "application/json");
  ASSERT_TRUE(longp);
  EXPECT_EQ(longp->status, 400);
  EXPECT_NE(json::parse(longp->body)["error"]["message"].get<std::string>().find("this model's context is 640 tokens"),
            std::string::npos)
      << longp->body;
  // Too many messages for --max-messages 3.
  json four = chat("a");
  for (const char* t : {"b", "c", "d"})
    four["messages"].push_back({{"role", four["messages"].size() % 2 ? "assistant" : "user"}, {"content", t}});
  auto many = c.Post("/v1/chat/completions", four.dump(), "application/json");
  ASSERT_TRUE(many);
  EXPECT_EQ(many->status, 400);
  // Two user messages in a row are one turn for the model (joined, as OpenAI reads them).
  json twice = chat("a", {{"max_tokens", 4}});
  twice["messages"].push_back({{"role", "user"}, {"content", "b"}});
  auto joined = c.Post("/v1/chat/completions", twice.dump(), "application/json");
  ASSERT_TRUE(joined);
  EXPECT_EQ(joined->status, 200) << joined->body;
  // A conversation that starts with the assistant is refused by the conversation renderer, named.
  json first = chat("b");
  first["messages"].insert(first["messages"].begin(), json{{"role", "assistant"}, {"content", "a"}});
  auto bad = c.Post("/v1/chat/completions", first.dump(), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("should be from user"), std::string::npos) << bad->body;
  // A client that hangs up mid-answer: both workers are free again soon after.
  {
    sctest::RawClient raw(port);
    raw.post("/v1/chat/completions", chat("Elizabeth", {{"stream", true}, {"max_tokens", 600}}).dump());
    ASSERT_TRUE(raw.read_until("\"delta\":{\"content\"")) << raw.received();
  }
  int busy = -1;
  for (auto end = nctest::Clock::now() + std::chrono::seconds(20); nctest::Clock::now() < end;) {
    busy = json::parse(c.Get("/health")->body)["busy"];
    if (busy == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(busy, 0);
  // Three clients at once (two workers + one queue place): all answered.
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 3; ++i)
    clients.emplace_back([&, i] {
      httplib::Client ci("127.0.0.1", port);
      ci.set_read_timeout(60, 0);
      auto r = ci.Post("/v1/chat/completions", chat("Jane " + std::to_string(i), {{"max_tokens", 16}}).dump(),
                       "application/json");
      if (r && r->status == 200 && json::parse(r->body)["object"] == "chat.completion") ++ok;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 3);
  // SIGTERM ends the server cleanly.
  p.signal(SIGTERM);
  ASSERT_TRUE(p.wait(nctest::Ms(20000)));
  EXPECT_EQ(p.exit_code(), 0) << p.output();
}

TEST_F(ChatWeb, RunsPanelListsTheRunAndDrawsItsChart) {
  nctest::Proc p;
  const int port = start(p);
  ASSERT_GT(port, 0) << p.output();
  httplib::Client c("127.0.0.1", port);
  auto runs = c.Get("/runs");
  ASSERT_TRUE(runs);
  json j = json::parse(runs->body);
  ASSERT_EQ(j["runs"].size(), 1u) << runs->body;
  EXPECT_EQ(j["runs"][0]["kind"], "base");
  EXPECT_EQ(j["runs"][0]["tag"], "t");
  EXPECT_EQ(j["runs"][0]["last_step"], 3);
  auto svg = c.Get("/runs/base/t/chart.svg");
  ASSERT_TRUE(svg);
  EXPECT_EQ(svg->status, 200);
  EXPECT_NE(svg->body.find("<svg"), std::string::npos);
  EXPECT_EQ(c.Get("/runs/base/nope/chart.svg")->status, 404);
  EXPECT_EQ(c.Get("/runs/weird/t/chart.svg")->status, 400);
}

TEST_F(ChatWeb, ReportShowsTheCardOfTheServedModelOnly) {
  // the base-train that made the fixture's checkpoint wrote its card section; the card itself is
  // written by `nanochat report` (the server reads it at each request)
  std::filesystem::remove(g_base->dir + "/report/report.md");
  nctest::Proc p;
  const int port = start(p);
  ASSERT_GT(port, 0) << p.output();
  httplib::Client c("127.0.0.1", port);
  auto none = c.Get("/report");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  EXPECT_NE(none->body.find("no report card in "), std::string::npos) << none->body;
  // (in the base folder: `report` also copies the card to the working folder)
  const auto made =
      nctest::shell("cd " + g_base->dir + " && NANOCHAT_BASE_DIR=" + g_base->dir + " " + NANOCHAT_BINARY + " report");
  ASSERT_EQ(made.first, 0) << made.second;
  auto card = c.Get("/report");
  ASSERT_TRUE(card);
  EXPECT_EQ(card->status, 200) << card->body;
  EXPECT_NE(card->body.find("<h1>nanochat.cpp report card</h1>"), std::string::npos) << card->body;
  EXPECT_NE(card->body.find("<li>model_tag: t</li>"), std::string::npos) << card->body;
  EXPECT_NE(card->body.find("<table>\n<tr><th>Metric</th><th>BASE</th><th>SFT</th><th>RL</th></tr>"), std::string::npos)
      << card->body;
  EXPECT_EQ(card->get_header_value("Content-Type"), "text/html; charset=utf-8");
  // the training chart's link is the server's chart of that run, which a browser can open
  const std::string href = "<a href=\"/runs/base/t/chart.svg\">";
  EXPECT_NE(card->body.find(href), std::string::npos) << card->body;
  auto chart = c.Get("/runs/base/t/chart.svg");
  ASSERT_TRUE(chart);
  EXPECT_EQ(chart->status, 200);
  EXPECT_NE(chart->body.find("<svg"), std::string::npos);
  // and the markdown itself
  auto md_text = c.Get("/report.md");
  ASSERT_TRUE(md_text);
  EXPECT_EQ(md_text->status, 200);
  EXPECT_NE(md_text->body.find("- model_tag: t\n"), std::string::npos) << md_text->body;
  // a card of another model is not shown as this one's
  std::string md = nctest::slurp(g_base->dir + "/report/report.md");
  for (size_t at; (at = md.find("- model_tag: t\n")) != std::string::npos;) md.replace(at, 15, "- model_tag: u\n");
  std::ofstream(g_base->dir + "/report/report.md") << md;
  auto other = c.Get("/report");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_NE(other->body.find("is not of model t"), std::string::npos) << other->body;
  std::filesystem::remove(g_base->dir + "/report/report.md");
}

TEST_F(ChatWeb, StartUpErrorsNameWhatIsWrong) {
  // No chat-tuned checkpoint: -i sft names the folder.
  auto sft = nctest::run(*g_base, " chat-web -i sft --port 0");
  EXPECT_EQ(sft.code, 1) << sft.out;
  EXPECT_NE(sft.out.find("chatsft_checkpoints"), std::string::npos) << sft.out;
  // A port already in use is named.
  nctest::Proc first;
  const int port = start(first);
  ASSERT_GT(port, 0) << first.output();
  auto second = nctest::run(*g_base, " chat-web -i base -g t --threads 1 --port " + std::to_string(port));
  EXPECT_EQ(second.code, 1) << second.out;
  EXPECT_NE(second.out.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos) << second.out;
  // An --allow-origin that is not scheme://host[:port] is named before anything loads.
  auto origin = nctest::run(*g_base, " chat-web -i base -g t --allow-origin http://ok:1 --allow-origin localhost:3000");
  EXPECT_NE(origin.code, 0) << origin.out;
  EXPECT_NE(origin.out.find("'localhost:3000' is not a web origin"), std::string::npos) << origin.out;
}

// SIGTERM while an answer streams: the stream still ends with "data: [DONE]" (finished, or cut
// with an error event at once under --drain-timeout 0) and the server exits 0. Each request leaves one log
// line on stderr; --quiet leaves none.
TEST_F(ChatWeb, SigtermDrainsAStreamAndEachRequestIsLogged) {
  nctest::Proc p;
  const int port = start(p, "--drain-timeout 0");
  ASSERT_GT(port, 0) << p.output();
  sctest::RawClient raw(port);
  raw.post("/v1/chat/completions", chat("Elizabeth", {{"stream", true}, {"max_tokens", 600}}).dump());
  ASSERT_TRUE(raw.read_until("\"delta\":{\"content\"")) << raw.received();
  p.signal(SIGTERM);
  EXPECT_TRUE(raw.read_until("data: [DONE]", std::chrono::seconds(20))) << raw.received();
  ASSERT_TRUE(p.wait(nctest::Ms(20000)));
  EXPECT_EQ(p.exit_code(), 0) << p.output();
  EXPECT_TRUE(std::regex_search(p.output(), std::regex("POST /v1/chat/completions 200 in=\\d+ out=\\d+ wait=")))
      << p.output();

  nctest::Proc q;
  const int qport = start(q, "--quiet");
  ASSERT_GT(qport, 0) << q.output();
  httplib::Client c("127.0.0.1", qport);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  q.signal(SIGTERM);
  ASSERT_TRUE(q.wait(nctest::Ms(20000)));
  EXPECT_EQ(q.output().find("GET /health"), std::string::npos) << q.output();
}
