// Tests for tokenizer/tokenizer.
// Encoding/decoding (docs/nanochat.md 6.1, 6.3): exact parity with tiktoken on real text, an
// independent naive BPE oracle, round trips (including invalid UTF-8), special tokens, token_bytes,
// encode_batch.
// Files: save/load round trip, byte-identical format to the independent Python writer
// (tools/tokenizer/make_fixtures.py wrote small_tok/), and clear errors for missing/corrupt files.
#include "nanochat/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "nanochat/core/error.h"
#include "support/tok_test_util.h"

namespace nanochat {
namespace {

// ---------------------------------------------------------------------------------------------
// encoding and decoding

const Tokenizer& small_tok() {
  static const Tokenizer t = Tokenizer::load(tok_test::fixture("small_tok"));
  return t;
}

// tiktoken_ids.json: tiktoken.Encoding(pat_str, mergeable_ranks from small_tok/tokenizer.ranks)
// .encode_ordinary(file text) for each file (tools/tokenizer/tiktoken_ids.py).
TEST(EncodeTest, MatchesTiktokenOnRealTexts) {
  const auto ref = nlohmann::json::parse(tok_test::read_bytes(tok_test::fixture("tiktoken_ids.json")));
  ASSERT_EQ(ref.size(), 4u);
  for (const auto& [name, ids_json] : ref.items()) {
    const std::string text = tok_test::read_bytes(tok_test::fixture(name));
    const auto want = ids_json.get<std::vector<int32_t>>();
    ASSERT_GT(want.size(), 100u) << name;
    const auto got = small_tok().encode(text);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << name << " first difference at token " << i;
    EXPECT_EQ(small_tok().decode(got), text) << name;
  }
}

// Independent oracle: tiktoken's merge rule written the slow, obvious way on byte strings —
// repeatedly find the leftmost adjacent pair whose concatenation has the lowest rank.
std::vector<int32_t> naive_bpe(const std::map<std::string, int32_t>& ranks, std::string_view chunk) {
  std::vector<std::string> parts;
  for (char c : chunk) parts.emplace_back(1, c);
  for (;;) {
    int32_t best_rank = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && (best_rank < 0 || it->second < best_rank)) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank < 0) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<long>(best) + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) ids.push_back(ranks.at(p));
  return ids;
}

TEST(EncodeTest, MatchesNaiveOracleOnRandomAndLongChunks) {
  const Tokenizer& t = small_tok();
  std::map<std::string, int32_t> ranks;
  for (int32_t id = 0; id < t.vocab_size() - 9; ++id) ranks[t.id_to_token_bytes(id)] = id;
  // Chunks built from frequent tokens glued together, random letters, and long runs (> 96 bytes
  // takes the heap-based path).
  std::mt19937 rng(7);
  std::vector<std::string> texts = {std::string(300, 'e'), std::string(97, 't') + "hethe", "thethethethe"};
  std::string s;
  for (int k = 0; k < 60; ++k) s += t.id_to_token_bytes(256 + static_cast<int32_t>(rng() % 1500));
  texts.push_back(s);
  const std::string letters = "etaoinshrdlucmfwyp";
  for (int n : {2, 5, 17, 64, 95, 96, 97, 150, 400}) {
    for (int rep = 0; rep < 5; ++rep) {
      std::string w;
      for (int i = 0; i < n; ++i) w += letters[rng() % letters.size()];
      texts.push_back(w);
    }
  }
  for (const std::string& text : texts) {
    std::vector<int32_t> want;
    for (std::string_view c : split_chunks(text)) {
      const auto part = naive_bpe(ranks, c);
      want.insert(want.end(), part.begin(), part.end());
    }
    EXPECT_EQ(t.encode(text), want) << text;
  }
}

TEST(EncodeTest, RoundTripsMultilingualAndInvalidUtf8) {
  const Tokenizer& t = small_tok();
  std::vector<std::string> texts = {tok_test::read_bytes(tok_test::fixture("multilingual.txt")),
                                    tok_test::read_bytes(tok_test::fixture("code.txt")),
                                    tok_test::read_bytes(tok_test::fixture("tricky.txt")),
                                    "",
                                    std::string("\xff\xfe\xfd"),
                                    std::string("caf\xc3") + " trunc\xe2\x82 \x80 " + std::string("nul\0byte", 8) +
                                        " \xed\xa0\x80\xc0\xaf the end\xf0\x9f"};
  std::mt19937 rng(11);
  for (int k = 0; k < 50; ++k) {  // random bytes
    std::string r(static_cast<size_t>(rng() % 200), '\0');
    for (char& c : r) c = static_cast<char>(rng() & 0xff);
    texts.push_back(r);
  }
  for (const auto& x : texts) {
    const auto ids = t.encode(x);
    for (int32_t id : ids) ASSERT_LT(id, t.bos_id());
    EXPECT_EQ(t.decode(ids), x);
  }
}

