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
#include "nanochat/plan/sft_plan.h"
#include "nanochat/tasks/task.h"
#include "nanochat/train/test_fault.h"

namespace nanochat {

class Communicator;

/// Whether a checkpoint's meta was written by chat SFT (ours or nanochat's: its user_config has
/// chat_sft's flags), i.e. is not a base checkpoint.
bool is_sft_meta(const RunMeta& meta);

/// What chat-sft takes from the base checkpoint's meta `meta` (read from `meta_path`) for its plan
/// (plan/sft_plan.h derive_sft_plan).
SftBase sft_base(const RunMeta& meta, const std::string& meta_path);

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
/// An elastic job (`nanochat run --nnodes MIN:MAX`) runs its generations here (train/elastic.h),
/// node 0 keeping a copy of the job's state every --copy-state-every steps (10 unless given).
void run_chat_sft(const SftArgs& args, Communicator& comm, TrainTestHooks hooks = {});

/// chat-sft on a node that joins a running elastic job (`nanochat run` started this rank with
/// NANOCHAT_JOIN=1): no communicator yet; rank 0 admits it at a step boundary (train/elastic.h).
void run_chat_sft_joining(const SftArgs& args, TrainTestHooks hooks = {});

}  // namespace nanochat
