#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/checkpoint/legacy.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <zlib.h>

#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/format.h"

namespace fs = std::filesystem;

namespace nanochat {

std::string CheckpointPaths::model() const { return dir + "/model_" + step6(step) + ".safetensors"; }
std::string CheckpointPaths::meta() const { return dir + "/meta_" + step6(step) + ".json"; }
std::string CheckpointPaths::optim(int rank) const {
  return dir + "/optim_" + step6(step) + "_rank" + std::to_string(rank) + ".safetensors";
}
std::string CheckpointPaths::marker() const { return dir + "/complete_" + step6(step); }

void write_safetensors_atomic(const std::string& path, const std::vector<StWriteEntry>& entries,
                              const std::map<std::string, std::string>& metadata) {
  const std::string tmp = atomic_tmp_name(path);
  save_safetensors(tmp, entries, metadata);
  rename_into_place(tmp, path);
}

size_t remove_stale_checkpoint_tmp(const std::string& dir) {
  size_t removed = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos) continue;
    const char* digits = name.c_str() + at + 5;
    char* end = nullptr;
    const long pid = std::strtol(digits, &end, 10);
    if (end == digits || *end != '.' || pid <= 0 || pid == static_cast<long>(::getpid())) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its writer may still be at work
    std::error_code rm;
    if (fs::remove(e.path(), rm)) ++removed;
  }
  return removed;
}

void begin_checkpoint(const CheckpointPaths& p) {
  std::error_code ec;
  fs::create_directories(p.dir, ec);
  if (ec) fail("cannot create checkpoint directory ", p.dir, ": ", ec.message());
  remove_stale_checkpoint_tmp(p.dir);
  // Other ranks sharing this directory may remove the same marker at the same moment.
  if (fs::remove(p.marker(), ec)) fsync_dir(p.dir);
  if (ec) fail("cannot remove ", p.marker(), ": ", ec.message());
}

void finish_checkpoint(const CheckpointPaths& p, const nlohmann::json& crcs, int world_size) {
  const nlohmann::json marker = {{"step", p.step}, {"world_size", world_size}, {"crc32", crcs}};
  write_file_atomic(p.marker(), marker.dump() + "\n");
}

uint32_t bytes_crc32(const void* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes at most uInt bytes per call
    const uInt k = static_cast<uInt>(std::min<size_t>(n, size_t{1} << 30));
    crc = crc32(crc, p, k);
    p += k;
    n -= k;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t file_crc32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read ", path, ": ", std::strerror(errno));
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = f.gcount();
    if (n > 0) crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
  }
  if (f.bad()) fail("cannot read ", path, ": I/O error");
  return static_cast<uint32_t>(crc);
}

std::vector<int64_t> complete_checkpoint_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t s = parse_suffix_number(e.path().filename().string(), "complete_");
    if (s >= 0) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> last_complete_step(const std::string& dir) {
  auto s = complete_checkpoint_steps(dir);
  if (s.empty()) return std::nullopt;
  return s.back();
}

namespace {
// Throws when step S has no completion marker, listing the complete steps.
void require_complete(const CheckpointPaths& p) {
  if (fs::exists(p.marker())) return;
  auto steps = complete_checkpoint_steps(p.dir);
  std::string have;
  for (auto s : steps) have += (have.empty() ? "" : ", ") + std::to_string(s);
  fail("no complete checkpoint for step ", p.step, " in ", p.dir,
       have.empty()
           ? std::string(" (the directory has none)")
           : " (complete steps: " + have +
                 "); pass one of them to --resume-from-step (base-train) or -s/--step (base-eval, sample, chat)");
}

std::string hex32(uint64_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08llx", static_cast<unsigned long long>(v));
  return b;
}
}  // namespace

nlohmann::json read_checkpoint_meta(const CheckpointPaths& p) {
  require_complete(p);
  std::ifstream f(p.meta());
  if (!f) fail("cannot read ", p.meta(), ": ", std::strerror(errno));
  try {
    return nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("checkpoint meta ", p.meta(), " is not valid JSON: ", e.what());
  }
}

nlohmann::json read_checkpoint_marker(const CheckpointPaths& p) {
  require_complete(p);
  const std::string text = read_file(p.marker());
  if (is_pre_checksum_marker(text)) return nlohmann::json::object();  // checkpoint/legacy.h
  try {
    nlohmann::json m = nlohmann::json::parse(text);
    if (!m.is_object() || !m.value("crc32", nlohmann::json()).is_object()) fail("no crc32 table");
    return m;
  } catch (const std::exception& e) {
    fail("checkpoint marker ", p.marker(), " is damaged (", e.what(), "); treat step ", p.step, " as incomplete");
  }
}

std::string check_checkpoint_file(const nlohmann::json& marker, const std::string& path) {
  const auto table = marker.find("crc32");
  if (table == marker.end()) return "";
  const auto want = table->find(fs::path(path).filename().string());
  if (want == table->end()) return "";
  if (!fs::exists(path)) return "checkpoint file " + path + " is missing";
  uint32_t got = 0;
  try {
    got = file_crc32(path);
  } catch (const Error& e) {
    return std::string("checkpoint file ") + path + " is unreadable: " + e.what();
  }
  std::string recorded;
  for (const auto& v : want->is_array() ? *want : nlohmann::json::array({*want})) {
    if (v.get<uint64_t>() == got) return "";
    recorded += (recorded.empty() ? "" : " or ") + hex32(v.get<uint64_t>());
  }
  return "checkpoint file " + path + " is corrupt: its CRC32 is " + hex32(got) + " but " + recorded +
         " was recorded when it was saved";
}

std::optional<int64_t> newest_intact_step(
    const std::string& dir, int64_t except,
    const std::function<std::vector<std::string>(const CheckpointPaths&)>& files_of) {
  auto steps = complete_checkpoint_steps(dir);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it == except) continue;
    const CheckpointPaths cp{dir, *it};
    try {
      const nlohmann::json marker = read_checkpoint_marker(cp);
      bool intact = true;
      for (const auto& f : files_of(cp)) intact = intact && check_checkpoint_file(marker, f).empty();
      if (intact) return *it;
    } catch (const std::exception&) {  // unreadable or malformed marker
    }
  }
  return std::nullopt;
}

}  // namespace nanochat
