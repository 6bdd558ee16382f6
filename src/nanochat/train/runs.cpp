#include "nanochat/train/runs.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "nanochat/core/error.h"
#include "nanochat/train/chart.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace nanochat {

namespace {

const char* const kKinds[] = {"base", "sft", "rl"};
const char* const kKindFolders[] = {"base_checkpoints", "chatsft_checkpoints", "chatrl_checkpoints"};

// Modification time in whole seconds since the epoch; false when `path` cannot be stat'ed.
bool mtime_of(const std::string& path, int64_t& out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  out = static_cast<int64_t>(st.st_mtime);
  return true;
}

// The largest "step" among the complete records of the last `tail` bytes of `path` (-1: none).
int64_t last_step_of(const std::string& path, std::streamoff tail = 64 * 1024) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return -1;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - tail);
  in.seekg(from);
  std::string line;
  if (from > 0) std::getline(in, line);  // a cut line
  int64_t best = -1;
  while (std::getline(in, line)) {
    try {
      const json j = json::parse(line);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer())
        best = std::max(best, j["step"].get<int64_t>());
    } catch (const std::exception&) {
    }
  }
  return best;
}

// A RunInfo for an existing folder; false when it vanished or is not a folder.
bool describe(const std::string& kind, const std::string& tag, const std::string& dir, double live_window_s,
              int64_t now, RunInfo& r) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  r = RunInfo{};
  r.kind = kind;
  r.tag = tag;
  r.dir = dir;
  const std::string m = dir + "/metrics.jsonl";
  int64_t t = 0;
  if (mtime_of(m, t)) {
    r.has_metrics = true;
    r.last_update_unix = t;
    r.last_step = last_step_of(m);
    int64_t report = 0;
    r.finished = mtime_of(dir + "/report.svg", report) && report >= t;
    r.live = !r.finished && static_cast<double>(now - t) <= live_window_s;
  } else if (mtime_of(dir, t)) {
    r.last_update_unix = t;
  } else {
    return false;
  }
  return true;
}

// `s` for an error message: at most 64 bytes, control characters as '?'.
std::string shown(const std::string& s) {
  std::string o = s.size() > 64 ? s.substr(0, 64) + "..." : s;
  for (char& c : o)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return o;
}

void check_tag(const std::string& tag) {
  bool bad = tag.empty() || tag.size() > 255 || tag == "." || tag == "..";
  for (unsigned char c : tag)
    if (c == '/' || c == '\\' || c < 0x20 || c == 0x7f) bad = true;
  if (bad)
    fail("run tag \"", shown(tag),
         "\" is not a folder name: give the name of one folder under base_checkpoints, chatsft_checkpoints or "
         "chatrl_checkpoints (1-255 bytes, no '/', '\\' or control characters, not \".\" or \"..\")");
}

}  // namespace

std::string run_kind_folder(const std::string& kind) {
  for (size_t k = 0; k < 3; ++k)
    if (kind == kKinds[k]) return kKindFolders[k];
  fail("unknown run kind \"", shown(kind),
       "\": use base (base_checkpoints), sft (chatsft_checkpoints) or rl (chatrl_checkpoints)");
}

std::vector<RunInfo> list_runs(const std::string& base_dir, double live_window_s) {
  std::error_code ec;
  if (!fs::is_directory(base_dir, ec))
    fail("the base folder ", base_dir,
         " does not exist or is not a folder: set NANOCHAT_BASE_DIR to the folder that holds base_checkpoints/");
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::vector<RunInfo> out;
  for (size_t k = 0; k < 3; ++k) {
    const std::string root = base_dir + "/" + kKindFolders[k];
    if (!fs::is_directory(root, ec)) continue;
    std::vector<std::string> tags;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
      tags.push_back(it->path().filename().string());
    for (const auto& tag : tags) {
      RunInfo r;
      if (describe(kKinds[k], tag, root + "/" + tag, live_window_s, now, r)) out.push_back(std::move(r));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const RunInfo& a, const RunInfo& b) {
    if (a.last_update_unix != b.last_update_unix) return a.last_update_unix > b.last_update_unix;
    if (a.kind != b.kind) {
      auto rank = [](const std::string& k) { return k == "base" ? 0 : k == "sft" ? 1 : 2; };
      return rank(a.kind) < rank(b.kind);
    }
    return a.tag < b.tag;
  });
  return out;
}

