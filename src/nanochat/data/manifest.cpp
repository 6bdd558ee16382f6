#include "nanochat/data/manifest.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "nanochat/data/loader.h"
#include "nanochat/data/parquet.h"

namespace nanochat::data {

std::string shard_manifest(const std::string& dir) {
  nlohmann::json m = nlohmann::json::object();
  for (const char* split : {"train", "val"})
    for (const auto& f : split_files(dir, split)) {
      ParquetReader r(f);
      m[std::filesystem::path(f).filename().string()] = {
          {"split", split}, {"bytes", r.file_size()}, {"row_groups", r.num_row_groups()}};
    }
  return m.dump();
}

}  // namespace nanochat::data
