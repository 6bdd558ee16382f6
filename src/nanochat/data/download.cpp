#include "nanochat/data/download.h"

#include <curl/curl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/zip_extract.h"
#include "nanochat/data/parquet.h"
#include "nanochat/data/parquet_table.h"

namespace fs = std::filesystem;

namespace nanochat::data {

namespace {

struct Job {
  std::string name, url, path;
  bool parquet = true;       // the finished file must open as Parquet
  bool any_columns = false;  // ... with any columns (a hub dataset), not a shard's "text" column
};

// Shared progress counters (bytes written by all workers; files finished).
struct Progress {
  std::atomic<int64_t> bytes{0};
  std::atomic<int> done{0};
  int total = 0;
};

struct Transfer {
  FILE* f = nullptr;
  Progress* progress = nullptr;
  long status = 0;
  bool write_error = false;
};

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t bytes = size * n;
  if (std::fwrite(data, 1, bytes, t->f) != bytes) {
    t->write_error = true;
    return 0;  // makes curl abort with CURLE_WRITE_ERROR
  }
  t->progress->bytes += static_cast<int64_t>(bytes);
  return bytes;
}

// One attempt to fetch job.url into job.path + ".tmp" (resuming it when it exists).
// Returns "" on success, else the reason; *permanent is set for errors retrying cannot fix.
std::string fetch_once(const Job& job, const DownloadOptions& opt, Progress& progress, bool* permanent, bool* resumed,
                       bool* restart) {
  const std::string tmp = job.path + ".tmp";
  std::error_code ec;
  int64_t have = fs::exists(tmp, ec) ? static_cast<int64_t>(fs::file_size(tmp, ec)) : 0;
  if (ec) have = 0;
  CURL* curl = curl_easy_init();
  if (!curl) return "curl_easy_init failed";
  struct Cleanup {
    CURL* c;
    ~Cleanup() { curl_easy_cleanup(c); }
  } cleanup{curl};
  char errbuf[CURL_ERROR_SIZE] = {0};
  Transfer t;
  t.progress = &progress;
  t.f = std::fopen(tmp.c_str(), have > 0 ? "ab" : "wb");
  if (!t.f) {
    *permanent = true;
    return "cannot write " + tmp;
  }
  curl_easy_setopt(curl, CURLOPT_URL, job.url.c_str());
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "nanochat.cpp");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, opt.connect_timeout_s);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, opt.stall_timeout_s);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  if (have > 0) curl_easy_setopt(curl, CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(have));
  // Only keep the body of a successful response: a 4xx/5xx page must not end up in the .tmp.
  curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
  progress.bytes += have;
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &t.status);
  std::fclose(t.f);
  if (t.write_error) {
    *permanent = true;
    return "cannot write " + tmp + " (disk full?)";
  }
  if (rc == CURLE_HTTP_RETURNED_ERROR) {
    if (t.status == 416) {  // our partial file is not a prefix the server can continue: start over
      fs::remove(tmp, ec);
      *restart = true;
      return "HTTP 416 on resume; restarting from scratch";
    }
    *permanent = t.status >= 400 && t.status < 500 && t.status != 408 && t.status != 429;
    return str_cat("HTTP ", t.status, t.status == 404 ? " (not found)" : "");
  }
  if (rc == CURLE_RANGE_ERROR) {  // server ignored the Range request: restart cleanly
    fs::remove(tmp, ec);
    *restart = true;
    return "server does not support resuming (HTTP Range); restarting from scratch";
  }
  if (rc != CURLE_OK) return str_cat(curl_easy_strerror(rc), errbuf[0] ? std::string(": ") + errbuf : std::string());
  if (have > 0) *resumed = true;
  // The file must be Parquet with an intact footer before it becomes a shard.
  if (job.parquet) try {
      if (job.any_columns) {
        ParquetTable check(tmp);
      } else {
        ParquetReader check(tmp);
      }
    } catch (const Error& e) {
      fs::remove(tmp, ec);
      return std::string("downloaded file is not a valid parquet file (") + e.what() + ")";
    }
  fs::rename(tmp, job.path, ec);
  if (ec) {
    *permanent = true;
    return "cannot rename " + tmp + ": " + ec.message();
  }
  return "";
}

