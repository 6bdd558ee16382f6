#pragma once
// MuonAdamW: nanochat's combined optimizer (nanochat/optim.py class MuonAdamW; docs/nanochat.md 2.1-2.4)
// with its ZeRO-2-style sharding inside the optimizer (docs/architecture.md 3.8):
//  - AdamW parameters with < 1024 elements: gradients all-reduced (nothing sent for those the
//    caller has summed itself, set_summed_by_caller), every rank updates the whole parameter,
//    state replicated.
//  - the embedding tables (groups wte and value_embeds) at W > 1: state replicated, every rank
//    updates every row; the gradient sum travels as each rank's nonzero rows (the tokens it saw),
//    or as a dense all-reduce when those packs would be larger (docs/architecture.md 3.8).
//  - other AdamW parameters with >= 1024 elements: gradients reduce-scattered by rows, rank r owns a
//    contiguous range of rows (rank 0 first), updates them, then all-gathers the parameter.
//  - Muon: the K same-shape matrices of a group are stacked, each rank's matrices together (rank 0
//    first); a rank owns its matrices whole, runs the Muon math on them and all-gathers the stack.
// Who owns what is the layout (OptLayout). It starts equal: rows in blocks of ceil(R/W), matrices
// in blocks of ceil(K/W) (unequal counts instead of nanochat's divisibility assert, so any world
// size works). rebalance() re-deals it in proportion to the ranks' measured speeds
// (optim/shard_plan.h) and moves the state that changes owner, so that a slower machine does a
// smaller part of every update. The math is per row and per matrix: the parameters do not depend
// on the layout (up to the summation order of the gradient reductions at W >= 3).
// step() follows nanochat's 3-phase pattern: launch every reduction (those grad_ready() did not
// launch, in group order); per tensor, group, or Muon matrix reduced alone (grad_ready), in the
// order its reduction was launched, wait, compute, launch its gathers (on the communicator's side
// lane, beside the later reductions); wait for every gather and copy the Muon stacks back.
// With no communicator (or world size 1) it is plain single-process math with no copies.
//
// Sources, one concern each (the contract of each file opens it): muon_adamw.cpp (groups and the
// update math, no communicator; kernels in optim/optim_math.h), muon_adamw_shard.cpp (the ZeRO-2
// sharding: layout, step schedule and overlap, rebalance, state moves), muon_adamw_state.cpp (the
// checkpoint format and the whole state of a re-shard).
//
// The optimizer only sees OptParam views (name, shape, parameter and gradient pointers), so it is
// independent of the model class. All buffers are allocated in the constructor; step() allocates
// nothing itself (a communicator may allocate its own handles) but the embedding tables' packs,
// which grow to the largest step's.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/arena.h"
#include "nanochat/core/safetensors.h"

