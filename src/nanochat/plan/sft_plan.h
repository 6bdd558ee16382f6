#pragma once
// chat-sft's flags (nanochat scripts/chat_sft.py, commit 92d63d4) and the TrainPlan derived from
// them and the base checkpoint they start from (docs/architecture.md 4.5): the model of the base
// run, T, B, the total batch and the lrs from the flags or else inherited (nanochat's "Inherited
// ..." lines), the progress-based schedule, the cadence and chatsft_checkpoints/<tag>.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "nanochat/model/config.h"
#include "nanochat/plan/plan.h"
#include "nanochat/plan/schedules.h"

namespace nanochat {

/// nanochat scripts/chat_sft.py's flags with its defaults (a value < 0 where nanochat has None:
/// inherit it from the base checkpoint), plus this engine's.
struct SftArgs {
  std::string run = "dummy";
  std::string device_type;
  std::string model_tag;        ///< base checkpoint tag (default: the largest d<N>); also the output tag
  int64_t model_step = -1;      ///< base checkpoint step (-1: the last complete one)
  int load_optimizer = 1;       ///< 1: start from the checkpoint's optimizer moments
  int64_t num_iterations = -1;  ///< -1: one epoch of the mixture
  int max_seq_len = -1;
  int device_batch_size = -1;
  int64_t total_batch_size = -1;
  double embedding_lr = -1, unembedding_lr = -1, matrix_lr = -1;
  double init_lr_frac = 0.8;
  double warmup_ratio = 0.0;
  double warmdown_ratio = 0.5;
  double final_lr_frac = 0.0;
  int64_t eval_every = 200;
  int64_t eval_tokens = 40LL * 524288;
  int64_t chatcore_every = 200;
  int64_t chatcore_max_cat = -1;
  int64_t chatcore_max_sample = 24;
  int mmlu_epochs = 3;
  int gsm8k_epochs = 4;
  // this engine's
  std::vector<std::string> train_jsonl;  ///< train on these conversation files instead of the mixture
  std::vector<std::string> val_jsonl;    ///< evaluate on these (with --train-jsonl)
  int threads = 0;
  int64_t save_every = -1;
  int64_t resume_from_step = -1;  ///< continue an interrupted chat-sft from its own checkpoint
  int64_t check_replicas_every = 100;
  int64_t copy_state_every = 0;  ///< node 0 keeps a copy of the job's state every N steps (0: never; elastic: 10)
  std::string balance = "speed";
  bool local_data = false;
  bool profile = false;
};

/// The flags as JSON (the meta's user_config, the agreement's "chat-sft flags"); inherited values
/// as given (null), like nanochat's user_config.
nlohmann::json sft_args_to_json(const SftArgs& a);

/// What chat-sft takes from its base checkpoint's meta (checkpoint/run_meta.h RunMeta's fields of
/// the same names).
struct SftBase {
  ModelConfig model_config;
  std::optional<int64_t> max_seq_len, device_batch_size, total_batch_size;  ///< absent: not recorded
  nlohmann::json user_config = nlohmann::json::object();                    ///< the base run's flags (its lrs)
  std::string meta_path;                                                    ///< the meta's file, for errors
};

/// The plan of an SFT run: model config of the base checkpoint `base`, T, B, total batch and lrs
/// from the flags or else inherited (nanochat's fallbacks 2048, 32, 524288, 0.3, 0.004, 0.02 when
/// the meta lacks them; plan.log gets nanochat's "Inherited ..." / "NOTE: ... overrides ..." /
/// "Using ..." lines), the optimizer's lrs (no batch scaling; x init_lr_frac is applied to the
/// optimizer by the caller), the schedule (sft_step_schedule with a Muon weight decay of 0, the
/// fresh optimizer's), the run ended by the data stream, the cadence and
/// chatsft_checkpoints/<tag or d<depth>> under `base_dir`. Throws nanochat::Error naming the flag
/// for a total batch not divisible by T, bad ratios or a --balance other than speed or even.
TrainPlan derive_sft_plan(const SftArgs& a, const SftBase& base, int world_size, const std::string& base_dir);

/// chat-sft's schedule (nanochat chat_sft.py): the LR by the data's progress with the flags'
/// warmup, warmdown and final fraction (SftSchedule), Muon's momentum by step and its weight decay
/// fixed at `muon_weight_decay` (the base run's last, when its optimizer was loaded).
StepScheduleFn sft_step_schedule(const SftArgs& a, double muon_weight_decay);

}  // namespace nanochat
