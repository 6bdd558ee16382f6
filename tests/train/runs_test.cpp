// The runs under a base folder (kind, tag, last step, last update, live) on a folder tree made
// here with chosen modification times, the checks on names that come from a URL, and the chart of
// a metrics.jsonl: the ranks' panels for a job of 2 or 3 ranks and not for one, each rank's tok/s
// recorded or derived alike, and a change of the ranks marked.
#include "nanochat/train/runs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "nanochat/core/error.h"
#include "nanochat/train/metrics_log.h"
#include "support/temp_dir.h"
#include "support/xml_lite.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace nanochat;

namespace {

using nctest::TempDir;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

void set_mtime(const std::string& path, int64_t unix_seconds) {
  struct timespec ts[2];
  ts[0].tv_sec = ts[1].tv_sec = static_cast<time_t>(unix_seconds);
  ts[0].tv_nsec = ts[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, 0), 0) << path;
}

std::multiset<std::string> texts_of(const std::string& svg) {
  std::multiset<std::string> out;
  std::unique_ptr<nctest::XmlElement> root;
  try {
    root = nctest::XmlLite::parse(svg);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
    return out;
  }
  std::vector<const nctest::XmlElement*> t;
  root->find_all("text", t);
  for (const auto* e : t) out.insert(e->text);
  return out;
}

// Train records of `steps` steps of a job whose ranks get rows `rows` (W = rows.size()).
std::string records(int64_t from, int64_t to, const std::vector<int>& rows, bool with_tok = true) {
  std::string out;
  for (int64_t s = from; s < to; ++s) {
    json r = {
        {"step", s}, {"loss", 5.0 - 0.01 * s}, {"smooth_loss", 5.0 - 0.01 * s}, {"dt_ms", 1000.0}, {"tok_per_sec", 16}};
    if (rows.size() > 1) {
      // T = 16 tok/s x 1 s / 4 rows = 4; rank q: rows[q] x 4 tokens in (q ? 500 : 1000) ms
      json rr = json::array(), c = json::array(), w = json::array(), d = json::array(), tk = json::array();
      for (size_t q = 0; q < rows.size(); ++q) {
        const double ms = q ? 500 : 1000;
        rr.push_back(rows[q]);
        c.push_back(0.5 * ms);
        w.push_back(0.4 * ms);
        d.push_back(0.1 * ms);
        tk.push_back(rows[q] * 4 / (ms / 1e3));
      }
      r["rank_rows"] = rr;
      r["rank_compute_ms"] = c;
      r["rank_wait_ms"] = w;
      r["rank_data_ms"] = d;
      if (with_tok) r["rank_tok_per_sec"] = tk;
    }
    out += r.dump() + "\n";
  }
  return out;
}

const char* const kSharePanel = "each rank's share of the step's rows (%)";

}  // namespace

TEST(Runs, ListsEachKindsFoldersNewestFirstWithLastStepAndLiveness) {
  TempDir t("nc_runs_list");
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  const std::string b = t.dir;
  write(b + "/base_checkpoints/d4/metrics.jsonl",
        records(0, 6, {1}) + "{\"step\":5,\"val_bpb\":2.5}\n{\"step\":6,\"lo");  // a partial last line
  set_mtime(b + "/base_checkpoints/d4/metrics.jsonl", now - 10);
  write(b + "/chatsft_checkpoints/s1/metrics.jsonl", "{\"step\":3,\"loss\":1.0}\n{\"step\":7,\"val_bpb\":1.5}\n");
  set_mtime(b + "/chatsft_checkpoints/s1/metrics.jsonl", now - 3600);
  fs::create_directories(b + "/chatrl_checkpoints/r");  // no metrics yet
  set_mtime(b + "/chatrl_checkpoints/r", now - 7200);
  write(b + "/base_checkpoints/notes.txt", "a file, not a run");
  fs::create_directories(b + "/other_checkpoints/x");  // not a kind's folder

  const std::vector<RunInfo> runs = list_runs(b, 120);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].kind, "base");
  EXPECT_EQ(runs[0].tag, "d4");
  EXPECT_EQ(runs[0].dir, b + "/base_checkpoints/d4");
  EXPECT_TRUE(runs[0].has_metrics);
  EXPECT_EQ(runs[0].last_step, 5);
  EXPECT_EQ(runs[0].last_update_unix, now - 10);
  EXPECT_TRUE(runs[0].live);
  EXPECT_EQ(runs[1].kind, "sft");
  EXPECT_EQ(runs[1].tag, "s1");
  EXPECT_EQ(runs[1].last_step, 7);
  EXPECT_EQ(runs[1].last_update_unix, now - 3600);
  EXPECT_FALSE(runs[1].live);
  EXPECT_EQ(runs[2].kind, "rl");
  EXPECT_FALSE(runs[2].has_metrics);
  EXPECT_EQ(runs[2].last_step, -1);
  EXPECT_EQ(runs[2].last_update_unix, now - 7200);
  EXPECT_FALSE(runs[2].live);
  EXPECT_FALSE(runs[0].finished);
  // a window shorter than the age: not live
  EXPECT_FALSE(list_runs(b, 5)[0].live);
  // report.svg written at the end of the run: finished, not live, however recent
  write(b + "/base_checkpoints/d4/report.svg", "<svg/>");
  set_mtime(b + "/base_checkpoints/d4/report.svg", now - 5);
  EXPECT_TRUE(list_runs(b, 120)[0].finished);
  EXPECT_FALSE(list_runs(b, 120)[0].live);
  // resumed: metrics.jsonl newer than report.svg again, live and not finished
  set_mtime(b + "/base_checkpoints/d4/metrics.jsonl", now - 1);
  EXPECT_FALSE(list_runs(b, 120)[0].finished);
  EXPECT_TRUE(list_runs(b, 120)[0].live);
  set_mtime(b + "/base_checkpoints/d4/metrics.jsonl", now - 10);
  // ties in time: by kind, then tag
  write(b + "/chatsft_checkpoints/a/metrics.jsonl", "");
  write(b + "/base_checkpoints/z/metrics.jsonl", "");
  set_mtime(b + "/chatsft_checkpoints/a/metrics.jsonl", now - 10);
  set_mtime(b + "/base_checkpoints/z/metrics.jsonl", now - 10);
  const auto tied = list_runs(b);
  ASSERT_EQ(tied.size(), 5u);
  EXPECT_EQ(tied[0].tag + tied[1].tag + tied[2].tag, "d4za");
  EXPECT_EQ(tied[2].kind, "sft");
}

