// BPE training (docs/nanochat.md 6.2): closed-form merges on hand-made corpora, determinism, and exact parity
// with nanochat's rustbpe on a real corpus (small_tok/ was trained by rustbpe, see
// tools/tokenizer/make_fixtures.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nanochat/core/error.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "support/tok_test_util.h"

namespace nanochat {
namespace {

std::vector<std::string> repeat_docs(const std::vector<std::pair<std::string, int>>& spec) {
  std::vector<std::string> docs;
  for (const auto& [w, n] : spec)
    for (int i = 0; i < n; ++i) docs.push_back(w);
  return docs;
}

std::vector<std::string> merged_tokens(const Tokenizer& t) {
  std::vector<std::string> out;
  for (int id = 256; id < t.vocab_size() - 9; ++id) out.push_back(t.id_to_token_bytes(id));
  return out;
}

// Corpus (one word per doc, so no spaces): hug x10, pug x5, pun x12, bun x4, hugs x5.
// Pair counts: hu 15, ug 20, pu 17, un 16, bu 4, gs 5.
//  1: ug (20)                -> h ug | p ug | p u n | b u n | h ug s
//  2: un (16: pun 12 + bun 4) -> counts h-ug 15, p-ug 5, p-un 12, b-un 4, ug-s 5
//  3: h+ug = "hug" (15)      -> p-ug 5, p-un 12, b-un 4, hug-s 5
//  4: p+un = "pun" (12)
//  5: tie at 5 between (p, ug) = (112, 256) and (hug, s) = (258, 115): smallest pair -> "pug"
//  6: "hugs" (5)
//  7: "bun" (4), then no pairs are left.
TEST(TrainTest, ClosedFormMergesWithTieBreak) {
  const auto docs = repeat_docs({{"hug", 10}, {"pug", 5}, {"pun", 12}, {"bun", 4}, {"hugs", 5}});
  TokenizerTrainStats st;
  const Tokenizer t = Tokenizer::train(docs, 256 + 7 + 9, &st);
  EXPECT_EQ(t.vocab_size(), 272);
  EXPECT_EQ(st.num_merges, 7);
  EXPECT_EQ(st.num_unique_chunks, 5);
  EXPECT_THAT(merged_tokens(t), ::testing::ElementsAre("ug", "un", "hug", "pun", "pug", "hugs", "bun"));
  EXPECT_EQ(t.bos_id(), 263);
  EXPECT_EQ(t.encode("hugs"), (std::vector<int32_t>{261}));
  EXPECT_EQ(t.encode("bug"), (std::vector<int32_t>{'b', 256}));
}

TEST(TrainTest, StopsWhenPairsRunOut) {
  const auto docs = repeat_docs({{"hug", 10}, {"pug", 5}, {"pun", 12}, {"bun", 4}, {"hugs", 5}});
  TokenizerTrainStats st;
  const Tokenizer t = Tokenizer::train(docs, 1000, &st);
  EXPECT_EQ(st.num_merges, 7);
  EXPECT_EQ(t.vocab_size(), 256 + 7 + 9);
  EXPECT_EQ(t.encode_special("<|output_end|>"), t.vocab_size() - 1);
}

// "aaaaa" once: a-a occurs 4 times. Merge 1 "aa" rewrites it left to right as [aa][aa][a], which
// must remove all 4 (a, a) occurrences (a stale count would make (97, 97) win the next tie as the
// smallest pair). Then (aa, aa) and (aa, a) both count 1 and the smaller pair (256, 97) = "aaa"
// wins: [aa][aaa]; finally (256, 257) = "aaaaa".
TEST(TrainTest, OverlappingPairsMergeLeftToRight) {
  const Tokenizer t = Tokenizer::train({"aaaaa"}, 256 + 9 + 10);
  EXPECT_THAT(merged_tokens(t), ::testing::ElementsAre("aa", "aaa", "aaaaa"));
}

// Chunks are counted after the split, and counts are weighted: " ab" x3 and "ab" x1 as chunks.
// Pairs: (' ', a) 3, (a, b) 4 -> "ab" first, then (' ', ab) 3 -> " ab".
TEST(TrainTest, CountsWeightedChunksAfterSplit) {
  const Tokenizer t = Tokenizer::train({"ab ab ab ab"}, 256 + 9 + 2);
  EXPECT_THAT(merged_tokens(t), ::testing::ElementsAre("ab", " ab"));
  EXPECT_EQ(t.encode("ab ab"), (std::vector<int32_t>{256, 257}));
}

TEST(TrainTest, DeterministicAndIndependentOfThreadCount) {
  const auto docs = tok_test::read_jsonl_texts(tok_test::fixture("train_docs.jsonl"));
  const Tokenizer a = Tokenizer::train(docs, 700);
  const Tokenizer b = Tokenizer::train(docs, 700);
  TokenizerTrainer one;
  one.add_documents(docs, 1);
  const Tokenizer c = one.train(700);
  TokenizerTrainer streamed;
  for (const auto& d : docs) streamed.add_document(d);
  const Tokenizer e = streamed.train(700);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.hash(), c.hash());
  EXPECT_EQ(a.hash(), e.hash());
  EXPECT_EQ(merged_tokens(a), merged_tokens(b));
}

// small_tok/ holds the ranks that rustbpe (nanochat's trainer) learned from train_docs.jsonl at
// vocab 2048; our trainer must produce exactly the same 1783 merges in the same order.
TEST(TrainTest, MatchesRustbpeOnRealCorpus) {
  const auto docs = tok_test::read_jsonl_texts(tok_test::fixture("train_docs.jsonl"));
  const Tokenizer ours = Tokenizer::train(docs, 2048);
  const Tokenizer ref = Tokenizer::load(tok_test::fixture("small_tok"));
  ASSERT_EQ(ours.vocab_size(), 2048);
  ASSERT_EQ(ref.vocab_size(), 2048);
  for (int id = 0; id < 2048; ++id)
    ASSERT_EQ(ours.id_to_token_bytes(id), ref.id_to_token_bytes(id)) << "first difference at id " << id;
  EXPECT_EQ(ours.hash(), ref.hash());
}

TEST(TrainTest, RejectsTooSmallVocabAndSecondTrain) {
  EXPECT_THROW(Tokenizer::train({"abc"}, 264), Error);
  TokenizerTrainer t;
  t.add_document("abc abc");
  EXPECT_EQ(t.num_unique_chunks(), 2);
  (void)t.train(300);
  EXPECT_THROW(t.train(300), Error);
}

}  // namespace
}  // namespace nanochat

