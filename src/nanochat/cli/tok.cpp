// `nanochat tok-train` and `nanochat tok-eval` (scripts/tok_train.py, scripts/tok_eval.py;
// docs/nanochat.md 6.2, 6.5): train the BPE tokenizer on the train shards, report its compression.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/cli/commands.h"
#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/report_log.h"
#include "nanochat/core/timer.h"
#include "nanochat/data/loader.h"
#include "nanochat/data/parquet.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat::cli {

namespace {

// A fixed multilingual string for the round-trip sanity check after training.
const char* const kSanityText =
    "Hello world! This is a test.\nNumbers: 123, 4567, 89\nContractions: I'm, you're, it's\n"
    "Special chars: @#$%^&*()\nUnicode: \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x8c\x8d";

struct TrainOptions {
  int64_t max_chars = 2'000'000'000;
  int64_t doc_cap = 10'000;
  int vocab_size = 32768;
};

void run_tok_train(const TrainOptions& o) {
  if (o.max_chars <= 0) fail("tok-train: --max-chars must be positive, got ", o.max_chars);
  if (o.doc_cap <= 0) fail("tok-train: --doc-cap must be positive, got ", o.doc_cap);
  if (o.vocab_size < 256 + static_cast<int>(kSpecialTokens.size()))
    fail("tok-train: --vocab-size ", o.vocab_size, " is too small (at least ", 256 + kSpecialTokens.size(), ")");
  std::printf("max_chars: %lld\ndoc_cap: %lld\nvocab_size: %d\n", static_cast<long long>(o.max_chars),
              static_cast<long long>(o.doc_cap), o.vocab_size);
  // The train split (every shard but the last, the val shard); data::split_files names the
  // directory and what to do when it is missing or holds fewer than two shards.
  const auto train_shards = data::split_files(data_dir(), "train");

  Timer total;
  TokenizerTrainer trainer;
  TrainTextBudget budget(o.max_chars, o.doc_cap);
  for (size_t f = 0; f < train_shards.size() && !budget.exhausted(); ++f) {
    data::ParquetReader reader(train_shards[f]);
    for (int g = 0; g < reader.num_row_groups() && !budget.exhausted(); ++g) {
      std::vector<std::string> docs = reader.read_row_group(g);
      size_t keep = 0;
      while (keep < docs.size())
        if (!budget.take(docs[keep++])) break;
      docs.resize(keep);
      trainer.add_documents(docs, 2);
    }
  }
  const double t_read = total.seconds();
  std::printf("read %lld documents, %lld characters (%lld distinct chunks) in %.2fs\n",
              static_cast<long long>(budget.docs()), static_cast<long long>(budget.chars()),
              static_cast<long long>(trainer.num_unique_chunks()), t_read);
  Timer t_merge;
  TokenizerTrainStats st;
  const Tokenizer tok = trainer.train(o.vocab_size, &st);
  std::printf("learned %lld merges in %.2fs\n", static_cast<long long>(st.num_merges), t_merge.seconds());
  std::printf("Training time: %.2fs\n", total.seconds());
  if (tok.vocab_size() != o.vocab_size)
    std::printf("warning: the text ran out of pairs; vocab size is %d, not %d\n", tok.vocab_size(), o.vocab_size);

  const std::string out = tokenizer_dir();
  tok.save(out);
  std::printf("Saved tokenizer to %s (vocab size %d, hash %016llx)\n", out.c_str(), tok.vocab_size(),
              static_cast<unsigned long long>(tok.hash()));

  const std::string sanity = kSanityText;
  const auto ids = tok.encode(sanity);
  if (tok.decode(ids) != sanity) fail("tok-train: round-trip sanity check failed (please report this bug)");
  std::printf("Sanity check: round trip OK (%zu bytes -> %zu tokens)\n", sanity.size(), ids.size());

  const auto tb = tok.token_bytes();
  int64_t nspecial = 0, sum = 0, nonzero = 0, mn = INT64_MAX, mx = 0;
  for (int32_t v : tb) {
    if (v == 0) {
      ++nspecial;
      continue;
    }
    ++nonzero;
    sum += v;
    mn = std::min<int64_t>(mn, v);
    mx = std::max<int64_t>(mx, v);
  }
  const double mean_bytes = nonzero ? static_cast<double>(sum) / static_cast<double>(nonzero) : 0.0;
  std::printf("token_bytes: %lld special (0 bytes), %lld tokens of %lld..%lld bytes, mean %.3f\n",
              static_cast<long long>(nspecial), static_cast<long long>(nonzero), static_cast<long long>(mn),
              static_cast<long long>(mx), mean_bytes);
  nlohmann::ordered_json d;
  d["max_chars"] = o.max_chars;
  d["doc_cap"] = o.doc_cap;
  d["vocab_size"] = tok.vocab_size();
  d["documents"] = budget.docs();
  d["characters"] = budget.chars();
  d["training_time_s"] = total.seconds();
  d["mean_token_bytes"] = mean_bytes;
  log_report_section("tokenizer-training", "Tokenizer training", d);
}

// Sample texts for tok-eval (written for this project; the kinds nanochat's tok_eval uses).
struct Sample {
  const char* name;
  const char* text;
};
const Sample kSamples[] = {
    {"news",
     "City officials announced on Tuesday that the riverside park will reopen next spring after an "
     "eighteen-month renovation costing $4.2 million. The project adds 1.5 miles of walking paths, a new "
     "playground and lighting along the north bank. \"We heard from hundreds of residents,\" the mayor said, "
     "\"and the most common request was simply more shade.\" About 300 trees will be planted by March."},
    {"korean",
     "\xec\x98\xa4\xeb\x8a\x98\xec\x9d\x80 \xeb\x82\xa0\xec\x94\xa8\xea\xb0\x80 \xeb\xa7\x91\xec\x95\x84\xec\x84\x9c "
     "\xec\xb9\x9c\xea\xb5\xac\xec\x99\x80 \xed\x95\xa8\xea\xbb\x98 \xea\xb3\xb5\xec\x9b\x90\xec\x97\x90 "
     "\xea\xb0\x94\xec\x8a\xb5\xeb\x8b\x88\xeb\x8b\xa4. \xec\xa0\x80\xeb\x85\x81\xec\x97\x90\xeb\x8a\x94 "
     "\xea\xb9\x80\xec\xb9\x98\xec\xb0\x8c\xea\xb0\x9c\xeb\xa5\xbc \xeb\xa8\xb9\xec\x97\x88\xec\x96\xb4\xec\x9a\x94."},
    {"code",
     "def moving_average(xs, k=3):\n    \"\"\"Mean of each window of k values.\"\"\"\n    out = []\n"
     "    for i in range(len(xs) - k + 1):\n        out.append(sum(xs[i:i + k]) / k)\n    return out\n\n"
     "if __name__ == \"__main__\":\n    print(moving_average([1, 2, 3, 4, 5]))  # [2.0, 3.0, 4.0]\n"},
    {"math",
     "\\begin{theorem}Let $f:[a,b]\\to\\mathbb{R}$ be continuous. Then there is $c\\in[a,b]$ with\n"
     "\\[ \\int_a^b f(x)\\,dx = f(c)(b-a). \\]\\end{theorem}\n\\begin{proof}By the extreme value theorem "
     "$m\\le f(x)\\le M$, so $m(b-a)\\le\\int_a^b f\\le M(b-a)$; apply the intermediate value theorem.\\end{proof}"},
    {"science",
     "Photosynthesis converts light energy into chemical energy: chlorophyll absorbs photons mainly at "
     "430 nm and 662 nm, and the overall reaction 6CO2 + 6H2O -> C6H12O6 + 6O2 stores about 2,870 kJ per "
     "mole of glucose. The light-dependent reactions occur in the thylakoid membranes."},
    {"multilingual",
     "\xd0\x92\xd1\x87\xd0\xb5\xd1\x80\xd0\xb0 \xd0\xbc\xd1\x8b \xd0\xb3\xd1\x83\xd0\xbb\xd1\x8f\xd0\xbb\xd0\xb8 "
     "\xd0\xbf\xd0\xbe \xd0\xbd\xd0\xb0\xd0\xb1\xd0\xb5\xd1\x80\xd0\xb5\xd0\xb6\xd0\xbd\xd0\xbe\xd0\xb9. "
     "\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xa4\xa9\xe6\xb0\x94\xe5\xbe\x88\xe5\xa5\xbd\xe3\x80\x82 "
     "\xd8\xb0\xd9\x87\xd8\xa8\xd8\xaa \xd8\xa5\xd9\x84\xd9\x89 \xd8\xa7\xd9\x84\xd8\xb3\xd9\x88\xd9\x82. "
     "Stra\xc3\x9f"
     "enbahn \xc3\xbc"
     "ber die Br\xc3\xbc"
     "cke. \xf0\x9f\x98\x80\xf0\x9f\x91\x8d"},
};

// Prints the row and adds the ratio to `rows` (the card's section).
void eval_line(const Tokenizer& tok, const std::string& name, const std::string& text, nlohmann::ordered_json& rows) {
  const auto ids = tok.encode(text);
  if (tok.decode(ids) != text) fail("tok-eval: decode(encode(x)) != x for ", name, " (please report this bug)");
  const double ratio = ids.empty() ? 0.0 : static_cast<double>(text.size()) / static_cast<double>(ids.size());
  std::printf("%-14s %12zu %12zu %10.3f\n", name.c_str(), text.size(), ids.size(), ratio);
  rows[name + " bytes/token"] = std::round(ratio * 1000.0) / 1000.0;
}

void run_tok_eval() {
  const std::string tdir = tokenizer_dir();
  const Tokenizer tok = Tokenizer::load(tdir);
  std::printf("tokenizer: %s (vocab size %d)\n", tdir.c_str(), tok.vocab_size());
  std::printf("%-14s %12s %12s %10s\n", "text", "bytes", "tokens", "bytes/tok");
  nlohmann::ordered_json rows;
  rows["vocab_size"] = tok.vocab_size();
  for (const Sample& s : kSamples) eval_line(tok, s.name, s.text, rows);

  // The first train shard and the val shard; without both, a note says why the rows are missing.
  std::string train_shard, val_shard;
  try {
    train_shard = data::split_files(data_dir(), "train").front();
    val_shard = data::split_files(data_dir(), "val").front();
  } catch (const Error& e) {
    std::printf("(skipping the train/val rows: %s)\n", e.what());
  }
  if (!val_shard.empty()) {
    // First row group of the first train shard and of the val shard, docs joined by "\n".
    auto first_group = [](const std::string& path) {
      data::ParquetReader r(path);
      if (r.num_row_groups() == 0) fail("tok-eval: ", path, " has no row groups");
      std::string joined;
      const auto docs = r.read_row_group(0);
      for (size_t i = 0; i < docs.size(); ++i) {
        if (i) joined += '\n';
        joined += docs[i];
      }
      return joined;
    };
    eval_line(tok, "train-rg0", first_group(train_shard), rows);
    eval_line(tok, "val-rg0", first_group(val_shard), rows);
  }
  log_report_section("tokenizer-evaluation", "Tokenizer evaluation", rows);
}

}  // namespace

void register_tok(CLI::App& app) {
  auto opts = std::make_shared<TrainOptions>();
  CLI::App* train = app.add_subcommand(
      "tok-train",
      "Train the BPE tokenizer on the train shards of the data directory and save it to $NANOCHAT_BASE_DIR/tokenizer");
  train->add_option("--max-chars", opts->max_chars, "Maximum characters to train on")->capture_default_str();
  train->add_option("--doc-cap", opts->doc_cap, "Maximum characters per document")->capture_default_str();
  train->add_option("--vocab-size", opts->vocab_size, "Vocabulary size, including the 9 special tokens")
      ->capture_default_str();
  train->callback([opts] { run_tok_train(*opts); });

  CLI::App* eval = app.add_subcommand(
      "tok-eval",
      "Report the tokenizer's compression (bytes/token) on sample texts and the first train/val row groups");
  eval->callback([] { run_tok_eval(); });
}

}  // namespace nanochat::cli
