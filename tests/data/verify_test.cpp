// Tests of the shard check (data/verify.h): every row group of every file is decoded on several
// threads, a corrupt page in a later row group is reported with its file, row group and page,
// results are recorded in the directory's manifest, and the writer's pages carry CRCs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "nanochat/core/error.h"
#include "nanochat/data/parquet.h"
#include "nanochat/data/verify.h"

namespace fs = std::filesystem;
using namespace nanochat::data;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("nc_verify_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A shard of `rows` short documents in row groups of 16.
std::string make_shard(const fs::path& dir, const std::string& name, int rows) {
  std::string path = (dir / name).string();
  ParquetWriter w(path, 16);
  for (int i = 0; i < rows; ++i)
    w.write("document " + std::to_string(i) + std::string(static_cast<size_t>(i % 50), 'x'));
  w.close();
  return path;
}

// XORs one byte `back` bytes before the end of row group rg's column chunk (its last page).
void flip(const std::string& path, int rg, int64_t back = 5) {
  int64_t at;
  {
    ParquetReader r(path);
    at = r.row_group(rg).text.start + r.row_group(rg).text.total_compressed_size - back;
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x21);
  f.seekp(at);
  f.write(&c, 1);
}

}  // namespace

TEST(ShardCheck, WriterPagesCarryCrcsAndAllRowGroupsAreDecoded) {
  fs::path d = temp_dir("ok");
  std::string a = make_shard(d, "a.parquet", 100), b = make_shard(d, "b.parquet", 40);
  auto res = verify_shards({a, b}, {3, false});
  ASSERT_EQ(res.size(), 2u);
  EXPECT_TRUE(res[0].ok) << res[0].error;
  EXPECT_TRUE(res[1].ok) << res[1].error;
  EXPECT_EQ(res[0].row_groups, 7);
  EXPECT_EQ(res[1].row_groups, 3);
  EXPECT_EQ(res[0].stats.pages, 7);
  EXPECT_EQ(res[0].stats.crc_pages, 7);
  EXPECT_GT(res[0].stats.text_bytes, 100 * 10);
  EXPECT_EQ(res[0].size, static_cast<int64_t>(fs::file_size(a)));
  fs::remove_all(d);
}

TEST(ShardCheck, CorruptPageInALaterRowGroupIsNamedWithFileRowGroupAndPage) {
  fs::path d = temp_dir("bad");
  std::string a = make_shard(d, "a.parquet", 100), b = make_shard(d, "b.parquet", 100);
  flip(b, 3);
  flip(b, 5);
  for (int threads : {1, 4}) {
    auto res = verify_shards({a, b}, {threads, false});
    EXPECT_TRUE(res[0].ok) << res[0].error;
    ASSERT_FALSE(res[1].ok);
    // the lowest corrupt row group is reported
    EXPECT_NE(res[1].error.find(b + ": row group 3 (of 7), column \"text\": byte offset "), std::string::npos)
        << res[1].error;
    EXPECT_NE(res[1].error.find("(row group 3, page 0): page CRC mismatch"), std::string::npos) << res[1].error;
    EXPECT_EQ(res[1].stats.pages, 7) << "every row group is still checked";
  }
  fs::remove_all(d);
}

TEST(ShardCheck, UnreadableFooterOrMissingFileIsReportedNotThrown) {
  fs::path d = temp_dir("footer");
  std::string a = make_shard(d, "a.parquet", 20);
  fs::resize_file(a, fs::file_size(a) - 3);
  auto res = verify_shards({a, (d / "missing.parquet").string()}, {2, false});
  EXPECT_FALSE(res[0].ok);
  EXPECT_NE(res[0].error.find(a), std::string::npos) << res[0].error;
  EXPECT_FALSE(res[1].ok);
  EXPECT_NE(res[1].error.find("missing.parquet: cannot open"), std::string::npos) << res[1].error;
  fs::remove_all(d);
}

