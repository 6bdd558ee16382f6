// MuonAdamW's ZeRO-2 sharding (optim/muon_adamw.h, docs/architecture.md 3.8): everything that
// involves the Communicator or another rank.
//  - Layout: who owns which AdamW rows and Muon matrices (equal at construction, layout_for in
//    proportion to speeds, optim/shard_plan.h), and the slot geometry and buffers that follow
//    from it (shape_adam, shape_muon).
//  - Schedule: step() runs nanochat's three phases (launch every reduction not launched yet, in
//    group order; per tensor, group or Muon matrix sent alone, in launch order, wait, update,
//    launch its gathers on the communicator's side lane; wait for every gather and copy the Muon
//    stacks back);
//    the per-slot update itself is muon_adamw.cpp's (no communicator). grad_ready() starts a
//    reduction early so that it overlaps the backward.
//  - Rebalance and state moves: set_layout() sends each piece of state whose owner changes to its
//    new owner with one all-gather per tensor or group that moves; rebalance() switches layouts
//    when the predicted optimizer time gains enough and, once a move was timed, the time saved
//    pays for the move (move_pays, floats_leaving).
// Every rank calls the collectives here in the same order with the same arguments; every wait is
// a Work::wait() with the communicator's deadline (its error names the peer). The checkpoint
// format of the state is muon_adamw_state.cpp's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "nanochat/core/error.h"
#include "nanochat/core/profile.h"
#include "nanochat/core/timer.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/optim/muon_adamw_slots.h"
#include "nanochat/optim/shard_plan.h"