size_t on_text(char* data, size_t size, size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() > (size_t(64) << 20)) return 0;  // a listing is small; stop a runaway body
  out->append(data, size * n);
  return size * n;
}

// GET url into *body with opt's timeouts and retries. Returns "" on success, else the reason.
std::string fetch_text(const std::string& url, const DownloadOptions& opt, std::string* body) {
  std::string reason;
  for (int attempt = 1; attempt <= opt.attempts; ++attempt) {
    body->clear();
    CURL* curl = curl_easy_init();
    if (!curl) return "curl_easy_init failed";
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "nanochat.cpp");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, opt.connect_timeout_s);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, opt.stall_timeout_s);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_text);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
    const CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
    if (rc == CURLE_OK) return "";
    bool permanent = false;
    if (rc == CURLE_HTTP_RETURNED_ERROR) {
      permanent = status >= 400 && status < 500 && status != 408 && status != 429;
      reason = str_cat("HTTP ", status, status == 404 ? " (not found: is the repository, subset or split right?)" : "");
    } else {
      reason = str_cat(curl_easy_strerror(rc), errbuf[0] ? std::string(": ") + errbuf : std::string());
    }
    if (permanent || attempt == opt.attempts) break;
    const double wait = opt.backoff_s * std::pow(2.0, attempt - 1);
    if (!opt.quiet)
      std::fprintf(stderr, "nanochat: %s: attempt %d/%d failed (%s); retrying in %.1f s\n", url.c_str(), attempt,
                   opt.attempts, reason.c_str(), wait);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
  return reason;
}

std::string mb(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(b) / 1e6);
  return buf;
}

// Fetches every job with opt.workers threads (retries, resume, progress bar); adds to res.
// Throws nanochat::Error listing every file that failed.
void run_jobs(const std::vector<Job>& jobs, const DownloadOptions& opt, DownloadResult& res) {
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("data download: libcurl failed to initialise");
  Progress progress;
  progress.total = static_cast<int>(jobs.size());
  std::atomic<size_t> next{0};
  std::atomic<int> resumed{0};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> failures;
  int running = std::min<int>(opt.workers, static_cast<int>(jobs.size()));
  std::atomic<bool> stop{false};

  auto worker = [&] {
    for (;;) {
      size_t k = next++;
      if (k >= jobs.size() || stop) break;
      const Job& job = jobs[k];
      std::string reason;
      for (int attempt = 1; attempt <= opt.attempts; ++attempt) {
        bool permanent = false, was_resumed = false, restart = false;
        reason = fetch_once(job, opt, progress, &permanent, &was_resumed, &restart);
        if (reason.empty()) {
          if (was_resumed) resumed++;
          break;
        }
        if (permanent || attempt == opt.attempts) break;
        if (restart) continue;  // the partial file was discarded: start over at once
        double wait = opt.backoff_s * std::pow(2.0, attempt - 1);
        if (!opt.quiet)
          std::fprintf(stderr, "\nnanochat: %s: attempt %d/%d failed (%s); retrying in %.1f s\n", job.name.c_str(),
                       attempt, opt.attempts, reason.c_str(), wait);
        std::unique_lock<std::mutex> lk(mu);
        cv.wait_for(lk, std::chrono::duration<double>(wait), [&] { return stop.load(); });
      }
      if (reason.empty()) {
        progress.done++;
      } else {
        std::lock_guard<std::mutex> lk(mu);
        failures.push_back(job.name + " (" + job.url + "): " + reason);
      }
    }
    std::lock_guard<std::mutex> lk(mu);
    running--;
    cv.notify_all();
  };
  std::vector<std::thread> threads;
  const int nthreads = running;
  for (int i = 0; i < nthreads; ++i) threads.emplace_back(worker);

  const bool tty = isatty(fileno(stderr));
  auto t0 = std::chrono::steady_clock::now();
  auto draw = [&](bool final_line) {
    if (opt.quiet) return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int done = progress.done.load();
    int width = 30, fill = progress.total ? width * done / progress.total : width;
    std::string bar = std::string(static_cast<size_t>(fill), '#') + std::string(static_cast<size_t>(width - fill), '.');
    std::fprintf(stderr, "%s[%s] %d/%d files  %s  %.1f MB/s%s", tty ? "\r" : "", bar.c_str(), done, progress.total,
                 mb(progress.bytes.load()).c_str(), s > 0 ? static_cast<double>(progress.bytes.load()) / 1e6 / s : 0.0,
                 (final_line || !tty) ? "\n" : "");
    std::fflush(stderr);
  };
  {
    std::unique_lock<std::mutex> lk(mu);
    while (running > 0) {
      cv.wait_for(lk, std::chrono::milliseconds(tty ? 200 : 5000));
      if (running > 0 && (tty || !opt.quiet)) {
        lk.unlock();
        draw(false);
        lk.lock();
      }
    }
  }
  for (auto& th : threads) th.join();
  draw(true);
  curl_global_cleanup();

  res.downloaded += progress.done.load();
  res.resumed += resumed.load();
  if (!failures.empty()) {
    std::string msg = str_cat("data download: ", failures.size(), " of ", jobs.size(), " file(s) failed:");
    for (const auto& f : failures) msg += "\n  " + f;
    msg += "\n(partial .tmp files are kept; rerun the same command to resume)";
    fail(msg);
  }
}

}  // namespace

