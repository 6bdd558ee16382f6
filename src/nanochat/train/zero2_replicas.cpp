#include "nanochat/train/zero2_replicas.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/cluster/gather.h"
#include "nanochat/cluster/net.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/model/gpt.h"

namespace nanochat {

void check_replicas(const GPT& model, Communicator& comm, int64_t step) {
  if (comm.world_size() == 1) return;
  const auto& params = model.params();
  std::vector<uint32_t> mine(params.size());
  for (size_t k = 0; k < params.size(); ++k)
    mine[k] = bytes_crc32(model.param_data() + params[k].offset, params[k].numel * sizeof(float));
  const nlohmann::json blob = {{"host", cluster::host_name()}, {"crc32", mine}};
  const std::vector<std::string> all = cluster::all_gather_strings(comm, blob.dump());

  std::vector<std::vector<uint32_t>> crcs;
  std::vector<std::string> hosts;
  for (const auto& s : all) {
    const auto j = nlohmann::json::parse(s);
    crcs.push_back(j.at("crc32").get<std::vector<uint32_t>>());
    hosts.push_back(j.at("host").get<std::string>());
  }
  size_t first = params.size(), n_diff = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    bool differs = false;
    for (size_t r = 1; r < crcs.size(); ++r)
      differs = differs || crcs[r].size() != mine.size() || crcs[r][k] != crcs[0][k];
    if (!differs) continue;
    ++n_diff;
    if (first == params.size()) first = k;
  }
  if (n_diff == 0) return;
  std::string ranks;
  for (size_t r = 1; r < crcs.size(); ++r)
    if (crcs[r].size() != mine.size() || crcs[r][first] != crcs[0][first])
      ranks += str_cat(ranks.empty() ? "" : ", ", "rank ", r, " (host ", hosts[r], ")");
  fail("the ranks' copies of the model differ at step ", step, ": tensor ", params[first].name, " on ", ranks,
       " differs from rank 0's (host ", hosts[0], "); ", n_diff, " of ", params.size(),
       " tensors differ. Data-parallel replicas must stay bit-identical: this points at faulty memory or CPU "
       "on that host (or a bug). The job stops without saving; resume from the last checkpoint with "
       "--resume-from-step (see --check-replicas-every)");
}

}  // namespace nanochat
