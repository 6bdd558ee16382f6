#pragma once
// Atomic, portable checkpoints (docs/architecture.md 3.9; nanochat checkpoint_manager.py layout with
// safetensors instead of torch pickles):
//   <dir>/model_<S:06d>.safetensors        weights, nanochat state_dict keys (rank 0)
//   <dir>/meta_<S:06d>.json                nanochat's meta fields + loader/RNG state (rank 0)
//   <dir>/optim_<S:06d>_rank<r>.safetensors  each rank's optimizer shard
//   <dir>/complete_<S:06d>                 written last; a step without it is ignored
// Every file is written under a temporary name, fsynced and renamed; the directory is fsynced.
// A kill at any moment therefore leaves every earlier complete checkpoint usable.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "nanochat/core/safetensors.h"

namespace nanochat {

/// File names of one checkpoint step inside a checkpoint directory.
struct CheckpointPaths {
  std::string dir;
  int64_t step;
  std::string model() const;
  std::string meta() const;
  std::string optim(int rank) const;
  std::string marker() const;
};

/// Writes a safetensors file atomically (tmp + fsync + rename + dir fsync).
void write_safetensors_atomic(const std::string& path, const std::vector<StWriteEntry>& entries,
                              const std::map<std::string, std::string>& metadata = {});
/// Writes a text file atomically (tmp + fsync + rename + dir fsync).
void write_text_atomic(const std::string& path, const std::string& text);

/// Invalidates step S (removes its marker) before its files are rewritten. Rank 0 only.
void begin_checkpoint(const CheckpointPaths& p);
/// Marks step S complete after every rank has written its files. Rank 0 only.
void finish_checkpoint(const CheckpointPaths& p);

/// Complete steps in `dir`, ascending (a step counts only with its completion marker).
std::vector<int64_t> complete_checkpoint_steps(const std::string& dir);
/// Largest complete step, or nullopt when there is none.
std::optional<int64_t> last_complete_step(const std::string& dir);

/// Reads meta_<S>.json; throws nanochat::Error naming the file and what to do when the step
/// is missing or incomplete.
nlohmann::json read_checkpoint_meta(const CheckpointPaths& p);

}  // namespace nanochat
