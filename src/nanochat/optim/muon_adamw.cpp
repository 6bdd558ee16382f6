#include "nanochat/optim/muon_adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include "nanochat/core/error.h"
#include "nanochat/core/profile.h"
#include "nanochat/core/timer.h"
#include "nanochat/optim/optim_math.h"

namespace nanochat {

namespace {

constexpr int64_t kSmallAdamW = 1024;  // numel below which AdamW gradients are all-reduced

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

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

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The ZeRO-2 shard layout (rows of an AdamW tensor, matrices of a Muon group): n items split in
// blocks of ceil(n / W), rank r owning [begin, end) (trailing ranks fewer, possibly none).
struct Block {
  int64_t begin, end;
};
Block block_of(int64_t n, int W, int r) {
  const int64_t c = ceil_div(n, W);
  return {std::min(n, r * c), std::min(n, (r + 1) * c)};
}

}  // namespace

// One AdamW parameter: its (possibly row-sharded) state and communication handles.
struct MuonAdamW::AdamSlot {
  int param = -1;
  bool sharded = false;                        // large parameter with W > 1: reduce-scatter + all-gather
  int64_t row_elems = 0, row0 = 0, nrows = 0;  // owned rows [row0, row0 + nrows)
  size_t owned = 0;                            // owned elements
  std::vector<int64_t> state_shape;
  std::vector<size_t> counts;  // elements per rank (sharded)
  AlignedBuffer m, v, gslice;
  int64_t step = 0;
  WorkPtr reduce;
};

// One Muon group: stacked buffers and this rank's chunk of state.
struct MuonAdamW::MuonSlot {
  int group = -1;
  int64_t K = 0, m = 0, n = 0, chunk = 0, first = 0, owned = 0, nv = 0;
  size_t mn = 0;
  AlignedBuffer momentum, second;  // (chunk, m, n), (chunk, nv)
  AlignedBuffer stack, gchunk;     // W > 1: (chunk * W, m, n) and (chunk, m, n)
  std::vector<size_t> counts;
  int64_t ready = 0;  // matrices marked by grad_ready() this step
  WorkPtr reduce;
};

MuonAdamW::MuonAdamW(std::vector<OptParam> params, const OptimConfig& cfg, Communicator* comm)
    : params_(std::move(params)), comm_(comm) {
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

void MuonAdamW::build_groups(const OptimConfig& cfg) {
  const double dmodel = std::pow(static_cast<double>(cfg.model_dim) / 768.0, -0.5);
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
        const int64_t numel = numel_of(p.shape);
        s.sharded = world_ > 1 && numel >= kSmallAdamW;
        s.state_shape = p.shape;
        if (s.sharded) {
          const int64_t rows = p.shape[0];
          s.row_elems = numel / rows;
          s.counts.resize(world_);
          for (int r = 0; r < world_; ++r) {
            const Block b = block_of(rows, world_, r);
            s.counts[r] = static_cast<size_t>((b.end - b.begin) * s.row_elems);
          }
          const Block mine = block_of(rows, world_, rank_);
          s.row0 = mine.begin;
          s.nrows = mine.end - mine.begin;
          s.owned = static_cast<size_t>(s.nrows * s.row_elems);
          s.state_shape[0] = s.nrows;
          s.gslice = AlignedBuffer(s.owned * sizeof(float));
        } else {
          s.owned = static_cast<size_t>(numel);
        }
        s.m = AlignedBuffer(s.owned * sizeof(float));
        s.v = AlignedBuffer(s.owned * sizeof(float));
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
      s.chunk = ceil_div(s.K, world_);
      const Block mine = block_of(s.K, world_, rank_);
      s.first = mine.begin;
      s.owned = mine.end - mine.begin;
      s.momentum = AlignedBuffer(static_cast<size_t>(s.chunk) * s.mn * sizeof(float));
      s.second = AlignedBuffer(static_cast<size_t>(s.chunk * s.nv) * sizeof(float));
      if (world_ > 1) {
        s.stack = AlignedBuffer(static_cast<size_t>(s.chunk * world_) * s.mn * sizeof(float));
        s.gchunk = AlignedBuffer(static_cast<size_t>(s.chunk) * s.mn * sizeof(float));
        s.counts.assign(world_, static_cast<size_t>(s.chunk) * s.mn);
      }
      max_mn = std::max<int64_t>(max_mn, static_cast<int64_t>(s.mn));
      max_side = std::max(max_side, std::min(s.m, s.n));
      max_dim = std::max(max_dim, std::max(s.m, s.n));
      muon_.push_back(std::move(s));
    }
  }
  param_adam_.assign(params_.size(), -1);
  param_muon_.assign(params_.size(), -1);
  for (size_t k = 0; k < adam_.size(); ++k) param_adam_[adam_[k].param] = static_cast<int>(k);
  for (size_t k = 0; k < muon_.size(); ++k)
    for (int pi : groups_[muon_[k].group].params) param_muon_[pi] = static_cast<int>(k);
  size_t n_gathers = muon_.size();
  for (const auto& s : adam_) n_gathers += s.sharded ? 1 : 0;
  gathers_.reserve(n_gathers);
  if (max_mn > 0) {
    scr_x_ = AlignedBuffer(static_cast<size_t>(max_mn) * sizeof(float));
    scr_x2_ = AlignedBuffer(static_cast<size_t>(max_mn) * sizeof(float));
    scr_a_ = AlignedBuffer(static_cast<size_t>(max_side * max_side) * sizeof(float));
    scr_b_ = AlignedBuffer(static_cast<size_t>(max_side * max_side) * sizeof(float));
    scr_rowv_ = AlignedBuffer(static_cast<size_t>(max_dim) * sizeof(double));
  }
}

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
  // Phase 1: launch every reduction, in group order.
  launch_reductions();
  // Phase 2: per group, wait for its reductions, compute, launch its gathers.
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const OptGroup& g = groups_[gi];
    if (g.kind == OptKind::AdamW) {
      for (size_t k = 0; k < g.params.size(); ++k) compute_adamw(adam_[group_slot_[gi] + k], g, grad_scale);
    } else {
      compute_muon(muon_[group_slot_[gi]], g, grad_scale);
    }
  }
  // Phase 3: wait for the gathers, copy the Muon stacks back.
  finish_gathers();
}

