#include "nanochat/cluster/gather.h"

#include <nlohmann/json.hpp>

#include "nanochat/cluster/net.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"

namespace nanochat::cluster {

void broadcast_string(Communicator& comm, std::string& s, int root) {
  uint64_t n = s.size();
  comm.broadcast(&n, sizeof n, root)->wait();
  s.resize(n);
  if (n) comm.broadcast(s.data(), n, root)->wait();
}

std::vector<std::string> rank_names(Communicator& comm) {
  std::vector<std::string> hosts = all_gather_strings(comm, host_name());
  for (size_t j = 0; j < hosts.size(); ++j) hosts[j] = str_cat("rank ", j, " (host ", hosts[j], ")");
  return hosts;
}

void throw_if_any_rank_failed(Communicator& comm, const std::string& my_error, const std::string& hint) {
  const nlohmann::json mine = {{"host", host_name()}, {"error", my_error}};
  const std::vector<std::string> all = all_gather_strings(comm, mine.dump());
  std::string msg;
  for (size_t j = 0; j < all.size(); ++j) {
    const nlohmann::json theirs = nlohmann::json::parse(all[j]);
    const std::string err = theirs.value("error", "");
    if (err.empty()) continue;
    msg += str_cat(msg.empty() ? "" : "; ", "rank ", j, " (host ", theirs.value("host", "?"), ") ", err);
  }
  if (msg.empty()) return;
  if (!hint.empty()) msg += ". " + hint;
  fail(msg);
}

}  // namespace nanochat::cluster
