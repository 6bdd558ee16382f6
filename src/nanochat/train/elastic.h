#pragma once
// Elastic membership of a training job, base-train's, chat-sft's or chat-rl's (`nanochat run --nnodes MIN:MAX`,
// docs/architecture.md 7.13).
// When a rank leaves a job (it died, froze or was cut off: PeerLost, cluster/heartbeat.h), the
// training loop stops the step in progress and node 0 writes its copy of the job's state
// (--copy-state-every, 8.6) as a checkpoint; then the ranks that remain regroup into a new
// generation of the job's communicator (cluster/regroup.h) and continue the same run from that
// checkpoint: the weights and the whole optimizer state (the departed rank's shard included) are
// dealt to the new world size, the data stream resumes where the checkpoint left it (so the
// interrupted step is redone from its start with its rows dealt to the survivors), and the row
// balancer and the optimizer's layout start again for the new ranks. Rank 0 logs who left, why,
// and how long the job took to continue; metrics.jsonl records the change. Rank 0's loss ends the
// job (it holds the store, the data and the checkpoints). Below MIN ranks the job waits for nodes
// to join (cluster::below_min_timeout()), then stops with node 0's checkpoint.
//
// A node joins the same way: its ranks ask rank 0 (cluster::request_to_join); rank 0 sees the
// request in the step's statistics (RankStep::joiners), so every rank ends the same step, node 0
// writes the state of that boundary, and the ranks with the admitted ones form the next
// generation, which continues from it. A rank left out (it froze and woke after the others went
// on) asks to join again.
//
// Under --sync diloco the copy is node 0's state at a round's boundary (train/diloco_sync.h): a
// node that leaves costs the round in progress, and nodes join at a boundary.
//
// Each generation runs the command's job (ElasticJob::run: base-train's run_base_train_job,
// train/trainer.h, or chat-sft's, train/sft.h) with an ElasticMembership (train/membership.h),
// through which the loop lets a rank go and admits those that join; this file sits above the loop
// and the commands' set-ups, and knows neither.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "nanochat/core/error.h"
#include "nanochat/core/timer.h"
#include "nanochat/train/membership.h"

namespace nanochat {

class Communicator;

/// Thrown by the loop of an elastic job when rank `peer` (not 0) left in step `step`; `saved`: the
/// step node 0's checkpoint holds (its copy, or the last save; -1: none); `seconds`: spent since
/// the loss was caught (node 0 writing its copy).
class RankLeft : public MembershipChange {
 public:
  RankLeft(const std::string& msg, int peer, int64_t step, int64_t saved, double seconds)
      : MembershipChange(msg), peer(peer), step(step), saved(saved), seconds(seconds) {}
  int peer;
  int64_t step, saved;
  double seconds;
};

/// Thrown by the loop of an elastic job at the end of a step after which nodes join: `step` is
/// the next step (node 0 saved the state to continue from; `saved` = step there, -1 elsewhere).
class NodesJoin : public MembershipChange {
 public:
  NodesJoin(const std::string& msg, int64_t step, int64_t saved) : MembershipChange(msg), step(step), saved(saved) {}
  int64_t step, saved;
};

/// What a new generation of the job says once it is ready to train.
struct Rejoined {
  std::string line;     ///< rank 0's line, completed with the seconds it took
  nlohmann::json note;  ///< the metrics record, or an array of them (recovery_s added to each)
  Timer since;          ///< started at the regroup
  double before = 0;    ///< seconds from the loss to the regroup (RankLeft::seconds)
  std::string since_what = "after it was found gone";  ///< what the seconds in the line count from
};

/// The membership of one generation of an elastic job (train/membership.h). A lost rank other than
/// rank 0 leaves once node 0 wrote its copy of the job's state: the loop throws RankLeft and the
/// others go on (the change is recorded once they are known); ranks that ask to join (rank 0 counts
/// them with `joiners_waiting`, empty elsewhere) are admitted at the end of the step whose
/// statistics carry the count: the loop throws NodesJoin there. `rejoined`: set when the generation
/// continues the job after a change (what it says at the start); it must outlive this object.
class ElasticMembership final : public Membership {
 public:
  ElasticMembership(const Rejoined* rejoined, std::function<int()> joiners_waiting)
      : rejoined_(rejoined), joiners_(std::move(joiners_waiting)) {}
  bool regrouped() const override { return rejoined_ != nullptr; }
  void started(MetricsLog& metrics, bool master) override;
  /// Whether the generation's loop started (started() was called): a rank lost before it was lost
  /// in the command's set-up, where nothing of the generation is trained yet.
  bool loop_started() const { return loop_started_; }
  void peer_lost(const PeerLost&, int64_t, int, MetricsLog&) override {}
  void go_on_without(const PeerLoss& loss) override;
  int joiners_waiting() override { return joiners_ ? joiners_() : 0; }
  bool join_due(const StepStats& stats) const override;
  [[noreturn]] void admit_joiners(int64_t step, int64_t saved) override;

