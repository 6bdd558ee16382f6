#pragma once
// Internal state of nanochat::Tokenizer (shared, immutable after construction).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nanochat/tokenizer/hash_tables.h"
#include "nanochat/tokenizer/splitter.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat {

struct Tokenizer::Impl {
  /// Builds every table from the mergeable tokens (id i has bytes tokens[i]) and the pattern;
  /// the 9 specials get ids tokens.size() .. tokens.size() + 8. Throws nanochat::Error when a
  /// single byte is missing from the tokens (some text could not be encoded).
  Impl(const std::vector<std::string>& tokens, const std::string& pattern);

  std::string_view bytes_of(int32_t id) const {
    return std::string_view(blob.data() + offsets[id], offsets[id + 1] - offsets[id]);
  }
  /// Rank of a whole byte string if it is a mergeable token, else -1 (tiktoken's encoder lookup).
  int32_t rank_of(std::string_view s) const;
  /// Same with h = tok_detail::hash_bytes(s) already computed.
  int32_t rank_of(std::string_view s, uint64_t h) const;
  /// Appends the BPE ids of one pre-split chunk.
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;
  void encode_into(std::string_view text, std::vector<int32_t>& out) const;

  std::string pattern;
  std::unique_ptr<tok_detail::Splitter> own_splitter;  // null when pattern == kSplitPattern
  const tok_detail::Splitter* splitter = nullptr;
  int32_t num_mergeable = 0;      // M; specials are M .. M+8
  int32_t vocab = 0;              // V = M + 9
  std::string blob;               // bytes of all ids (specials: their names), concatenated
  std::vector<uint32_t> offsets;  // (V+1,) into blob
  int32_t byte_id[256] = {};      // id of each single byte
  // Whole-token lookup: slots hold (hash tag, rank); -1 rank = empty.
  struct BytesSlot {
    uint32_t tag = 0;
    int32_t rank = -1;
  };
  std::vector<BytesSlot> bytes_slots;
  size_t bytes_mask = 0;
  // (rank a, rank b) -> rank of bytes(a)+bytes(b), for every pair whose concatenation is a token.
  tok_detail::PairMap pair_rank;
  uint64_t hash = 0;
  uint64_t instance = 0;  // unique per Impl, keys the per-thread chunk caches
};

}  // namespace nanochat
