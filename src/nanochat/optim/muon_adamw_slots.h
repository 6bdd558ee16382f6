#pragma once
// MuonAdamW's per-parameter and per-group state (optim/muon_adamw.h) and the layout helpers its
// three files share. Internal to optim. The files, along the optimizer's own boundaries:
//   muon_adamw.cpp        groups, allocation, the update math of what this rank owns (no communicator)
//   muon_adamw_shard.cpp  ZeRO-2: layout, the step's schedule and overlap, rebalance, state moves
//   muon_adamw_state.cpp  the state format: checkpoint tensors, saved layouts, the whole state
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/optim/muon_adamw.h"

namespace nanochat {

namespace optim_detail {

constexpr int64_t kSmallAdamW = 1024;  // numel below which AdamW gradients are all-reduced

inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string shape_str(const std::vector<int64_t>& s);

// The equal split of n items over W ranks: blocks of ceil(n / W), trailing ranks fewer (or none).
inline std::vector<int64_t> equal_counts(int64_t n, int W) {
  std::vector<int64_t> out(static_cast<size_t>(W));
  const int64_t c = ceil_div(n, W);
  for (int r = 0; r < W; ++r) out[static_cast<size_t>(r)] = std::min(n, (r + 1) * c) - std::min(n, r * c);
  return out;
}

// Where each of `counts`' segments starts, and the total last (counts.size() + 1 entries).
template <typename T>
std::vector<T> starts_of(const std::vector<T>& counts) {
  std::vector<T> s(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) s[i + 1] = s[i] + counts[i];
  return s;
}

// The equal layout of a model's slots at world size `world` (blocks of ceil(n / world)); AdamW
// tensors are split when world > 1, they have kSmallAdamW elements or more and they are not
// embedding tables (`sparse`, replicated). `by_size`: split every tensor of kSmallAdamW elements
// or more, embedding tables too -- the layout of shards saved without layout metadata.
template <typename AdamSlots, typename MuonSlots>
OptLayout equal_layout_of(const AdamSlots& adam, const MuonSlots& muon, int world, bool by_size = false) {
  OptLayout l;
  for (const auto& s : adam) {
    const bool split = world > 1 && s.rows * s.row_elems >= kSmallAdamW && (by_size || !s.sparse);
    l.adam_rows.push_back(split ? equal_counts(s.rows, world) : std::vector<int64_t>{});
  }
  for (const auto& s : muon) {
    std::vector<int> owner;
    const std::vector<int64_t> counts = equal_counts(s.K, world);
    for (int r = 0; r < world; ++r) owner.insert(owner.end(), static_cast<size_t>(counts[static_cast<size_t>(r)]), r);
    l.muon_owner.push_back(std::move(owner));
  }
  return l;
}

}  // namespace optim_detail

// One AdamW parameter: its (possibly row-sharded) state and communication handles.
struct MuonAdamW::AdamSlot {
  int param = -1;
  int group = -1;
  bool sharded = false;  // large parameter with W > 1: reduce-scatter + all-gather
  // An embedding table (wte, value_embeds) at W > 1: state replicated like a small tensor, but
  // the gradient travels as the rows this rank touched (launch_adam_reduce, muon_adamw_shard.cpp).
  bool sparse = false;
  // Small, with a gradient the caller has already summed over the ranks (set_summed_by_caller):
  // updated like a small tensor, with nothing sent.
  bool summed_by_caller = false;
  int64_t rows = 0, row_elems = 0;  // the parameter's rows and elements per row
  int64_t row0 = 0, nrows = 0;      // owned rows [row0, row0 + nrows) (the layout's)
  size_t owned = 0;                 // owned elements
  std::vector<int64_t> state_shape;
  std::vector<size_t> counts;  // elements per rank (sharded)
  AlignedBuffer m, v, gslice;
  int64_t step = 0;
  WorkPtr reduce;
  // sparse: this rank's touched rows, each (row index as int32 bits, row_elems values); every
  // rank's packs in rank order and their float counts (one all_gather_varying); whether this
  // step's sum went as packs (else as a dense all-reduce, when the packs were larger). Kept
  // across steps so that a step allocates nothing once the packs have reached their largest size.
  std::vector<float> pack, packs;
  std::vector<uint64_t> pack_counts;
  bool packs_sent = false;
};

// One Muon group: the stacked buffers and the state of the matrices this rank owns.
struct MuonAdamW::MuonSlot {
  int group = -1;
  int64_t K = 0, m = 0, n = 0, nv = 0;
  size_t mn = 0;
  std::vector<int64_t> order;      // stack position -> matrix: each rank's matrices together, rank 0 first
  std::vector<int64_t> mine;       // the matrices this rank owns, ascending (the layout's)
  int64_t first = 0;               // stack position of this rank's first matrix
  AlignedBuffer momentum, second;  // (mine, m, n), (mine, nv)
  AlignedBuffer stack, gchunk;     // W > 1: (K, m, n) and (mine, m, n)
  std::vector<size_t> counts;      // floats per rank in the stack
  std::vector<int64_t> pos_of;     // matrix -> stack position (the inverse of order)
  std::vector<int> owner_at;       // stack position -> owner rank
  // The whole stack's reduce-scatter (launched by step()), or one per matrix in `pieces` as
  // grad_ready() reports them (`sent` marks their positions; `piece_counts` is the scratch
  // counts of one matrix: mn floats at its owner, 0 elsewhere).
  WorkPtr reduce;
  std::vector<WorkPtr> pieces;
  std::vector<uint8_t> sent;
  std::vector<size_t> piece_counts;
};

}  // namespace nanochat