TEST(Runs, LastStepReadsOnlyTheTailOfALongFile) {
  TempDir t("nc_runs_tail");
  const std::string m = t.dir + "/base_checkpoints/long/metrics.jsonl";
  write(m, records(0, 3000, {1}));
  ASSERT_GT(fs::file_size(m), 3u * 64 * 1024);
  const auto r = find_run(t.dir, "base", "long");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->last_step, 2999);
}

TEST(Runs, NamesFromAUrlAreCheckedBeforeAnyPathIsBuilt) {
  TempDir t("nc_runs_names");
  fs::create_directories(t.dir + "/base_checkpoints/d4");
  EXPECT_TRUE(find_run(t.dir, "base", "d4"));
  EXPECT_FALSE(find_run(t.dir, "base", "d5"));
  EXPECT_FALSE(find_run(t.dir, "sft", "d4"));
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "../base_checkpoints", "a/b", "a\\b",
                                                         std::string("a\nb"), std::string(256, 'x')})
    EXPECT_THROW(find_run(t.dir, "base", bad), Error) << bad;
  try {
    find_run(t.dir, "mid", "d4");
    ADD_FAILURE() << "an unknown kind was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("base (base_checkpoints), sft (chatsft_checkpoints) or rl"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(run_kind_folder("rl"), "chatrl_checkpoints");
  try {
    list_runs(t.dir + "/missing");
    ADD_FAILURE() << "a missing base folder was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(t.dir + "/missing"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("NANOCHAT_BASE_DIR"), std::string::npos) << e.what();
  }
}

TEST(RunChart, RanksPanelsForTwoOrThreeRanksAndNotForOne) {
  TempDir t("nc_runs_chart");
  const std::string m = t.dir + "/metrics.jsonl";
  write(m, records(0, 20, {1}));
  auto one = texts_of(metrics_chart_svg(m, "base one"));
  EXPECT_EQ(one.count("train loss (debiased EMA, nats)"), 1u);
  EXPECT_EQ(one.count("validation bpb"), 1u);
  EXPECT_EQ(one.count(kSharePanel), 0u);
  EXPECT_EQ(one.count("r0"), 0u);

  write(m, records(0, 20, {3, 1}));
  auto two = texts_of(metrics_chart_svg(m, "base two"));
  EXPECT_EQ(two.count(kSharePanel), 1u);
  EXPECT_EQ(two.count("each rank's tokens per second"), 1u);
  EXPECT_EQ(two.count("each rank's wait for the others per step (ms)"), 1u);
  EXPECT_EQ(two.count("r0"), 3u);  // one legend per ranks panel
  EXPECT_EQ(two.count("r1"), 3u);
  EXPECT_EQ(two.count("r2"), 0u);
  // shares 75% and 25% padded by 5%: [22.5, 77.5] -> 30, 40, ..., 70; tok/s 12 and 8 -> 8, 9, ..., 12
  for (const char* y : {"30", "40", "50", "60", "70", "8", "9", "10", "11", "12"}) EXPECT_GE(two.count(y), 1u) << y;

  write(m, records(0, 20, {2, 1, 1}));
  auto three = texts_of(metrics_chart_svg(m, "base three"));
  EXPECT_EQ(three.count(kSharePanel), 1u);
  EXPECT_EQ(three.count("r2"), 3u);
}

