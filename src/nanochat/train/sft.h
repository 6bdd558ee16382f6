#pragma once
// chat-sft: nanochat's scripts/chat_sft.py (commit 92d63d4) on the base-train engine. It starts from a
// base checkpoint (base_checkpoints/<tag>/, optionally with its optimizer's moments), inherits the
// batch and the lrs from the checkpoint's meta unless given, packs conversations into rows with the
// assistant-only training mask (train/sft_data.h), follows the progress-based LR schedule and
// saves to chatsft_checkpoints/<tag>/ with nanochat's meta fields. Under `nanochat run` it is
// a job like base-train: node 0 serves the rows, the balancer deals them, node 0 writes the whole
// checkpoint, and --resume-from-step continues at any world size.
//
// Differences from nanochat, on purpose (docs/training.md):
//  * one data stream (nanochat's at W = 1) whatever the world size; nanochat strides conversations
//    by rank;
//  * a step's loss is the token-weighted mean over all its rows (the engine's sums); nanochat
//    averages each micro-batch's mean over its micro-batches -- equal when a step is one micro-batch;
//  * the generator's batch, which nanochat's stopping rule and progress count, is the whole step
//    (R rows), i.e. nanochat with one micro-batch per step;
//  * conversations are cut to min(2048, T+1) tokens (nanochat: 2048).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/checkpoint/run_meta.h"
#include "nanochat/plan/plan.h"
#include "nanochat/tasks/task.h"
#include "nanochat/train/test_fault.h"

namespace nanochat {

class Communicator;

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
  std::string balance = "speed";
  bool local_data = false;
  bool profile = false;
};

/// The flags as JSON (the meta's user_config, the agreement's "chat-sft flags"); inherited values
/// as given (null), like nanochat's user_config.
nlohmann::json sft_args_to_json(const SftArgs& a);

/// Whether a checkpoint's meta was written by chat SFT (ours or nanochat's: its user_config has
/// chat_sft's flags), i.e. is not a base checkpoint.
bool is_sft_meta(const RunMeta& meta);

/// The plan of an SFT run: model config of the base checkpoint's run record `base_meta` (read from
/// `meta_path`), T, B, total batch and lrs from the flags or else inherited (nanochat's fallbacks
/// 2048, 32, 524288, 0.3, 0.004, 0.02 when the meta lacks them; plan.log gets nanochat's
/// "Inherited ..." / "NOTE: ... overrides ..." / "Using ..." lines), the optimizer's lrs (no batch
/// scaling; x init_lr_frac is applied to the optimizer by the caller), the schedules, the cadence
/// and chatsft_checkpoints/<tag or d<depth>> under `base_dir`. Throws nanochat::Error naming the flag
/// for a total batch not divisible by T, bad ratios or a --balance other than speed or even.
TrainPlan derive_sft_plan(const SftArgs& a, const RunMeta& base_meta, const std::string& meta_path, int world_size,
                          const std::string& base_dir);

/// The training and validation conversations: the --train-jsonl / --val-jsonl files when given,
/// else nanochat's mixture (SmolTalk train, MMLU auxiliary_train x mmlu_epochs, GSM8K main train x
/// gsm8k_epochs; val SmolTalk test, MMLU test[:5200], GSM8K test[:420]). Throws nanochat::Error
/// naming the missing file (and the command that fetches it) or the malformed row.
struct SftData {
  tasks::TaskPtr train, val;  ///< val may be null (no evaluation)
  std::string description;    ///< for the log
};
SftData open_sft_data(const SftArgs& a);

/// Runs chat-sft with `args` on this rank (comm->world_size() ranks in all). Throws nanochat::Error
/// for user errors (no base checkpoint, a checkpoint of the wrong kind, missing or malformed data,
/// bad flags).
void run_chat_sft(const SftArgs& args, Communicator& comm, TrainTestHooks hooks = {});

}  // namespace nanochat
