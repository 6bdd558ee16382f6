#include "nanochat/train/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "nanochat/core/error.h"

namespace nanochat {

AxisTicks nice_ticks(double lo, double hi, bool whole, int max_ticks) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi || max_ticks < 2)
    fail("nice_ticks needs finite lo <= hi and max_ticks >= 2 (got [", lo, ", ", hi, "], ", max_ticks, ")");
  if (hi - lo <= 1e-12 * std::max(std::fabs(lo), std::fabs(hi))) {
    double d = lo == 0 ? 1.0 : 0.1 * std::fabs(lo);
    if (whole) d = std::max(d, 1.0);
    lo -= d;
    hi += d;
  }
  AxisTicks t;
  t.lo = lo;
  t.hi = hi;
  // Half the span, which stays finite even for [-DBL_MAX, DBL_MAX].
  const double half = hi / 2 - lo / 2;
  int k = static_cast<int>(std::floor(std::log10(2 * (half / max_ticks)))) - 1;
  const double mantissas[] = {1, 2, 5};
  const double eps = 1e-9;
  for (;; ++k) {
    for (double m : mantissas) {
      const double s = m * std::pow(10.0, k);
      if (whole && s < 1) continue;
      const double first = std::ceil(lo / s - eps), last = std::floor(hi / s + eps);
      if (last - first + 1 > max_ticks) continue;
      t.step = s;
      for (double i = first; i <= last; ++i) t.values.push_back(std::fabs(i) < 0.5 ? 0.0 : i * s);
      t.labels = axis_labels(t.values, s);
      return t;
    }
  }
}

std::vector<std::string> axis_labels(const std::vector<double>& values, double step) {
  double amax = 0;
  for (double v : values) amax = std::max(amax, std::fabs(v));
  const int k = static_cast<int>(std::floor(std::log10(step) + 1e-9));  // step = m x 10^k
  int power = 0;                                                        // the value printed is v / 10^power
  std::string suffix;
  if (amax >= 1e4) {
    const char* names[] = {"k", "M", "G", "T"};
    const int p = std::min(4, static_cast<int>(std::floor(std::log10(amax) + 1e-9)) / 3);
    power = 3 * p;
    suffix = names[p - 1];
  } else if (amax > 0 && amax < 1e-3) {
    power = static_cast<int>(std::floor(std::log10(amax) + 1e-9));
    suffix = std::string(1, 'e').append(std::to_string(power));
  }
  const int decimals = std::max(0, power - k);
  std::vector<std::string> out;
  for (double v : values) {
    if (std::fabs(v) < 1e-6 * step) {
      out.push_back("0");
      continue;
    }
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", decimals, v / std::pow(10.0, power));
    out.push_back(b + suffix);
  }
  return out;
}

double text_width_px(const std::string& text, double font_px) {
  // Advance widths of DejaVu Sans in 1/1000 em for the characters 32 (space) to 126 ('~'), as
  // Chromium's canvas measureText reports them for that font.
  static const int kAdvance[95] = {
      318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361,  318, 337, 636, 636, 636,
      636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632,
      575, 775, 752, 295, 295, 656, 557, 863, 748, 787, 603, 787, 695, 635,  611, 732, 684, 989, 685,
      611, 685, 390, 337, 390, 838, 500, 500, 613, 635, 550, 635, 615, 352,  635, 634, 278, 278, 579,
      278, 974, 634, 612, 635, 635, 411, 521, 392, 634, 592, 818, 592, 592,  525, 636, 337, 636, 838,
  };
  double em = 0;
  for (unsigned char c : text) {
    if (c >= 0x80) {
      if ((c & 0xC0) != 0x80) em += 1.0;  // one per code point (its lead byte)
    } else if (c >= 32 && c <= 126) {
      em += kAdvance[c - 32] / 1000.0;
    }
  }
  return 1.02 * em * font_px;  // 2% over the font, for rounding and hinting
}