namespace nanochat {

using optim_detail::equal_layout_of;
using optim_detail::starts_of;

namespace {

using Range = std::pair<int64_t, int64_t>;  // [first, end)

// Rows of [a.first, a.second) outside [b.first, b.second), in order (at most two ranges).
std::vector<Range> minus(Range a, Range b) {
  std::vector<Range> out;
  if (a.first < std::min(a.second, b.first)) out.push_back({a.first, std::min(a.second, b.first)});
  if (std::max(a.first, b.second) < a.second) out.push_back({std::max(a.first, b.second), a.second});
  return out;
}

int64_t total_rows(const std::vector<Range>& rs) {
  int64_t n = 0;
  for (const Range& r : rs) n += r.second - r.first;
  return n;
}

std::vector<size_t> float_counts(const std::vector<int64_t>& items, size_t per) {
  std::vector<size_t> out;
  for (int64_t c : items) out.push_back(static_cast<size_t>(c) * per);
  return out;
}

}  // namespace

// --- the step's communication schedule -----------------------------------------------------------

void MuonAdamW::step(float lr_multiplier, float muon_momentum, float muon_weight_decay, float grad_scale) {
  prof::Scope profile_scope(prof::Op::Optimizer);
  ++steps_;
  for (auto& g : groups_) {
    g.lr = g.initial_lr * static_cast<double>(lr_multiplier);
    if (g.kind == OptKind::Muon) {
      g.momentum = muon_momentum;
      g.weight_decay = muon_weight_decay;
    }
  }
  // Phase 1: launch every reduction not launched yet, in group order.
  launch_reductions();
  // Phase 2: per tensor or Muon group, in the order its reduction was launched (the order in which
  // they finish), wait for it, compute (muon_adamw.cpp) and launch its gathers on the side lane,
  // where they run beside the later reductions (the link's other direction). Every rank launched
  // the reductions in the same order, so the gathers' order is the same on every rank; the
  // updates are independent of each other, so the order does not change the result.
  for (const Launched& l : launched_) {
    if (l.muon) {
      MuonSlot& s = muon_[l.slot];
      if (l.pos >= 0) {
        finish_muon_piece(s, l.pos, grad_scale);
        continue;
      }
      wait_reduce(s.reduce);
      update_muon(s, groups_[s.group], grad_scale);
      if (world_ > 1) {
        float* stack = s.stack.f32();
        gathers_.push_back({comm_->all_gather_side(stack + s.first * s.mn, stack, s.counts), &s});
      }
    } else {
      AdamSlot& s = adam_[l.slot];
      if (s.sparse) continue;  // updated after the loop
      wait_reduce(s.reduce);
      update_adam(s, groups_[s.group], grad_scale);
      if (s.sharded) {
        OptParam& p = params_[s.param];
        gathers_.push_back({comm_->all_gather_side(p.p + s.row0 * s.row_elems, p.p, s.counts), nullptr});
      }
    }
  }
  // The embedding tables: wait, add the packs (or wait for the dense sum), update every row.
  if (world_ > 1) start_dense_sums();
  for (const Launched& l : launched_) {
    if (l.muon || !adam_[l.slot].sparse) continue;
    AdamSlot& s = adam_[l.slot];
    finish_sparse_sum(s);
    update_adam(s, groups_[s.group], grad_scale);
  }
  launched_.clear();
  for (MuonSlot& s : muon_) std::fill(s.sent.begin(), s.sent.end(), uint8_t{0});
  // Phase 3: wait for the gathers, copy the Muon stacks back.
  finish_gathers();
}

void MuonAdamW::set_summed_by_caller(const std::vector<bool>& summed) {
  if (summed.size() != params_.size())
    fail("optimizer: set_summed_by_caller with ", summed.size(), " flags for ", params_.size(), " parameters");
  if (world_ == 1) return;
  for (size_t k = 0; k < summed.size(); ++k) {
    if (!summed[k]) continue;
    if (param_adam_[k] < 0 || adam_[param_adam_[k]].sharded || adam_[param_adam_[k]].sparse)
      fail("optimizer: '", params_[k].name, "' is summed over the ranks by the optimizer itself (",
           param_adam_[k] < 0 ? "a Muon matrix" : "a large AdamW tensor", "), not by its caller");
    adam_[param_adam_[k]].summed_by_caller = true;
  }
}

void MuonAdamW::grad_ready(size_t param) {
  if (param >= params_.size()) fail("optimizer: grad_ready(", param, ") but there are ", params_.size(), " parameters");
  if (world_ == 1) return;
  if (param_adam_[param] >= 0) {
    AdamSlot& s = adam_[param_adam_[param]];
    if ((s.sharded || s.sparse) && !s.reduce) launch_adam_reduce(s);
    return;
  }
  MuonSlot& s = muon_[param_muon_[param]];
  const OptGroup& g = groups_[s.group];
  const auto k = std::find(g.params.begin(), g.params.end(), static_cast<int>(param)) - g.params.begin();
  const int64_t pos = s.pos_of[static_cast<size_t>(k)];
  if (s.reduce || s.sent[static_cast<size_t>(pos)]) return;
  launch_muon_piece(s, g, pos);
}

// Sharded: reduce-scatter by rows into gslice; small: all-reduce in place.
// Lists the slot for step() and, at W > 1, starts its reduction.
void MuonAdamW::launch_adam_reduce(AdamSlot& s) {
  launched_.push_back({false, static_cast<size_t>(&s - adam_.data())});
  if (world_ == 1 || s.summed_by_caller) return;
  if (s.sparse) return launch_packs(s);
  float* g = params_[s.param].g;
  s.reduce = s.sharded ? comm_->reduce_scatter_sum(g, s.gslice.f32(), s.counts) : comm_->all_reduce_sum(g, s.owned);
}

// --- embedding tables: the touched rows' sum ----------------------------------------------------
// A lookup table's gradient is zero outside the rows of the tokens this rank saw, a fraction of
// the vocabulary in a small step. Its state is replicated (every rank updates every row, as for a
// small tensor) and the sum travels as the rows that are not zero: each rank packs its nonzero
// rows, one all_gather_varying sends the packs' sizes and then the packs (as soon as grad_ready
// reports the table, so that a value embedding's rows travel during the lower blocks' backward),
// and every rank adds them into a zeroed gradient in rank order, so every rank holds the same sum
// (equal to the dense sum: adding a zero row changes nothing). A ring all-gather of packs of S
// floats in all sends about S (W-1)/W floats per rank, a dense all-reduce 2 N (W-1)/W: when
// S >= 2 N the packs are not sent and the gradient is all-reduced instead (start_dense_sums).

void MuonAdamW::launch_packs(AdamSlot& s) {
  const float* g = params_[s.param].g;
  const size_t row_elems = static_cast<size_t>(s.row_elems);
  s.pack.clear();
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* row = g + static_cast<size_t>(r) * row_elems;
    if (std::all_of(row, row + row_elems, [](float x) { return x == 0.f; })) continue;
    const uint32_t id = static_cast<uint32_t>(r);
    float id_bits;
    std::memcpy(&id_bits, &id, sizeof id_bits);
    s.pack.push_back(id_bits);
    s.pack.insert(s.pack.end(), row, row + row_elems);
  }
  s.reduce = comm_->all_gather_varying(s.pack.data(), s.pack.size(), &s.packs, &s.pack_counts, 2 * s.owned - 1);
}

