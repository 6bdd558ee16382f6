#pragma once
// Startup agreement (docs/architecture.md 3.10): before the first step every rank compares the facts that
// must be identical across the job (model config, batch settings, tokenizer hash, data manifest,
// build version, nnodes, ...). A difference is one clear error on EVERY rank, never a hang or a
// silently diverging run.
#include <map>
#include <string>

#include "nanochat/dist/communicator.h"

namespace nanochat::dist {

/// Exchanges `facts` (key -> value) between all ranks of `comm` with collectives (an all-reduce
/// of the sizes, then one broadcast per rank). If any key is missing on some rank or has differing
/// values, every rank throws the same nanochat::Error naming the key, each distinct value and the
/// ranks (with hosts) holding it. World size 1 returns at once. All ranks must call it together.
/// Errors of the collectives themselves propagate (they name the failed peer).
void agree(Communicator& comm, const std::map<std::string, std::string>& facts);

}  // namespace nanochat::dist