std::optional<RunInfo> find_run(const std::string& base_dir, const std::string& kind, const std::string& tag,
                                double live_window_s) {
  const std::string folder = run_kind_folder(kind);
  check_tag(tag);
  RunInfo r;
  if (!describe(kind, tag, base_dir + "/" + folder + "/" + tag, live_window_s, static_cast<int64_t>(std::time(nullptr)),
                r))
    return std::nullopt;
  return r;
}

namespace {

// What the chart draws from metrics.jsonl, per step (a later record of a step wins).
struct MetricsSeries {
  std::map<int64_t, double> loss, bpb;
  bool smooth = false;  // `loss` holds smooth_loss (else the raw loss of files without it)
  // Per step with W > 1: each rank's share (%), tok/s and wait (ms).
  std::map<int64_t, std::vector<double>> share, tok, wait;
  std::map<int64_t, std::string> membership;  // steps where the ranks changed, with what changed
};

double num_at(const json& a, size_t i) {
  return i < a.size() && a[i].is_number() ? a[i].get<double>() : std::numeric_limits<double>::quiet_NaN();
}

// One train record's rank fields into the per-rank series. Each rank's tok/s is rank_tok_per_sec,
// or for files written before that field, its rows x T over its step time (compute + wait + data),
// with T = tok_per_sec x dt / all rows.
void add_ranks(const json& j, int64_t step, MetricsSeries& m) {
  const json& rows = j["rank_rows"];
  const size_t n = rows.size();
  double all = 0;
  for (size_t q = 0; q < n; ++q) all += num_at(rows, q);
  std::vector<double> share(n), tok(n), wait(n);
  const json none = json::array();
  const json& rt = j.contains("rank_tok_per_sec") && j["rank_tok_per_sec"].is_array() ? j["rank_tok_per_sec"] : none;
  const json& rw = j.contains("rank_wait_ms") && j["rank_wait_ms"].is_array() ? j["rank_wait_ms"] : none;
  const json& rc = j.contains("rank_compute_ms") && j["rank_compute_ms"].is_array() ? j["rank_compute_ms"] : none;
  const json& rd = j.contains("rank_data_ms") && j["rank_data_ms"].is_array() ? j["rank_data_ms"] : none;
  const double T = j.value("tok_per_sec", 0.0) * j.value("dt_ms", 0.0) / 1e3 / all;
  for (size_t q = 0; q < n; ++q) {
    share[q] = 100.0 * num_at(rows, q) / all;
    wait[q] = num_at(rw, q);
    tok[q] = rt.empty() ? num_at(rows, q) * T / ((num_at(rc, q) + num_at(rw, q) + num_at(rd, q)) / 1e3) : num_at(rt, q);
  }
  m.share[step] = share;
  m.tok[step] = tok;
  m.wait[step] = wait;
}

// A later train record of `step` without ranks (the step done again by one rank) replaces what an
// earlier one of several ranks put in the per-rank series.
void drop_ranks(int64_t step, MetricsSeries& m) {
  m.share.erase(step);
  m.tok.erase(step);
  m.wait.erase(step);
}

// The series of the file; a step's later record replaces what an earlier record of that step said
// (the steps a resumed or regrouped job does again, train/metrics_log.h).
MetricsSeries read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open ", path, " (", std::error_code(errno, std::generic_category()).message(), ")");
  MetricsSeries m;
  std::map<int64_t, double> raw;
  std::map<int64_t, size_t> world;  // ranks of each train record
  for (std::string line; std::getline(in, line);) {
    try {
      const json j = json::parse(line);
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
      const int64_t step = j["step"].get<int64_t>();
      if (j.contains("smooth_loss") && j["smooth_loss"].is_number()) m.loss[step] = j["smooth_loss"].get<double>();
      if (j.contains("loss") && j["loss"].is_number()) raw[step] = j["loss"].get<double>();
      // a later evaluation of the step replaces the earlier one (an infinity: not drawn)
      if (j.contains("val_bpb"))
        m.bpb[step] = j["val_bpb"].is_number() ? j["val_bpb"].get<double>() : std::numeric_limits<double>::quiet_NaN();
      const bool ranks = j.contains("rank_rows") && j["rank_rows"].is_array() && j["rank_rows"].size() > 1;
      const bool train = j.contains("loss") || j.contains("smooth_loss");
      if (ranks) add_ranks(j, step, m);
      if (train && !ranks) drop_ranks(step, m);  // the step done again by one rank
      if (train) world[step] = ranks ? j["rank_rows"].size() : 1;
      // A record may say that the job's membership changed at its step (a node left or joined);
      // several changes at one step (a leave and a join) are all named.
      if (j.contains("membership") && j["membership"].is_string()) {
        std::string& what = m.membership[step];
        what += (what.empty() ? "" : "; ") + j["membership"].get<std::string>();
      }
    } catch (const std::exception&) {
      // a line that is not a record (e.g. the partial last line of a file being written) or holds
      // a field of another type: skipped
    }
  }
  m.smooth = !m.loss.empty();
  if (!m.smooth) m.loss = raw;
  // A change in the number of ranks between two train records is a membership change too.
  size_t prev = 0;
  for (const auto& [step, w] : world) {
    if (prev && w != prev && !m.membership.count(step))
      m.membership[step] = str_cat(prev, " -> ", w, w == 1 ? " rank" : " ranks");
    prev = w;
  }
  return m;
}

