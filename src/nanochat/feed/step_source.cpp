#include "nanochat/feed/step_source.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "nanochat/cluster/agree.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/threads.h"
#include "nanochat/data/loader.h"
#include "nanochat/feed/feed_link.h"
#include "nanochat/plan/plan.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat {

using feed::FeedFrame;
using feed::FeedKind;
using json = nlohmann::json;

namespace {

// The train loader: the one-rank stream (rank 0 of 1) row by row, so the rows of a step and their
// order do not depend on the world size or the split, and a resume is exact at any world size.
data::LoaderOptions train_loader_options(const TrainPlan& plan) {
  data::LoaderOptions lo;
  lo.B = 1;
  lo.T = plan.T;
  lo.split = "train";
  lo.data_dir = data_dir();
  // a step reads every row of the step: keep many ready
  lo.prefetch_depth = static_cast<int>(std::clamp<int64_t>(plan.rows_per_step(), 3, 64));
  return lo;
}

// The one-rank val stream; B is the smallest device batch of the job, so that every rank can run it.
data::LoaderOptions val_loader_options(const TrainPlan& plan, int B) {
  data::LoaderOptions vo;
  vo.B = B;
  vo.T = plan.T;
  vo.split = "val";
  vo.data_dir = data_dir();
  vo.prefetch = false;
  return vo;
}

constexpr uint64_t kLow63 = ~(uint64_t{1} << 63);

// Reads `n` rows of T+1 tokens into (n, T+1) rows (a loader with B = 1).
void read_rows(data::DataLoader& loader, int64_t n, int T, std::vector<int32_t>* rows) {
  rows->resize(static_cast<size_t>(n) * (static_cast<size_t>(T) + 1));
  for (int64_t i = 0; i < n; ++i) loader.next_rows(rows->data() + static_cast<size_t>(i) * (T + 1));
}

// base-train's stream: the token shards' one-rank stream.
class TokenRowStream : public RowStream {
 public:
  TokenRowStream(const Tokenizer& tok, const TrainPlan& plan, const json* state)
      : tok_(tok), plan_(plan), loader_(tok, train_loader_options(plan), state) {}

  StepRows next_step(int64_t step) override {
    StepRows s;
    s.step = step;
    read_rows(loader_, plan_.rows_per_step(), plan_.T, &s.rows);
    s.loader_state = loader_.state();
    return s;
  }
  json state() const override { return loader_.state(); }
  std::function<void(int32_t*)> val_rows(int B) override {
    auto loader = std::make_shared<data::DataLoader>(tok_, val_loader_options(plan_, B), nullptr);
    return [loader](int32_t* rows) { loader->next_rows(rows); };
  }

 private:
  const Tokenizer& tok_;
  const TrainPlan& plan_;
  data::DataLoader loader_;
};

// A val reader over a stream's val rows: each batch read as rows and split.
ValBatchReader reader_of(std::function<void(int32_t*)> val_rows, int B, int T) {
  auto buf = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(B) * (static_cast<size_t>(T) + 1));
  return [val_rows = std::move(val_rows), buf, B, T](int64_t, int32_t* x, int32_t* y) {
    val_rows(buf->data());
    if (x) split_rows(buf->data(), B, T, x, y);
  };
}

// The text of a step frame: the loader state after the step, whether it ends the run, its progress.
std::string step_text(const StepRows& s) {
  return json{{"state", s.loader_state}, {"end", s.end}, {"progress", s.progress}}.dump();
}

class LocalSource : public StepSource {
 public:
  LocalSource(const RowStreamFactory& make_stream, const TrainPlan& plan, const json* state)
      : plan_(plan), stream_(make_stream(state)), initial_(stream_->state()) {}

  StepRows next(int64_t step) override { return stream_->next_step(step); }
  const json& initial_state() const override { return initial_; }
  ValBatchReader val_reader(int B) override { return reader_of(stream_->val_rows(B), B, plan_.T); }

 private:
  const TrainPlan& plan_;
  std::unique_ptr<RowStream> stream_;
  const json initial_;
};

class ServingSource : public StepSource {
 public:
  ServingSource(feed::FeedServer& server, const RowStreamFactory& make_stream, const TrainPlan& plan, const json* state,
                int64_t first_step, int ahead)
      : server_(server), plan_(plan), first_(first_step), ahead_(std::max(1, ahead)), asked_(first_step - 1) {
    // an error here (no shards, no val shard) reaches the workers through run_base_train's handler
    stream_ = make_stream(state);
    initial_ = stream_->state();
    FeedFrame f;
    f.kind = FeedKind::Step;
    f.seq = first_step - 1;  // no rows: the state before the first step
    StepRows before;
    before.loader_state = initial_;
    f.text = step_text(before);
    for (int r = 1; r < server_.world_size(); ++r) server_.send(r, f, feed::feed_step_deadline());
    thread_ = std::thread([this] {
      name_this_thread("nc-feed");
      produce();
    });
  }