namespace nanochat {

/// One parameter handed to the optimizer. name = nanochat state_dict key (decides the group,
/// docs/nanochat.md 2.1); p and g point at numel(shape) floats (row-major) that outlive the optimizer.
struct OptParam {
  std::string name;
  std::vector<int64_t> shape;
  float* p = nullptr;
  float* g = nullptr;
};

/// Learning rates as base_train passes them (already multiplied by the batch lr scale) and the
/// Muon weight decay (already scaled). model_dim = n_embd, for dmodel_lr_scale = (C/768)^-0.5.
struct OptimConfig {
  float unembedding_lr = 0.008f, embedding_lr = 0.3f, matrix_lr = 0.02f, scalar_lr = 0.5f;
  float weight_decay = 0.28f;  ///< Muon weight decay (already scaled), before the schedule
  int64_t model_dim = 768;
  /// Muon's Polar Express in bfloat16 (optim_math.h MuonHyper::bf16; --dtype bfloat16, as nanochat
  /// runs it with COMPUTE_DTYPE bf16). Needs native bf16.
  bool bf16_polar_express = false;
};

/// nanochat's width scaling of the AdamW learning rates, (model_dim / 768)^-0.5
/// (nanochat/gpt.py GPT.setup_optimizer dmodel_lr_scale); model_dim = n_embd >= 1.
double dmodel_lr_scale(int64_t model_dim);

enum class OptKind { AdamW, Muon };

/// Who does which part of the update: per AdamW parameter (in group order, the optimizer's AdamW
/// slots) the rows of each rank, contiguous ranges in rank order (empty for a small, all-reduced
/// parameter or an embedding table, which every rank updates whole); per Muon group (group order)
/// the owner rank of each of its K matrices. Identical on every rank.
struct OptLayout {
  std::vector<std::vector<int64_t>> adam_rows;
  std::vector<std::vector<int>> muon_owner;
  bool operator==(const OptLayout&) const = default;
};

/// One parameter group (docs/nanochat.md 2.1 table), in nanochat's group order.
struct OptGroup {
  OptKind kind = OptKind::AdamW;
  std::string label;                     ///< lm_head, wte, value_embeds, resid, x0, smear, muon (m,n)
  std::vector<int> params;               ///< indices into the constructor's parameter list, model order
  std::vector<std::string> names;        ///< the same parameters by name
  double initial_lr = 0;                 ///< lr at construction; each step lr = initial_lr * multiplier
  double lr = 0;                         ///< lr of the last step (initial_lr before any step)
  double beta1 = 0, beta2 = 0, eps = 0;  ///< AdamW betas/eps; Muon: beta2 = 0.9 (NorMuon)
  double weight_decay = 0;               ///< AdamW: fixed; Muon: last scheduled value
  double momentum = 0;                   ///< Muon only: last scheduled value
  int ns_steps = 5;                      ///< Muon only
  int64_t rows = 0, cols = 0;            ///< Muon only: the group's matrix shape (m, n)
};

/// nanochat's MuonAdamW. Not thread-safe; one instance per rank.
class MuonAdamW {
 public:
  /// Builds the groups of docs/nanochat.md 2.1 from the parameter names and allocates all state and
  /// communication buffers for this rank's shard. comm == nullptr means a single process.
  /// Throws nanochat::Error for a name that belongs to no group, a non-2-D Muon parameter,
  /// null pointers or duplicate names.
  MuonAdamW(std::vector<OptParam> params, const OptimConfig& cfg, Communicator* comm = nullptr);
  ~MuonAdamW();
  MuonAdamW(const MuonAdamW&) = delete;
  MuonAdamW& operator=(const MuonAdamW&) = delete;

  /// One update (docs/nanochat.md 2.2-2.4). lr_multiplier scales every group's initial lr; muon_momentum and
  /// muon_weight_decay are the scheduled Muon values (docs/nanochat.md 3.4). Gradients are summed over ranks
  /// and then multiplied by grad_scale (e.g. 1/W to average, or 1/tokens for token-weighted sums).
  /// With world size 1 the gradient buffers are left unchanged; with W > 1 the collectives use
  /// them as scratch (their contents afterwards are unspecified). Every rank must call step()
  /// the same number of times.
  void step(float lr_multiplier, float muon_momentum, float muon_weight_decay, float grad_scale = 1.f);

  /// Multiplies every group's initial lr (and its current lr) by `factor` > 0: chat_sft's
  /// --init-lr-frac (nanochat scripts/chat_sft.py sets group["lr"] *= init_lr_frac and takes that as
  /// group["initial_lr"]). Throws nanochat::Error for a factor that is not positive and finite.
  void scale_initial_lrs(double factor);

