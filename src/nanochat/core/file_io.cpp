#include "nanochat/core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nanochat/core/error.h"

namespace nanochat {

std::string read_file(const std::string& path, std::string_view hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    fail("cannot read ", path, ": ", std::strerror(e), hint.empty() ? "" : "; ", hint);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("cannot read ", path, ": read error", hint.empty() ? "" : "; ", hint);
  return std::move(ss).str();
}

std::string atomic_tmp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail("cannot open directory ", dir, ": ", std::strerror(errno));
  ::fsync(fd);
  ::close(fd);
}

void rename_into_place(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
  fsync_dir(std::filesystem::path(path).parent_path().string());
}

void write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = atomic_tmp_name(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    fail("cannot write ", path, " (as ", tmp, "): ", std::strerror(errno),
         "; check that the directory exists and is writable");
  auto give_up = [&](const char* what, int e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(what, " ", path, " (as ", tmp, ") failed: ", std::strerror(e), "; is the disk full?");
  };
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      give_up("writing", errno);
    }
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) give_up("flushing", errno);
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail("flushing ", path, " (as ", tmp, ") failed: ", std::strerror(e), "; is the disk full?");
  }
  rename_into_place(tmp, path);
}

}  // namespace nanochat
