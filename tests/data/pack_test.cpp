// `data pack` / `data inspect` (library functions and the CLI).
#include "nanochat/data/pack.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "nanochat/core/error.h"
#include "nanochat/data/parquet.h"

namespace fs = std::filesystem;
using namespace nanochat;
using namespace nanochat::data;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("nc_pack_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

std::vector<std::string> read_shard(const std::string& path) {
  ParquetReader r(path);
  std::vector<std::string> all;
  for (int g = 0; g < r.num_row_groups(); ++g) {
    auto rows = r.read_row_group(g);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  return all;
}

// n distinct documents of varying length (some non-ASCII).
std::vector<std::string> make_docs(int n) {
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) {
    std::string d = "doc " + std::to_string(i) + ":";
    for (int k = 0; k < 5 + (i * 37) % 60; ++k) d += (k % 9 == 0) ? " café" : " word";
    docs.push_back(d);
  }
  return docs;
}

std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
  int status = ::pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace

TEST(Utf8, LengthCountsCodePoints) {
  EXPECT_EQ(utf8_length(""), 0);
  EXPECT_EQ(utf8_length("abc"), 3);
  EXPECT_EQ(utf8_length("café 日本 🙂"), 9);
}

TEST(Utf8, SanitizeReplacesMaximalInvalidSubpartsLikePython) {
  // Expected values from Python: bytes.decode("utf-8", "replace").
  int64_t n = 0;
  EXPECT_EQ(sanitize_utf8("valid é 🙂", &n), "valid é 🙂");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(sanitize_utf8("a\xff"
                          "b",
                          &n),
            "a\xEF\xBF\xBD"
            "b");  // b'a\xffb'
  EXPECT_EQ(sanitize_utf8("\xe2\x82"
                          "x",
                          &n),
            "\xEF\xBF\xBD"
            "x");                                                                        // truncated 3-byte
  EXPECT_EQ(sanitize_utf8("\xed\xa0\x80", &n), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(sanitize_utf8("\xc0\xaf", &n), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  EXPECT_EQ(sanitize_utf8("\xf0\x9f\x99", &n), "\xEF\xBF\xBD");                          // truncated emoji
  EXPECT_EQ(n, 1 + 1 + 3 + 2 + 1);
}

TEST(Pack, ShardsHoldEveryDocumentOnceWithNanochatSharding) {
  fs::path d = temp_dir("basic");
  auto docs = make_docs(5000);
  // Inputs: a JSONL file with most docs, plus text files (one doc per file).
  {
    std::ofstream f(d / "in.jsonl");
    for (int i = 0; i < 4990; ++i)
      f << nlohmann::json{{"text", docs[static_cast<size_t>(i)]}, {"id", i}}.dump() << "\n\n";
  }
  fs::create_directories(d / "txt");
  for (int i = 4990; i < 5000; ++i)
    spit(d / "txt" / ("f" + std::to_string(i) + ".txt"), "\n" + docs[static_cast<size_t>(i)] + "\n\n");
  PackOptions o;
  o.inputs = {(d / "in.jsonl").string(), (d / "txt").string()};
  o.out_dir = (d / "out").string();
  o.shard_chars = 60000;  // ~ 1024 docs of ~170 chars = 174k chars: a shard closes at each 1024
  o.val_docs = 700;
  o.quiet = true;
  PackResult r = pack_corpus(o);
  EXPECT_EQ(r.docs, 5000);
  auto files = list_parquet_files(o.out_dir);
  ASSERT_EQ(files.size(), r.train_shards.size() + 1);
  EXPECT_EQ(files.back(), r.val_shard);  // validation sorts last
  // 4300 train docs: shards of 1024, 1024, 1024, then 1024 + 204 remainder kept in the last one.
  EXPECT_EQ(r.train_docs, (std::vector<int64_t>{1024, 1024, 1024, 1228}));
  std::multiset<std::string> seen;
  int64_t chars = 0;
  for (size_t s = 0; s < files.size(); ++s) {
    auto rows = read_shard(files[s]);
    ParquetReader rd(files[s]);
    for (int g = 0; g < rd.num_row_groups(); ++g) {
      if (g + 1 < rd.num_row_groups()) {
        EXPECT_EQ(rd.row_group_num_rows(g), 1024);
      }
    }
    if (s + 1 == files.size()) {
      EXPECT_EQ(rows.size(), 700u);
    }
    for (auto& x : rows) {
      chars += utf8_length(x);
      seen.insert(x);
    }
  }
  EXPECT_EQ(chars, r.chars);
  std::multiset<std::string> want(docs.begin(), docs.end());
  EXPECT_EQ(seen, want);
  fs::remove_all(d);
}

TEST(Pack, ShuffleIsDeterministicPerSeed) {
  fs::path d = temp_dir("seed");
  auto docs = make_docs(300);
  {
    std::ofstream f(d / "in.jsonl");
    for (auto& x : docs) f << nlohmann::json{{"text", x}}.dump() << "\n";
  }
  auto pack = [&](const std::string& out, uint64_t seed) {
    PackOptions o;
    o.inputs = {(d / "in.jsonl").string()};
    o.out_dir = (d / out).string();
    o.val_docs = 50;
    o.seed = seed;
    o.quiet = true;
    pack_corpus(o);
    return read_shard((d / out / "shard_00000.parquet").string());
  };
  auto a = pack("a", 42), b = pack("b", 42), c = pack("c", 7);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.size(), 250u);
  EXPECT_NE(std::vector<std::string>(docs.begin(), docs.begin() + 250), a);  // actually shuffled
  fs::remove_all(d);
}

TEST(Pack, ParagraphSplitAndEmptyDocs) {
  fs::path d = temp_dir("para");
  spit(d / "a.txt", "First para\nline two.\n\n \nSecond para.\n\n\n\nThird\r\n\r\nFourth\n");
  spit(d / "empty.txt", " \n\n");
  PackOptions o;
  o.inputs = {(d / "a.txt").string(), (d / "empty.txt").string()};
  o.out_dir = (d / "out").string();
  o.split = "paragraphs";
  o.val_docs = 1;
  o.quiet = true;
  PackResult r = pack_corpus(o);
  EXPECT_EQ(r.docs, 4);
  auto all = read_shard(r.train_shards[0]);
  auto v = read_shard(r.val_shard);
  all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<std::string>{"First para\nline two.", "Fourth", "Second para.", "Third"}));
  fs::remove_all(d);
}

