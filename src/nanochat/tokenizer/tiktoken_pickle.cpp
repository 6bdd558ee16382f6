#include "nanochat/tokenizer/tiktoken_pickle.h"

#include <set>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/pickle.h"

namespace nanochat {

std::string tiktoken_pickle(const Tokenizer& tok) {
  const int32_t M = tok.vocab_size() - static_cast<int32_t>(kSpecialTokens.size());
  PickleWriter w(4);
  w.global("tiktoken.core", "Encoding");
  w.empty_tuple();
  w.newobj();
  w.empty_dict();
  w.mark();
  w.str("name");
  w.str("rustbpe");
  w.str("pat_str");
  w.str(tok.pattern());
  w.str("mergeable_ranks");
  w.empty_dict();
  w.mark();
  for (int32_t id = 0; id < M; ++id) {
    w.bytes(tok.id_to_token_bytes(id));
    w.integer(id);
  }
  w.setitems();
  w.str("special_tokens");
  w.empty_dict();
  w.mark();
  for (size_t i = 0; i < kSpecialTokens.size(); ++i) {
    w.str(kSpecialTokens[i]);
    w.integer(M + static_cast<int64_t>(i));
  }
  w.setitems();
  w.setitems();
  w.build();
  return w.finish();
}

namespace {

// mergeable_ranks as tokens by id: every rank in 0..M-1 exactly once.
std::vector<std::string> tokens_by_rank(const PickleTree& t, int ranks_idx) {
  const PyNode& ranks = t.expect(ranks_idx, PyKind::Dict, "mergeable_ranks");
  const size_t M = ranks.dict.size();
  std::vector<std::string> tokens(M);
  std::vector<bool> have(M, false);
  std::set<std::string_view> seen;
  for (const auto& [k, v] : ranks.dict) {
    const std::string& bytes = t.expect(k, PyKind::Bytes, "a mergeable_ranks key").s;
    const int64_t r = t.expect(v, PyKind::Int, "a mergeable rank").i;
    if (r < 0 || static_cast<size_t>(r) >= M || have[static_cast<size_t>(r)])
      fail(t.what, ": mergeable rank ", r, " is out of range or repeated; the ranks must be 0..", M - 1,
           " once each (a tokenizer nanochat trained)");
    if (!seen.insert(bytes).second) fail(t.what, ": a token appears twice in mergeable_ranks");
    have[static_cast<size_t>(r)] = true;
    tokens[static_cast<size_t>(r)] = bytes;
  }
  return tokens;
}

void check_specials(const PickleTree& t, int specials_idx, size_t M) {
  const PyNode& sp = t.expect(specials_idx, PyKind::Dict, "special_tokens");
  if (sp.dict.size() != kSpecialTokens.size())
    fail(t.what, ": it has ", sp.dict.size(), " special tokens; nanochat's tokenizer has ", kSpecialTokens.size());
  for (const auto& [k, v] : sp.dict) {
    const std::string& name = t.expect(k, PyKind::Str, "a special token name").s;
    const int64_t id = t.expect(v, PyKind::Int, "a special token id").i;
    size_t i = 0;
    while (i < kSpecialTokens.size() && name != kSpecialTokens[i]) ++i;
    if (i == kSpecialTokens.size()) fail(t.what, ": special token ", name, " is not one of nanochat's");
    if (id != static_cast<int64_t>(M + i))
      fail(t.what, ": special token ", name, " has id ", id, " but nanochat's order puts it at ", M + i);
  }
}

}  // namespace

Tokenizer tokenizer_from_tiktoken_pickle(std::string_view pickle, const std::string& what) {
  const PickleTree t = parse_pickle(pickle, what, {"tiktoken.core.Encoding"});
  const PyNode& enc = t.expect(t.root, PyKind::Call, "the pickled object");
  if (t.at(enc.callable).s != "tiktoken.core.Encoding" || !enc.items.empty())
    fail(what, " does not hold a tiktoken Encoding");
  if (enc.state >= 0 && t.at(enc.state).kind == PyKind::Str)
    fail(what, " refers to the registered tiktoken encoding '", t.at(enc.state).s,
         "' by name; only a tokenizer with its ranks in the file (as nanochat trains) can be imported");
  const PyNode& st = t.expect(enc.state, PyKind::Dict, "the Encoding state");
  for (const auto& [k, v] : st.dict) {
    const std::string& key = t.expect(k, PyKind::Str, "an Encoding state key").s;
    if (key != "name" && key != "pat_str" && key != "mergeable_ranks" && key != "special_tokens")
      fail(what, ": unexpected Encoding field '", key, "'");
    (void)v;
  }
  const std::string& pattern = t.expect(t.dict_get(enc.state, "pat_str"), PyKind::Str, "pat_str").s;
  std::vector<std::string> tokens = tokens_by_rank(t, t.dict_get(enc.state, "mergeable_ranks"));
  check_specials(t, t.dict_get(enc.state, "special_tokens"), tokens.size());
  try {
    return Tokenizer::from_tokens(tokens, pattern);
  } catch (const Error& e) {
    fail(what, ": ", e.what());
  }
}

}  // namespace nanochat