namespace {

constexpr double kWidth = 760, kFont = 12, kTitleFont = 16;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// Text content for XML: escaped, with control characters and bytes that are not UTF-8 as '?'.
std::string esc(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '<')
        o += "&lt;";
      else if (c == '>')
        o += "&gt;";
      else if (c == '&')
        o += "&amp;";
      else if (c == '"')
        o += "&quot;";
      else if (c < 0x20 || c == 0x7f)
        o += '?';
      else
        o += static_cast<char>(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence: lead byte, then n continuation bytes, no overlong form, no surrogate.
    const int n = (c >= 0xC2 && c <= 0xDF) ? 1 : (c >= 0xE0 && c <= 0xEF) ? 2 : (c >= 0xF0 && c <= 0xF4) ? 3 : -1;
    bool ok = n > 0;
    for (int j = 1; ok && j <= n; ++j) ok = i + j < s.size() && (static_cast<unsigned char>(s[i + j]) & 0xC0) == 0x80;
    if (ok && n >= 2) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
          (c == 0xF4 && c1 >= 0x90))
        ok = false;
    }
    if (!ok) {
      o += '?';
      ++i;
      continue;
    }
    o.append(s, i, static_cast<size_t>(n) + 1);
    i += static_cast<size_t>(n) + 1;
  }
  return o;
}

// `s` cut (at a character boundary) with "..." so that it is at most `max_px` wide.
std::string fit(const std::string& s, double font_px, double max_px) {
  if (text_width_px(s, font_px) <= max_px) return s;
  std::string cut = s;
  while (!cut.empty() && text_width_px(cut + "...", font_px) > max_px) {
    size_t n = cut.size() - 1;
    while (n > 0 && (static_cast<unsigned char>(cut[n]) & 0xC0) == 0x80) --n;  // back to a lead byte
    cut.resize(n);
  }
  return cut + "...";
}

