#pragma once
// Membership changes of an elastic job (`nanochat run --nnodes MIN:MAX`, docs/architecture.md
// 7.13): when a rank leaves (PeerLost, found by the heartbeat or its death) or nodes ask to join,
// the ranks that stay and the ranks admitted form the next generation of the job's communicator
// through the job's store, under a fresh key prefix ("nc/g<k+1>/"), so that no key of the old group
// is met again.
//
// Joining (keys under "nc/join/", outside every generation): a rank that asks takes a ticket
// t = add("next", 1), leaves the will "gone/<t>" and sets "req/<t>" (its host, pid, node); rank 0
// (JoinDesk) reads the waiting tickets once per step and, at the step boundary all ranks agree on,
// answers "ans/<t>" with {"generation", "rank", "world_size", "step"} or {"refused": why}. When the
// job ends, rank 0 sets "closed" and refuses every ticket still waiting.
//
// Regroup, in generation k's store: every old rank that stays sets `regroup/alive/<rank>`; rank 0
// (the coordinator: it holds the store, the data and the checkpoints) waits until every rank it has
// not lost said so, or `wait` has passed (a second rank lost at the same time); while fewer than the
// job's minimum are there (old ranks plus waiting joiners) it waits for joiners, saying every report
// interval who is missing, up to `below_min_timeout`. Then it publishes `regroup/members`:
// {"members": [old ranks, ascending, 0 first], "joined": [tickets], "step": s} (or {"stop": true,
// "step": s} when the minimum was not met in time), and answers the joiners, whose new ranks follow
// the old ones'. Each old rank's new rank is its index in members; a rank left out (it froze and
// woke after the others went on) is told so (LeftOut). Then every member builds generation k+1's
// GlooCommunicator (rendezvous, mesh check, Gloo, heartbeat) with its new rank and world size.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/core/error.h"

namespace nanochat::cluster {

#ifdef NANOCHAT_HAVE_GLOO

/// This rank was regrouped out of its generation (it froze and woke after the others went on).
class LeftOut : public Error {
 public:
  using Error::Error;
};

/// What rank 0 answered a rank that asked to join.
struct Admission {
  DistEnv env;          ///< the joiner's place in the next generation (rank, world size)
  DistOptions options;  ///< generation set to the next generation's
  int64_t step = 0;     ///< the step the job continues from (its --resume-from-step)
  double waited_s = 0;  ///< seconds from the request to the answer
};

/// Asks the job behind env's store (node 0) to admit this process at its next step boundary, and
/// waits for the answer, printing every report interval what it waits for, at most
/// options.rendezvous_timeout plus `extra` (the job may be waiting below its minimum). Throws nanochat::Error when the
/// store cannot be reached, when rank 0 refuses (the job ended) or when no answer came in time (naming the store and
/// the ticket).
Admission request_to_join(const DistEnv& env, const DistOptions& options, Ms extra);

/// Rank 0's side of joining: its own connection to the job's store (so a join never waits behind
/// the communicator's requests).
class JoinDesk {
 public:
  /// Connects to the store of `env` (rank 0's). Throws nanochat::Error when it cannot.
  JoinDesk(const DistEnv& env, const DistOptions& options);
  ~JoinDesk();
  JoinDesk(const JoinDesk&) = delete;
  JoinDesk& operator=(const JoinDesk&) = delete;
  /// Tickets of the requests waiting now (asker still connected, not answered), ascending. One
  /// store request when none is new.
  std::vector<int64_t> waiting();
  /// "rank of node 2 (host h, pid 7)" for a waiting ticket.
  std::string describe(int64_t ticket);
  /// Sets the answer of `ticket` (JSON, request_to_join reads it).
  void answer(int64_t ticket, const std::string& json);
  /// No more joins: refuses every waiting request with `why` and every later one. `nodes`: the
  /// launchers' nodes whose ranks trained to the end (node 0's launcher waits only for those;
  /// launch/launcher_internal.h "nodes_at_end").
  void close(const std::string& why, const std::vector<long>& nodes);

 private:
  std::unique_ptr<StoreClient> client_;
  std::unique_ptr<PrefixStore> store_;
  int64_t seen_ = 0;           // highest ticket looked at
  std::vector<int64_t> open_;  // tickets seen, not answered, not gone
};

/// Rank 0's inputs of a regroup.
struct RegroupPlan {
  int lost = -1;                 ///< the old rank that left; -1: nobody left (nodes join)
  int64_t step = -1;             ///< the step the run continues from (rank 0's saved state)
  Ms wait{5000};                 ///< how long rank 0 waits for the staying ranks to check in
  int min_world = 1;             ///< the fewest ranks the job trains with
  Ms below_min_timeout{600000};  ///< how long it waits for joiners below min_world
  JoinDesk* desk = nullptr;      ///< rank 0: where joiners wait (null: admit nobody)
};

/// The next generation of an elastic job.
struct Regrouped {
  std::unique_ptr<GlooCommunicator> comm;  ///< generation k+1; null when rank 0 is alone, or on stop
  std::vector<int> members;                ///< old rank of each new rank among the old ones
  std::vector<std::string> joined;         ///< the admitted joiners, new ranks members.size()...
  int64_t step = -1;                       ///< rank 0's step to continue from
  bool stop = false;                       ///< fewer than min_world ranks until the timeout
  int generation = 0;                      ///< the new generation's number
};

/// Collective over the ranks of generation `generation` that stay (`old`: that generation's
/// communicator, broken or whole; null on rank 0 when it trains alone). `env`/`options`: where the
/// job's store is and how to reach it (the old communicator's). `plan` is read on rank 0 only,
/// except plan.wait and plan.below_min_timeout, which bound every rank's wait. Throws LeftOut
/// when this rank was left out, nanochat::Error when the store cannot be reached or the new group
/// cannot be formed within the rendezvous deadline.
Regrouped regroup(GlooCommunicator* old, int generation, const DistEnv& env, const DistOptions& options,
                  const RegroupPlan& plan);

/// When generation k of `comm` was regrouped without this rank (it froze and woke after the
/// others went on): the message that says so; "" otherwise (or when the store cannot tell).
std::string left_out_message(GlooCommunicator& comm);

/// How long an elastic job below its minimum waits for nodes to join before it stops:
/// NANOCHAT_ELASTIC_WAIT_TIMEOUT seconds (`nanochat run --min-nodes-timeout`), default 600.
Ms below_min_timeout();
#endif

}  // namespace nanochat::cluster
