#pragma once
// Helpers for the CLI end-to-end tests: a temporary NANOCHAT_BASE_DIR with real shards (the
// Pride and Prejudice sample) and a small tokenizer, running the binary, reading metrics.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "nanochat/data/parquet.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "support/proc_util.h"

namespace nctest {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace nanochat;

// A base dir with three shards of real text and a 512-token tokenizer trained on it.
struct BaseDir {
  std::string dir;
  /// variant != 0 drops the first `variant` documents (different shards, same tokenizer).
  explicit BaseDir(const std::string& name, int variant = 0) {
    dir = (fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();  // unique per process
    fs::remove_all(dir);
    fs::create_directories(dir + "/base_data_climbmix");
    data::ParquetReader r(std::string(NANOCHAT_TEST_DATA) + "/parquet/sample.parquet");
    std::vector<std::string> docs;
    for (int i = 0; i < r.num_row_groups(); ++i) {
      auto g = r.read_row_group(i);
      docs.insert(docs.end(), g.begin(), g.end());
    }
    std::vector<std::string> tok_docs(docs.begin(), docs.begin() + 600);
    docs.erase(docs.begin(), docs.begin() + variant);
    for (int f = 0; f < 3; ++f) {
      data::ParquetWriter w(dir + "/base_data_climbmix/shard_0000" + std::to_string(f) + ".parquet", 128);
      for (size_t i = f * docs.size() / 3; i < (f + 1) * docs.size() / 3; ++i) w.write(docs[i]);
      w.close();
    }
    Tokenizer::train(tok_docs, 512).save(dir + "/tokenizer");
  }
  ~BaseDir() { fs::remove_all(dir); }
  std::string ckpt(const std::string& tag = "t") const { return dir + "/base_checkpoints/" + tag; }
};

// A fresh, empty folder (e.g. the NANOCHAT_BASE_DIR of a node that holds nothing), removed at the end.
struct EmptyDir {
  std::string dir;
  explicit EmptyDir(const std::string& name) {
    dir = (fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~EmptyDir() { fs::remove_all(dir); }
  /// The names in it now, except the machine's FMA-peak cache every run may write.
  std::vector<std::string> contents() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename() != "fma_peak.json") out.push_back(e.path().filename().string());
    return out;
  }
};

/// Flips the byte 5 before the end of row group `rg`'s text chunk of the shard at `path` (its page
/// CRC then fails) and moves its mtime 2 s on (so a cached check sees a changed file).
inline void corrupt_row_group(const std::string& path, int rg) {
  int64_t at;
  {
    data::ParquetReader r(path);
    if (r.num_row_groups() <= rg) throw std::runtime_error(path + " has no row group " + std::to_string(rg));
    const auto& c = r.row_group(rg).text;
    at = c.start + c.total_compressed_size - 5;
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char ch = 0;
  f.read(&ch, 1);
  ch = static_cast<char>(ch ^ 0x5a);
  f.seekp(at);
  f.write(&ch, 1);
  f.close();
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(2));
}

inline const char* kTiny =
    " base-train --depth 2 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 256 --eval-every 3 --eval-tokens 256 --sample-every -1"
    " --core-metric-every -1 --threads 1 --model-tag t";

struct Result {
  int code;
  std::string out;
};

/// Runs the binary with NANOCHAT_BASE_DIR=b.dir (and extra environment `env`), bounded by 300 s.
inline Result run(const BaseDir& b, const std::string& args, const std::string& env = "") {
  auto [code, out] = nctest::shell("NANOCHAT_BASE_DIR=" + b.dir + " " + env + " timeout 300 " + NANOCHAT_BINARY + args);
  return {code, out};
}

inline std::map<int64_t, double> losses(const std::string& metrics) {
  std::map<int64_t, double> m;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    if (j.contains("loss")) m[j["step"]] = j["loss"];
  }
  return m;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// A TCP port that was free a moment ago on 127.0.0.1.
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace nctest