void MuonAdamW::grad_ready(size_t param) {
  if (param >= params_.size()) fail("optimizer: grad_ready(", param, ") but there are ", params_.size(), " parameters");
  if (world_ == 1) return;
  if (param_adam_[param] >= 0) {
    AdamSlot& s = adam_[param_adam_[param]];
    if (s.sharded && !s.reduce) launch_adam_reduce(s);
    return;
  }
  MuonSlot& s = muon_[param_muon_[param]];
  if (s.reduce) return;
  if (++s.ready == s.K) launch_muon_reduce(s, groups_[s.group]);
}

// Sharded: reduce-scatter by rows into gslice; small: all-reduce in place.
void MuonAdamW::launch_adam_reduce(AdamSlot& s) {
  float* g = params_[s.param].g;
  s.reduce = s.sharded ? comm_->reduce_scatter_sum(g, s.gslice.f32(), s.counts) : comm_->all_reduce_sum(g, s.owned);
}

void MuonAdamW::launch_muon_reduce(MuonSlot& s, const OptGroup& g) {
  float* stack = s.stack.f32();
  for (int64_t k = 0; k < s.K; ++k) std::memcpy(stack + k * s.mn, params_[g.params[k]].g, s.mn * sizeof(float));
  std::fill(stack + s.K * s.mn, stack + s.chunk * world_ * s.mn, 0.f);
  s.reduce = comm_->reduce_scatter_sum(stack, s.gchunk.f32(), s.counts);
}

void MuonAdamW::launch_reductions() {
  if (world_ == 1) return;
  // Everything grad_ready() has not launched yet, in group order.
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const OptGroup& g = groups_[gi];
    if (g.kind == OptKind::AdamW) {
      for (size_t k = 0; k < g.params.size(); ++k) {
        AdamSlot& s = adam_[group_slot_[gi] + k];
        if (!s.reduce) launch_adam_reduce(s);
      }
    } else {
      MuonSlot& s = muon_[group_slot_[gi]];
      if (!s.reduce) launch_muon_reduce(s, g);
    }
  }
}

void MuonAdamW::compute_adamw(AdamSlot& s, const OptGroup& g, float grad_scale) {
  if (s.reduce) {
    timed_wait(s.reduce);
    s.reduce.reset();
  }
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
  gathers_.push_back({comm_->all_gather(mine, p.p, s.counts), nullptr});
}

