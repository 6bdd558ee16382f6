#pragma once
// Checkpoints of a whole data-parallel job (the files of checkpoint.h, written and read by every
// rank together). Every rank writes into its own checkpoint directory (nodes need not share a
// filesystem), and every failure to write or read, or a file whose CRC32 no longer matches, is
// reported by EVERY rank with the same message naming the rank, its host and the file, so that
// no rank is left waiting in a collective and blaming the network.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/train/checkpoint.h"

namespace nanochat {

class Communicator;
class GPT;
class MuonAdamW;

/// Before training: every rank creates its checkpoint directory `dir`; one that cannot makes every
/// rank throw the same nanochat::Error "rank R (host H) could not write <dir>: <reason>" (a job
/// that could never save stops before its first step). All ranks must call it together.
void prepare_checkpoint_dirs(Communicator& comm, const std::string& dir);

/// Saves step cp.step: every rank creates its directory and drops the step's old marker, writes
/// its optimizer shard (with `optim_metadata`), rank 0 also the weights and `meta`; then every
/// rank writes the completion marker holding every file's CRC32. Collectives between the phases
/// share each rank's outcome: a rank that cannot write makes every rank throw the same
/// nanochat::Error "rank R (host H) could not write <path>: <reason>". `fail_write` makes this
/// rank's write fail (test-only fault injection). All ranks must call it together.
void save_job_checkpoint(Communicator& comm, const CheckpointPaths& cp, const GPT& model, const MuonAdamW& opt,
                         const std::map<std::string, std::string>& optim_metadata, const nlohmann::json& meta,
                         bool fail_write = false);

/// Rank 0 only: replaces meta_<S>.json of a complete step with `meta` without ever leaving a
/// marker whose checksum the meta file fails (the marker first accepts both versions).
void rewrite_checkpoint_meta(const CheckpointPaths& cp, const nlohmann::json& meta);

/// The files of step `cp` that `rank` reads when a job of `world_size` ranks resumes from a
/// checkpoint written by `saved_world_size` ranks: rank 0 the weights and meta, each rank its own
/// optimizer shard, or rank 0 every old shard when the world sizes differ.
std::vector<std::string> files_read_by_rank(const CheckpointPaths& cp, int rank, int world_size, int saved_world_size);

/// Every rank passes the outcome of reading its part of checkpoint `cp`: `corrupt` (a
/// check_checkpoint_file message) or `error` (any other failure, shown verbatim). If a rank found
/// a corrupt file, the ranks look together for the newest older step whose files are intact
/// (each checks the files it would read) and every rank throws the same nanochat::Error naming
/// the file, the rank and host that read it and that step. Otherwise, if a rank failed, every
/// rank throws the first failure. All ranks must call it together.
void agree_on_checkpoint_load(Communicator& comm, const CheckpointPaths& cp, const std::string& error,
                              const std::string& corrupt);

}  // namespace nanochat
