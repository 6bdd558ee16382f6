#include "nanochat/road/ledger.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/format.h"
#include "nanochat/core/report_log.h"
#include "nanochat/core/zip_store.h"

namespace nanochat::road {

namespace fs = std::filesystem;

namespace {

std::string file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", path, " to check it");
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  uint64_t n = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(in.gcount());
    crc = zip_crc32(crc, buf.data(), got);
    n += got;
  }
  char b[48];
  std::snprintf(b, sizeof b, "%08x %llu", crc, static_cast<unsigned long long>(n));
  return b;
}

}  // namespace

nlohmann::json checksum_outputs(const Stage& s, const std::string& base_dir) {
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& o : s.outputs) {
    std::string path = o.empty() || o[0] == '/' ? o : base_dir + "/" + o;
    std::string suffix;  // "<folder>/*<suffix>": the folder's files ending so
    if (const size_t star = path.find("/*"); star != std::string::npos) {
      suffix = path.substr(star + 2);
      path.erase(star);
    }
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      out[o] = file_checksum(path);
      continue;
    }
    if (!fs::is_directory(path, ec)) continue;  // missing: recorded as absent, so a later one differs
    std::string step_mark;
    if (o == s.checkpoint_dir) {
      const auto last = last_complete_step(path);
      if (!last) continue;
      step_mark = step6(*last);
    }
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (const std::string n = e.path().filename().string();
          e.is_regular_file() && (step_mark.empty() || n.find(step_mark) != std::string::npos) &&
          (suffix.empty() ||
           (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)))
        names.push_back(n);
    std::sort(names.begin(), names.end());
    const std::string shown = suffix.empty() ? o : o.substr(0, o.find("/*"));
    for (const auto& n : names) out[shown + "/" + n] = file_checksum(path + "/" + n);
  }
  return out;
}

Ledger::Ledger(std::string path) : path_(std::move(path)), j_(nlohmann::json::object()) {
  std::error_code ec;
  if (fs::exists(path_, ec)) {
    try {
      j_ = nlohmann::json::parse(read_file(path_));
    } catch (const std::exception& e) {
      std::printf("speedrun: %s is not readable (%s); starting the road afresh\n", path_.c_str(), e.what());
      j_ = nlohmann::json::object();
    }
  }
  if (!j_.is_object()) j_ = nlohmann::json::object();
  if (!j_.contains("stages") || !j_["stages"].is_object()) j_["stages"] = nlohmann::json::object();
}

const nlohmann::json& Ledger::stage(const std::string& id) const {
  static const nlohmann::json none = nlohmann::json::object();
  const auto& st = j_["stages"];
  return st.contains(id) ? st[id] : none;
}

std::string Ledger::why_run(const Stage& s, const std::string& base_dir) const {
  const nlohmann::json& r = stage(s.id);
  if (r.empty()) return "not run yet";
  if (r.value("commands", nlohmann::json()) != nlohmann::json(s.commands))
    return "its commands changed since it ran (flags, or what the road found in the base folder)";
  if (r.value("status", "") != "done") return "it did not finish";
  const nlohmann::json now = checksum_outputs(s, base_dir);
  const nlohmann::json& was = r["outputs"];
  for (const auto& [path, sum] : was.items())
    if (!now.contains(path))
      return str_cat(path, " is gone");
    else if (now[path] != sum)
      return str_cat(path, " changed since it was made");
  for (const auto& [path, sum] : now.items())
    if (!was.contains(path)) return str_cat(path, " is new");
  return "";
}

bool Ledger::interrupted(const Stage& s) const {
  const nlohmann::json& r = stage(s.id);
  return !r.empty() && r.value("status", "") == "running" &&
         r.value("commands", nlohmann::json()) == nlohmann::json(s.commands);
}

void Ledger::started(const Stage& s, bool resuming) {
  nlohmann::json& r = j_["stages"][s.id];
  const int runs = r.is_object() ? r.value("runs", 0) : 0;
  const double before = resuming && r.is_object() ? r.value("seconds_before", 0.0) + r.value("elapsed", 0.0) : 0.0;
  r = nlohmann::json::object();
  if (before > 0) r["seconds_before"] = before;
  r["commands"] = s.commands;
  r["status"] = "running";
  r["started"] = local_timestamp();
  r["runs"] = runs + 1;
  save();
}

void Ledger::progress(const std::string& id, double seconds) {
  j_["stages"][id]["elapsed"] = seconds;
  save();
}

void Ledger::finished(const Stage& s, double seconds, const std::string& base_dir) {
  nlohmann::json& r = j_["stages"][s.id];
  r["status"] = "done";
  r["finished"] = local_timestamp();
  r["seconds"] = r.value("seconds_before", 0.0) + seconds;
  r.erase("elapsed");
  r["outputs"] = checksum_outputs(s, base_dir);
  save();
}

void Ledger::forget(const std::string& id) {
  j_["stages"].erase(id);
  save();
}

void Ledger::save() const { write_file_atomic(path_, j_.dump(2) + "\n"); }

}  // namespace nanochat::road
