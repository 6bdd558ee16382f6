// Loader tests on real text (Pride and Prejudice paragraphs from the committed sample shard):
// packing equals an independent straight-line implementation of docs/nanochat.md 5.3-5.4, exact resume,
// rank striding, and the error cases.
#include "nanochat/data/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "nanochat/core/error.h"
#include "nanochat/data/parquet.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace nanochat;
using namespace nanochat::data;

namespace {

std::vector<std::string> sample_docs() {
  ParquetReader r(std::string(NANOCHAT_TEST_DATA) + "/parquet/sample.parquet");
  std::vector<std::string> docs;
  for (int i = 0; i < r.num_row_groups(); ++i) {
    auto g = r.read_row_group(i);
    docs.insert(docs.end(), g.begin(), g.end());
  }
  return docs;
}

// Three shards (two train, one val) with row groups of `rg_size` docs.
struct Shards {
  std::string dir;
  std::vector<std::vector<std::vector<std::string>>> files;  // file -> row group -> docs
  Shards(const std::string& name, int rg_size) {
    // one folder per test process: ctest -j runs tests of this file side by side
    dir = (fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto docs = sample_docs();
    const size_t bounds[4] = {0, 700, 1400, docs.size()};
    for (int f = 0; f < 3; ++f) {
      char nm[64];
      std::snprintf(nm, sizeof nm, "/shard_%05d.parquet", f);
      ParquetWriter w(dir + nm, rg_size);
      files.emplace_back();
      for (size_t i = bounds[f]; i < bounds[f + 1]; ++i) {
        if ((i - bounds[f]) % rg_size == 0) files.back().emplace_back();
        files.back().back().push_back(docs[i]);
        w.write(docs[i]);
      }
      w.close();
    }
  }
  ~Shards() { fs::remove_all(dir); }
};

const Tokenizer& tokenizer() {
  static Tokenizer tok = [] {
    auto docs = sample_docs();
    docs.resize(400);
    return Tokenizer::train(docs, 512);
  }();
  return tok;
}

// Independent reference of docs/nanochat.md 5.3/5.4 for one rank over the train files.
std::vector<std::vector<int32_t>> reference_batches(const Shards& s, const Tokenizer& tok, int B, int T, int rank,
                                                    int W, int doc_batch, int buffer_size, int nbatches) {
  struct Doc {
    std::vector<int32_t> t;
  };
  // the rank's doc batches, in order, for a few epochs
  std::vector<std::vector<std::string>> doc_batches;
  for (int epoch = 0; epoch < 4; ++epoch)
    for (size_t f = 0; f + 1 < s.files.size(); ++f)  // last file is val
      for (size_t rg = rank; rg < s.files[f].size(); rg += W)
        for (size_t i = 0; i < s.files[f][rg].size(); i += doc_batch) {
          size_t e = std::min(i + doc_batch, s.files[f][rg].size());
          doc_batches.emplace_back(s.files[f][rg].begin() + i, s.files[f][rg].begin() + e);
        }
  size_t next_batch = 0;
  std::vector<std::vector<int32_t>> buf;
  std::vector<std::vector<int32_t>> out;
  for (int n = 0; n < nbatches; ++n) {
    std::vector<int32_t> rows;
    for (int r = 0; r < B; ++r) {
      std::vector<int32_t> row;
      while ((int)row.size() < T + 1) {
        while ((int)buf.size() < buffer_size) {
          for (auto& d : doc_batches.at(next_batch)) {
            auto t = tok.encode(d);
            t.insert(t.begin(), tok.bos_id());
            buf.push_back(t);
          }
          ++next_batch;
        }
        int remaining = T + 1 - (int)row.size();
        int best = -1;
        for (int i = 0; i < (int)buf.size(); ++i)
          if ((int)buf[i].size() <= remaining && (best < 0 || buf[i].size() > buf[best].size())) best = i;
        if (best >= 0) {
          row.insert(row.end(), buf[best].begin(), buf[best].end());
          buf.erase(buf.begin() + best);
        } else {
          int sh = 0;
          for (int i = 1; i < (int)buf.size(); ++i)
            if (buf[i].size() < buf[sh].size()) sh = i;
          row.insert(row.end(), buf[sh].begin(), buf[sh].begin() + remaining);
          buf.erase(buf.begin() + sh);
        }
      }
      rows.insert(rows.end(), row.begin(), row.end());
    }
    out.push_back(rows);
  }
  return out;
}

LoaderOptions opts(const Shards& s, int B, int T, int rank, int W) {
  LoaderOptions o;
  o.B = B;
  o.T = T;
  o.rank = rank;
  o.world_size = W;
  o.data_dir = s.dir;
  o.doc_batch = 16;
  o.buffer_size = 100;
  return o;
}

// Rebuilds (B, T+1) rows from inputs/targets and checks they are shifted views of each other.
std::vector<int32_t> rows_of(const std::vector<int32_t>& x, const std::vector<int32_t>& y, int B, int T) {
  std::vector<int32_t> rows;
  for (int r = 0; r < B; ++r) {
    for (int t = 1; t < T; ++t) EXPECT_EQ(x[r * T + t], y[r * T + t - 1]);
    rows.insert(rows.end(), x.begin() + r * T, x.begin() + (r + 1) * T);
    rows.push_back(y[r * T + T - 1]);
  }
  return rows;
}

}  // namespace

TEST(Loader, PackingMatchesTheSpecReferenceOnTwoRanks) {
  Shards s("nc_loader_ref", 64);
  const Tokenizer& tok = tokenizer();
  const int B = 3, T = 96;
  for (int rank = 0; rank < 2; ++rank) {
    auto want = reference_batches(s, tok, B, T, rank, 2, 16, 100, 12);
    DataLoader dl(tok, opts(s, B, T, rank, 2));
    std::vector<int32_t> x(B * T), y(B * T);
    for (int n = 0; n < 12; ++n) {
      dl.next(x.data(), y.data());
      auto rows = rows_of(x, y, B, T);
      ASSERT_EQ(rows, want[n]) << "rank " << rank << " batch " << n;
      for (int r = 0; r < B; ++r) EXPECT_EQ(rows[r * (T + 1)], tok.bos_id()) << "every row starts with BOS";
    }
  }
}

TEST(Loader, WholeRowsAreTheReferenceRowsAndTheirStateMatchesNext) {
  Shards s("nc_loader_whole_rows", 64);
  const Tokenizer& tok = tokenizer();
  const int B = 3, T = 96;
  auto want = reference_batches(s, tok, B, T, 1, 2, 16, 100, 8);
  DataLoader rows_loader(tok, opts(s, B, T, 1, 2));
  DataLoader split_loader(tok, opts(s, B, T, 1, 2));
  std::vector<int32_t> rows(B * (T + 1)), x(B * T), y(B * T);
  for (int n = 0; n < 8; ++n) {
    rows_loader.next_rows(rows.data());
    ASSERT_EQ(rows, want[n]) << "batch " << n;
    split_loader.next(x.data(), y.data());
    ASSERT_EQ(rows_of(x, y, B, T), rows) << "next() splits the same rows, batch " << n;
    ASSERT_EQ(rows_loader.state(), split_loader.state()) << "batch " << n;
  }
  rows_loader.next_rows(nullptr);  // read past
  split_loader.next(nullptr, nullptr);
  EXPECT_EQ(rows_loader.state(), split_loader.state());
}

TEST(Loader, ResumeIsExactWithPrefetch) {
  Shards s("nc_loader_resume", 64);
  const Tokenizer& tok = tokenizer();
  const int B = 2, T = 128, N = 30, K = 11;
  std::vector<int32_t> x(B * T), y(B * T);
  std::vector<std::vector<int32_t>> straight;
  {
    DataLoader dl(tok, opts(s, B, T, 0, 1));
    for (int n = 0; n < N; ++n) {
      dl.next(x.data(), y.data());
      straight.push_back(rows_of(x, y, B, T));
    }
  }
  nlohmann::json st;
  {
    DataLoader dl(tok, opts(s, B, T, 0, 1));
    for (int n = 0; n < K; ++n) dl.next(x.data(), y.data());
    st = nlohmann::json::parse(dl.state().dump());  // through text, as in a checkpoint
  }
  EXPECT_GT(st["buffer"].size(), 0u);
  DataLoader resumed(tok, opts(s, B, T, 0, 1), &st);
  for (int n = K; n < N; ++n) {
    resumed.next(x.data(), y.data());
    ASSERT_EQ(rows_of(x, y, B, T), straight[n]) << "batch " << n;
  }
}

TEST(Loader, RanksReadOnlyTheirRowGroupsAndValUsesTheLastFile) {
  Shards s("nc_loader_ranks", 64);
  const Tokenizer& tok = tokenizer();
  std::vector<int32_t> x(2 * 64), y(2 * 64);
  for (int rank = 0; rank < 3; ++rank) {
    DataLoader dl(tok, opts(s, 2, 64, rank, 3));
    for (int n = 0; n < 5; ++n) dl.next(x.data(), y.data());
    const nlohmann::json st = dl.state();  // keep the temporary alive through the loop
    for (auto& ref : st["buffer"]) {
      EXPECT_EQ(ref[1].get<int>() % 3, rank);
      EXPECT_LT(ref[0].get<int>(), 2);  // train files only
    }
  }
  LoaderOptions v = opts(s, 2, 64, 0, 1);
  v.split = "val";
  DataLoader val(tok, v);
  val.next(x.data(), y.data());
  ASSERT_EQ(val.files().size(), 1u);
  EXPECT_NE(val.files()[0].find("shard_00002"), std::string::npos);
  const nlohmann::json vst = val.state();
  for (auto& ref : vst["buffer"]) EXPECT_EQ(ref[0].get<int>(), 0);
}

TEST(Loader, ClearErrors) {
  const Tokenizer& tok = tokenizer();
  auto dir = (fs::temp_directory_path() / "nc_loader_err").string();
  fs::remove_all(dir);
  LoaderOptions o;
  o.B = 1;
  o.T = 16;
  o.data_dir = dir;
  auto expect_error = [&](const std::string& needle) {
    try {
      DataLoader dl(tok, o);
      FAIL() << "expected an error containing " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("does not exist");
  fs::create_directories(dir);
  expect_error("no *.parquet shard");
  {
    ParquetWriter w(dir + "/shard_00000.parquet", 4);
    for (int i = 0; i < 6; ++i) w.write("some text " + std::to_string(i));
    w.close();
  }
  expect_error("at least two are needed");
  {
    ParquetWriter w(dir + "/shard_00001.parquet", 4);
    w.write("val text");
    w.close();
  }
  o.world_size = 3;
  o.rank = 2;
  expect_error("3 ranks");  // the train file has 2 row groups, the job 3 ranks
  fs::remove_all(dir);
}

TEST(Loader, ResumeFromAnotherLayoutIsRejected) {
  Shards s("nc_loader_layout", 64);
  const Tokenizer& tok = tokenizer();
  std::vector<int32_t> x(64), y(64);
  DataLoader dl(tok, opts(s, 1, 64, 0, 2));
  dl.next(x.data(), y.data());
  auto st = dl.state();
  EXPECT_THROW(DataLoader(tok, opts(s, 1, 64, 0, 1), &st), Error);
}

// Resuming at another world size (approximate): 2 ranks' states become 3 ranks' states whose
// buffers are exactly the old buffers dealt round-robin and whose cursors start after the
// furthest old cursor, one row group per new rank; the new loaders run and read only row groups
// at or after that point (no document twice), each its own (rank-strided) ones.
TEST(Loader, ReshardToAnotherWorldSize) {
  Shards s("nc_loader_reshard", 16);
  const Tokenizer& tok = tokenizer();
  const int B = 2, T = 128;
  std::vector<int32_t> x(B * T), y(B * T);
  std::vector<nlohmann::json> old;
  for (int r = 0; r < 2; ++r) {
    DataLoader dl(tok, opts(s, B, T, r, 2));
    for (int n = 0; n < 7 + 2 * r; ++n) dl.next(x.data(), y.data());  // ranks at different points
    old.push_back(nlohmann::json::parse(dl.state().dump()));
  }
  // the furthest old cursor, as (epoch, file, row group)
  std::tuple<int64_t, int, int> far{-1, -1, -1};
  int64_t far_offset = 0;
  std::multiset<std::vector<int>> old_buffered;
  for (const auto& st : old) {
    const auto& c = st["cursor"];
    std::tuple<int64_t, int, int> cur{c["epoch"].get<int64_t>(), c["pq"].get<int>(), c["rg"].get<int>()};
    if (cur > far) {
      far = cur;
      far_offset = c["doc_offset"].get<int64_t>();
    }
    for (const auto& d : st["buffer"]) old_buffered.insert(d.get<std::vector<int>>());
  }
  ASSERT_FALSE(old_buffered.empty());
  const auto news = reshard_loader_states(old, 3);
  ASSERT_EQ(news.size(), 3u);
  std::multiset<std::vector<int>> new_buffered;
  const int base = std::get<2>(far) + (far_offset > 0 ? 1 : 0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(news[r]["rank"], r);
    EXPECT_EQ(news[r]["world_size"], 3);
    EXPECT_EQ(news[r]["cursor"]["rg"].get<int>(), base + r);
    EXPECT_EQ(news[r]["cursor"]["pq"].get<int>(), std::get<1>(far));
    for (const auto& d : news[r]["buffer"]) new_buffered.insert(d.get<std::vector<int>>());
    // sizes differ by at most one (round-robin)
    EXPECT_LE(news[r]["buffer"].size(), old_buffered.size() / 3 + 1);
  }
  EXPECT_EQ(new_buffered, old_buffered) << "buffered documents were lost or duplicated";
  for (int r = 0; r < 3; ++r) {
    const nlohmann::json st = news[r];
    DataLoader dl(tok, opts(s, B, T, r, 3), &st);
    for (int n = 0; n < 6; ++n) dl.next(x.data(), y.data());
    const nlohmann::json after = dl.state();
    for (const auto& d : after["buffer"]) {
      const auto ref = d.get<std::vector<int>>();
      if (old_buffered.count(ref)) continue;  // carried over from the old ranks
      // newly read: in the same epoch, at or after the start row group of the start file, or a
      // later file; and one of this rank's row groups
      const bool later_file = ref[0] != std::get<1>(far);
      EXPECT_TRUE(later_file || ref[1] >= base) << "row group " << ref[1] << " re-read (start " << base << ")";
      if (!later_file) {
        EXPECT_EQ((ref[1] - base) % 3, r);
      }
    }
  }
  EXPECT_THROW(reshard_loader_states({}, 2), Error);
  EXPECT_THROW(reshard_loader_states(old, 0), Error);
  auto other = old;
  other[1]["split"] = "val";
  EXPECT_THROW(reshard_loader_states(other, 2), Error);
}

// The rows of the stream do not depend on the batch size: B = 1, 2 and 3 yield the same rows in
// the same order, and the state after the same rows is the same. The trainer relies on it to deal
// a step's rows to ranks with different --device-batch-size in units of their gcd.
TEST(Loader, RowsDoNotDependOnTheBatchSize) {
  Shards s("nc_loader_rows", 64);
  const Tokenizer& tok = tokenizer();
  const int T = 64, rows = 12;
  std::vector<std::vector<int32_t>> streams;
  std::vector<nlohmann::json> states;
  for (int B : {1, 2, 3}) {
    LoaderOptions o = opts(s, B, T, 0, 1);
    o.prefetch = B != 2;  // both consumer paths
    DataLoader dl(tok, o);
    std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size()), all;
    for (int n = 0; n < rows / B; ++n) {
      dl.next(x.data(), y.data());
      const auto r = rows_of(x, y, B, T);
      all.insert(all.end(), r.begin(), r.end());
    }
    streams.push_back(all);
    states.push_back(dl.state());
  }
  EXPECT_EQ(streams[1], streams[0]);
  EXPECT_EQ(streams[2], streams[0]);
  EXPECT_EQ(states[1], states[0]);
  EXPECT_EQ(states[2], states[0]);
}