// Waits for every table's packs; a table whose packs were too large to send has its gradient
// all-reduced instead (all those all-reduces are launched before any is waited for).
void MuonAdamW::start_dense_sums() {
  for (const Launched& l : launched_) {
    if (l.muon || !adam_[l.slot].sparse) continue;
    AdamSlot& s = adam_[l.slot];
    wait_reduce(s.reduce);
    size_t total = 0;
    for (uint64_t c : s.pack_counts) total += static_cast<size_t>(c);
    s.packs_sent = total < 2 * s.owned;
    if (!s.packs_sent) s.reduce = comm_->all_reduce_sum(params_[s.param].g, s.owned);
  }
}

void MuonAdamW::finish_sparse_sum(AdamSlot& s) {
  wait_reduce(s.reduce);
  if (!s.packs_sent) return;  // all-reduced in place
  float* g = params_[s.param].g;
  const size_t row_elems = static_cast<size_t>(s.row_elems);
  std::fill(g, g + s.owned, 0.f);
  size_t at = 0, end = 0;
  for (uint64_t c : s.pack_counts) {
    end += static_cast<size_t>(c);
    for (; at < end; at += 1 + row_elems) {
      uint32_t id;
      std::memcpy(&id, &s.packs[at], sizeof id);
      if (id >= static_cast<uint64_t>(s.rows) || end - at < 1 + row_elems)
        fail("optimizer: a pack of '", params_[s.param].name, "' names row ", id, " of ", s.rows,
             " (the ranks run different models?)");
      float* row = g + static_cast<size_t>(id) * row_elems;
      const float* add = s.packs.data() + at + 1;
      for (size_t j = 0; j < row_elems; ++j) row[j] += add[j];
    }
  }
  sparse_rows_ += s.pack.size() / (1 + row_elems);
}

void MuonAdamW::launch_muon_reduce(MuonSlot& s, const OptGroup& g) {
  launched_.push_back({true, static_cast<size_t>(&s - muon_.data())});
  if (world_ == 1) return;  // the update reads the gradients in place
  float* stack = s.stack.f32();
  for (int64_t pos = 0; pos < s.K; ++pos)
    std::memcpy(stack + pos * s.mn, params_[g.params[s.order[pos]]].g, s.mn * sizeof(float));
  s.reduce = comm_->reduce_scatter_sum(stack, s.gchunk.f32(), s.counts);
}

// One matrix of a group, reduce-scattered alone as soon as its gradient is final, so that the
// group's bytes travel during the rest of the backward: the counts are the matrix's at its owner
// and 0 elsewhere, so each element is summed along the same ring path, in the same order, as in
// the whole stack's reduce-scatter (the same bits).
void MuonAdamW::launch_muon_piece(MuonSlot& s, const OptGroup& g, int64_t pos) {
  s.sent[static_cast<size_t>(pos)] = 1;
  float* in = s.stack.f32() + static_cast<size_t>(pos) * s.mn;
  std::memcpy(in, params_[g.params[static_cast<size_t>(s.order[static_cast<size_t>(pos)])]].g, s.mn * sizeof(float));
  const int owner = s.owner_at[static_cast<size_t>(pos)];
  std::fill(s.piece_counts.begin(), s.piece_counts.end(), size_t{0});
  s.piece_counts[static_cast<size_t>(owner)] = s.mn;
  float* out = owner == rank_ ? s.gchunk.f32() + static_cast<size_t>(pos - s.first) * s.mn : in;
  s.pieces[static_cast<size_t>(pos)] = comm_->reduce_scatter_sum(in, out, s.piece_counts);
  launched_.push_back({true, static_cast<size_t>(&s - muon_.data()), pos});
}

