#pragma once
// Byte-level BPE tokenizer of nanochat (docs/nanochat.md 6; nanochat/tokenizer.py + rustbpe + tiktoken).
//
//  * Pre-split: nanochat's split regex (GPT-4's pattern with \p{N}{1,2}), matched with PCRE2 (JIT)
//    with tiktoken's semantics (\s = Unicode White_Space). Text is bytes: invalid UTF-8 sequences
//    become chunks of their own, so every byte string encodes and decodes back exactly.
//  * Mergeable ranks: ids 0..255 are the single bytes; id 256+k is the k-th merge (the bytes of its
//    two parents concatenated). Encoding merges, inside each chunk, the adjacent pair whose
//    concatenation has the lowest rank until none applies (tiktoken semantics).
//  * Special tokens: the 9 names of kSpecialTokens at ids V-9 .. V-1 (<|bos|> = V-9). They are never
//    produced by encode() (special-token strings in text are encoded as ordinary text).
//
// A Tokenizer is immutable after train()/load(); copies share the same tables and all const methods
// are safe to call from several threads at once.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nanochat {

/// nanochat's split pattern (docs/nanochat.md 6.1), exactly.
extern const char* const kSplitPattern;

/// The 9 special tokens in id order (docs/nanochat.md 6.1); they take the top 9 ids of the vocabulary.
inline constexpr std::array<const char*, 9> kSpecialTokens = {
    "<|bos|>",          "<|user_start|>", "<|user_end|>",     "<|assistant_start|>", "<|assistant_end|>",
    "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"};

/// Splits text into chunks with kSplitPattern (PCRE2 JIT). The chunks are views into `text` and
/// cover it completely, in order. Exposed for tests and for training.
std::vector<std::string_view> split_chunks(std::string_view text);

/// What a training run saw (for logs).
struct TokenizerTrainStats {
  int64_t num_unique_chunks = 0;  ///< distinct pre-split chunks seen
  int64_t num_merges = 0;         ///< merges learned (may be fewer than asked if pairs run out)
};

class Tokenizer {
 public:
  /// An empty tokenizer (vocab_size() == 0); only useful as a placeholder to assign to.
  Tokenizer();

  /// Trains byte-level BPE like nanochat's rustbpe (docs/nanochat.md 6.2): each doc is split with
  /// kSplitPattern, unique chunks are counted (weighted), then vocab_size - 9 - 256 merges are
  /// learned, each the pair with the highest weighted count (ties -> lexicographically smallest
  /// (a, b) id pair), merged left-to-right without overlap. The 9 specials take the top ids.
  /// Deterministic (splitting runs on 2 threads; the result does not depend on it). Verified
  /// merge-for-merge against rustbpe. Throws nanochat::Error if vocab_size < 256 + 9. If the text
  /// runs out of pairs before all merges are learned, the vocabulary is smaller than asked
  /// (vocab_size() tells).
  static Tokenizer train(const std::vector<std::string>& docs, int vocab_size, TokenizerTrainStats* stats = nullptr);

  /// A tokenizer from explicit mergeable tokens: id i has bytes tokens[i] (ids 0..M-1, M =
  /// tokens.size()), specials at M..M+8. Every single byte must be one of the tokens. Merging
  /// follows tiktoken: two adjacent parts merge when their concatenation is a token, lowest id first.
  /// Throws nanochat::Error if a byte is missing or the pattern does not compile.
  static Tokenizer from_tokens(const std::vector<std::string>& tokens, const std::string& pattern = kSplitPattern);

  /// Loads what save() wrote from `dir` (tokenizer.ranks + tokenizer.json). Throws nanochat::Error
  /// naming the dir/file if it is missing or corrupt.
  static Tokenizer load(const std::string& dir);

  /// The text of tokenizer.json and tokenizer.ranks exactly as save() writes them
  /// (token_bytes.bin is derived from them). The data feed sends them from node 0 to the workers.
  struct SavedText {
    std::string json;   ///< tokenizer.json
    std::string ranks;  ///< tokenizer.ranks
  };
  SavedText saved_text() const;
  /// The tokenizer whose saved_text() is `text`; `dir` is where the text came from and is named in
  /// errors as <dir>/tokenizer.json or <dir>/tokenizer.ranks. Throws nanochat::Error like load().
  static Tokenizer from_saved_text(const SavedText& text, const std::string& dir);

