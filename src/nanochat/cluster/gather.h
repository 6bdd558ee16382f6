#pragma once
// Small all-gathers of variable-length strings over a Communicator, for the rare moments every
// rank must learn every other rank's verdict (a checkpoint that one rank could not write or
// read, the checksums of its replica) and stop with the same message instead of blaming the
// network.
#include <string>
#include <vector>

#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"

namespace nanochat::cluster {

/// Every rank passes `mine`; every rank gets all ranks' strings in rank order (comm/typed.h: an
/// all-gather of the W sizes, then one of the bytes).
using nanochat::all_gather_strings;

/// "rank R (host H)" for every rank of `comm`, in rank order (one all_gather_strings of
/// gethostname()). All ranks must call it together.
std::vector<std::string> rank_names(Communicator& comm);

/// Every rank passes its own error (empty = none). If any rank has one, every rank throws the
/// same nanochat::Error: "rank R (host H) <error>" for each failed rank, joined by "; ", then
/// ". <hint>" (what to do) when a hint is given. Returns normally on every rank when no rank failed.
/// All ranks must call it together.
void throw_if_any_rank_failed(Communicator& comm, const std::string& my_error, const std::string& hint = "");

/// Rank `root`'s `s` replaces `s` on every rank (one broadcast of the length, then one of the
/// bytes unless empty). All ranks must call it together. Errors of the collectives propagate.
void broadcast_string(Communicator& comm, std::string& s, int root);

}  // namespace nanochat::cluster
