#pragma once
// base_train's metrics file and the SVG chart drawn from it at the end of the run (report.svg).
// metrics.jsonl holds one JSON object per line, appended and flushed as the run goes:
//   train record  {"step", "loss", "smooth_loss", "lrm", "dt_ms", "tok_per_sec", "mfu",
//                  "comm_wait_ms"} and, when the job has W > 1 ranks, per rank (arrays of W, in
//                  rank order) "rank_rows" (its rows of the step), "rank_compute_ms",
//                  "rank_wait_ms" (blocked on the others), "rank_data_ms" (getting its rows) and
//                  "rank_tok_per_sec" (its rows x T over its step time)
//   val record    {"step", "val_bpb"} (an infinity as in checkpoint/loop_state.h)
// The chart (train/runs.h metrics_chart_svg) also reads "membership": a text a record may carry at
// the step the job's nodes changed (e.g. "node 2 left"), drawn as a marker; nothing writes it yet,
// and a change in the length of the rank arrays is marked without it.
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
