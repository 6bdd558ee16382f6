#include "nanochat/train/runs.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

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
    r.live = static_cast<double>(now - t) <= live_window_s;
  } else if (mtime_of(dir, t)) {
    r.last_update_unix = t;
  } else {
    return false;
  }
  return true;
}

void check_tag(const std::string& tag) {
  bool bad = tag.empty() || tag.size() > 255 || tag == "." || tag == "..";
  for (unsigned char c : tag)
    if (c == '/' || c == '\\' || c < 0x20 || c == 0x7f) bad = true;
  if (bad)
    fail("run tag \"", tag.size() > 64 ? tag.substr(0, 64) + "..." : tag,
         "\" is not a folder name: give the name of one folder under base_checkpoints, chatsft_checkpoints or "
         "chatrl_checkpoints (1-255 bytes, no '/', '\\' or control characters, not \".\" or \"..\")");
}

}  // namespace

std::string run_kind_folder(const std::string& kind) {
  for (size_t k = 0; k < 3; ++k)
    if (kind == kKinds[k]) return kKindFolders[k];
  fail("unknown run kind \"", kind.size() > 64 ? kind.substr(0, 64) + "..." : kind,
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

std::string metrics_chart_svg(const std::string& metrics_path, const std::string& title) {
  std::ifstream in(metrics_path);
  if (!in) fail("cannot open ", metrics_path, " (", std::strerror(errno), ")");
  std::map<int64_t, double> lm, bm;
  for (std::string line; std::getline(in, line);) {
    try {
      json j = json::parse(line);
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number()) continue;
      const int64_t step = j["step"].get<int64_t>();
      if (j.contains("smooth_loss") && j["smooth_loss"].is_number()) lm[step] = j["smooth_loss"];
      if (j.contains("val_bpb") && j["val_bpb"].is_number()) bm[step] = j["val_bpb"];
    } catch (const std::exception&) {
    }
  }
  ChartSeries loss{"train loss (debiased EMA, nats)", {}}, bpb{"validation bpb", {}};
  for (auto& [s, v] : lm) loss.points.push_back({static_cast<double>(s), v});
  for (auto& [s, v] : bm) bpb.points.push_back({static_cast<double>(s), v});
  return render_svg_chart(title, {loss, bpb});
}

std::string run_chart_svg(const RunInfo& run) {
  const std::string title = run.kind + " " + run.tag;
  const std::string m = run.dir + "/metrics.jsonl";
  std::error_code ec;
  if (!fs::exists(m, ec)) return render_svg_chart(title + " (no metrics.jsonl yet)", {});
  return metrics_chart_svg(m, title);
}

}  // namespace nanochat