  /// Marks parameter `param` (index into the constructor's list) as holding its final gradient
  /// of this step, so its reduction can start while the backward goes on (the reduce-scatter
  /// overlaps the last micro-batch's backward). With W > 1 a large (sharded) AdamW
  /// tensor's reduce-scatter is launched at once, an embedding table's packs too, and so is a
  /// Muon matrix's reduce-scatter, alone, to its owner (the same sum, bit for bit, as the group's
  /// stacked reduce-scatter); small all-reduced tensors always wait for step() (their gradients
  /// may still be rewritten, see train/zero2_ordered_sum.h). No-op at W = 1 or for an already
  /// launched tensor.
  /// The gradient must not change afterwards until step() returns. Every rank must mark the same
  /// parameters in the same order. Throws nanochat::Error for an index out of range.
  void grad_ready(size_t param);
  /// Marks the parameters with summed[k] true as summed over the ranks by the caller: step()
  /// reads their gradients as the step's sum, identical on every rank, and sends nothing for them
  /// (train/zero2_ordered_sum.h sums the small tensors in stream order on every rank). Only small,
  /// replicated AdamW tensors qualify. Call once, before the first step, on every rank alike; a
  /// no-op at W = 1. Throws nanochat::Error for a size other than the parameter count or a
  /// marked Muon matrix, sharded tensor or embedding table.
  void set_summed_by_caller(const std::vector<bool>& summed);

  /// This rank's optimizer state as named tensors (pointers into the optimizer, valid until the
  /// next step() or layout change): per AdamW parameter `adamw.<name>.exp_avg` / `.exp_avg_sq`
  /// (F32, the owned rows) and `adamw.<name>.step` (I64 [1]); per Muon group, keyed by its first
  /// parameter like nanochat, `muon.<first name>.momentum_buffer` (F32 (c, m, n)) and
  /// `.second_momentum_buffer` (F32 (c, m, 1) if m >= n else (c, 1, n)), c = the matrices this
  /// rank owns, in ascending index.
  std::vector<StWriteEntry> state_entries() const;
  /// Metadata describing the shard layout (optimizer, world_size, rank, steps, and `layout`: the
  /// OptLayout as JSON), for the checkpoint file.
  std::map<std::string, std::string> state_metadata() const;
  /// Loads state written by state_entries() of an optimizer with the same parameters, world size
  /// and layout (a file without a `layout` entry was written under the equal layout, its Muon
  /// tensors padded to ceil(K/W) matrices). Throws nanochat::Error naming the file and the tensor
  /// when one is missing or has another dtype or shape, or when the layouts differ.
  void load_state(const StFile& f);

  /// World-size-independent ("whole") optimizer state, for resuming at another world size:
  /// for each AdamW parameter in group order its exp_avg then exp_avg_sq with every row, then for
  /// each Muon group its momentum_buffer (K, m, n) and second_momentum_buffer (K, max(m, n)) with
  /// every matrix, as one flat float vector; and the AdamW step counts in the same order.
  struct WholeState {
    std::vector<float> values;
    std::vector<int64_t> steps;
  };
  /// Number of floats in WholeState::values (the same for every world size).
  size_t whole_state_floats() const;
  /// Builds the whole state from ALL shard files written by state_entries() of a run of this
  /// model at world size shards.size() (shards[r] = rank r's file), under the layout recorded in
  /// their metadata (the equal layout when none is). Any rank may call it; it uses only the files.
  /// Throws nanochat::Error naming the file and tensor when one is missing or has another shape.
  WholeState assemble_whole_state(const std::vector<StFile>& shards) const;
  /// Loads this rank's part of a whole state (under the current layout). Throws nanochat::Error
  /// if the sizes do not match this optimizer.
  void load_whole_state(const WholeState& whole);
  /// Rank `rank`'s part of a whole state under the current layout, so that a resume sends each
  /// rank only its part: per AdamW parameter (group order) the exp_avg then the exp_avg_sq of the
  /// rows that rank owns (every row of a small, replicated parameter), then per Muon group the
  /// momentum_buffer then the second_momentum_buffer of the matrices it owns, ascending.
  /// Throws nanochat::Error for a rank out of range or a whole state of another size.
  std::vector<float> whole_state_part(const WholeState& whole, int rank) const;
  /// Number of floats of whole_state_part(., rank).
  size_t whole_state_part_floats(int rank) const;
  /// Loads this rank's part (whole_state_part(whole, rank())) and the AdamW step counts
  /// (WholeState::steps). load_whole_state(w) == load_whole_state_part(whole_state_part(w, rank()),
  /// w.steps). Throws nanochat::Error if the sizes do not match this optimizer.
  void load_whole_state_part(const std::vector<float>& part, const std::vector<int64_t>& steps);

