#include "nanochat/checkpoint/interop_nanochat.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/checkpoint/interop_optim.h"
#include "nanochat/checkpoint/loop_checkpoint.h"
#include "nanochat/checkpoint/loop_state.h"
#include "nanochat/checkpoint/model_io.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/torch_file.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/tokenizer/tiktoken_pickle.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace nanochat {

namespace {

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create ", dir, ": ", ec.message());
}

// Writes through `write(tmp)` then renames onto `path` (core/file_io.h), so a failure never leaves
// a partial file.
template <typename F>
void write_then_rename(const std::string& path, F write) {
  const std::string tmp = atomic_tmp_name(path);
  write(tmp);
  rename_into_place(tmp, path);
}

constexpr const char* kBaseFolderHint = "is this a nanochat base folder?";

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// The optimizer's view of the model's parameters.
// ---- export ----

// nanochat's meta: its fields only, with Python's bare Infinity for an infinite bpb.
std::string nanochat_meta_text(const json& ours) {
  static const char* kInf = "__nanochat_infinity__";
  auto bpb = [&](const json& v) -> json { return v.is_string() ? json(kInf) : v; };
  json m;
  m["step"] = ours.at("step");
  m["val_bpb"] = bpb(ours.value("val_bpb", json(nullptr)));
  m["model_config"] = ours.at("model_config");
  m["user_config"] = ours.value("user_config", json::object());
  for (const char* k : {"device_batch_size", "max_seq_len", "total_batch_size"}) m[k] = ours.value(k, json(nullptr));
  json dl = json::object();
  const json src = ours.value("dataloader_state_dict", json(nullptr));
  for (const char* k : {"pq_idx", "rg_idx", "epoch"})
    if (src.is_object() && src.contains(k)) dl[k] = src.at(k);
  m["dataloader_state_dict"] = dl.empty() ? json(nullptr) : dl;
  json ls = ours.value("loop_state", json::object());
  if (ls.contains("min_val_bpb")) ls["min_val_bpb"] = bpb(ls.at("min_val_bpb"));
  m["loop_state"] = ls;
  std::string text = m.dump(2);
  const std::string quoted = std::string("\"") + kInf + "\"";
  for (size_t at; (at = text.find(quoted)) != std::string::npos;) text.replace(at, quoted.size(), "Infinity");
  return text;
}

void export_tokenizer(const Tokenizer& tok, const std::string& dir) {
  make_dirs(dir);
  const std::string pkl = tiktoken_pickle(tok);
  write_then_rename(dir + "/tokenizer.pkl", [&](const std::string& tmp) {
    std::ofstream o(tmp, std::ios::binary);
    o.write(pkl.data(), static_cast<std::streamsize>(pkl.size()));
    o.close();
    if (!o) fail("cannot write ", tmp);
  });
  const std::vector<int32_t> tb = tok.token_bytes();
  const StWriteEntry e{"token_bytes", "I32", {static_cast<int64_t>(tb.size())}, tb.data()};
  write_then_rename(dir + "/token_bytes.pt", [&](const std::string& tmp) { save_torch_tensor(tmp, e); });
}

}  // namespace

std::string export_to_nanochat(const ExportOptions& opts) {
  if (opts.out.empty()) fail("export needs --out DIR, the nanochat base folder to write into");
  if (opts.with_optimizer && opts.source != CheckpointSource::Base)
    fail("export --with-optimizer writes base-train's optimizer state only; export the ",
         checkpoint_source_name(opts.source), " checkpoint without --with-optimizer");
  LoadedModel lm = load_trained_model(opts.tag, opts.step, opts.source);
  const Tokenizer tok = Tokenizer::load(tokenizer_dir());
  require_tokenizer_vocab(lm, tok.vocab_size());
  const std::string dir = opts.out + "/" + checkpoint_source_folder(opts.source) + "/" + lm.tag;
  make_dirs(dir);
  std::vector<StWriteEntry> entries;
  for (const auto& p : lm.model->params())
    entries.push_back({p.name, "F32", p.shape, lm.model->param_data() + p.offset});
  const std::string model_file = dir + "/model_" + step6(lm.step) + ".pt";
  write_then_rename(model_file, [&](const std::string& tmp) { save_torch_state_dict(tmp, entries); });
  write_file_atomic(dir + "/meta_" + step6(lm.step) + ".json", nanochat_meta_text(lm.meta));
  export_tokenizer(tok, opts.out + "/tokenizer");
  if (opts.with_optimizer) {
    GPT& model = *lm.model;
    MuonAdamW opt(optimizer_params(model), optim_config_of_meta(lm.run, model.config().n_embd));
    const MuonAdamW::WholeState whole = read_checkpoint_optimizer(lm, opt);
    // the lr, momentum and weight decay of the last step, as nanochat's base_train leaves them
    const std::vector<OptGroup> groups =
        scheduled_groups(opt, lm.run, lm.step, CheckpointPaths{lm.dir, lm.step}.meta());
    write_then_rename(dir + "/optim_" + step6(lm.step) + "_rank0.pt",
                      [&](const std::string& tmp) { save_nanochat_optimizer(tmp, opt, whole, groups); });
  }
  return model_file;
}

