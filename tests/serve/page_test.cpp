// The chat page in a real browser: headless Chromium (Debian's package, scripts/deps.sh) loads it
// from an in-process server on 127.0.0.1 whose scripted backend streams a known answer piece by
// piece, 40 ms apart. The test types as a user would and checks that the answer appears in the
// page piece by piece (each piece its own DOM update, at several moments), that the second turn
// sends the whole conversation, that the conversation survives a reload, that "Stop" ends an
// answer and frees the worker, and that a queued request shows "Waiting for a free worker". A
// screenshot is saved as chat_page.png in the working directory.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "serve/page_util.h"

using namespace sctest;
using json = nlohmann::json;

namespace {

// Records every text node added to an assistant answer, with the time it was added.
const char* kRecorder = R"JS(
window.__pieces = [];
new MutationObserver((records) => {
  for (const r of records)
    for (const n of r.addedNodes)
      if (n.nodeType === 3 && n.parentElement && n.parentElement.closest('.msg.assistant'))
        window.__pieces.push({t: performance.now(), text: n.data});
}).observe(document.getElementById('messages'), {childList: true, subtree: true});
true
)JS";

}  // namespace

TEST(ChatPage, StreamsAnswersPieceByPieceKeepsTheConversationAndStops) {
  auto s = std::make_shared<Script>();
  s->pieces = {"The", " quick", " brown", " fox", " jumps", "."};
  s->piece_delay_ms = 40;
  ServeOptions o;
  o.workers = 1;
  o.queue = 2;
  TestServer ts(o, scripted_model(s));
  Browser b(ts.port);
  Chromium& c = *b.c;

  // Turn 1: type, press Enter, watch the answer arrive.
  c.eval(kRecorder);
  c.eval("document.getElementById('input').focus(); true");
  c.type_and_enter("Hello there");
  ASSERT_TRUE(c.wait_for("!document.body.classList.contains('busy') && document.querySelectorAll('.msg').length === 2"))
      << c.eval("document.body.innerHTML");
  EXPECT_EQ(c.eval("document.querySelector('.msg.user').textContent"), "Hello there");
  EXPECT_EQ(c.eval("document.querySelector('.msg.assistant .text').textContent"), "The quick brown fox jumps.");
  const json pieces = c.eval("window.__pieces");
  ASSERT_EQ(pieces.size(), 6u) << pieces.dump();
  std::set<double> moments;
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i]["text"], s->pieces[i]);
    moments.insert(pieces[i]["t"].get<double>());
  }
  EXPECT_GE(moments.size(), 3u) << "the answer appeared all at once, not as it streamed: " << pieces.dump();
  EXPECT_EQ(s->last_messages.load(), 1);

  // Turn 2: the whole conversation goes to the server; four messages on the page.
  c.eval(kRecorder);
  c.type_and_enter("And then?");
  ASSERT_TRUE(
      c.wait_for("!document.body.classList.contains('busy') && document.querySelectorAll('.msg').length === 4"));
  EXPECT_EQ(s->last_messages.load(), 3) << "the second turn did not send the first one";
  EXPECT_EQ(c.eval("document.querySelectorAll('.msg.assistant')[1].textContent"), "The quick brown fox jumps.");
  {
    std::ofstream f("chat_page.png", std::ios::binary);
    const std::string png = c.screenshot();
    f.write(png.data(), static_cast<std::streamsize>(png.size()));
    EXPECT_EQ(png.substr(1, 3), "PNG");
  }

  // A reload shows the same conversation (kept in the browser).
  c.call("Page.reload");
  ASSERT_TRUE(c.wait_for("document.readyState === 'complete' && document.querySelectorAll('.msg').length === 4"));
  EXPECT_EQ(c.eval("document.querySelectorAll('#convlist li').length"), 1);
  EXPECT_EQ(c.eval("document.querySelectorAll('.msg')[2].textContent"), "And then?");

  // Stop: an endless answer is stopped from the page; the worker is freed.
  s->endless = true;
  c.eval("document.getElementById('newchat').click(); document.getElementById('input').focus(); true");
  EXPECT_EQ(c.eval("document.querySelectorAll('.msg').length"), 0);
  c.type_and_enter("Talk forever");
  ASSERT_TRUE(
      c.wait_for("document.querySelector('.msg.assistant .text') && "
                 "document.querySelector('.msg.assistant .text').textContent.length > 10"));
  c.eval("document.getElementById('stop').click(); true");
  ASSERT_TRUE(c.wait_for("!document.body.classList.contains('busy')"));
  EXPECT_NE(c.eval("document.querySelector('.msg.assistant').textContent").get<std::string>().find("(stopped)"),
            std::string::npos);
  const auto end = Clock::now() + std::chrono::seconds(10);
  while (s->running.load() != 0 && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s->running.load(), 0) << "the worker still generates after Stop";
  EXPECT_EQ(s->cancelled.load(), 1);
  EXPECT_EQ(c.eval("document.querySelectorAll('#convlist li').length"), 2);
}

TEST(ChatPage, AQueuedRequestShowsWaitingForAFreeWorker) {
  auto s = std::make_shared<Script>();
  s->pieces = {"ok"};
  s->close();
  ServeOptions o;
  o.workers = 1;
  o.queue = 1;
  TestServer ts(o, scripted_model(s));
  RawClient holder(ts.port);  // takes the only worker and blocks on the gate
  holder.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "stream": true})");
  ASSERT_TRUE(s->wait_running(1));
  Browser b(ts.port);
  Chromium& c = *b.c;
  c.eval("document.getElementById('input').focus(); true");
  c.type_and_enter("Anyone there?");
  EXPECT_TRUE(c.wait_for("document.getElementById('status').textContent.includes('Waiting for a free worker')"))
      << c.eval("document.getElementById('status').textContent");
  s->open();
  ASSERT_TRUE(c.wait_for("!document.body.classList.contains('busy')"));
  EXPECT_EQ(c.eval("document.querySelector('.msg.assistant .text').textContent"), "ok");
  EXPECT_EQ(c.eval("document.getElementById('status').textContent"), "");
}