void MuonAdamW::compute_muon(MuonSlot& s, const OptGroup& g, float grad_scale) {
  if (s.reduce) {
    timed_wait(s.reduce);
    s.reduce.reset();
  }
  s.ready = 0;
  MuonHyper hp;
  hp.lr = g.lr;
  hp.momentum = g.momentum;
  hp.weight_decay = g.weight_decay;
  hp.beta2 = g.beta2;
  hp.ns_steps = g.ns_steps;
  MuonScratch scr;
  scr.x = scr_x_.f32();
  scr.x2 = scr_x2_.f32();
  scr.a = scr_a_.f32();
  scr.b = scr_b_.f32();
  scr.rowv = static_cast<double*>(scr_rowv_.data());
  for (int64_t j = 0; j < s.owned; ++j) {
    const int64_t k = s.first + j;
    OptParam& p = params_[g.params[k]];
    float* mom = s.momentum.f32() + j * s.mn;
    float* sec = s.second.f32() + j * s.nv;
    if (world_ == 1) {
      muon_update(p.p, p.g, mom, sec, s.m, s.n, grad_scale, hp, scr);
    } else {
      float* pw = s.stack.f32() + k * s.mn;
      std::memcpy(pw, p.p, s.mn * sizeof(float));
      muon_update(pw, s.gchunk.f32() + j * s.mn, mom, sec, s.m, s.n, grad_scale, hp, scr);
    }
  }
  if (world_ > 1) {
    float* stack = s.stack.f32();
    gathers_.push_back({comm_->all_gather(stack + s.first * s.mn, stack, s.counts), &s});
  }
}

void MuonAdamW::timed_wait(const WorkPtr& w) {
  const double t0 = now_seconds();
  w->wait();
  comm_wait_s_ += now_seconds() - t0;
}

void MuonAdamW::finish_gathers() {
  for (auto& [work, ms] : gathers_) {
    timed_wait(work);
    if (ms) {
      const OptGroup& g = groups_[ms->group];
      for (int64_t k = 0; k < ms->K; ++k)
        std::memcpy(params_[g.params[k]].p, ms->stack.f32() + k * ms->mn, ms->mn * sizeof(float));
    }
  }
  gathers_.clear();
}

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
    out.push_back({"muon." + name + ".momentum_buffer", "F32", {s.chunk, s.m, s.n}, s.momentum.data()});
    std::vector<int64_t> vshape =
        s.m >= s.n ? std::vector<int64_t>{s.chunk, s.m, 1} : std::vector<int64_t>{s.chunk, 1, s.n};
    out.push_back({"muon." + name + ".second_momentum_buffer", "F32", vshape, s.second.data()});
  }
  return out;
}

std::map<std::string, std::string> MuonAdamW::state_metadata() const {
  return {{"optimizer", "MuonAdamW"},
          {"world_size", std::to_string(world_)},
          {"rank", std::to_string(rank_)},
          {"steps", std::to_string(steps_)}};
}

void MuonAdamW::load_state(const StFile& f) {
  const auto entries = state_entries();
  // Validate everything first so that a failed load leaves the optimizer untouched.
  for (const auto& e : entries) {
    const StTensor& t = f.at(e.name);
    if (t.dtype != e.dtype || t.shape != e.shape)
      fail("optimizer state ", f.path, ": tensor '", e.name, "' is ", t.dtype, " ", shape_str(t.shape),
           " but this optimizer (rank ", rank_, " of ", world_, ") expects ", e.dtype, " ", shape_str(e.shape),
           "; optimizer state is specific to the model and the world size");
  }
  int64_t steps = 0;
  for (const auto& e : entries) {
    const StTensor& t = f.at(e.name);
    if (!t.bytes.empty()) std::memcpy(const_cast<void*>(e.data), t.bytes.data(), t.bytes.size());
  }
  for (const auto& s : adam_) steps = std::max(steps, s.step);
  steps_ = steps;
}

size_t MuonAdamW::state_floats() const {
  size_t n = 0;
  for (const auto& s : adam_) n += 2 * s.owned;
  for (const auto& s : muon_) n += static_cast<size_t>(s.chunk) * (s.mn + static_cast<size_t>(s.nv));
  return n;
}

// --- re-sharding: the whole (unsharded) state, for a resume at another world size

size_t MuonAdamW::whole_state_floats() const {
  size_t n = 0;
  for (const auto& s : adam_) n += 2 * static_cast<size_t>(numel_of(params_[s.param].shape));
  for (const auto& s : muon_) n += static_cast<size_t>(s.K) * (s.mn + static_cast<size_t>(s.nv));
  return n;
}