TEST(EncodeTest, SpecialTokensAtTopIdsAndNotRecognisedInText) {
  const Tokenizer& t = small_tok();
  const int V = t.vocab_size();
  for (size_t i = 0; i < kSpecialTokens.size(); ++i) {
    EXPECT_EQ(t.encode_special(kSpecialTokens[i]), V - 9 + static_cast<int>(i));
    EXPECT_EQ(t.decode({V - 9 + static_cast<int32_t>(i)}), kSpecialTokens[i]);
  }
  EXPECT_EQ(t.bos_id(), V - 9);
  EXPECT_EQ(t.encode_special("<|assistant_end|>"), V - 5);
  const std::string text = "<|bos|>Hello<|user_start|>";
  const auto ids = t.encode(text);
  EXPECT_GT(ids.size(), 3u);
  for (int32_t id : ids) EXPECT_LT(id, V - 9);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_THROW(t.encode_special("<|nope|>"), Error);
  EXPECT_THROW(t.decode({V}), Error);
  EXPECT_THROW(t.decode({-1}), Error);
  EXPECT_THROW(t.id_to_token_bytes(V), Error);
}

TEST(EncodeTest, TokenBytesAreRawByteLengths) {
  const Tokenizer& t = small_tok();
  const auto tb = t.token_bytes();
  ASSERT_EQ(tb.size(), static_cast<size_t>(t.vocab_size()));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tb[b], 1);
  for (int i = 1; i <= 9; ++i) EXPECT_EQ(tb[t.vocab_size() - i], 0);
  for (int id = 256; id < t.vocab_size() - 9; ++id)
    EXPECT_EQ(tb[id], static_cast<int32_t>(t.id_to_token_bytes(id).size()));
  // Sum over an encoding = the byte length of the text (what bpb divides by, docs/nanochat.md 3.6).
  const std::string text = tok_test::read_bytes(tok_test::fixture("multilingual.txt"));
  int64_t sum = 0;
  for (int32_t id : t.encode(text)) sum += tb[id];
  EXPECT_EQ(sum, static_cast<int64_t>(text.size()));
}

TEST(EncodeTest, BatchEqualsSingleWithPrependAtAnyThreadCount) {
  const Tokenizer& t = small_tok();
  std::vector<std::string> docs = tok_test::read_jsonl_texts(tok_test::fixture("train_docs.jsonl"));
  docs.resize(60);
  docs.push_back("");
  for (int threads : {1, 2, 3}) {
    const auto batch = t.encode_batch(docs, t.bos_id(), threads);
    ASSERT_EQ(batch.size(), docs.size());
    for (size_t i = 0; i < docs.size(); ++i) {
      std::vector<int32_t> want = {t.bos_id()};
      const auto e = t.encode(docs[i]);
      want.insert(want.end(), e.begin(), e.end());
      EXPECT_EQ(batch[i], want);
    }
  }
  const auto plain = t.encode_batch(docs);
  EXPECT_EQ(plain[0], t.encode(docs[0]));
  EXPECT_THROW(t.encode_batch(docs, t.vocab_size()), Error);
}

TEST(EncodeTest, UntrainedTokenizerThrows) {
  Tokenizer t;
  EXPECT_EQ(t.vocab_size(), 0);
  EXPECT_THROW(t.encode("x"), Error);
}

TEST(EncodeTest, FromTokensNeedsEveryByte) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 255; ++b) tokens.emplace_back(1, static_cast<char>(b));
  EXPECT_THROW(Tokenizer::from_tokens(tokens), Error);
  tokens.emplace_back(1, static_cast<char>(255));
  tokens.push_back("ab");
  const Tokenizer t = Tokenizer::from_tokens(tokens);
  EXPECT_EQ(t.vocab_size(), 257 + 9);
  EXPECT_EQ(t.encode("cab"), (std::vector<int32_t>{'c', 256}));
}

// ---------------------------------------------------------------------------------------------
// files: save, load, errors

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
    EXPECT_EQ(tok_test::read_bytes((d.path / f).string()),
              tok_test::read_bytes(tok_test::fixture(std::string("small_tok/") + f)))
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
  expect_error(good.substr(0, good.size() / 2), "tokenizer.ranks");       // truncated
  expect_error("!!!! 0\n" + good.substr(good.find('\n') + 1), "line 1");  // bad base64
  std::string swapped = good;                                             // changed bytes
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

}  // namespace
}  // namespace nanochat

namespace nanochat {

// The text save() writes, sent elsewhere (node 0 to its workers), makes the same tokenizer; damaged
// text is named with the origin given.
TEST(TokenizerSavedText, RoundTripsAndNamesTheOriginOfDamagedText) {
  const Tokenizer t = Tokenizer::train({"the cat sat on the mat", "the dog sat on the log", "a cat and a dog"}, 300);
  const Tokenizer::SavedText text = t.saved_text();
  const Tokenizer u = Tokenizer::from_saved_text(text, "rank 0 (at 10.0.0.1):tokenizer");
  EXPECT_EQ(u.hash(), t.hash());
  EXPECT_EQ(u.encode("the cat and the log"), t.encode("the cat and the log"));
  Tokenizer::SavedText bad = text;
  bad.ranks.resize(bad.ranks.size() / 2);
  try {
    Tokenizer::from_saved_text(bad, "rank 0 (at 10.0.0.1):tokenizer");
    FAIL() << "truncated ranks were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 (at 10.0.0.1):tokenizer/tokenizer.ranks"), std::string::npos)
        << e.what();
  }
}

}  // namespace nanochat
