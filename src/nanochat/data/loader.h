#pragma once
// Training/validation batches from parquet shards (nanochat dataloader.py; docs/nanochat.md 5.1, 5.3, 5.4):
//  * shards: sorted *.parquet in the data directory; the last file is validation, the rest train;
//  * rank r of W reads row groups r, r+W, ... of every file, in file order, forever (epochs from 1);
//  * each row group is cut into doc batches of 128, tokenized with BOS prepended;
//  * rows of T+1 tokens are packed BOS-aligned with best fit: the longest buffered doc that fits
//    (first on ties), else the shortest doc cropped to fill the row; >= 1000 docs buffered first;
//  * a prefetch thread keeps a few batches ready so the trainer never waits on tokenization.
// Resume is EXACT (nanochat's is approximate): state() names the stream position and every doc in
// the packing buffer by (file, row group, row), so a loader built from it re-reads and re-tokenizes
// those docs and yields exactly the batches the original would have yielded next.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace nanochat {

class Tokenizer;

/// Reads batch `index` of a val stream of (B, T) batches into inputs and targets, each (B, T) int32
/// row-major, or reads past it when both are null (another rank's batch). Called for index 0, 1, ...
/// in order.
using ValBatchReader = std::function<void(int64_t index, int32_t* inputs, int32_t* targets)>;

namespace data {

/// The files of one split (sorted shards, data/pack.h list_parquet_files): "train" = all but the
/// last file, "val" = the last one. Throws nanochat::Error naming the directory and what to do
/// when it is missing, holds no shard, or has fewer than two shards (no val shard).
std::vector<std::string> split_files(const std::string& dir, const std::string& split);

/// Loader settings.
struct LoaderOptions {
  int B = 1;                    ///< rows per batch (device batch size)
  int T = 2048;                 ///< tokens per row of inputs/targets (rows hold T+1 tokens)
  int rank = 0;                 ///< this rank
  int world_size = 1;           ///< ranks in the job
  std::string split = "train";  ///< "train" or "val"
  std::string data_dir;         ///< folder of shards (see core/paths.h data_dir())
  int doc_batch = 128;          ///< docs per tokenizer batch (nanochat tokenizer_batch_size)
  int buffer_size = 1000;       ///< docs kept in the packing buffer (nanochat buffer_size)
  int tokenizer_threads = 1;    ///< threads for encode_batch inside the loader
  bool prefetch = true;         ///< run packing on a background thread
  int prefetch_depth = 3;       ///< batches kept ready
};

/// Loader states for resuming at another world size (approximate, like nanochat's resume; the
/// same-world-size resume is exact). old_states: state() of every rank of the saving run, in rank
/// order (all of one split and shard list). Returns one state per rank of new_world ranks:
///  * every new rank starts after the furthest (epoch, file, row group) cursor of the old ranks,
///    rank r at row group base + r (stepping new_world), so no document is read twice;
///  * the documents waiting in the old ranks' packing buffers are dealt round-robin to the new
///    ranks, so none of them is lost;
///  * what is skipped: the unread rest of each old rank's current row group and the row groups
///    the slower old ranks had not reached yet (at most about one row group per old rank).
/// Throws nanochat::Error for an empty list, states of different splits/shards, or new_world < 1.
std::vector<nlohmann::json> reshard_loader_states(const std::vector<nlohmann::json>& old_states, int new_world);

/// Infinite stream of (B, T) input/target batches for one rank. Not copyable; one consumer thread.
class DataLoader {
 public:
  /// Opens the split's shards and, if `state` is given (from state()), resumes exactly there.
  /// Throws nanochat::Error for an empty/missing directory, a missing val shard, a split whose
  /// largest file has fewer row groups than ranks, or a state from another job layout.
  DataLoader(const Tokenizer& tok, const LoaderOptions& opt, const nlohmann::json* state = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// The next batch as whole rows: writes (B, T+1) int32 row-major into `rows` (null: the batch is
  /// read past). The rows of the stream do not depend on B (each row is packed on its own), so B
  /// rows of one loader are the same rows as B batches of a loader with B = 1. Rethrows (as
  /// nanochat::Error) any failure of the background thread.
  void next_rows(int32_t* rows);
  /// next_rows() split for the model: inputs and targets, each (B, T) int32 row-major, inputs =
  /// row[0:T], targets = row[1:T+1]. With both null the batch is read past. Throws as next_rows().
  void next(int32_t* inputs, int32_t* targets);
  /// Exact resume point after the batches returned so far: {"version", "split", "rank",
  /// "world_size", "files", "epoch", "pq_idx", "rg_idx", "doc_offset", "buffer": [[pq, rg, row]...]}.
  /// epoch/pq_idx/rg_idx are those of the most recent doc batch pulled (nanochat's log fields).
  nlohmann::json state() const;

  int batch_size() const { return opt_.B; }
  int seq_len() const { return opt_.T; }
  const std::vector<std::string>& files() const;

  struct Impl;

 private:
  struct Batch {
    std::vector<int32_t> rows;  // B * (T+1)
    nlohmann::json state;       // state after producing this batch
  };
  void producer_loop();

  LoaderOptions opt_;
  std::unique_ptr<Impl> impl_;
  nlohmann::json state_;       // state after the last batch returned by next_rows()
  std::vector<int32_t> rows_;  // next()'s batch as rows
  // prefetch
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool stop_ = false;
  std::string error_;
};

}  // namespace data
}  // namespace nanochat
