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

#include "nanochat/train/balance.h"
#include "nanochat/train/sync.h"

namespace nanochat {

class Communicator;
class GPT;
class MuonAdamW;
struct OptimConfig;

/// One rank's part of an RL step, gathered to every rank after it.
struct RlRankStep {
  double examples = 0;    ///< problems it ran
  double seconds = 0;     ///< their sampling and backward seconds
  double reward_sum = 0;  ///< sum over its problems of the mean reward of the problem's samples
  double length_sum = 0;  ///< tokens of all its samples (prompts included)
  double samples = 0;     ///< its samples
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

  /// This rank's share of the next step (every rank calls it; no communication).
  RlShare begin_step() const;
  /// Problems per rank of the next step.
  const std::vector<int64_t>& split() const { return balancer_.rows(); }
  /// After this rank's problems: gathers every rank's `mine` (their sum is returned; `ranks`, when
  /// given, gets each rank's), updates the weights with `schedule` (gradient scale 1), zeroes the
  /// gradients and plans the next split from the gathered seconds. Collective.
  RlRankStep finish(const RlRankStep& mine, const StepSchedule& schedule, std::vector<RlRankStep>* ranks = nullptr);

 private:
  GPT& model_;
  Communicator& comm_;
  std::unique_ptr<MuonAdamW> opt_;
  StepBalancer balancer_;
};

}  // namespace nanochat
