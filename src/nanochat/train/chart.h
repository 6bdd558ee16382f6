#pragma once
// A small SVG line chart: panels stacked vertically over one shared x axis (the training step),
// each with one or more named series, round tick values and labels that stay inside the picture.
// Drawn for report.svg (train/metrics_log.h) and for a page that shows a run while it trains
// (train/runs.h).
//
// Ticks follow the "nice numbers" idea of P. Heckbert, "Nice Numbers for Graph Labels", Graphics
// Gems (1990): the distance between two ticks is 1, 2 or 5 times a power of ten. Unlike that
// method the axis is not stretched to the next round value: the ticks are the multiples of the
// step that fall inside the data's range.
#include <string>
#include <utility>
#include <vector>

namespace nanochat {

/// The ticks of one axis.
struct AxisTicks {
  double lo = 0, hi = 1;            ///< the axis range: the input's, widened when it had no width (see nice_ticks)
  double step = 1;                  ///< distance between ticks: 1, 2 or 5 x 10^k (>= 1 for a whole-number axis)
  std::vector<double> values;       ///< the multiples of `step` in [lo, hi], ascending
  std::vector<std::string> labels;  ///< values[i] as text, one format for the whole axis (axis_labels)
};

/// Round ticks for the range [lo, hi]: the smallest step of the form {1, 2, 5} x 10^k (k an integer,
/// and step >= 1 when `whole`) with at most `max_ticks` of its multiples in [lo, hi]; those
/// multiples are the ticks (for max_ticks >= 6 there are at least 2). A range without width (one
/// point, a constant series: hi - lo <= 1e-12 max(|lo|, |hi|)) is first widened to lo -/+ 10% of
/// |lo| (of at least 1 when `whole`), or to [-1, 1] at 0.
/// Examples: [0, 119] -> 0, 20, ..., 100; [0, 29.75] whole -> 0, 5, ..., 25; [8.284, 9.173] ->
/// 8.4, 8.6, 8.8, 9.0; [1e-5, 3e-5] -> 1.0e-5, 1.5e-5, ..., 3.0e-5 (all with max_ticks 6).
/// Throws nanochat::Error for a non-finite bound, lo > hi or max_ticks < 2.
AxisTicks nice_ticks(double lo, double hi, bool whole = false, int max_ticks = 6);

/// The labels of ticks `values` spaced `step` apart, with as many decimals as the step needs and no
/// more: "8.4"; from 10^4 on with a k/M/G/T suffix ("20k", "1.5M"); below 10^-3 as mantissa and
/// power of ten ("1.5e-5"); zero always as "0".
std::vector<std::string> axis_labels(const std::vector<double>& values, double step);

/// An estimate of the width in pixels of `text` (UTF-8) drawn in a sans-serif font of `font_px`
/// pixels: the advance widths of DejaVu Sans (Debian's default sans-serif, among the widest
/// common ones) plus 2%; characters outside ASCII count as 1 em, control characters as 0.
double text_width_px(const std::string& text, double font_px);

/// One named series of (x, y) points, in any order; non-finite points are skipped when drawn.
struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

/// One panel: a title (with the unit) and its series, each in its own color; a panel of several
/// series gets a legend under its title.
struct ChartPanel {
  std::string title;
  std::vector<ChartSeries> series;
};

/// A vertical line across all panels at x, labelled (e.g. a change of the job's ranks).
struct ChartMarker {
  double x = 0;
  std::string label;
};

/// The panels as a standalone SVG document (with a viewBox, so that a page may scale it). All
/// panels share one x range (of all their finite points; `x_whole`: whole-number x ticks); each has
/// its own y range, padded by 5%. A panel without finite points is drawn empty with "no data yet".
/// A series is drawn in x order; one of more than 2000 points is thinned to at most 2000: its first
/// and last point and the minimum and maximum of 999 equal buckets between. Series beyond the 10
/// colors of the palette are drawn dashed. Marker labels are written in the first panel.
/// Text is escaped, and bytes that are not valid UTF-8 or are control characters become '?'; a
/// title too wide for the picture is cut with "...". Every label fits inside the picture's width
/// by text_width_px.
std::string render_svg_chart(const std::string& title, const std::vector<ChartPanel>& panels,
                             const std::vector<ChartMarker>& markers = {}, const std::string& x_label = "step",
                             bool x_whole = true);

}  // namespace nanochat
