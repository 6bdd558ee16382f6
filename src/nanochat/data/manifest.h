#pragma once
// A summary of a data directory's shards that ranks compare at start-up: ranks of one job must
// train on the same data, but their data directories may live on different nodes, under
// different paths. The summary describes the files' content only, never the directory's path.
#include <string>

namespace nanochat::data {

/// JSON object (dumped) keyed by shard file name: {"split": "train"|"val", "bytes": file size,
/// "row_groups": count, "crc32": zlib CRC-32 of every byte, 8 hex digits} for every shard of both
/// splits of `dir` (data/loader.h split_files). Keyed by name so that a comparison lists exactly
/// the files that differ. The CRC-32s come from data/verify.h content_crc32s (read once, then
/// cached in "<dir>/.nanochat_content.json"). Throws nanochat::Error as split_files,
/// ParquetReader and content_crc32s do (missing directory, no val shard, unreadable file).
std::string shard_manifest(const std::string& dir);

}  // namespace nanochat::data
