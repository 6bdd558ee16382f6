#include "nanochat/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/plan/schedules.h"

namespace nanochat {

std::vector<OptParam> optimizer_params(GPT& model) {
  std::vector<OptParam> ops;
  for (const auto& p : model.params())
    ops.push_back({p.name, p.shape, model.param_data() + p.offset, model.grad_data() + p.offset});
  return ops;
}

ModelCounts count_params(const ModelConfig& cfg) {
  ModelCounts c;
  static_cast<ScalingParams&>(c) = GPT::scaling_params(cfg);
  c.matmul = GPT::matmul_params(cfg);
  c.flops_per_token = GPT::flops_per_token(cfg);
  return c;
}

namespace {
std::string fmt(const char* f, double v) {
  char b[128];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
}  // namespace

std::string TrainPlan::dmodel_lr_scale_line() const {
  return str_cat("Scaling the LR for the AdamW parameters proportional to 1/sqrt(", model.n_embd,
                 "/768) = ", dmodel_lr_scale);
}

DataSource data_source_of(int world_size, bool local_data) {
  return world_size == 1 ? DataSource::OneRank : local_data ? DataSource::LocalCopies : DataSource::Served;
}

int64_t TrainPlan::eval_steps_for(int eval_B) const {
  return std::max<int64_t>(1, eval_tokens / (static_cast<int64_t>(eval_B) * T));
}

namespace {
// --sync and DiLoCo's flags (train/diloco_sync.h).
void derive_sync(const BaseTrainArgs& a, TrainPlan& p) {
  if (a.sync != "zero2" && a.sync != "diloco") fail("--sync must be zero2 or diloco (got ", a.sync, ")");
  p.sync = a.sync == "diloco" ? SyncMode::Diloco : SyncMode::Zero2;
  if (p.sync == SyncMode::Zero2) return;
  if (a.sync_every < 1) fail("--sync-every must be at least 1 (got ", a.sync_every, ")");
  if (!(a.outer_lr > 0) || !std::isfinite(a.outer_lr))
    fail("--outer-lr must be a positive number (got ", a.outer_lr, "); the DiLoCo paper uses 0.7");
  if (!(a.outer_momentum >= 0 && a.outer_momentum < 1))
    fail("--outer-momentum must be in [0, 1) (got ", a.outer_momentum, "); the DiLoCo paper uses 0.9");
  if (a.sync_dtype != "float32" && a.sync_dtype != "bfloat16" && a.sync_dtype != "int8")
    fail("--sync-dtype must be float32, bfloat16 or int8 (got ", a.sync_dtype, ")");
  if (a.outer_overlap < 0 || a.outer_overlap >= a.sync_every)
    fail("--outer-overlap must be at least 0 and less than --sync-every (", a.sync_every, "); got ", a.outer_overlap);
  p.outer.every = a.sync_every;
  p.outer.lr = a.outer_lr;
  p.outer.momentum = a.outer_momentum;
  p.outer.wire = a.sync_dtype == "int8"       ? WireDtype::Int8
                 : a.sync_dtype == "bfloat16" ? WireDtype::BFloat16
                                              : WireDtype::Float32;
  p.outer.overlap_steps = a.outer_overlap;
  p.log.push_back(str_cat("Sync: DiLoCo, every ", p.outer.every, " steps each node trains alone, then the nodes ",
                          "average their change (token-weighted, sent in ", a.sync_dtype,
                          ") and take an outer Nesterov step (lr ", p.outer.lr, ", momentum ", p.outer.momentum, ")",
                          p.outer.overlap_steps > 0
                              ? str_cat(", applied ", p.outer.overlap_steps,
                                        " steps later while the nodes train on; evaluation, samples and checkpoints "
                                        "happen at boundaries where the nodes wait for it")
                              : "; evaluation, samples and checkpoints happen at those boundaries"));
}

// The settings derived after the batch and horizon: optimizer, schedule, eval steps, folders.
void derive_run_settings(const BaseTrainArgs& a, const std::string& base_dir, TrainPlan& p) {
  p.B = a.device_batch_size;
  p.T = a.max_seq_len;
  p.eval_tokens = a.eval_tokens;
  p.balance = parse_balance_mode(a.balance);
  derive_sync(a, p);
  p.dtype = parse_compute_dtype(a.dtype, "--dtype");
  p.data = data_source_of(p.world_size, a.local_data);
  p.cadence = Cadence{a.eval_every,           a.sample_every,     a.save_every,
                      a.check_replicas_every, a.resume_from_step, a.copy_state_every};
  p.optim.unembedding_lr = static_cast<float>(a.unembedding_lr * p.batch_lr_scale);
  p.optim.embedding_lr = static_cast<float>(a.embedding_lr * p.batch_lr_scale);
  p.optim.matrix_lr = static_cast<float>(a.matrix_lr * p.batch_lr_scale);
  p.optim.scalar_lr = static_cast<float>(a.scalar_lr * p.batch_lr_scale);
  p.optim.weight_decay = static_cast<float>(p.weight_decay_scaled);
  p.optim.model_dim = p.model.n_embd;
  p.optim.bf16_polar_express = p.dtype == ComputeDtype::BFloat16;
  p.dmodel_lr_scale = dmodel_lr_scale(p.model.n_embd);
  p.schedule.num_iterations = p.num_iterations;
  p.schedule.warmup_steps = a.warmup_steps;
  p.schedule.warmdown_ratio = a.warmdown_ratio;
  p.schedule.final_lr_frac = a.final_lr_frac;
  p.step_schedule = base_train_schedule(p.schedule, p.weight_decay_scaled);
  p.tag = a.model_tag.empty() ? str_cat("d", a.depth) : a.model_tag;
  p.checkpoint_dir = base_checkpoint_dir(a, base_dir);
}

// The number of steps and the totals it gives (docs/nanochat.md 3.1).
void derive_horizon(const BaseTrainArgs& a, TrainPlan& p) {
  const double ratio = a.target_param_data_ratio;
  // --num-iterations > --target-flops > --target-param-data-ratio
  if (a.num_iterations > 0) {
    p.num_iterations = a.num_iterations;
    p.log.push_back("Using user-provided number of iterations: " + with_commas(p.num_iterations));
  } else if (a.target_flops > 0) {
    p.num_iterations = static_cast<int64_t>(round_half_even(
        a.target_flops / (static_cast<double>(p.counts.flops_per_token) * static_cast<double>(p.total_batch_size))));
    p.log.push_back("Calculated number of iterations from target FLOPs: " + with_commas(p.num_iterations));
  } else if (ratio > 0) {
    p.num_iterations = p.target_tokens / p.total_batch_size;
    p.log.push_back("Calculated number of iterations from target data:param ratio: " + with_commas(p.num_iterations));
  } else {
    fail("no training horizon: set --num-iterations, --target-flops or --target-param-data-ratio to a positive value");
  }
  if (p.num_iterations < 1)
    fail("the horizon gives ", p.num_iterations, " steps (total batch ", p.total_batch_size,
         " tokens); raise --num-iterations / --target-flops / --target-param-data-ratio or lower --total-batch-size");
  const int64_t total_tokens = p.total_batch_size * p.num_iterations;
  p.log.push_back("Total number of training tokens: " + with_commas(total_tokens));
  p.log.push_back(fmt("Tokens : Scaling params ratio: %.2f",
                      static_cast<double>(total_tokens) / static_cast<double>(p.counts.scaling_params())));
  p.log.push_back(fmt("Total training FLOPs estimate: %e",
                      static_cast<double>(p.counts.flops_per_token) * static_cast<double>(total_tokens)));
}

// Micro-batches per step; a total batch that does not divide into micro-batches names the nearest
// valid settings. The ranks need not get the same number of them (train/balance.h).
void derive_grad_accum(const BaseTrainArgs& a, TrainPlan& p) {
  const int64_t B = a.device_batch_size, T = a.max_seq_len, W = p.world_size;
  const int64_t per_micro = B * T;
  if (p.total_batch_size % per_micro != 0) {
    const int64_t lo = p.total_batch_size / per_micro * per_micro;
    const int64_t hi = lo + per_micro;
    std::string msg = str_cat("--total-batch-size ", p.total_batch_size,
                              " is not divisible by the tokens of one micro-batch: --device-batch-size ", B,
                              " x --max-seq-len ", T, " = ", per_micro, ". Use --total-batch-size ");
    if (lo > 0) msg += str_cat(lo, " or ");
    msg += str_cat(hi);
    for (int64_t b = B - 1; b >= 1; --b)
      if (p.total_batch_size % (b * T) == 0) {
        msg += str_cat(", or keep it and use --device-batch-size ", b);
        break;
      }
    fail(msg);
  }
  const int64_t micro_batches = p.total_batch_size / per_micro;
  p.grad_accum_steps = (micro_batches + W - 1) / W;
  p.log.push_back("Tokens / micro-batch / rank: " + std::to_string(B) + " x " + std::to_string(T) + " = " +
                  with_commas(per_micro));
  p.log.push_back("Tokens / micro-batch: " + with_commas(per_micro * W));
  if (micro_batches % W == 0)
    p.log.push_back("Total batch size " + with_commas(p.total_batch_size) +
                    " => gradient accumulation steps: " + std::to_string(p.grad_accum_steps));
  else
    p.log.push_back(str_cat("Total batch size ", with_commas(p.total_batch_size), " => ", micro_batches,
                            " micro-batches per step, dealt to the ", W, " ranks by their speed"));
}

}  // namespace

TrainPlan derive_plan(const BaseTrainArgs& a, int64_t vocab_size, int world_size, const std::string& base_dir) {
  if (a.device_batch_size < 1) fail("--device-batch-size must be >= 1 (got ", a.device_batch_size, ")");
  if (a.max_seq_len < 2) fail("--max-seq-len must be >= 2 (got ", a.max_seq_len, ")");
  if (world_size < 1) fail("internal: world size ", world_size);
  TrainPlan p;
  p.world_size = world_size;
  p.model = ModelConfig::from_depth(a.depth, a.aspect_ratio, a.head_dim, a.max_seq_len, static_cast<int>(vocab_size),
                                    a.window_pattern);
  p.model.validate();
  p.counts = count_params(p.model);
  p.log.push_back("Parameter counts:");
  const std::pair<const char*, int64_t> rows[] = {
      {"wte", p.counts.wte},         {"value_embeds", p.counts.value_embeds},
      {"lm_head", p.counts.lm_head}, {"transformer_matrices", p.counts.transformer_matrices},
      {"scalars", p.counts.scalars}, {"total", p.counts.total}};
  for (auto& [k, v] : rows) {
    char b[96];
    std::snprintf(b, sizeof b, "%-24s: %s", k, with_commas(v).c_str());
    p.log.push_back(b);
  }
  p.log.push_back(fmt("Estimated FLOPs per token: %e", static_cast<double>(p.counts.flops_per_token)));

  // Data/batch scaling against the d12 reference built with the same flags (docs/nanochat.md 3.2).
  const double ratio = a.target_param_data_ratio;
  p.target_tokens = static_cast<int64_t>(ratio * static_cast<double>(p.counts.scaling_params()));
  ModelConfig ref = ModelConfig::from_depth(12, a.aspect_ratio, a.head_dim, a.max_seq_len, static_cast<int>(vocab_size),
                                            a.window_pattern);
  p.d_ref = ratio * static_cast<double>(count_params(ref).scaling_params());
  const double B_REF = 524288.0;
  if (a.total_batch_size == -1) {
    const double predicted = B_REF * std::pow(static_cast<double>(p.target_tokens) / p.d_ref, 0.383);
    p.total_batch_size = static_cast<int64_t>(std::llround(std::pow(2.0, round_half_even(std::log2(predicted)))));
    p.auto_batch = true;
    p.log.push_back("Auto-computed optimal batch size: " + with_commas(p.total_batch_size) + " tokens");
  } else if (a.total_batch_size <= 0) {
    fail("--total-batch-size must be positive, or -1 for the automatic size (got ", a.total_batch_size, ")");
  } else {
    p.total_batch_size = a.total_batch_size;
  }
  p.batch_lr_scale = std::sqrt(static_cast<double>(p.total_batch_size) / B_REF);
  if (p.batch_lr_scale != 1.0)
    p.log.push_back(fmt("Scaling LRs by %.4f", p.batch_lr_scale) + " for batch size " +
                    with_commas(p.total_batch_size));
  p.weight_decay_scaled = a.weight_decay * std::sqrt(static_cast<double>(p.total_batch_size) / B_REF) *
                          (p.d_ref / static_cast<double>(p.target_tokens));
  if (p.weight_decay_scaled != a.weight_decay)
    p.log.push_back(fmt("Scaling weight decay from %.6f", a.weight_decay) + fmt(" to %.6f", p.weight_decay_scaled));

  derive_horizon(a, p);
  derive_grad_accum(a, p);
  derive_run_settings(a, base_dir, p);
  return p;
}

std::string base_checkpoint_dir(const BaseTrainArgs& a, const std::string& base_dir) {
  return base_dir + "/base_checkpoints/" + (a.model_tag.empty() ? str_cat("d", a.depth) : a.model_tag);
}

}  // namespace nanochat
