// BPE training (docs/nanochat.md 6.2, the algorithm of nanochat's rustbpe; our own implementation).
//
// 1. Every document is split with the pattern; distinct chunks are counted (weighted).
// 2. Each distinct chunk becomes a "word": a sequence of token ids, initially its bytes (0..255).
// 3. Pair statistics: count[p] = sum over words of (occurrences of p in the word) * word count;
//    positions[p] = ids of the words that contain p (sorted, may hold words that lost p since).
// 4. Merge k (new id 256 + k): the pair with the highest count, ties -> smallest (a, b). A max-heap
//    holds (count, pair) entries; counts of existing pairs only ever decrease, so a popped entry
//    whose count is stale is re-pushed with the current count (lazy refresh) and the first
//    up-to-date entry is the true maximum. Every word in positions[p] is rewritten by merging the
//    non-overlapping occurrences of p left to right; the counts of the pairs that the rewrite
//    destroyed are decreased and the pairs it created (all contain the new id) are counted and
//    pushed.
#include <algorithm>
#include <thread>

#include "nanochat/core/error.h"
#include "nanochat/tokenizer/hash_tables.h"
#include "nanochat/tokenizer/splitter.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat {

using tok_detail::PairMap;
using tok_detail::Splitter;
using tok_detail::StringCounter;

struct TokenizerTrainer::State {
  StringCounter counter;
  bool trained = false;
};

TokenizerTrainer::TokenizerTrainer() : st_(std::make_unique<State>()) {}
TokenizerTrainer::~TokenizerTrainer() = default;

void TokenizerTrainer::add_document(std::string_view doc) {
  Splitter::nanochat_default().for_each(doc, [&](std::string_view c) { st_->counter.add(c, 1); });
}

void TokenizerTrainer::add_documents(const std::vector<std::string>& docs, int num_threads) {
  const size_t nt = std::min<size_t>(static_cast<size_t>(std::max(1, num_threads)), docs.size());
  if (nt <= 1) {
    for (const std::string& d : docs) add_document(d);
    return;
  }
  // Contiguous blocks per thread, merged in thread order (counts are sums, so the result does not
  // depend on the thread count anyway).
  std::vector<StringCounter> partial(nt - 1);
  std::vector<std::thread> threads;
  const size_t per = (docs.size() + nt - 1) / nt;
  for (size_t t = 1; t < nt; ++t) {
    threads.emplace_back([&, t] {
      const Splitter& sp = Splitter::nanochat_default();
      const size_t b = std::min(docs.size(), t * per), e = std::min(docs.size(), (t + 1) * per);
      for (size_t i = b; i < e; ++i) sp.for_each(docs[i], [&](std::string_view c) { partial[t - 1].add(c, 1); });
    });
  }
  for (size_t i = 0; i < std::min(docs.size(), per); ++i) add_document(docs[i]);
  for (auto& th : threads) th.join();
  for (const StringCounter& p : partial) p.for_each([&](std::string_view s, int64_t c) { st_->counter.add(s, c); });
}

int64_t TokenizerTrainer::num_unique_chunks() const { return static_cast<int64_t>(st_->counter.size()); }

namespace {

inline uint64_t pack(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct HeapEntry {
  int64_t count;
  uint64_t pair;
};
// "a below b" for std::push_heap (a max-heap): lower count, or same count and larger pair.
struct HeapLess {
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    return a.count < b.count || (a.count == b.count && a.pair > b.pair);
  }
};

class Learner {
 public:
  void add_word(std::string_view bytes, int64_t count) {
    if (bytes.size() < 2) return;  // no pairs: cannot influence any merge
    word_off_.push_back(syms_.size());
    word_len_.push_back(static_cast<int32_t>(bytes.size()));
    word_cnt_.push_back(count);
    for (char c : bytes) syms_.push_back(static_cast<unsigned char>(c));
  }

