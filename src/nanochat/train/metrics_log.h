#pragma once
// base_train's metrics file (metrics.jsonl: one JSON object per line, train records
// {"step", "loss", "smooth_loss", ...} and val records {"step", "val_bpb"}) and the SVG chart
// drawn from it at the end of the run. Only the writing rank (rank 0) touches the file; on the
// others every method does nothing.
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

  /// Closes the file and writes `svg_path`: the train loss (smooth_loss) and val bpb series over
  /// the steps of the file (a later record of a step wins; non-numeric bpb skipped), titled `title`.
  void write_chart(const std::string& svg_path, const std::string& title);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool writer_;
  std::ofstream out_;
};

}  // namespace nanochat
