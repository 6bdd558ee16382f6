// MuonAdamW's groups and update math (optim/muon_adamw.h): the parameter groups of nanochat's
// optimizer (docs/nanochat.md 2.1), the allocation of every slot and scratch buffer, and the update
// of the rows and matrices this rank owns (optim/optim_math.h kernels). No communicator here: the
// ZeRO-2 sharding (layout, step schedule, overlap, rebalance, state moves) is muon_adamw_shard.cpp,
// the state format muon_adamw_state.cpp.
#include "nanochat/optim/muon_adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include "nanochat/core/error.h"
#include "nanochat/optim/muon_adamw_slots.h"
#include "nanochat/optim/optim_math.h"

namespace nanochat {

using optim_detail::ceil_div;
using optim_detail::kSmallAdamW;
using optim_detail::numel_of;
using optim_detail::shape_str;

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// AdamW group index of a parameter name (docs/nanochat.md 2.1), -1 for Muon (transformer.h.*), -2 for none.
int adamw_group_of(const std::string& name) {
  if (name == "lm_head.weight") return 0;
  if (name == "transformer.wte.weight") return 1;
  if (starts_with(name, "value_embeds.")) return 2;
  if (name == "resid_lambdas") return 3;
  if (name == "x0_lambdas") return 4;
  if (name == "smear_gate.weight" || name == "smear_lambda" || name == "backout_lambda") return 5;
  if (starts_with(name, "transformer.h.")) return -1;
  return -2;
}

}  // namespace

MuonAdamW::MuonAdamW(std::vector<OptParam> params, const OptimConfig& cfg, Communicator* comm)
    : params_(std::move(params)), comm_(comm), bf16_polar_(cfg.bf16_polar_express) {
  if (comm_) {
    rank_ = comm_->rank();
    world_ = comm_->world_size();
    NC_CHECK(world_ >= 1 && rank_ >= 0 && rank_ < world_, "bad communicator rank/world size");
  }
  std::set<std::string> seen;
  for (const auto& p : params_) {
    if (!seen.insert(p.name).second) fail("optimizer: parameter '", p.name, "' is listed twice");
    if (!p.p || !p.g) fail("optimizer: parameter '", p.name, "' has a null data or gradient pointer");
    if (p.shape.empty() || numel_of(p.shape) <= 0)
      fail("optimizer: parameter '", p.name, "' has an empty shape ", shape_str(p.shape));
  }
  build_groups(cfg);
  allocate();
}

MuonAdamW::~MuonAdamW() = default;

double dmodel_lr_scale(int64_t model_dim) { return std::pow(static_cast<double>(model_dim) / 768.0, -0.5); }

void MuonAdamW::scale_initial_lrs(double factor) {
  if (!(factor > 0) || !std::isfinite(factor)) fail("optimizer: the lr factor must be positive (got ", factor, ")");
  for (OptGroup& g : groups_) {
    g.initial_lr *= factor;
    g.lr *= factor;
  }
}

