#pragma once
// `nanochat data download`: fetch nanochat's pretraining shards over HTTP(S) with libcurl
// (nanochat/dataset.py; docs/nanochat.md 5.1). Files shard_%05d.parquet for 0..N-1 plus the validation shard
// 06542 (always). Each file streams into "<name>.tmp"; an existing .tmp is resumed with an HTTP
// Range request; failures are retried with exponential backoff; a finished file must open as
// Parquet (magic + footer) before it is renamed into place. Existing valid shards are skipped.
#include <string>
#include <vector>

namespace nanochat::data {

/// nanochat's hosted dataset (karpathy/climbmix-400b-shuffle on HuggingFace).
inline constexpr const char* kDefaultShardBaseUrl =
    "https://huggingface.co/datasets/karpathy/climbmix-400b-shuffle/resolve/main";
/// Index of the last shard (the validation shard): files 00000 ... 06542.
inline constexpr int kMaxShard = 6542;

struct DownloadOptions {
  int num_files = -1;  // train shards 0..num_files-1 (clamped to kMaxShard; -1 = all)
  std::string base_url = kDefaultShardBaseUrl;
  std::string dir;       // target directory (created)
  int workers = 4;       // parallel downloads
  int attempts = 5;      // tries per file
  double backoff_s = 2;  // wait backoff_s * 2^(attempt-1) seconds before a retry
  long connect_timeout_s = 30;
  long stall_timeout_s = 60;  // abort a transfer that moves no bytes for this long
  bool quiet = false;         // no progress bar
};

struct DownloadResult {
  int downloaded = 0;  // fetched now
  int present = 0;     // already there (and valid)
  int resumed = 0;     // of the downloaded, how many continued a partial .tmp
};

/// Downloads the shards (see the file comment). Permanent HTTP errors (4xx) are not retried.
/// Throws nanochat::Error listing every file that failed, with its URL and the last reason.
DownloadResult download_shards(const DownloadOptions& opt);

/// nanochat's CORE eval bundle (scripts/base_eval.py EVAL_BUNDLE_URL).
inline constexpr const char* kEvalBundleUrl = "https://karpathy-public.s3.us-west-2.amazonaws.com/eval_bundle.zip";

/// nanochat's place_eval_bundle: fetches `url` into <base_dir>/eval_bundle.zip (through a .tmp that
/// a rerun resumes, with opt's retries, timeouts and backoff; opt.dir and the shard fields are not
/// used), unpacks the archive's eval_bundle/ folder into <base_dir>/eval_bundle (core/zip_extract.h)
/// and removes the zip. Does nothing when <base_dir>/eval_bundle/core.yaml exists. Returns the
/// folder. Throws nanochat::Error naming the URL and the reason, or the archive and record.
std::string download_eval_bundle(const std::string& base_dir, const std::string& url, const DownloadOptions& opt);

/// The Hugging Face hub, whose API lists every dataset's parquet export.
inline constexpr const char* kDefaultHubUrl = "https://huggingface.co";

/// One dataset (a subset and split of a hub repository) to fetch into `dir`.
struct HubDataset {
  std::string repo, subset, split;  ///< "cais/mmlu", "all", "test"
  std::string dir;                  ///< target folder (created)
};

struct HubDownloadResult {
  int datasets_present = 0;  ///< already complete (manifest.json there): not touched
  int datasets_fetched = 0;  ///< completed now
  DownloadResult files;      ///< the parquet files of the fetched datasets
};

/// nanochat's load_hub_dataset download (tasks/common.py): for each dataset without a
/// <dir>/manifest.json, GET <hub_url>/api/datasets/<repo>/parquet/<subset>/<split> (a JSON list of
/// parquet URLs), fetch URL i into <dir>/<i as %05d>.parquet like the shards (opt's workers,
/// retries, backoff, resume of a .tmp, progress; each file checked to be Parquet; files already
/// there and valid are kept), and when all are there write manifest.json (the list of file names)
/// last, through a .tmp and a rename. Throws nanochat::Error naming the listing URL and the reason
/// (not JSON, not a list of URLs, HTTP error after the retries), or listing every failed file.
HubDownloadResult download_hub_datasets(const std::vector<HubDataset>& sets, const std::string& hub_url,
                                        const DownloadOptions& opt);

}  // namespace nanochat::data