// A matrix sent alone (launch_muon_piece): wait for its reduce-scatter; its owner updates it at
// once, and every rank launches its gather (the owner's mn floats, into the stack) on the side
// lane, so the matrices whose sums came first are updated and sent while the later ones arrive.
// Every rank waits first: the gather writes the stack rows that the reduce-scatter reads.
void MuonAdamW::finish_muon_piece(MuonSlot& s, int64_t pos, float grad_scale) {
  wait_reduce(s.pieces[static_cast<size_t>(pos)]);
  const int owner = s.owner_at[static_cast<size_t>(pos)];
  if (owner == rank_) update_muon_one(s, groups_[s.group], static_cast<size_t>(pos - s.first), grad_scale);
  float* at = s.stack.f32() + static_cast<size_t>(pos) * s.mn;
  std::fill(s.piece_counts.begin(), s.piece_counts.end(), size_t{0});
  s.piece_counts[static_cast<size_t>(owner)] = s.mn;
  gathers_.push_back({comm_->all_gather_side(at, at, s.piece_counts), &s, pos});
}

void MuonAdamW::launch_reductions() {
  // Everything grad_ready() has not launched yet, in group order (at W = 1 grad_ready() launches
  // nothing and nothing is sent: every slot is only listed, in group order).
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const OptGroup& g = groups_[gi];
    if (g.kind == OptKind::AdamW) {
      for (size_t k = 0; k < g.params.size(); ++k) {
        AdamSlot& s = adam_[group_slot_[gi] + k];
        if (!s.reduce) launch_adam_reduce(s);
      }
    } else {
      MuonSlot& s = muon_[group_slot_[gi]];
      if (std::none_of(s.sent.begin(), s.sent.end(), [](uint8_t x) { return x != 0; })) {
        launch_muon_reduce(s, g);
      } else {  // grad_ready() reported some of its matrices: the others go alone too
        for (int64_t pos = 0; pos < s.K; ++pos)
          if (!s.sent[static_cast<size_t>(pos)]) launch_muon_piece(s, g, pos);
      }
    }
  }
}

void MuonAdamW::timed_wait(const WorkPtr& w) {
  const double t0 = now_seconds();
  w->wait();
  comm_wait_s_ += now_seconds() - t0;
}

void MuonAdamW::wait_reduce(WorkPtr& w) {
  if (!w) return;
  timed_wait(w);
  w.reset();
}

void MuonAdamW::finish_gathers() {
  for (Pending& pending : gathers_) {
    timed_wait(pending.work);
    if (MuonSlot* ms = pending.muon) {
      const OptGroup& g = groups_[ms->group];
      for (int64_t pos = 0; pos < ms->K; ++pos)
        if (pending.pos < 0 || pos == pending.pos)
          std::memcpy(params_[g.params[ms->order[pos]]].p, ms->stack.f32() + pos * ms->mn, ms->mn * sizeof(float));
    }
  }
  gathers_.clear();
}

// --- layouts -------------------------------------------------------------------------------------

OptLayout MuonAdamW::equal_layout() const { return equal_layout_of(adam_, muon_, world_); }

OptLayout MuonAdamW::layout_for(const std::vector<double>& speeds) const {
  if (static_cast<int>(speeds.size()) != world_)
    fail("optimizer layout: ", speeds.size(), " speeds for ", world_, " ranks");
  OptLayout l;
  for (const auto& s : adam_)
    l.adam_rows.push_back(s.sharded ? proportional_rows(s.rows, speeds) : std::vector<int64_t>{});
  std::vector<double> costs;  // every group's matrices, dealt together
  for (const auto& s : muon_)
    costs.insert(costs.end(), static_cast<size_t>(s.K), muon_matrix_cost(s.m, s.n, groups_[s.group].ns_steps));
  const std::vector<int> owner = deal_whole_items(costs, speeds);
  size_t i = 0;
  for (const auto& s : muon_) {
    l.muon_owner.emplace_back(owner.begin() + static_cast<std::ptrdiff_t>(i),
                              owner.begin() + static_cast<std::ptrdiff_t>(i + static_cast<size_t>(s.K)));
    i += static_cast<size_t>(s.K);
  }
  return l;
}

