#pragma once
// nanochat's tokenizer file tokenizer/tokenizer.pkl (nanochat tokenizer.py RustBPETokenizer.save /
// from_directory): pickle.dump of a tiktoken.core.Encoding. tiktoken pickles an Encoding as
// NEWOBJ(tiktoken.core.Encoding) + BUILD with the state
//   {"name": str, "pat_str": str, "mergeable_ranks": {bytes: int}, "special_tokens": {str: int}}
// which unpickling passes to Encoding.__init__ (tiktoken core.py __getstate__/__setstate__).
#include <string>
#include <string_view>

#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat {

/// The pickle of `tok` as a tiktoken Encoding named "rustbpe" (what nanochat's tokenizer trainer
/// saves): its mergeable tokens with their ids as ranks and the 9 specials at the top ids.
std::string tiktoken_pickle(const Tokenizer& tok);

/// Reads such a pickle (`what` names the file in messages) through the restricted unpickler of
/// core/pickle.h. Throws nanochat::Error naming the file for anything else: an encoding pickled
/// by name (a registered tiktoken encoding such as "gpt2"), ranks that are not 0..M-1 or miss a
/// single byte, or specials other than nanochat's 9 at ids M..M+8.
Tokenizer tokenizer_from_tiktoken_pickle(std::string_view pickle, const std::string& what);

}  // namespace nanochat
