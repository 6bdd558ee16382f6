// The chart's axes against closed forms (round ticks of 1, 2 or 5 x 10^k inside the range, labels
// with just the decimals the step needs), and the SVG it draws: well-formed XML (read by a strict
// reader), the expected tick labels, every text inside the picture, for odd inputs too (one point,
// a constant, NaN and infinities, millions of steps, hostile titles).
#include "nanochat/train/chart.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "nanochat/core/error.h"
#include "support/xml_lite.h"

using namespace nanochat;
using nctest::XmlElement;
using nctest::XmlLite;

namespace {

using Labels = std::vector<std::string>;

void expect_values(const AxisTicks& t, const std::vector<double>& want) {
  ASSERT_EQ(t.values.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.values[i], want[i], 1e-9 * t.step) << i;
}

// The texts of an SVG document, parsed strictly; checks that each lies inside the picture by the
// chart's own width estimate (text_width_px, itself checked against the font below).
struct Drawn {
  std::unique_ptr<XmlElement> root;
  std::multiset<std::string> texts;
};

Drawn parse_and_check(const std::string& svg) {
  Drawn d;
  try {
    d.root = XmlLite::parse(svg);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
    return d;
  }
  EXPECT_EQ(d.root->name, "svg");
  const double W = std::stod(d.root->attrs.at("width")), H = std::stod(d.root->attrs.at("height"));
  EXPECT_EQ(d.root->attrs.at("viewBox"), "0 0 " + d.root->attrs.at("width") + " " + d.root->attrs.at("height"));
  const double base_font = std::stod(d.root->attrs.at("font-size"));
  std::vector<const XmlElement*> texts;
  d.root->find_all("text", texts);
  for (const XmlElement* t : texts) {
    d.texts.insert(t->text);
    const double x = std::stod(t->attrs.at("x")), y = std::stod(t->attrs.at("y"));
    const double font = t->attrs.count("font-size") ? std::stod(t->attrs.at("font-size")) : base_font;
    const double w = text_width_px(t->text, font);
    const std::string anchor = t->attrs.count("text-anchor") ? t->attrs.at("text-anchor") : "start";
    const double x0 = anchor == "end" ? x - w : anchor == "middle" ? x - w / 2 : x;
    EXPECT_GE(x0, 0) << "\"" << t->text << "\" starts left of the picture";
    EXPECT_LE(x0 + w, W) << "\"" << t->text << "\" ends right of the picture (" << x0 + w << " > " << W << ")";
    EXPECT_GE(y - font, 0) << t->text;
    EXPECT_LE(y, H) << t->text;
  }
  return d;
}

size_t polyline_points(const XmlElement& root) {
  std::vector<const XmlElement*> lines;
  root.find_all("polyline", lines);
  size_t n = 0;
  for (const XmlElement* l : lines) {
    const std::string& p = l->attrs.at("points");
    for (char c : p) n += c == ',';
  }
  return n;
}

}  // namespace

TEST(NiceTicks, StepsAreOneTwoOrFiveTimesAPowerOfTenInsideTheRange) {
  AxisTicks t = nice_ticks(0, 119);
  EXPECT_DOUBLE_EQ(t.step, 20);
  expect_values(t, {0, 20, 40, 60, 80, 100});
  EXPECT_EQ(t.labels, (Labels{"0", "20", "40", "60", "80", "100"}));

  t = nice_ticks(0, 29.75, /*whole=*/true);
  EXPECT_DOUBLE_EQ(t.step, 5);
  EXPECT_EQ(t.labels, (Labels{"0", "5", "10", "15", "20", "25"}));

  t = nice_ticks(8.284, 9.173);
  EXPECT_NEAR(t.step, 0.2, 1e-15);
  expect_values(t, {8.4, 8.6, 8.8, 9.0});
  EXPECT_EQ(t.labels, (Labels{"8.4", "8.6", "8.8", "9.0"}));

  t = nice_ticks(1e-5, 3e-5);
  EXPECT_NEAR(t.step, 5e-6, 1e-20);
  expect_values(t, {1e-5, 1.5e-5, 2e-5, 2.5e-5, 3e-5});
  EXPECT_EQ(t.labels, (Labels{"1.0e-5", "1.5e-5", "2.0e-5", "2.5e-5", "3.0e-5"}));

  t = nice_ticks(-3, 7);
  expect_values(t, {-2, 0, 2, 4, 6});
  EXPECT_EQ(t.labels, (Labels{"-2", "0", "2", "4", "6"}));
}

