// Whole-file reads and the atomic write (core/file_io.h): bytes round-trip exactly (zeros and
// high bytes included), a rewrite replaces the file and leaves no temporary file, and failures
// name the path (and the hint) instead of returning partial data.
#include "nanochat/core/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "nanochat/core/error.h"

namespace fs = std::filesystem;
using namespace nanochat;
using ::testing::HasSubstr;

namespace {
fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / (name + "." + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(FileIo, AtomicWriteRoundTripsBytesAndLeavesNoTemporaryFile) {
  const fs::path d = fresh_dir("nc_file_io_roundtrip");
  const std::string path = (d / "blob.bin").string();
  std::string bytes;
  for (int i = 0; i < 70000; ++i) bytes.push_back(static_cast<char>((i * 131) & 0xff));  // zeros and bytes >= 0x80
  write_file_atomic(path, bytes);
  write_file_atomic(path, "second version\n");  // a rewrite replaces the whole file
  std::ifstream in(path, std::ios::binary);
  const std::string seen((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(seen, "second version\n");
  write_file_atomic(path, bytes);
  EXPECT_EQ(read_file(path), bytes);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(d)) {
    ++entries;
    EXPECT_EQ(e.path().filename().string(), "blob.bin");
  }
  EXPECT_EQ(entries, 1);
  fs::remove_all(d);
}

TEST(FileIo, TemporaryNamesAreUniquePerCallAndCarryThePid) {
  const std::string a = atomic_tmp_name("/x/f.json");
  const std::string b = atomic_tmp_name("/x/f.json");
  EXPECT_NE(a, b);
  EXPECT_THAT(a, HasSubstr("/x/f.json.tmp." + std::to_string(::getpid()) + "."));
}

TEST(FileIo, MissingFileIsAnErrorNamingThePathAndTheHint) {
  const std::string path = (fresh_dir("nc_file_io_missing") / "absent.txt").string();
  try {
    read_file(path, "train one first");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("No such file"));
    EXPECT_THAT(e.what(), HasSubstr("; train one first"));
  }
}

TEST(FileIo, WriteIntoAMissingDirectoryIsAnErrorNamingThePath) {
  const std::string path = (fresh_dir("nc_file_io_nodir") / "no" / "such" / "f.txt").string();
  try {
    write_file_atomic(path, "x");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
  EXPECT_FALSE(fs::exists(path));
}
