#include "nanochat/checkpoint/interop_optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <type_traits>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/error.h"
#include "nanochat/core/torch_file.h"

namespace nanochat {

namespace {

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// nanochat's order of the parameters of group g, as positions into g.params (gpt.py
// setup_optimizer): the model's order, except the smear group it lists as smear_gate.weight,
// smear_lambda, backout_lambda.
std::vector<size_t> nanochat_order(const OptGroup& g) {
  std::vector<size_t> order(g.params.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  auto rank = [&](size_t k) {
    static const char* kSmear[] = {"smear_gate.weight", "smear_lambda", "backout_lambda"};
    for (int i = 0; i < 3; ++i)
      if (g.names[k] == kSmear[i]) return i;
    return 3;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank(a) < rank(b); });
  return order;
}

constexpr int64_t kSmallAdamW = 1024;  // nanochat: smaller AdamW tensors are replicated, not sharded

std::vector<int64_t> second_shape(int64_t c, int64_t m, int64_t n) {
  return m >= n ? std::vector<int64_t>{c, m, 1} : std::vector<int64_t>{c, 1, n};
}

// Per AdamW parameter of group g, in our order: its offset in the whole state's values.
std::vector<size_t> adamw_offsets(const MuonAdamW& opt, const OptGroup& g, size_t first) {
  std::vector<size_t> off;
  for (int p : g.params) {
    off.push_back(first);
    first += 2 * static_cast<size_t>(numel_of(opt.params()[static_cast<size_t>(p)].shape));
  }
  return off;
}

// ---- writing ----

void write_group(PickleWriter& w, const OptGroup& g, int& next_index) {
  w.empty_dict();
  w.mark();
  const bool adam = g.kind == OptKind::AdamW;
  w.str("kind");
  w.str(adam ? "adamw" : "muon");
  w.str("lr");
  w.floating(g.lr);
  if (adam) {
    w.str("betas");
    w.mark();
    w.floating(g.beta1);
    w.floating(g.beta2);
    w.tuple_from_mark();
    w.str("eps");
    w.floating(g.eps);
  } else {
    w.str("momentum");
    w.floating(g.momentum);
    w.str("ns_steps");
    w.integer(g.ns_steps);
    w.str("beta2");
    w.floating(g.beta2);
  }
  w.str("weight_decay");
  w.floating(g.weight_decay);
  w.str("initial_lr");
  w.floating(g.initial_lr);
  w.str("params");
  w.empty_list();
  if (!g.params.empty()) {
    w.mark();
    for (size_t k = 0; k < g.params.size(); ++k) w.integer(next_index++);
    w.appends();
  }
  w.setitems();
}

// The "state" dict: per AdamW parameter and per Muon group, in group order.
void write_state(TorchObjectWriter& tw, const MuonAdamW& opt, const MuonAdamW::WholeState& whole) {
  PickleWriter& w = tw.pickle();
  const float* src = whole.values.data();
  size_t slot = 0;
  int index = 0;
  w.empty_dict();
  w.mark();
  for (const OptGroup& g : opt.groups()) {
    if (g.kind == OptKind::AdamW) {
      const std::vector<size_t> off = adamw_offsets(opt, g, static_cast<size_t>(src - whole.values.data()));
      for (size_t k : nanochat_order(g)) {  // state in the order nanochat's step creates it
        const OptParam& op = opt.params()[static_cast<size_t>(g.params[k])];
        w.integer(index++);
        w.empty_dict();
        w.mark();
        w.str("step");
        w.integer(whole.steps[slot + k]);
        const float* moments = whole.values.data() + off[k];
        for (const char* key : {"exp_avg", "exp_avg_sq"}) {
          w.str(key);
          tw.tensor({op.name + "." + key, "F32", op.shape, moments});
          moments += numel_of(op.shape);
        }
        w.setitems();
        src += 2 * numel_of(op.shape);
      }
      slot += g.params.size();
      continue;
    }
    const int64_t K = static_cast<int64_t>(g.params.size()), m = g.rows, n = g.cols;
    w.integer(index);
    index += static_cast<int>(K);
    w.empty_dict();
    w.mark();
    w.str("momentum_buffer");
    tw.tensor({g.names.front() + ".momentum_buffer", "F32", {K, m, n}, src});
    src += K * m * n;
    w.str("second_momentum_buffer");
    tw.tensor({g.names.front() + ".second_momentum_buffer", "F32", second_shape(K, m, n), src});
    src += K * std::max(m, n);
    w.setitems();
  }
  w.setitems();
}

}  // namespace

std::vector<std::string> nanochat_param_names(const OptGroup& g) {
  std::vector<std::string> out;
  for (size_t k : nanochat_order(g)) out.push_back(g.names[k]);
  return out;
}

void save_nanochat_optimizer(const std::string& path, const MuonAdamW& opt, const MuonAdamW::WholeState& whole,
                             const std::vector<OptGroup>& groups) {
  if (!groups.empty() && groups.size() != opt.groups().size())
    fail("cannot write ", path, ": ", groups.size(), " group settings for an optimizer of ", opt.groups().size(),
         " groups");
  size_t n_adam = 0;
  for (const OptGroup& g : opt.groups())
    if (g.kind == OptKind::AdamW) n_adam += g.params.size();
  if (whole.values.size() != opt.whole_state_floats() || whole.steps.size() != n_adam)
    fail("cannot write ", path, ": the optimizer state does not fit the model (", whole.values.size(), " values, ",
         whole.steps.size(), " step counts; expected ", opt.whole_state_floats(), " and ", n_adam, ")");
  TorchObjectWriter tw;
  PickleWriter& w = tw.pickle();
  w.empty_dict();
  w.mark();
  w.str("state");
  write_state(tw, opt, whole);
  w.str("param_groups");
  w.empty_list();
  w.mark();
  int index = 0;
  for (const OptGroup& g : groups.empty() ? opt.groups() : groups) write_group(w, g, index);
  w.appends();
  w.setitems();
  tw.save(path);
}

// ---- reading ----

namespace {

// One rank's file: its tree and the state entry of each parameter index.
struct RankFile {
  std::string path;
  TorchObject obj;
  std::map<int64_t, int> state;  // parameter index -> dict node
};

int need(const RankFile& f, int dict, const std::string& key, const std::string& ctx) {
  const int v = f.obj.tree.dict_get(dict, key);
  if (v < 0) fail(f.path, ": ", ctx, " has no key '", key, "'; this is not nanochat's MuonAdamW state_dict");
  return v;
}

// The groups must be ours: same count, kinds and parameter indices in order.
void check_groups(const RankFile& f, int groups, const MuonAdamW& opt) {
  const PickleTree& t = f.obj.tree;
  const PyNode& list = t.expect(groups, PyKind::List, "'param_groups'");
  if (list.items.size() != opt.groups().size())
    fail(f.path, ": 'param_groups' has ", list.items.size(), " groups but the model's MuonAdamW has ",
         opt.groups().size(), " (another model?)");
  int64_t index = 0;
  for (size_t gi = 0; gi < list.items.size(); ++gi) {
    const OptGroup& g = opt.groups()[gi];
    const std::string ctx = "param_groups[" + std::to_string(gi) + "]";
    t.expect(list.items[gi], PyKind::Dict, ctx);
    const std::string kind = t.expect(need(f, list.items[gi], "kind", ctx), PyKind::Str, ctx + "['kind']").s;
    const std::string want = g.kind == OptKind::AdamW ? "adamw" : "muon";
    if (kind != want) fail(f.path, ": ", ctx, "['kind'] is '", kind, "' but the model's group ", g.label, " is ", want);
    const PyNode& ps = t.expect(need(f, list.items[gi], "params", ctx), PyKind::List, ctx + "['params']");
    if (ps.items.size() != g.params.size())
      fail(f.path, ": ", ctx, "['params'] has ", ps.items.size(), " parameters but the model's group ", g.label,
           " has ", g.params.size());
    for (int p : ps.items)
      if (t.expect(p, PyKind::Int, ctx + "['params']").i != index++)
        fail(f.path, ": ", ctx, "['params'] is not numbered in order (torch.optim numbers them through the groups)");
  }
}

RankFile open_rank(const std::string& path, const MuonAdamW& opt) {
  RankFile f{path, load_torch_object(path), {}};
  const PickleTree& t = f.obj.tree;
  if (t.at(t.root).kind != PyKind::Dict)
    fail(path, " holds a ", py_kind_name(t.at(t.root).kind), ", not an optimizer state_dict");
  check_groups(f, need(f, t.root, "param_groups", "the state_dict"), opt);
  const PyNode& st = t.expect(need(f, t.root, "state", "the state_dict"), PyKind::Dict, "'state'");
  for (const auto& [k, v] : st.dict) {
    const int64_t idx = t.expect(k, PyKind::Int, "a 'state' key").i;
    t.expect(v, PyKind::Dict, "state[" + std::to_string(idx) + "]");
    if (!f.state.emplace(idx, v).second) fail(path, ": state[", idx, "] appears twice");
  }
  return f;
}

// state[idx][key] as floats, checked to have `shape`.
std::vector<float> state_tensor(const RankFile& f, int64_t idx, const std::string& key,
                                const std::vector<int64_t>& shape, const std::string& param) {
  const std::string ctx = "state[" + std::to_string(idx) + "]['" + key + "'] (" + param + ")";
  auto it = f.state.find(idx);
  if (it == f.state.end()) fail(f.path, ": state[", idx, "] (", param, ") is missing");
  const StTensor t = f.obj.tensor(need(f, it->second, key, "state[" + std::to_string(idx) + "]"), ctx);
  if (t.shape != shape)
    fail(f.path, ": ", ctx, " has shape ", shape_text(t.shape), " but nanochat's optimizer on ",
         "this rank count holds ", shape_text(shape));
  return tensor_to_f32(t, f.path + ": " + ctx);
}

// One AdamW parameter's exp_avg then exp_avg_sq into dst (2 * numel floats); returns its step.
int64_t read_adamw(const std::vector<RankFile>& files, int64_t idx, const OptParam& p, float* dst) {
  const int W0 = static_cast<int>(files.size());
  const int64_t numel = numel_of(p.shape), rows = p.shape[0];
  const bool sharded = W0 > 1 && numel >= kSmallAdamW;
  if (sharded && rows % W0 != 0)
    fail(files[0].path, ": ", p.name, " has ", rows, " rows, which nanochat cannot shard over ", W0, " ranks");
  std::vector<int64_t> shape = p.shape;
  if (sharded) shape[0] = rows / W0;
  const int64_t part = numel_of(shape);
  for (int k = 0; k < 2; ++k) {
    for (int r = 0; r < (sharded ? W0 : 1); ++r) {
      const std::vector<float> v =
          state_tensor(files[static_cast<size_t>(r)], idx, k ? "exp_avg_sq" : "exp_avg", shape, p.name);
      std::memcpy(dst + k * numel + r * part, v.data(), v.size() * sizeof(float));
    }
  }
  const RankFile& f = files[0];
  const int step = need(f, f.state.at(idx), "step", "state[" + std::to_string(idx) + "]");
  const PyNode& s = f.obj.tree.at(step);
  if (s.kind == PyKind::Int) return s.i;
  if (s.kind == PyKind::Float && s.f >= 0 && s.f == std::floor(s.f)) return static_cast<int64_t>(s.f);
  fail(f.path, ": state[", idx, "]['step'] (", p.name, ") is a ", py_kind_name(s.kind), ", not a step count");
}

// One Muon group's momentum_buffer (K, m, n) then second_momentum_buffer (K, max(m, n)) into dst.
void read_muon(const std::vector<RankFile>& files, int64_t idx, const OptGroup& g, float* dst) {
  const int64_t W0 = static_cast<int64_t>(files.size()), K = static_cast<int64_t>(g.params.size());
  const int64_t m = g.rows, n = g.cols, c = (K + W0 - 1) / W0;
  const int64_t per[2] = {m * n, std::max(m, n)};
  for (int k = 0; k < 2; ++k) {
    const std::vector<int64_t> shape = k == 0 ? std::vector<int64_t>{c, m, n} : second_shape(c, m, n);
    for (int64_t r = 0; r < W0; ++r) {
      const int64_t owned = std::min(c, std::max<int64_t>(0, K - r * c));
      const std::vector<float> v =
          state_tensor(files[static_cast<size_t>(r)], idx, k == 0 ? "momentum_buffer" : "second_momentum_buffer", shape,
                       g.names.front());
      if (owned > 0) std::memcpy(dst + r * c * per[k], v.data(), static_cast<size_t>(owned * per[k]) * sizeof(float));
    }
    dst += K * per[k];
  }
}

}  // namespace

MuonAdamW::WholeState load_nanochat_optimizer(const std::vector<std::string>& rank_files, const MuonAdamW& opt) {
  if (rank_files.empty()) fail("no nanochat optimizer files to read");
  std::vector<RankFile> files;
  for (const auto& p : rank_files) files.push_back(open_rank(p, opt));
  MuonAdamW::WholeState whole;
  whole.values.assign(opt.whole_state_floats(), 0.f);
  const bool fresh = std::all_of(files.begin(), files.end(), [](const RankFile& f) { return f.state.empty(); });
  float* dst = whole.values.data();
  int64_t index = 0;
  for (const OptGroup& g : opt.groups()) {
    if (g.kind == OptKind::Muon) {
      if (!fresh) read_muon(files, index, g, dst);
      dst += static_cast<int64_t>(g.params.size()) * (g.rows * g.cols + std::max(g.rows, g.cols));
      index += static_cast<int64_t>(g.params.size());
      continue;
    }
    const std::vector<size_t> off = adamw_offsets(opt, g, static_cast<size_t>(dst - whole.values.data()));
    const size_t slot = whole.steps.size();
    whole.steps.resize(slot + g.params.size(), 0);
    for (size_t k : nanochat_order(g)) {
      const OptParam& op = opt.params()[static_cast<size_t>(g.params[k])];
      if (!fresh) whole.steps[slot + k] = read_adamw(files, index, op, whole.values.data() + off[k]);
      dst += 2 * numel_of(op.shape);
      ++index;
    }
  }
  return whole;
}

namespace {

// base_train's flags from a meta's user_config (ours or nanochat's vars(args)); absent flags keep
// their defaults. Only the flags the plan derives from are read.
BaseTrainArgs args_of_user_config(const nlohmann::json& uc) {
  BaseTrainArgs a;
  auto get = [&](const char* k, auto& v) {
    if (uc.contains(k) && !uc[k].is_null()) v = uc[k].get<std::remove_reference_t<decltype(v)>>();
  };
  get("depth", a.depth);
  get("aspect_ratio", a.aspect_ratio);
  get("head_dim", a.head_dim);
  get("max_seq_len", a.max_seq_len);
  get("window_pattern", a.window_pattern);
  get("num_iterations", a.num_iterations);
  get("target_flops", a.target_flops);
  get("target_param_data_ratio", a.target_param_data_ratio);
  get("device_batch_size", a.device_batch_size);
  get("total_batch_size", a.total_batch_size);
  get("embedding_lr", a.embedding_lr);
  get("unembedding_lr", a.unembedding_lr);
  get("weight_decay", a.weight_decay);
  get("matrix_lr", a.matrix_lr);
  get("scalar_lr", a.scalar_lr);
  get("warmup_steps", a.warmup_steps);
  get("warmdown_ratio", a.warmdown_ratio);
  get("final_lr_frac", a.final_lr_frac);
  return a;
}

bool has_user_config(const RunMeta& meta) { return meta.user_config.is_object() && !meta.user_config.empty(); }

}  // namespace

TrainPlan plan_of_meta(const RunMeta& meta, const std::string& meta_path) {
  try {
    BaseTrainArgs a = args_of_user_config(meta.user_config);
    // the run's own record of its batch and model wins over the flags (an automatic batch, -1)
    const ModelConfig& cfg = meta.model_config;
    a.total_batch_size = meta.total_batch_size.value_or(a.total_batch_size);
    a.device_batch_size = static_cast<int>(meta.device_batch_size.value_or(a.device_batch_size));
    a.max_seq_len = static_cast<int>(cfg.sequence_len);
    a.depth = static_cast<int>(cfg.n_layer);
    a.window_pattern = cfg.window_pattern;
    if (cfg.n_head > 0 && cfg.n_embd % cfg.n_head == 0) a.head_dim = static_cast<int>(cfg.n_embd / cfg.n_head);
    if (ModelConfig::from_depth(a.depth, a.aspect_ratio, a.head_dim, a.max_seq_len, static_cast<int>(cfg.vocab_size),
                                a.window_pattern)
                .n_embd != cfg.n_embd &&
        cfg.n_embd % cfg.n_layer == 0)
      a.aspect_ratio = static_cast<int>(cfg.n_embd / cfg.n_layer);
    TrainPlan p = derive_plan(a, cfg.vocab_size, std::max(1, meta.world_size));
    if (p.model.n_embd != cfg.n_embd || p.model.n_head != cfg.n_head)
      fail("its flags give a model of width ", p.model.n_embd, " and ", p.model.n_head, " heads, not the ", cfg.n_embd,
           " and ", cfg.n_head, " of its model_config");
    return p;
  } catch (const std::exception& e) {  // nanochat::Error or a field of the wrong type
    fail(meta_path, ": cannot derive the training schedule from its user_config: ", e.what());
  }
}

OptimConfig optim_config_of_meta(const RunMeta& meta, int64_t model_dim) {
  OptimConfig c;
  if (has_user_config(meta)) {
    c = plan_of_meta(meta, "the checkpoint's meta").optim;
  } else {
    const int64_t total = meta.total_batch_size.value_or(0);
    const double scale = total > 0 ? std::sqrt(static_cast<double>(total) / 524288.0) : 1.0;
    for (float* lr : {&c.unembedding_lr, &c.embedding_lr, &c.matrix_lr, &c.scalar_lr})
      *lr = static_cast<float>(*lr * scale);
  }
  c.model_dim = model_dim;
  return c;
}

std::vector<OptGroup> scheduled_groups(const MuonAdamW& opt, const RunMeta& meta, int64_t S,
                                       const std::string& meta_path) {
  std::vector<OptGroup> groups = opt.groups();
  if (S <= 0) return groups;  // never stepped: the values MuonAdamW was built with
  if (!has_user_config(meta))
    fail(meta_path, " has no user_config, so the schedule of its step ", S,
         " is unknown; export without --with-optimizer");
  const TrainPlan plan = plan_of_meta(meta, meta_path);
  const LrSchedule& sch = plan.schedule;
  const int64_t it = S - 1;  // the last optimizer step made before this checkpoint
  const double lrm = sch.lr_multiplier(it);
  for (OptGroup& g : groups) {
    g.lr = g.initial_lr * lrm;
    if (g.kind == OptKind::Muon) {
      g.momentum = sch.muon_momentum(it);
      g.weight_decay = sch.muon_weight_decay(it, plan.weight_decay_scaled);
    }
  }
  return groups;
}

MuonAdamW::WholeState read_checkpoint_optimizer(const LoadedModel& lm, const MuonAdamW& opt) {
  const CheckpointPaths cp{lm.dir, lm.step};
  const int W0 = lm.run.world_size;
  const nlohmann::json marker = read_checkpoint_marker(cp);
  std::vector<StFile> shards;
  for (int r = 0; r < W0; ++r) {
    if (!std::filesystem::exists(cp.optim(r)))
      fail("the optimizer state of ", cp.meta(), " (", W0, " ranks) needs ", cp.optim(r),
           ", which is missing; copy every rank's optim_*_rank<r> file into ", cp.dir,
           " or export without --with-optimizer");
    const std::string bad = check_checkpoint_file(marker, cp.optim(r));
    if (!bad.empty()) fail(bad);
    shards.push_back(load_safetensors(cp.optim(r)));
  }
  return opt.assemble_whole_state(shards);
}

}  // namespace nanochat