void MuonAdamW::build_groups(const OptimConfig& cfg) {
  const double dmodel = dmodel_lr_scale(cfg.model_dim);
  struct AdamDef {
    const char* label;
    double lr, b1, b2, wd;
  };
  const AdamDef defs[6] = {
      {"lm_head", static_cast<double>(cfg.unembedding_lr) * dmodel, 0.8, 0.96, 0.01},
      {"wte", static_cast<double>(cfg.embedding_lr) * dmodel, 0.8, 0.995, 0.001},
      {"value_embeds", static_cast<double>(cfg.embedding_lr) * dmodel * 0.5, 0.8, 0.995, 0.01},
      {"resid", static_cast<double>(cfg.scalar_lr) * 0.01, 0.8, 0.95, 0.05},
      {"x0", static_cast<double>(cfg.scalar_lr), 0.96, 0.95, 0.0},
      {"smear", 0.2, 0.8, 0.95, 0.0},
  };
  for (const auto& d : defs) {
    OptGroup g;
    g.kind = OptKind::AdamW;
    g.label = d.label;
    g.initial_lr = g.lr = d.lr;
    g.beta1 = d.b1;
    g.beta2 = d.b2;
    g.eps = 1e-10;
    g.weight_decay = d.wd;
    groups_.push_back(std::move(g));
  }
  std::set<std::pair<int64_t, int64_t>> shapes;  // ordered like Python tuples
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    const int gi = adamw_group_of(p.name);
    if (gi == -2)
      fail("optimizer: parameter '", p.name,
           "' belongs to no MuonAdamW group (expected nanochat state_dict names, docs/nanochat.md 2.1)");
    if (gi >= 0) {
      groups_[gi].params.push_back(static_cast<int>(i));
      groups_[gi].names.push_back(p.name);
    } else {
      if (p.shape.size() != 2)
        fail("optimizer: Muon parameter '", p.name, "' must be a matrix, got shape ", shape_str(p.shape));
      shapes.insert({p.shape[0], p.shape[1]});
    }
  }
  for (const auto& [m, n] : shapes) {
    OptGroup g;
    g.kind = OptKind::Muon;
    g.label = str_cat("muon (", m, ", ", n, ")");
    g.initial_lr = g.lr = cfg.matrix_lr;
    g.beta2 = 0.9;
    g.momentum = 0.95;
    g.weight_decay = cfg.weight_decay;
    g.rows = m;
    g.cols = n;
    for (size_t i = 0; i < params_.size(); ++i)
      if (adamw_group_of(params_[i].name) == -1 && params_[i].shape[0] == m && params_[i].shape[1] == n) {
        g.params.push_back(static_cast<int>(i));
        g.names.push_back(params_[i].name);
      }
    groups_.push_back(std::move(g));
  }
}

// Sizes every slot and allocates its buffers for the equal layout (shape_adam / shape_muon).
void MuonAdamW::allocate() {
  group_slot_.assign(groups_.size(), 0);
  size_t n_adam = 0;
  for (const auto& g : groups_)
    if (g.kind == OptKind::AdamW) n_adam += g.params.size();
  adam_.reserve(n_adam);
  int64_t max_mn = 0, max_side = 0, max_dim = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const OptGroup& g = groups_[gi];
    if (g.kind == OptKind::AdamW) {
      group_slot_[gi] = static_cast<int>(adam_.size());
      for (int pi : g.params) {
        const OptParam& p = params_[pi];
        AdamSlot s;
        s.param = pi;
        s.group = static_cast<int>(gi);
        const int64_t numel = numel_of(p.shape);
        s.sparse = world_ > 1 && numel >= kSmallAdamW && (g.label == "wte" || g.label == "value_embeds");
        s.sharded = world_ > 1 && numel >= kSmallAdamW && !s.sparse;
        if (s.sparse) s.pack_counts.reserve(static_cast<size_t>(world_));
        s.rows = p.shape[0];
        s.row_elems = numel / s.rows;
        s.state_shape = p.shape;
        s.owned = static_cast<size_t>(numel);
        adam_.push_back(std::move(s));
      }
    } else {
      group_slot_[gi] = static_cast<int>(muon_.size());
      MuonSlot s;
      s.group = static_cast<int>(gi);
      s.K = static_cast<int64_t>(g.params.size());
      s.m = g.rows;
      s.n = g.cols;
      s.mn = static_cast<size_t>(s.m * s.n);
      s.nv = s.m >= s.n ? s.m : s.n;
      if (world_ > 1) s.stack = AlignedBuffer(static_cast<size_t>(s.K) * s.mn * sizeof(float));
      max_mn = std::max<int64_t>(max_mn, static_cast<int64_t>(s.mn));
      max_side = std::max(max_side, std::min(s.m, s.n));
      max_dim = std::max(max_dim, std::max(s.m, s.n));
      muon_.push_back(std::move(s));
    }
  }
  layout_ = equal_layout();
  for (size_t k = 0; k < adam_.size(); ++k) shape_adam(adam_[k], layout_.adam_rows[k]);
  for (size_t k = 0; k < muon_.size(); ++k) shape_muon(muon_[k], layout_.muon_owner[k]);
  param_adam_.assign(params_.size(), -1);
  param_muon_.assign(params_.size(), -1);
  for (size_t k = 0; k < adam_.size(); ++k) param_adam_[adam_[k].param] = static_cast<int>(k);
  for (size_t k = 0; k < muon_.size(); ++k)
    for (int pi : groups_[muon_[k].group].params) param_muon_[pi] = static_cast<int>(k);
  size_t n_matrices = 0;  // each may be reduced and gathered alone (grad_ready)
  for (const auto& s : muon_) n_matrices += static_cast<size_t>(s.K);
  size_t n_gathers = muon_.size() + n_matrices;
  for (const auto& s : adam_) n_gathers += s.sharded ? 1 : 0;
  gathers_.reserve(n_gathers);
  launched_.reserve(adam_.size() + muon_.size() + n_matrices);
  if (max_mn > 0) {
    scr_x_ = AlignedBuffer(static_cast<size_t>(max_mn) * sizeof(float));
    scr_x2_ = AlignedBuffer(static_cast<size_t>(max_mn) * sizeof(float));
    scr_a_ = AlignedBuffer(static_cast<size_t>(max_side * max_side) * sizeof(float));
    scr_b_ = AlignedBuffer(static_cast<size_t>(max_side * max_side) * sizeof(float));
    scr_rowv_ = AlignedBuffer(static_cast<size_t>(max_dim) * sizeof(double));
  }
}

