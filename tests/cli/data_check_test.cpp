// End-to-end tests of the start-up shard check of `nanochat base-train` and of
// `nanochat data verify`, through the built binary: a corrupt page in a later row group stops the
// run before step 0 naming the file and row group, a second start skips checked shards, a
// changed shard is checked again, --skip-data-check starts anyway; `nanochat data manifest`.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "nanochat/data/parquet.h"
#include "support/cli_util.h"

namespace fs = std::filesystem;
using namespace nanochat;
using namespace nctest;

namespace {

// Two steps without evaluations: the loader reads shard 0 and the first row groups of shard 1
// only (3 shards of ~682 documents in row groups of 128; the last one is the val shard).
const std::string kTwoSteps = std::string(kTiny) + " --num-iterations 2 --eval-every -1";

std::string shard(const BaseDir& b, int i) {
  return b.dir + "/base_data_climbmix/shard_0000" + std::to_string(i) + ".parquet";
}

bool has(const std::string& out, const std::string& s) { return out.find(s) != std::string::npos; }

}  // namespace

// A corrupt page in row group 5 of train shard 1 (which two steps never reach) stops base-train
// before step 0 with the file, row group and page named; the old trainer trained on.
TEST(DataCheck, CorruptPageInALaterRowGroupStopsBaseTrainAtStartUp) {
  BaseDir b("nc_dck_corrupt");
  const std::string bad = shard(b, 1);
  { ASSERT_EQ(data::ParquetReader(bad).num_row_groups(), 6); }
  corrupt_row_group(bad, 5);
  auto r = run(b, kTwoSteps);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_FALSE(has(r.out, "step 00000")) << "training started on a corrupt shard:\n" << r.out;
  EXPECT_TRUE(has(r.out, bad + ": row group 5 (of 6)")) << r.out;
  EXPECT_TRUE(has(r.out, "page CRC mismatch")) << r.out;
  EXPECT_TRUE(has(r.out, "no training step was run")) << r.out;
  EXPECT_TRUE(has(r.out, "re-download " + bad)) << r.out;
  // The finding is recorded: the next start (another rank, say) reports it without decoding again.
  auto again = run(b, kTwoSteps);
  EXPECT_NE(again.code, 0);
  EXPECT_TRUE(has(again.out, bad + ": row group 5 (of 6)")) << again.out;
  EXPECT_TRUE(has(again.out, "found by the check of")) << again.out;
  EXPECT_FALSE(has(again.out, "step 00000")) << again.out;
  // --skip-data-check starts anyway (two steps never reach the corrupt row group).
  auto skipped = run(b, kTwoSteps + " --skip-data-check");
  EXPECT_EQ(skipped.code, 0) << skipped.out;
  EXPECT_TRUE(has(skipped.out, "Data check skipped (--skip-data-check)")) << skipped.out;
  EXPECT_TRUE(has(skipped.out, "step 00001")) << skipped.out;
}

// The first start checks all three shards and records them; the second skips the work and says
// so; a shard changed afterwards (a corrupt page) is checked again and stops the run.
TEST(DataCheck, CheckedShardsAreSkippedUntilTheyChange) {
  BaseDir b("nc_dck_manifest");
  auto r1 = run(b, kTwoSteps);
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_TRUE(has(r1.out, "Data check: 3 shard(s) (")) << r1.out;
  EXPECT_TRUE(has(r1.out, "with CRCs")) << r1.out;
  EXPECT_TRUE(fs::exists(b.dir + "/base_data_climbmix/.nanochat_verified.json"));
  auto r2 = run(b, kTwoSteps);
  ASSERT_EQ(r2.code, 0) << r2.out;
  EXPECT_TRUE(has(r2.out, "all 3 shard(s) in " + b.dir + "/base_data_climbmix were checked before and are unchanged"))
      << r2.out;
  EXPECT_FALSE(has(r2.out, "Data check: 3 shard(s) (")) << "checked again:\n" << r2.out;
  const std::string bad = shard(b, 2);  // the val shard
  corrupt_row_group(bad, 1);
  auto r3 = run(b, kTwoSteps);
  EXPECT_NE(r3.code, 0) << r3.out;
  EXPECT_TRUE(has(r3.out, "Data check: 1 shard(s) (")) << "only the changed shard is checked:\n" << r3.out;
  EXPECT_TRUE(has(r3.out, bad + ": row group 1 (of 6)")) << r3.out;
  EXPECT_FALSE(has(r3.out, "step 00000")) << r3.out;
}

