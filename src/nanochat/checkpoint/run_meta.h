#pragma once
// What a checkpoint's meta_<S>.json records about the run that wrote it, typed (docs/nanochat.md
// 3.9; nanochat scripts/base_train.py and chat_sft.py save_checkpoint's meta_data). The file is
// this record's fields plus the loop state of checkpoint/loop_state.h:
//   model_config       the model (model/config.h ModelConfig; chat-sft's records its T, as nanochat's)
//   user_config        the command's flags, as nanochat's user_config (free-form: base-train's or
//                      chat-sft's flags, or nanochat's own)
//   device_batch_size, max_seq_len, total_batch_size   the batch the run trained with
//   world_size         ranks that wrote the step (1 when absent)
//   dtype              --dtype (absent in checkpoints from before bfloat16: float32)
//   data_stream        "one-rank" when every rank read the one-rank data stream (absent in
//                      checkpoints of earlier versions, whose ranks read rank-strided streams)
//   tokenizer_hash     the tokenizer's hash, decimal text
//   base_checkpoint, muon_weight_decay   chat-sft: the model file it started from, Muon's decay
//   imported_from      import: the nanochat meta file the checkpoint came from
// Any other field (a later version's, chat-rl's "chat_rl") is kept in `extra` as it was.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "nanochat/model/config.h"
#include "nanochat/plan/plan.h"

namespace nanochat {

struct RunMeta {
  ModelConfig model_config;
  nlohmann::json user_config = nlohmann::json::object();
  std::optional<int64_t> device_batch_size;  ///< absent (or null, as nanochat may write it): not recorded
  std::optional<int64_t> max_seq_len;
  std::optional<int64_t> total_batch_size;
  int world_size = 1;
  std::string dtype;                                ///< "" = not recorded (float32)
  std::string data_stream;                          ///< "one-rank", or "" = rank-strided streams (earlier versions)
  std::string tokenizer_hash;                       ///< "" = not recorded
  std::string base_checkpoint;                      ///< chat-sft; "" = not a chat-sft run
  std::optional<double> muon_weight_decay;          ///< chat-sft
  std::string imported_from;                        ///< import; "" = trained here
  nlohmann::json extra = nlohmann::json::object();  ///< the fields this record does not know

  /// The fields that are set (optional ones only when present), with `extra`'s. Key order is
  /// nlohmann's (sorted), as every meta this product wrote.
  nlohmann::json to_json() const;
  /// Reads a whole meta_<S>.json (the loop state's fields are skipped: LoopState::from_json reads
  /// them). Throws nanochat::Error naming `path` and the field for a missing model_config or a
  /// field of the wrong type.
  static RunMeta from_json(const nlohmann::json& meta, const std::string& path);

  /// dtype, "float32" when not recorded.
  std::string dtype_or_float32() const { return dtype.empty() ? "float32" : dtype; }
  /// Whether every rank of the run read the one-rank data stream (one rank always does).
  bool one_rank_stream() const { return world_size == 1 || data_stream == "one-rank"; }
};

/// Whether `plan` can resume the checkpoint whose meta (at `meta_path`) is `meta`: the same model
/// (chat-sft's recorded T aside), a world size >= 1, the same total batch and T (the device batch
/// may differ). Throws nanochat::Error naming the file and the flag to pass.
void check_resume(const TrainPlan& plan, const RunMeta& meta, const std::string& meta_path);
/// "" when the checkpoint was trained with plan's --dtype, else a NOTE line naming both.
std::string resume_dtype_note(const TrainPlan& plan, const RunMeta& meta, const std::string& meta_path);

}  // namespace nanochat
