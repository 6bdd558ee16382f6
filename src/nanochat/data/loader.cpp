#include "nanochat/data/loader.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include "nanochat/core/error.h"
#include "nanochat/core/threads.h"
#include "nanochat/data/pack.h"
#include "nanochat/data/parquet.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace nanochat::data {

std::vector<std::string> split_files(const std::string& dir, const std::string& split) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("data directory ", dir,
         " does not exist; build the demo corpus (scripts/demo_corpus.sh), pack your own "
         "text with 'nanochat data pack', download shards with 'nanochat data download -n N', or point "
         "NANOCHAT_DATA_DIR at a folder of shards");
  auto all = list_parquet_files(dir);
  if (all.empty())
    fail("data directory ", dir,
         " holds no *.parquet shard; pack text with 'nanochat data pack' or download "
         "shards with 'nanochat data download -n N'");
  if (all.size() < 2)
    fail("data directory ", dir, " has only one shard (", fs::path(all[0]).filename().string(),
         "); the last shard is the validation split, so at least two are needed (train + val)");
  if (split == "train") return {all.begin(), all.end() - 1};
  if (split == "val") return {all.back()};
  fail("unknown data split '", split, "' (use train or val)");
}

namespace {
struct DocRef {
  int32_t pq, rg, row;
};
struct BufDoc {
  DocRef ref;
  std::vector<int32_t> tokens;
};
}  // namespace

struct DataLoader::Impl {
  const Tokenizer& tok;
  LoaderOptions opt;
  std::vector<std::string> files;
  std::vector<std::unique_ptr<ParquetReader>> readers;
  // stream cursor: the next doc batch comes from (pq, rg) rows [doc_offset, ...)
  int64_t epoch = 1;
  int pq = 0, rg = 0;
  int64_t doc_offset = 0;
  std::vector<std::string> rg_texts;  // texts of (pq, rg) when loaded
  bool rg_loaded = false;
  // last doc batch pulled (for logging, as nanochat)
  int64_t last_epoch = 1;
  int last_pq = 0, last_rg = 0;
  std::vector<BufDoc> buffer;

  Impl(const Tokenizer& t, const LoaderOptions& o) : tok(t), opt(o) {}

  ParquetReader& reader(int i) {
    if (!readers[i]) readers[i] = std::make_unique<ParquetReader>(files[i]);
    return *readers[i];
  }

  // Next doc batch of this rank's stream (<= doc_batch docs); appends to the buffer, tokenized.
  void pull_batch() {
    for (int guard = 0;; ++guard) {
      if (guard > 4 * static_cast<int>(files.size()) + 8 && !rg_loaded && pq == 0 && rg == opt.rank)
        fail("rank ", opt.rank, " finds no documents in ", opt.split, " shards of ", opt.data_dir);
      if (!rg_loaded) {
        if (rg >= reader(pq).num_row_groups()) {
          rg = opt.rank;
          doc_offset = 0;
          if (++pq == static_cast<int>(files.size())) {
            pq = 0;
            ++epoch;
          }
          continue;
        }
        rg_texts = reader(pq).read_row_group(rg);
        rg_loaded = true;
      }
      if (doc_offset >= static_cast<int64_t>(rg_texts.size())) {
        rg += opt.world_size;
        doc_offset = 0;
        rg_loaded = false;
        rg_texts.clear();
        continue;
      }
      const int64_t end = std::min<int64_t>(doc_offset + opt.doc_batch, static_cast<int64_t>(rg_texts.size()));
      std::vector<std::string> docs(rg_texts.begin() + doc_offset, rg_texts.begin() + end);
      auto toks = tok.encode_batch(docs, tok.bos_id(), opt.tokenizer_threads);
      for (int64_t i = doc_offset; i < end; ++i)
        buffer.push_back({{pq, rg, static_cast<int32_t>(i)}, std::move(toks[static_cast<size_t>(i - doc_offset)])});
      last_epoch = epoch;
      last_pq = pq;
      last_rg = rg;
      doc_offset = end;
      return;
    }
  }

  // One batch of B rows of T+1 tokens, BOS-aligned best fit (docs/nanochat.md 5.4).
  void make_batch(std::vector<int32_t>& rows) {
    const int64_t L = opt.T + 1;
    rows.resize(static_cast<size_t>(opt.B) * static_cast<size_t>(L));
    for (int r = 0; r < opt.B; ++r) {
      int32_t* row = rows.data() + static_cast<size_t>(r) * static_cast<size_t>(L);
      int64_t pos = 0;
      while (pos < L) {
        while (static_cast<int>(buffer.size()) < opt.buffer_size) pull_batch();
        const int64_t remaining = L - pos;
        int64_t best = -1, best_len = 0;
        for (size_t i = 0; i < buffer.size(); ++i) {
          const int64_t len = static_cast<int64_t>(buffer[i].tokens.size());
          if (len <= remaining && len > best_len) {
            best = static_cast<int64_t>(i);
            best_len = len;
          }
        }
        if (best >= 0) {
          std::copy(buffer[best].tokens.begin(), buffer[best].tokens.end(), row + pos);
          pos += best_len;
          buffer.erase(buffer.begin() + best);
        } else {
          size_t shortest = 0;
          for (size_t i = 1; i < buffer.size(); ++i)
            if (buffer[i].tokens.size() < buffer[shortest].tokens.size()) shortest = i;
          std::copy(buffer[shortest].tokens.begin(), buffer[shortest].tokens.begin() + remaining, row + pos);
          pos = L;
          buffer.erase(buffer.begin() + static_cast<int64_t>(shortest));
        }
      }
    }
  }

