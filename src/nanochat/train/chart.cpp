#include "nanochat/train/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace nanochat {

namespace {
std::string num(double v) {
  char b[32];
  if (std::fabs(v) >= 1000 || (std::fabs(v) < 0.01 && v != 0))
    std::snprintf(b, sizeof b, "%.3g", v);
  else
    std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}
std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}
}  // namespace

std::string render_svg_chart(const std::string& title, const std::vector<ChartSeries>& panels,
                             const std::string& x_label) {
  const double W = 720, PH = 260, top = 40, left = 70, right = 20, gap = 50;
  const double H = top + panels.size() * (PH + gap);
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"16\">" << esc(title) << "</text>\n";
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  for (size_t pi = 0; pi < panels.size(); ++pi) {
    const auto& s = panels[pi];
    const double y0 = top + pi * (PH + gap), pw = W - left - right, ph = PH - 30;
    std::vector<std::pair<double, double>> pts;
    for (auto& p : s.points)
      if (std::isfinite(p.first) && std::isfinite(p.second)) pts.push_back(p);
    o << "<text x=\"" << left << "\" y=\"" << y0 + 12 << "\" font-weight=\"bold\">" << esc(s.name) << "</text>\n";
    o << "<rect x=\"" << left << "\" y=\"" << y0 + 20 << "\" width=\"" << pw << "\" height=\"" << ph
      << "\" fill=\"none\" stroke=\"#888\"/>\n";
    if (pts.empty()) continue;
    double xmin = pts.front().first, xmax = xmin, ymin = pts.front().second, ymax = ymin;
    for (auto& p : pts) {
      xmin = std::min(xmin, p.first);
      xmax = std::max(xmax, p.first);
      ymin = std::min(ymin, p.second);
      ymax = std::max(ymax, p.second);
    }
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax == ymin) {
      ymax += 0.5;
      ymin -= 0.5;
    }
    const double pad = 0.05 * (ymax - ymin);
    ymin -= pad;
    ymax += pad;
    auto X = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
    auto Y = [&](double y) { return y0 + 20 + (ymax - y) / (ymax - ymin) * ph; };
    for (int t = 0; t <= 4; ++t) {
      const double yv = ymin + (ymax - ymin) * t / 4.0, xv = xmin + (xmax - xmin) * t / 4.0;
      o << "<text x=\"" << left - 6 << "\" y=\"" << Y(yv) + 4 << "\" text-anchor=\"end\">" << num(yv) << "</text>\n";
      o << "<text x=\"" << X(xv) << "\" y=\"" << y0 + 20 + ph + 16 << "\" text-anchor=\"middle\">" << num(xv)
        << "</text>\n";
      o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << Y(yv) << "\" y2=\"" << Y(yv)
        << "\" stroke=\"#eee\"/>\n";
    }
    o << "<polyline fill=\"none\" stroke-width=\"1.8\" stroke=\"" << colors[pi % 4] << "\" points=\"";
    for (auto& p : pts) o << X(p.first) << "," << Y(p.second) << " ";
    o << "\"/>\n";
    if (pts.size() < 40)
      for (auto& p : pts)
        o << "<circle cx=\"" << X(p.first) << "\" cy=\"" << Y(p.second) << "\" r=\"3\" fill=\"" << colors[pi % 4]
          << "\"/>\n";
    o << "<text x=\"" << left + pw / 2 << "\" y=\"" << y0 + 20 + ph + 30 << "\" text-anchor=\"middle\" fill=\"#555\">"
      << esc(x_label) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace nanochat
