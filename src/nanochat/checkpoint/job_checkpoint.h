#pragma once
// Checkpoints of a whole data-parallel job (the files of checkpoint.h). Node 0 (rank 0) writes the
// whole checkpoint into its own checkpoint directory: every rank sends it its optimizer shard, so
// workers write nothing and a job resumes from node 0's folder alone, on any set of nodes and at
// any world size (a laptop that leaves takes nothing with it). Every failure to write or read, or
// a file whose CRC32 no longer matches, is reported by EVERY rank with the same message naming the
// rank, its host and the file, so that no rank is left waiting in a collective and blaming the
// network.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/checkpoint/faults.h"

namespace nanochat {

class Communicator;
class GPT;
class MuonAdamW;

/// Before training: rank 0 creates its checkpoint directory `dir`; when it cannot, every rank throws
/// the same nanochat::Error "rank 0 (host H) could not write <dir>: <reason>" (a job that could
/// never save stops before its first step). Workers create nothing. All ranks must call it together.
void prepare_checkpoint_dirs(Communicator& comm, const std::string& dir);

/// Saves step cp.step into rank 0's directory: rank 0 creates it and drops the step's old marker;
/// each rank r >= 1 in turn sends rank 0 alone (point to point, comm/communicator.h send/recv) its
/// optimizer shard (with `optim_metadata`), which rank 0
/// writes as optim_<S>_rank<r>; rank 0 writes its own shard, the weights and `meta`, each atomically,
/// and last the completion marker holding every file's CRC32 (a kill at any moment leaves the
/// earlier steps complete). A rank 0 that cannot write makes every rank throw the same
/// nanochat::Error "rank 0 (host H) could not write <path>: <reason>". `faults`: the tests' hooks
/// around each file rank 0 writes (checkpoint/faults.h; a failing write, a stall for a kill). All ranks
/// must call it together. Peak extra memory: one rank's packed shard at a time.
void save_job_checkpoint(Communicator& comm, const CheckpointPaths& cp, const GPT& model, const MuonAdamW& opt,
                         const std::map<std::string, std::string>& optim_metadata, const nlohmann::json& meta,
                         const FaultInjector& faults = no_faults());

/// Node 0's copy, in memory, of the whole job's state at a step boundary (docs/architecture.md
/// 8.6): what a checkpoint of that step would hold. With it, a rank that leaves the job (dies,
/// freezes) costs no step trained before the copy: node 0 writes it as a checkpoint alone.
struct JobStateCopy {
  int64_t step = -1;                ///< the step it holds (-1: no copy yet)
  std::vector<float> params;        ///< the weights, model.param_data() order (num_params floats)
  std::vector<std::string> shards;  ///< every rank's packed optimizer shard (index = rank)
  nlohmann::json meta;              ///< the checkpoint's meta of that step
};

/// Collective: every rank sends rank 0 its optimizer shard packed with `optim_metadata` (one
/// gather); rank 0 replaces *copy with the weights, the shards, `meta` and `step` once all have
/// arrived (a failure leaves the previous copy whole). Other ranks leave *copy untouched. Extra
/// memory on rank 0: the weights and the whole optimizer state.
void copy_job_state(Communicator& comm, const GPT& model, const MuonAdamW& opt,
                    const std::map<std::string, std::string>& optim_metadata, const nlohmann::json& meta, int64_t step,
                    JobStateCopy* copy);

/// Rank 0 alone, without communication (the job's group may be broken): writes `copy` as step
/// copy.step into `dir`, the files save_job_checkpoint writes for copy.shards.size() ranks, each
/// atomically, the marker last. `model`: the parameters' names and shapes. Throws nanochat::Error
/// naming the file it could not write.
CheckpointPaths write_job_state_copy(const std::string& dir, const GPT& model, const JobStateCopy& copy);

/// Rank 0 only: replaces meta_<S>.json of a complete step with `meta` without ever leaving a
/// marker whose checksum the meta file fails (the marker first accepts both versions).
void rewrite_checkpoint_meta(const CheckpointPaths& cp, const nlohmann::json& meta);

/// The files of step `cp` that `rank` reads when a job of `world_size` ranks resumes from a
/// checkpoint written by `saved_world_size` ranks: rank 0 the weights, the meta and every shard
/// (all of them are in its folder, or the world sizes differ); at the saved world size, a
/// checkpoint of an earlier version that left each node its own shard: rank 0 its shard and
/// each rank whose folder holds its shard that shard.
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