TEST(ShardCheck, ResultsAreRecordedInTheDirectorysManifest) {
  fs::path d = temp_dir("manifest");
  std::string a = make_shard(d, "a.parquet", 20), b = make_shard(d, "b.parquet", 20);
  flip(b, 1);
  auto res = verify_shards({a, b}, {2, false});
  ASSERT_TRUE(record_results(res));
  std::ifstream in(verified_manifest_path(d.string()));
  nlohmann::json m = nlohmann::json::parse(in);
  EXPECT_EQ(m["version"], 1);
  EXPECT_EQ(m["files"]["a.parquet"]["ok"], true);
  EXPECT_EQ(m["files"]["a.parquet"]["size"], static_cast<int64_t>(fs::file_size(a)));
  EXPECT_EQ(m["files"]["b.parquet"]["ok"], false);
  EXPECT_NE(m["files"]["b.parquet"]["error"].get<std::string>().find("row group 1"), std::string::npos);
  fs::remove_all(d);
}

// check_training_shards: train + val of a directory; a corrupt val shard throws before training.
TEST(ShardCheck, TrainingCheckThrowsNamingTheShardAndWhatToDo) {
  fs::path d = temp_dir("train");
  make_shard(d, "shard_00000.parquet", 64);
  std::string val = make_shard(d, "shard_00001.parquet", 64);
  EXPECT_NO_THROW(check_training_shards(d.string(), false, false));
  flip(val, 2);
  try {
    check_training_shards(d.string(), false, false);
    FAIL() << "a corrupt val shard passed the check";
  } catch (const nanochat::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("1 of 2 shard(s)"), std::string::npos) << m;
    EXPECT_NE(m.find(val + ": row group 2 (of 4)"), std::string::npos) << m;
    EXPECT_NE(m.find("re-download " + val), std::string::npos) << m;
  }
  EXPECT_NO_THROW(check_training_shards(d.string(), true, false)) << "--skip-data-check checks nothing";
  fs::remove_all(d);
}

// An unreadable manifest is not an error: everything is checked again and the manifest rewritten.
TEST(ShardCheck, GarbledManifestMeansCheckAgain) {
  fs::path d = temp_dir("garbled");
  make_shard(d, "shard_00000.parquet", 20);
  make_shard(d, "shard_00001.parquet", 20);
  { std::ofstream(verified_manifest_path(d.string())) << "{\"version\": 1, \"files\": {\"shard_00000.parq"; }
  EXPECT_NO_THROW(check_training_shards(d.string(), false, false));
  std::ifstream in(verified_manifest_path(d.string()));
  nlohmann::json m = nlohmann::json::parse(in);
  EXPECT_EQ(m["files"]["shard_00000.parquet"]["ok"], true);
  EXPECT_EQ(m["files"]["shard_00001.parquet"]["ok"], true);
  fs::remove_all(d);
}

// content_crc32s: the CRC-32 of every byte (zlib's, as for "123456789" -> cbf43926), read once and
// then taken from the cache while size, mtime and fingerprint are unchanged; a rewritten file is
// read again. The cache is proven used by planting a value in it.
TEST(ShardContent, Crc32OfEveryByteIsCachedBySizeAndMtime) {
  fs::path d = temp_dir("content");
  const std::string a = (d / "a.parquet").string(), b = make_shard(d, "b.parquet", 40);
  { std::ofstream(a, std::ios::binary) << "123456789"; }
  auto crcs = content_crc32s(d.string(), {a, b});
  ASSERT_EQ(crcs.size(), 2u);
  EXPECT_EQ(crcs[0], 0xcbf43926u);
  ASSERT_TRUE(fs::exists(content_cache_path(d.string())));
  nlohmann::json m;
  std::ifstream(content_cache_path(d.string())) >> m;
  EXPECT_EQ(m["files"]["a.parquet"]["crc32"].get<uint32_t>(), 0xcbf43926u);
  EXPECT_EQ(m["files"]["b.parquet"]["crc32"].get<uint32_t>(), crcs[1]);
  m["files"]["a.parquet"]["crc32"] = 7;
  std::ofstream(content_cache_path(d.string())) << m.dump();
  EXPECT_EQ(content_crc32s(d.string(), {a})[0], 7u) << "an unchanged file is not read again";
  { std::ofstream(a, std::ios::binary) << "123456780"; }  // same size, other bytes
  EXPECT_EQ(content_crc32s(d.string(), {a})[0], 0xb2288182u);
  EXPECT_THROW(content_crc32s(d.string(), {(d / "gone.parquet").string()}), nanochat::Error);
  fs::remove_all(d);
}
