#include "nanochat/cluster/agree.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "nanochat/cluster/net.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/version.h"

namespace nanochat::cluster {

namespace {

using json = nlohmann::json;

// Bounds that only absurd values reach: one shown value, and the differences listed per setting.
constexpr size_t kMaxValueChars = 8192;
constexpr size_t kMaxLinesPerSetting = 200;

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

std::string bounded(const std::string& v) {
  if (v.size() <= kMaxValueChars) return v;
  return str_cat(v.substr(0, kMaxValueChars), "... (", v.size() - kMaxValueChars, " more characters)");
}

// {"X on rank 0 (host a)", "<missing> on ranks 1-2 (hosts b, c)"}: one entry per distinct value,
// in full, in rank order, the ranks lacking the value last. `groups` maps a shown value ("" =
// missing) to its ranks.
std::vector<std::string> describe(const std::map<std::string, std::vector<int>>& groups,
                                  const std::vector<std::string>& hosts, const std::string& missing) {
  auto entry = [&](const std::string& value, const std::vector<int>& ranks) {
    std::set<std::string> hs;
    for (int j : ranks) hs.insert(hosts[static_cast<size_t>(j)]);
    std::string hl;
    for (const auto& h : hs) hl += (hl.empty() ? "" : ", ") + h;
    return str_cat(value.empty() ? missing : bounded(value), " on rank", ranks.size() == 1 ? " " : "s ",
                   rank_list(ranks), " (host", hs.size() == 1 ? " " : "s ", hl, ")");
  };
  std::vector<std::pair<int, std::string>> order;  // by lowest rank
  for (const auto& [value, ranks] : groups)
    if (!value.empty()) order.emplace_back(ranks.front(), value);
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (const auto& [first, value] : order) out.push_back(entry(value, groups.at(value)));
  auto absent = groups.find("");
  if (absent != groups.end()) out.push_back(entry("", absent->second));
  return out;
}

// Appends one line per leaf path where the ranks' JSON values differ. `vals[j]` is rank j's value
// at `path` (nullopt: the rank lacks it). Objects held by every rank are compared key by key;
// anything else (a scalar, an array, an entry some ranks lack) is shown whole.
void diff_json(const std::string& path, const std::vector<std::optional<json>>& vals,
               const std::vector<std::string>& hosts, std::vector<std::string>& lines) {
  bool all_objects = true;
  for (const auto& v : vals) all_objects = all_objects && v && v->is_object();
  if (all_objects) {
    std::set<std::string> keys;
    for (const auto& v : vals)
      for (const auto& kv : v->items()) keys.insert(kv.key());
    for (const auto& k : keys) {
      std::vector<std::optional<json>> child(vals.size());
      for (size_t j = 0; j < vals.size(); ++j)
        if (vals[j]->contains(k)) child[j] = vals[j]->at(k);
      diff_json(path.empty() ? k : path + "/" + k, child, hosts, lines);
    }
    return;
  }
  std::map<std::string, std::vector<int>> groups;
  for (size_t j = 0; j < vals.size(); ++j) groups[vals[j] ? vals[j]->dump() : ""].push_back(static_cast<int>(j));
  if (groups.size() <= 1) return;
  std::string line = (path.empty() ? "(value)" : path) + ":";
  const auto entries = describe(groups, hosts, "missing");
  for (size_t i = 0; i < entries.size(); ++i) line += (i ? "; " : " ") + entries[i];
  lines.push_back(line);
}

// The differences of one setting, one line each: a key-path diff when every rank's value is a
// JSON object, else the distinct whole values, one per line.
std::vector<std::string> differences(const std::string& key, const std::vector<std::map<std::string, std::string>>& all,
                                     const std::vector<std::string>& hosts) {
  std::vector<std::optional<json>> parsed(all.size());
  bool objects = true;
  for (size_t j = 0; j < all.size() && objects; ++j) {
    auto it = all[j].find(key);
    if (it != all[j].end()) parsed[j] = json::parse(it->second, nullptr, false);
    objects = parsed[j] && !parsed[j]->is_discarded() && parsed[j]->is_object();
  }
  std::vector<std::string> lines;
  if (objects) {
    diff_json("", parsed, hosts, lines);
    return lines;
  }
  std::map<std::string, std::vector<int>> groups;
  for (size_t j = 0; j < all.size(); ++j) {
    auto it = all[j].find(key);
    groups[it == all[j].end() ? std::string() : str_cat("'", it->second, "'")].push_back(static_cast<int>(j));
  }
  if (groups.size() > 1) lines = describe(groups, hosts, "(missing)");  // one value per line
  return lines;
}

}  // namespace

void agree(Communicator& comm, const std::map<std::string, std::string>& facts) {
  const int W = comm.world_size();
  if (W == 1) return;
  auto with_build = facts;
  with_build.emplace("nanochat build", build_id());
  nlohmann::json mine = {{"host", host_name()}, {"facts", with_build}};
  const std::string blob = mine.dump();

  const std::vector<std::string> blobs = nanochat::all_gather_strings(comm, blob);
  std::vector<std::map<std::string, std::string>> all(W);
  std::vector<std::string> hosts(W);
  for (int j = 0; j < W; ++j) {
    const std::string& buf = blobs[j];
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
    const auto lines = differences(key, all, hosts);
    if (lines.empty()) continue;
    ++n_bad;
    problems += str_cat("\n  '", key, "' differs:");
    for (size_t i = 0; i < lines.size() && i < kMaxLinesPerSetting; ++i) problems += "\n    " + lines[i];
    if (lines.size() > kMaxLinesPerSetting)
      problems += str_cat("\n    ... and ", lines.size() - kMaxLinesPerSetting, " more differences");
  }
  if (n_bad > 0)
    fail("the ranks of this job disagree on ", n_bad, n_bad == 1 ? " setting" : " settings",
         " that must be identical on every rank:", problems,
         "\nStart every node with the same flags, files and nanochat build.");
}

}  // namespace nanochat::cluster
