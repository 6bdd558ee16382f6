#pragma once
// Where a rank's training rows and validation batches come from (docs/architecture.md 3.14, 7.11):
//  * local: the rank reads the one-rank data stream itself (one process, or --local-data, where
//    every node holds the same shards);
//  * served by node 0 (the default with several ranks): rank 0 reads the stream once and sends
//    each step's rows ahead of time, and each validation batch to the rank that evaluates it, over
//    the data feed (feed/feed_link.h); the other ranks need no shards and no tokenizer files.
// Either way every rank gets the same rows for a step, in stream order, and takes its own by the
// split of train/balance.h, so the result does not depend on the mode, the split or the world size.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/data/loader.h"

namespace nanochat {

class Communicator;
class Tokenizer;
struct TrainPlan;
namespace feed {
class FeedServer;
class FeedClient;
}  // namespace feed

/// The rows of one optimizer step.
struct StepRows {
  int64_t step = -1;
  /// (R, T+1) int32 row-major, R = total batch / T, in stream order. A token < 0 is ~id: its id
  /// is ~token and, as a target, it is not trained (chat-sft's mask, train/sft_data.h); base-train's
  /// rows hold ids only.
  std::vector<int32_t> rows;
  nlohmann::json loader_state;  ///< the train loader's state after these rows (what a checkpoint stores)
  /// The stream ends the run before this step: it is the last step and is not trained (chat-sft's
  /// end of the epoch, or its --num-iterations); base-train's streams never set it.
  bool end = false;
  /// chat-sft: the progress (0..1) its LR schedule uses at this step; -1 = not given.
  double progress = -1;
};

/// Rows (n, T+1) into inputs = row[0:T] and targets = row[1:T+1], each (n, T) row-major. A
/// masked token ~id (< 0) becomes id as an input and -1 (not trained) as a target.
void split_rows(const int32_t* rows, int64_t n, int T, int32_t* inputs, int32_t* targets);

/// The one stream of a job's training rows and validation batches, read where the data is (the
/// only process, rank 0 of a served job, or every rank with --local-data). Base-train's reads the
/// token shards (data/loader.h); chat-sft's packs conversations (train/sft_data.h).
class RowStream {
 public:
  virtual ~RowStream() = default;
  /// The rows of `step` (asked for in order, each once) with the state after them. Throws
  /// nanochat::Error for a data error.
  virtual StepRows next_step(int64_t step) = 0;
  /// The state before the next step (what resumes the stream exactly).
  virtual nlohmann::json state() const = 0;
  /// The val stream from its start: each call of the function writes its next B rows of T+1 tokens.
  virtual std::function<void(int32_t* rows)> val_rows(int B) = 0;
};

/// Makes the stream, continuing from `state` (null = the start). Called once, on the rank that reads
/// the data.
using RowStreamFactory = std::function<std::unique_ptr<RowStream>(const nlohmann::json* state)>;

/// base-train's stream: the one-rank token stream of the train shards (data::DataLoader, B = 1,
/// BOS best-fit rows), plan.rows_per_step() rows a step, and the val shard's stream.
RowStreamFactory token_row_stream(const Tokenizer& tok, const TrainPlan& plan);

/// One rank's supply of training rows and validation batches.
class StepSource {
 public:
  virtual ~StepSource() = default;
  /// The rows of `step`. Steps are asked for in order, each once, from the first step of the run.
  /// Throws nanochat::Error for a data error (served: rank 0's message, on every rank), a lost data
  /// connection, or a wait past its deadline.
  virtual StepRows next(int64_t step) = 0;
  /// The loader state before the first step (what a save before any step stores).
  virtual const nlohmann::json& initial_state() const = 0;
  /// A reader for one evaluation (evaluate_bpb): the val stream of (B, T) batches from its start.
  virtual ValBatchReader val_reader(int B) = 0;
};

/// The data feed of a job whose data node 0 serves; both null when this rank reads its own data
/// (one process, or --local-data).
struct DataFeed {
  std::unique_ptr<feed::FeedServer> server;  ///< rank 0
  std::unique_ptr<feed::FeedClient> client;  ///< the other ranks
  DataFeed();
  DataFeed(DataFeed&&) noexcept;
  ~DataFeed();
  /// Rank 0 of a served job: the port it serves on (else 0).
  int port() const;
  /// Rank 0 of a served job: sends `error` to every worker, which prints it (else nothing). Never throws.
  void tell_workers(const std::string& error) noexcept;
  /// Rank `peer` left the job (Communicator::on_peer_lost, `why` names it): rank 0 drops its
  /// connection (a send to it fails at once); a worker that lost rank 0 stops waiting for its
  /// frames (they throw `why`). Never throws.
  void peer_lost(int peer, const std::string& why) noexcept;
};

/// Collective. With several ranks the ranks first agree on the data source ("data source": a rank
/// with --local-data and one without both stop naming it), then, unless `local_data`, open the
/// feed's connections (feed/feed_link.h; NANOCHAT_STARTUP_TIMEOUT). Throws nanochat::Error.
DataFeed open_data_feed(Communicator& comm, bool local_data);

/// The tokenizer: from tokenizer_dir(); rank 0 of a served job also sends it to every worker,
/// and a worker takes it from rank 0 (checked against the hash sent with it). Throws
/// nanochat::Error naming the folder (or rank 0's message on a worker).
Tokenizer load_tokenizer(DataFeed& feed);

/// This rank's step source, the first step being `first_step`: the stream `make_stream` makes, read
/// here (local, or rank 0 of a served job, which then reads and sends the steps first_step ..
/// plan.num_iterations - 1, or up to the one that ends the stream, at most 3 steps ahead) or
/// received from rank 0 (a worker, which waits NANOCHAT_STARTUP_TIMEOUT for rank 0's initial
/// loader state; make_stream is not called there). `state`: the loader state to resume from
/// (null: the start; unused on a worker). A read error on rank 0 (a corrupt shard met mid-run) is
/// sent to the workers in place of the step and thrown by next() on every rank at that step.
/// Throws nanochat::Error like make_stream (run_base_train passes rank 0's on to the workers).
std::unique_ptr<StepSource> open_step_source(DataFeed& feed, const RowStreamFactory& make_stream, const TrainPlan& plan,
                                             const nlohmann::json* state, int64_t first_step, int rank);

}  // namespace nanochat
