#pragma once
// base_train's metrics file and the SVG chart drawn from it at the end of the run (report.svg).
// metrics.jsonl holds one JSON object per line, appended and flushed as the run goes:
//   train record  {"step", "loss", "smooth_loss", "lrm", "dt_ms", "tok_per_sec", "mfu",
//                  "comm_wait_ms"} and, when the job has W > 1 ranks, per rank (arrays of W, in
//                  rank order) "rank_rows" (its rows of the step), "rank_compute_ms",
//                  "rank_wait_ms" (blocked on the others), "rank_data_ms" (getting its rows) and
//                  "rank_tok_per_sec" (its rows x T over its step time)
//   val record    {"step", "val_bpb"} (an infinity as in checkpoint/loop_state.h)
//   membership record {"step", "membership", ...} where the job's nodes changed (e.g. "rank 2
//                  left", train/elastic.h), drawn as a marker; a change in the length of the rank
//                  arrays is marked without it
// The file is a log of what the run did: a resumed or regrouped job keeps the records up to the
// step it continues from and appends from there, so that step can hold two train records and two
// val records (the work done before, and done again). The chart (train/runs.h metrics_chart_svg,
// also what chat-web shows) keeps a step's later record: the one of the weights the run went on
// with.
// Only the writing rank (rank 0) touches the file; on the others every method does nothing.
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace nanochat {

class MetricsLog {
 public:
  /// Opens `path` for appending when `writer`. A fresh run (`resumed_step` < 0) truncates it; a
  /// resumed one keeps the records up to and including `resumed_step` (unparsable lines dropped),
  /// so the records of the steps it redoes are not doubled.
  MetricsLog(std::string path, bool writer, int64_t resumed_step);

  /// Appends one record and flushes.
  void record(const nlohmann::json& j);

  /// Closes the file and writes `svg_path` (atomically): train/runs.h metrics_chart_svg of the file,
  /// titled `title`. Throws nanochat::Error naming a file it cannot read or write.
  void write_chart(const std::string& svg_path, const std::string& title);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool writer_;
  std::ofstream out_;
};

}  // namespace nanochat
