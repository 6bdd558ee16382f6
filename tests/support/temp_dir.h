#pragma once
// A fresh folder under the system's temporary directory for one test (the process id in its name:
// ctest runs tests in parallel processes), removed with everything in it at the end.
#include <unistd.h>

#include <filesystem>
#include <string>

namespace nctest {

struct TempDir {
  std::string dir;
  explicit TempDir(const std::string& name) {
    namespace fs = std::filesystem;
    dir = (fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() { std::filesystem::remove_all(dir); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace nctest
