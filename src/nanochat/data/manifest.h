#pragma once
// A summary of a data directory's shards that ranks compare at start-up: ranks of one job must
// train on the same data, but their data directories may live on different nodes.
#include <string>

namespace nanochat::data {

/// JSON object (dumped) keyed by shard file name: {"split": "train"|"val", "bytes": file size,
/// "row_groups": count} for every shard of both splits of `dir` (data/loader.h split_files).
/// Keyed by name so that a comparison lists exactly the files that differ. Throws nanochat::Error
/// as split_files and ParquetReader do (missing directory, no val shard, unreadable footer).
std::string shard_manifest(const std::string& dir);

}  // namespace nanochat::data
