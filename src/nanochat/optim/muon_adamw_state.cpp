// MuonAdamW's state format (optim/muon_adamw.h, docs/architecture.md 3.8 and 8): the checkpoint
// tensors and metadata of one rank's shard (state_entries, state_metadata, load_state), the layout
// a saved shard records, and the whole (world-size-free) state that a resume at another world size
// or layout assembles from every shard and deals out again, one part per rank (whole_state_part).
// No communicator: the callers (checkpoint/loop_checkpoint.cpp) move the bytes. The tensor names,
// shapes and metadata keys are the file format: a change breaks every saved checkpoint.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include <nlohmann/json.hpp>

#include "nanochat/core/error.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/optim/muon_adamw_slots.h"

namespace nanochat {

using optim_detail::ceil_div;
using optim_detail::equal_layout_of;
using optim_detail::numel_of;
using optim_detail::shape_str;
using optim_detail::starts_of;

std::string optim_detail::shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
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
    out.layout = equal_layout_of(adam_, muon_, world, /*by_size=*/true);
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
        if (layout_.muon_owner[g][static_cast<size_t>(k)] == rank)
          runs.push_back({at + static_cast<size_t>(k) * per, per});
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