TEST(NiceTicks, MoreTicksAllowedGiveAFinerStep) {
  // [0, 119] with up to 8 ticks: 10 would give 12, so 20 stays; [0, 30] with 8: 5 (7 ticks).
  EXPECT_DOUBLE_EQ(nice_ticks(0, 119, true, 8).step, 20);
  EXPECT_DOUBLE_EQ(nice_ticks(0, 30, true, 8).step, 5);
  EXPECT_DOUBLE_EQ(nice_ticks(0, 30, true, 16).step, 2);
  // a whole-number axis never gets a fractional step
  AxisTicks t = nice_ticks(0, 2, true, 8);
  EXPECT_DOUBLE_EQ(t.step, 1);
  EXPECT_EQ(t.labels, (Labels{"0", "1", "2"}));
}

TEST(NiceTicks, ARangeWithoutWidthIsWidenedAroundIt) {
  AxisTicks t = nice_ticks(7, 7, /*whole=*/true);  // one step: [6, 8]
  EXPECT_DOUBLE_EQ(t.lo, 6);
  EXPECT_DOUBLE_EQ(t.hi, 8);
  EXPECT_EQ(t.labels, (Labels{"6", "7", "8"}));
  t = nice_ticks(2.5, 2.5);  // a constant: 2.5 -/+ 10%
  EXPECT_DOUBLE_EQ(t.lo, 2.25);
  EXPECT_DOUBLE_EQ(t.hi, 2.75);
  EXPECT_EQ(t.labels, (Labels{"2.3", "2.4", "2.5", "2.6", "2.7"}));
  t = nice_ticks(0, 0);
  EXPECT_EQ(t.labels, (Labels{"-1.0", "-0.5", "0", "0.5", "1.0"}));
}