TEST(Pack, ErrorsNameTheFileLineOrFlag) {
  fs::path d = temp_dir("err");
  spit(d / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": broken}\n");
  spit(d / "notext.jsonl", "{\"body\": \"x\"}\n");
  spit(d / "few.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
  auto expect_error = [&](PackOptions o, const std::string& needle) {
    o.quiet = true;
    if (o.out_dir.empty()) o.out_dir = (d / "out").string();
    try {
      pack_corpus(o);
      ADD_FAILURE() << "expected an error containing " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  PackOptions o;
  o.inputs = {(d / "bad.jsonl").string()};
  expect_error(o, "bad.jsonl:2: invalid JSON");
  o.inputs = {(d / "notext.jsonl").string()};
  expect_error(o, "notext.jsonl:1: expected an object with a \"text\" key");
  o.inputs = {(d / "few.jsonl").string()};
  expect_error(o, "not enough for --val-docs 1024");
  o.inputs = {(d / "missing.txt").string()};
  expect_error(o, "missing.txt does not exist");
  // An --out that already holds shards is refused unless --force.
  o.inputs = {(d / "few.jsonl").string()};
  o.val_docs = 1;
  o.out_dir = (d / "out2").string();
  o.quiet = true;
  pack_corpus(o);
  expect_error(o, "already holds 2 .parquet files");
  o.force = true;
  EXPECT_NO_THROW(pack_corpus(o));
  fs::remove_all(d);
}

TEST(Inspect, DescribesTheSample) {
  std::string s = inspect_parquet(std::string(NANOCHAT_TEST_DATA) + "/parquet/sample.parquet", 40);
  for (const char* needle :
       {"265146 bytes", "parquet-rs", "optional binary text (STRING)", "codec: ZSTD", "encodings: PLAIN,RLE",
        "row groups: 2", "#1: 1024 rows", "total rows: 2048", "first doc ("}) {
    EXPECT_NE(s.find(needle), std::string::npos) << needle << "\n" << s;
  }
}

TEST(ListParquet, SortedAndSkipsTmp) {
  fs::path d = temp_dir("list");
  for (const char* n : {"shard_00002.parquet", "shard_00000.parquet", "shard_00001.parquet.tmp", "notes.txt"})
    spit(d / n, "x");
  auto files = list_parquet_files(d.string());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(fs::path(files[0]).filename(), "shard_00000.parquet");
  EXPECT_EQ(fs::path(files[1]).filename(), "shard_00002.parquet");
  EXPECT_THROW(list_parquet_files((d / "nope").string()), Error);
  fs::remove_all(d);
}

TEST(DataCli, PackThenInspect) {
  fs::path d = temp_dir("cli");
  {
    std::ofstream f(d / "in.jsonl");
    for (auto& x : make_docs(40)) f << nlohmann::json{{"text", x}}.dump() << "\n";
  }
  int rc = 0;
  std::string bin = NANOCHAT_BINARY;
  std::string out =
      run(bin + " data pack " + (d / "in.jsonl").string() + " --out " + (d / "out").string() + " --val-docs 8", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("packed 40 documents"), std::string::npos) << out;
  out = run(bin + " data inspect " + (d / "out" / "shard_00001.parquet").string(), &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("total rows: 8"), std::string::npos) << out;
  out = run(bin + " data inspect " + (d / "in.jsonl").string(), &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("nanochat: error: " + (d / "in.jsonl").string()), std::string::npos) << out;
  fs::remove_all(d);
}