  /// The current layout; at construction the equal one.
  const OptLayout& layout() const { return layout_; }
  /// The equal layout of this model and world size.
  OptLayout equal_layout() const;
  /// The layout in proportion to `speeds` (one per rank, > 0, any unit): AdamW rows by
  /// proportional_rows, the Muon matrices of all groups together dealt by deal_whole_items at
  /// their Polar Express cost (optim/shard_plan.h). Throws nanochat::Error for bad speeds.
  OptLayout layout_for(const std::vector<double>& speeds) const;
  /// Work of each rank under `layout`, in AdamW elements (optim/shard_plan.h cost units).
  std::vector<double> work_per_rank(const OptLayout& layout) const;
  /// Collective (every rank, the same argument): makes `layout` current, sending each piece of
  /// state whose owner changes to its new owner (one all-gather per parameter or group that
  /// moves). Throws nanochat::Error for a layout of another shape, rows that do not add up or an
  /// owner out of range, before anything moves.
  void set_layout(const OptLayout& layout);
  /// What a layout change costs and what it saves, measured by the caller (train/zero2_sync.h) and
  /// identical on every rank.
  struct MoveCosts {
    /// Each rank's optimizer compute seconds in the last step, under the current layout.
    std::vector<double> opt_seconds;
    /// Seconds to move one float of state, from the last layout change (seconds of its slowest
    /// rank / its floats_leaving); 0 = no change measured yet: the move is not costed.
    double seconds_per_float = 0;
    /// A move must save its own time within this many steps.
    double payback_steps = 20;
  };
  /// Floats of state (AdamW moments, Muon buffers) that leave their rank when the layout changes
  /// from `from` to `to`, all ranks together (each is sent to every rank in one all-gather,
  /// set_layout). Throws nanochat::Error for a layout of another shape.
  size_t floats_leaving(const OptLayout& from, const OptLayout& to) const;
  /// Collective: switches to layout_for(speeds) when its predicted time (the slowest rank's work /
  /// speed) is at least `min_gain` (a fraction) shorter than the current layout's and, given
  /// `costs` with a measured move rate, when the move pays for itself: the predicted optimizer
  /// seconds saved per step (the predicted times scaled to costs->opt_seconds) times
  /// payback_steps is at least floats_leaving(layout(), next) x seconds_per_float. Returns true when the layout
  /// changed. Speeds and costs must be identical on every rank.
  bool rebalance(const std::vector<double>& speeds, double min_gain = 0.1, const MoveCosts* costs = nullptr);
  /// Floats of state this rank sent or received in the last layout change.
  size_t last_moved_floats() const { return moved_floats_; }
  /// floats_leaving of the last layout change (all ranks together; the same on every rank).
  size_t last_floats_leaving() const { return leaving_floats_; }

