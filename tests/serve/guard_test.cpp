// chat-web as a server left running, through real sockets on 127.0.0.1 with scripted backends:
// bodies bounded whatever their framing, stalled clients that do not delay /health, requests that
// no other web page can make (Content-Type, Origin, CORS), a whole answer whose client left, a POST
// without length, HTTP/1.0 streams, the drain at stop, and the request log.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "serve/serve_util.h"

using json = nlohmann::json;
using namespace sctest;
using namespace std::chrono_literals;

namespace {

std::string chat_body(const std::string& text, json extra = json::object()) {
  json j = {{"model", "scripted"}, {"messages", json::array({{{"role", "user"}, {"content", text}}})}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j.dump();
}

std::string post_head(const std::string& headers, const std::string& version = "HTTP/1.1") {
  return "POST /v1/chat/completions " + version + "\r\nHost: 127.0.0.1\r\n" + headers + "\r\n";
}

std::shared_ptr<Script> pieces(std::vector<std::string> p) {
  auto s = std::make_shared<Script>();
  s->pieces = std::move(p);
  return s;
}

std::shared_ptr<Script> endless(int delay_ms) {
  auto s = std::make_shared<Script>();
  s->pieces = {"x"};
  s->endless = true;
  s->piece_delay_ms = delay_ms;
  return s;
}

int64_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

// Sends `total` bytes of a chunked body in 16 KiB chunks while watching for the server's answer;
// returns the body bytes sent before the answer came (or all of them).
int64_t send_chunked_until_answered(RawClient& c, int64_t total) {
  const std::string piece(16 << 10, 'x');
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", piece.size());
  const std::string chunk = size_line + piece + "\r\n";
  int64_t sent = 0;
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (sent < total && Clock::now() < end) {
    if (c.read_until("\r\n\r\n", std::chrono::milliseconds(2))) return sent;
    if (!c.send_some(chunk)) break;
    sent += static_cast<int64_t>(piece.size());
  }
  return sent;
}

// Log lines of a server, collected.
struct LogLines {
  std::mutex m;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> lk(m);
      lines.push_back(l);
    };
  }
  std::string find(const std::string& needle) {
    std::lock_guard<std::mutex> lk(m);
    for (const auto& l : lines)
      if (l.find(needle) != std::string::npos) return l;
    return "";
  }
  std::string all() {
    std::lock_guard<std::mutex> lk(m);
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

}  // namespace

// A 20 MB chunked body against a 64 KiB limit: 413 long before the client has sent it all, and
// the server's memory does not grow by the body.
TEST(ServeGuard, AChunkedBodyOverTheLimitIs413AsSoonAsItPassesIt) {
  auto s = pieces({"a"});
  ServeOptions o;
  o.max_body_bytes = 64 << 10;
  TestServer ts(o, scripted_model(s));
  const int64_t rss0 = rss_bytes();
  for (const char* path : {"/v1/chat/completions", "/health"}) {
    RawClient c(ts.port);
    c.send_all(std::string("POST ") + path +
               " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
    const int64_t sent = send_chunked_until_answered(c, int64_t{20} << 20);
    ASSERT_TRUE(c.read_until("\r\n\r\n", std::chrono::seconds(5))) << path;
    EXPECT_EQ(c.received().rfind("HTTP/1.1 413", 0), 0u) << path << ": " << c.received();
    std::printf("[ measured ] %s: 413 after %lld KiB of a 20 MB chunked body were sent\n", path,
                static_cast<long long>(sent >> 10));
    EXPECT_LT(sent, int64_t{10} << 20) << path << ": the server read on past its limit";
    EXPECT_TRUE(c.read_until("--max-body-bytes", std::chrono::seconds(5))) << c.received();
  }
  std::printf("[ measured ] resident memory grew by %lld KiB\n", static_cast<long long>((rss_bytes() - rss0) >> 10));
#ifndef __SANITIZE_ADDRESS__  // the sanitizer's shadow and quarantine grow on their own
  EXPECT_LT(rss_bytes() - rss0, int64_t{12} << 20) << "the server kept the refused bodies";
#endif
  EXPECT_EQ(s->started.load(), 0);
  // A Content-Length over the limit is refused before a byte of the body is sent.
  RawClient big(ts.port);
  const auto t0 = Clock::now();
  big.send_all(post_head("Content-Type: application/json\r\nContent-Length: 104857600\r\n"));
  ASSERT_TRUE(big.read_until("\r\n\r\n", std::chrono::seconds(2)));
  EXPECT_EQ(big.received().rfind("HTTP/1.1 413", 0), 0u) << big.received();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
  // Within the limit, chunked is served.
  RawClient ok(ts.port);
  const std::string body = chat_body("hi");
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", body.size());
  ok.send_all(post_head("Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n") + size_line + body +
              "\r\n0\r\n\r\n");
  ASSERT_TRUE(ok.read_until("chat.completion")) << ok.received();
  EXPECT_EQ(ok.received().rfind("HTTP/1.1 200", 0), 0u) << ok.received();
}

// 200 connections that stall (100 mid-headers, 100 after the headers of a body that never comes)
// do not hold the threads that /health and the page need; a stalled one is cut at --read-timeout.
TEST(ServeGuard, StalledClientsDoNotDelayHealthAndAreCutAtTheReadTimeout) {
  auto s = pieces({"a"});
  LogLines log;
  ServeOptions o;
  o.read_timeout_s = 3;
  o.log = log.sink();
  TestServer ts(o, scripted_model(s));
  std::vector<std::unique_ptr<RawClient>> stalled;
  const auto t_connect = Clock::now();
  for (int i = 0; i < 200; ++i) {
    stalled.push_back(std::make_unique<RawClient>(ts.port));
    ASSERT_TRUE(stalled.back()->ok());
    if (i % 2)
      stalled.back()->send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    else
      stalled.back()->send_all(post_head("Content-Type: application/json\r\nContent-Length: 1000\r\n"));
  }
  EXPECT_LT(Clock::now() - t_connect, std::chrono::seconds(2)) << "connecting took long: a short listen backlog";
  httplib::Client c("127.0.0.1", ts.port);
  int open = 0;  // every stalled connection is being read
  for (auto end = Clock::now() + std::chrono::seconds(2); open < 200 && Clock::now() < end;)
    open = json::parse(c.Get("/health")->body)["connections"].get<int>() - 1;
  ASSERT_GE(open, 200);
  double worst_ms = 0;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = Clock::now();
    auto h = c.Get(i % 2 ? "/health" : "/");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    worst_ms = std::max(worst_ms, ms);
  }
  std::printf("[ measured ] /health and / with 200 stalled connections: worst %.1f ms of 10\n", worst_ms);
  EXPECT_LT(worst_ms, 1000.0);
  // The stalled connections are cut once --read-timeout (3 s) has passed.
  const auto t0 = Clock::now();
  EXPECT_FALSE(stalled.front()->read_until("never", std::chrono::seconds(8)));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(6)) << "a stalled connection was not cut";
  // Each is answered 408 (headers or body too slow) and logged.
  auto count_408 = [&] {
    std::lock_guard<std::mutex> lk(log.m);
    return std::count_if(log.lines.begin(), log.lines.end(),
                         [](const std::string& l) { return l.find("POST /v1/chat/completions 408") != l.npos; });
  };
  for (auto end = Clock::now() + 5s; count_408() < 200 && Clock::now() < end;) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(count_408(), 200) << log.all().substr(0, 2000);
  EXPECT_NE(stalled.front()->received().find("--read-timeout"), std::string::npos) << stalled.front()->received();
}