  json state() const {
    json buf = json::array();
    for (const auto& d : buffer) buf.push_back({d.ref.pq, d.ref.rg, d.ref.row});
    json names = json::array();
    for (const auto& f : files) names.push_back(fs::path(f).filename().string());
    return {{"version", 1},
            {"split", opt.split},
            {"rank", opt.rank},
            {"world_size", opt.world_size},
            {"files", names},
            {"epoch", last_epoch},
            {"pq_idx", last_pq},
            {"rg_idx", last_rg},
            {"cursor", {{"epoch", epoch}, {"pq", pq}, {"rg", rg}, {"doc_offset", doc_offset}}},
            {"buffer", buf}};
  }

  void restore(const json& s) {
    auto bad = [&](const std::string& why) {
      fail("cannot resume the ", opt.split, " loader of rank ", opt.rank, ": ", why);
    };
    try {
      if (s.at("version").get<int>() != 1) bad("unknown state version");
      if (s.at("split").get<std::string>() != opt.split) bad("the state is for another split");
      if (s.at("rank").get<int>() != opt.rank || s.at("world_size").get<int>() != opt.world_size)
        bad(str_cat("the state was saved by rank ", s.at("rank").get<int>(), " of ", s.at("world_size").get<int>(),
                    "; resume with the same world size"));
      std::vector<std::string> names;
      for (const auto& f : files) names.push_back(fs::path(f).filename().string());
      if (s.at("files").get<std::vector<std::string>>() != names)
        bad("the shards in " + opt.data_dir + " differ from the ones the checkpoint was trained on");
      const json& c = s.at("cursor");
      epoch = c.at("epoch").get<int64_t>();
      pq = c.at("pq").get<int>();
      rg = c.at("rg").get<int>();
      doc_offset = c.at("doc_offset").get<int64_t>();
      last_epoch = s.at("epoch").get<int64_t>();
      last_pq = s.at("pq_idx").get<int>();
      last_rg = s.at("rg_idx").get<int>();
      if (pq < 0 || pq >= static_cast<int>(files.size())) bad("cursor outside the shard list");
      // Rebuild the packing buffer: re-read and re-tokenize each referenced doc, in order.
      std::map<std::pair<int, int>, std::vector<std::string>> cache;
      std::vector<std::string> docs;
      std::vector<DocRef> refs;
      for (const auto& e : s.at("buffer")) {
        DocRef r{e.at(0).get<int32_t>(), e.at(1).get<int32_t>(), e.at(2).get<int32_t>()};
        if (r.pq < 0 || r.pq >= static_cast<int>(files.size()) || r.rg < 0 || r.rg >= reader(r.pq).num_row_groups())
          bad("buffer refers to a row group that does not exist");
        auto key = std::make_pair(r.pq, r.rg);
        auto it = cache.find(key);
        if (it == cache.end()) it = cache.emplace(key, reader(r.pq).read_row_group(r.rg)).first;
        if (r.row < 0 || r.row >= static_cast<int32_t>(it->second.size())) bad("buffer refers to a missing row");
        docs.push_back(it->second[static_cast<size_t>(r.row)]);
        refs.push_back(r);
      }
      auto toks = tok.encode_batch(docs, tok.bos_id(), opt.tokenizer_threads);
      buffer.clear();
      for (size_t i = 0; i < refs.size(); ++i) buffer.push_back({refs[i], std::move(toks[i])});
      // Reload the current row group if the cursor is inside one.
      rg_loaded = false;
      if (rg < reader(pq).num_row_groups() && doc_offset > 0) {
        rg_texts = reader(pq).read_row_group(rg);
        rg_loaded = true;
      }
    } catch (const nlohmann::json::exception& e) {
      bad(std::string("malformed state: ") + e.what());
    }
  }
};

