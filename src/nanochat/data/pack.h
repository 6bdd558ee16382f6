#pragma once
// `nanochat data pack` and `nanochat data inspect`: turn text / JSONL files into shuffled shards in
// nanochat's layout (docs/nanochat.md 5.2), and describe a shard.
#include <cstdint>
#include <string>
#include <vector>

namespace nanochat::data {

/// Options of pack_corpus (the CLI flags of `nanochat data pack`).
struct PackOptions {
  std::vector<std::string> inputs;  // files or directories (walked recursively, sorted)
  std::string out_dir;
  int64_t shard_chars = 250'000'000;  // a train shard closes at >= this many characters ...
  int64_t val_docs = 1024;            // documents in the validation shard (the last file)
  uint64_t seed = 42;                 // shuffle seed
  std::string split = "doc";          // text files: "doc" (one per file) or "paragraphs"
  bool force = false;                 // allow an --out that already holds .parquet files
  int row_group_size = 1024;
  bool quiet = false;
};

/// What pack_corpus wrote.
struct PackResult {
  int64_t docs = 0, chars = 0;            // all documents (characters = Unicode code points)
  int64_t skipped = 0;                    // empty documents dropped, JSONL nulls
  int64_t replaced_utf8 = 0;              // invalid UTF-8 sequences replaced by U+FFFD
  std::vector<std::string> train_shards;  // paths, in order
  std::vector<int64_t> train_docs;        // documents per train shard
  std::string val_shard;
  int64_t val_docs = 0;
};

/// Reads documents from the inputs, shuffles them (seed), writes train shards
/// shard_00000.parquet ... and the validation shard (the next index, so it sorts last) into
/// out_dir. Inputs: *.jsonl / *.json = one JSON object per line with a string "text" (other keys
/// ignored; empty lines skipped); anything else = UTF-8 text, one document per file or, with
/// split = "paragraphs", one per blank-line-separated paragraph. Empty documents are dropped.
/// Sharding follows nanochat's rule: a train shard closes once it holds >= shard_chars characters
/// AND a multiple of 1024 documents. Documents left over at the end (fewer than shard_chars
/// characters or not a multiple of 1024) are NOT dropped: they are appended to the last train
/// shard (or form the only one), so only that shard may have a short final row group.
/// Throws nanochat::Error naming the file / flag for unreadable inputs, bad JSON (with its line),
/// too few documents for val_docs, or an out_dir that already holds shards (unless force).
PackResult pack_corpus(const PackOptions& opt);

/// A human-readable description of a Parquet file: size, writer, schema, codec, encodings, every
/// row group (rows, compressed/uncompressed bytes), total rows and a preview of the first
/// document (at most preview_chars characters, newlines shown as \n).
std::string inspect_parquet(const std::string& path, int preview_chars = 200);

/// Sorted paths of the *.parquet files directly in dir (".tmp" partial downloads excluded).
/// Throws nanochat::Error naming dir when it does not exist or cannot be listed.
std::vector<std::string> list_parquet_files(const std::string& dir);

/// Counts Unicode code points of UTF-8 text (bytes that are not continuation bytes).
int64_t utf8_length(const std::string& s);

/// Returns s with every invalid UTF-8 sequence replaced by U+FFFD; adds their number to *replaced.
std::string sanitize_utf8(const std::string& s, int64_t* replaced);

}  // namespace nanochat::data