  // Returns the merged pairs in order.
  std::vector<std::pair<int32_t, int32_t>> learn(int num_merges) {
    // Initial pair statistics, words in order so every positions list is sorted.
    for (int32_t w = 0; w < static_cast<int32_t>(word_len_.size()); ++w) {
      const int32_t* s = syms_.data() + word_off_[w];
      for (int32_t i = 0; i + 1 < word_len_[w]; ++i) {
        const int32_t p = pair_index(pack(s[i], s[i + 1]));
        count_[p] += word_cnt_[w];
        if (pos_[p].empty() || pos_[p].back() != w) pos_[p].push_back(w);
      }
    }
    heap_.reserve(key_.size());
    for (size_t p = 0; p < key_.size(); ++p)
      if (count_[p] > 0) heap_.push_back({count_[p], key_[p]});
    std::make_heap(heap_.begin(), heap_.end(), HeapLess{});

    std::vector<std::pair<int32_t, int32_t>> merges;
    merges.reserve(static_cast<size_t>(std::max(0, num_merges)));
    std::vector<int32_t> orig;
    std::vector<char> in_merge;
    std::vector<int32_t> touched;
    for (int k = 0; k < num_merges; ++k) {
      // Pop until an entry is up to date (lazy refresh).
      int32_t best = -1;
      while (!heap_.empty()) {
        std::pop_heap(heap_.begin(), heap_.end(), HeapLess{});
        const HeapEntry e = heap_.back();
        heap_.pop_back();
        const int32_t p = pair_map_.find(e.pair);
        const int64_t cur = count_[p];
        if (cur == e.count) {
          best = p;
          break;
        }
        if (cur > 0) {
          heap_.push_back({cur, e.pair});
          std::push_heap(heap_.begin(), heap_.end(), HeapLess{});
        }
      }
      if (best < 0 || count_[best] <= 0) break;  // no pairs left
      const auto a = static_cast<int32_t>(key_[best] >> 32);
      const auto b = static_cast<int32_t>(key_[best] & 0xffffffffu);
      const int32_t nid = 256 + k;
      merges.emplace_back(a, b);

      std::vector<int32_t> words = std::move(pos_[best]);
      pos_[best].clear();
      touched.clear();
      for (int32_t w : words) {
        int32_t* s = syms_.data() + word_off_[w];
        const int32_t n = word_len_[w];
        const int64_t cnt = word_cnt_[w];
        // Any occurrence at all? (the word may have lost the pair in an earlier merge)
        bool found = false;
        for (int32_t i = 0; i + 1 < n; ++i)
          if (s[i] == a && s[i + 1] == b) {
            found = true;
            break;
          }
        if (!found) continue;
        orig.assign(s, s + n);
        in_merge.assign(static_cast<size_t>(n), 0);
        int32_t out = 0;
        for (int32_t i = 0; i < n;) {
          if (i + 1 < n && orig[i] == a && orig[i + 1] == b) {
            in_merge[i] = in_merge[i + 1] = 1;
            s[out++] = nid;
            i += 2;
          } else {
            s[out++] = orig[i++];
          }
        }
        word_len_[w] = out;
        // Pairs destroyed: every original pair touching a merged occurrence.
        for (int32_t i = 0; i + 1 < n; ++i)
          if (in_merge[i] || in_merge[i + 1]) count_[pair_map_.find(pack(orig[i], orig[i + 1]))] -= cnt;
        // Pairs created: every new pair containing the new id.
        for (int32_t i = 0; i + 1 < out; ++i) {
          if (s[i] != nid && s[i + 1] != nid) continue;
          const int32_t p = pair_index(pack(s[i], s[i + 1]));
          count_[p] += cnt;
          if (pos_[p].empty() || pos_[p].back() != w) pos_[p].push_back(w);
          if (epoch_[p] != nid) {
            epoch_[p] = nid;
            touched.push_back(p);
          }
        }
      }
      for (int32_t p : touched)
        if (count_[p] > 0) {
          heap_.push_back({count_[p], key_[p]});
          std::push_heap(heap_.begin(), heap_.end(), HeapLess{});
        }
    }
    return merges;
  }

 private:
  int32_t pair_index(uint64_t key) {
    bool inserted = false;
    const size_t slot = pair_map_.find_or_insert(key, static_cast<int32_t>(key_.size()), &inserted);
    if (inserted) {
      key_.push_back(key);
      count_.push_back(0);
      pos_.emplace_back();
      epoch_.push_back(-1);
    }
    return pair_map_.value_at(slot);
  }

  std::vector<int32_t> syms_;
  std::vector<size_t> word_off_;
  std::vector<int32_t> word_len_;
  std::vector<int64_t> word_cnt_;
  PairMap pair_map_{1 << 16};
  std::vector<uint64_t> key_;
  std::vector<int64_t> count_;
  std::vector<std::vector<int32_t>> pos_;
  std::vector<int32_t> epoch_;
  std::vector<HeapEntry> heap_;
};

}  // namespace

Tokenizer TokenizerTrainer::train(int vocab_size, TokenizerTrainStats* stats) {
  const int nspecial = static_cast<int>(kSpecialTokens.size());
  if (vocab_size < 256 + nspecial)
    fail("tok-train: --vocab-size ", vocab_size, " is too small: it must be at least ", 256 + nspecial,
         " (256 bytes + ", nspecial, " special tokens)");
  if (st_->trained) fail("tokenizer: TokenizerTrainer::train called twice");
  st_->trained = true;

  // Distinct chunks in byte order, so the result does not depend on hash-table layout.
  std::vector<std::pair<std::string_view, int64_t>> chunks;
  chunks.reserve(st_->counter.size());
  st_->counter.for_each([&](std::string_view s, int64_t c) { chunks.emplace_back(s, c); });
  std::sort(chunks.begin(), chunks.end(), [](const auto& x, const auto& y) { return x.first < y.first; });

  Learner learner;
  for (const auto& [s, c] : chunks) learner.add_word(s, c);
  const int want = vocab_size - nspecial - 256;
  const auto merges = learner.learn(want);

  std::vector<std::string> tokens(256 + merges.size());
  for (int b = 0; b < 256; ++b) tokens[b] = std::string(1, static_cast<char>(b));
  for (size_t k = 0; k < merges.size(); ++k) tokens[256 + k] = tokens[merges[k].first] + tokens[merges[k].second];
  if (stats) {
    stats->num_unique_chunks = static_cast<int64_t>(chunks.size());
    stats->num_merges = static_cast<int64_t>(merges.size());
  }
  return Tokenizer::from_tokens(tokens, kSplitPattern);
}

bool TrainTextBudget::take(std::string& doc) {
  int64_t n = 0;
  for (size_t i = 0; i < doc.size(); ++i) {
    if ((static_cast<unsigned char>(doc[i]) & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    if (n == doc_cap_) {
      doc.resize(i);
      break;
    }
    ++n;
  }
  chars_ += n;
  ++docs_;
  return chars_ <= max_chars_;
}

Tokenizer Tokenizer::train(const std::vector<std::string>& docs, int vocab_size, TokenizerTrainStats* stats) {
  TokenizerTrainer t;
  t.add_documents(docs, 2);
  return t.train(vocab_size, stats);
}

}  // namespace nanochat
