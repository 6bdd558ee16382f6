// MuonAdamW's layout and state (optim/muon_adamw.h): who owns which rows and matrices, moving
// state when that changes, the checkpoint tensors of one rank and the whole (world-size-free)
// state a resume at another world size or under another layout deals out again.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include <nlohmann/json.hpp>

#include "nanochat/core/error.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/optim/muon_adamw_slots.h"
#include "nanochat/optim/shard_plan.h"

namespace nanochat {

using optim_detail::ceil_div;
using optim_detail::kSmallAdamW;
using optim_detail::numel_of;

std::string optim_detail::shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

namespace {

using optim_detail::shape_str;
using Range = std::pair<int64_t, int64_t>;  // [first, end)

// The equal split of n items over W ranks: blocks of ceil(n / W), trailing ranks fewer (or none).
std::vector<int64_t> equal_counts(int64_t n, int W) {
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
// tensors are split when world > 1 and they have kSmallAdamW elements or more.
template <typename AdamSlots, typename MuonSlots>
OptLayout equal_layout_of(const AdamSlots& adam, const MuonSlots& muon, int world) {
  OptLayout l;
  for (const auto& s : adam) {
    const bool split = world > 1 && s.rows * s.row_elems >= kSmallAdamW;
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
    if (s.reduce)
      fail("optimizer: the layout changed while a gradient reduction was pending (between grad_ready and step)");
  moved_floats_ = 0;
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

bool MuonAdamW::rebalance(const std::vector<double>& speeds, double min_gain) {
  if (world_ == 1 || static_cast<int>(speeds.size()) != world_) return false;
  for (double v : speeds)
    if (!(v > 0) || !std::isfinite(v)) return false;  // a rank not measured yet
  OptLayout next = layout_for(speeds);
  if (next == layout_) return false;
  const std::vector<double> now_work = work_per_rank(layout_), next_work = work_per_rank(next);
  const double now_t = predicted_optimizer_time(now_work, std::vector<double>(now_work.size(), 0.0), speeds);
  const double next_t = predicted_optimizer_time(next_work, std::vector<double>(next_work.size(), 0.0), speeds);
  if (next_t > (1.0 - min_gain) * now_t) return false;
  set_layout(next);
  return true;
}

// --- one rank's checkpoint tensors ---------------------------------------------------------------

namespace {

nlohmann::json layout_json(const OptLayout& l, const std::vector<std::string>& adam_names,
                           const std::vector<std::string>& muon_names) {
  nlohmann::json j = {{"adamw", nlohmann::json::object()}, {"muon", nlohmann::json::object()}};
  for (size_t k = 0; k < l.adam_rows.size(); ++k)
    if (!l.adam_rows[k].empty()) j["adamw"][adam_names[k]] = l.adam_rows[k];
  for (size_t k = 0; k < l.muon_owner.size(); ++k) j["muon"][muon_names[k]] = l.muon_owner[k];
  return j;
}

}  // namespace

std::vector<StWriteEntry> MuonAdamW::state_entries() const {
  std::vector<StWriteEntry> out;
  for (const auto& s : adam_) {
    const std::string& name = params_[s.param].name;
    out.push_back({"adamw." + name + ".exp_avg", "F32", s.state_shape, s.m.data()});
    out.push_back({"adamw." + name + ".exp_avg_sq", "F32", s.state_shape, s.v.data()});
    out.push_back({"adamw." + name + ".step", "I64", {1}, &s.step});
  }
  for (const auto& s : muon_) {
    const std::string& name = groups_[s.group].names.front();
    const auto c = static_cast<int64_t>(s.mine.size());
    out.push_back({"muon." + name + ".momentum_buffer", "F32", {c, s.m, s.n}, s.momentum.data()});
    std::vector<int64_t> vshape = s.m >= s.n ? std::vector<int64_t>{c, s.m, 1} : std::vector<int64_t>{c, 1, s.n};
    out.push_back({"muon." + name + ".second_momentum_buffer", "F32", vshape, s.second.data()});
  }
  return out;
}

std::map<std::string, std::string> MuonAdamW::state_metadata() const {
  std::vector<std::string> adam_names, muon_names;
  for (const auto& s : adam_) adam_names.push_back(params_[s.param].name);
  for (const auto& s : muon_) muon_names.push_back(groups_[s.group].names.front());
  return {{"optimizer", "MuonAdamW"},
          {"world_size", std::to_string(world_)},
          {"rank", std::to_string(rank_)},
          {"steps", std::to_string(steps_)},
          {"layout", layout_json(layout_, adam_names, muon_names).dump()}};
}

// The layout a run of `world` ranks saved its shards under: the `layout` metadata of its files, or
// (files without one) the equal layout, whose Muon tensors are padded to ceil(K/W) matrices.
struct MuonAdamW::SavedLayout {
  OptLayout layout;
  bool padded = false;
};

MuonAdamW::SavedLayout MuonAdamW::saved_layout(const StFile& f, int world) const {
  SavedLayout out;
  auto it = f.metadata.find("layout");
  if (it == f.metadata.end()) {
    out.padded = true;
    out.layout = equal_layout_of(adam_, muon_, world);
    return out;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(it->second);
    for (const auto& s : adam_) {
      const std::string& name = params_[s.param].name;
      std::vector<int64_t> rows;
      if (j.at("adamw").contains(name)) {
        rows = j.at("adamw").at(name).get<std::vector<int64_t>>();
        if (static_cast<int>(rows.size()) != world || std::accumulate(rows.begin(), rows.end(), int64_t{0}) != s.rows ||
            (!rows.empty() && *std::min_element(rows.begin(), rows.end()) < 0))
          fail("the rows of '", name, "' are not ", world, " counts adding up to ", s.rows);
      }
      out.layout.adam_rows.push_back(std::move(rows));
    }
    for (const auto& s : muon_) {
      const std::string& name = groups_[s.group].names.front();
      std::vector<int> owner = j.at("muon").at(name).get<std::vector<int>>();
      if (static_cast<int64_t>(owner.size()) != s.K)
        fail("'", name, "' has ", owner.size(), " owners for ", s.K, " matrices");
      for (int o : owner)
        if (o < 0 || o >= world) fail("'", name, "' has owner rank ", o, " in a ", world, "-rank run");
      out.layout.muon_owner.push_back(std::move(owner));
    }
  } catch (const std::exception& e) {
    fail("optimizer state ", f.path, ": its layout metadata does not fit this model: ", e.what());
  }
  return out;
}

void MuonAdamW::load_state(const StFile& f) {
  const SavedLayout saved = saved_layout(f, world_);
  if (saved.layout != layout_)
    fail("optimizer state ", f.path,
         " was saved under another division of the optimizer's work than this rank's (rank ", rank_, " of ", world_,
         "); resume from the complete checkpoint on node 0, which re-deals it");
  // Validate everything first so that a failed load leaves the optimizer untouched.
  auto check = [&](const std::string& key, const char* dtype, const std::vector<int64_t>& shape) -> const StTensor& {
    const StTensor& t = f.at(key);
    if (t.dtype != dtype || t.shape != shape)
      fail("optimizer state ", f.path, ": tensor '", key, "' is ", t.dtype, " ", shape_str(t.shape),
           " but this optimizer (rank ", rank_, " of ", world_, ") expects ", dtype, " ", shape_str(shape),
           "; optimizer state is specific to the model and the world size");
    return t;
  };
  struct Copy {
    const StTensor* t;
    void* dst;
    size_t bytes;
  };
  std::vector<Copy> copies;
  for (auto& s : adam_) {
    const std::string key = "adamw." + params_[s.param].name;
    copies.push_back({&check(key + ".exp_avg", "F32", s.state_shape), s.m.data(), s.owned * sizeof(float)});
    copies.push_back({&check(key + ".exp_avg_sq", "F32", s.state_shape), s.v.data(), s.owned * sizeof(float)});
    copies.push_back({&check(key + ".step", "I64", {1}), &s.step, sizeof(int64_t)});
  }
  for (auto& s : muon_) {
    const std::string key = "muon." + groups_[s.group].names.front();
    const int64_t c = saved.padded ? ceil_div(s.K, world_) : static_cast<int64_t>(s.mine.size());
    const size_t n = s.mine.size();
    copies.push_back(
        {&check(key + ".momentum_buffer", "F32", {c, s.m, s.n}), s.momentum.data(), n * s.mn * sizeof(float)});
    copies.push_back({&check(key + ".second_momentum_buffer", "F32",
                             s.m >= s.n ? std::vector<int64_t>{c, s.m, 1} : std::vector<int64_t>{c, 1, s.n}),
                      s.second.data(), n * static_cast<size_t>(s.nv) * sizeof(float)});
  }
  for (const Copy& c : copies)
    if (c.bytes > 0) std::memcpy(c.dst, c.t->bytes.data(), c.bytes);
  int64_t steps = 0;
  for (const auto& s : adam_) steps = std::max(steps, s.step);
  steps_ = steps;
}

size_t MuonAdamW::state_floats() const {
  size_t n = 0;
  for (const auto& s : adam_) n += 2 * s.owned;
  for (const auto& s : muon_) n += s.mine.size() * (s.mn + static_cast<size_t>(s.nv));
  return n;
}

// --- re-sharding: the whole (unsharded) state, for a resume at another world size or layout -----

size_t MuonAdamW::whole_state_floats() const {
  size_t n = 0;
  for (const auto& s : adam_) n += 2 * static_cast<size_t>(numel_of(params_[s.param].shape));
  for (const auto& s : muon_) n += static_cast<size_t>(s.K) * (s.mn + static_cast<size_t>(s.nv));
  return n;
}

MuonAdamW::WholeState MuonAdamW::assemble_whole_state(const std::vector<StFile>& shards) const {
  const int W0 = static_cast<int>(shards.size());
  if (W0 < 1) fail("optimizer re-shard: no shard files given");
  const SavedLayout saved = saved_layout(shards[0], W0);
  WholeState out;
  out.values.resize(whole_state_floats());
  float* dst = out.values.data();
  // Checks a shard tensor's dtype and element count and returns its floats.
  auto floats_of = [&](int r, const std::string& key, size_t want) -> const float* {
    const StTensor& t = shards[static_cast<size_t>(r)].at(key);
    if (t.dtype != "F32" || t.bytes.size() != want * sizeof(float))
      fail("optimizer state ", shards[static_cast<size_t>(r)].path, ": tensor '", key, "' is ", t.dtype, " ",
           shape_str(t.shape), " (", t.bytes.size() / 4, " values) but rank ", r, " of ", W0,
           " of this model should hold ", want, " F32 values; the files are not one run's shards of this model");
    return reinterpret_cast<const float*>(t.bytes.data());
  };
  for (size_t k = 0; k < adam_.size(); ++k) {
    const OptParam& p = params_[adam_[k].param];
    const int64_t numel = numel_of(p.shape), re = adam_[k].row_elems;
    const std::vector<int64_t>& rows = saved.layout.adam_rows[k];  // empty: whole on every rank
    const std::vector<int64_t> start = starts_of(rows);
    for (const char* which : {".exp_avg", ".exp_avg_sq"}) {
      const std::string key = "adamw." + p.name + which;
      if (rows.empty()) {
        std::memcpy(dst, floats_of(0, key, static_cast<size_t>(numel)), static_cast<size_t>(numel) * sizeof(float));
      } else {
        for (int r = 0; r < W0; ++r) {
          const size_t n = static_cast<size_t>(rows[static_cast<size_t>(r)] * re);
          const float* src = floats_of(r, key, n);
          if (n > 0) std::memcpy(dst + start[static_cast<size_t>(r)] * re, src, n * sizeof(float));
        }
      }
      dst += numel;
    }
    const StTensor& st = shards[0].at("adamw." + p.name + ".step");
    if (st.dtype != "I64" || st.bytes.size() != sizeof(int64_t))
      fail("optimizer state ", shards[0].path, ": 'adamw.", p.name, ".step' is not one I64");
    int64_t step = 0;
    std::memcpy(&step, st.bytes.data(), sizeof step);
    out.steps.push_back(step);
  }
  for (size_t g = 0; g < muon_.size(); ++g) {
    const MuonSlot& s = muon_[g];
    const std::vector<int>& owner = saved.layout.muon_owner[g];
    const std::string& first = groups_[s.group].names.front();
    for (int part = 0; part < 2; ++part) {
      const size_t per = part == 0 ? s.mn : static_cast<size_t>(s.nv);
      const std::string key = "muon." + first + (part == 0 ? ".momentum_buffer" : ".second_momentum_buffer");
      for (int r = 0; r < W0; ++r) {
        std::vector<int64_t> held;  // rank r's matrices, ascending: its tensor's order
        for (int64_t k = 0; k < s.K; ++k)
          if (owner[static_cast<size_t>(k)] == r) held.push_back(k);
        const size_t c = saved.padded ? static_cast<size_t>(ceil_div(s.K, W0)) : held.size();
        const float* src = floats_of(r, key, c * per);
        for (size_t j = 0; j < held.size(); ++j)
          std::memcpy(dst + static_cast<size_t>(held[j]) * per, src + j * per, per * sizeof(float));
      }
      dst += static_cast<size_t>(s.K) * per;
    }
  }
  return out;
}

// Rank `rank`'s part of the whole state as runs {offset in the whole state, floats}, in the
// order of whole_state_part (the current layout).
std::vector<std::pair<size_t, size_t>> MuonAdamW::part_runs(int rank) const {
  if (rank < 0 || rank >= world_) fail("optimizer re-shard: rank ", rank, " is not in [0, ", world_, ")");
  std::vector<std::pair<size_t, size_t>> runs;
  size_t at = 0;  // offset in the whole state
  for (size_t k = 0; k < adam_.size(); ++k) {
    const AdamSlot& s = adam_[k];
    const size_t numel = static_cast<size_t>(numel_of(params_[s.param].shape));
    const std::vector<int64_t>& rows = layout_.adam_rows[k];  // empty: every rank holds every row
    size_t off = 0, n = numel;
    if (!rows.empty()) {
      off = static_cast<size_t>(starts_of(rows)[static_cast<size_t>(rank)] * s.row_elems);
      n = static_cast<size_t>(rows[static_cast<size_t>(rank)] * s.row_elems);
    }
    runs.push_back({at + off, n});
    runs.push_back({at + numel + off, n});
    at += 2 * numel;
  }
  for (size_t g = 0; g < muon_.size(); ++g) {
    const MuonSlot& s = muon_[g];
    for (const size_t per : {s.mn, static_cast<size_t>(s.nv)}) {
      for (int64_t k = 0; k < s.K; ++k)
        if (layout_.muon_owner[g][static_cast<size_t>(k)] == rank) runs.push_back({at + static_cast<size_t>(k) * per, per});
      at += static_cast<size_t>(s.K) * per;
    }
  }
  return runs;
}

size_t MuonAdamW::whole_state_part_floats(int rank) const {
  size_t n = 0;
  for (const auto& r : part_runs(rank)) n += r.second;
  return n;
}

std::vector<float> MuonAdamW::whole_state_part(const WholeState& whole, int rank) const {
  if (whole.values.size() != whole_state_floats())
    fail("optimizer re-shard: the whole state has ", whole.values.size(), " values but this optimizer needs ",
         whole_state_floats(), " (another model?)");
  std::vector<float> part;
  part.reserve(whole_state_part_floats(rank));
  for (const auto& [off, n] : part_runs(rank))
    part.insert(part.end(), whole.values.begin() + static_cast<std::ptrdiff_t>(off),
                whole.values.begin() + static_cast<std::ptrdiff_t>(off + n));
  return part;
}

void MuonAdamW::load_whole_state(const WholeState& whole) {
  if (whole.values.size() != whole_state_floats() || whole.steps.size() != adam_.size())
    fail("optimizer re-shard: the whole state has ", whole.values.size(), " values and ", whole.steps.size(),
         " step counts but this optimizer needs ", whole_state_floats(), " and ", adam_.size(), " (another model?)");
  load_whole_state_part(whole_state_part(whole, rank_), whole.steps);
}

// The part's runs are this rank's state buffers in order: per AdamW slot m then v (its owned
// elements), per Muon group the momentum then the second-moment buffers of its matrices.
void MuonAdamW::load_whole_state_part(const std::vector<float>& part, const std::vector<int64_t>& steps) {
  if (part.size() != whole_state_part_floats(rank_) || steps.size() != adam_.size())
    fail("optimizer re-shard: rank ", rank_, "'s part has ", part.size(), " values and ", steps.size(),
         " step counts but this optimizer needs ", whole_state_part_floats(rank_), " and ", adam_.size(),
         " (another model or layout?)");
  const float* src = part.data();
  auto take = [&](float* dst, size_t n) {
    if (n > 0) std::memcpy(dst, src, n * sizeof(float));  // a rank may own no rows
    src += n;
  };
  int64_t max_step = 0;
  for (size_t k = 0; k < adam_.size(); ++k) {
    AdamSlot& s = adam_[k];
    take(s.m.f32(), s.owned);
    take(s.v.f32(), s.owned);
    s.step = steps[k];
    max_step = std::max(max_step, s.step);
  }
  for (auto& s : muon_) {
    take(s.momentum.f32(), s.mine.size() * s.mn);
    take(s.second.f32(), s.mine.size() * static_cast<size_t>(s.nv));
  }
  steps_ = max_step;
}

}  // namespace nanochat