// --- the update of what this rank owns (no communicator) ----------------------------------------

// AdamW (docs/nanochat.md 2.2): a replicated parameter whole, with its all-reduced gradient in
// place; a sharded one on its owned rows, with the reduce-scattered gradient slice.
void MuonAdamW::update_adam(AdamSlot& s, const OptGroup& g, float grad_scale) {
  OptParam& p = params_[s.param];
  ++s.step;
  AdamWHyper hp;
  hp.lr = g.lr;
  hp.weight_decay = g.weight_decay;
  hp.beta1 = g.beta1;
  hp.beta2 = g.beta2;
  hp.eps = g.eps;
  hp.step = s.step;
  if (!s.sharded) {
    adamw_update(p.p, p.g, s.m.f32(), s.v.f32(), s.owned, grad_scale, hp);
    return;
  }
  float* mine = p.p + s.row0 * s.row_elems;
  if (s.owned > 0) adamw_update(mine, s.gslice.f32(), s.m.f32(), s.v.f32(), s.owned, grad_scale, hp);
}

// Muon (docs/nanochat.md 2.3-2.4) on the matrices this rank owns: in place at W = 1; at W > 1 on
// the rank's own positions of the group's stack (the parameter copied in first), with the
// reduce-scattered gradient chunk, so that the stack can be all-gathered as it is.
void MuonAdamW::update_muon(MuonSlot& s, const OptGroup& g, float grad_scale) {
  for (size_t j = 0; j < s.mine.size(); ++j) update_muon_one(s, g, j, grad_scale);
}

// The j-th matrix this rank owns (s.mine[j]); at W > 1 from its reduced gradient in gchunk into
// its place in the stack, which the gathers then send.
void MuonAdamW::update_muon_one(MuonSlot& s, const OptGroup& g, size_t j, float grad_scale) {
  MuonHyper hp;
  hp.lr = g.lr;
  hp.momentum = g.momentum;
  hp.weight_decay = g.weight_decay;
  hp.beta2 = g.beta2;
  hp.ns_steps = g.ns_steps;
  hp.bf16 = bf16_polar_;
  MuonScratch scr;
  scr.x = scr_x_.f32();
  scr.x2 = scr_x2_.f32();
  scr.a = scr_a_.f32();
  scr.b = scr_b_.f32();
  scr.rowv = static_cast<double*>(scr_rowv_.data());
  OptParam& p = params_[g.params[s.mine[j]]];
  float* mom = s.momentum.f32() + j * s.mn;
  float* sec = s.second.f32() + j * static_cast<size_t>(s.nv);
  if (world_ == 1) {
    muon_update(p.p, p.g, mom, sec, s.m, s.n, grad_scale, hp, scr);
  } else {
    float* pw = s.stack.f32() + (s.first + static_cast<int64_t>(j)) * s.mn;
    std::memcpy(pw, p.p, s.mn * sizeof(float));
    muon_update(pw, s.gchunk.f32() + j * s.mn, mom, sec, s.m, s.n, grad_scale, hp, scr);
  }
}

}  // namespace nanochat