  ~ServingSource() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    // A write to a rank that stopped reading ends at its deadline. The connections stay open, so
    // that an error of this rank can still be sent to the workers after this (DataFeed::tell_workers).
    thread_.join();
  }

  StepRows next(int64_t step) override {
    std::unique_lock<std::mutex> lk(mu_);
    asked_ = step;
    cv_.notify_all();
    cv_.wait(lk, [&] { return !ready_.empty() || !error_.empty(); });
    if (ready_.empty()) fail(error_);
    StepRows s = std::move(ready_.front());
    ready_.pop_front();
    if (s.step != step) fail("rank 0: the data stream is out of step (step ", s.step, " ready, ", step, " asked for)");
    return s;
  }

  const json& initial_state() const override { return initial_; }

  // Rank 0 reads every batch; batch i is evaluated by rank i % W, so the others' go to them.
  ValBatchReader val_reader(int B) override {
    auto rows_of = std::make_shared<std::function<void(int32_t*)>>(stream_->val_rows(B));
    auto buf = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(B) * (static_cast<size_t>(plan_.T) + 1));
    const int W = server_.world_size(), T = plan_.T;
    return [this, rows_of, buf, W, T, B](int64_t i, int32_t* x, int32_t* y) {
      (*rows_of)(buf->data());
      const int owner = static_cast<int>(i % W);
      if (owner == 0) return split_rows(buf->data(), B, T, x, y);
      FeedFrame f;
      f.kind = FeedKind::Val;
      f.seq = i;
      f.tokens = *buf;
      server_.send(owner, f, feed::feed_step_deadline());
    };
  }

 private:
  // Reads and sends the steps, staying at most ahead_ steps beyond the trainer, up to the last
  // step of the plan or the step that ends the stream.
  void produce() {
    try {
      for (int64_t s = first_; s < plan_.num_iterations; ++s) {
        {
          std::unique_lock<std::mutex> lk(mu_);
          cv_.wait(lk, [&] { return stop_ || s <= asked_ + ahead_; });
          if (stop_) return;
        }
        StepRows sr = stream_->next_step(s);
        FeedFrame f;
        f.kind = FeedKind::Step;
        f.seq = s;
        f.text = step_text(sr);
        f.tokens = std::move(sr.rows);  // lent to the frame for the sends, then taken back
        for (int r = 1; r < server_.world_size(); ++r) try {
            server_.send(r, f, feed::feed_step_deadline());
          } catch (const std::exception&) {
            // its data connection broke (it died, or its link did): the others' rows go on, and
            // the job's heartbeat and collectives say what became of it (a job that is stopping
            // anyway says nothing more here); a worker cut off stops waiting for its rows
            server_.drop(r);
          }
        sr.rows = std::move(f.tokens);
        const bool end = sr.end;
        std::lock_guard<std::mutex> lk(mu_);
        ready_.push_back(std::move(sr));
        cv_.notify_all();
        if (end) return;
      }
    } catch (const std::exception& e) {
      const std::string msg = str_cat("rank 0 (host ", cluster::host_name(), ") could not serve the data: ", e.what());
      server_.send_error(msg);
      std::lock_guard<std::mutex> lk(mu_);
      error_ = msg;
      cv_.notify_all();
    }
  }

  feed::FeedServer& server_;
  const TrainPlan& plan_;
  const int64_t first_;
  const int ahead_;
  std::unique_ptr<RowStream> stream_;
  json initial_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StepRows> ready_;
  int64_t asked_;
  bool stop_ = false;
  std::string error_;
  std::thread thread_;
};

class ReceivedSource : public StepSource {
 public:
  ReceivedSource(feed::FeedClient& client, const TrainPlan& plan, int64_t first_step, int rank)
      : client_(client), plan_(plan), rank_(rank) {
    const FeedFrame f = client_.next(FeedKind::Step, first_step - 1, feed::feed_startup_deadline(),
                                     "the data stream's start (rank 0 opens the shards)");
    initial_ = parse_step(f.text, first_step - 1).loader_state;
  }

  StepRows next(int64_t step) override {
    FeedFrame f = client_.next(FeedKind::Step, step, feed::feed_step_deadline(), str_cat("the rows of step ", step));
    const size_t want = static_cast<size_t>(plan_.rows_per_step()) * (static_cast<size_t>(plan_.T) + 1);
    if (f.tokens.size() != want)
      fail("rank ", rank_, ": ", client_.server(), " sent ", f.tokens.size(), " tokens for step ", step, ", expected ",
           want, " (another total batch or sequence length?)");
    StepRows s = parse_step(f.text, step);
    s.step = step;
    s.rows = std::move(f.tokens);
    return s;
  }

  const json& initial_state() const override { return initial_; }

  ValBatchReader val_reader(int B) override {
    const int T = plan_.T;
    return [this, B, T](int64_t i, int32_t* x, int32_t* y) {
      if (!x) return;  // another rank's batch: rank 0 sent it there
      FeedFrame f = client_.next(FeedKind::Val, i, feed::feed_step_deadline(), str_cat("validation batch ", i));
      if (f.tokens.size() != static_cast<size_t>(B) * (static_cast<size_t>(T) + 1))
        fail("rank ", rank_, ": ", client_.server(), " sent a validation batch of ", f.tokens.size(),
             " tokens, expected ", B, " x ", T + 1);
      split_rows(f.tokens.data(), B, T, x, y);
    };
  }

