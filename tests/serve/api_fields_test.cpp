// The chat-web API's reading of what OpenAI's clients send, through a real socket on 127.0.0.1
// with a scripted backend: messages of one role in a row joined (nanochat's turns alternate), the
// fields the openai client and frameworks send accepted when neutral and honoured where the engine
// can (seed, penalties, include_usage), the rest refused naming the field and why, an unknown
// model answered 404 "model_not_found", and the limits GET /health reports.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "serve/serve_util.h"

using json = nlohmann::json;
using namespace sctest;

namespace {

json msg(const std::string& role, const std::string& text) { return {{"role", role}, {"content", text}}; }

httplib::Result post(int port, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(20, 0);
  return c.Post("/v1/chat/completions", body.dump(), "application/json");
}

std::shared_ptr<Script> answer_ok() {
  auto s = std::make_shared<Script>();
  s->pieces = {"o", "k"};
  return s;
}

TEST(ServeApiFields, MessagesOfOneRoleInARowAreJoined) {
  auto s = answer_ok();
  TestServer ts(ServeOptions{}, scripted_model(s));
  auto r = post(ts.port, {{"messages", json::array({msg("user", "First"), msg("user", "Second")})}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], "ok");
  auto got = s->rendered();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].role, "user");
  EXPECT_EQ(got[0].content, "First\n\nSecond");

  r = post(ts.port, {{"messages", json::array({msg("developer", "Be brief."), msg("user", "a"), msg("assistant", "b"),
                                               msg("assistant", "c"), msg("user", "d"), msg("user", "e")})}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  got = s->rendered();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].role, "system");
  EXPECT_EQ(got[0].content, "Be brief.");
  EXPECT_EQ(got[2].content, "b\n\nc");
  EXPECT_EQ(got[3].content, "d\n\ne");

  // A system message anywhere but first is still refused.
  r = post(ts.port, {{"messages", json::array({msg("user", "a"), msg("system", "b"), msg("user", "c")})}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "messages[1].role");
}

// What the openai Python client and common frameworks put in a request, all at neutral values.
json client_request() {
  return {{"model", "scripted"},
          {"messages",
           json::array({{{"role", "system"}, {"content", "s"}},
                        {{"role", "user"}, {"content", "hi"}, {"name", "ann"}},
                        {{"role", "assistant"}, {"content", "yo"}, {"tool_calls", json::array()}, {"refusal", nullptr}},
                        {{"role", "user"}, {"content", "again"}}})},
          {"logprobs", false},
          {"top_logprobs", nullptr},
          {"response_format", {{"type", "text"}}},
          {"tools", json::array()},
          {"tool_choice", "none"},
          {"parallel_tool_calls", true},
          {"n", 1},
          {"stop", nullptr},
          {"top_p", 1},
          {"logit_bias", json::object()},
          {"max_completion_tokens", 16},
          {"metadata", {{"app", "x"}}},
          {"store", false},
          {"user", "u-1"},
          {"service_tier", "auto"},
          {"presence_penalty", 0},
          {"frequency_penalty", 0},
          {"functions", nullptr},
          {"modalities", json::array({"text"})},
          {"audio", nullptr},
          {"seed", 1234}};
}

TEST(ServeApiFields, WhatClientsSendIsAcceptedAndSeedAndPenaltiesReachTheSampler) {
  auto s = answer_ok();
  TestServer ts(ServeOptions{}, scripted_model(s));
  auto r = post(ts.port, client_request());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(s->params().seed, 1234u);
  EXPECT_EQ(s->params().max_tokens, 16);

  json j = client_request();
  j["presence_penalty"] = 0.5;
  j["frequency_penalty"] = -1.25;
  j["tool_choice"] = "auto";
  j["logit_bias"] = {{"42", 0}};
  r = post(ts.port, j);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_DOUBLE_EQ(s->params().presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(s->params().frequency_penalty, -1.25);

  // include_usage: a last chunk with no choices and the token counts, before [DONE].
  j = client_request();
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  r = post(ts.port, j);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const size_t done = r->body.rfind("data: [DONE]");
  ASSERT_NE(done, std::string::npos) << r->body;
  const size_t last = r->body.rfind("data: {", done);
  const json usage = json::parse(r->body.substr(last + 6, r->body.find("\n\n", last) - last - 6));
  EXPECT_TRUE(usage["choices"].empty()) << usage.dump();
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2) << usage.dump();
  EXPECT_GT(usage["usage"]["prompt_tokens"].get<int>(), 0);
}

TEST(ServeApiFields, WhatWouldChangeTheAnswerIsRefusedNamingTheFieldAndWhy) {
  auto s = answer_ok();
  TestServer ts(ServeOptions{}, scripted_model(s));
  const json tool = {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}};
  const std::vector<std::tuple<std::string, json, std::string>> cases = {
      {"logprobs", true, "log-probabilities"},
      {"top_logprobs", 3, "log-probabilities"},
      {"response_format", {{"type", "json_object"}}, "JSON mode"},
      {"tools", json::array({tool}), "tools for the model to call"},
      {"tool_choice", "required", "requires a tool call"},
      {"logit_bias", {{"42", 5}}, "biases token 42"},
      {"modalities", json::array({"text", "audio"}), "other than"},
      {"presence_penalty", 2.5, "between -2 and 2"},
      {"frequency_penalty", "much", "must be a number"},
      {"mystery_field", 1, "unknown field 'mystery_field'"},
  };
  for (const auto& [field, value, says] : cases) {
    json j = {{"messages", json::array({msg("user", "hi")})}};
    j[field] = value;
    auto r = post(ts.port, j);
    ASSERT_TRUE(r) << field;
    EXPECT_EQ(r->status, 400) << field << ": " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], field) << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(says), std::string::npos) << field << ": " << e["message"];
  }
  EXPECT_EQ(s->started.load(), 0) << "a refused request reached a worker";
}

TEST(ServeApiFields, AnUnknownModelIs404AndTheListedOneOrNoneIsServed) {
  auto s = answer_ok();
  TestServer ts(ServeOptions{}, scripted_model(s));
  httplib::Client c("127.0.0.1", ts.port);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const std::string id = json::parse(models->body)["data"][0]["id"];
  EXPECT_EQ(id, "scripted");
  const json m = json::array({msg("user", "hi")});
  auto r = post(ts.port, {{"model", "gpt-4o"}, {"messages", m}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "model");
  EXPECT_NE(e["message"].get<std::string>().find("'gpt-4o'"), std::string::npos) << e.dump();
  EXPECT_EQ(s->started.load(), 0);
  for (const json& body : {json{{"model", id}, {"messages", m}}, json{{"messages", m}}}) {
    r = post(ts.port, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << body.dump() << ": " << r->body;
  }
}

TEST(ServeApiFields, HealthReportsTheRequestLimits) {
  ServeOptions o;
  o.limits.max_tokens = 77;
  o.limits.max_messages = 9;
  TestServer ts(o, scripted_model(answer_ok(), 300));
  httplib::Client c("127.0.0.1", ts.port);
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  const json j = json::parse(r->body);
  EXPECT_EQ(j["limits"]["max_tokens"], 77);
  EXPECT_EQ(j["limits"]["max_messages"], 9);
  EXPECT_EQ(j["limits"]["max_message_bytes"], o.limits.max_message_bytes);
  EXPECT_EQ(j["context_len"], 300);
}

}  // namespace