std::string f1(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// The finite points of a series in x order, thinned when over 2000 to the first and last point
// and the minimum and maximum of 999 buckets between.
std::vector<std::pair<double, double>> drawable(const ChartSeries& s) {
  std::vector<std::pair<double, double>> p;
  for (const auto& q : s.points)
    if (std::isfinite(q.first) && std::isfinite(q.second)) p.push_back(q);
  std::stable_sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (p.size() <= 2000) return p;
  std::vector<std::pair<double, double>> out = {p.front()};
  const size_t buckets = 999, n = p.size() - 2;  // the points between the first and the last
  for (size_t b = 0; b < buckets; ++b) {
    const size_t from = 1 + b * n / buckets, to = 1 + (b + 1) * n / buckets;
    size_t lo = from, hi = from;
    for (size_t i = from; i < to; ++i) {
      if (p[i].second < p[lo].second) lo = i;
      if (p[i].second > p[hi].second) hi = i;
    }
    out.push_back(p[std::min(lo, hi)]);
    if (lo != hi) out.push_back(p[std::max(lo, hi)]);
  }
  out.push_back(p.back());
  return out;
}

struct Legend {
  std::vector<std::vector<size_t>> rows;  // series indices per row
};

// The legend's rows: items of a swatch and the name, flowing left to right within `width`.
Legend layout_legend(const ChartPanel& p, double width) {
  Legend l;
  if (p.series.size() < 2) return l;
  double x = 0;
  l.rows.emplace_back();
  for (size_t i = 0; i < p.series.size(); ++i) {
    const double w = 22 + text_width_px(p.series[i].name, kFont) + 14;
    if (x > 0 && x + w > width) {
      l.rows.emplace_back();
      x = 0;
    }
    l.rows.back().push_back(i);
    x += w;
  }
  return l;
}

// The stroke of series `i`: the palette's color, dashed from the palette's second round on.
std::string stroke_of(size_t i, double width) {
  std::string s = str_cat("stroke-width=\"", width, "\" stroke=\"", kColors[i % 10], "\"");
  if (i >= 10) s += i >= 20 ? " stroke-dasharray=\"1.5,2\"" : " stroke-dasharray=\"6,3\"";
  return s;
}

// Where one panel's parts go: the plot's left edge, width and height, and the shared x axis.
struct Frame {
  double left, pw, ph;
  AxisTicks xt;
  double X(double x) const { return left + (x - xt.lo) / (xt.hi - xt.lo) * pw; }
};

// The legend rows from `y`; returns the y under them.
double draw_legend(std::ostringstream& o, const ChartPanel& p, const Legend& legend, double left, double y) {
  for (const auto& row : legend.rows) {
    double lx = left;
    for (size_t i : row) {
      o << "<line x1=\"" << f1(lx) << "\" x2=\"" << f1(lx + 16) << "\" y1=\"" << f1(y + 8) << "\" y2=\"" << f1(y + 8)
        << "\" " << stroke_of(i, 3) << "/>\n"
        << "<text x=\"" << f1(lx + 22) << "\" y=\"" << f1(y + 12) << "\">" << esc(p.series[i].name) << "</text>\n";
      lx += 22 + text_width_px(p.series[i].name, kFont) + 14;
    }
    y += 16;
  }
  return y;
}

// The frame, x grid and x tick labels of a plot spanning [top, bottom], and the markers' lines.
void draw_x_axis(std::ostringstream& o, const Frame& f, double top, double bottom,
                 const std::vector<ChartMarker>& markers) {
  o << "<rect x=\"" << f.left << "\" y=\"" << f1(top) << "\" width=\"" << f.pw << "\" height=\"" << f.ph
    << "\" fill=\"none\" stroke=\"#888\"/>\n";
  for (size_t i = 0; i < f.xt.values.size(); ++i) {
    const double x = f.X(f.xt.values[i]);
    o << "<line x1=\"" << f1(x) << "\" x2=\"" << f1(x) << "\" y1=\"" << f1(top) << "\" y2=\"" << f1(bottom)
      << "\" stroke=\"#eee\"/>\n"
      << "<text x=\"" << f1(x) << "\" y=\"" << f1(bottom + 16) << "\" text-anchor=\"middle\">" << f.xt.labels[i]
      << "</text>\n";
  }
  for (const auto& m : markers)
    if (std::isfinite(m.x) && m.x >= f.xt.lo && m.x <= f.xt.hi)
      o << "<line x1=\"" << f1(f.X(m.x)) << "\" x2=\"" << f1(f.X(m.x)) << "\" y1=\"" << f1(top) << "\" y2=\""
        << f1(bottom) << "\" stroke=\"#555\" stroke-dasharray=\"4,3\"/>\n";
}

// The markers' labels at the top of a plot, over the lines (a white halo keeps them readable).
void draw_marker_labels(std::ostringstream& o, const Frame& f, double top, const std::vector<ChartMarker>& markers) {
  for (const auto& m : markers) {
    if (!std::isfinite(m.x) || m.x < f.xt.lo || m.x > f.xt.hi) continue;
    const double x = f.X(m.x);
    const std::string label = fit(m.label, 10, f.pw - 6);
    const bool flip = x + 3 + text_width_px(label, 10) > f.left + f.pw;
    o << "<text x=\"" << f1(flip ? x - 3 : x + 3) << "\" y=\"" << f1(top + 11)
      << "\" font-size=\"10\" fill=\"#333\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\""
      << (flip ? " text-anchor=\"end\"" : "") << ">" << esc(label) << "</text>\n";
  }
}

// The y grid, y tick labels and the series' lines (and dots, for short series) of a plot from `top`.
void draw_series(std::ostringstream& o, const Frame& f, const AxisTicks& t, double top,
                 const std::vector<std::vector<std::pair<double, double>>>& pts) {
  auto Y = [&](double y) { return top + (t.hi - y) / (t.hi - t.lo) * f.ph; };
  for (size_t i = 0; i < t.values.size(); ++i) {
    const double y = Y(t.values[i]);
    o << "<line x1=\"" << f.left << "\" x2=\"" << f.left + f.pw << "\" y1=\"" << f1(y) << "\" y2=\"" << f1(y)
      << "\" stroke=\"#eee\"/>\n"
      << "<text x=\"" << f.left - 6 << "\" y=\"" << f1(y + 4) << "\" text-anchor=\"end\">" << t.labels[i]
      << "</text>\n";
  }
  for (size_t si = 0; si < pts.size(); ++si) {
    const auto& s = pts[si];
    if (s.size() > 1) {
      o << "<polyline fill=\"none\" " << stroke_of(si, 1.6) << " points=\"";
      for (const auto& [x, y] : s) o << f1(f.X(x)) << "," << f1(Y(y)) << " ";
      o << "\"/>\n";
    }
    if (s.size() <= 40)
      for (const auto& [x, y] : s)
        o << "<circle cx=\"" << f1(f.X(x)) << "\" cy=\"" << f1(Y(y)) << "\" r=\"2.5\" fill=\"" << kColors[si % 10]
          << "\"/>\n";
  }
}

// One panel whose title row starts at `y0` (markers labelled when `label_markers`, the x axis named
// when `x_label`); returns where the next panel starts.
double draw_panel(std::ostringstream& o, const ChartPanel& p,
                  const std::vector<std::vector<std::pair<double, double>>>& pts, const AxisTicks* yt,
                  const Legend& legend, const Frame& f, double y0, const std::vector<ChartMarker>& markers,
                  bool label_markers, const std::string* x_label) {
  o << "<text x=\"" << f.left << "\" y=\"" << y0 + 14 << "\" font-weight=\"bold\">"
    << esc(fit(p.title, kFont * 1.1, kWidth - f.left - 10)) << "</text>\n";
  const double top = draw_legend(o, p, legend, f.left, y0 + 22) + 4, bottom = top + f.ph;
  draw_x_axis(o, f, top, bottom, markers);
  if (x_label)
    o << "<text x=\"" << f1(f.left + f.pw / 2) << "\" y=\"" << f1(bottom + 34)
      << "\" text-anchor=\"middle\" fill=\"#555\">" << esc(*x_label) << "</text>\n";
  if (yt)
    draw_series(o, f, *yt, top, pts);
  else
    o << "<text x=\"" << f1(f.left + f.pw / 2) << "\" y=\"" << f1(top + f.ph / 2)
      << "\" text-anchor=\"middle\" fill=\"#888\">no data yet</text>\n";
  if (label_markers) draw_marker_labels(o, f, top, markers);
  return bottom + 44;
}

}  // namespace

