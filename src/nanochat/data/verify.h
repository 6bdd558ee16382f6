#pragma once
// Shard check: decode every page of every row group of parquet shards up front, so a corrupt
// page is found before training starts rather than when the loader reaches it hours later.
//
// verify_shards() runs ParquetReader::read_row_group() — the loader's own decoder — on every
// (file, row group) over a pool of threads: page CRCs are checked where the page headers carry
// them (nanochat.cpp's writer always writes them), every page is decompressed and decoded with
// sizes, value counts, levels and offsets bounds-checked. Progress goes to stderr (a bar on a
// terminal, a line every few seconds otherwise).
//
// A manifest, "<data dir>/.nanochat_verified.json", records each checked shard by file name,
// size, modification time (ns) and a CRC-32 of its first 4 KiB and its footer: a shard
// whose record matches is not checked again, a changed one is. Corrupt shards are recorded too,
// so the other ranks of a job report the same error at once. check_training_shards() is the
// entry point of base-train; `nanochat data verify` uses verify_shards() + record_results().
//
// content_crc32s() hashes every byte of shards for the start-up agreement's data manifest
// (data/manifest.h), cached next to the check's manifest in "<data dir>/.nanochat_content.json".
//
// Errors: nanochat::Error naming the file, the row group, the page and what to do (re-download
// or re-pack the shard).
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/data/parquet.h"

namespace nanochat::data {

/// What verify_shards found in one file.
struct ShardCheck {
  std::string path;
  bool ok = true;
  std::string error;   // when !ok: the first failure (lowest row group), naming file, row group, page
  int row_groups = 0;  // row groups in the footer (0 when the footer itself is unreadable)
  PageStats stats;     // summed over the row groups checked
  // The file as it was checked (the manifest's key besides its name): size, mtime and a CRC-32
  // of its first 4 KiB and of its footer.
  int64_t size = -1;
  int64_t mtime_ns = 0;
  uint32_t fingerprint = 0;
};

/// Settings of verify_shards.
struct VerifyOptions {
  int threads = 0;       // worker threads; 0 = the hardware's thread count
  bool progress = true;  // progress bar/lines on stderr
};

/// Checks every row group of every file (see the file comment) on opt.threads threads. Never
/// throws for a corrupt or unreadable file: its ShardCheck has ok = false and the error (the
/// message already names the file and row group). Results are in the order of `files`.
std::vector<ShardCheck> verify_shards(const std::vector<std::string>& files, const VerifyOptions& opt = {});

/// "<dir>/.nanochat_verified.json", the manifest of the shards in dir.
std::string verified_manifest_path(const std::string& dir);

/// Records results in the manifest of each file's directory (written atomically). Returns false
/// (and leaves the manifest alone) when a directory is not writable; never throws for that.
bool record_results(const std::vector<ShardCheck>& results);

/// The advice appended to a corrupt shard's error (what to do about it).
std::string corrupt_shard_advice(const std::string& path);

/// Start-up check of base-train: the train and val shards of `dir` (data/loader.h split_files)
/// that the manifest does not list as checked in their current state are checked, and the
/// results recorded. Processes sharing `dir` (the ranks of a node) take turns through a lock
/// file, so one checks while the others wait and then find the manifest up to date; a waiting
/// process prints what it waits for after 5 s and then every 30 s, and gives up after $NANOCHAT_DATA_CHECK_WAIT_S
/// (default 3600) seconds. skip = true (--skip-data-check) checks nothing. leader: this process
/// prints the "already checked" / "skipped" lines (rank 0). Throws nanochat::Error naming every
/// corrupt shard, its row group and page and what to do, before any training step.
void check_training_shards(const std::string& dir, bool skip, bool leader);

/// "<dir>/.nanochat_content.json", the cache of content_crc32s for the shards in dir.
std::string content_cache_path(const std::string& dir);

/// zlib CRC-32 of all the bytes of each of `files` (paths in `dir`), in the order of `files`: what
/// the start-up agreement compares so that shards of the same size with other bytes are caught.
/// Files are read in parallel (one thread per hardware thread, about 1 GB/s each); results are cached in
/// content_cache_path(dir) by file name with size, mtime (ns) and the fingerprint the data check
/// uses, so an unchanged shard is read only once. Processes sharing `dir` take turns through the
/// data check's lock file (the others then find the cache up to date); a read-only directory
/// means hashing at every call. Prints one line to stderr when it hashed anything. Throws
/// nanochat::Error naming a file that cannot be opened or read.
std::vector<uint32_t> content_crc32s(const std::string& dir, const std::vector<std::string>& files);

}  // namespace nanochat::data
