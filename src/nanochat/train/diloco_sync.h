#pragma once
// The StepSync of --sync diloco (train/sync.h): DiLoCo (Douillard et al. 2023, "DiLoCo:
// Distributed Low-Communication Training of Language Models"), for nodes joined by slow links.
//
// A node is the ranks of one machine (ranks with the same rank - LOCAL_RANK); inside it every
// step is the ZeRO-2 step of zero2_sync.h on the node's own communicator (a GradAccumulator and
// the inner MuonAdamW over the node's ranks only). Between nodes nothing travels during a round
// but the rows node 0 serves. A round is the steps between two boundaries: every H
// (--sync-every) steps, the last step, and the steps at which the loop evaluates, samples or
// saves (the weights must be one model there: in_sync). At a boundary, in update() of the step
// that ends the round, the first rank of each node (its leader) computes
//
//   D_i   = theta_outer - theta_i          node i's change over the round (theta_outer: the
//                                          weights at the round's start, the same on every node)
//   D     = sum_i w_i D_i / sum_i w_i      w_i: the valid tokens node i trained in the round
//   m     = mu m + D                       the outer momentum (the same on every leader)
//   theta_outer = theta_bar + (1 - lr) D - lr mu m,   theta_bar = theta_outer - D
//
// which is theta_outer - lr (D + mu m), PyTorch's SGD(nesterov=True) step on the "outer
// gradient" D; then the node's other ranks receive theta_outer. theta_bar is the nodes' mean
// weights; with one node it is that node's weights exactly (no exchange), so --outer-lr 1
// --outer-momentum 0 trains bit for bit as --sync zero2 does. The leaders exchange w_i / sum w *
// D_i in --sync-dtype (train/outer_wire.h): an all-reduce for float32, an all-gather summed in
// node order for the others; every leader then holds the same D bit for bit.
//
// --outer-overlap K (0 < K < H): the leaders do not wait for the exchange at a boundary inside a
// run. Each node sends D_i and trains on from its own weights theta_b; after K more steps
// (step b + K) the mean D has arrived and every node applies it, keeping the progress of those K
// steps on top:
//
//   theta_outer, m <- the outer step on D (as above)      theta <- theta_outer - (theta_b - theta)
//
// The next round's change is measured from theta_outer, so each node's K steps are counted once,
// in the next round's mean. The nodes wait only when the exchange takes longer than K steps (said
// in a line). Boundaries that end in an evaluation, a sample, a save or the last step wait as
// with K = 0 (the weights are one model there: in_sync), applying first an exchange still in
// flight; a checkpoint therefore holds nothing in flight, and a resumed run takes the same steps
// as one that was not stopped. The leaders keep one more copy of the weights (theta_b).
// Rows: each step's rows are dealt to every rank by a StepBalancer as in ZeRO-2, but it is
// re-planned only at boundaries, from the rows and compute seconds of the whole round: a slower
// node runs fewer rows per step (smaller inner steps, the same count of them), and its change
// weighs by the tokens it ran. A node dealt no rows in a step skips that inner step.
// Statistics: at a boundary every rank's step is gathered over the job (the loss is the job's);
// between boundaries only over the node: rank 0's line then shows node 0's loss, and the other
// nodes' rows and times as of the last boundary.
// Checkpoints (only at boundaries): node 0 writes the job's checkpoint with its own inner
// optimizer state (checkpoint/loop_checkpoint.h over the node's ranks) and the outer momentum
// (outer_<step>.safetensors); every other node writes its inner optimizer state into its own
// checkpoint folder. Resume: the weights and the outer momentum from node 0, each node's inner
// state from its own folder, or, where it has none (another machine), a fresh one (said in a
// line). Under an unchanged split and the same machines, resuming is exact.
// Nodes that come and go (`nanochat run --nnodes MIN:MAX`, train/elastic.h): node 0 keeps a copy
// of its state (the weights, its inner optimizer state, the outer momentum) at the boundaries
// where the weights are one model (keep_copy, every --copy-state-every steps: an elastic job sets
// it to H; with --outer-overlap only boundaries that wait are such). When a node leaves, node 0
// writes that copy (save_copy) and the nodes that remain go on from it as a new job generation:
// the steps since it are trained again (the round in progress when each boundary is copied). Nodes join
// at such a boundary and start their round from the outer weights (a node without its own inner
// state starts it afresh, as on resume). Joins are admitted only where the weights are one model.
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nanochat/checkpoint/job_checkpoint.h"
#include "nanochat/plan/plan.h"
#include "nanochat/train/balance.h"
#include "nanochat/train/sync.h"
#include "nanochat/train/zero2_grad_accum.h"

