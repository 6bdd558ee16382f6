#pragma once
// What `speedrun` (cli/speedrun.cpp) does to the base folder's earlier outputs before a stage runs:
// nothing it trained or made is deleted, only resumed or moved aside to "<dir>.before-<time>".
#include <string>
#include <vector>

#include "nanochat/road/ledger.h"
#include "nanochat/road/stages.h"

namespace nanochat::cli {

/// A training stage (its checkpoint folder under `base`): when `resume` and the command resumes
/// (base-train, chat-sft, chat-rl) and the folder holds a complete step > 0, the flags that continue
/// from it (`--resume-from-step S`), said on stdout; otherwise an existing folder is moved aside and
/// the stage starts afresh (no flags). Throws nanochat::Error naming the folder when it cannot be
/// moved.
std::vector<std::string> prepare_training(const std::string& base, const road::Stage& s, bool resume);

/// Whether `base` holds a tokenizer this road did not make (the ledger has no tok-train record)
/// and --replace-tokenizer was not given (`replace_tokenizer`).
bool foreign_tokenizer(const std::string& base, const road::Ledger& ledger, bool replace_tokenizer);

/// Before tok-train (`s`; other stages: nothing): the folder's tokenizer is moved aside, unless
/// it is `foreign` (foreign_tokenizer), which stops the road with a message naming the folder and
/// the two ways on (another base folder, --replace-tokenizer). Throws nanochat::Error.
void prepare_tokenizer(const std::string& base, const road::Stage& s, bool foreign);

}  // namespace nanochat::cli