// ---- import ----

namespace {

// Python's json writes bare Infinity / -Infinity / NaN; nlohmann::json takes them as strings.
json parse_python_json(const std::string& text, const std::string& path) {
  std::string out;
  out.reserve(text.size());
  bool in_str = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_str) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size())
        out.push_back(text[++i]);
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    bool replaced = false;
    for (const char* tok : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::strlen(tok);
      if (text.compare(i, n, tok) == 0) {
        out += tok[0] == 'N' ? "null" : std::string("\"") + tok + "\"";
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out.push_back(c);
  }
  try {
    return json::parse(out);
  } catch (const json::exception& e) {
    fail("cannot parse ", path, ": ", e.what());
  }
}

// nanochat find_largest_model: the d<N> folder with the largest N, else the newest folder.
std::string pick_tag(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    fail(root, " does not exist; pass the nanochat base folder (it holds base_checkpoints/)");
  std::string best, newest;
  int64_t best_n = -1;
  fs::file_time_type newest_t{};
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    const int64_t n = parse_suffix_number(name, "d");
    if (n > best_n) best_n = n, best = name;
    const auto t = fs::last_write_time(e.path(), ec);
    if (newest.empty() || t > newest_t) newest = name, newest_t = t;
  }
  if (!best.empty()) return best;
  if (!newest.empty()) return newest;
  fail("no checkpoint folder under ", root);
}

// nanochat find_last_step: the largest S of a model_<S>.pt.
int64_t pick_step(const std::string& dir) {
  int64_t best = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0)
      best = std::max(best, parse_suffix_number(name.substr(0, name.size() - 3), "model_"));
  }
  if (best < 0) fail("no model_<step>.pt in ", dir, ec ? ": " + ec.message() : std::string());
  return best;
}

// nanochat's optim_<S>_rank<r>.pt of step S, by rank; empty when there are none. Throws
// nanochat::Error naming the folder when ranks are missing.
std::vector<std::string> nanochat_optim_files(const std::string& dir, int64_t step) {
  const std::string prefix = "optim_" + step6(step) + "_rank";
  std::set<int64_t> ranks;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > prefix.size() + 3 && name.compare(name.size() - 3, 3, ".pt") == 0 && name.rfind(prefix, 0) == 0) {
      const int64_t r = parse_suffix_number(name.substr(0, name.size() - 3), prefix);
      if (r >= 0) ranks.insert(r);
    }
  }
  std::vector<std::string> files;
  for (int64_t r = 0; r < static_cast<int64_t>(ranks.size()); ++r) {
    if (!ranks.count(r))
      fail(dir, " has ", ranks.size(), " optimizer files of step ", step, " but no ", prefix, r,
           ".pt; copy every rank's file (nanochat shards the optimizer state per rank)");
    files.push_back(dir + "/" + prefix + std::to_string(r) + ".pt");
  }
  return files;
}

// The weights of model_<S>.pt into `model`, every key checked against the model_config.
void load_weights(const std::string& path, GPT& model) {
  TorchStateDict sd = load_torch_state_dict(path);
  std::map<std::string, const StTensor*> by_name;
  for (const auto& [k, t] : sd) {
    const std::string name = k.rfind("_orig_mod.", 0) == 0 ? k.substr(10) : k;
    if (!by_name.emplace(name, &t).second) fail(path, ": key ", name, " appears twice");
  }
  std::set<std::string> used;
  for (const auto& p : model.params()) {
    auto it = by_name.find(p.name);
    if (it == by_name.end()) fail(path, ": key ", p.name, " is missing; the meta's model_config needs it");
    if (it->second->shape != p.shape)
      fail(path, ": key ", p.name, " has shape ", shape_text(it->second->shape), " but the meta's model_config gives ",
           shape_text(p.shape));
    const std::vector<float> v = tensor_to_f32(*it->second, path + ": key " + p.name);
    std::memcpy(model.param_data() + p.offset, v.data(), p.numel * sizeof(float));
    used.insert(p.name);
  }
  for (const auto& [name, t] : by_name)
    if (!used.count(name)) fail(path, ": key ", name, " is not a parameter of the model its meta describes");
}

