#pragma once
// Atomic, portable checkpoints (docs/architecture.md 3.9; nanochat checkpoint_manager.py layout with
// safetensors instead of torch pickles):
//   <dir>/model_<S:06d>.safetensors        weights, nanochat state_dict keys (rank 0)
//   <dir>/meta_<S:06d>.json                nanochat's meta fields + the loop state (rank 0)
//   <dir>/optim_<S:06d>_rank<r>.safetensors  rank r's optimizer shard (written by rank 0)
//   <dir>/complete_<S:06d>                 written last; a step without it is ignored
// Every file is written under a temporary name, fsynced and renamed; the directory is fsynced.
// A kill at any moment therefore leaves every earlier complete checkpoint usable.
// The completion marker is JSON {"step", "world_size", "crc32": {file name: CRC32}} recording
// the zlib CRC32 of every file of the step when it was written; readers check the files they
// read against it (a marker holding only "ok", from before checksums, checks nothing). Rank 0 writes
// every file of a step, every rank's optimizer shard included (checkpoint/job_checkpoint.h); checkpoints
// of earlier versions had each rank write its shard and the marker into its own directory.
#include <cstdint>
#include <functional>
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

/// Writes a safetensors file atomically (tmp + fsync + rename + dir fsync; the temporary name and
/// the rename of core/file_io.h, whose write_file_atomic() writes the text files).
void write_safetensors_atomic(const std::string& path, const std::vector<StWriteEntry>& entries,
                              const std::map<std::string, std::string>& metadata = {});

/// Removes the temporary files of the atomic writes (core/file_io.h atomic_tmp_name(): "<file>.tmp.<pid>.<n>") in `dir`
/// whose writing process no longer exists on this host (a save interrupted by a signal or a crash leaves one, as large
/// as the file). Returns how many were removed; never throws.
size_t remove_stale_checkpoint_tmp(const std::string& dir);

/// Creates the checkpoint directory, removes stale temporary files (remove_stale_checkpoint_tmp())
/// and invalidates step S (removes its marker) before its files are rewritten (rank 0,
/// checkpoint/job_checkpoint.h).
/// Throws nanochat::Error naming the directory when it cannot be created or the marker removed.
void begin_checkpoint(const CheckpointPaths& p);
/// Marks step S complete after every rank has written its files: writes the marker with `crcs`
/// (file name without directory -> CRC32, or an array of CRC32s any of which is accepted).
void finish_checkpoint(const CheckpointPaths& p, const nlohmann::json& crcs, int world_size);

/// zlib CRC32 of n bytes in memory.
uint32_t bytes_crc32(const void* data, size_t n);
/// zlib CRC32 of a whole file. Throws nanochat::Error naming the file when it cannot be read.
uint32_t file_crc32(const std::string& path);
/// The marker of step S as JSON ({} for a marker from before checksums). Throws the same
/// nanochat::Error as read_checkpoint_meta when the step is missing or incomplete.
nlohmann::json read_checkpoint_marker(const CheckpointPaths& p);
/// Checks the file `path` of a step against the CRC32 that step's `marker` recorded for it.
/// Returns "" when it matches or the marker records no checksum for it; otherwise a message
/// naming the file and what is wrong (missing, unreadable, or recorded vs actual CRC32).
std::string check_checkpoint_file(const nlohmann::json& marker, const std::string& path);
/// Newest complete step in `dir`, other than `except`, whose files files_of(step) all pass
/// check_checkpoint_file; nullopt when there is none. Reads those files (newest step first).
std::optional<int64_t> newest_intact_step(
    const std::string& dir, int64_t except,
    const std::function<std::vector<std::string>(const CheckpointPaths&)>& files_of);

/// Complete steps in `dir`, ascending (a step counts only with its completion marker).
std::vector<int64_t> complete_checkpoint_steps(const std::string& dir);
/// Largest complete step, or nullopt when there is none.
std::optional<int64_t> last_complete_step(const std::string& dir);

/// Reads meta_<S>.json; throws nanochat::Error naming the file and what to do when the step
/// is missing or incomplete. Does not check checksums (check_checkpoint_file does).
nlohmann::json read_checkpoint_meta(const CheckpointPaths& p);

}  // namespace nanochat
