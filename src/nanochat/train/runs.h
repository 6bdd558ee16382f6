#pragma once
// The training runs under a base folder, for a page that lists them and redraws a run's chart
// while it trains. A run is a folder <base>/<kind folder>/<tag>/ (the layout of nanochat's
// checkpoint_manager.py, load_model's table of sources):
//   kind "base" -> base_checkpoints/<tag>     (nanochat base-train)
//   kind "sft"  -> chatsft_checkpoints/<tag>
//   kind "rl"   -> chatrl_checkpoints/<tag>
// Its training writes metrics.jsonl there (train/metrics_log.h: one JSON record per line, appended
// and flushed per step), which is all this file reads: nothing here locks, writes or waits, so a
// run that is training is read while it writes (a partial last line is skipped).
//
// Thread safety: every function is reentrant and keeps no state; a server may call them from
// several threads at once.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nanochat {

/// One run folder found under a base folder.
struct RunInfo {
  std::string kind;          ///< "base", "sft" or "rl" (the names `-i` takes)
  std::string tag;           ///< the folder's name under the kind's folder (e.g. "d20")
  std::string dir;           ///< <base>/<kind folder>/<tag>, the path as given plus the two names
  bool has_metrics = false;  ///< dir/metrics.jsonl exists
  /// The largest "step" among the records in the last 64 KiB of metrics.jsonl (the latest train
  /// or validation record); -1 when there is no metrics file or no record with a step.
  int64_t last_step = -1;
  /// Modification time of metrics.jsonl (of the folder when there is none), in whole seconds
  /// since the Unix epoch.
  int64_t last_update_unix = 0;
  /// The run ended: its training wrote report.svg (train/metrics_log.h write_chart, the last thing
  /// a run does) no earlier than the last change of metrics.jsonl. A resumed run appends to
  /// metrics.jsonl and is not finished again until it writes report.svg anew.
  bool finished = false;
  /// Not finished and metrics.jsonl was modified at most `live_window_s` seconds ago (its training
  /// is probably still writing it; a run that stopped or was killed turns false after the window,
  /// one that finished at once). The file changes once per step and evaluation: a window shorter
  /// than the longest of those shows a training run as not live between two records.
  bool live = false;
};

/// "base_checkpoints", "chatsft_checkpoints" or "chatrl_checkpoints" for "base", "sft", "rl".
/// Throws nanochat::Error naming the kind and the three valid ones otherwise.
std::string run_kind_folder(const std::string& kind);

/// Every run under `base_dir` (normally core/paths.h base_dir(), i.e. $NANOCHAT_BASE_DIR): each
/// subfolder of base_dir/{base,chatsft,chatrl}_checkpoints, with or without a metrics file.
/// Newest first (last_update_unix descending; ties by kind, then tag). A missing kind folder
/// contributes nothing; a run folder that vanishes or cannot be read while listing is left out
/// (a listing never fails because of one run). `live_window_s` >= 0 seconds (see RunInfo::live).
/// Throws nanochat::Error when `base_dir` is not an existing folder, naming it and
/// $NANOCHAT_BASE_DIR.
std::vector<RunInfo> list_runs(const std::string& base_dir, double live_window_s = 120);

/// The run `kind`/`tag` under `base_dir` as list_runs describes it, or nullopt when its folder does
/// not exist (e.g. an HTTP 404). Names come from a URL, so they are checked before any path is
/// built: throws nanochat::Error (e.g. an HTTP 400) for a kind other than base/sft/rl, or a tag that
/// is empty, longer than 255 bytes, ".", "..", or holds '/', '\\' or a control byte.
std::optional<RunInfo> find_run(const std::string& base_dir, const std::string& kind, const std::string& tag,
                                double live_window_s = 120);

/// The chart of a metrics.jsonl file as a standalone SVG document (image/svg+xml, UTF-8, with a
/// viewBox): train/metrics_log.h's report.svg, titled `title`: train loss and validation bpb per
/// step and, when the records hold several ranks, each rank's share of the rows (%), tok/s and wait
/// per step, with a marker where the ranks changed (train/chart.h draws it). Reads and parses the
/// whole file each call (about 0.2 KiB per step of one rank, 0.4 KiB of two): 20,000 steps of a
/// 2-rank job (8.9 MB) took 0.74-0.87 s on a 2-core VM shared with other jobs, so a page should
/// reload it every few seconds, not faster. A series is drawn with at most 2000 points. Lines that
/// do not parse or hold a field of another type are skipped.
/// Throws nanochat::Error naming the file when it cannot be opened.
std::string metrics_chart_svg(const std::string& metrics_path, const std::string& title);

/// metrics_chart_svg(run.dir + "/metrics.jsonl", "<kind> <tag>"), or, when the run has no metrics
/// file yet, a small SVG document that says so (never throws for a missing file).
std::string run_chart_svg(const RunInfo& run);

}  // namespace nanochat