std::vector<double> MuonAdamW::work_per_rank(const OptLayout& l) const {
  check_layout(l);
  std::vector<double> w(static_cast<size_t>(world_), 0.0);
  for (size_t k = 0; k < adam_.size(); ++k)
    for (int r = 0; r < world_; ++r)
      w[static_cast<size_t>(r)] +=
          static_cast<double>(adam_[k].sharded ? l.adam_rows[k][static_cast<size_t>(r)] * adam_[k].row_elems
                                               : adam_[k].rows * adam_[k].row_elems);
  for (size_t k = 0; k < muon_.size(); ++k)
    for (int owner : l.muon_owner[k])
      w[static_cast<size_t>(owner)] += muon_matrix_cost(muon_[k].m, muon_[k].n, groups_[muon_[k].group].ns_steps);
  return w;
}

void MuonAdamW::check_layout(const OptLayout& l) const {
  if (l.adam_rows.size() != adam_.size() || l.muon_owner.size() != muon_.size())
    fail("optimizer layout: ", l.adam_rows.size(), " AdamW and ", l.muon_owner.size(),
         " Muon entries, but this optimizer has ", adam_.size(), " and ", muon_.size());
  for (size_t k = 0; k < adam_.size(); ++k) {
    const auto& rows = l.adam_rows[k];
    const std::string& name = params_[adam_[k].param].name;
    if (!adam_[k].sharded) {
      if (!rows.empty()) fail("optimizer layout: '", name, "' is not sharded but the layout splits its rows");
      continue;
    }
    if (static_cast<int>(rows.size()) != world_ || *std::min_element(rows.begin(), rows.end()) < 0 ||
        std::accumulate(rows.begin(), rows.end(), int64_t{0}) != adam_[k].rows)
      fail("optimizer layout: the rows of '", name, "' per rank must be ", world_, " counts >= 0 adding up to ",
           adam_[k].rows);
  }
  for (size_t k = 0; k < muon_.size(); ++k) {
    const auto& owner = l.muon_owner[k];
    if (static_cast<int64_t>(owner.size()) != muon_[k].K)
      fail("optimizer layout: ", owner.size(), " owners for the ", muon_[k].K, " matrices of ",
           groups_[muon_[k].group].label);
    for (int o : owner)
      if (o < 0 || o >= world_)
        fail("optimizer layout: owner rank ", o, " in ", groups_[muon_[k].group].label, " of a ", world_, "-rank job");
  }
}

// Geometry of an AdamW slot under `rank_rows` (sharded), with fresh zeroed state buffers.
void MuonAdamW::shape_adam(AdamSlot& s, const std::vector<int64_t>& rank_rows) {
  if (s.sharded) {
    const std::vector<int64_t> start = starts_of(rank_rows);
    s.counts = float_counts(rank_rows, static_cast<size_t>(s.row_elems));
    s.row0 = start[static_cast<size_t>(rank_)];
    s.nrows = rank_rows[static_cast<size_t>(rank_)];
    s.owned = static_cast<size_t>(s.nrows * s.row_elems);
    s.state_shape[0] = s.nrows;
    s.gslice = AlignedBuffer(s.owned * sizeof(float));
  }
  s.m = AlignedBuffer(s.owned * sizeof(float));
  s.v = AlignedBuffer(s.owned * sizeof(float));
}

