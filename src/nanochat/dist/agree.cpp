#include "nanochat/dist/agree.h"

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/dist/net.h"

namespace nanochat::dist {

namespace {
// "0-2, 5" style list of ranks.
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += j > i ? str_cat(ranks[i], "-", ranks[j]) : std::to_string(ranks[i]);
    i = j + 1;
  }
  return s;
}

std::string shorten(const std::string& v) {
  if (v.size() <= 120) return str_cat("'", v, "'");
  return str_cat("'", v.substr(0, 117), "...'");
}
}  // namespace

void agree(Communicator& comm, const std::map<std::string, std::string>& facts) {
  const int W = comm.world_size(), r = comm.rank();
  if (W == 1) return;
  nlohmann::json mine = {{"host", host_name()}, {"facts", facts}};
  const std::string blob = mine.dump();

  std::vector<double> sizes(W, 0.0);
  sizes[r] = static_cast<double>(blob.size());
  comm.all_reduce_sum_f64(sizes.data(), sizes.size())->wait();

  std::vector<std::map<std::string, std::string>> all(W);
  std::vector<std::string> hosts(W);
  for (int j = 0; j < W; ++j) {
    std::string buf = j == r ? blob : std::string(static_cast<size_t>(sizes[j]), '\0');
    comm.broadcast(buf.data(), buf.size(), j)->wait();
    auto js = nlohmann::json::parse(buf);
    hosts[j] = js.at("host").get<std::string>();
    all[j] = js.at("facts").get<std::map<std::string, std::string>>();
  }

  std::set<std::string> keys;
  for (const auto& m : all)
    for (const auto& kv : m) keys.insert(kv.first);
  std::string problems;
  int n_bad = 0;
  for (const auto& key : keys) {
    // value -> ranks holding it (a missing key is shown as "(missing)").
    std::map<std::string, std::vector<int>> groups;
    for (int j = 0; j < W; ++j) {
      auto it = all[j].find(key);
      groups[it == all[j].end() ? std::string("\x01missing") : it->second].push_back(j);
    }
    if (groups.size() == 1) continue;
    ++n_bad;
    problems += str_cat("\n  '", key, "' differs:");
    for (const auto& [value, ranks] : groups) {
      std::set<std::string> hs;
      for (int j : ranks) hs.insert(hosts[j]);
      std::string hl;
      for (const auto& h : hs) hl += (hl.empty() ? "" : ", ") + h;
      problems += str_cat("\n    ", value == "\x01missing" ? std::string("(missing)") : shorten(value), " on rank",
                          ranks.size() == 1 ? " " : "s ", rank_list(ranks), " (host", hs.size() == 1 ? " " : "s ", hl,
                          ")");
    }
  }
  if (n_bad > 0)
    fail("the ranks of this job disagree on ", n_bad, n_bad == 1 ? " setting" : " settings",
         " that must be identical on every rank:", problems,
         "\nStart every node with the same flags, files and nanochat build.");
}

}  // namespace nanochat::dist
