// The metrics and chart of a real two-rank base-train through the binary: each train record holds
// every rank's rows, times and tok/s consistent with one another, and report.svg is well-formed
// with whole-step ticks and the ranks' panels.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "support/cli_util.h"
#include "support/xml_lite.h"

using namespace nctest;

TEST(Report, ATwoRankRunRecordsAndChartsEachRanksShareSpeedAndWait) {
  BaseDir b("nc_report_w2");
  auto r = run(b, " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(free_port()) +
                      std::string(kTiny) + " --num-iterations 6");
  ASSERT_EQ(r.code, 0) << r.out;

  // kTiny: T = 64, 256 tokens per step = 4 rows between the two ranks
  std::ifstream in(b.ckpt() + "/metrics.jsonl");
  int train_records = 0;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (!j.contains("loss")) continue;
    ++train_records;
    ASSERT_TRUE(j.contains("rank_tok_per_sec")) << line;
    const auto rows = j["rank_rows"], tok = j["rank_tok_per_sec"], c = j["rank_compute_ms"], w = j["rank_wait_ms"],
               d = j["rank_data_ms"];
    ASSERT_EQ(rows.size(), 2u) << line;
    ASSERT_EQ(tok.size(), 2u) << line;
    EXPECT_EQ(rows[0].get<int>() + rows[1].get<int>(), 4) << line;
    for (size_t q = 0; q < 2; ++q) {
      // tok/s = rows x T / the rank's step time, and that time is compute + wait + data when the
      // rank waited at all (the wait is what is left of it, clipped at 0)
      const double ms = c[q].get<double>() + w[q].get<double>() + d[q].get<double>();
      const double from_times = rows[q].get<double>() * 64 / (ms / 1e3);
      if (w[q].get<double>() > 0)
        EXPECT_NEAR(tok[q].get<double>(), from_times, 1 + 1e-6 * from_times) << line;
      else
        EXPECT_GE(tok[q].get<double>() + 1, from_times) << line;
    }
  }
  EXPECT_EQ(train_records, 6);

  std::stringstream svg;
  svg << std::ifstream(b.ckpt() + "/report.svg").rdbuf();
  std::unique_ptr<XmlElement> root;
  ASSERT_NO_THROW(root = XmlLite::parse(svg.str())) << svg.str();
  std::vector<const XmlElement*> texts;
  root->find_all("text", texts);
  std::multiset<std::string> t;
  for (const auto* e : texts) t.insert(e->text);
  for (const char* panel :
       {"train loss (debiased EMA, nats)", "validation bpb", "each rank's share of the step's rows (%)",
        "each rank's tokens per second", "each rank's wait for the others per step (ms)"})
    EXPECT_EQ(t.count(panel), 1u) << panel;
  for (const char* step : {"0", "1", "2", "3", "4", "5", "6"}) EXPECT_GE(t.count(step), 5u) << step;  // every panel
}
