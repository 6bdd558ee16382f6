// Tokenizer benchmark: BPE training time and encode throughput (MB/s of UTF-8 input) at 1 and 2
// threads on real text.
//
// usage: bench_tokenizer FILE [FILE...] [--vocab-size N] [--train-chars N] [--tokenizer DIR] [--reps N]
//   FILE: a parquet shard (.parquet, column "text"), JSONL with a "text" field per line (.jsonl),
//         or plain text (documents separated by blank lines).
//   Trains a tokenizer of --vocab-size (default 32768) on the first --train-chars bytes (default
//   20,000,000; docs capped at 10,000 chars as tok-train does) unless --tokenizer DIR is given, then
//   encodes all documents: one thread calling encode() per doc, and encode_batch() at 1 and 2 threads.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/core/error.h"
#include "nanochat/core/timer.h"
#include "nanochat/data/parquet.h"
#include "nanochat/tokenizer/tokenizer.h"

using namespace nanochat;

namespace {

// CPU seconds of this process (all threads): robust to other processes sharing the cores.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

void read_docs(const std::string& path, std::vector<std::string>& docs) {
  if (ends_with(path, ".parquet")) {
    data::ParquetReader r(path);
    for (int g = 0; g < r.num_row_groups(); ++g)
      for (std::string& s : r.read_row_group(g)) docs.push_back(std::move(s));
    return;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("bench_tokenizer: cannot read ", path);
  if (ends_with(path, ".jsonl")) {
    std::string line;
    while (std::getline(f, line))
      if (!line.empty()) docs.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    return;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string all = ss.str();
  size_t pos = 0;
  while (pos < all.size()) {
    size_t e = all.find("\n\n", pos);
    if (e == std::string::npos)
      e = all.size();
    else
      e += 2;
    docs.push_back(all.substr(pos, e - pos));
    pos = e;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> files;
    int vocab = 32768, reps = 3;
    long long train_chars = 20000000;
    std::string tok_dir;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) fail("bench_tokenizer: ", a, " needs a value");
        return argv[++i];
      };
      if (a == "--vocab-size")
        vocab = std::stoi(next());
      else if (a == "--train-chars")
        train_chars = std::stoll(next());
      else if (a == "--tokenizer")
        tok_dir = next();
      else if (a == "--reps")
        reps = std::stoi(next());
      else
        files.push_back(a);
    }
    if (files.empty()) {
      std::fprintf(stderr,
                   "usage: bench_tokenizer FILE... [--vocab-size N] [--train-chars N] [--tokenizer DIR] [--reps N]\n");
      return 2;
    }
    std::vector<std::string> docs;
    for (const auto& f : files) read_docs(f, docs);
    size_t total = 0;
    for (const auto& d : docs) total += d.size();
    std::printf("input: %zu docs, %.2f MB\n", docs.size(), total / 1e6);

    Tokenizer tok;
    if (!tok_dir.empty()) {
      tok = Tokenizer::load(tok_dir);
    } else {
      std::vector<std::string> train_docs;
      long long n = 0;
      for (const auto& d : docs) {
        if (n >= train_chars) break;
        train_docs.push_back(d.substr(0, 10000));  // bytes here; tok-train caps characters
        n += static_cast<long long>(train_docs.back().size());
      }
      Timer t;
      const double c0 = cpu_seconds();
      TokenizerTrainStats st;
      tok = Tokenizer::train(train_docs, vocab, &st);
      std::printf("train: vocab %d on %.2f MB (%lld unique chunks): %.2f s wall, %.2f s CPU\n", tok.vocab_size(),
                  n / 1e6, static_cast<long long>(st.num_unique_chunks), t.seconds(), cpu_seconds() - c0);
    }

    size_t ntok = 0;
    double best1 = 1e30, cpu1 = 1e30;
    for (int r = 0; r < reps; ++r) {
      Timer t;
      const double c0 = cpu_seconds();
      ntok = 0;
      for (const auto& d : docs) ntok += tok.encode(d).size();
      best1 = std::min(best1, t.seconds());
      cpu1 = std::min(cpu1, cpu_seconds() - c0);
    }
    std::printf(
        "encode, 1 thread, per-doc encode(): %.2f MB/s wall, %.2f MB per CPU-second (%zu tokens, %.3f bytes/token)\n",
        total / 1e6 / best1, total / 1e6 / cpu1, ntok, static_cast<double>(total) / static_cast<double>(ntok));
    std::vector<std::vector<int32_t>> ref;
    for (int threads : {1, 2}) {
      double best = 1e30, cpu = 1e30;
      for (int r = 0; r < reps; ++r) {
        Timer t;
        const double c0 = cpu_seconds();
        auto out = tok.encode_batch(docs, -1, threads);
        best = std::min(best, t.seconds());
        cpu = std::min(cpu, cpu_seconds() - c0);
        if (ref.empty())
          ref = std::move(out);
        else if (out != ref)
          fail("bench_tokenizer: encode_batch gave different ids at ", threads, " threads");
      }
      std::printf("encode_batch, %d thread%s: %.2f MB/s wall, %.2f MB per CPU-second\n", threads,
                  threads > 1 ? "s" : "", total / 1e6 / best, total / 1e6 / cpu);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: error: %s\n", e.what());
    return 1;
  }
}