std::string render_svg_chart(const std::string& title, const std::vector<ChartPanel>& panels,
                             const std::vector<ChartMarker>& markers, const std::string& x_label, bool x_whole) {
  // The shared x range, and each panel's drawable points and y ticks.
  std::vector<std::vector<std::vector<std::pair<double, double>>>> pts(panels.size());
  std::vector<AxisTicks> yt(panels.size());
  std::vector<bool> has(panels.size(), false);
  double xmin = INFINITY, xmax = -INFINITY;
  for (size_t pi = 0; pi < panels.size(); ++pi) {
    double ymin = INFINITY, ymax = -INFINITY;
    for (const auto& s : panels[pi].series) {
      pts[pi].push_back(drawable(s));
      for (const auto& [x, y] : pts[pi].back()) {
        xmin = std::min(xmin, x);
        xmax = std::max(xmax, x);
        ymin = std::min(ymin, y);
        ymax = std::max(ymax, y);
      }
    }
    has[pi] = ymin <= ymax;
    if (has[pi]) {
      const double pad = 0.05 * (ymax / 2 - ymin / 2) * 2;
      yt[pi] = std::isfinite(pad) && ymax > ymin ? nice_ticks(ymin - pad, ymax + pad) : nice_ticks(ymin, ymax);
    }
  }
  Frame f;
  f.xt = xmin <= xmax ? nice_ticks(xmin, xmax, x_whole, 8) : nice_ticks(0, 1, x_whole, 8);
  // Margins from the widest y label and half the last x label.
  double ylab = 0;
  for (size_t pi = 0; pi < panels.size(); ++pi)
    for (const auto& l : yt[pi].labels) ylab = std::max(ylab, text_width_px(l, kFont));
  f.left = std::max(44.0, std::ceil(ylab) + 14);
  const double right = std::max(18.0, std::ceil(text_width_px(f.xt.labels.back(), kFont) / 2) + 6);
  f.pw = kWidth - f.left - right;
  f.ph = 170;

  std::vector<Legend> legends;
  double height = 40;
  for (const auto& p : panels) {
    legends.push_back(layout_legend(p, f.pw));
    height += 22 + 16.0 * static_cast<double>(legends.back().rows.size()) + f.ph + 44;
  }
  if (panels.empty()) height += 20;

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height << "\" viewBox=\"0 0 "
    << kWidth << " " << height << "\" font-family=\"sans-serif\" font-size=\"" << kFont << "\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kWidth / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"" << kTitleFont << "\">"
    << esc(fit(title, kTitleFont, kWidth - 20)) << "</text>\n";
  double y0 = 40;
  for (size_t pi = 0; pi < panels.size(); ++pi)
    y0 = draw_panel(o, panels[pi], pts[pi], has[pi] ? &yt[pi] : nullptr, legends[pi], f, y0, markers, pi == 0,
                    pi + 1 == panels.size() ? &x_label : nullptr);
  o << "</svg>\n";
  return o.str();
}

}  // namespace nanochat
