// The chat-web HTTP API through a real socket on 127.0.0.1, with scripted backends whose tokens,
// pace and blocking the test controls: OpenAI's answer and chunk shapes, stop strings, UTF-8 split
// across tokens, every refusal (bad JSON, unknown field, wrong role, too many messages, prompt
// over the context, body too large, unknown path, busy), a client that hangs up mid-answer or
// while queued, the time limit, and a burst of clients bounded by workers + queue.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "serve/serve_util.h"

using json = nlohmann::json;
using namespace sctest;

namespace {

json user_request(const std::string& text, json extra = json::object()) {
  json j = {{"model", "scripted"}, {"messages", json::array({{{"role", "user"}, {"content", text}}})}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

httplib::Result post(int port, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(20, 0);
  return c.Post("/v1/chat/completions", body.dump(), "application/json");
}

// The "data: " payloads of an SSE body, in order.
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

std::shared_ptr<Script> pieces(std::vector<std::string> p) {
  auto s = std::make_shared<Script>();
  s->pieces = std::move(p);
  return s;
}

}  // namespace

TEST(ServeApi, WholeAnswerHasOpenAIsShape) {
  auto s = pieces({"Hel", "lo", " there"});
  TestServer ts({}, scripted_model(s));
  auto r = post(ts.port, user_request("hi"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("application/json"), std::string::npos);
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "scripted");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello there");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3 + 2);  // scripted render: 3 per message + 1 per byte
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 8);
}

TEST(ServeApi, MaxTokensCutsTheAnswerWithFinishReasonLength) {
  auto s = pieces({"a", "b", "c", "d", "e"});
  TestServer ts({}, scripted_model(s));
  auto r = post(ts.port, user_request("hi", {{"max_tokens", 2}}));
  ASSERT_TRUE(r);
  json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "ab");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST(ServeApi, MaxTokensIsCutToTheRoomTheContextLeaves) {
  auto s = std::make_shared<Script>();
  s->pieces = {"x"};
  s->endless = true;
  TestServer ts({}, scripted_model(s, /*context=*/20));
  auto r = post(ts.port, user_request("0123456789", {{"max_tokens", 100}}));  // prompt 13 tokens
  ASSERT_TRUE(r);
  json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], std::string(7, 'x'));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST(ServeApi, NSamplesGiveOneChoicePerRow) {
  auto s = pieces({"r{r}", "."});
  TestServer ts({}, scripted_model(s));
  auto r = post(ts.port, user_request("hi", {{"n", 3}}));
  ASSERT_TRUE(r);
  json j = json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 3u) << r->body;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["message"]["content"], std::string("r").append(std::to_string(i)).append("."));
  }
}

