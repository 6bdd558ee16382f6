#pragma once
// Checkpoints of earlier versions, all in one place: what resuming them needs besides today's path
// (checkpoint/loop_checkpoint.h, checkpoint/job_checkpoint.h). Three kinds exist:
//  * a completion marker holding only "ok" (before CRC32 checksums): nothing to check;
//  * every node kept its own ranks' optimizer shards in its own folder (before node 0 kept the
//    whole checkpoint): at the saved world size each rank reads its own shard;
//  * the ranks read rank-strided data streams (meta without "data_stream" = "one-rank", before
//    every rank read the one-rank stream): the data continues as one stream, approximately.
// Nothing here writes: every checkpoint written today has checksums, all shards on node 0 and the
// one-rank stream.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "nanochat/checkpoint/checkpoint.h"

namespace nanochat {

class Communicator;
class MuonAdamW;

/// Whether a marker file's text is one from before checksums ("ok").
bool is_pre_checksum_marker(const std::string& text);

/// Collective. Whether this resume reads a checkpoint whose shards were left on their nodes: rank
/// 0 lacks a shard of the `saved_world_size` ranks, the world size is the saved one and the ranks
/// read the one-rank stream. Otherwise rank 0 reads every shard (checkpoint/loop_checkpoint.h).
bool resumes_shards_left_on_their_nodes(Communicator& comm, const CheckpointPaths& cp, int saved_world_size,
                                        bool one_rank_stream);

/// Collective: each rank reads its own shard of step `cp` from its own folder into `opt` (checked
/// against `marker`); returns its loader state. A missing or corrupt shard on any rank makes every
/// rank throw the same nanochat::Error (agree_on_checkpoint_load) naming the file, rank and host.
nlohmann::json load_own_shard(Communicator& comm, const CheckpointPaths& cp, const nlohmann::json& marker,
                              MuonAdamW& opt);

/// The one-rank stream's state that continues the rank-strided streams whose states are
/// `old_states` (one per old rank, in rank order): after the furthest row group any of them read
/// (data::reshard_loader_states; approximate). Throws nanochat::Error for states of another
/// split or shard list.
nlohmann::json strided_streams_as_one(const std::vector<nlohmann::json>& old_states);

/// The shard `rank` reads itself from its own folder when resuming a checkpoint that left each node
/// its own shards (saved world size = world size, the shard present on this node; rank 0 when not
/// all shards are in its folder); nullopt otherwise.
std::optional<std::string> own_shard_file(const CheckpointPaths& cp, int rank, int world_size, int saved_world_size);

}  // namespace nanochat
