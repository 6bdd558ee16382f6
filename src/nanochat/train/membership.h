#pragma once
// Who trains in a job, as the training loop sees it (docs/architecture.md 4.1, 7.13). The loop
// (TrainLoop, train/train_loop.h) holds one Membership, chosen once by the command that runs it:
//  * FixedMembership (the default): the job's ranks are fixed; a lost peer stops the job, the loop
//    saying why, in which step, and what node 0 saved;
//  * elastic membership (train/elastic.h, `nanochat run --nnodes MIN:MAX`): a rank that leaves is
//    let go and the others go on; ranks that ask to join are admitted at a step boundary.
// The loop asks it two things: at a lost peer, whether the job goes on without it; after each step,
// whether ranks join at this boundary. A membership that goes on ends this run of the loop by
// throwing a MembershipChange, which the command's set-up lets through to the code that forms the
// next group of ranks (it is not an error to pass on to the other ranks). The loop issues no
// collective for it: every rank learns of a join from the step's statistics (RankStep::joiners).
#include <cstdint>
#include <string>

#include "nanochat/core/error.h"

namespace nanochat {

class MetricsLog;
class PeerLost;
struct StepStats;

/// Thrown out of the loop by a membership that goes on with another group of ranks (train/elastic.h
/// RankLeft and NodesJoin): this run of the loop ends, the job does not.
class MembershipChange : public Error {
 public:
  using Error::Error;
};

/// A peer the loop lost, once node 0 wrote its copy of the job's state (when it held a newer one).
struct PeerLoss {
  const PeerLost& error;     ///< what the communicator found (its peer(): the rank lost)
  int64_t step = 0;          ///< the step in progress
  std::string phase;         ///< what the loop was doing ("training the step", "evaluating", ...)
  int64_t saved = -1;        ///< rank 0: the last step on node 0's disk (its copy, if just written); -1 elsewhere
  double seconds = 0;        ///< since the loss was caught (node 0 writing its copy)
  bool copy_failed = false;  ///< node 0 could not write its newer copy
};

class Membership {
 public:
  virtual ~Membership() = default;

  /// Whether this run continues a job whose ranks changed (a regrouped elastic job): its set-up
  /// then leaves out the start-up lines, which were printed once.
  virtual bool regrouped() const { return false; }
  /// Once the run's metrics log is open, before the first step: what a regrouped job says (rank 0,
  /// `master`, prints who left or joined and how long it took; the records go to `metrics`).
  virtual void started(MetricsLog& metrics, bool master) {
    (void)metrics;
    (void)master;
  }

  /// A peer was lost (the group is broken: no collective) in step `step` of a job of `world_size`
  /// ranks, before node 0 writes its copy. The fixed membership records there that the job ends.
  virtual void peer_lost(const PeerLost& e, int64_t step, int world_size, MetricsLog& metrics) = 0;
  /// Then: returns when the job stops (the loop stops it with its message, naming what is saved);
  /// throws a MembershipChange when the others go on without the peer.
  virtual void go_on_without(const PeerLoss& loss) = 0;

  /// Rank 0, before each step's statistics are gathered: how many ranks ask to join now
  /// (RankStep::joiners).
  virtual int joiners_waiting() = 0;
  /// After a step (its statistics are the same on every rank): whether ranks join at this boundary.
  virtual bool join_due(const StepStats& stats) const = 0;
  /// At that boundary, once the loop saved the state the job goes on from (`saved`: rank 0: the
  /// step on node 0's disk; -1 elsewhere): throws the MembershipChange that ends this run of the
  /// loop at step `step`.
  [[noreturn]] virtual void admit_joiners(int64_t step, int64_t saved) = 0;
};

/// A job of fixed ranks: a lost peer stops it (metrics.jsonl records {"step", "membership": "rank P
/// left", "reason", "world_size", "world_size_after": 0}); nobody joins.
class FixedMembership final : public Membership {
 public:
  void peer_lost(const PeerLost& e, int64_t step, int world_size, MetricsLog& metrics) override;
  void go_on_without(const PeerLoss&) override {}
  int joiners_waiting() override { return 0; }
  bool join_due(const StepStats&) const override { return false; }
  [[noreturn]] void admit_joiners(int64_t step, int64_t saved) override;
};

}  // namespace nanochat
