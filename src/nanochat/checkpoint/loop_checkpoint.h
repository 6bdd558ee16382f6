#pragma once
// Saving and resuming base_train's loop (nanochat scripts/base_train.py save_checkpoint /
// load_checkpoint; docs/nanochat.md 3.9): the weights, every rank's optimizer shard with its
// loader state, and the meta with the loop state, over the job checkpoint of job_checkpoint.h
// (per-rank folders, CRC32 markers, every failure reported on every rank).
#include <nlohmann/json.hpp>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/checkpoint/faults.h"
#include "nanochat/checkpoint/job_checkpoint.h"
#include "nanochat/checkpoint/loop_state.h"
#include "nanochat/checkpoint/run_meta.h"

namespace nanochat {

class Communicator;
class GPT;
class MuonAdamW;
struct TrainPlan;

/// The loader state an optimizer shard of save_checkpoint carries (its metadata "loader_state").
/// Throws nanochat::Error naming the file when it has none.
nlohmann::json loader_state_of_shard(const StFile& shard);

/// meta_<step>.json: `run_meta` (what does not change during the run: model_config, user_config,
/// batch settings, world size, tokenizer hash) with the fields of state.to_json() added.
nlohmann::json checkpoint_meta(const RunMeta& run_meta, const LoopState& state);

/// Saves step state.step into rank 0's `dir` (CheckpointPaths{dir, state.step}): the weights, the
/// meta and every rank's optimizer shard carrying state.loader_state, then the marker, all written
/// by rank 0 (save_job_checkpoint); rank 0 prints "Saved <what> <model file>".
/// `faults`: the tests' hooks around rank 0's writes (save_job_checkpoint). Throws on every rank
/// the same nanochat::Error when any rank cannot write (save_job_checkpoint). All ranks call it together. Returns the
/// paths of the step.
CheckpointPaths save_checkpoint(Communicator& comm, const std::string& dir, const GPT& model, const MuonAdamW& opt,
                                const RunMeta& run_meta, const LoopState& state,
                                const FaultInjector& faults = no_faults(), const std::string& what = "checkpoint");

/// Node 0 keeps in `copy` what save_checkpoint would write for `state` (copy_job_state; every rank
/// sends rank 0 its shard). All ranks call it together.
void copy_checkpoint_state(Communicator& comm, const GPT& model, const MuonAdamW& opt, const RunMeta& run_meta,
                           const LoopState& state, JobStateCopy* copy);

/// Resumes step `step` from plan.checkpoint_dir into `model` and `opt` and returns the loop state,
/// with this rank's loader state. Rank 0 reads the weights and the meta and broadcasts them; the
/// meta must match the plan (checkpoint/run_meta.h check_resume). Rank 0 reads every optimizer shard of its
/// folder, reassembles the whole optimizer state and sends each rank only its part
/// (MuonAdamW::whole_state_part, point to point), so node 0's folder alone resumes at any world size; a checkpoint of
/// an earlier version that left each node its own shard resumes at its world size with each rank reading its own. Every
/// rank reads the one-rank data stream, whose state after a step does not depend on the world size or the split, so the
/// data resumes exactly at any world size (a checkpoint of an earlier version whose ranks read rank-strided streams,
/// meta without "data_stream", continues approximately: data::reshard_loader_states). Every file read is checked
/// against its marker's CRC32; a failure on any rank makes every rank throw the same
/// nanochat::Error (agree_on_checkpoint_load) naming the file, rank and host. All ranks call it
/// together.
LoopState resume(Communicator& comm, const TrainPlan& plan, int64_t step, GPT& model, MuonAdamW& opt);

/// chat-sft's start from checkpoint `cp` (another run's folder, e.g. base_checkpoints/<tag>): rank 0
/// reads and checks its weights and meta and every rank gets them (as resume does); then, when
/// `with_optimizer`, rank 0 reads every optimizer shard of the checkpoint's world size, reassembles
/// the whole state and sends each rank its part under the current layout (any world size). The
/// optimizer's groups keep their own lrs, momentum and weight decay: only the moments, Muon buffers
/// and step counts are loaded (nanochat chat_sft.py restores its fresh lrs after load_state_dict).
/// Returns the checkpoint's run record, and in `optimizer_loaded` whether the optimizer state was loaded (false when
/// not asked for, or when a shard is missing: nanochat then starts with a fresh optimizer). Throws
/// on every rank the same nanochat::Error naming the file for a damaged or unreadable one. All
/// ranks call it together.
RunMeta warm_start(Communicator& comm, const CheckpointPaths& cp, GPT& model, MuonAdamW& opt, bool with_optimizer,
                   bool* optimizer_loaded);

}  // namespace nanochat