// text/plain and form POSTs (which any page may send) are 415, a foreign Origin is 403, and no
// worker is started by either.
TEST(ServeGuard, OnlyJsonPostsFromThisServersOwnOrAllowedOriginsAreServed) {
  auto s = pieces({"a"});
  ServeOptions o;
  o.allow_origins = {"http://ok.example:3000"};
  TestServer ts(o, scripted_model(s));
  httplib::Client c("127.0.0.1", ts.port);
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"}) {
    auto r = c.Post("/v1/chat/completions", chat_body("hi"), type);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 415) << type;
    EXPECT_EQ(json::parse(r->body)["error"]["type"], "unsupported_media_type") << r->body;
  }
  const std::string own = "http://127.0.0.1:" + std::to_string(ts.port);
  auto with_origin = [&](const std::string& origin) {
    return c.Post("/v1/chat/completions", {{"Origin", origin}}, chat_body("hi"), "application/json");
  };
  auto evil = with_origin("http://evil.example");
  ASSERT_TRUE(evil);
  EXPECT_EQ(evil->status, 403);
  EXPECT_NE(json::parse(evil->body)["error"]["message"].get<std::string>().find("--allow-origin"), std::string::npos);
  EXPECT_EQ(s->started.load(), 0);
  for (const std::string& origin :
       {own, std::string("http://localhost:") + std::to_string(ts.port), std::string("http://ok.example:3000")}) {
    auto r = with_origin(origin);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << origin << ": " << r->body;
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), origin);
  }
  // CORS preflight: answered for an allowed origin, refused for another.
  httplib::Headers pre = {{"Origin", "http://ok.example:3000"},
                          {"Access-Control-Request-Method", "POST"},
                          {"Access-Control-Request-Headers", "content-type"}};
  auto ok = c.Options("/v1/chat/completions", pre);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 204);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "http://ok.example:3000");
  EXPECT_NE(ok->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_NE(ok->get_header_value("Access-Control-Allow-Headers").find("content-type"), std::string::npos);
  auto no = c.Options("/v1/chat/completions", {{"Origin", "http://evil.example"}});
  ASSERT_TRUE(no);
  EXPECT_EQ(no->status, 403);
  EXPECT_FALSE(no->has_header("Access-Control-Allow-Origin"));
}