DataLoader::DataLoader(const Tokenizer& tok, const LoaderOptions& opt, const json* state)
    : opt_(opt), impl_(std::make_unique<Impl>(tok, opt)) {
  if (opt.B < 1 || opt.T < 1) fail("loader needs B >= 1 and T >= 1 (got B=", opt.B, ", T=", opt.T, ")");
  if (opt.world_size < 1 || opt.rank < 0 || opt.rank >= opt.world_size)
    fail("loader: rank ", opt.rank, " is outside world size ", opt.world_size);
  if (tok.vocab_size() == 0) fail("loader: the tokenizer is empty");
  impl_->files = split_files(opt.data_dir, opt.split);
  impl_->readers.resize(impl_->files.size());
  int max_rg = 0;
  for (size_t i = 0; i < impl_->files.size(); ++i)
    max_rg = std::max(max_rg, impl_->reader(static_cast<int>(i)).num_row_groups());
  if (max_rg < opt.world_size)
    fail("the ", opt.split, " shards in ", opt.data_dir, " have at most ", max_rg,
         " row group(s) per file but the job has ", opt.world_size,
         " ranks; rank r reads row groups r, r+W, ..., so every rank needs one: use fewer ranks or "
         "repack the text into more row groups ('nanochat data pack' writes 1024 docs per row group)");
  impl_->rg = opt.rank;
  if (state) impl_->restore(*state);
  state_ = impl_->state();
  if (opt.prefetch) {
    thread_ = std::thread([this] {
      name_this_thread("nc-loader");
      producer_loop();
    });
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

const std::vector<std::string>& DataLoader::files() const { return impl_->files; }

void DataLoader::producer_loop() {
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || static_cast<int>(queue_.size()) < opt_.prefetch_depth; });
        if (stop_) return;
      }
      Batch b;
      impl_->make_batch(b.rows);
      b.state = impl_->state();
      {
        std::lock_guard<std::mutex> lk(mu_);
        queue_.push_back(std::move(b));
      }
      cv_.notify_all();
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = e.what();
    cv_.notify_all();
  }
}

void DataLoader::next_rows(int32_t* rows) {
  Batch b;
  if (opt_.prefetch) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !queue_.empty() || !error_.empty(); });
    if (queue_.empty()) fail(error_);
    b = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    cv_.notify_all();
  } else {
    impl_->make_batch(b.rows);
    b.state = impl_->state();
  }
  if (rows != nullptr) std::copy(b.rows.begin(), b.rows.end(), rows);
  state_ = std::move(b.state);
}

void DataLoader::next(int32_t* inputs, int32_t* targets) {
  const size_t L = static_cast<size_t>(opt_.T) + 1;
  if (inputs == nullptr) return next_rows(nullptr);
  rows_.resize(static_cast<size_t>(opt_.B) * L);
  next_rows(rows_.data());
  for (size_t r = 0; r < static_cast<size_t>(opt_.B); ++r) {
    const int32_t* row = rows_.data() + r * L;
    std::copy(row, row + opt_.T, inputs + r * static_cast<size_t>(opt_.T));
    std::copy(row + 1, row + L, targets + r * static_cast<size_t>(opt_.T));
  }
}

json DataLoader::state() const { return state_; }

std::vector<json> reshard_loader_states(const std::vector<json>& old_states, int new_world) {
  if (old_states.empty()) fail("loader re-shard: no loader states given");
  if (new_world < 1) fail("loader re-shard: world size must be >= 1 (got ", new_world, ")");
  const json& first = old_states.front();
  std::tuple<int64_t, int, int> best{-1, -1, -1};
  int64_t best_offset = 0;
  std::vector<json> docs;
  try {
    for (size_t r = 0; r < old_states.size(); ++r) {
      const json& s = old_states[r];
      if (s.at("version").get<int>() != 1) fail("loader re-shard: unknown state version in rank ", r, "'s state");
      if (s.at("split") != first.at("split") || s.at("files") != first.at("files"))
        fail("loader re-shard: rank ", r, "'s loader state is for another split or shard list than rank 0's");
      const json& c = s.at("cursor");
      const std::tuple<int64_t, int, int> cur{c.at("epoch").get<int64_t>(), c.at("pq").get<int>(),
                                              c.at("rg").get<int>()};
      if (cur > best) {
        best = cur;
        best_offset = c.at("doc_offset").get<int64_t>();
      }
    }
    // buffered docs, dealt round-robin in (old rank, buffer position) order
    for (size_t r = 0; r < old_states.size(); ++r)
      for (const auto& d : old_states[r].at("buffer")) docs.push_back(d);
  } catch (const json::exception& e) {
    fail("loader re-shard: malformed loader state: ", e.what());
  }
  const auto [epoch, pq, rg] = best;
  // the furthest cursor's row group was (partly) read when doc_offset > 0: start after it
  const int base = rg + (best_offset > 0 ? 1 : 0);
  std::vector<json> out;
  for (int r = 0; r < new_world; ++r) {
    json buf = json::array();
    for (size_t i = static_cast<size_t>(r); i < docs.size(); i += static_cast<size_t>(new_world))
      buf.push_back(docs[i]);
    out.push_back({{"version", 1},
                   {"split", first.at("split")},
                   {"rank", r},
                   {"world_size", new_world},
                   {"files", first.at("files")},
                   {"epoch", epoch},
                   {"pq_idx", pq},
                   {"rg_idx", base + r},
                   {"cursor", {{"epoch", epoch}, {"pq", pq}, {"rg", base + r}, {"doc_offset", 0}}},
                   {"buffer", buf}});
  }
  return out;
}

}  // namespace nanochat::data
