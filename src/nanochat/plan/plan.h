#pragma once
// base_train's flags and the quantities derived from them (docs/nanochat.md 3.1-3.3, 1.9).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/model/config.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/plan/balance_mode.h"
#include "nanochat/plan/schedules.h"

namespace nanochat {

/// nanochat scripts/base_train.py flags with their defaults (docs/nanochat.md 3.1), plus CPU extras.
struct BaseTrainArgs {
  std::string run = "dummy";
  std::string device_type;  ///< accepted for compatibility; only "" or "cpu" run here
  bool fp8 = false;         ///< CUDA-only in nanochat: warning + ignored
  std::string fp8_recipe = "tensorwise";
  int depth = 20;
  int aspect_ratio = 64;
  int head_dim = 128;
  int max_seq_len = 2048;
  std::string window_pattern = "SSSL";
  int64_t num_iterations = -1;
  double target_flops = -1.0;
  double target_param_data_ratio = 12.0;
  int device_batch_size = 32;
  int64_t total_batch_size = -1;
  double embedding_lr = 0.3;
  double unembedding_lr = 0.008;
  double weight_decay = 0.28;
  double matrix_lr = 0.02;
  double scalar_lr = 0.5;
  int64_t warmup_steps = 40;
  double warmdown_ratio = 0.65;
  double final_lr_frac = 0.05;
  int64_t resume_from_step = -1;
  int64_t eval_every = 250;
  int64_t eval_tokens = 80LL * 524288;
  int64_t core_metric_every = 2000;  ///< CORE needs the DCLM bundle; accepted, reported unsupported if > 0
  int64_t core_metric_max_per_task = 500;
  int64_t sample_every = 2000;
  int64_t save_every = -1;
  std::string model_tag;  ///< default "d<depth>"
  // CPU extras (not in nanochat)
  int threads = 0;               ///< OpenMP threads per rank; 0 = this rank's share of the cores
  uint64_t seed = 42;            ///< init / sampling seed (nanochat seeds torch with 42)
  bool recompute_mlp = false;    ///< recompute the MLP's c_fc output in the backward (less memory)
  bool profile = false;          ///< print the per-op-family time share of the steps at the end
  bool skip_data_check = false;  ///< do not check the shards' pages at start-up (data/verify.h)
  /// compare the ranks' parameters (CRC32 per tensor) every N steps and at every save; 0 = never
  int64_t check_replicas_every = 100;
  /// how each step's rows are dealt to the ranks (train/balance.h): "speed" or "even"
  std::string balance = "speed";
  /// every node reads its own copy of the shards (and tokenizer) instead of getting its rows from
  /// node 0 (feed/step_source.h); the copies must have the same content
  bool local_data = false;
  /// number format of the matrix products (model/gpt.h ComputeDtype): float32 or bfloat16
  std::string dtype = "float32";
  /// node 0 keeps a copy of the whole job state (weights, every rank's optimizer shard) every N
  /// steps, written as a checkpoint when a node leaves the job; 0 = no copy
  int64_t copy_state_every = 0;
  /// how the ranks keep one model: "zero2" (every step) or "diloco" (every sync_every steps, an
  /// outer Nesterov step with outer_lr and outer_momentum on the change sent in sync_dtype)
  std::string sync = "zero2";
  int64_t sync_every = 50;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  std::string sync_dtype = "float32";
  /// diloco: steps trained on while the exchange travels (0: wait for it at each boundary)
  int64_t outer_overlap = 0;
};

/// Parameter counts of nanochat's GPT.num_scaling_params plus matmul params (docs/nanochat.md 1.9).
/// GPT::scaling_params' counts (wte, value_embeds, lm_head, transformer_matrices, scalars, total)
/// plus the derived ones below.
struct ModelCounts : ScalingParams {
  int64_t matmul = 0;           ///< all Linear weights: block matrices (incl. ve_gate) + lm_head + smear_gate
  int64_t flops_per_token = 0;  ///< estimate_flops: 6*matmul + sum_i 12*H*D*min(w_i, T)
  /// transformer_matrices + lm_head: the count base_train scales data and batch with.
  int64_t scaling_params() const { return transformer_matrices + lm_head; }
};

/// Counts from the config alone (GPT's static counters; no model is allocated).
ModelCounts count_params(const ModelConfig& cfg);

/// The optimizer's view of `model`: every parameter with its name, shape, weights and gradients
/// (views into model's buffers, in the parameter table's order), what MuonAdamW is built over.
std::vector<OptParam> optimizer_params(GPT& model);

/// How the ranks keep one model (--sync; train/sync_factory.h): ZeRO-2 every step (the weights
/// are one after every step), or DiLoCo (each node trains alone for H steps, then the nodes
/// average their change and take an outer step; the weights are one at those boundaries).
enum class SyncMode { Zero2, Diloco };

/// The numbers DiLoCo's nodes send their change in (--sync-dtype): float32, bfloat16 (round to
/// nearest even), or int8 with one float32 scale per block of 256 (train/outer_wire.h).
enum class WireDtype { Float32, BFloat16, Int8 };

/// DiLoCo's outer loop (Douillard et al. 2023; train/diloco_sync.h).
struct OuterConfig {
  int64_t every = 50;     ///< --sync-every H: inner steps between two outer steps
  double lr = 0.7;        ///< --outer-lr
  double momentum = 0.9;  ///< --outer-momentum (Nesterov)
  WireDtype wire = WireDtype::Float32;
  /// --outer-overlap K: the steps the nodes train on while the exchange travels, after which it
  /// is applied (train/diloco_sync.h); 0 = they wait for it at the boundary
  int64_t overlap_steps = 0;
};

/// Where the ranks' rows come from (feed/step_source.h): the only rank reads the shards; node 0
/// reads them and serves every rank its rows; every node reads its own copy (--local-data).
enum class DataSource { OneRank, Served, LocalCopies };

/// The data source of a job of `world_size` ranks with (or without) --local-data.
DataSource data_source_of(int world_size, bool local_data);

/// What ends a run: its step count (base-train: num_iterations), or its data stream (chat-sft: the
/// rows of the last step say so, StepRows::end; num_iterations is then the largest int64, and the
/// loop reads each step's rows before the step's evaluation and save).
enum class RunEnd { Steps, Stream };

/// When the loop evaluates, samples, saves and compares the replicas (the flags; <= 0 = never,
/// except where said). `last`: the step is num_iterations (always evaluated, sampled and saved).
struct Cadence {
  int64_t eval_every = 250;            ///< --eval-every
  int64_t sample_every = 2000;         ///< --sample-every
  int64_t save_every = -1;             ///< --save-every
  int64_t check_replicas_every = 100;  ///< --check-replicas-every
  int64_t resume_step = -1;            ///< --resume-from-step: that step is on disk already (not saved again)
  int64_t copy_state_every = 0;        ///< --copy-state-every (0 = never)