 private:
  StepRows parse_step(const std::string& text, int64_t step) const {
    try {
      const json j = json::parse(text);
      StepRows s;
      s.loader_state = j.at("state");
      s.end = j.value("end", false);
      s.progress = j.value("progress", -1.0);
      return s;
    } catch (const std::exception& e) {
      fail("rank ", rank_, ": the loader state ", client_.server(), " sent with step ", step,
           " is not readable: ", e.what());
    }
  }

  feed::FeedClient& client_;
  const TrainPlan& plan_;
  const int rank_;
  json initial_;
};

// Rank 0 of a served job: the tokenizer's files' text, seq = its hash's low 63 bits.
void send_tokenizer(feed::FeedServer& server, const Tokenizer& tok) {
  const Tokenizer::SavedText text = tok.saved_text();
  FeedFrame f;
  f.kind = FeedKind::Tokenizer;
  f.seq = static_cast<int64_t>(tok.hash() & kLow63);
  f.text = json{{"json", text.json}, {"ranks", text.ranks}}.dump();
  for (int r = 1; r < server.world_size(); ++r) server.send(r, f, feed::feed_step_deadline());
}

// A worker: the tokenizer rank 0 sent, checked against the hash sent with it.
Tokenizer receive_tokenizer(feed::FeedClient& client) {
  // seq is the hash, known only after reading: any seq is taken, then checked
  const FeedFrame f = client.next_any(FeedKind::Tokenizer, feed::feed_startup_deadline(), "the tokenizer");
  Tokenizer::SavedText text;
  try {
    const json j = json::parse(f.text);
    text.json = j.at("json").get<std::string>();
    text.ranks = j.at("ranks").get<std::string>();
  } catch (const std::exception& e) {
    fail("the tokenizer ", client.server(), " sent is not readable: ", e.what());
  }
  Tokenizer tok = Tokenizer::from_saved_text(text, client.server() + ":tokenizer");
  if (static_cast<int64_t>(tok.hash() & kLow63) != f.seq)
    fail("the tokenizer ", client.server(), " sent does not match the hash sent with it (damaged on the way?)");
  return tok;
}

}  // namespace

void split_rows(const int32_t* rows, int64_t n, int T, int32_t* inputs, int32_t* targets) {
  const size_t t = static_cast<size_t>(T);
  for (int64_t b = 0; b < n; ++b) {
    const int32_t* row = rows + static_cast<size_t>(b) * (t + 1);
    int32_t* x = inputs + static_cast<size_t>(b) * t;
    int32_t* y = targets + static_cast<size_t>(b) * t;
    for (size_t i = 0; i < t; ++i) {
      x[i] = row[i] < 0 ? ~row[i] : row[i];  // a masked token is still the model's input
      y[i] = row[i + 1] < 0 ? -1 : row[i + 1];
    }
  }
}

RowStreamFactory token_row_stream(const Tokenizer& tok, const TrainPlan& plan) {
  return [&tok, &plan](const json* state) -> std::unique_ptr<RowStream> {
    return std::make_unique<TokenRowStream>(tok, plan, state);
  };
}

DataFeed::DataFeed() = default;
DataFeed::DataFeed(DataFeed&&) noexcept = default;
DataFeed::~DataFeed() = default;

int DataFeed::port() const { return server ? server->port() : 0; }

void DataFeed::tell_workers(const std::string& error) noexcept {
  if (server) server->send_error(error);
}

void DataFeed::peer_lost(int peer, const std::string& why) noexcept {
  if (server) server->drop(peer);
  if (client && peer == 0) client->abort(why);
}

DataFeed open_data_feed(Communicator& comm, bool local_data) {
  DataFeed f;
  if (comm.world_size() < 2) return f;
  // every rank must take the same road before the first frame (the build is agreed here too)
  cluster::agree(comm, {{"data source", local_data ? "each node's own shards (--local-data)" : "node 0 serves"}});
  if (local_data) return f;
  if (comm.rank() == 0)
    f.server = std::make_unique<feed::FeedServer>(comm, feed::feed_startup_deadline());
  else
    f.client = std::make_unique<feed::FeedClient>(comm, feed::feed_startup_deadline());
  return f;
}

Tokenizer load_tokenizer(DataFeed& feed) {
  if (feed.client) return receive_tokenizer(*feed.client);
  Tokenizer tok = Tokenizer::load(tokenizer_dir());
  if (feed.server) send_tokenizer(*feed.server, tok);
  return tok;
}

std::unique_ptr<StepSource> open_step_source(DataFeed& feed, const RowStreamFactory& make_stream, const TrainPlan& plan,
                                             const json* state, int64_t first_step, int rank) {
  if (feed.server) return std::make_unique<ServingSource>(*feed.server, make_stream, plan, state, first_step, 3);
  if (feed.client) return std::make_unique<ReceivedSource>(*feed.client, plan, first_step, rank);
  return std::make_unique<LocalSource>(make_stream, plan, state);
}

}  // namespace nanochat
