#include "nanochat/checkpoint/legacy.h"

#include <cstdint>
#include <filesystem>

#include "nanochat/checkpoint/job_checkpoint.h"
#include "nanochat/checkpoint/loop_checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/data/loader.h"
#include "nanochat/optim/muon_adamw.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace nanochat {

bool is_pre_checksum_marker(const std::string& text) { return text == "ok\n"; }

bool resumes_shards_left_on_their_nodes(Communicator& comm, const CheckpointPaths& cp, int saved_world_size,
                                        bool one_rank_stream) {
  int32_t all_on_rank0 = 1;
  if (comm.rank() == 0)
    for (int r = 0; r < saved_world_size; ++r)
      if (!fs::exists(cp.optim(r))) all_on_rank0 = 0;
  comm.broadcast(&all_on_rank0, sizeof all_on_rank0, 0)->wait();
  return all_on_rank0 == 0 && saved_world_size == comm.world_size() && one_rank_stream;
}

json load_own_shard(Communicator& comm, const CheckpointPaths& cp, const json& marker, MuonAdamW& opt) {
  const int rank = comm.rank();
  std::string error, corrupt;
  json loader_state;
  try {
    if (!fs::exists(cp.optim(rank)))
      fail("rank ", rank, " has no optimizer shard ", cp.optim(rank),
           "; every node needs its own ranks' optim_*_rank<r> files (resume on the same nodes, or share the folder)");
    corrupt = check_checkpoint_file(marker, cp.optim(rank));
    if (corrupt.empty()) {
      StFile optim_file = load_safetensors(cp.optim(rank));
      opt.load_state(optim_file);
      loader_state = loader_state_of_shard(optim_file);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_checkpoint_load(comm, cp, error, corrupt);
  return loader_state;
}

json strided_streams_as_one(const std::vector<json>& old_states) {
  return data::reshard_loader_states(old_states, 1).front();
}

std::optional<std::string> own_shard_file(const CheckpointPaths& cp, int rank, int world_size, int saved_world_size) {
  if (saved_world_size != world_size) return std::nullopt;
  if (rank == 0) {
    for (int r = 0; r < saved_world_size; ++r)
      if (!fs::exists(cp.optim(r))) return cp.optim(0);
    return std::nullopt;  // all in rank 0's folder: today's path
  }
  if (fs::exists(cp.optim(rank))) return cp.optim(rank);
  return std::nullopt;
}

}  // namespace nanochat