namespace nanochat {

class Communicator;
class GPT;

class DiLoCoSync final : public StepSync {
 public:
  /// model, comm: this rank's; plan: optim (the inner optimizer), outer (H, lr, momentum, wire),
  /// num_iterations and cadence (the boundaries), balance; device_batches, rows_per_step: the
  /// job's (train/job_layout.h); node_of_rank: every rank's node index (0-based, nodes in the
  /// order of their first rank, each node's ranks contiguous). Collective (splits `comm`).
  /// Throws nanochat::Error like StepBalancer's constructor, or for a node_of_rank that is not
  /// one entry per rank in contiguous blocks.
  DiLoCoSync(GPT& model, const TrainPlan& plan, Communicator& comm, const std::vector<int>& device_batches,
             int64_t rows_per_step, const std::vector<int>& node_of_rank);
  ~DiLoCoSync() override;

  int rank() const override;
  int world_size() const override;
  MuonAdamW& optimizer() override { return *inner_; }
  std::string describe() const override;
  StepShare begin_step(int64_t step) override;
  float micro_batch(int micro, const int32_t* idx, const int32_t* targets, int B, int T) override;
  double update(const StepSchedule& schedule) override;
  StepStats finish(RankStep mine) override;
  bool in_sync(int64_t step) const override;
  void check_replicas(int64_t step) override;
  void sum_over_ranks(double* v, size_t n) override;
  void save(const std::string& dir, const RunMeta& run_meta, const LoopState& state,
            const FaultInjector& faults) override;
  LoopState resume(const TrainPlan& plan, int64_t step) override;
  void keep_copy(const RunMeta& run_meta, const LoopState& state) override;
  int64_t save_copy(const std::string& dir) override;

  /// The file of `dir` holding the outer momentum of step `step`.
  static std::string outer_state_file(const std::string& dir, int64_t step);

  /// Every rank's node index (from `comm`'s ranks' LOCAL_RANK, gathered). Collective.
  static std::vector<int> nodes_of_ranks(Communicator& comm, int local_rank);

 private:
  int64_t late() const { return nodes_ > 1 ? outer_cfg_.overlap_steps : 0; }  // --outer-overlap, 0 alone
  bool boundary(int64_t step) const;                                          // a round ends after `step` steps
  bool drain(int64_t step) const;  // ... and the weights must be one model there
  void outer_step();               // the leaders' exchange and step; the node's ranks get the result
  void exchange(float* delta, size_t n, double weight);  // delta <- the nodes' weighted mean (leaders)
  void outer_update(const float* d);                     // leaders: theta_outer, m <- the outer step on d
  double apply_late();     // leaders: waits for the exchange in flight and applies it; seconds waited
  void apply_late_step();  // the step's end where the exchange in flight is applied (every rank)

  GPT& model_;
  Communicator& comm_;
  const OuterConfig outer_cfg_;
  const int64_t num_iterations_;
  const Cadence cadence_;
  std::vector<int> node_of_rank_;
  int node_ = 0, nodes_ = 1, node_first_ = 0, node_size_ = 1;
  std::unique_ptr<Communicator> node_comm_;     // this node's ranks
  std::unique_ptr<Communicator> leaders_comm_;  // every node's first rank (the others: a group of their own)
  std::unique_ptr<MuonAdamW> inner_;
  std::unique_ptr<GradAccumulator> accum_;
  StepBalancer balancer_;
  const BalanceMode mode_;
  std::vector<float> outer_;     // leader: theta_outer
  std::vector<float> momentum_;  // leader: m
  std::vector<float> delta_;     // leader: the change sent (then the mean; with K > 0 in flight K steps)
  std::vector<float> sent_at_;   // leader, K > 0: theta_b, the weights when the change was sent
  std::future<void> in_flight_;  // leader, K > 0: the exchange
  double exchange_seconds_ = 0;  // ... its time on its thread (read after in_flight_.get())
  int64_t apply_at_ = -1;        // K > 0: the step count after which it is applied (-1: none in flight)
  int64_t sent_after_ = 0;       // ... the step count after which it was sent
  std::vector<uint8_t> wire_;    // leader: scratch
  int64_t step_ = 0;
  std::vector<int64_t> split_;  // of the current step
  int64_t node_rows_ = 0;       // the node's rows in the current step
  int64_t rows_ = 0;            // this rank's rows in the current step
  double loss_sum_ = 0;
  int64_t node_tokens_ = 0;                    // the node's valid tokens in the current step
  double round_tokens_ = 0;                    // the node's valid tokens since the round began
  double round_rows_ = 0, round_compute_ = 0;  // this rank's, since the round began
  std::vector<RankStep> last_;                 // every rank's step as of the last boundary
  // A peer the job's heartbeat found lost (set from its thread): inside a round no collective
  // crosses nodes, so the next step stops with it instead of training on to the boundary.
  struct Lost {
    std::mutex mu;
    int peer = -1;
    std::string why;
  };
  std::shared_ptr<Lost> lost_ = std::make_shared<Lost>();
  JobStateCopy copy_;                       // rank 0: node 0's state at the last keep_copy
  std::vector<float> copy_momentum_;        // rank 0: the outer momentum then
  std::vector<std::string> pending_notes_;  // the outer step's line, for finish()
  bool synced_ = false;                     // the current step ended a round (outer step done)
};

}  // namespace nanochat