TEST(NiceTicks, LargeValuesGetASuffix) {
  AxisTicks t = nice_ticks(0, 1234567, true, 8);
  EXPECT_DOUBLE_EQ(t.step, 200000);
  EXPECT_EQ(t.labels, (Labels{"0", "0.2M", "0.4M", "0.6M", "0.8M", "1.0M", "1.2M"}));
  t = nice_ticks(0, 45000);
  EXPECT_EQ(t.labels, (Labels{"0", "10k", "20k", "30k", "40k"}));
  t = nice_ticks(0, 1e15);
  EXPECT_EQ(t.labels, (Labels{"0", "200T", "400T", "600T", "800T", "1000T"}));
  // the whole double range stays finite
  t = nice_ticks(-std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
  EXPECT_GE(t.values.size(), 2u);
  for (double v : t.values) EXPECT_TRUE(std::isfinite(v));
}

TEST(NiceTicks, BadRangesAreRefused) {
  EXPECT_THROW(nice_ticks(std::nan(""), 1), Error);
  EXPECT_THROW(nice_ticks(0, INFINITY), Error);
  EXPECT_THROW(nice_ticks(2, 1), Error);
  EXPECT_THROW(nice_ticks(0, 1, false, 1), Error);
}

// Advance widths of DejaVu Sans (Debian's sans-serif) at 12 px, as Chromium's canvas measureText
// reports them: the estimate must never be narrower, and not much wider.
TEST(TextWidth, IsAnUpperBoundOfTheFontCloseToIt) {
  const std::pair<const char*, double> measured[] = {{"0123456789", 76.35},
                                                     {"1.0e-5", 38.43},
                                                     {"each rank's wait for the others per step (ms)", 268.66},
                                                     {"train loss (debiased EMA, nats)", 186.16},
                                                     {"1,234 tok/s", 67.46},
                                                     {"MWmw%", 55.13},
                                                     {"abcdefghijklmnopqrstuvwxyz", 175.75},
                                                     {"ABCDEFGHIJKLMNOPQRSTUVWXYZ", 209.66},
                                                     {" .,:;'!|()[]-/", 58.78}};
  for (const auto& [s, w] : measured) {
    EXPECT_GE(text_width_px(s, 12), w) << s;
    EXPECT_LE(text_width_px(s, 12), 1.05 * w) << s;
  }
}

TEST(Chart, IsWellFormedWithRoundTicksAndEveryLabelInside) {
  ChartSeries loss{"smooth_loss", {}}, bpb{"val_bpb", {}};
  for (int s = 0; s <= 119; ++s) loss.points.push_back({s, 9.173 - (9.173 - 8.284) * s / 119.0});
  bpb.points = {{0, 3.1}, {60, 2.2}, {119, 1.9}};
  const Drawn d = parse_and_check(render_svg_chart("base-train d4", {{"loss", {loss}}, {"bpb", {bpb}}}));
  ASSERT_TRUE(d.root);
  for (const char* x : {"0", "20", "40", "60", "80", "100"}) EXPECT_EQ(d.texts.count(x), 2u) << x;  // both panels
  // the loss panel's range padded by 5%: [8.23955, 9.21745] -> 8.4 ... 9.2
  for (const char* y : {"8.4", "8.6", "8.8", "9.0", "9.2"}) EXPECT_EQ(d.texts.count(y), 1u) << y;
  for (const auto& t : d.texts) {
    EXPECT_EQ(t.find("29.750"), std::string::npos);
    EXPECT_EQ(t.find("8.284"), std::string::npos);
    EXPECT_EQ(t.find("9.173"), std::string::npos);
  }
  EXPECT_EQ(d.texts.count("base-train d4"), 1u);
  EXPECT_EQ(d.texts.count("step"), 1u);
}

TEST(Chart, OddInputsStayWellFormedAndInside) {
  const double nan = std::nan(""), inf = INFINITY;
  const std::vector<std::vector<std::pair<double, double>>> cases = {
      {},                                                               // no points
      {{5, 3.0}},                                                       // one point
      {{0, 2.5}, {1, 2.5}, {2, 2.5}},                                   // a constant
      {{0, nan}, {1, 4.0}, {2, inf}, {nan, 1.0}, {3, -inf}, {4, 3.0}},  // non-finite points skipped
      {{0, 1e-5}, {1, 3e-5}},                                           // tiny values
      {{0, 1e12}, {1, 3e12}},                                           // huge values
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const Drawn d = parse_and_check(render_svg_chart("case", {{"p", {{"s", cases[c]}}}}));
    ASSERT_TRUE(d.root) << c;
    for (const auto& t : d.texts) {
      EXPECT_EQ(t.find("nan"), std::string::npos) << c;
      EXPECT_EQ(t.find("inf"), std::string::npos) << c;
    }
  }
  EXPECT_EQ(parse_and_check(render_svg_chart("e", {{"p", {}}})).texts.count("no data yet"), 1u);
  const Drawn one = parse_and_check(render_svg_chart("one", {{"p", {{"s", {{5, 3.0}}}}}}));
  EXPECT_EQ(one.texts.count("5"), 1u);  // the step of the one point, as a whole number
  std::vector<const XmlElement*> circles;
  one.root->find_all("circle", circles);
  EXPECT_EQ(circles.size(), 1u);  // a lone point is still drawn
}

TEST(Chart, MillionsOfStepsAreThinnedAndLabelledShortly) {
  ChartSeries s{"loss", {}};
  for (int i = 0; i < 20000; ++i) s.points.push_back({i * 250.0, 3 + std::sin(i * 0.01)});
  const Drawn d = parse_and_check(render_svg_chart("long", {{"loss", {s}}}));
  ASSERT_TRUE(d.root);
  EXPECT_LE(polyline_points(*d.root), 2000u);
  EXPECT_GE(polyline_points(*d.root), 1000u);
  // 0 .. 4,999,750 with up to 8 ticks: every 1M
  for (const char* x : {"0", "1M", "2M", "3M", "4M"}) EXPECT_EQ(d.texts.count(x), 1u) << x;
}

TEST(Chart, HostileTextIsEscapedAndLongTextCut) {
  const std::string title = "a<b>&\"c\x01\xff\xc3\x28" + std::string(300, 'W');
  const Drawn d = parse_and_check(
      render_svg_chart(title, {{"p<&>", {{"r<0>", {{0, 1}, {1, 2}}}, {"r1", {}}}}}, {{0.5, "node <x> left"}}));
  ASSERT_TRUE(d.root);
  EXPECT_EQ(d.texts.count("p<&>"), 1u);
  EXPECT_EQ(d.texts.count("r<0>"), 1u);
  EXPECT_EQ(d.texts.count("node <x> left"), 1u);
  const std::string head = std::string("a<b>&\"c") + std::string(3, '?') + "(";  // three bad bytes, then '('
  bool cut = false;
  for (const auto& t : d.texts) cut |= t.rfind(head, 0) == 0 && t.size() > 3 && t.substr(t.size() - 3) == "...";
  EXPECT_TRUE(cut) << "the long title is cut with ...";
}

TEST(Chart, MarkersAndLegendsFitForManyRanks) {
  std::vector<ChartSeries> ranks;
  for (int q = 0; q < 16; ++q) ranks.push_back({std::string(1, 'r').append(std::to_string(q)), {{0, q}, {99, q + 1}}});
  const Drawn d = parse_and_check(
      render_svg_chart("job", {{"share", ranks}}, {{0, "16 ranks"}, {99, "a long marker label at the right edge"}}));
  ASSERT_TRUE(d.root);
  for (int q = 0; q < 16; ++q) EXPECT_EQ(d.texts.count(std::string(1, 'r').append(std::to_string(q))), 1u) << q;
  EXPECT_EQ(d.texts.count("a long marker label at the right edge"), 1u);
}