// Stack order, this rank's matrices and fresh zeroed state buffers of a Muon group under `owner`.
void MuonAdamW::shape_muon(MuonSlot& s, const std::vector<int>& owner) {
  s.order.clear();
  s.mine.clear();
  std::vector<int64_t> per_rank(static_cast<size_t>(world_), 0);
  for (int r = 0; r < world_; ++r)
    for (int64_t k = 0; k < s.K; ++k)
      if (owner[static_cast<size_t>(k)] == r) {
        if (r == rank_) s.mine.push_back(k);
        s.order.push_back(k);
        ++per_rank[static_cast<size_t>(r)];
      }
  s.first = starts_of(per_rank)[static_cast<size_t>(rank_)];
  s.pos_of.assign(static_cast<size_t>(s.K), 0);
  s.owner_at.clear();
  for (int64_t pos = 0; pos < s.K; ++pos) {
    s.pos_of[static_cast<size_t>(s.order[static_cast<size_t>(pos)])] = pos;
    s.owner_at.push_back(owner[static_cast<size_t>(s.order[static_cast<size_t>(pos)])]);
  }
  s.sent.assign(static_cast<size_t>(s.K), 0);
  s.pieces.assign(static_cast<size_t>(s.K), nullptr);
  s.piece_counts.assign(static_cast<size_t>(world_), 0);
  const size_t n = s.mine.size();
  s.momentum = AlignedBuffer(n * s.mn * sizeof(float));
  s.second = AlignedBuffer(n * static_cast<size_t>(s.nv) * sizeof(float));
  if (world_ > 1) {
    s.counts = float_counts(per_rank, s.mn);
    s.gchunk = AlignedBuffer(n * s.mn * sizeof(float));
  }
}

// --- moving state to a new layout ----------------------------------------------------------------

void MuonAdamW::set_layout(const OptLayout& to) {
  check_layout(to);
  for (const auto& s : adam_)
    if (s.reduce)
      fail("optimizer: the layout changed while a gradient reduction was pending (between grad_ready and step)");
  for (const auto& s : muon_)
    if (s.reduce || std::any_of(s.pieces.begin(), s.pieces.end(), [](const WorkPtr& w) { return w != nullptr; }))
      fail("optimizer: the layout changed while a gradient reduction was pending (between grad_ready and step)");
  moved_floats_ = 0;
  leaving_floats_ = floats_leaving(layout_, to);
  for (size_t k = 0; k < adam_.size(); ++k)
    if (adam_[k].sharded && to.adam_rows[k] != layout_.adam_rows[k]) {
      move_adam(adam_[k], to.adam_rows[k]);
      layout_.adam_rows[k] = to.adam_rows[k];
    }
  for (size_t k = 0; k < muon_.size(); ++k)
    if (to.muon_owner[k] != layout_.muon_owner[k]) {
      move_muon(muon_[k], to.muon_owner[k]);
      layout_.muon_owner[k] = to.muon_owner[k];
    }
}