namespace nanochat {
namespace {

// tok_train's selection: doc[:doc_cap] in code points; stop after the doc that crosses max_chars.
TEST(TrainTextBudgetTest, CapsByCodePointsAndStopsAfterCrossingDoc) {
  TrainTextBudget b(/*max_chars=*/10, /*doc_cap=*/4);
  std::string d1 = "\xc3\xa9t\xc3\xa9s!";  // "étés!" = 5 code points, 7 bytes -> "étés" (6 bytes)
  EXPECT_TRUE(b.take(d1));
  EXPECT_EQ(d1, "\xc3\xa9t\xc3\xa9s");
  EXPECT_EQ(b.chars(), 4);
  std::string d2 = "abc";
  EXPECT_TRUE(b.take(d2));                      // 7 <= 10
  std::string d3 = "\xe4\xbd\xa0\xe5\xa5\xbd";  // 2 code points: 9 <= 10
  EXPECT_TRUE(b.take(d3));
  EXPECT_FALSE(b.exhausted());
  std::string d4 = "wxyz12";  // capped to 4: 13 > 10 -> last document
  EXPECT_FALSE(b.take(d4));
  EXPECT_EQ(d4, "wxyz");
  EXPECT_TRUE(b.exhausted());
  EXPECT_EQ(b.docs(), 4);
  EXPECT_EQ(b.chars(), 13);
  TrainTextBudget exact(3, 100);
  std::string e = "abc";
  EXPECT_TRUE(exact.take(e));  // 3 is not > 3
  std::string empty;
  EXPECT_TRUE(exact.take(empty));
}

}  // namespace
}  // namespace nanochat