// `nanochat data verify` checks the data directory by default and names the corrupt shard, its
// row group and page; exit status 1 when a shard is corrupt, 0 when all are good.
TEST(DataCheck, DataVerifyReportsEveryCorruptShard) {
  BaseDir b("nc_dck_verify");
  auto good = run(b, " data verify -q");
  EXPECT_EQ(good.code, 0) << good.out;
  EXPECT_TRUE(has(good.out, "3 file(s), 18 row groups")) << good.out;
  EXPECT_TRUE(has(good.out, "all good")) << good.out;
  corrupt_row_group(shard(b, 0), 2);
  corrupt_row_group(shard(b, 2), 4);
  auto bad = run(b, " data verify -q");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_TRUE(has(bad.out, "CORRUPT  " + shard(b, 0) + ": row group 2 (of 6), column \"text\": byte offset"))
      << bad.out;
  EXPECT_TRUE(has(bad.out, "(row group 2, page 0): page CRC mismatch")) << bad.out;
  EXPECT_TRUE(has(bad.out, "CORRUPT  " + shard(b, 2) + ": row group 4 (of 6)")) << bad.out;
  EXPECT_TRUE(has(bad.out, "ok       " + shard(b, 1))) << bad.out;
  EXPECT_TRUE(has(bad.out, "2 corrupt")) << bad.out;
  // explicit files
  auto one = run(b, " data verify -q " + shard(b, 1));
  EXPECT_EQ(one.code, 0) << one.out;
  EXPECT_TRUE(has(one.out, "1 file(s), 6 row groups")) << one.out;
}

// `nanochat data manifest` prints what the ranks of a job compare, one line per shard; the CRC-32s
// are computed once, then read from the cache; a copy under another path prints the same.
TEST(DataCheck, DataManifestPrintsWhatTheRanksCompare) {
  BaseDir b("nc_dck_manifest_cmd");
  auto first = run(b, " data manifest");
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_TRUE(std::regex_search(first.out, std::regex("shard_00000\\.parquet  train +[0-9]+ bytes +6 row groups  "
                                                      "crc32 [0-9a-f]{8}\n")))
      << first.out;
  EXPECT_TRUE(std::regex_search(first.out, std::regex("shard_00002\\.parquet  val  "))) << first.out;
  EXPECT_TRUE(has(first.out, "Data manifest: CRC-32 of 3 shard(s)")) << first.out;
  EXPECT_TRUE(fs::exists(b.dir + "/base_data_climbmix/.nanochat_content.json"));
  auto again = run(b, " data manifest");
  EXPECT_FALSE(has(again.out, "Data manifest: CRC-32")) << "cached: " << again.out;
  const std::string copy = b.dir + "/copy";
  fs::create_directories(copy);
  for (int i = 0; i < 3; ++i) fs::copy_file(shard(b, i), copy + "/" + fs::path(shard(b, i)).filename().string());
  auto other = run(b, " data manifest " + copy);
  EXPECT_EQ(other.code, 0) << other.out;
  auto lines = [](const std::string& out) {  // the stdout lines (stderr's cache note aside)
    std::string s;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
      if (l.rfind("shard_", 0) == 0) s += l + "\n";
    return s;
  };
  EXPECT_EQ(lines(other.out), lines(again.out));
  EXPECT_EQ(lines(first.out), lines(again.out));
}

// The two ranks of a node that both read the shards (--local-data) share the data directory: one
// checks, the other waits for it and finds the shards recorded; with a corrupt shard both ranks
// stop before step 0 naming it.
TEST(DataCheck, RanksOfANodeCheckOnceAndBothStopOnACorruptShard) {
  BaseDir b("nc_dck_ranks");
  const std::string launch = " run --nproc-per-node 2 --threads-per-rank 1 --master-port ";
  // --local-data: every rank reads (and checks) the shards itself
  auto good = run(b, launch + std::to_string(35000 + ::getpid() % 400) + kTwoSteps + " --local-data");
  ASSERT_EQ(good.code, 0) << good.out;
  size_t checks = 0, hashes = 0;
  for (size_t at = 0; (at = good.out.find("Data check: 3 shard(s) (", at)) != std::string::npos; ++at) ++checks;
  EXPECT_EQ(checks, 1u) << good.out;
  // the same for the CRC-32s of the start-up agreement's data manifest
  for (size_t at = 0; (at = good.out.find("Data manifest: CRC-32 of 3 shard(s)", at)) != std::string::npos; ++at)
    ++hashes;
  EXPECT_EQ(hashes, 1u) << good.out;
  const std::string bad = shard(b, 1);
  corrupt_row_group(bad, 3);
  auto r = run(b, launch + std::to_string(35400 + ::getpid() % 400) + kTwoSteps + " --local-data");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 0]   " + bad + ": row group 3 (of 6)")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 1]   " + bad + ": row group 3 (of 6)")) << r.out;
  EXPECT_FALSE(has(r.out, "step 00000")) << r.out;
}

// A process that waits for another one's check says for whom and gives up at the deadline
// (NANOCHAT_DATA_CHECK_WAIT_S) with what to do, instead of hanging.
TEST(DataCheck, WaitingForAnotherCheckHasADeadline) {
  BaseDir b("nc_dck_wait");
  const std::string lock = b.dir + "/base_data_climbmix/.nanochat_verified.lock";
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "process 4242 on testhost", 24), 24);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  auto t0 = std::chrono::steady_clock::now();
  auto r = run(b, kTwoSteps, "NANOCHAT_DATA_CHECK_WAIT_S=2");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "Data check: waiting for process 4242 on testhost to finish checking the shards in")) << r.out;
  EXPECT_TRUE(has(r.out, "gave up after 2 s waiting for process 4242 on testhost")) << r.out;
  EXPECT_TRUE(has(r.out, "NANOCHAT_DATA_CHECK_WAIT_S")) << r.out;
  EXPECT_FALSE(has(r.out, "step 00000")) << r.out;
  EXPECT_LT(s, 30.0);
}