// Rows that leave their rank go to every rank in one all-gather (per rank: its leaving rows' exp_avg,
// then their exp_avg_sq); each rank keeps the rows of its new range.
void MuonAdamW::move_adam(AdamSlot& s, const std::vector<int64_t>& to) {
  const std::vector<int64_t>& from = layout_.adam_rows[static_cast<size_t>(&s - adam_.data())];
  const std::vector<int64_t> a = starts_of(from), b = starts_of(to);
  const size_t re = static_cast<size_t>(s.row_elems);
  std::vector<std::vector<Range>> leaving(static_cast<size_t>(world_));
  std::vector<int64_t> nleave(static_cast<size_t>(world_));
  for (size_t q = 0; q < leaving.size(); ++q) {
    leaving[q] = minus({a[q], a[q + 1]}, {b[q], b[q + 1]});
    nleave[q] = total_rows(leaving[q]);
  }
  const std::vector<size_t> counts = float_counts(nleave, 2 * re);
  const std::vector<size_t> seg = starts_of(counts);
  const size_t me = static_cast<size_t>(rank_);
  std::vector<float> all(seg.back());
  float* mine = all.data() + seg[me];
  const float* om = s.m.f32();
  const float* ov = s.v.f32();
  size_t at = 0;
  for (const Range& r : leaving[me]) {
    const size_t n = static_cast<size_t>(r.second - r.first) * re, off = static_cast<size_t>(r.first - a[me]) * re;
    std::memcpy(mine + at, om + off, n * sizeof(float));
    std::memcpy(mine + static_cast<size_t>(nleave[me]) * re + at, ov + off, n * sizeof(float));
    at += n;
  }
  if (seg.back() > 0) timed_wait(comm_->all_gather(mine, all.data(), counts));
  AlignedBuffer old_m = std::move(s.m), old_v = std::move(s.v);
  shape_adam(s, to);
  const Range now{b[me], b[me + 1]};
  // kept rows
  const int64_t k0 = std::max(a[me], now.first), k1 = std::min(a[me + 1], now.second);
  if (k0 < k1) {
    const size_t n = static_cast<size_t>(k1 - k0) * re;
    std::memcpy(s.m.f32() + static_cast<size_t>(k0 - now.first) * re,
                old_m.f32() + static_cast<size_t>(k0 - a[me]) * re, n * sizeof(float));
    std::memcpy(s.v.f32() + static_cast<size_t>(k0 - now.first) * re,
                old_v.f32() + static_cast<size_t>(k0 - a[me]) * re, n * sizeof(float));
  }
  // received rows
  size_t received = 0;
  for (size_t q = 0; q < leaving.size(); ++q) {
    if (q == me) continue;
    size_t pos = 0;  // rows of q's leaving list before this range
    for (const Range& r : leaving[q]) {
      const int64_t x0 = std::max(r.first, now.first), x1 = std::min(r.second, now.second);
      if (x0 < x1) {
        const size_t n = static_cast<size_t>(x1 - x0) * re;
        const size_t src = seg[q] + (pos + static_cast<size_t>(x0 - r.first)) * re;
        std::memcpy(s.m.f32() + static_cast<size_t>(x0 - now.first) * re, all.data() + src, n * sizeof(float));
        std::memcpy(s.v.f32() + static_cast<size_t>(x0 - now.first) * re,
                    all.data() + src + static_cast<size_t>(nleave[q]) * re, n * sizeof(float));
        received += 2 * n;
      }
      pos += static_cast<size_t>(r.second - r.first);
    }
  }
  moved_floats_ += counts[me] + received;
}

// Matrices that change owner go to every rank in one all-gather (per rank: each leaving matrix's
// momentum then second-moment buffer, ascending); each rank keeps the matrices it now owns.
void MuonAdamW::move_muon(MuonSlot& s, const std::vector<int>& to) {
  const std::vector<int>& from = layout_.muon_owner[static_cast<size_t>(&s - muon_.data())];
  const size_t per = s.mn + static_cast<size_t>(s.nv), me = static_cast<size_t>(rank_);
  std::vector<std::vector<int64_t>> leaving(static_cast<size_t>(world_));
  for (int64_t k = 0; k < s.K; ++k)
    if (from[static_cast<size_t>(k)] != to[static_cast<size_t>(k)])
      leaving[static_cast<size_t>(from[static_cast<size_t>(k)])].push_back(k);
  std::vector<int64_t> nleave;
  for (const auto& l : leaving) nleave.push_back(static_cast<int64_t>(l.size()));
  const std::vector<size_t> counts = float_counts(nleave, per);
  const std::vector<size_t> seg = starts_of(counts);
  std::vector<float> all(seg.back());
  auto index_in = [](const std::vector<int64_t>& v, int64_t k) {
    return static_cast<size_t>(std::lower_bound(v.begin(), v.end(), k) - v.begin());
  };
  for (size_t i = 0; i < leaving[me].size(); ++i) {
    const size_t j = index_in(s.mine, leaving[me][i]);
    float* dst = all.data() + seg[me] + i * per;
    std::memcpy(dst, s.momentum.f32() + j * s.mn, s.mn * sizeof(float));
    std::memcpy(dst + s.mn, s.second.f32() + j * static_cast<size_t>(s.nv), static_cast<size_t>(s.nv) * sizeof(float));
  }
  if (seg.back() > 0) timed_wait(comm_->all_gather(all.data() + seg[me], all.data(), counts));
  const std::vector<int64_t> old_mine = s.mine;
  AlignedBuffer old_mom = std::move(s.momentum), old_sec = std::move(s.second);
  shape_muon(s, to);
  size_t received = 0;
  for (size_t j = 0; j < s.mine.size(); ++j) {
    const int64_t k = s.mine[j];
    const size_t q = static_cast<size_t>(from[static_cast<size_t>(k)]);
    const float *mom, *sec;
    if (q == me) {
      const size_t i = index_in(old_mine, k);
      mom = old_mom.f32() + i * s.mn;
      sec = old_sec.f32() + i * static_cast<size_t>(s.nv);
    } else {
      mom = all.data() + seg[q] + index_in(leaving[q], k) * per;
      sec = mom + s.mn;
      received += per;
    }
    std::memcpy(s.momentum.f32() + j * s.mn, mom, s.mn * sizeof(float));
    std::memcpy(s.second.f32() + j * static_cast<size_t>(s.nv), sec, static_cast<size_t>(s.nv) * sizeof(float));
  }
  moved_floats_ += counts[me] + received;
}

