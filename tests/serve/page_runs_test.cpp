// The page's "Runs" panel and its phone layout in headless Chromium (serve/page_util.h): the
// panel refreshes its run list and chart in place while open and keeps its scroll position, a
// finished run is not shown as live; at 390x844 the composer's placeholder fits, opening the
// panel closes the drawer, and the chart keeps a readable size (scrolling sideways). Screenshots:
// chat_page_empty_mobile.png, chat_page_mobile.png, runs_mobile.png, runs_panel.png.
#include <gtest/gtest.h>

#include <cmath>

#include <atomic>

#include "serve/page_util.h"

using namespace sctest;
using json = nlohmann::json;

namespace {

// A chart of width x height user units with axis labels at 12 units, as train/chart.h draws them.
std::string chart_svg(int width, int height) {
  std::string s = "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 " + std::to_string(width) + " " +
                  std::to_string(height) + "' width='" + std::to_string(width) + "' height='" + std::to_string(height) +
                  "'><rect width='100%' height='100%' fill='#fff'/>";
  for (int y = 40; y < height; y += 80)
    s += "<text x='10' y='" + std::to_string(y) + "' font-size='12'>loss " + std::to_string(y) + "</text>";
  return s + "<polyline fill='none' stroke='#2f6fed' points='60,60 300,200 600,260 880,280'/></svg>";
}

struct Runs {
  std::atomic<int> lists{0}, charts{0};
  RunsProvider provider(int chart_height) {
    RunsProvider p;
    p.list_json = [this] {
      const int n = ++lists;
      json r = {{"kind", "base"}, {"tag", "d4"},      {"has_metrics", true},  {"last_step", 100 + n},
                {"live", false},  {"finished", true}, {"last_update_unix", 0}};
      return json{{"runs", json::array({r})}}.dump();
    };
    p.chart_svg = [this, chart_height](const std::string& run) -> std::optional<std::string> {
      if (run != "base/d4") return std::nullopt;
      ++charts;
      return chart_svg(760, chart_height);
    };
    return p;
  }
};

std::shared_ptr<Script> ok_script() {
  auto s = std::make_shared<Script>();
  s->pieces = {"6*7 is ",     "\n```calculator\n",
               "6*7",         "\n```\n",
               "```output\n", "42",
               "\n```\n",     ": six times seven makes forty-two."};
  return s;
}

TEST(ChatPageRuns, ThePanelRefreshesInPlaceKeepsItsScrollAndAFinishedRunIsNotLive) {
  Runs runs;
  ServeOptions o;
  o.runs = runs.provider(3000);
  TestServer ts(o, scripted_model(ok_script()));
  Browser b(ts.port);
  Chromium& c = *b.c;
  // beside the model's name, a link to its report card (GET /report), on the top bar's first line
  EXPECT_EQ(c.eval("document.getElementById('cardlink').getAttribute('href')"), "/report");
  EXPECT_EQ(c.eval("document.getElementById('cardlink').closest('#top') !== null"), true);
  EXPECT_LE(std::fabs(c.eval("document.getElementById('cardlink').getBoundingClientRect().top - "
                             "document.querySelector('#top .title').getBoundingClientRect().top")
                          .get<double>()),
            4.0);
  c.eval("document.getElementById('runsbtn').click(); true");
  ASSERT_TRUE(c.wait_for("document.querySelector('#runlist button')"));
  EXPECT_EQ(c.eval("document.querySelector('#runlist button').classList.contains('live')"), false);
  EXPECT_EQ(c.eval("document.querySelector('#runlist button').classList.contains('finished')"), true);
  c.eval("document.querySelector('#runlist button').click(); true");
  ASSERT_TRUE(
      c.wait_for("document.querySelector('#chart img') && document.querySelector('#chart img').complete && "
                 "document.getElementById('runs').scrollHeight > 1500"));
  c.eval("document.getElementById('runs').scrollTop = 600; true");
  const int lists = runs.lists.load(), charts = runs.charts.load();
  // One redraw (every 5 s): a new list and a new chart, loaded in place.
  ASSERT_TRUE(c.wait_for(
      "document.querySelector('#runlist button').textContent !== 'base d4 (step " + std::to_string(100 + lists) + ")'",
      12))
      << "the run list was not fetched again while the panel is open";
  const auto end = Clock::now() + std::chrono::seconds(12);
  while (runs.charts.load() == charts && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GT(runs.charts.load(), charts) << "the chart was not redrawn";
  EXPECT_GT(runs.lists.load(), lists);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // the new chart loads and replaces the old one
  EXPECT_NEAR(c.eval("document.getElementById('runs').scrollTop").get<double>(), 600, 2)
      << "the redraw moved the panel";
  EXPECT_EQ(c.eval("document.querySelectorAll('#chart img').length"), 1);
  EXPECT_EQ(c.eval("document.querySelector('#runlist button').classList.contains('chosen')"), true);
  b.save_screenshot("runs_panel.png");
}

TEST(ChatPageMobile, At390x844ThePlaceholderFitsTheDrawerClosesAndTheChartStaysReadable) {
  Runs runs;
  ServeOptions o;
  o.runs = runs.provider(500);
  TestServer ts(o, scripted_model(ok_script()));
  Browser b(ts.port);
  Chromium& c = *b.c;
  c.call("Emulation.setDeviceMetricsOverride",
         {{"width", 390}, {"height", 844}, {"deviceScaleFactor", 1}, {"mobile", true}});
  ASSERT_TRUE(c.wait_for("window.innerWidth === 390"));
  const std::string fits =
      "(() => { const t = document.getElementById('input'); const cs = getComputedStyle(t);"
      " const ctx = document.createElement('canvas').getContext('2d'); ctx.font = cs.font;"
      " return ctx.measureText(t.placeholder).width <="
      " t.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight); })()";
  EXPECT_EQ(c.eval(fits), true) << "the placeholder is clipped: "
                                << c.eval("document.getElementById('input').placeholder");
  EXPECT_TRUE(c.eval("document.getElementById('hint').getBoundingClientRect().width <= 390").get<bool>());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the drawer's slide out ends
  b.save_screenshot("chat_page_empty_mobile.png");
  c.eval("document.getElementById('input').focus(); true");
  c.type_and_enter("What is 6*7? Tell me with the calculator, please, and explain it in a sentence.");
  ASSERT_TRUE(
      c.wait_for("!document.body.classList.contains('busy') && document.querySelector('.msg.assistant .tool')"));
  EXPECT_LE(c.eval("document.querySelector('.msg.assistant').getBoundingClientRect().right").get<double>(), 390);
  EXPECT_LE(c.eval("document.documentElement.scrollWidth").get<double>(), 390) << "the page scrolls sideways";
  b.save_screenshot("chat_page_mobile.png");

  c.eval("document.getElementById('menu').click(); true");
  ASSERT_TRUE(c.wait_for("document.body.classList.contains('menu')"));
  c.eval("document.getElementById('runsbtn').click(); true");
  ASSERT_TRUE(c.wait_for("document.querySelector('#runlist button')"));
  EXPECT_EQ(c.eval("document.body.classList.contains('menu')"), false) << "the drawer stays open behind the panel";
  c.eval("document.querySelector('#runlist button').click(); true");
  ASSERT_TRUE(c.wait_for("document.querySelector('#chart img') && document.querySelector('#chart img').complete"));
  // Drawn at no less than 720 CSS px for 760 units, the 12-unit labels stay about 10 px high.
  EXPECT_GE(c.eval("document.querySelector('#chart img').getBoundingClientRect().width").get<double>(), 720);
  EXPECT_LE(c.eval("document.getElementById('runs').getBoundingClientRect().right").get<double>(), 390);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  b.save_screenshot("runs_mobile.png");
}

}  // namespace
