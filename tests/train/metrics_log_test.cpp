// metrics.jsonl: a fresh run truncates, a resumed one keeps the records up to its step, records
// append, and the chart is drawn from the file.
#include "nanochat/train/metrics_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace fs = std::filesystem;
using namespace nanochat;

namespace {
std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}
}  // namespace

TEST(MetricsLog, ResumeKeepsTheRecordsUpToItsStepAndAppends) {
  const std::string dir = (fs::temp_directory_path() / "nc_metrics_log_test").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/metrics.jsonl";
  {
    std::ofstream out(path);
    out << "{\"step\":1,\"smooth_loss\":3.0}\n{\"step\":2,\"val_bpb\":1.5}\nnot "
           "json\n{\"step\":3,\"smooth_loss\":2.0}\n";
  }
  {
    MetricsLog log(path, /*writer=*/true, /*resumed_step=*/2);
    log.record({{"step", 3}, {"smooth_loss", 2.5}});
    log.write_chart(dir + "/report.svg", "base-train t");
  }
  EXPECT_EQ(lines_of(path),
            (std::vector<std::string>{"{\"step\":1,\"smooth_loss\":3.0}", "{\"step\":2,\"val_bpb\":1.5}",
                                      "{\"smooth_loss\":2.5,\"step\":3}"}));
  std::stringstream svg;
  svg << std::ifstream(dir + "/report.svg").rdbuf();
  EXPECT_NE(svg.str().find("base-train t"), std::string::npos);
  { MetricsLog other(path, /*writer=*/false, -1); }  // not the writing rank: the file stays
  EXPECT_EQ(lines_of(path).size(), 3u);
  { MetricsLog fresh(path, /*writer=*/true, -1); }  // a fresh run starts an empty file
  EXPECT_TRUE(lines_of(path).empty());
  fs::remove_all(dir);
}
