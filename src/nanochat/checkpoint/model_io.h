#pragma once
// Finding and loading trained checkpoints for evaluation, sampling and chat
// (nanochat checkpoint_manager.py: find_largest_model, find_last_step, build_model).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "nanochat/checkpoint/run_meta.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat {

class GPT;

/// Which training stage wrote the checkpoint (nanochat's -i/--source: base|sft|rl), i.e. which
/// folder under base_dir() holds it.
enum class CheckpointSource {
  Base,  ///< base_checkpoints/ (written by base-train)
  Sft,   ///< chatsft_checkpoints/ (written by chat-sft)
  Rl,    ///< chatrl_checkpoints/ (written by chat-rl)
};
/// "base" / "sft" / "rl".
const char* checkpoint_source_name(CheckpointSource s);
/// "base_checkpoints" / "chatsft_checkpoints" / "chatrl_checkpoints".
const char* checkpoint_source_folder(CheckpointSource s);
/// The source named "base", "sft" or "rl"; throws nanochat::Error listing them otherwise.
CheckpointSource parse_checkpoint_source(const std::string& name);

/// A model loaded from base_dir()/<source folder>/<tag>/ at a complete step.
struct LoadedModel {
  std::unique_ptr<GPT> model;
  nlohmann::json meta;  ///< meta_<step>.json as it is
  RunMeta run;          ///< its run record (checkpoint/run_meta.h)
  std::string dir;      ///< checkpoint directory
  std::string tag;
  int64_t step = 0;
};

/// The checkpoint tag to use when none is given: the d<N> directory with the largest N, else the
/// most recently modified directory (nanochat find_largest_model). Throws nanochat::Error naming
/// the folder when there is no checkpoint at all.
std::string default_model_tag(const std::string& checkpoints_root);

/// Loads tag (empty = default_model_tag) at step (-1 = the last complete step) from the source's
/// folder. Throws nanochat::Error naming the directory/file and the available steps when something
/// is missing (a missing source folder is named with the command that writes it), or naming the
/// file and the newest intact step when the weights or meta fail the CRC32 their completion
/// marker recorded.
LoadedModel load_trained_model(const std::string& tag, int64_t step, CheckpointSource source = CheckpointSource::Base);

/// Throws nanochat::Error naming the checkpoint when its vocabulary differs from the tokenizer's.
void require_tokenizer_vocab(const LoadedModel& lm, int tokenizer_vocab);

/// What sampling, chatting, evaluating and serving start from: the tokenizer of tokenizer_dir()
/// and a checkpoint checked against it.
struct InferenceModel {
  Tokenizer tokenizer;
  LoadedModel lm;  ///< lm.model holds the weights; lm.meta the checkpoint's meta
  CheckpointSource source = CheckpointSource::Base;
};

/// The shared start-up of sample, chat, base-eval and chat-web: Tokenizer::load(tokenizer_dir()),
/// load_trained_model(tag, step, source), require_tokenizer_vocab. Errors as those three throw.
InferenceModel load_for_inference(CheckpointSource source, const std::string& tag, int64_t step);

}  // namespace nanochat