  bool eval_at(int64_t step, bool last) const { return eval_every > 0 && (last || step % eval_every == 0); }
  bool sample_at(int64_t step, bool last) const {
    return sample_every > 0 && (last || (step > 0 && step % sample_every == 0));
  }
  /// Node 0 copies the job's state (StepSync::keep_copy) at the start of this step.
  bool copy_at(int64_t step) const { return copy_state_every > 0 && step > 0 && step % copy_state_every == 0; }
  bool save_at(int64_t step, bool last) const {
    return last || (step > 0 && step != resume_step && save_every > 0 && step % save_every == 0);
  }
  /// Every check_replicas_every steps and at every save (a checkpoint never stores one rank's fault).
  bool check_replicas_at(int64_t step, bool saving) const {
    return check_replicas_every > 0 && (saving || (step > 0 && step % check_replicas_every == 0));
  }
};

/// Everything base_train derives before the first step (docs/nanochat.md 3.2-3.3).
struct TrainPlan {
  ModelConfig model;
  ModelCounts counts;
  int64_t target_tokens = 0;     ///< int(ratio * scaling params)
  double d_ref = 0;              ///< ratio * scaling params of the d12 reference model
  int64_t total_batch_size = 0;  ///< tokens per optimizer step (all ranks)
  bool auto_batch = false;
  double batch_lr_scale = 1.0;  ///< sqrt(total_batch_size / 2^19)
  double weight_decay_scaled = 0;
  int64_t num_iterations = 0;
  int64_t grad_accum_steps = 1;  ///< micro-batches per rank with an even split (rounded up)
  int world_size = 1;
  int B = 1;                                 ///< --device-batch-size: rows per micro-batch per rank
  int T = 2048;                              ///< --max-seq-len: tokens per row
  int64_t eval_tokens = 0;                   ///< --eval-tokens
  BalanceMode balance = BalanceMode::Speed;  ///< --balance: how each step's rows are dealt (train/balance.h)
  SyncMode sync = SyncMode::Zero2;           ///< --sync
  OuterConfig outer;                         ///< --sync diloco's settings
  DataSource data = DataSource::OneRank;
  ComputeDtype dtype = ComputeDtype::Float32;  ///< --dtype
  Cadence cadence;
  /// The optimizer's settings: the flags' lrs x batch_lr_scale, the scaled Muon weight decay, the
  /// model width (docs/nanochat.md 2.1).
  OptimConfig optim;
  double dmodel_lr_scale = 1.0;  ///< (model_dim / 768)^-0.5: the AdamW lrs' width scaling (MuonAdamW applies it)
  LrSchedule schedule;           ///< num_iterations and the flags' warmup/warmdown/final fraction
  /// Each step's schedule, chosen with the plan: base-train's by step from `schedule`
  /// (base_train_schedule), chat-sft's by the data's progress (plan/sft_plan.h).
  StepScheduleFn step_schedule;
  RunEnd run_end = RunEnd::Steps;      ///< what ends the run
  std::string tag;                     ///< --model-tag, default "d<depth>"
  std::string checkpoint_dir;          ///< <base dir>/base_checkpoints/<tag>
  std::vector<std::string> log;        ///< the lines nanochat prints while deriving, in order
  std::string command = "base-train";  ///< the subcommand that trains (logs, the chart's title)
  /// The checkpoints' meta records T as model_config.sequence_len (nanochat's chat-sft meta), so a
  /// resume compares the model without it (checkpoint/run_meta.h check_resume).
  bool meta_sequence_len_is_T = false;

  /// Rows of T tokens in one optimizer step, all ranks together: total_batch_size / T.
  int64_t rows_per_step() const { return total_batch_size / T; }
  /// Val batches of `eval_B` x T per evaluation: eval_tokens / (eval_B * T), at least 1.
  int64_t eval_steps_for(int eval_B) const;
  /// The line the trainer prints about dmodel_lr_scale.
  std::string dmodel_lr_scale_line() const;
};

/// Derives the plan; checkpoints go under `base_dir`/base_checkpoints/<tag>. Throws
/// nanochat::Error, naming the flags, for: no positive horizon flag, a total batch not divisible
/// by B*T (with the nearest valid settings), bad model flags, a --balance other than speed or even,
/// a --dtype other than float32 or bfloat16.
TrainPlan derive_plan(const BaseTrainArgs& a, int64_t vocab_size, int world_size, const std::string& base_dir = ".");

/// base-train's checkpoint folder under `base_dir`: base_checkpoints/<--model-tag, else d<depth>>
/// (TrainPlan::checkpoint_dir).
std::string base_checkpoint_dir(const BaseTrainArgs& a, const std::string& base_dir);

}  // namespace nanochat
