#include "nanochat/launch/placement.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "nanochat/core/error.h"

namespace nanochat::cluster {

std::string sysfs_root() {
  const char* v = std::getenv("NANOCHAT_SYSFS_ROOT");
  return v && *v ? std::string(v) : std::string("/sys");
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::vector<int> parse_cpu_list(const std::string& text, const std::string& what) {
  std::string s;
  for (char ch : text)
    if (!std::isspace(static_cast<unsigned char>(ch))) s += ch;
  auto bad = [&] { fail(what, ": '", text, "' is not a CPU list such as 0-3,8"); };
  if (s.empty()) bad();
  std::set<int> cpus;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto dash = item.find('-');
    const std::string a = item.substr(0, dash), b = dash == std::string::npos ? a : item.substr(dash + 1);
    auto num = [&](const std::string& x) {
      if (x.empty() || x.size() > 6 || !std::all_of(x.begin(), x.end(), [](char c) { return c >= '0' && c <= '9'; }))
        bad();
      return std::stoi(x);
    };
    const int lo = num(a), hi = num(b);
    if (hi < lo || hi >= CPU_SETSIZE) bad();
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  if (cpus.empty()) bad();
  return {cpus.begin(), cpus.end()};
}

std::string cpu_list_str(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(cpus[i]) : str_cat(cpus[i], "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::optional<double> read_number(const std::string& path) {
  auto t = read_text(path);
  if (!t) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t->c_str(), &end);
  if (end == t->c_str() || !(v > 0)) return std::nullopt;
  return v;
}

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& allowed) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), allowed.begin(), allowed.end(), std::back_inserter(out));
  return out;
}

// Physical cores among `cpus`: distinct (package, core) ids, one per CPU where they are unreadable.
int count_cores(const std::string& root, const std::vector<int>& cpus) {
  std::set<std::pair<std::string, std::string>> ids;
  for (int c : cpus) {
    const std::string base = str_cat(root, "/devices/system/cpu/cpu", c, "/topology/");
    auto core = read_text(base + "core_id"), pkg = read_text(base + "physical_package_id");
    if (!core || !pkg) return static_cast<int>(cpus.size());
    ids.insert({*pkg, *core});
  }
  return static_cast<int>(ids.size());
}

// Intel hybrid: the two PMU folders list each kind's CPUs.
std::optional<CpuTopology> from_intel_pmus(const std::string& root, const std::vector<int>& allowed) {
  const std::string p = root + "/devices/cpu_core/cpus", e = root + "/devices/cpu_atom/cpus";
  auto pt = read_text(p), et = read_text(e);
  if (!pt || !et) return std::nullopt;
  CpuTopology t;
  try {
    t.types.push_back({"performance", intersect(parse_cpu_list(*pt, p), allowed), 0});
    t.types.push_back({"efficiency", intersect(parse_cpu_list(*et, e), allowed), 0});
  } catch (const Error&) {
    return std::nullopt;
  }
  t.source = p + " and " + e;
  return t;
}

// Groups CPUs by a per-CPU value (larger = faster), fastest first; nullopt if any is unreadable.
std::optional<CpuTopology> by_value(const std::string& root, const std::vector<int>& allowed, const std::string& file,
                                    bool is_freq) {
  std::vector<std::pair<double, int>> vals;
  for (int c : allowed) {
    auto v = read_number(str_cat(root, "/devices/system/cpu/cpu", c, "/", file));
    if (!v) return std::nullopt;
    vals.push_back({*v, c});
  }
  if (vals.empty()) return std::nullopt;
  std::sort(vals.begin(), vals.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  CpuTopology t;
  double group_max = -1;
  for (const auto& [v, c] : vals) {
    if (group_max < 0 || v < kSameTypeRatio * group_max) {
      group_max = v;
      char name[64];
      if (is_freq)
        std::snprintf(name, sizeof name, "max %.2f GHz", v / 1e6);
      else
        std::snprintf(name, sizeof name, "capacity %.0f", v);
      t.types.push_back({name, {}, 0});
    }
    t.types.back().cpus.push_back(c);
  }
  for (auto& ty : t.types) std::sort(ty.cpus.begin(), ty.cpus.end());
  t.source = str_cat(root, "/devices/system/cpu/cpuN/", file);
  return t;
}

}  // namespace

CpuTopology detect_core_types(const std::string& root, const std::vector<int>& allowed_in) {
  std::vector<int> allowed = allowed_in;
  std::sort(allowed.begin(), allowed.end());
  std::optional<CpuTopology> t = from_intel_pmus(root, allowed);
  if (!t) t = by_value(root, allowed, "cpu_capacity", false);
  if (!t) t = by_value(root, allowed, "cpufreq/cpuinfo_max_freq", true);
  if (!t) {
    t = CpuTopology{};
    t->types.push_back({"uniform", allowed, 0});
    t->source = str_cat("no core type information under ", root, "/devices");
  }
  std::erase_if(t->types, [](const CoreType& ty) { return ty.cpus.empty(); });
  for (auto& ty : t->types) ty.cores = count_cores(root, ty.cpus);
  return *t;
}

std::string describe_topology(const CpuTopology& t) {
  std::string out;
  for (const auto& ty : t.types)
    out += str_cat(out.empty() ? "" : ", ", ty.cores, " ", ty.name, " (CPUs ", cpu_list_str(ty.cpus), ", ",
                   ty.cpus.size(), " logical)");
  if (t.types.size() == 1) out += ", one core type";
  if (t.types.empty()) out = "no CPUs";
  return out + "; from " + t.source;
}

HybridMode parse_hybrid_mode(const std::string& s) {
  if (s == "auto") return HybridMode::Auto;
  if (s == "off") return HybridMode::Off;
  fail("--hybrid expects auto or off, got '", s, "'");
}

Placement plan_placement(const CpuTopology& topo, const PlacementRequest& req) {
  Placement p;
  p.nproc = req.nproc_per_node;
  const int types = static_cast<int>(topo.types.size());
  if (types <= 1) {
    p.summary = "one core type: ranks are not pinned";
    return p;
  }
  const std::string n_types = str_cat(types, " core types");
  if (req.mode == HybridMode::Off) {
    p.summary = str_cat(n_types, ", --hybrid off: ranks are not pinned");
    return p;
  }
  if (!req.nproc_given && req.nnodes > 1) {
    p.summary =
        str_cat(n_types, ": ranks are not pinned in a multi-node job without --nproc-per-node; pass --nproc-per-node ",
                types, " on every node for one rank per core type");
    return p;
  }
  if (req.nproc_given && req.nproc_per_node != types) {
    p.summary = str_cat(n_types, ": --nproc-per-node ", req.nproc_per_node, " is not one rank per type (", types,
                        "), so ranks are not pinned");
    return p;
  }
  p.nproc = types;
  std::string where;
  for (int l = 0; l < types; ++l) {
    const CoreType& ty = topo.types[l];
    RankPlace r;
    r.cpus = ty.cpus;
    r.threads = req.threads_per_rank > 0 ? req.threads_per_rank : std::max(1, ty.cores);
    r.type = ty.name;
    where += str_cat(l ? ", " : "", "local rank ", l, " on the ", ty.name, " cores (CPUs ", cpu_list_str(ty.cpus), ", ",
                     r.threads, " threads)");
    p.ranks.push_back(std::move(r));
  }
  p.summary = str_cat("one rank per core type: ", where, "; --hybrid off runs the ranks unpinned");
  return p;
}

}  // namespace nanochat::cluster