DownloadResult download_shards(const DownloadOptions& opt) {
  if (opt.dir.empty()) fail("data download: --dir is empty");
  if (opt.workers < 1) fail("data download: --num-workers must be at least 1");
  if (opt.attempts < 1) fail("data download: --retries must be at least 1");
  if (opt.num_files < -1) fail("data download: -n must be -1 (all) or a count of train shards");
  std::error_code ec;
  fs::create_directories(opt.dir, ec);
  if (ec) fail("data download: cannot create ", opt.dir, ": ", ec.message());

  int n = opt.num_files < 0 ? kMaxShard : std::min(opt.num_files, kMaxShard);
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i);
  ids.push_back(kMaxShard);  // the validation shard, always
  std::string base = opt.base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();

  DownloadResult res;
  std::vector<Job> jobs;
  for (int id : ids) {
    char name[32];
    std::snprintf(name, sizeof name, "shard_%05d.parquet", id);
    Job j{name, base + "/" + name, (fs::path(opt.dir) / name).string()};
    if (fs::exists(j.path, ec)) {
      try {
        ParquetReader check(j.path);
        res.present++;
        continue;
      } catch (const Error& e) {
        std::fprintf(stderr, "nanochat: %s is not a valid shard (%s); downloading it again\n", j.path.c_str(),
                     e.what());
        fs::remove(j.path, ec);
      }
    }
    jobs.push_back(std::move(j));
  }
  if (jobs.empty()) return res;

  run_jobs(jobs, opt, res);
  return res;
}

std::string download_eval_bundle(const std::string& base_dir, const std::string& url, const DownloadOptions& opt) {
  const std::string dir = (fs::path(base_dir) / "eval_bundle").string();
  std::error_code ec;
  if (fs::exists(dir + "/core.yaml", ec)) return dir;
  if (opt.attempts < 1) fail("data download: --retries must be at least 1");
  fs::create_directories(base_dir, ec);
  if (ec) fail("data download: cannot create ", base_dir, ": ", ec.message());
  Job job{"eval_bundle.zip", url, (fs::path(base_dir) / "eval_bundle.zip").string(), false};
  if (!fs::exists(job.path, ec)) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("data download: libcurl failed to initialise");
    Progress progress;
    progress.total = 1;
    std::string reason;
    for (int attempt = 1; attempt <= opt.attempts; ++attempt) {
      bool permanent = false, resumed = false, restart = false;
      reason = fetch_once(job, opt, progress, &permanent, &resumed, &restart);
      if (reason.empty() || permanent || attempt == opt.attempts) break;
      if (restart) continue;
      const double wait = opt.backoff_s * std::pow(2.0, attempt - 1);
      if (!opt.quiet)
        std::fprintf(stderr, "nanochat: eval_bundle.zip: attempt %d/%d failed (%s); retrying in %.1f s\n", attempt,
                     opt.attempts, reason.c_str(), wait);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    curl_global_cleanup();
    if (!reason.empty())
      fail("data download: eval_bundle.zip (", url, "): ", reason,
           "\n(a partial .tmp is kept; rerun the same command to resume)");
  }
  const std::string staging = dir + ".tmp";
  fs::remove_all(staging, ec);
  const std::vector<std::string> files = extract_zip(job.path, staging, "eval_bundle/");
  if (!fs::exists(staging + "/core.yaml", ec))
    fail(job.path, " holds no eval_bundle/core.yaml; it is not nanochat's eval bundle (remove it and download again)");
  fs::remove_all(dir, ec);
  fs::rename(staging, dir, ec);
  if (ec) fail("data download: cannot rename ", staging, " to ", dir, ": ", ec.message());
  fs::remove(job.path, ec);
  if (!opt.quiet) std::printf("Placed eval_bundle directory at %s (%zu files)\n", dir.c_str(), files.size());
  return dir;
}