ChartSeries series_of(const std::string& name, const std::map<int64_t, double>& m) {
  ChartSeries s{name, {}};
  for (const auto& [step, v] : m) s.points.push_back({static_cast<double>(step), v});
  return s;
}

// One series per rank ("r0", "r1", ...) of a per-rank map; a rank is absent at the steps the job
// did not have it.
std::vector<ChartSeries> per_rank(const std::map<int64_t, std::vector<double>>& m) {
  std::vector<ChartSeries> out;
  for (const auto& [step, v] : m)
    for (size_t q = 0; q < v.size(); ++q) {
      while (out.size() <= q) out.push_back({std::string(1, 'r').append(std::to_string(out.size())), {}});
      out[q].points.push_back({static_cast<double>(step), v[q]});
    }
  return out;
}

}  // namespace

std::string metrics_chart_svg(const std::string& metrics_path, const std::string& title) {
  const MetricsSeries m = read_metrics(metrics_path);
  std::vector<ChartPanel> panels;
  panels.push_back({m.smooth ? "train loss (debiased EMA, nats)" : "train loss (nats)",
                    {series_of(m.smooth ? "smooth_loss" : "loss", m.loss)}});
  panels.push_back({"validation bpb", {series_of("val_bpb", m.bpb)}});
  if (!m.share.empty()) {
    panels.push_back({"each rank's share of the step's rows (%)", per_rank(m.share)});
    panels.push_back({"each rank's tokens per second", per_rank(m.tok)});
    panels.push_back({"each rank's wait for the others per step (ms)", per_rank(m.wait)});
  }
  std::vector<ChartMarker> markers;
  for (const auto& [step, what] : m.membership) markers.push_back({static_cast<double>(step), what});
  return render_svg_chart(title, panels, markers);
}

std::string run_chart_svg(const RunInfo& run) {
  const std::string title = run.kind + " " + run.tag;
  const std::string m = run.dir + "/metrics.jsonl";
  std::error_code ec;
  if (!fs::exists(m, ec)) return render_svg_chart(title + " (no metrics.jsonl yet)", {});
  return metrics_chart_svg(m, title);
}

}  // namespace nanochat
