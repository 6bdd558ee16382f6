// `nanochat tok-train` and `nanochat tok-eval` through the binary on real shards: tok-train learns
// from the train shards only (all but the last file), tok-eval reports the train/val row groups,
// and a missing data directory or a lone shard is a clear error (tok-train) or a note (tok-eval).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "support/cli_util.h"

using namespace nctest;

namespace {

std::vector<std::string> docs_of(const std::vector<std::string>& files) {
  std::vector<std::string> docs;
  for (const auto& f : files) {
    data::ParquetReader r(f);
    for (int g = 0; g < r.num_row_groups(); ++g) {
      auto d = r.read_row_group(g);
      docs.insert(docs.end(), d.begin(), d.end());
    }
  }
  return docs;
}

std::string shard(const BaseDir& b, int i) {
  return b.dir + "/base_data_climbmix/shard_0000" + std::to_string(i) + ".parquet";
}

}  // namespace

// With no character budget or document cap in the way, tok-train's tokenizer is the one
// Tokenizer::train learns in-process from the documents of shards 0 and 1 (not 2, the val shard).
TEST(TokCli, TokTrainLearnsFromTheTrainShardsOnly) {
  BaseDir b("nc_tok_train");
  auto r = run(b, " tok-train --vocab-size 400 --doc-cap 1000000000");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Saved tokenizer to " + b.dir + "/tokenizer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Sanity check: round trip OK"), std::string::npos) << r.out;
  const Tokenizer saved = Tokenizer::load(b.dir + "/tokenizer");
  EXPECT_EQ(saved.vocab_size(), 400);
  const Tokenizer expected = Tokenizer::train(docs_of({shard(b, 0), shard(b, 1)}), 400);
  EXPECT_EQ(saved.hash(), expected.hash()) << "tok-train did not learn from exactly the train shards";
  const Tokenizer with_val = Tokenizer::train(docs_of({shard(b, 0), shard(b, 1), shard(b, 2)}), 400);
  EXPECT_NE(saved.hash(), with_val.hash()) << "the val shard changes nothing: the check above cannot tell";
}

TEST(TokCli, TokTrainNamesAMissingOrTooSmallDataDirectory) {
  BaseDir b("nc_tok_err");
  const uint64_t before = Tokenizer::load(b.dir + "/tokenizer").hash();
  const std::string missing = b.dir + "/no_such_dir";
  auto r = run(b, " tok-train --vocab-size 300", "NANOCHAT_DATA_DIR=" + missing);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("nanochat: error: data directory " + missing), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nanochat data"), std::string::npos) << "no hint how to get shards: " << r.out;

  const std::string one = b.dir + "/one_shard";
  fs::create_directories(one);
  fs::copy_file(shard(b, 0), one + "/shard_00000.parquet");
  r = run(b, " tok-train --vocab-size 300", "NANOCHAT_DATA_DIR=" + one);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(one), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validation"), std::string::npos) << r.out;

  const std::string none = b.dir + "/empty";
  fs::create_directories(none);
  r = run(b, " tok-train --vocab-size 300", "NANOCHAT_DATA_DIR=" + none);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(none), std::string::npos) << r.out;
  EXPECT_EQ(Tokenizer::load(b.dir + "/tokenizer").hash(), before) << "a failed tok-train replaced the tokenizer";
}

// tok-eval: the sample rows, then the first row group of the first train shard and of the val
// shard, each with bytes and tokens equal to encoding those documents joined by newlines.
TEST(TokCli, TokEvalReportsTheTrainAndValRowGroups) {
  BaseDir b("nc_tok_eval");
  auto r = run(b, " tok-eval");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("vocab size 512"), std::string::npos) << r.out;
  for (const char* row : {"news", "korean", "code", "math", "science", "multilingual"})
    EXPECT_NE(r.out.find(std::string("\n") + row + " "), std::string::npos) << row << "\n" << r.out;
  const Tokenizer tok = Tokenizer::load(b.dir + "/tokenizer");
  auto expect_row = [&](const std::string& name, const std::string& file) {
    data::ParquetReader rd(file);
    const auto docs = rd.read_row_group(0);
    std::string text;
    for (size_t i = 0; i < docs.size(); ++i) text += (i ? "\n" : "") + docs[i];
    char line[128];
    const size_t ntok = tok.encode(text).size();
    std::snprintf(line, sizeof line, "%-14s %12zu %12zu %10.3f", name.c_str(), text.size(), ntok,
                  static_cast<double>(text.size()) / static_cast<double>(ntok));
    EXPECT_NE(r.out.find(line), std::string::npos) << "expected: " << line << "\n" << r.out;
  };
  expect_row("train-rg0", shard(b, 0));
  expect_row("val-rg0", shard(b, 2));

  // Without usable shards the sample rows still print, with a note instead of the shard rows.
  const std::string one = b.dir + "/one_shard";
  fs::create_directories(one);
  fs::copy_file(shard(b, 0), one + "/shard_00000.parquet");
  for (const std::string& dir : {b.dir + "/no_such_dir", one}) {
    r = run(b, " tok-eval", "NANOCHAT_DATA_DIR=" + dir);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("\nnews "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(dir), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("train-rg0"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("val-rg0"), std::string::npos) << r.out;
  }
}
