#pragma once
// Finding and loading trained checkpoints for evaluation, sampling and chat
// (nanochat checkpoint_manager.py: find_largest_model, find_last_step, build_model).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace nanochat {

class GPT;

/// A model loaded from base_dir()/base_checkpoints/<tag>/ at a complete step.
struct LoadedModel {
  std::unique_ptr<GPT> model;
  nlohmann::json meta;  ///< meta_<step>.json
  std::string dir;      ///< checkpoint directory
  std::string tag;
  int64_t step = 0;
};

/// The checkpoint tag to use when none is given: the d<N> directory with the largest N, else the
/// most recently modified directory (nanochat find_largest_model). Throws nanochat::Error naming
/// the folder when there is no checkpoint at all.
std::string default_model_tag(const std::string& checkpoints_root);

/// Loads tag (empty = default_model_tag) at step (-1 = the last complete step). Throws
/// nanochat::Error naming the directory/file and the available steps when something is missing,
/// or naming the file and the newest intact step when the weights or meta fail the CRC32 their
/// completion marker recorded.
LoadedModel load_trained_model(const std::string& tag, int64_t step);

/// Throws nanochat::Error naming the checkpoint when its vocabulary differs from the tokenizer's.
void require_tokenizer_vocab(const LoadedModel& lm, int tokenizer_vocab);

}  // namespace nanochat
