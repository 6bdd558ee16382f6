#include "nanochat/core/paths.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "nanochat/core/error.h"

namespace nanochat {

std::string base_dir() {
  std::string dir;
  if (const char* e = std::getenv("NANOCHAT_BASE_DIR"); e && *e) {
    dir = e;
  } else {
    const char* home = std::getenv("HOME");
    if (!home || !*home) fail("neither NANOCHAT_BASE_DIR nor HOME is set; set NANOCHAT_BASE_DIR to a writable folder");
    dir = std::string(home) + "/.cache/nanochat";
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create the base directory ", dir, " (NANOCHAT_BASE_DIR): ", ec.message());
  return dir;
}

std::string data_dir() {
  if (const char* e = std::getenv("NANOCHAT_DATA_DIR"); e && *e) return e;
  return base_dir() + "/base_data_climbmix";
}

std::string tokenizer_dir() { return base_dir() + "/tokenizer"; }

std::string self_executable() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec || p.empty() ? std::string("/proc/self/exe") : p.string();
}

}  // namespace nanochat