TEST(ServeApi, StreamSendsRoleThenOneChunkPerPieceThenFinishThenDone) {
  auto s = pieces({"Hel", "lo", " there"});
  TestServer ts({}, scripted_model(s));
  auto r = post(ts.port, user_request("hi", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  auto data = sse_data(r->body);
  ASSERT_EQ(data.size(), 7u) << r->body;  // role, 3 pieces, finish, usage, [DONE]
  json first = json::parse(data[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (int i = 1; i <= 3; ++i) {
    json c = json::parse(data[i]);
    EXPECT_EQ(c["id"], first["id"]);
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
    text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello there");
  json fin = json::parse(data[4]);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  json usage = json::parse(data[5]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(data[6], "[DONE]");
}

TEST(ServeApi, StopStringEndsTheAnswerAcrossTokenBoundaries) {
  // "lo w" spans three pieces; nothing from it or after it is sent, whole or streamed.
  auto s = pieces({"hel", "l", "o", " w", "orld"});
  TestServer ts({}, scripted_model(s));
  auto r = post(ts.port, user_request("hi", {{"stop", "lo w"}}));
  ASSERT_TRUE(r);
  json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hel");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  auto rs = post(ts.port, user_request("hi", {{"stop", json::array({"zzz", "lo w"})}, {"stream", true}}));
  ASSERT_TRUE(rs);
  std::string text;
  for (const auto& d : sse_data(rs->body))
    if (d != "[DONE]") {
      json c = json::parse(d);
      if (c["choices"][0]["delta"].contains("content")) text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
  EXPECT_EQ(text, "hel");
  EXPECT_EQ(s->cancelled.load(), 0);  // the row was ended, not the request
}

TEST(ServeApi, ACharacterSplitAcrossTokensIsSentWhole) {
  // "é" is C3 A9 and "€" is E2 82 AC; the pieces cut both.
  auto s = pieces({"caf\xC3", "\xA9 5 \xE2\x82", "\xAC"});
  TestServer ts({}, scripted_model(s));
  auto r = post(ts.port, user_request("hi", {{"stream", true}}));
  ASSERT_TRUE(r);
  std::vector<std::string> got;
  for (const auto& d : sse_data(r->body)) {
    if (d == "[DONE]") continue;
    json c = json::parse(d);  // throws on invalid UTF-8
    if (c["choices"][0]["delta"].contains("content")) got.push_back(c["choices"][0]["delta"]["content"]);
  }
  ASSERT_GE(got.size(), 3u);
  EXPECT_EQ(got[1], "caf");
  EXPECT_EQ(got[2], "\xC3\xA9 5 ");
  EXPECT_EQ(got[3], "\xE2\x82\xAC");
}

TEST(ServeApi, HealthAndModels) {
  auto s = pieces({"a"});
  ServeOptions o;
  o.workers = 2;
  o.queue = 3;
  TestServer ts(o, scripted_model(s, 640));
  httplib::Client c("127.0.0.1", ts.port);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  json hj = json::parse(h->body);
  EXPECT_EQ(hj["status"], "ok");
  EXPECT_EQ(hj["workers"], 2);
  EXPECT_EQ(hj["queue_capacity"], 3);
  EXPECT_EQ(hj["context_len"], 640);
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  json mj = json::parse(m->body);
  EXPECT_EQ(mj["object"], "list");
  EXPECT_EQ(mj["data"][0]["id"], "scripted");
  EXPECT_EQ(mj["data"][0]["object"], "model");
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_NE(page->body.find("<textarea id=\"input\""), std::string::npos);
  EXPECT_EQ(page->body.find("http://"), std::string::npos) << "the page must not fetch from elsewhere";
  EXPECT_EQ(page->body.find("https://"), std::string::npos) << "the page must not fetch from elsewhere";
}

struct BadCase {
  const char* name;
  std::string body;
  int status;
  std::string param;
  std::string says;
};

TEST(ServeApi, EveryBadRequestGetsAClearJsonError) {
  auto s = pieces({"a"});
  ServeOptions o;
  o.limits.max_messages = 4;
  TestServer ts(o, scripted_model(s, /*context=*/50));
  const json five = json::array({{{"role", "user"}, {"content", "a"}},
                                 {{"role", "assistant"}, {"content", "b"}},
                                 {{"role", "user"}, {"content", "c"}},
                                 {{"role", "assistant"}, {"content", "d"}},
                                 {{"role", "user"}, {"content", "e"}}});
  const std::vector<BadCase> cases = {
      {"malformed JSON", "{\"messages\": [", 400, "", "not valid JSON"},
      {"not an object", "[1, 2]", 400, "", "JSON object"},
      {"unknown field", user_request("hi", {{"mystery", 0.5}}).dump(), 400, "mystery", "unknown field 'mystery'"},
      {"no messages", json{{"model", "m"}}.dump(), 400, "messages", "'messages' is missing"},
      {"empty messages", json{{"messages", json::array()}}.dump(), 400, "messages", "non-empty"},
      {"wrong role", json{{"messages", json::array({{{"role", "tool"}, {"content", "x"}}})}}.dump(), 400,
       "messages[0].role", "'tool'"},
      {"last is the assistant's",
       json{
           {"messages", json::array({{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}, {"content", "y"}}})}}
           .dump(),
       400, "messages", "last message must be the user's"},
      {"content not text",
       json{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}}})}}})}}
           .dump(),
       400, "messages[0].content", "text only"},
      {"too many messages", json{{"messages", five}}.dump(), 400, "messages", "at most 4"},
      {"temperature out of range", user_request("hi", {{"temperature", 3}}).dump(), 400, "temperature",
       "between 0 and 2"},
      {"top_k not an integer", user_request("hi", {{"top_k", "many"}}).dump(), 400, "top_k", "integer"},
      {"max_tokens zero", user_request("hi", {{"max_tokens", 0}}).dump(), 400, "max_tokens", "between 1"},
      {"n too large", user_request("hi", {{"n", 9}}).dump(), 400, "n", "between 1 and 4"},
      {"stop not strings", user_request("hi", {{"stop", json::array({1})}}).dump(), 400, "stop", "up to 4 strings"},
      {"stream not boolean", user_request("hi", {{"stream", "yes"}}).dump(), 400, "stream", "true or false"},
      {"prompt over the context", user_request(std::string(60, 'x')).dump(), 400, "messages",
       "63 tokens; this model's context is 50"},
  };
  for (const auto& c : cases) {
    httplib::Client cl("127.0.0.1", ts.port);
    auto r = cl.Post("/v1/chat/completions", c.body, "application/json");
    ASSERT_TRUE(r) << c.name;
    EXPECT_EQ(r->status, c.status) << c.name << ": " << r->body;
    json j = json::parse(r->body);
    ASSERT_TRUE(j.contains("error")) << c.name;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.says), std::string::npos)
        << c.name << ": " << j["error"]["message"];
    if (!c.param.empty()) {
      EXPECT_EQ(j["error"]["param"], c.param) << c.name;
    }
  }
  EXPECT_EQ(s->started.load(), 0) << "a refused request reached a worker";
  // The server still answers.
  auto ok = post(ts.port, user_request("hi"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(ServeApi, BodyTooLargeUnknownPathAndWrongMethodAreJsonErrors) {
  auto s = pieces({"a"});
  ServeOptions o;
  o.max_body_bytes = 2048;
  TestServer ts(o, scripted_model(s));
  httplib::Client c("127.0.0.1", ts.port);
  auto big = c.Post("/v1/chat/completions", user_request(std::string(4000, 'x')).dump(), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_NE(json::parse(big->body)["error"]["message"].get<std::string>().find("2048 bytes"), std::string::npos)
      << big->body;
  auto nf = c.Get("/nope");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_NE(json::parse(nf->body)["error"]["message"].get<std::string>().find("/nope"), std::string::npos);
  auto wm = c.Get("/v1/chat/completions");
  ASSERT_TRUE(wm);
  EXPECT_EQ(wm->status, 405);
  EXPECT_TRUE(json::parse(wm->body).contains("error"));
}

TEST(ServeApi, AFailingBackendGivesA500AndTheServerGoesOn) {
  auto s = pieces({"a"});
  s->throw_at_start = true;
  TestServer ts({}, scripted_model(s));
  auto r = post(ts.port, user_request("hi"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("scripted failure"), std::string::npos);
  auto rs = post(ts.port, user_request("hi", {{"stream", true}}));
  ASSERT_TRUE(rs);
  EXPECT_NE(rs->body.find("\"error\""), std::string::npos);
  EXPECT_NE(rs->body.find("data: [DONE]"), std::string::npos);
  s->throw_at_start = false;
  auto ok = post(ts.port, user_request("hi"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// workers 1 + queue 1: the third request at once gets 429; the second waits (": waiting 1") and
// then runs; both admitted ones finish once the gate opens.
TEST(ServeBusy, MoreRequestsThanWorkersPlusQueueGet429AndTheQueuedOneWaitsItsTurn) {
  auto s = pieces({"a", "b"});
  s->close();
  ServeOptions o;
  o.workers = 1;
  o.queue = 1;
  TestServer ts(o, scripted_model(s));
  RawClient first(ts.port), second(ts.port);
  first.post("/v1/chat/completions", user_request("1", {{"stream", true}}).dump());
  ASSERT_TRUE(s->wait_running(1));
  second.post("/v1/chat/completions", user_request("2", {{"stream", true}}).dump());
  ASSERT_TRUE(second.read_until(": waiting 1")) << second.received();
  auto third = post(ts.port, user_request("3"));
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 429);
  EXPECT_EQ(third->get_header_value("Retry-After"), "1");
  json e = json::parse(third->body);
  EXPECT_EQ(e["error"]["type"], "server_busy");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("all 1 workers are busy"), std::string::npos);
  s->open();
  EXPECT_TRUE(first.read_until("data: [DONE]"));
  EXPECT_TRUE(second.read_until("data: [DONE]"));
  EXPECT_EQ(s->finished.load(), 2);
}

// A client that hangs up mid-answer: the worker stops within a bounded time and takes the next.
TEST(ServeBusy, AClientThatHangsUpMidStreamFreesItsWorker) {
  auto s = std::make_shared<Script>();
  s->pieces = {"tok "};
  s->endless = true;
  s->piece_delay_ms = 5;
  ServeOptions o;
  o.workers = 1;
  o.queue = 0;
  TestServer ts(o, scripted_model(s));
  {
    RawClient c(ts.port);
    c.post("/v1/chat/completions", user_request("go", {{"stream", true}, {"max_tokens", 2048}}).dump());
    ASSERT_TRUE(c.read_until("\"content\":\"tok \"")) << c.received();
  }  // hang up
  const auto end = Clock::now() + std::chrono::seconds(10);
  while (s->running.load() != 0 && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s->running.load(), 0) << "the worker still generates for a client that left";
  EXPECT_EQ(s->cancelled.load(), 1);
  s->endless = false;
  auto r = post(ts.port, user_request("again"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A queued client that hangs up leaves the queue: its place is free for the next request.
TEST(ServeBusy, AQueuedClientThatHangsUpFreesItsPlace) {
  auto s = pieces({"a"});
  s->close();
  ServeOptions o;
  o.workers = 1;
  o.queue = 1;
  TestServer ts(o, scripted_model(s));
  RawClient running(ts.port);
  running.post("/v1/chat/completions", user_request("1", {{"stream", true}}).dump());
  ASSERT_TRUE(s->wait_running(1));
  {
    RawClient queued(ts.port);
    queued.post("/v1/chat/completions", user_request("2", {{"stream", true}}).dump());
    ASSERT_TRUE(queued.read_until(": waiting 1"));
  }
  httplib::Client c("127.0.0.1", ts.port);
  const auto end = Clock::now() + std::chrono::seconds(10);
  int queued = -1;
  while (Clock::now() < end) {
    auto h = c.Get("/health");
    ASSERT_TRUE(h);
    queued = json::parse(h->body)["queued"];
    if (queued == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(queued, 0);
  RawClient next(ts.port);
  next.post("/v1/chat/completions", user_request("3", {{"stream", true}}).dump());
  EXPECT_TRUE(next.read_until(": waiting 1")) << next.received();
  s->open();
  EXPECT_TRUE(running.read_until("data: [DONE]"));
  EXPECT_TRUE(next.read_until("data: [DONE]"));
  EXPECT_EQ(s->started.load(), 2) << "the request that hung up while queued was generated";
}

// The time limit cuts a running answer: finish_reason "length", with what was generated so far.
TEST(ServeBusy, TheRequestTimeLimitCutsARunningAnswer) {
  auto s = std::make_shared<Script>();
  s->pieces = {"x"};
  s->endless = true;
  s->piece_delay_ms = 5;
  ServeOptions o;
  o.request_timeout_s = 0.5;
  TestServer ts(o, scripted_model(s));
  const auto t0 = Clock::now();
  auto r = post(ts.port, user_request("first", {{"max_tokens", 2048}}));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_GT(j["choices"][0]["message"]["content"].get<std::string>().size(), 0u);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
}

// A request still waiting for a worker at its time limit gets 503 (whole) or an error event (stream).
TEST(ServeBusy, TheRequestTimeLimitEndsAWaitWith503) {
  auto s = pieces({"a"});
  s->close();
  ServeOptions o;
  o.workers = 1;
  o.queue = 2;
  o.request_timeout_s = 0.5;
  TestServer ts(o, scripted_model(s));
  RawClient running(ts.port);
  running.post("/v1/chat/completions", user_request("1", {{"stream", true}}).dump());
  ASSERT_TRUE(s->wait_running(1));
  RawClient queued(ts.port);
  queued.post("/v1/chat/completions", user_request("2", {{"stream", true}}).dump());
  auto r = post(ts.port, user_request("3"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("time limit"), std::string::npos);
  ASSERT_TRUE(queued.read_until("data: [DONE]"));
  EXPECT_NE(queued.received().find("\"type\":\"timeout\""), std::string::npos) << queued.received();
  s->open();
  ASSERT_TRUE(running.read_until("data: [DONE]"));
  EXPECT_NE(running.received().find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_EQ(s->started.load(), 1);
}

// 10 clients at once on 2 workers + 3 queue places: exactly 5 are answered and 5 refused (the
// gate holds the workers until all have been answered or refused), and all are done in bounded time.
TEST(ServeBusy, ABurstOfClientsIsBoundedByWorkersPlusQueue) {
  auto s = pieces({"a", "b", "c"});
  s->close();
  ServeOptions o;
  o.workers = 2;
  o.queue = 3;
  TestServer ts(o, scripted_model(s));
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 10; ++i) {
    clients.push_back(std::make_unique<RawClient>(ts.port));
    clients.back()->post("/v1/chat/completions",
                         user_request(std::string("c").append(std::to_string(i)), {{"stream", true}}).dump());
  }
  int refused = 0;
  for (auto& c : clients) {
    // An admitted stream starts with 200 at once; a refused one gets 429.
    ASSERT_TRUE(c->read_until("\r\n\r\n")) << c->received();
    if (c->received().rfind("HTTP/1.1 429", 0) == 0) ++refused;
  }
  EXPECT_EQ(refused, 5);
  s->open();
  int done = 0;
  for (auto& c : clients)
    if (c->received().rfind("HTTP/1.1 200", 0) == 0 && c->read_until("data: [DONE]")) ++done;
  EXPECT_EQ(done, 5);
  EXPECT_EQ(s->finished.load(), 5);
}

TEST(TextStream, HoldsBackOnlyWhatCouldStartAStopString) {
  TextStream t({"</s>"});
  EXPECT_EQ(t.push("ab<"), "ab");
  EXPECT_EQ(t.push("/"), "");
  EXPECT_EQ(t.push("x"), "</x");
  EXPECT_EQ(t.push("<"), "");
  EXPECT_EQ(t.finish(), "<");
  TextStream u({"</s>"});
  EXPECT_EQ(u.push("a</"), "a");
  EXPECT_EQ(u.push("s>tail"), "");
  EXPECT_TRUE(u.stopped());
  EXPECT_EQ(u.finish(), "");
}

// Stopping the server (chat-web's SIGTERM) ends answers still streaming or awaited once the drain
// time has passed: the workers are told to stop and the waiting handlers give up.
TEST(ServeBusy, StoppingTheServerEndsRunningAnswers) {
  auto s = std::make_shared<Script>();
  s->pieces = {"x"};
  s->endless = true;
  s->piece_delay_ms = 5;
  ServeOptions o;
  o.workers = 2;
  o.drain_timeout_s = 0.2;
  auto ts = std::make_unique<TestServer>(o, scripted_model(s));
  RawClient streamed(ts->port), whole(ts->port);
  streamed.post("/v1/chat/completions", user_request("a", {{"stream", true}, {"max_tokens", 2048}}).dump());
  whole.post("/v1/chat/completions", user_request("b", {{"max_tokens", 2048}}).dump());
  ASSERT_TRUE(s->wait_running(2));
  const auto t0 = Clock::now();
  ts.reset();  // stop() and join
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << "stopping waited for the answers to finish";
  EXPECT_EQ(s->running.load(), 0);
  EXPECT_EQ(s->cancelled.load(), 2);
}
