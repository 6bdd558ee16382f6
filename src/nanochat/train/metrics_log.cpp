#include "nanochat/train/metrics_log.h"

#include <utility>
#include <vector>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/file_io.h"
#include "nanochat/train/runs.h"

using json = nlohmann::json;

namespace nanochat {

MetricsLog::MetricsLog(std::string path, bool writer, int64_t resumed_step) : path_(std::move(path)), writer_(writer) {
  if (!writer_) return;
  std::vector<std::string> keep;
  if (resumed_step >= 0) {
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      try {
        if (json::parse(line).value("step", int64_t{0}) <= resumed_step) keep.push_back(line);
      } catch (const std::exception&) {
      }
    }
  }
  {
    std::ofstream out(path_, std::ios::trunc);
    for (auto& l : keep) out << l << "\n";
  }
  out_.open(path_, std::ios::app);
}

void MetricsLog::record(const json& j) {
  if (!writer_) return;
  out_ << j.dump() << "\n";
  out_.flush();
}

void MetricsLog::write_chart(const std::string& svg_path, const std::string& title) {
  if (!writer_) return;
  out_.close();
  write_file_atomic(svg_path, metrics_chart_svg(path_, title));
}

}  // namespace nanochat
