// Tokenizer runtime: tables, encode (regex split + tiktoken-style BPE), decode, save/load.
#include "nanochat/tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <queue>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/tokenizer/base64.h"
#include "nanochat/tokenizer/tokenizer_impl.h"

namespace nanochat {

using tok_detail::hash_bytes;

namespace {

std::atomic<uint64_t> g_instance_counter{1};

inline uint64_t pack(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// FNV-1a 64 (stable across machines): used for Tokenizer::hash().
struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= c[i];
      h *= 0x100000001b3ull;
    }
  }
  void u32(uint32_t v) {
    unsigned char b[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                          static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
    bytes(b, 4);
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
};

// Per-thread cache of recently encoded multi-token chunks (direct-mapped; keyed by the chunk's
// bytes and the Impl instance, so tokenizers used alternately on one thread never see each other's
// entries). Only chunks that are not whole tokens get here.
struct ChunkCache {
  static constexpr size_t kSlotBits = 13;  // 8192 slots, ~0.7 MB per thread
  static constexpr size_t kMaxKey = 30;
  static constexpr size_t kMaxIds = 8;
  struct Slot {
    uint64_t owner = 0;  // Impl::instance; 0 = empty
    uint64_t h = 0;
    uint8_t len = 0;
    uint8_t nids = 0;
    char key[kMaxKey];
    int32_t ids[kMaxIds];
  };
  std::vector<Slot> slots = std::vector<Slot>(size_t(1) << kSlotBits);
};

ChunkCache& thread_cache() {
  thread_local ChunkCache cache;
  return cache;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Impl construction

Tokenizer::Impl::Impl(const std::vector<std::string>& tokens, const std::string& pat) : pattern(pat) {
  if (pattern == kSplitPattern) {
    splitter = &tok_detail::Splitter::nanochat_default();
  } else {
    own_splitter = std::make_unique<tok_detail::Splitter>(pattern);
    splitter = own_splitter.get();
  }
  NC_CHECK(tokens.size() < static_cast<size_t>(INT32_MAX) - 16, "too many tokens");
  num_mergeable = static_cast<int32_t>(tokens.size());
  vocab = num_mergeable + static_cast<int32_t>(kSpecialTokens.size());
  offsets.reserve(static_cast<size_t>(vocab) + 1);
  offsets.push_back(0);
  for (const std::string& t : tokens) {
    blob += t;
    offsets.push_back(static_cast<uint32_t>(blob.size()));
  }
  for (const char* s : kSpecialTokens) {
    blob += s;
    offsets.push_back(static_cast<uint32_t>(blob.size()));
  }

  // Whole-token table; on duplicate byte strings the later id wins (like a Python dict built in
  // rank order, which is what tiktoken sees).
  bytes_slots.assign(tok_detail::capacity_for(tokens.size()), BytesSlot{});
  bytes_mask = bytes_slots.size() - 1;
  for (int32_t id = 0; id < num_mergeable; ++id) {
    std::string_view s = bytes_of(id);
    const uint64_t h = hash_bytes(s.data(), s.size());
    size_t i = h & bytes_mask;
    for (;;) {
      BytesSlot& sl = bytes_slots[i];
      if (sl.rank < 0) {
        sl.tag = static_cast<uint32_t>(h >> 32);
        sl.rank = id;
        break;
      }
      if (sl.tag == static_cast<uint32_t>(h >> 32) && bytes_of(sl.rank) == s) {
        sl.rank = id;
        break;
      }
      i = (i + 1) & bytes_mask;
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_id[b] = rank_of(std::string_view(&c, 1));
    if (byte_id[b] < 0) fail("tokenizer: byte ", b, " has no token, so some text could not be encoded");
  }

  // Every split of every token into two tokens gives a mergeable pair (tiktoken merges two
  // adjacent parts whenever their concatenation has a rank).
  pair_rank.reset(static_cast<size_t>(num_mergeable) * 2);
  for (int32_t id = 0; id < num_mergeable; ++id) {
    std::string_view s = bytes_of(id);
    if (s.size() < 2 || rank_of(s) != id) continue;
    for (size_t k = 1; k < s.size(); ++k) {
      const int32_t a = rank_of(s.substr(0, k));
      if (a < 0) continue;
      const int32_t b = rank_of(s.substr(k));
      if (b < 0) continue;
      bool inserted = false;
      size_t slot = pair_rank.find_or_insert(pack(a, b), id, &inserted);
      pair_rank.value_at(slot) = id;
    }
  }

  Fnv1a f;
  f.str("nanochat.cpp tokenizer v1");
  f.str(pattern);
  f.u32(static_cast<uint32_t>(num_mergeable));
  for (int32_t id = 0; id < num_mergeable; ++id) f.str(bytes_of(id));
  for (size_t i = 0; i < kSpecialTokens.size(); ++i) {
    f.str(kSpecialTokens[i]);
    f.u32(static_cast<uint32_t>(num_mergeable + static_cast<int32_t>(i)));
  }
  hash = f.h;
  instance = g_instance_counter.fetch_add(1);
}

int32_t Tokenizer::Impl::rank_of(std::string_view s) const { return rank_of(s, hash_bytes(s.data(), s.size())); }

int32_t Tokenizer::Impl::rank_of(std::string_view s, uint64_t h) const {
  const auto tag = static_cast<uint32_t>(h >> 32);
  size_t i = h & bytes_mask;
  for (;;) {
    const BytesSlot& sl = bytes_slots[i];
    if (sl.rank < 0) return -1;
    if (sl.tag == tag) {
      const uint32_t o = offsets[sl.rank], e = offsets[sl.rank + 1];
      if (e - o == s.size() && std::memcmp(blob.data() + o, s.data(), s.size()) == 0) return sl.rank;
    }
    i = (i + 1) & bytes_mask;
  }
}

// ---------------------------------------------------------------------------------------------
// Encoding

namespace {

constexpr int32_t kNoRank = INT32_MAX;
constexpr size_t kSmallChunk = 96;

// tiktoken's byte_pair_merge, O(n^2) on a short chunk: repeatedly merge the leftmost adjacent
// pair with the lowest rank.
void bpe_small(const Tokenizer::Impl& im, std::string_view chunk, std::vector<int32_t>& out) {
  int32_t ids[kSmallChunk];
  int32_t ranks[kSmallChunk];
  int n = static_cast<int>(chunk.size());
  for (int i = 0; i < n; ++i) ids[i] = im.byte_id[static_cast<unsigned char>(chunk[i])];
  for (int i = 0; i + 1 < n; ++i) {
    const int32_t r = im.pair_rank.find(pack(ids[i], ids[i + 1]));
    ranks[i] = r < 0 ? kNoRank : r;
  }
  while (n > 1) {
    int best = 0;
    int32_t br = ranks[0];
    for (int i = 1; i + 1 < n; ++i)
      if (ranks[i] < br) {
        br = ranks[i];
        best = i;
      }
    if (br == kNoRank) break;
    ids[best] = br;
    std::memmove(ids + best + 1, ids + best + 2, sizeof(int32_t) * static_cast<size_t>(n - best - 2));
    std::memmove(ranks + best, ranks + best + 1, sizeof(int32_t) * static_cast<size_t>(n - best - 2));
    --n;
    if (best + 1 < n) {
      const int32_t r = im.pair_rank.find(pack(ids[best], ids[best + 1]));
      ranks[best] = r < 0 ? kNoRank : r;
    }
    if (best > 0) {
      const int32_t r = im.pair_rank.find(pack(ids[best - 1], ids[best]));
      ranks[best - 1] = r < 0 ? kNoRank : r;
    }
  }
  out.insert(out.end(), ids, ids + n);
}

// Same result as bpe_small in O(n log n) for long chunks (e.g. long runs of CJK letters): parts in
// a linked list, candidate pairs in a min-heap keyed (rank, start of left part). An entry is valid
// iff its left part is alive and the pair starting there still has that rank (the byte span of
// the pair at a given start only grows, so a rank never repeats at the same start).
void bpe_large(const Tokenizer::Impl& im, std::string_view chunk, std::vector<int32_t>& out) {
  const int n = static_cast<int>(chunk.size());
  std::vector<int32_t> ids(n), next(n), prev(n);
  for (int i = 0; i < n; ++i) {
    ids[i] = im.byte_id[static_cast<unsigned char>(chunk[i])];
    next[i] = i + 1;
    prev[i] = i - 1;
  }
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> heap;
  auto rank_at = [&](int i) -> int32_t {
    if (i < 0 || next[i] >= n) return -1;
    return im.pair_rank.find(pack(ids[i], ids[next[i]]));
  };
  auto push = [&](int i) {
    const int32_t r = rank_at(i);
    if (r >= 0) heap.push((static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(i));
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<char> alive(n, 1);
  while (!heap.empty()) {
    const uint64_t top = heap.top();
    heap.pop();
    const auto r = static_cast<int32_t>(top >> 32);
    const auto i = static_cast<int>(top & 0xffffffffu);
    if (!alive[i] || rank_at(i) != r) continue;
    const int j = next[i];
    ids[i] = r;
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    push(i);
    if (prev[i] >= 0) push(prev[i]);
  }
  for (int i = 0; i < n; i = next[i]) out.push_back(ids[i]);
}

}  // namespace

void Tokenizer::Impl::encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const {
  const size_t n = chunk.size();
  if (n == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(chunk[0])]);
    return;
  }
  const uint64_t h = hash_bytes(chunk.data(), n);
  const int32_t whole = rank_of(chunk, h);
  if (whole >= 0) {  // tiktoken's shortcut: a chunk that is a token is that token
    out.push_back(whole);
    return;
  }
  if (n <= ChunkCache::kMaxKey) {
    ChunkCache::Slot& sl = thread_cache().slots[(h * 0x9e3779b97f4a7c15ull) >> (64 - ChunkCache::kSlotBits)];
    if (sl.owner == instance && sl.h == h && sl.len == n && std::memcmp(sl.key, chunk.data(), n) == 0) {
      out.insert(out.end(), sl.ids, sl.ids + sl.nids);
      return;
    }
    const size_t before = out.size();
    bpe_small(*this, chunk, out);
    const size_t nids = out.size() - before;
    if (nids <= ChunkCache::kMaxIds) {
      sl.owner = instance;
      sl.h = h;
      sl.len = static_cast<uint8_t>(n);
      sl.nids = static_cast<uint8_t>(nids);
      std::memcpy(sl.key, chunk.data(), n);
      std::memcpy(sl.ids, out.data() + before, nids * sizeof(int32_t));
    }
    return;
  }
  if (n <= kSmallChunk)
    bpe_small(*this, chunk, out);
  else
    bpe_large(*this, chunk, out);
}

void Tokenizer::Impl::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  splitter->for_each(text, [&](std::string_view c) { encode_chunk(c, out); });
}

// ---------------------------------------------------------------------------------------------
// Public API

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

namespace {
const Tokenizer::Impl& need(const std::shared_ptr<const Tokenizer::Impl>& p) {
  if (!p) fail("tokenizer: used before it was trained or loaded");
  return *p;
}
}  // namespace

Tokenizer Tokenizer::from_tokens(const std::vector<std::string>& tokens, const std::string& pattern) {
  return Tokenizer(std::make_shared<const Impl>(tokens, pattern));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const Impl& im = need(impl_);
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 8);
  im.encode_into(text, out);
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts, int32_t prepend_id,
                                                          int num_threads) const {
  const Impl& im = need(impl_);
  if (prepend_id >= im.vocab) fail("tokenizer: prepend id ", prepend_id, " is outside the vocabulary of ", im.vocab);
  std::vector<std::vector<int32_t>> out(texts.size());
  auto work = [&](size_t i) {
    std::vector<int32_t>& v = out[i];
    v.reserve(texts[i].size() / 4 + 8);
    if (prepend_id >= 0) v.push_back(prepend_id);
    im.encode_into(texts[i], v);
  };
  const size_t nt = std::min<size_t>(static_cast<size_t>(std::max(1, num_threads)), texts.size());
  if (nt <= 1) {
    for (size_t i = 0; i < texts.size(); ++i) work(i);
    return out;
  }
  std::atomic<size_t> next{0};
  auto loop = [&] {
    for (size_t i; (i = next.fetch_add(1)) < texts.size();) work(i);
  };
  std::vector<std::thread> threads;
  threads.reserve(nt - 1);
  for (size_t t = 1; t < nt; ++t) threads.emplace_back(loop);
  loop();
  for (auto& th : threads) th.join();
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const Impl& im = need(impl_);
  size_t total = 0;
  for (int32_t id : ids) {
    if (id < 0 || id >= im.vocab) fail("tokenizer: cannot decode id ", id, ": outside [0, ", im.vocab, ")");
    total += im.offsets[id + 1] - im.offsets[id];
  }
  std::string s;
  s.reserve(total);
  for (int32_t id : ids) s.append(im.blob, im.offsets[id], im.offsets[id + 1] - im.offsets[id]);
  return s;
}

int32_t Tokenizer::encode_special(const std::string& name) const {
  const Impl& im = need(impl_);
  for (size_t i = 0; i < kSpecialTokens.size(); ++i)
    if (name == kSpecialTokens[i]) return im.num_mergeable + static_cast<int32_t>(i);
  fail("tokenizer: unknown special token '", name, "' (known: <|bos|>, <|user_start|>, <|user_end|>, ",
       "<|assistant_start|>, <|assistant_end|>, <|python_start|>, <|python_end|>, <|output_start|>, <|output_end|>)");
}

int32_t Tokenizer::bos_id() const { return need(impl_).num_mergeable; }
int Tokenizer::vocab_size() const { return impl_ ? impl_->vocab : 0; }

std::vector<int32_t> Tokenizer::token_bytes() const {
  const Impl& im = need(impl_);
  std::vector<int32_t> tb(static_cast<size_t>(im.vocab), 0);
  for (int32_t id = 0; id < im.num_mergeable; ++id) tb[id] = static_cast<int32_t>(im.offsets[id + 1] - im.offsets[id]);
  return tb;
}

std::string Tokenizer::id_to_token_bytes(int32_t id) const {
  const Impl& im = need(impl_);
  if (id < 0 || id >= im.vocab) fail("tokenizer: id ", id, " is outside [0, ", im.vocab, ")");
  return std::string(im.bytes_of(id));
}

uint64_t Tokenizer::hash() const { return need(impl_).hash; }

const std::string& Tokenizer::pattern() const { return need(impl_).pattern; }

// ---------------------------------------------------------------------------------------------
// Files

namespace {
constexpr const char* kRanksFile = "tokenizer.ranks";
constexpr const char* kJsonFile = "tokenizer.json";
constexpr const char* kTokenBytesFile = "token_bytes.bin";
constexpr const char* kFormat = "nanochat.cpp-tokenizer-v1";

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string read_tokenizer_file(const std::filesystem::path& path, const std::string& dir) {
  return read_file(path.string(),
                   str_cat("no tokenizer in ", dir, "? train one with 'nanochat tok-train' or set NANOCHAT_BASE_DIR"));
}
}  // namespace

Tokenizer::SavedText Tokenizer::saved_text() const {
  const Impl& im = need(impl_);
  SavedText out;
  out.ranks.reserve(static_cast<size_t>(im.num_mergeable) * 16);
  for (int32_t id = 0; id < im.num_mergeable; ++id) {
    out.ranks += base64_encode(im.bytes_of(id));
    out.ranks += ' ';
    out.ranks += std::to_string(id);
    out.ranks += '\n';
  }
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["pattern"] = im.pattern;
  j["num_mergeable"] = im.num_mergeable;
  j["vocab_size"] = im.vocab;
  nlohmann::ordered_json sp = nlohmann::ordered_json::object();
  for (size_t i = 0; i < kSpecialTokens.size(); ++i) sp[kSpecialTokens[i]] = im.num_mergeable + static_cast<int32_t>(i);
  j["special_tokens"] = sp;
  j["hash"] = hex64(im.hash);
  out.json = j.dump(2) + "\n";
  return out;
}

void Tokenizer::save(const std::string& dir) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("tokenizer: cannot create directory ", dir, ": ", ec.message());
  const SavedText text = saved_text();
  write_file_atomic((fs::path(dir) / kRanksFile).string(), text.ranks);
  std::string tb_bytes;
  for (int32_t v : token_bytes())
    for (int k = 0; k < 4; ++k) tb_bytes.push_back(static_cast<char>((static_cast<uint32_t>(v) >> (8 * k)) & 0xff));
  write_file_atomic((fs::path(dir) / kTokenBytesFile).string(), tb_bytes);
  write_file_atomic((fs::path(dir) / kJsonFile).string(), text.json);
}

Tokenizer Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  SavedText text;
  text.json = read_tokenizer_file(fs::path(dir) / kJsonFile, dir);
  text.ranks = read_tokenizer_file(fs::path(dir) / kRanksFile, dir);
  return from_saved_text(text, dir);
}