// A whole (not streamed) answer whose client hangs up: its worker stops within a moment.
TEST(ServeGuard, AWholeAnswerWhoseClientLeftIsCancelled) {
  auto s = endless(5);
  LogLines log;
  ServeOptions o;
  o.log = log.sink();
  TestServer ts(o, scripted_model(s));
  RawClient c(ts.port);
  c.post("/v1/chat/completions", chat_body("hi", {{"max_tokens", 2048}}));
  ASSERT_TRUE(s->wait_running(1));
  const auto t0 = Clock::now();
  c.hang_up();
  ASSERT_TRUE(s->wait_running(0));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(s->cancelled.load(), 1);
  for (auto end = Clock::now() + std::chrono::seconds(5); log.find("client gone").empty() && Clock::now() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::string gone = log.find("client gone");
  EXPECT_NE(gone, "") << log.all();
  // the tokens it generated before the client left are counted
  EXPECT_EQ(gone.find(" out=0 "), std::string::npos) << gone;
}

// A request line that cannot be read: one 400, one log line with the client's address, and the
// connection ends (what follows is not read as more requests).
TEST(ServeGuard, AnUnreadableRequestLineIsOne400AndEndsTheConnection) {
  auto s = pieces({"a"});
  LogLines log;
  ServeOptions o;
  o.log = log.sink();
  TestServer ts(o, scripted_model(s));
  RawClient c(ts.port);
  c.send_all("BLAH\r\n\r\n\r\n\r\n");
  ASSERT_TRUE(c.read_until("\r\n\r\n", std::chrono::seconds(3))) << c.received();
  EXPECT_EQ(c.received().rfind("HTTP/1.1 400", 0), 0u) << c.received();
  const auto t0 = Clock::now();
  EXPECT_FALSE(c.read_until("never sent", std::chrono::seconds(3)));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2)) << "the server kept the connection open";
  EXPECT_EQ(c.received().find("HTTP/1.1 400", 1), std::string::npos) << c.received();
  for (auto end = Clock::now() + std::chrono::seconds(5); log.find(" 400 ").empty() && Clock::now() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string all = log.all();
  std::lock_guard<std::mutex> lk(log.m);
  ASSERT_EQ(log.lines.size(), 1u) << all;
  EXPECT_NE(log.lines[0].find("127.0.0.1:"), std::string::npos) << log.lines[0];
  EXPECT_EQ(log.lines[0].find(":-1 "), std::string::npos) << log.lines[0];
}

// A POST without Content-Length and not chunked: 411 at once, not after a read timeout.
TEST(ServeGuard, APostWithoutLengthIs411AtOnce) {
  auto s = pieces({"a"});
  TestServer ts({}, scripted_model(s));
  RawClient c(ts.port);
  const auto t0 = Clock::now();
  c.send_all(post_head("Content-Type: application/json\r\n") + chat_body("hi"));
  ASSERT_TRUE(c.read_until("\r\n\r\n", std::chrono::seconds(3))) << c.received();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(c.received().rfind("HTTP/1.1 411", 0), 0u) << c.received();
  EXPECT_TRUE(c.read_until("Content-Length header"));
}

