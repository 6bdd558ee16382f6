// The chat page in headless Chromium (serve/page_util.h) on what a user found: a failed answer
// (429, every worker busy) leaves the conversation usable (the failed turn is marked and left out
// of the next request, and "Retry" asks it again), the max-tokens box takes the server's limit, an
// empty chat shows a hint, and a calculator call is drawn as a tool block, not as markers.
#include <gtest/gtest.h>

#include "serve/page_util.h"

using namespace sctest;
using json = nlohmann::json;

namespace {

const char* kIdle = "!document.body.classList.contains('busy')";

// Takes the only worker of the server and holds it until the script's gate opens.
struct Holder {
  std::shared_ptr<Script> s;
  RawClient client;
  Holder(std::shared_ptr<Script> script, int port) : s(std::move(script)), client(port) {
    s->close();
    client.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "stream": true})");
  }
  void release() {
    s->open();
    client.read_until("[DONE]");
  }
};

TEST(ChatPageTurns, AFailedAnswerIsLeftOutOfTheNextTurnAndCanBeRetried) {
  auto s = std::make_shared<Script>();
  s->pieces = {"o", "k"};
  ServeOptions o;
  o.workers = 1;
  o.queue = 0;  // a second request while the worker is busy is refused with 429
  TestServer ts(o, scripted_model(s));
  Browser b(ts.port);
  Chromium& c = *b.c;
  c.eval("document.getElementById('input').focus(); true");
  {
    Holder h(s, ts.port);
    ASSERT_TRUE(s->wait_running(1));
    c.type_and_enter("First");
    ASSERT_TRUE(c.wait_for(std::string(kIdle) + " && document.querySelector('.msg.assistant.error')"))
        << c.eval("document.getElementById('messages').textContent");
    EXPECT_NE(c.eval("document.querySelector('.msg.error').textContent").get<std::string>().find("busy"),
              std::string::npos);
    h.release();
  }
  ASSERT_TRUE(s->wait_running(0));
  c.type_and_enter("Second");
  ASSERT_TRUE(c.wait_for(std::string(kIdle) + " && document.querySelectorAll('.msg').length === 4"));
  EXPECT_EQ(c.eval("document.querySelectorAll('.msg.assistant')[1].textContent"), "ok");
  auto sent = s->rendered();
  ASSERT_EQ(sent.size(), 1u) << "the failed turn went out with the next one";
  EXPECT_EQ(sent[0].content, "Second");
  EXPECT_EQ(c.eval("document.querySelector('.msg.error .note').textContent"), "(left out of the conversation)");

  // Fails again; Retry asks the same question once the worker is free.
  {
    Holder h(s, ts.port);
    ASSERT_TRUE(s->wait_running(1));
    c.type_and_enter("Third");
    ASSERT_TRUE(c.wait_for(std::string(kIdle) + " && document.querySelectorAll('.msg.error').length === 2"));
    EXPECT_EQ(c.eval("document.querySelectorAll('.retry').length"), 1) << "Retry belongs to the last failed answer";
    h.release();
  }
  ASSERT_TRUE(s->wait_running(0));
  c.eval("document.querySelector('.retry').click(); true");
  ASSERT_TRUE(c.wait_for(std::string(kIdle) + " && document.querySelectorAll('.msg').length === 6 && "
                                              "document.querySelectorAll('.msg.error').length === 1"))
      << c.eval("document.getElementById('messages').textContent");
  sent = s->rendered();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].content, "Second");
  EXPECT_EQ(sent[1].content, "ok");
  EXPECT_EQ(sent[2].content, "Third");
  EXPECT_EQ(c.eval("document.querySelectorAll('.msg')[5].textContent"), "ok");
}

TEST(ChatPageTurns, TheServersLimitAHintAndACalculatorBlock) {
  auto s = std::make_shared<Script>();
  s->pieces = {"2+3 is ", "\n```calculator\n", "2+3", "\n```\n", "```output\n", "5", "\n```\n", "."};
  ServeOptions o;
  o.limits.max_tokens = 300;
  TestServer ts(o, scripted_model(s));
  Browser b(ts.port);
  Chromium& c = *b.c;
  ASSERT_TRUE(c.wait_for("document.getElementById('maxtokens').max === '300'"))
      << c.eval("document.getElementById('maxtokens').max");
  EXPECT_NE(c.eval("document.getElementById('hint').textContent").get<std::string>().find("calculator"),
            std::string::npos);
  c.eval("document.getElementById('maxtokens').value = '100000'; document.getElementById('input').focus(); true");
  c.type_and_enter("What is 2+3?");
  ASSERT_TRUE(c.wait_for(std::string(kIdle) + " && document.querySelectorAll('.msg').length === 2"))
      << c.eval("document.getElementById('messages').textContent");
  EXPECT_EQ(c.eval("document.querySelectorAll('.msg.error').length"), 0)
      << c.eval("document.getElementById('messages').textContent");
  EXPECT_EQ(s->params().max_tokens, 300);
  EXPECT_EQ(c.eval("document.getElementById('hint')"), json());
  const std::string check =
      "(() => { const a = document.querySelector('.msg.assistant');"
      " const t = a.querySelector('.tool');"
      " return t && t.querySelector('.expr').textContent === '2+3' && t.querySelector('.result').textContent === '5'"
      " && !a.textContent.includes('```') && a.textContent.startsWith('2+3 is ') && a.textContent.endsWith('.'); })()";
  EXPECT_EQ(c.eval(check), true) << c.eval("document.querySelector('.msg.assistant').innerHTML");
  b.save_screenshot("chat_page_tool.png");
  c.call("Page.reload");
  ASSERT_TRUE(c.wait_for("document.readyState === 'complete' && document.querySelectorAll('.msg').length === 2"));
  EXPECT_EQ(c.eval(check), true) << "the tool block is not drawn again after a reload";
}

}  // namespace
