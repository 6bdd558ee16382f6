#pragma once
// The state of base_train's loop that a checkpoint carries besides the weights and the optimizer
// (nanochat scripts/base_train.py loop_state; docs/nanochat.md 3.9).
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

namespace nanochat {

/// A bpb (or any double) as the checkpoint meta and metrics.jsonl hold it: an infinity as the
/// string "Infinity" (Python's json writes the bare token; nlohmann would write null), NaN as null.
nlohmann::json number_or_infinity(double v);

struct LoopState {
  int64_t step = 0;                                              ///< optimizer steps done
  double val_bpb = std::numeric_limits<double>::quiet_NaN();     ///< last val bpb (NaN = none yet)
  double min_val_bpb = std::numeric_limits<double>::infinity();  ///< best val bpb so far
  double smooth_train_loss = 0.0;                                ///< EMA (beta 0.9) of the train loss, not debiased
  double total_training_time = 0.0;                              ///< seconds of the steps after step 10
  nlohmann::json loader_state;  ///< this rank's train loader state() (null = a fresh stream)

  /// The meta fields: {"step", "val_bpb", "dataloader_state_dict": loader_state, "loop_state":
  /// {"min_val_bpb", "smooth_train_loss", "total_training_time"}}, bpbs as number_or_infinity.
  nlohmann::json to_json() const;
  /// Reads what to_json() wrote (the whole meta_<step>.json may be passed). Throws
  /// nlohmann::json errors for missing "step" or "loop_state" fields.
  static LoopState from_json(const nlohmann::json& meta);
};

}  // namespace nanochat