  /// Writes into `dir` (created if missing):
  ///   tokenizer.ranks   tiktoken format: "<base64 of token bytes> <rank>\n" per mergeable token
  ///   tokenizer.json    {"format", "pattern", "num_mergeable", "vocab_size",
  ///                      "special_tokens": {name: id}, "hash": hex of hash()}
  ///   token_bytes.bin   int32 little-endian (V,) = token_bytes()
  /// Throws nanochat::Error naming the file on I/O failure.
  void save(const std::string& dir) const;

  /// Ordinary encoding (special-token strings are NOT recognised): regex split, then BPE per chunk.
  std::vector<int32_t> encode(std::string_view text) const;

  /// Encodes each text (in parallel over num_threads threads); if prepend_id >= 0 it is put first
  /// in every row (e.g. bos_id()).
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts, int32_t prepend_id = -1,
                                                 int num_threads = 4) const;

  /// Concatenates the bytes of the ids (special ids decode to their names). Bytes are returned raw,
  /// so invalid UTF-8 survives and decode(encode(x)) == x for every byte string x.
  /// Throws nanochat::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  /// Id of a special token by name, e.g. "<|bos|>". Throws nanochat::Error for an unknown name.
  int32_t encode_special(const std::string& name) const;
  /// Id of "<|bos|>" (= vocab_size() - 9).
  int32_t bos_id() const;
  /// Total vocabulary size V including the 9 specials.
  int vocab_size() const;
  /// (V,) raw byte length of each token; 0 for the 9 specials (docs/nanochat.md 6.2, used for bpb in 3.6).
  std::vector<int32_t> token_bytes() const;
  /// The raw bytes of one token (a special id gives its name). Throws for an id out of range.
  std::string id_to_token_bytes(int32_t id) const;
  /// Stable 64-bit hash (FNV-1a) of the ranks, the split pattern and the specials; equal tokenizers
  /// have equal hashes on every machine (ranks compare it before training).
  uint64_t hash() const;
  /// The split pattern (kSplitPattern for every tokenizer this product trains).
  const std::string& pattern() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

/// The text selection of nanochat's tok_train (docs/nanochat.md 6.2): each document is cut to doc_cap
/// characters (Unicode code points, Python's doc[:doc_cap]); documents are taken until the one that
/// makes the running character count exceed max_chars (that one is still taken).
class TrainTextBudget {
 public:
  TrainTextBudget(int64_t max_chars, int64_t doc_cap) : max_chars_(max_chars), doc_cap_(doc_cap) {}
  /// Truncates doc in place and counts it. Returns false once the budget is exhausted, i.e. this
  /// document is the last one to take (it is still truncated and counted).
  bool take(std::string& doc);
  int64_t chars() const { return chars_; }
  int64_t docs() const { return docs_; }
  bool exhausted() const { return chars_ > max_chars_; }

 private:
  int64_t max_chars_, doc_cap_;
  int64_t chars_ = 0, docs_ = 0;
};

/// Streaming BPE trainer (docs/nanochat.md 6.2): feed documents, then train(). Tokenizer::train() wraps it.
/// Memory grows with the number of distinct pre-split chunks, not with the text length.
class TokenizerTrainer {
 public:
  TokenizerTrainer();
  ~TokenizerTrainer();
  TokenizerTrainer(const TokenizerTrainer&) = delete;
  TokenizerTrainer& operator=(const TokenizerTrainer&) = delete;

  /// Splits one document and counts its chunks.
  void add_document(std::string_view doc);
  /// Same for many documents, split on num_threads threads (the counts do not depend on it).
  void add_documents(const std::vector<std::string>& docs, int num_threads = 2);
  /// Distinct chunks counted so far.
  int64_t num_unique_chunks() const;
  /// Learns vocab_size - 9 - 256 merges from the counted chunks (see Tokenizer::train). May be
  /// called once; throws nanochat::Error if vocab_size < 265 or if called twice.
  Tokenizer train(int vocab_size, TokenizerTrainStats* stats = nullptr);

 private:
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace nanochat
