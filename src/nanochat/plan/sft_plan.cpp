#include "nanochat/plan/sft_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/optim/muon_adamw.h"

using json = nlohmann::json;

namespace nanochat {

namespace {

// A number as Python's str() writes it (nanochat's "Inherited x=0.3" lines): ints plainly, floats
// with the fewest digits that read back the same, and a ".0" when they look like ints.
std::string py_str(const json& v) {
  if (!v.is_number_float()) return v.dump();
  const double d = v.get<double>();
  char b[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, d);
    if (std::strtod(b, nullptr) == d) break;
  }
  std::string s = b;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// nanochat's inheritance of T, B, the total batch and the lrs: None -> the checkpoint's value (or
// the fallback), else the flag; each with its line in p.log.
void inherit_batch_and_lrs(const SftArgs& a, const SftBase& base, TrainPlan& p) {
  // pre: the checkpoint's value (null when it has none)
  auto resolve = [&](const char* name, json given, json fallback, const json& pre) {
    if (given.is_null()) {
      const json v = pre.is_null() ? fallback : pre;
      p.log.push_back(str_cat("Inherited ", name, "=", py_str(v), " from pretrained checkpoint"));
      return v;
    }
    if (!pre.is_null() && given != pre) {
      std::string flag = name;
      for (char& c : flag)
        if (c == '_') c = '-';
      p.log.push_back(str_cat("NOTE: --", flag, "=", py_str(given), " overrides pretrained value of ", py_str(pre)));
    } else {
      p.log.push_back(str_cat("Using ", name, "=", py_str(given)));
    }
    return given;
  };
  const json flags = sft_args_to_json(a);
  const json& uc = base.user_config;
  try {
    auto recorded = [](const std::optional<int64_t>& v) { return v ? json(*v) : json(); };
    auto of_user_config = [&uc](const char* name) {
      return uc.is_object() && uc.contains(name) && !uc.at(name).is_null() ? uc.at(name) : json();
    };
    p.T = resolve("max_seq_len", flags["max_seq_len"], 2048, recorded(base.max_seq_len)).get<int>();
    p.B = resolve("device_batch_size", flags["device_batch_size"], 32, recorded(base.device_batch_size)).get<int>();
    p.total_batch_size =
        resolve("total_batch_size", flags["total_batch_size"], 524288, recorded(base.total_batch_size)).get<int64_t>();
    p.optim.embedding_lr =
        resolve("embedding_lr", flags["embedding_lr"], 0.3, of_user_config("embedding_lr")).get<float>();
    p.optim.unembedding_lr =
        resolve("unembedding_lr", flags["unembedding_lr"], 0.004, of_user_config("unembedding_lr")).get<float>();
    p.optim.matrix_lr = resolve("matrix_lr", flags["matrix_lr"], 0.02, of_user_config("matrix_lr")).get<float>();
  } catch (const nlohmann::json::exception& e) {
    fail(base.meta_path, ": a batch or lr value of the wrong type: ", e.what());
  }
}

}  // namespace

json sft_args_to_json(const SftArgs& a) {
  auto opt_int = [](int64_t v) { return v < 0 ? json() : json(v); };
  auto opt_lr = [](double v) { return v < 0 ? json() : json(v); };
  json j{{"run", a.run},
         {"device_type", a.device_type},
         {"model_tag", a.model_tag.empty() ? json() : json(a.model_tag)},
         {"model_step", opt_int(a.model_step)},
         {"load_optimizer", a.load_optimizer},
         {"num_iterations", a.num_iterations},
         {"max_seq_len", opt_int(a.max_seq_len)},
         {"device_batch_size", opt_int(a.device_batch_size)},
         {"total_batch_size", opt_int(a.total_batch_size)},
         {"embedding_lr", opt_lr(a.embedding_lr)},
         {"unembedding_lr", opt_lr(a.unembedding_lr)},
         {"matrix_lr", opt_lr(a.matrix_lr)},
         {"init_lr_frac", a.init_lr_frac},
         {"warmup_ratio", a.warmup_ratio},
         {"warmdown_ratio", a.warmdown_ratio},
         {"final_lr_frac", a.final_lr_frac},
         {"eval_every", a.eval_every},
         {"eval_tokens", a.eval_tokens},
         {"chatcore_every", a.chatcore_every},
         {"chatcore_max_cat", a.chatcore_max_cat},
         {"chatcore_max_sample", a.chatcore_max_sample},
         {"mmlu_epochs", a.mmlu_epochs},
         {"gsm8k_epochs", a.gsm8k_epochs},
         {"train_jsonl", a.train_jsonl},
         {"val_jsonl", a.val_jsonl},
         {"threads", a.threads},
         {"save_every", a.save_every},
         {"resume_from_step", a.resume_from_step},
         {"check_replicas_every", a.check_replicas_every},
         {"balance", a.balance},
         {"local_data", a.local_data}};
  if (a.copy_state_every != 0) j["copy_state_every"] = a.copy_state_every;  // a meta without it stays as it was
  return j;
}

TrainPlan derive_sft_plan(const SftArgs& a, const SftBase& base, int world_size, const std::string& base_dir) {
  TrainPlan p;
  p.command = "chat-sft";
  p.world_size = world_size;
  p.model = base.model_config;
  p.counts = count_params(p.model);
  inherit_batch_and_lrs(a, base, p);
  if (p.T < 1 || p.B < 1 || p.total_batch_size < 1)
    fail("chat-sft: --max-seq-len, --device-batch-size and --total-batch-size must be positive (got ", p.T, ", ", p.B,
         ", ", p.total_batch_size, ")");
  if (p.total_batch_size % p.T != 0)
    fail("chat-sft: --total-batch-size ", p.total_batch_size, " is not a multiple of --max-seq-len ", p.T,
         " (a step is whole rows); pass e.g. --total-batch-size ", (p.total_batch_size / p.T + 1) * p.T);
  if (p.T > 10 * p.model.sequence_len)
    fail("chat-sft: --max-seq-len ", p.T, " is beyond the model's rotary table (10 x its sequence_len ",
         p.model.sequence_len, ")");
  p.optim.scalar_lr = 0.5f;
  p.optim.weight_decay = 0.0f;  // nanochat: setup_optimizer(weight_decay=0.0)
  p.optim.model_dim = p.model.n_embd;
  p.dmodel_lr_scale = dmodel_lr_scale(p.model.n_embd);
  const int64_t per_micro = static_cast<int64_t>(p.B) * p.T * world_size;
  p.grad_accum_steps = std::max<int64_t>(1, (p.total_batch_size + per_micro - 1) / per_micro);
  p.log.push_back(str_cat("Tokens / micro-batch / rank: ", p.B, " x ", p.T, " = ", with_commas(p.B * p.T)));
  p.log.push_back(str_cat("Total batch size ", with_commas(p.total_batch_size), " => ", p.rows_per_step(), " rows of ",
                          p.T + 1, " tokens per step"));
  if (a.warmup_ratio < 0 || a.warmdown_ratio < 0 || a.warmup_ratio + a.warmdown_ratio > 1 || a.init_lr_frac <= 0)
    fail("chat-sft: --warmup-ratio and --warmdown-ratio must be >= 0 with a sum <= 1, and --init-lr-frac > 0");
  p.step_schedule = sft_step_schedule(a, 0.0);
  p.run_end = RunEnd::Stream;
  p.num_iterations = std::numeric_limits<int64_t>::max();  // the data stream ends the run
  p.meta_sequence_len_is_T = true;
  p.eval_tokens = a.eval_tokens;
  p.balance = parse_balance_mode(a.balance);
  p.data = data_source_of(world_size, a.local_data);
  p.cadence = Cadence{a.eval_every, -1, a.save_every, a.check_replicas_every, a.resume_from_step, a.copy_state_every};
  p.tag = a.model_tag.empty() ? str_cat("d", p.model.n_layer) : a.model_tag;
  p.checkpoint_dir = base_dir + "/chatsft_checkpoints/" + p.tag;
  return p;
}

StepScheduleFn sft_step_schedule(const SftArgs& a, double muon_weight_decay) {
  return sft_schedule(SftSchedule{a.warmup_ratio, a.warmdown_ratio, a.final_lr_frac}, muon_weight_decay);
}

}  // namespace nanochat
