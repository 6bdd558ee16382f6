// `nanochat data pack|inspect|download|verify|manifest`: build, describe, fetch and check parquet
// shards in nanochat's layout (nanochat/dataset.py, dev/repackage_data_reference.py;
// docs/nanochat.md 5.1-5.2).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "nanochat/cli/commands.h"
#include "nanochat/cli/data_tasks.h"
#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/timer.h"
#include "nanochat/data/download.h"
#include "nanochat/data/manifest.h"
#include "nanochat/data/pack.h"
#include "nanochat/data/verify.h"

namespace nanochat::cli {

namespace {

// ---- verify ---- (`nanochat data verify`: decode every page of shards, data/verify.h)
void register_data_verify(CLI::App* data) {
  struct VerifyArgs {
    std::vector<std::string> files;
    int threads = 0;
    bool quiet = false;
  };
  auto va = std::make_shared<VerifyArgs>();
  CLI::App* v = data->add_subcommand(
      "verify",
      "Decode every page of every row group of parquet shards (page CRCs checked where present) and report corrupt "
      "ones; "
      "results are recorded in <dir>/.nanochat_verified.json, so base-train does not check those shards again");
  v->add_option("files", va->files, "Parquet files or directories (default: the data directory)");
  v->add_option("--threads", va->threads, "Worker threads (0 = all hardware threads)")->capture_default_str();
  v->add_flag("-q,--quiet", va->quiet, "No progress bar");
  v->callback([va] {
    std::vector<std::string> files;
    if (va->files.empty()) va->files.push_back(data_dir());
    for (const auto& f : va->files) {
      if (std::filesystem::is_directory(f)) {
        auto in = data::list_parquet_files(f);
        if (in.empty()) fail("nanochat data verify: ", f, " holds no *.parquet file");
        files.insert(files.end(), in.begin(), in.end());
      } else {
        files.push_back(f);
      }
    }
    const Timer timer;
    auto res = data::verify_shards(files, {va->threads, !va->quiet});
    const double s = timer.seconds();
    const bool recorded = data::record_results(res);
    int bad = 0;
    int64_t groups = 0, pages = 0, crcs = 0, bytes = 0;
    for (const auto& r : res) {
      groups += r.row_groups;
      pages += r.stats.pages;
      crcs += r.stats.crc_pages;
      bytes += r.stats.chunk_bytes;
      std::printf("%s  %s\n", r.ok ? "ok     " : "CORRUPT", r.ok ? r.path.c_str() : r.error.c_str());
      bad += !r.ok;
    }
    std::printf("%zu file(s), %lld row groups, %lld pages (%lld with CRCs), %.1f MB checked in %.2f s: %s%s\n",
                res.size(), static_cast<long long>(groups), static_cast<long long>(pages), static_cast<long long>(crcs),
                static_cast<double>(bytes) / 1e6, s, bad ? str_cat(bad, " corrupt").c_str() : "all good",
                recorded ? "" : " (results not recorded: a directory is not writable)");
    std::fflush(stdout);
    if (bad)
      fail(bad,
           " corrupt shard(s) (listed above): re-download each (delete it, then run 'nanochat data download' again) "
           "or re-pack the corpus ('nanochat data pack'), then run 'nanochat data verify' again");
  });
}

// ---- manifest ---- (`nanochat data manifest`: what the ranks of a job compare, data/manifest.h)
void register_data_manifest(CLI::App* data) {
  auto dir = std::make_shared<std::string>();
  CLI::App* m = data->add_subcommand(
      "manifest",
      "Print what the ranks of a job compare about the shards: name, split, size, row groups and CRC-32 of every "
      "byte (cached in <dir>/.nanochat_content.json); the same output on two machines means the same data");
  m->add_option("dir", *dir, "Data directory (default: the data directory)");
  m->callback([dir] {
    if (dir->empty()) *dir = data_dir();
    const auto j = nlohmann::json::parse(data::shard_manifest(*dir));
    for (const auto& [name, e] : j.items())
      std::printf("%s  %-5s  %12lld bytes  %5d row groups  crc32 %s\n", name.c_str(),
                  e.at("split").get<std::string>().c_str(), static_cast<long long>(e.at("bytes").get<int64_t>()),
                  e.at("row_groups").get<int>(), e.at("crc32").get<std::string>().c_str());
    std::fflush(stdout);
  });
}

}  // namespace

void register_data(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Build, inspect and download parquet text shards (nanochat layout)");
  data->require_subcommand(1);

  // ---- pack ----
  auto pack = std::make_shared<data::PackOptions>();
  CLI::App* p = data->add_subcommand(
      "pack",
      "Pack text/JSONL files into shuffled shards shard_00000.parquet ... (the last one is validation). "
      "Train shards close at >= --shard-chars characters and a multiple of 1024 documents; the remainder "
      "is kept in the last train shard.");
  p->add_option("inputs", pack->inputs,
                "Input files or directories (*.jsonl/*.json: {\"text\": ...} per line; else text)")
      ->required();
  p->add_option("--out", pack->out_dir, "Output directory for the shards")->required();
  p->add_option("--shard-chars", pack->shard_chars, "Characters per train shard (nanochat: 250000000)")
      ->capture_default_str();
  p->add_option("--val-docs", pack->val_docs, "Documents in the validation shard")->capture_default_str();
  p->add_option("--seed", pack->seed, "Shuffle seed")->capture_default_str();
  p->add_option("--split", pack->split, "Text files: 'doc' (one document per file) or 'paragraphs'")
      ->capture_default_str();
  p->add_option("--row-group-size", pack->row_group_size, "Documents per row group (nanochat: 1024)")
      ->capture_default_str();
  p->add_flag("--force", pack->force, "Replace .parquet files already in --out");
  p->add_flag("-q,--quiet", pack->quiet, "No per-shard lines");
  p->callback([pack] {
    data::PackResult r = data::pack_corpus(*pack);
    std::printf(
        "packed %lld documents (%lld characters) into %zu train shard(s) + 1 validation shard (%lld documents) in %s\n",
        static_cast<long long>(r.docs), static_cast<long long>(r.chars), r.train_shards.size(),
        static_cast<long long>(r.val_docs), pack->out_dir.c_str());
    if (r.skipped) std::printf("skipped %lld empty or null documents\n", static_cast<long long>(r.skipped));
    if (r.replaced_utf8)
      std::printf("replaced %lld invalid UTF-8 sequences with U+FFFD\n", static_cast<long long>(r.replaced_utf8));
  });

  // ---- inspect ----
  auto file = std::make_shared<std::string>();
  auto preview = std::make_shared<int>(200);
  CLI::App* in =
      data->add_subcommand("inspect", "Show a parquet file's schema, codec, encodings, row groups and first document");
  in->add_option("file", *file, "Parquet file")->required();
  in->add_option("--preview", *preview, "Characters of the first document to show")->capture_default_str();
  in->callback([file, preview] { std::fputs(data::inspect_parquet(*file, *preview).c_str(), stdout); });

  // ---- download ----
  auto dl = std::make_shared<data::DownloadOptions>();
  CLI::App* d = data->add_subcommand(
      "download",
      "Download nanochat's pretraining shards shard_00000..N-1 plus the validation shard 06542 (resumable); "
      "--eval-bundle: the CORE eval bundle; --tasks: the chat tasks' datasets");
  CLI::Option* n_opt = d->add_option("-n,--num-files", dl->num_files, "Number of train shards (-1 = all 6542)");
  auto bundle = std::make_shared<bool>(false);
  auto bundle_url = std::make_shared<std::string>(data::kEvalBundleUrl);
  d->add_flag("--eval-bundle", *bundle,
              "Fetch nanochat's CORE eval bundle into $NANOCHAT_BASE_DIR/eval_bundle (with -n: the shards too)");
  d->add_option("--eval-bundle-url", *bundle_url, "Where eval_bundle.zip lives")->capture_default_str();
  auto task_specs = std::make_shared<std::vector<std::string>>();
  auto hub_url = std::make_shared<std::string>(data::kDefaultHubUrl);
  CLI::Option* tasks_opt =
      d->add_option("--tasks", *task_specs,
                    "Fetch the chat tasks' datasets into $NANOCHAT_BASE_DIR/task_data (nanochat's layout): task names "
                    "(SmolTalk MMLU GSM8K ARC-Easy ARC-Challenge HumanEval) or NAME/SUBSET/SPLIT; none = all that "
                    "chat-sft and chat-eval read")
          ->expected(0, -1);
  d->add_option("--hub-url", *hub_url, "The Hugging Face hub whose API lists the datasets' parquet files")
      ->capture_default_str();
  d->add_option("--base-url", dl->base_url, "Where the shards live")->capture_default_str();
  d->add_option("--dir", dl->dir,
                "Target directory (default: $NANOCHAT_DATA_DIR or $NANOCHAT_BASE_DIR/base_data_climbmix)");
  d->add_option("-w,--num-workers", dl->workers, "Parallel downloads")->capture_default_str();
  d->add_option("--retries", dl->attempts, "Attempts per file")->capture_default_str();
  d->add_flag("-q,--quiet", dl->quiet, "No progress bar");
  d->callback([dl, n_opt, bundle, bundle_url, tasks_opt, task_specs, hub_url] {
    if (*bundle) data::download_eval_bundle(base_dir(), *bundle_url, *dl);
    if (tasks_opt->count() > 0) download_task_data(*task_specs, *hub_url, "", *dl);
    if ((*bundle || tasks_opt->count() > 0) && n_opt->count() == 0) return;
    if (n_opt->count() == 0)
      fail("data download needs -n N (train shards; -1 = all), --eval-bundle or --tasks [names]");
    if (dl->dir.empty()) dl->dir = data_dir();
    data::DownloadResult r = data::download_shards(*dl);
    std::printf("%d shard(s) in %s (%d downloaded, %d already present)\n", r.downloaded + r.present, dl->dir.c_str(),
                r.downloaded, r.present);
  });

  register_data_verify(data);
  register_data_manifest(data);
  register_data_task_jsonl(data);
}

}  // namespace nanochat::cli
