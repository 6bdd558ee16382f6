#pragma once
// Regrouping an elastic job (`nanochat run --nnodes MIN:MAX`, docs/architecture.md 7.13): when a
// rank leaves (PeerLost, found by the heartbeat or its death), the ranks that remain form the
// next generation of the job's communicator through the job's store, under a fresh key prefix
// ("nc/g<k+1>/"), so that no key of the broken group is met again.
//
// Protocol, in generation k's store: every remaining rank sets `regroup/alive/<rank>`; rank 0 (the
// coordinator: it holds the store, the data and the checkpoints) waits until every rank it has
// not lost said so, or `wait` has passed (a second rank lost at the same time), then publishes
// `regroup/members`: {"members": [old ranks, ascending, 0 first], "step": the step the run
// continues from}. Each rank's new rank is its index there; a rank left out (it froze and woke
// after the others went on) is told so. Then every member builds generation k+1's
// GlooCommunicator (rendezvous, mesh check, Gloo, heartbeat) with the new rank and world size.
#include <memory>
#include <string>
#include <vector>

#include "nanochat/cluster/gloo_communicator.h"

namespace nanochat::cluster {

#ifdef NANOCHAT_HAVE_GLOO
/// The next generation of an elastic job.
struct Regrouped {
  std::unique_ptr<GlooCommunicator> comm;  ///< the survivors' communicator (generation k+1); null when rank 0 is alone
  std::vector<int> members;                ///< old rank of each new rank
  int64_t step = -1;                       ///< rank 0's step to continue from
};

/// Collective over the remaining ranks of `old` (generation k, broken by the loss of `lost`).
/// `step`: on rank 0, the step the run continues from (published with the members; ignored
/// elsewhere). `wait`: how long rank 0 waits for the others to check in. Throws nanochat::Error
/// when the store cannot be reached, when this rank was left out ("... the job went on without
/// this rank ..."), or when the new group cannot be formed within the rendezvous deadline.
Regrouped regroup(GlooCommunicator& old, int lost, int64_t step, Ms wait);

/// When generation k of `comm` was regrouped without this rank (it froze and woke after the
/// others went on): the message that says so; "" otherwise (or when the store cannot tell).
std::string left_out_message(GlooCommunicator& comm);
#endif

}  // namespace nanochat::cluster
