#include "nanochat/data/manifest.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "nanochat/data/loader.h"
#include "nanochat/data/parquet.h"
#include "nanochat/data/verify.h"

namespace nanochat::data {

std::string shard_manifest(const std::string& dir) {
  std::vector<std::pair<std::string, const char*>> files;  // (path, split)
  for (const char* split : {"train", "val"})
    for (const auto& f : split_files(dir, split)) files.emplace_back(f, split);
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(f.first);
  const std::vector<uint32_t> crcs = content_crc32s(dir, paths);
  nlohmann::json m = nlohmann::json::object();
  for (size_t i = 0; i < files.size(); ++i) {
    ParquetReader r(files[i].first);
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", crcs[i]);
    m[std::filesystem::path(files[i].first).filename().string()] = {
        {"split", files[i].second}, {"bytes", r.file_size()}, {"row_groups", r.num_row_groups()}, {"crc32", hex}};
  }
  return m.dump();
}

}  // namespace nanochat::data