// A stream to an HTTP/1.0 client is not chunked: it ends when the server closes the connection.
TEST(ServeGuard, AStreamToAnHttp10ClientIsCloseDelimited) {
  auto s = pieces({"Hel", "lo"});
  TestServer ts({}, scripted_model(s));
  RawClient c(ts.port);
  const std::string body = chat_body("hi", {{"stream", true}});
  c.send_all(post_head("Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n",
                       "HTTP/1.0") +
             body);
  ASSERT_TRUE(c.read_until("data: [DONE]")) << c.received();
  const auto t0 = Clock::now();
  EXPECT_FALSE(c.read_until("never", std::chrono::seconds(5)));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2)) << "the connection stayed open after the stream";
  const std::string& got = c.received();
  EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
  EXPECT_EQ(got.find("\r\n7\r\n"), std::string::npos) << got;  // no chunk sizes
  EXPECT_NE(got.find("data: {"), std::string::npos) << got;
  const auto close = got.find("Connection: close");
  ASSERT_NE(close, std::string::npos) << got;
  EXPECT_EQ(got.find("Connection: close", close + 1), std::string::npos) << "said twice: " << got;
}

// stop() lets a running answer finish within the drain time, and ends one that would not with an
// error event and [DONE] (a whole answer with 503); new requests meanwhile are 503.
TEST(ServeGuard, StoppingDrainsThenEndsEachStreamWithAnErrorAndDone) {
  auto s = pieces({"a", "b", "c", "d", "e"});
  s->piece_delay_ms = 100;
  ServeOptions o;
  o.workers = 2;
  o.drain_timeout_s = 5;
  auto ts = std::make_unique<TestServer>(o, scripted_model(s));
  RawClient finishing(ts->port);
  finishing.post("/v1/chat/completions", chat_body("a", {{"stream", true}}));
  ASSERT_TRUE(finishing.read_until("\"content\":\"a\""));
  std::thread stopper([&] { ts->server->stop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto late = httplib::Client("127.0.0.1", ts->port).Post("/v1/chat/completions", chat_body("b"), "application/json");
  ASSERT_TRUE(late);
  EXPECT_EQ(late->status, 503);
  ASSERT_TRUE(finishing.read_until("data: [DONE]"));
  EXPECT_NE(finishing.received().find("\"finish_reason\":\"stop\""), std::string::npos) << finishing.received();
  EXPECT_EQ(finishing.received().find("\"error\""), std::string::npos) << finishing.received();
  stopper.join();
  ts.reset();

  auto e = endless(5);
  o.drain_timeout_s = 0.3;
  ts = std::make_unique<TestServer>(o, scripted_model(e));
  RawClient streamed(ts->port), whole(ts->port);
  streamed.post("/v1/chat/completions", chat_body("a", {{"stream", true}, {"max_tokens", 2048}}));
  whole.post("/v1/chat/completions", chat_body("b", {{"max_tokens", 2048}}));
  ASSERT_TRUE(e->wait_running(2));
  const auto t0 = Clock::now();
  ts.reset();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(4));
  ASSERT_TRUE(streamed.read_until("data: [DONE]")) << streamed.received();
  EXPECT_NE(streamed.received().find("server_shutting_down"), std::string::npos) << streamed.received();
  ASSERT_TRUE(whole.read_until("server_shutting_down")) << whole.received();
  EXPECT_EQ(whole.received().rfind("HTTP/1.1 503", 0), 0u) << whole.received();
  EXPECT_EQ(e->running.load(), 0);
}

// One log line per request: address, method, path, status, tokens, wait and time; refusals too.
TEST(ServeGuard, EachRequestLeavesOneLogLine) {
  auto s = pieces({"Hel", "lo", "!"});
  LogLines log;
  ServeOptions o;
  o.log = log.sink();
  TestServer ts(o, scripted_model(s));
  httplib::Client c("127.0.0.1", ts.port);
  ASSERT_TRUE(c.Post("/v1/chat/completions", chat_body("hi"), "application/json"));
  ASSERT_TRUE(c.Post("/v1/chat/completions", chat_body("hi"), "text/plain"));
  ASSERT_TRUE(c.Get("/health"));
  // A line is written once its answer is out: the client may see the answer first.
  for (auto end = Clock::now() + std::chrono::seconds(5); Clock::now() < end; std::this_thread::sleep_for(10ms)) {
    std::lock_guard<std::mutex> lk(log.m);
    if (log.lines.size() >= 3) break;
  }
  const std::string ok = log.find("POST /v1/chat/completions 200");
  EXPECT_NE(ok.find("127.0.0.1:"), std::string::npos) << log.all();
  EXPECT_NE(ok.find("in=5 out=3 wait="), std::string::npos) << log.all();
  EXPECT_NE(ok.find(" time="), std::string::npos) << log.all();
  EXPECT_NE(log.find("POST /v1/chat/completions 415"), "") << log.all();
  EXPECT_NE(log.find("GET /health 200"), "") << log.all();
  std::lock_guard<std::mutex> lk(log.m);
  EXPECT_EQ(log.lines.size(), 3u);
}
