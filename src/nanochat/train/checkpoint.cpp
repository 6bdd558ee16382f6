#include "nanochat/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"

namespace fs = std::filesystem;

namespace nanochat {

namespace {
std::string step6(int64_t s) {
  char b[32];
  std::snprintf(b, sizeof b, "%06lld", static_cast<long long>(s));
  return b;
}
std::string tmp_name(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}
void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail("cannot open checkpoint directory ", dir, ": ", std::strerror(errno));
  ::fsync(fd);
  ::close(fd);
}
void rename_into_place(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
  fsync_dir(fs::path(path).parent_path().string());
}
}  // namespace

std::string CheckpointPaths::model() const { return dir + "/model_" + step6(step) + ".safetensors"; }
std::string CheckpointPaths::meta() const { return dir + "/meta_" + step6(step) + ".json"; }
std::string CheckpointPaths::optim(int rank) const {
  return dir + "/optim_" + step6(step) + "_rank" + std::to_string(rank) + ".safetensors";
}
std::string CheckpointPaths::marker() const { return dir + "/complete_" + step6(step); }

void write_safetensors_atomic(const std::string& path, const std::vector<StWriteEntry>& entries,
                              const std::map<std::string, std::string>& metadata) {
  const std::string tmp = tmp_name(path);
  save_safetensors(tmp, entries, metadata);
  rename_into_place(tmp, path);
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = tmp_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("cannot write ", tmp, ": ", std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      fail("write to ", tmp, " failed: ", std::strerror(e));
    }
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail("cannot flush ", tmp, ": ", std::strerror(errno));
  rename_into_place(tmp, path);
}

void begin_checkpoint(const CheckpointPaths& p) {
  std::error_code ec;
  fs::create_directories(p.dir, ec);
  if (ec) fail("cannot create checkpoint directory ", p.dir, ": ", ec.message());
  if (fs::exists(p.marker())) {
    fs::remove(p.marker(), ec);
    if (ec) fail("cannot remove ", p.marker(), ": ", ec.message());
    fsync_dir(p.dir);
  }
}

void finish_checkpoint(const CheckpointPaths& p) { write_text_atomic(p.marker(), "ok\n"); }

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

nlohmann::json read_checkpoint_meta(const CheckpointPaths& p) {
  if (!fs::exists(p.marker())) {
    auto steps = complete_checkpoint_steps(p.dir);
    std::string have;
    for (auto s : steps) have += (have.empty() ? "" : ", ") + std::to_string(s);
    fail("no complete checkpoint for step ", p.step, " in ", p.dir,
         have.empty() ? std::string(" (the directory has none)")
                      : " (complete steps: " + have + "); pass one of them to --resume-from-step (base-train) or -s/--step (base-eval, sample, chat)");
  }
  std::ifstream f(p.meta());
  if (!f) fail("cannot read ", p.meta(), ": ", std::strerror(errno));
  try {
    return nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("checkpoint meta ", p.meta(), " is not valid JSON: ", e.what());
  }
}

}  // namespace nanochat