HubDownloadResult download_hub_datasets(const std::vector<HubDataset>& sets, const std::string& hub_url,
                                        const DownloadOptions& opt) {
  if (opt.workers < 1) fail("data download: --num-workers must be at least 1");
  if (opt.attempts < 1) fail("data download: --retries must be at least 1");
  std::string hub = hub_url;
  while (!hub.empty() && hub.back() == '/') hub.pop_back();
  HubDownloadResult res;
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("data download: libcurl failed to initialise");
  struct Global {
    ~Global() { curl_global_cleanup(); }
  } global;
  for (const HubDataset& set : sets) {
    const std::string label = set.repo + " " + set.subset + "/" + set.split;
    const fs::path dir(set.dir), manifest = dir / "manifest.json";
    std::error_code ec;
    if (fs::exists(manifest, ec)) {
      res.datasets_present++;
      if (!opt.quiet) std::printf("%s: present in %s\n", label.c_str(), set.dir.c_str());
      continue;
    }
    fs::create_directories(dir, ec);
    if (ec) fail("data download: cannot create ", set.dir, ": ", ec.message());
    const std::string listing = hub + "/api/datasets/" + set.repo + "/parquet/" + set.subset + "/" + set.split;
    std::string body;
    const std::string why = fetch_text(listing, opt, &body);
    if (!why.empty()) fail("data download: ", label, ": listing ", listing, " failed: ", why);
    nlohmann::json urls;
    try {
      urls = nlohmann::json::parse(body);
    } catch (const std::exception&) {
      fail("data download: ", label, ": listing ", listing, " is not JSON (", body.substr(0, 200), ")");
    }
    if (!urls.is_array() || urls.empty())
      fail("data download: ", label, ": listing ", listing, " is not a non-empty JSON list of parquet URLs");
    std::vector<Job> jobs;
    nlohmann::json names = nlohmann::json::array();
    for (size_t i = 0; i < urls.size(); ++i) {
      if (!urls[i].is_string()) fail("data download: ", label, ": listing ", listing, ": entry ", i, " is not a URL");
      char name[32];
      std::snprintf(name, sizeof name, "%05zu.parquet", i);
      names.push_back(name);
      Job j{label + " " + name, urls[i].get<std::string>(), (dir / name).string(), true, true};
      if (fs::exists(j.path, ec)) {
        try {
          ParquetTable check(j.path);
          res.files.present++;
          continue;
        } catch (const Error& e) {
          std::fprintf(stderr, "nanochat: %s is not a valid parquet file (%s); downloading it again\n", j.path.c_str(),
                       e.what());
          fs::remove(j.path, ec);
        }
      }
      jobs.push_back(std::move(j));
    }
    if (!opt.quiet) std::printf("%s: %zu file(s) into %s\n", label.c_str(), urls.size(), set.dir.c_str());
    run_jobs(jobs, opt, res.files);
    const fs::path tmp = dir / "manifest.json.tmp";
    {
      std::ofstream f(tmp);
      f << names.dump();
      if (!f) fail("data download: cannot write ", tmp.string());
    }
    fs::rename(tmp, manifest, ec);
    if (ec) fail("data download: cannot rename ", tmp.string(), " to ", manifest.string(), ": ", ec.message());
    res.datasets_fetched++;
  }
  return res;
}

}  // namespace nanochat::data