  /// Parameter groups in nanochat's order (for logs and tests).
  const std::vector<OptGroup>& groups() const { return groups_; }
  const std::vector<OptParam>& params() const { return params_; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  /// Number of step() calls so far (the AdamW step count).
  int64_t steps_taken() const { return steps_; }
  /// Wall seconds step() has spent blocked in Work::wait() (reductions and gathers), summed
  /// over all steps so far: the communication time not hidden behind computation.
  double comm_wait_seconds() const { return comm_wait_s_; }
  /// Rows of the embedding tables (wte, value_embeds) this rank has sent as packs of touched rows
  /// (the rows of its gradient that are not zero), summed over all steps so far; steps whose packs
  /// would have been larger than a dense all-reduce count none. 0 at world size 1.
  size_t sparse_rows_sent() const { return sparse_rows_; }
  /// Floats of optimizer state held by this rank (moments and Muon buffers).
  size_t state_floats() const;

 private:
  struct AdamSlot;
  struct MuonSlot;
  struct SavedLayout;
  SavedLayout saved_layout(const StFile& f, int world) const;
  std::vector<std::pair<size_t, size_t>> part_runs(int rank) const;

  void build_groups(const OptimConfig& cfg);
  void allocate();
  void shape_adam(AdamSlot& s, const std::vector<int64_t>& rank_rows);
  void shape_muon(MuonSlot& s, const std::vector<int>& owner);
  void check_layout(const OptLayout& l) const;
  void move_adam(AdamSlot& s, const std::vector<int64_t>& to);
  void move_muon(MuonSlot& s, const std::vector<int>& to);
  bool move_pays(const std::vector<double>& now_work, double now_t, double next_t, const OptLayout& next,
                 const std::vector<double>& speeds, const MoveCosts& costs) const;
  // muon_adamw.cpp: the update of the rows / matrices this rank owns (no communicator).
  void update_adam(AdamSlot& s, const OptGroup& g, float grad_scale);
  void update_muon(MuonSlot& s, const OptGroup& g, float grad_scale);
  void update_muon_one(MuonSlot& s, const OptGroup& g, size_t j, float grad_scale);
  // muon_adamw_shard.cpp: the step's communication.
  void launch_reductions();
  void wait_reduce(WorkPtr& w);
  void finish_gathers();

  std::vector<OptParam> params_;
  std::vector<OptGroup> groups_;
  Communicator* comm_ = nullptr;
  bool bf16_polar_ = false;  // OptimConfig::bf16_polar_express
  int rank_ = 0, world_ = 1;
  int64_t steps_ = 0;
  double comm_wait_s_ = 0.0;
  OptLayout layout_;
  size_t moved_floats_ = 0;
  size_t leaving_floats_ = 0;
  void timed_wait(const WorkPtr& w);
  std::vector<AdamSlot> adam_;   // one per AdamW parameter, in group order
  std::vector<MuonSlot> muon_;   // one per Muon group, in group order
  std::vector<int> group_slot_;  // group index -> first slot index in adam_ / muon_
  std::vector<int> param_adam_;  // param index -> slot in adam_, or -1
  std::vector<int> param_muon_;  // param index -> slot in muon_, or -1
  void launch_adam_reduce(AdamSlot& s);
  void launch_packs(AdamSlot& s);
  void start_dense_sums();
  void finish_sparse_sum(AdamSlot& s);
  size_t sparse_rows_ = 0;
  void launch_muon_reduce(MuonSlot& s, const OptGroup& g);
  void launch_muon_piece(MuonSlot& s, const OptGroup& g, int64_t pos);
  void finish_muon_piece(MuonSlot& s, int64_t pos, float grad_scale);
  struct Pending {
    WorkPtr work;
    MuonSlot* muon;    // stack to copy back after the wait, or nullptr (AdamW gather)
    int64_t pos = -1;  // the one stack position to copy back (a matrix's own gather), or -1: all
  };
  std::vector<Pending> gathers_;  // gathers in launch order (capacity reserved at construction)
  struct Launched {
    bool muon;  // muon_[slot], else adam_[slot]
    size_t slot;
    int64_t pos = -1;  // a Muon matrix's own reduce-scatter (stack position), or -1: the slot's
  };
  // This step's slots in the order their reductions were launched (at W = 1, where nothing is
  // sent, in group order); capacity reserved at construction.
  std::vector<Launched> launched_;
  // Muon scratch (sized for the largest group): x, x2, a, b, rowv.
  AlignedBuffer scr_x_, scr_x2_, scr_a_, scr_b_, scr_rowv_;
};

}  // namespace nanochat