 private:
  const Rejoined* rejoined_;
  std::function<int()> joiners_;
  bool loop_started_ = false;
};

/// What an elastic job trains, generation after generation of its ranks.
struct ElasticJob {
  /// Node 0's checkpoint folder, where a superseded membership change's checkpoint is removed (asked
  /// on rank 0 after a generation ran: its set-up may be what names it).
  std::function<std::string()> checkpoint_dir;
  int64_t save_every = -1;         ///< the user's --save-every: those steps' checkpoints are kept
  int64_t first_resume_step = -1;  ///< where the first generation starts (--resume-from-step; -1: afresh)
  /// What a checkpoint's step names: 0 when checkpoint s holds the state before step s (base-train,
  /// chat-sft: training goes on at step s), 1 when it holds the weights after step s (chat-rl, as
  /// nanochat's chat_rl.py names them: training goes on at step s + 1). Only the lines said change.
  int64_t next_step_after_checkpoint = 0;
  /// One generation: the command's job on `comm` with `membership`, continuing from node 0's
  /// checkpoint of `resume_from_step` (-1: from the start). Its copy of the job's state must be
  /// kept (--copy-state-every > 0, elastic_copy_every) for a rank to leave without ending the job.
  std::function<void(Communicator& comm, Membership& membership, int64_t resume_from_step)> run;
};

/// The fewest ranks of the elastic job this rank was started in (`nanochat run --nnodes MIN:MAX`
/// sets NANOCHAT_MIN_WORLD_SIZE to MIN x --nproc-per-node); 0: not an elastic job.
int elastic_min_world_size();

/// Whether a command started with elastic_min_world_size() > 0 runs as an elastic job on `comm`:
/// several ranks, or node 0 alone under its launcher (which hosts the store others join through).
bool elastic_job(const Communicator& comm);

/// The --copy-state-every of an elastic job: `given` when > 0, else every round's boundary under
/// --sync diloco (`sync_every`, `diloco`) and every 10 steps otherwise; rank 0 (`master`) says
/// what a node that leaves then costs.
int64_t elastic_copy_every(int64_t given, bool diloco, int64_t sync_every, int min_world_size, bool master);

/// The elastic job: generations until the run ends. `comm` (generation 0) must be the job's
/// GlooCommunicator (or a world of one under the launcher, which hosts the store others join
/// through); `min_world_size`: the fewest ranks the job goes on with. Throws nanochat::Error like
/// the job's run, and when the group stays below the minimum until the timeout.
void run_elastic(const ElasticJob& job, Communicator& comm, int min_world_size);

/// A node that joins a running elastic job (`nanochat run` found the job started): asks rank 0 to
/// admit this rank (its environment names the store), then trains with the job like run_elastic.
void run_elastic_joining(const ElasticJob& job, int min_world_size);

}  // namespace nanochat