MuonAdamW::WholeState MuonAdamW::assemble_whole_state(const std::vector<StFile>& shards) const {
  const int W0 = static_cast<int>(shards.size());
  if (W0 < 1) fail("optimizer re-shard: no shard files given");
  WholeState out;
  out.values.resize(whole_state_floats());
  float* dst = out.values.data();
  // Checks a shard tensor's dtype and element count and returns its floats.
  auto floats_of = [&](int r, const std::string& key, size_t want) -> const float* {
    const StTensor& t = shards[r].at(key);
    if (t.dtype != "F32" || t.bytes.size() != want * sizeof(float))
      fail("optimizer state ", shards[r].path, ": tensor '", key, "' is ", t.dtype, " ", shape_str(t.shape), " (",
           t.bytes.size() / 4, " values) but rank ", r, " of ", W0, " of this model should hold ", want,
           " F32 values; the files are not one run's shards of this model");
    return reinterpret_cast<const float*>(t.bytes.data());
  };
  for (const auto& s : adam_) {
    const OptParam& p = params_[s.param];
    const int64_t numel = numel_of(p.shape), rows = p.shape[0], row_elems = numel / rows;
    const bool sharded0 = W0 > 1 && numel >= kSmallAdamW;  // the layout of the saving run
    for (const char* which : {".exp_avg", ".exp_avg_sq"}) {
      const std::string key = "adamw." + p.name + which;
      if (!sharded0) {
        std::memcpy(dst, floats_of(0, key, static_cast<size_t>(numel)), static_cast<size_t>(numel) * sizeof(float));
      } else {
        for (int r = 0; r < W0; ++r) {
          const Block b = block_of(rows, W0, r);
          const size_t n = static_cast<size_t>((b.end - b.begin) * row_elems);
          const float* src = floats_of(r, key, n);
          if (n > 0) std::memcpy(dst + b.begin * row_elems, src, n * sizeof(float));
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
  for (const auto& s : muon_) {
    const std::string& first = groups_[s.group].names.front();
    const int64_t c = ceil_div(s.K, W0);
    for (int part = 0; part < 2; ++part) {
      const size_t per = part == 0 ? s.mn : static_cast<size_t>(s.nv);
      const std::string key = "muon." + first + (part == 0 ? ".momentum_buffer" : ".second_momentum_buffer");
      for (int r = 0; r < W0; ++r) {
        const Block b = block_of(s.K, W0, r);
        const float* src = floats_of(r, key, static_cast<size_t>(c) * per);  // chunk incl. padding
        if (b.end > b.begin)
          std::memcpy(dst + static_cast<size_t>(b.begin) * per, src,
                      static_cast<size_t>(b.end - b.begin) * per * sizeof(float));
      }
      dst += static_cast<size_t>(s.K) * per;
    }
  }
  return out;
}

void MuonAdamW::load_whole_state(const WholeState& whole) {
  if (whole.values.size() != whole_state_floats() || whole.steps.size() != adam_.size())
    fail("optimizer re-shard: the whole state has ", whole.values.size(), " values and ", whole.steps.size(),
         " step counts but this optimizer needs ", whole_state_floats(), " and ", adam_.size(), " (another model?)");
  const float* src = whole.values.data();
  int64_t steps = 0;
  for (size_t k = 0; k < adam_.size(); ++k) {
    AdamSlot& s = adam_[k];
    const int64_t numel = numel_of(params_[s.param].shape);
    const size_t off = s.sharded ? static_cast<size_t>(s.row0 * s.row_elems) : 0;
    if (s.owned > 0) {  // a rank may own no rows (then its buffers are empty)
      std::memcpy(s.m.f32(), src + off, s.owned * sizeof(float));
      std::memcpy(s.v.f32(), src + numel + off, s.owned * sizeof(float));
    }
    src += 2 * numel;
    s.step = whole.steps[k];
    steps = std::max(steps, s.step);
  }
  for (auto& s : muon_) {
    for (int part = 0; part < 2; ++part) {
      const size_t per = part == 0 ? s.mn : static_cast<size_t>(s.nv);
      float* dst = part == 0 ? s.momentum.f32() : s.second.f32();
      std::fill(dst, dst + static_cast<size_t>(s.chunk) * per, 0.f);
      if (s.owned > 0)
        std::memcpy(dst, src + static_cast<size_t>(s.first) * per, static_cast<size_t>(s.owned) * per * sizeof(float));
      src += static_cast<size_t>(s.K) * per;
    }
  }
  steps_ = steps;
}

}  // namespace nanochat
