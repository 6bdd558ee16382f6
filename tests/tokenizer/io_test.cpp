// Tokenizer files: save/load round trip, byte-identical format to the independent Python writer
// (tools/tokenizer/make_fixtures.py wrote small_tok/), and clear errors for missing/corrupt files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "nanochat/core/error.h"
#include "nanochat/tokenizer/base64.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "support/tok_test_util.h"

namespace nanochat {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("nanochat_tok_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

TEST(IoTest, SaveLoadRoundTripGivesIdenticalIds) {
  const auto docs = tok_test::read_jsonl_texts(tok_test::fixture("train_docs.jsonl"));
  const Tokenizer t = Tokenizer::train(docs, 1200);
  TempDir d;
  t.save(d.path.string());
  const Tokenizer u = Tokenizer::load(d.path.string());
  EXPECT_EQ(u.vocab_size(), t.vocab_size());
  EXPECT_EQ(u.hash(), t.hash());
  EXPECT_EQ(u.token_bytes(), t.token_bytes());
  const std::string text = tok_test::read_bytes(tok_test::fixture("multilingual.txt"));
  EXPECT_EQ(u.encode(text), t.encode(text));
  EXPECT_EQ(u.bos_id(), t.bos_id());
}

// Our save() writes the same bytes as the independent Python writer for the same ranks, and the
// JSON fields (incl. the FNV-1a hash computed in Python) agree.
TEST(IoTest, FormatMatchesIndependentWriter) {
  const Tokenizer ref = Tokenizer::load(tok_test::fixture("small_tok"));
  TempDir d;
  ref.save(d.path.string());
  for (const char* f : {"tokenizer.ranks", "token_bytes.bin"})
    EXPECT_EQ(tok_test::read_bytes((d.path / f).string()), tok_test::read_bytes(tok_test::fixture(std::string("small_tok/") + f)))
        << f;
  EXPECT_EQ(nlohmann::json::parse(tok_test::read_bytes((d.path / "tokenizer.json").string())),
            nlohmann::json::parse(tok_test::read_bytes(tok_test::fixture("small_tok/tokenizer.json"))));
  const auto j = nlohmann::json::parse(tok_test::read_bytes(tok_test::fixture("small_tok/tokenizer.json")));
  EXPECT_EQ(j.at("pattern").get<std::string>(), std::string(kSplitPattern));
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(ref.hash()));
  EXPECT_EQ(j.at("hash").get<std::string>(), hex);
}

TEST(IoTest, MissingDirectoryNamesIt) {
  try {
    (void)Tokenizer::load("/nonexistent/tokdir");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("/nonexistent/tokdir"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("tok-train"));
  }
}

TEST(IoTest, CorruptFilesAreReportedWithTheFileName) {
  TempDir d;
  Tokenizer::load(tok_test::fixture("small_tok")).save(d.path.string());
  const fs::path ranks = d.path / "tokenizer.ranks";
  const std::string good = tok_test::read_bytes(ranks.string());
  auto expect_error = [&](const std::string& ranks_text, const std::string& needle) {
    write(ranks, ranks_text);
    try {
      (void)Tokenizer::load(d.path.string());
      ADD_FAILURE() << "expected an error containing " << needle;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(needle));
    }
  };
  expect_error(good.substr(0, good.size() / 2), "tokenizer.ranks");              // truncated
  expect_error("!!!! 0\n" + good.substr(good.find('\n') + 1), "line 1");         // bad base64
  std::string swapped = good;                                                     // changed bytes
  swapped[good.rfind('\n', good.size() - 2) + 1] ^= 1;
  expect_error(swapped, "hash");
  write(ranks, good);
  EXPECT_NO_THROW((void)Tokenizer::load(d.path.string()));
  write(d.path / "tokenizer.json", "{not json");
  try {
    (void)Tokenizer::load(d.path.string());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("tokenizer.json"));
  }
}

TEST(IoTest, Base64KnownVectors) {
  // RFC 4648 section 10 test vectors.
  const std::vector<std::pair<std::string, std::string>> v = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [raw, enc] : v) {
    EXPECT_EQ(base64_encode(raw), enc);
    std::string back;
    EXPECT_TRUE(base64_decode(enc, &back));
    EXPECT_EQ(back, raw);
  }
  std::string out;
  EXPECT_FALSE(base64_decode("Zm9", &out));
  EXPECT_FALSE(base64_decode("Zm=v", &out));
  EXPECT_FALSE(base64_decode("Z*9v", &out));
  EXPECT_TRUE(base64_decode("/w==", &out));
  EXPECT_EQ(out, "\xff");
}

}  // namespace
}  // namespace nanochat