bool MuonAdamW::rebalance(const std::vector<double>& speeds, double min_gain, const MoveCosts* costs) {
  if (world_ == 1 || static_cast<int>(speeds.size()) != world_) return false;
  for (double v : speeds)
    if (!(v > 0) || !std::isfinite(v)) return false;  // a rank not measured yet
  OptLayout next = layout_for(speeds);
  if (next == layout_) return false;
  const std::vector<double> now_work = work_per_rank(layout_), next_work = work_per_rank(next);
  const double now_t = predicted_optimizer_time(now_work, std::vector<double>(now_work.size(), 0.0), speeds);
  const double next_t = predicted_optimizer_time(next_work, std::vector<double>(next_work.size(), 0.0), speeds);
  if (next_t > (1.0 - min_gain) * now_t) return false;
  if (costs != nullptr && costs->seconds_per_float > 0 && !move_pays(now_work, now_t, next_t, next, speeds, *costs))
    return false;
  set_layout(next);
  return true;
}

// The predicted times are in work / speed units; the last step's measured seconds scale them
// (the mean over the ranks that did optimizer work of seconds x speed / work).
bool MuonAdamW::move_pays(const std::vector<double>& now_work, double now_t, double next_t, const OptLayout& next,
                          const std::vector<double>& speeds, const MoveCosts& costs) const {
  if (static_cast<int>(costs.opt_seconds.size()) != world_) return true;  // nothing measured: not costed
  double k = 0;
  int n = 0;
  for (int r = 0; r < world_; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (now_work[i] > 0 && costs.opt_seconds[i] > 0) {
      k += costs.opt_seconds[i] * speeds[i] / now_work[i];
      ++n;
    }
  }
  if (n == 0) return true;
  const double saved_per_step = (now_t - next_t) * k / n;
  const double move_seconds = static_cast<double>(floats_leaving(layout_, next)) * costs.seconds_per_float;
  return saved_per_step * costs.payback_steps >= move_seconds;
}

size_t MuonAdamW::floats_leaving(const OptLayout& from, const OptLayout& to) const {
  check_layout(from);
  check_layout(to);
  size_t floats = 0;
  for (size_t k = 0; k < adam_.size(); ++k) {
    if (!adam_[k].sharded) continue;
    const std::vector<int64_t> a = starts_of(from.adam_rows[k]), b = starts_of(to.adam_rows[k]);
    for (size_t q = 0; q + 1 < a.size(); ++q)
      floats += static_cast<size_t>(total_rows(minus({a[q], a[q + 1]}, {b[q], b[q + 1]}))) * 2 *
                static_cast<size_t>(adam_[k].row_elems);
  }
  for (size_t k = 0; k < muon_.size(); ++k)
    for (int64_t j = 0; j < muon_[k].K; ++j)
      if (from.muon_owner[k][static_cast<size_t>(j)] != to.muon_owner[k][static_cast<size_t>(j)])
        floats += muon_[k].mn + static_cast<size_t>(muon_[k].nv);
  return floats;
}

}  // namespace nanochat