Tokenizer Tokenizer::from_saved_text(const SavedText& text, const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path jpath = fs::path(dir) / kJsonFile;
  const fs::path rpath = fs::path(dir) / kRanksFile;
  const std::string& jtext = text.json;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(jtext);
  } catch (const std::exception& e) {
    fail("tokenizer: ", jpath.string(), " is not valid JSON (", e.what(), "); retrain with 'nanochat tok-train'");
  }
  std::string pattern;
  int64_t num_mergeable = 0, vocab = 0;
  std::string want_hash;
  try {
    if (j.at("format").get<std::string>() != kFormat)
      fail("tokenizer: ", jpath.string(), " has format '", j.at("format").get<std::string>(), "', expected '", kFormat,
           "'");
    pattern = j.at("pattern").get<std::string>();
    num_mergeable = j.at("num_mergeable").get<int64_t>();
    vocab = j.at("vocab_size").get<int64_t>();
    want_hash = j.at("hash").get<std::string>();
    const auto& sp = j.at("special_tokens");
    for (size_t i = 0; i < kSpecialTokens.size(); ++i)
      if (sp.at(kSpecialTokens[i]).get<int64_t>() != num_mergeable + static_cast<int64_t>(i))
        fail("tokenizer: ", jpath.string(), ": special token ", kSpecialTokens[i], " is not at id ",
             num_mergeable + static_cast<int64_t>(i));
  } catch (const nlohmann::json::exception& e) {
    fail("tokenizer: ", jpath.string(), " lacks a field or has a wrong type (", e.what(), ")");
  }
  if (num_mergeable < 256 || vocab != num_mergeable + static_cast<int64_t>(kSpecialTokens.size()))
    fail("tokenizer: ", jpath.string(), ": vocab_size ", vocab, " and num_mergeable ", num_mergeable, " do not fit");

  const std::string& rtext = text.ranks;
  std::vector<std::string> tokens(static_cast<size_t>(num_mergeable));
  std::vector<char> seen(static_cast<size_t>(num_mergeable), 0);
  size_t pos = 0, line = 0;
  while (pos < rtext.size()) {
    size_t eol = rtext.find('\n', pos);
    if (eol == std::string::npos) eol = rtext.size();
    ++line;
    std::string_view l(rtext.data() + pos, eol - pos);
    pos = eol + 1;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) continue;
    const size_t sp = l.find(' ');
    std::string tok;
    int64_t rank = -1;
    bool ok = sp != std::string_view::npos && base64_decode(l.substr(0, sp), &tok);
    if (ok) {
      std::string_view rs = l.substr(sp + 1);
      ok = !rs.empty() && rs.size() < 12;
      rank = 0;
      for (char c : rs) {
        if (c < '0' || c > '9') {
          ok = false;
          break;
        }
        rank = rank * 10 + (c - '0');
      }
    }
    if (!ok || rank < 0 || rank >= num_mergeable || seen[rank] || tok.empty())
      fail("tokenizer: ", rpath.string(), " line ", line,
           " is corrupt (expected '<base64 bytes> <rank>' with a new rank < ", num_mergeable, ")");
    seen[rank] = 1;
    tokens[rank] = std::move(tok);
  }
  for (int64_t r = 0; r < num_mergeable; ++r)
    if (!seen[r]) fail("tokenizer: ", rpath.string(), " has no token of rank ", r, " (file truncated?)");
  Tokenizer t(std::make_shared<const Impl>(tokens, pattern));
  if (hex64(t.hash()) != want_hash)
    fail("tokenizer: ", dir, ": the ranks do not match the hash in ", jpath.string(),
         " (files from different trainings, or corrupt); retrain with 'nanochat tok-train'");
  return t;
}

}  // namespace nanochat