Tokenizer import_tokenizer(const std::string& dir, int64_t vocab) {
  const std::string pkl = dir + "/tokenizer.pkl";
  Tokenizer tok = tokenizer_from_tiktoken_pickle(read_file(pkl, kBaseFolderHint), pkl);
  if (tok.vocab_size() != vocab)
    fail(pkl, " has ", tok.vocab_size(), " tokens but the checkpoint's model_config has vocab_size ", vocab);
  const std::string tbp = dir + "/token_bytes.pt";
  if (fs::exists(tbp)) {
    const StTensor t = load_torch_tensor(tbp);
    const std::vector<int32_t> want = tok.token_bytes();
    if (t.dtype != "I32" || t.shape != std::vector<int64_t>{static_cast<int64_t>(want.size())} ||
        std::memcmp(t.bytes.data(), want.data(), want.size() * 4) != 0)
      fail(tbp, " does not match the tokens of ", pkl, "; the tokenizer folder is inconsistent");
  }
  // Never replace a different tokenizer: models trained with it would read wrong ids.
  const std::string dest = tokenizer_dir();
  if (fs::exists(dest + "/tokenizer.json")) {
    if (Tokenizer::load(dest).hash() != tok.hash())
      fail(dest, " already holds a different tokenizer; move it away or set NANOCHAT_BASE_DIR to another folder");
  } else {
    tok.save(dest);
  }
  return tok;
}

// What the import takes from nanochat's meta: the model and the loop state, and our run meta
// (world size 1, no loader position). Throws nanochat::Error naming the file for a bad field.
struct ImportedMeta {
  ModelConfig cfg;
  LoopState st;
  RunMeta run_meta;
};

ImportedMeta read_meta(const std::string& meta_path, int64_t step) {
  const json meta = parse_python_json(read_file(meta_path, kBaseFolderHint), meta_path);
  try {
    const RunMeta theirs = RunMeta::from_json(meta, meta_path);
    ImportedMeta m;
    m.cfg = theirs.model_config;
    m.st.step = step;
    if (meta.contains("loop_state")) m.st = LoopState::from_json(meta);
    if (m.st.step != step) fail("its step is ", m.st.step, ", not ", step);
    m.st.loader_state = nullptr;  // nanochat's loader position does not map onto this product's loader
    // only what maps onto this product's runs; 0 marks a batch nanochat did not record
    RunMeta& r = m.run_meta;
    r.model_config = m.cfg;
    r.user_config = theirs.user_config;
    r.device_batch_size = theirs.device_batch_size.value_or(0);
    r.max_seq_len = theirs.max_seq_len.value_or(m.cfg.sequence_len);
    r.total_batch_size = theirs.total_batch_size.value_or(0);
    r.world_size = 1;
    r.imported_from = meta_path;
    return m;
  } catch (const std::exception& e) {  // nanochat::Error or a JSON field of the wrong type
    fail(meta_path, ": ", e.what());
  }
}

}  // namespace

ImportResult import_from_nanochat(const ImportOptions& opts) {
  if (opts.from.empty()) fail("import needs the nanochat base folder (it holds base_checkpoints/ and tokenizer/)");
  const std::string root = opts.from + "/base_checkpoints";
  ImportResult r;
  r.tag = opts.tag.empty() ? pick_tag(root) : opts.tag;
  const std::string src = root + "/" + r.tag;
  r.step = opts.step >= 0 ? opts.step : pick_step(src);
  ImportedMeta m = read_meta(src + "/meta_" + step6(r.step) + ".json", r.step);
  GPT model(m.cfg);
  load_weights(src + "/model_" + step6(r.step) + ".pt", model);
  const std::string dest = base_dir() + "/base_checkpoints/" + r.tag;
  const CheckpointPaths cp{dest, r.step};
  if (fs::exists(cp.marker())) fail(dest, " already holds step ", r.step, "; remove it or import with -g another tag");
  const Tokenizer tok = import_tokenizer(opts.from + "/tokenizer", m.cfg.vocab_size);
  m.run_meta.tokenizer_hash = std::to_string(tok.hash());
  MuonAdamW opt(optimizer_params(model), optim_config_of_meta(m.run_meta, m.cfg.n_embd));
  const std::vector<std::string> optim_files = nanochat_optim_files(src, r.step);
  if (!optim_files.empty()) opt.load_whole_state(load_nanochat_optimizer(optim_files, opt));
  r.optimizer_ranks = static_cast<int>(optim_files.size());
  LocalCommunicator comm;
  save_checkpoint(comm, dest, model, opt, m.run_meta, m.st);
  r.model_file = cp.model();
  return r;
}

}  // namespace nanochat