TEST(RunChart, EachRanksTokPerSecondIsDerivedForOlderFilesAsRecorded) {
  TempDir t("nc_runs_tok");
  const std::string a = t.dir + "/a.jsonl", b = t.dir + "/b.jsonl";
  write(a, records(0, 10, {3, 1}, /*with_tok=*/true));
  write(b, records(0, 10, {3, 1}, /*with_tok=*/false));
  EXPECT_EQ(metrics_chart_svg(a, "x"), metrics_chart_svg(b, "x"));
}

TEST(RunChart, AChangeOfTheRanksIsMarked) {
  TempDir t("nc_runs_members");
  const std::string m = t.dir + "/metrics.jsonl";
  write(m, records(0, 10, {1, 1, 1}) + records(10, 15, {1, 1}) + "{\"step\":15,\"membership\":\"node 2 joined\"}\n" +
               records(15, 20, {1, 1, 1}) + records(20, 25, {1}));
  auto texts = texts_of(metrics_chart_svg(m, "x"));
  EXPECT_EQ(texts.count("3 -> 2 ranks"), 1u);
  EXPECT_EQ(texts.count("node 2 joined"), 1u);  // said by the record, in place of "2 -> 3 ranks"
  EXPECT_EQ(texts.count("3 -> 1 rank"), 1u);    // a resumed run on one rank writes no rank fields
  EXPECT_EQ(texts.count("2 -> 3 ranks"), 0u);
}

TEST(RunChart, ARunWithoutMetricsAndUnreadableLinesStillDraw) {
  TempDir t("nc_runs_empty");
  fs::create_directories(t.dir + "/chatrl_checkpoints/new");
  const auto r = find_run(t.dir, "rl", "new");
  ASSERT_TRUE(r);
  auto texts = texts_of(run_chart_svg(*r));
  EXPECT_EQ(texts.count("rl new (no metrics.jsonl yet)"), 1u);
  EXPECT_THROW(metrics_chart_svg(t.dir + "/none.jsonl", "x"), Error);
  write(t.dir + "/chatrl_checkpoints/new/metrics.jsonl",
        "garbage\n{\"step\":\"x\"}\n{\"step\":1,\"smooth_loss\":\"a\"}\n[1,2]\n{\"step\":2,\"smooth_loss\":3.5,"
        "\"rank_rows\":[1,\"z\"],\"tok_per_sec\":\"q\"}\n{\"step\":3,\"smooth_loss\":3.0}\n{\"step\":4,\"smo");
  texts = texts_of(run_chart_svg(*find_run(t.dir, "rl", "new")));
  EXPECT_EQ(texts.count("rl new"), 1u);
}

// report.svg at the end of a run is the same chart.
TEST(RunChart, ReportSvgIsTheChartOfTheMetricsFile) {
  TempDir t("nc_runs_report");
  const std::string m = t.dir + "/metrics.jsonl";
  {
    MetricsLog log(m, /*writer=*/true, -1);
    for (const auto& line : {records(0, 5, {2, 1})}) {
      std::istringstream in(line);
      for (std::string l; std::getline(in, l);) log.record(json::parse(l));
    }
    log.write_chart(t.dir + "/report.svg", "base-train t");
  }
  std::stringstream svg;
  svg << std::ifstream(t.dir + "/report.svg").rdbuf();
  EXPECT_EQ(svg.str(), metrics_chart_svg(m, "base-train t"));
}

// A step done again (a resumed job, or a regrouped one after a rank left: train/metrics_log.h) has
// two train records and two val records in the file; the chart keeps the later ones, rank fields
// included: the same picture as a file that holds only them. Two changes at one step both show.
TEST(RunChart, AStepDoneAgainKeepsItsLaterRecords) {
  TempDir t("nc_runs_again");
  const std::string again = t.dir + "/again.jsonl", later = t.dir + "/later.jsonl";
  json first_try = json::parse(records(5, 6, {2, 1}));
  first_try["loss"] = first_try["smooth_loss"] = 9.0;
  const std::string before = records(0, 5, {2, 1}) + "{\"step\":0,\"val_bpb\":3.0}\n";
  const std::string after = "{\"step\":5,\"membership\":\"rank 1 left\"}\n{\"step\":5,\"val_bpb\":2.0}\n" +
                            records(5, 10, {1}) + "{\"step\":10,\"val_bpb\":1.5}\n";
  // step 5 evaluated and trained by two ranks, rank 1 lost later: the job goes on from node 0's copy
  // of step 5 (the records after it were dropped, MetricsLog) and does it again
  write(again, before + "{\"step\":5,\"val_bpb\":2.9}\n" + first_try.dump() + "\n" + after);
  write(later, before + after);
  EXPECT_EQ(metrics_chart_svg(again, "x"), metrics_chart_svg(later, "x"));

  write(later, records(0, 5, {1}) + "{\"step\":5,\"membership\":\"rank 1 left\"}\n" +
                   "{\"step\":5,\"membership\":\"1 rank joined\"}\n" + records(5, 10, {1}));
  EXPECT_EQ(texts_of(metrics_chart_svg(later, "x")).count("rank 1 left; 1 rank joined"), 1u);
}
