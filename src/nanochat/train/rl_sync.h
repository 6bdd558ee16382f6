#pragma once
// chat-rl's synchronisation: the one owner of how a step of the RL loop (train/chat_rl.h) meets
// the other ranks, as StepSync (train/sync.h) is for base-train and chat-sft. A step runs as
//
//   range = sync.begin_step()                 this rank's problems among the step's E
//   for each problem: sample, policy-gradient backward (no communication)
//   totals = sync.finish(mine, schedule)      the ranks' totals, the update, the next split
//
// The problems are dealt as base-train deals rows (train/balance.h: evenly at the first step, then
// by measured problems per second, unless dealt evenly); the update is MuonAdamW over the ranks
// (ZeRO-2: reduce-scatter, update of the owned part, all-gather) on gradients the loop has already
// divided by the step's passes x problems, so the ranks' sum is the step's mean.
#include <cstdint>
#include <memory>
#include <vector>

#include "nanochat/checkpoint/job_checkpoint.h"
#include "nanochat/train/balance.h"
#include "nanochat/train/sync.h"

namespace nanochat {

class Communicator;
class GPT;
struct LoopState;
struct RunMeta;
class MuonAdamW;
struct OptimConfig;

/// One rank's part of an RL step, gathered to every rank after it.
struct RlRankStep {
  double examples = 0;    ///< problems it ran
  double seconds = 0;     ///< their sampling and backward seconds
  double reward_sum = 0;  ///< sum over its problems of the mean reward of the problem's samples
  double length_sum = 0;  ///< tokens of all its samples (prompts included)
  double samples = 0;     ///< its samples
  double joiners = 0;     ///< rank 0: ranks asking to join the job (Membership::joiners_waiting); 0 elsewhere
};

/// This rank's problems of a step: [first, first + count) among the step's E, in order.
struct RlShare {
  int64_t first = 0;
  int64_t count = 0;
};

class RlStepSync {
 public:
  /// `model`'s parameters are optimized with `oc` over the ranks of `comm` (which must outlive
  /// this); `examples_per_step` E >= 1, dealt by `balance`. Throws nanochat::Error for E < 1.
  RlStepSync(GPT& model, const OptimConfig& oc, Communicator& comm, int examples_per_step, BalanceMode balance);
  ~RlStepSync();
  int rank() const;
  int world_size() const;
  Communicator& comm() { return comm_; }

  /// This rank's share of the next step (every rank calls it; no communication).
  RlShare begin_step() const;
  /// Problems per rank of the next step.
  const std::vector<int64_t>& split() const { return balancer_.rows(); }
  /// After this rank's problems: gathers every rank's `mine` (their sum is returned; `ranks`, when
  /// given, gets each rank's), updates the weights with `schedule` (gradient scale 1), zeroes the
  /// gradients and plans the next split from the gathered seconds. Collective.
  RlRankStep finish(const RlRankStep& mine, const StepSchedule& schedule, std::vector<RlRankStep>* ranks = nullptr);

  /// The checkpoint of step state.step in `dir`: the weights, every rank's optimizer shard and the
  /// meta (run_meta + state; checkpoint/loop_checkpoint.h save_checkpoint), rank 0 writing. Collective.
  void save(const std::string& dir, const RunMeta& run_meta, const LoopState& state, const FaultInjector& faults);
  /// Continues from checkpoint `cp` (written by save or save_copy at any world size): rank 0 reads
  /// the weights and every optimizer shard, each rank gets the weights and its part of the state.
  /// Throws nanochat::Error on every rank naming the file when one is missing or damaged (a
  /// checkpoint without optimizer state included). Collective.
  void resume(const CheckpointPaths& cp);
  /// Node 0 keeps in memory what save would write for `state` (a rank lost later costs no step up to
  /// it); nothing with one rank. Collective.
  void keep_copy(const RunMeta& run_meta, const LoopState& state);
  /// Rank 0 after a rank was lost (no collective): writes the last copy into `dir`; returns its
  /// step, -1 when there is none (or on other ranks).
  int64_t save_copy(const std::string& dir);

 private:
  GPT& model_;
  Communicator& comm_;
  std::unique_ptr<MuonAdamW> opt_;
  StepBalancer balancer_;
  JobStateCopy copy_;  // rank 0: the last keep_copy
};

}  // namespace nanochat
