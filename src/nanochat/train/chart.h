#pragma once
// A small SVG line chart for the end-of-run report (train loss and val bpb vs step).
#include <string>
#include <utility>
#include <vector>

namespace nanochat {

/// One named series of (x, y) points.
struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

/// Renders up to a few panels (one per series, stacked vertically) as a standalone SVG document.
/// Non-finite points are skipped. An empty series renders an empty panel with its title.
std::string render_svg_chart(const std::string& title, const std::vector<ChartSeries>& panels,
                             const std::string& x_label = "step");

}  // namespace nanochat
