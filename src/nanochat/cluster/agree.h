#pragma once
// Startup agreement (docs/architecture.md 3.10): before the first step every rank compares the facts that
// must be identical across the job (model config, batch settings, tokenizer hash, data manifest,
// build version, nnodes, ...). A difference is one clear error on EVERY rank, never a hang or a
// silently diverging run.
#include <map>
#include <string>

#include "nanochat/comm/communicator.h"

namespace nanochat::cluster {

/// Exchanges `facts` (key -> value) plus the "nanochat build" fact (core/version.h build_id())
/// between all ranks of `comm` with collectives (comm/typed.h all_gather_strings: an all-gather of
/// the sizes, then one of the bytes). If any key is missing on some rank or has differing values, every rank throws the
/// same nanochat::Error naming the key and exactly what differs, with the ranks (and hosts) holding each value: for
/// values that are JSON objects on every rank, one line per differing key path
/// ("seed: 7 on rank 1 (host b); 42 on rank 0 (host a)"; an entry some ranks lack is shown whole,
/// "missing" on the others); for other values, each distinct value in full on its own line
/// ("(missing)" for the ranks without the key). Only absurd sizes are
/// cut (8192 characters per value, 200 lines per key). World size 1 returns at once. All ranks
/// must call it together. Errors of the collectives themselves propagate (they name the peer).
void agree(Communicator& comm, const std::map<std::string, std::string>& facts);

}  // namespace nanochat::cluster
