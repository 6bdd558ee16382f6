// Data loader benchmark: tokens per second delivered by DataLoader::next() (parquet read ->
// tokenize -> BOS best-fit pack, docs/nanochat.md 5.3-5.4), with the prefetch thread and without it.
//
// usage: bench_loader [DATA_DIR] [--tokenizer DIR] [--vocab-size N] [--B N] [--T N] [--batches N]
//                     [--tokenizer-threads N]
//   DATA_DIR   folder of shards (default: $NANOCHAT_DATA_DIR or $NANOCHAT_BASE_DIR/base_data_climbmix)
//   --tokenizer DIR   a saved tokenizer; otherwise one of --vocab-size (default 8192) is trained on
//                     the first 2,000 documents of the first shard (time reported separately)
//   defaults: B=8, T=2048, 50 batches, 1 tokenizer thread.
// Prints wall-clock and CPU-time rates; the machine may be shared, so CPU time is the steadier one.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"
#include "nanochat/data/loader.h"
#include "nanochat/data/pack.h"
#include "nanochat/data/parquet.h"
#include "nanochat/tokenizer/tokenizer.h"

using namespace nanochat;

namespace {

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string dir, tok_dir;
    int vocab = 8192, B = 8, T = 2048, batches = 50, tthreads = 1;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto val = [&]() -> std::string {
        if (i + 1 >= argc) fail("bench_loader: ", a, " needs a value");
        return argv[++i];
      };
      if (a == "--tokenizer")
        tok_dir = val();
      else if (a == "--vocab-size")
        vocab = std::atoi(val().c_str());
      else if (a == "--B")
        B = std::atoi(val().c_str());
      else if (a == "--T")
        T = std::atoi(val().c_str());
      else if (a == "--batches")
        batches = std::atoi(val().c_str());
      else if (a == "--tokenizer-threads")
        tthreads = std::atoi(val().c_str());
      else if (a.rfind("--", 0) == 0)
        fail("bench_loader: unknown flag ", a);
      else
        dir = a;
    }
    if (dir.empty()) dir = data_dir();
    auto files = data::list_parquet_files(dir);
    if (files.empty()) fail("bench_loader: no shards in ", dir, " (run scripts/demo_corpus.sh)");

    Tokenizer tok;
    if (!tok_dir.empty()) {
      tok = Tokenizer::load(tok_dir);
    } else {
      data::ParquetReader r(files[0]);
      std::vector<std::string> docs;
      for (int g = 0; g < r.num_row_groups() && docs.size() < 2000; ++g)
        for (auto& d : r.read_row_group(g)) docs.push_back(std::move(d));
      if (docs.size() > 2000) docs.resize(2000);
      double t0 = wall_seconds();
      tok = Tokenizer::train(docs, vocab);
      std::printf("trained a tokenizer of %d tokens on %zu docs in %.1f s\n", tok.vocab_size(), docs.size(),
                  wall_seconds() - t0);
    }
    std::printf("data: %s (%zu shards), B=%d T=%d, %d batches, %d tokenizer thread(s)\n", dir.c_str(), files.size(), B,
                T, batches, tthreads);
    std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
    for (bool prefetch : {false, true}) {
      data::LoaderOptions o;
      o.B = B;
      o.T = T;
      o.data_dir = dir;
      o.prefetch = prefetch;
      o.tokenizer_threads = tthreads;
      double w0 = wall_seconds(), c0 = cpu_seconds();
      data::DataLoader loader(tok, o);
      loader.next(x.data(), y.data());  // first batch fills the 1000-doc buffer
      double w1 = wall_seconds(), c1 = cpu_seconds();
      for (int b = 1; b < batches; ++b) loader.next(x.data(), y.data());
      double w2 = wall_seconds(), c2 = cpu_seconds();
      const double toks = static_cast<double>(batches - 1) * B * T;
      std::printf("prefetch %-3s: first batch %.2f s; then %.0f tok/s wall, %.0f tok/CPU-s (%d batches, %.0f tokens)\n",
                  prefetch ? "on" : "off", w1 - w0, toks / (w2 - w1), toks / (c2 - c1), batches - 1, toks);
      (void)c0;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_loader: error: %s\n", e.what());
    return 1;
  }
}
