#pragma once
// Elastic membership of base-train (`nanochat run --nnodes MIN:MAX`, docs/architecture.md 7.13).
// When a rank leaves a job (it died, froze or was cut off: PeerLost, cluster/heartbeat.h), the
// training loop stops the step in progress and node 0 writes its copy of the job's state
// (--copy-state-every, 8.6) as a checkpoint; then the ranks that remain regroup into a new
// generation of the job's communicator (cluster/regroup.h) and continue the same run from that
// checkpoint: the weights and the whole optimizer state (the departed rank's shard included) are
// dealt to the new world size, the data stream resumes where the checkpoint left it (so the
// interrupted step is redone from its start with its rows dealt to the survivors), and the row
// balancer and the optimizer's layout start again for the new ranks. Rank 0 logs who left, why,
// and how long the job took to continue; metrics.jsonl records the change. Rank 0's loss ends the
// job (it holds the store, the data and the checkpoints), and so does a group smaller than MIN.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "nanochat/core/error.h"
#include "nanochat/core/timer.h"

namespace nanochat {

class Communicator;
class FaultInjector;
struct BaseTrainArgs;

/// Thrown by the loop of an elastic job when rank `peer` (not 0) left in step `step`; `saved`: the
/// step node 0's checkpoint holds (its copy, or the last save; -1: none); `seconds`: spent since
/// the loss was caught (node 0 writing its copy).
class RankLeft : public Error {
 public:
  RankLeft(const std::string& msg, int peer, int64_t step, int64_t saved, double seconds)
      : Error(msg), peer(peer), step(step), saved(saved), seconds(seconds) {}
  int peer;
  int64_t step, saved;
  double seconds;
};

/// What a new generation of the job says once it is ready to train.
struct Rejoined {
  std::string line;     ///< rank 0's line, completed with the seconds it took
  nlohmann::json note;  ///< the metrics record (recovery_s added)
  Timer since;          ///< started at the regroup
  double before = 0;    ///< seconds from the loss to the regroup (RankLeft::seconds)
};

/// One generation of a job: the data feed, the set-up and the loop (train/trainer.cpp).
/// `rejoined`: set when the job regrouped; `elastic`: a lost rank throws RankLeft instead of
/// stopping the job.
void run_generation(const BaseTrainArgs& a, Communicator& comm, const FaultInjector& faults, const Rejoined* rejoined,
                    bool elastic);

/// The elastic job: generations until the run ends. `comm` (generation 0) must be the job's
/// GlooCommunicator; `min_world_size`: the fewest ranks the job goes on with. Throws
/// nanochat::Error like run_base_train, and when the group falls below the minimum.
void run_elastic(const BaseTrainArgs& a, Communicator& comm, const FaultInjector& faults, int min_world_size);

}  // namespace nanochat
