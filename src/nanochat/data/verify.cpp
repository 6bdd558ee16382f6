#include "nanochat/data/verify.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "nanochat/core/error.h"
#include "nanochat/data/loader.h"

namespace nanochat::data {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// Bumped when the check gets stricter, so shards recorded by an older check are checked again.
constexpr int kCheckVersion = 1;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Size, mtime and a CRC-32 of the first 4 KiB and of the footer (the last 8 bytes give its
// length; capped at 1 MiB): cheap to compute, and changes when the file is replaced or rewritten.
void fingerprint(ShardCheck& c) {
  int fd = ::open(c.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(c.path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(c.path, ": cannot stat: ", std::strerror(errno));
  }
  c.size = st.st_size;
  c.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  auto crc_range = [&](uLong crc, int64_t off, int64_t n) {
    std::string buf(static_cast<size_t>(std::max<int64_t>(n, 0)), '\0');
    ssize_t k = n > 0 ? ::pread(fd, buf.data(), buf.size(), off) : 0;
    if (k < 0) k = 0;
    return crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(k));
  };
  uLong crc = crc_range(0, 0, std::min<int64_t>(c.size, 4096));
  int64_t tail = std::min<int64_t>(c.size, 65536);
  if (c.size >= 12) {
    unsigned char t[4] = {0, 0, 0, 0};
    if (::pread(fd, t, 4, c.size - 8) == 4) {
      int64_t len = int64_t(t[0]) | int64_t(t[1]) << 8 | int64_t(t[2]) << 16 | int64_t(t[3]) << 24;
      if (len + 8 <= c.size && len <= (int64_t(1) << 20)) tail = len + 8;
    }
  }
  c.fingerprint = static_cast<uint32_t>(crc_range(crc, c.size - tail, tail));
  ::close(fd);
}

// "<path>: row group 1 (of 3), column "text": <what>", without repeating the path.
std::string row_group_error(const std::string& path, int rg, int n, const std::string& what) {
  std::string w = what;
  if (w.rfind(path + ": ", 0) == 0) w = w.substr(path.size() + 2);
  return str_cat(path, ": row group ", rg, " (of ", n, "), column \"text\": ", w);
}

// Progress on stderr: a bar redrawn in place on a terminal, else a line every 10 s.
class Progress {
 public:
  Progress(bool on, int files) : on_(on), files_(files), tty_(isatty(fileno(stderr))), t0_(Clock::now()), last_(t0_) {}
  void update(int64_t done, int64_t total, int64_t bytes, bool final) {
    if (!on_) return;
    const double dt = seconds_since(last_);
    if (!final && dt < (tty_ ? 0.2 : 10.0)) return;
    if (final && !tty_ && !printed_) return;  // short checks: the caller's summary line is enough
    last_ = Clock::now();
    const int width = 30, fill = total ? static_cast<int>(width * done / total) : width;
    const double s = seconds_since(t0_);
    std::fprintf(stderr, "%sData check: [%s%s] %lld/%lld row groups of %d shard(s), %.1f MB, %.0f MB/s%s",
                 tty_ ? "\r" : "", std::string(static_cast<size_t>(fill), '#').c_str(),
                 std::string(static_cast<size_t>(width - fill), '.').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), files_, static_cast<double>(bytes) / 1e6,
                 s > 0 ? static_cast<double>(bytes) / 1e6 / s : 0.0, (tty_ && !final) ? "" : "\n");
    std::fflush(stderr);
    printed_ = true;
  }

 private:
  bool on_;
  int files_;
  bool tty_;
  Clock::time_point t0_, last_;
  bool printed_ = false;
};

// Runs fn(i, worker) for i in [0, n) on `threads` workers (worker in [0, threads)); the calling
// thread runs tick() every 50 ms meanwhile.
template <typename Fn, typename Tick>
void parallel_for(int64_t n, int threads, const Fn& fn, const Tick& tick) {
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::condition_variable cv;
  const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  int running = t;
  auto work = [&](int worker) {
    for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i, worker);
    std::lock_guard<std::mutex> lk(mu);
    if (--running == 0) cv.notify_all();
  };
  std::vector<std::thread> pool;
  for (int k = 0; k < t; ++k) pool.emplace_back(work, k);
  for (;;) {
    std::unique_lock<std::mutex> lk(mu);
    if (cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return running == 0; })) break;
    lk.unlock();
    tick();
  }
  for (auto& th : pool) th.join();
}

}  // namespace

std::vector<ShardCheck> verify_shards(const std::vector<std::string>& files, const VerifyOptions& opt) {
  const int threads =
      opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<ShardCheck> out(files.size());
  std::vector<int> first_bad(files.size(), -1);  // lowest failing row group
  std::mutex mu;
  Progress progress(opt.progress, static_cast<int>(files.size()));
  std::atomic<int64_t> done{0}, total{0}, bytes{0};
  auto tick = [&] { progress.update(done.load(), total.load(), bytes.load(), false); };

  // Footers (and fingerprints) of all files.
  parallel_for(
      static_cast<int64_t>(files.size()), threads,
      [&](int64_t f, int) {
        ShardCheck& c = out[static_cast<size_t>(f)];
        c.path = files[static_cast<size_t>(f)];
        try {
          fingerprint(c);
          ParquetReader r(c.path);
          c.row_groups = r.num_row_groups();
          total += c.row_groups;
        } catch (const std::exception& e) {
          c.ok = false;
          c.error = e.what();
        }
      },
      tick);

  // Every row group; each thread keeps the reader of the file it is in.
  std::vector<std::pair<int, int>> tasks;
  for (size_t f = 0; f < out.size(); ++f)
    for (int g = 0; g < out[f].row_groups; ++g) tasks.emplace_back(static_cast<int>(f), g);
  struct Cache {
    int file = -1;
    std::optional<ParquetReader> reader;
  };
  std::vector<Cache> cache(static_cast<size_t>(threads));
  parallel_for(
      static_cast<int64_t>(tasks.size()), threads,
      [&](int64_t i, int worker) {
        Cache& cc = cache[static_cast<size_t>(worker)];
        const auto [f, g] = tasks[static_cast<size_t>(i)];
        ShardCheck& c = out[static_cast<size_t>(f)];
        PageStats st;
        std::string err;
        try {
          if (cc.file != f) {
            cc.reader.reset();
            cc.file = f;
            cc.reader.emplace(c.path);
          }
          cc.reader->read_row_group(g, &st);
        } catch (const std::exception& e) {
          err = row_group_error(c.path, g, c.row_groups, e.what());
        }
        bytes += st.chunk_bytes;
        done++;
        std::lock_guard<std::mutex> lk(mu);
        c.stats.pages += st.pages;
        c.stats.crc_pages += st.crc_pages;
        c.stats.chunk_bytes += st.chunk_bytes;
        c.stats.text_bytes += st.text_bytes;
        if (!err.empty() && (first_bad[static_cast<size_t>(f)] < 0 || g < first_bad[static_cast<size_t>(f)])) {
          first_bad[static_cast<size_t>(f)] = g;
          c.ok = false;
          c.error = err;
        }
      },
      tick);
  progress.update(done.load(), total.load(), bytes.load(), true);
  return out;
}

namespace {

// $NANOCHAT_DATA_CHECK_WAIT_S (default 3600): how long to wait for another process's check.
double wait_limit_s() {
  const char* env = std::getenv("NANOCHAT_DATA_CHECK_WAIT_S");
  if (!env || !*env) return 3600.0;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(v > 0))
    fail("NANOCHAT_DATA_CHECK_WAIT_S='", env, "' is not a positive number of seconds (default 3600)");
  return v;
}

// An exclusive flock on "<dir>/.nanochat_verified.lock" for the life of the object, so the
// processes sharing a data directory check (or hash) and record its shards one at a time. held()
// is false when the lock file cannot be created (a read-only directory): then nothing is recorded.
// `activity` names the work in the waiting messages ("checking", "hashing").
class DirLock {
 public:
  explicit DirLock(const std::string& dir, const char* activity = "checking")
      : path_((fs::path(dir) / ".nanochat_verified.lock").string()) {
    const double limit = wait_limit_s();
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    const auto t0 = Clock::now();
    double next_note = std::min(5.0, limit / 2);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {  // e.g. a file system without locks
        ::close(fd_);
        fd_ = -1;
        return;
      }
      const double s = seconds_since(t0);
      if (s >= limit) {
        std::string holder = holder_text();
        ::close(fd_);
        fd_ = -1;
        fail("data check: gave up after ", static_cast<int64_t>(s), " s waiting for ", holder, " to finish ", activity,
             " the shards in ", dir, " (lock file ", path_,
             "); if that process hangs, stop it, or raise NANOCHAT_DATA_CHECK_WAIT_S, or pass "
             "--skip-data-check");
      }
      if (s >= next_note) {
        std::fprintf(stderr,
                     "Data check: waiting for %s to finish %s the shards in %s (%.0f s so far, giving up after %.0f s; "
                     "NANOCHAT_DATA_CHECK_WAIT_S)\n",
                     holder_text().c_str(), activity, dir.c_str(), s, limit);
        next_note += 30;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    std::string me = str_cat("process ", ::getpid(), " on ", host);
    const ssize_t wrote = ::ftruncate(fd_, 0) == 0 ? ::pwrite(fd_, me.data(), me.size(), 0) : -1;
    (void)wrote;  // the holder's name is only informative
  }
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
  }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  std::string holder_text() const {
    char buf[300] = {0};
    ssize_t k = ::pread(fd_, buf, sizeof buf - 1, 0);
    return k > 0 ? std::string(buf, static_cast<size_t>(k)) : std::string("another process");
  }
  std::string path_;
  int fd_ = -1;
};

// The "files" object of a cache file next to the shards ({} when absent or unreadable: everything
// is checked again).
json load_cache_files(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json::object();
  try {
    json m = json::parse(in);
    if (m.is_object() && m.value("version", 0) == 1 && m.contains("files") && m["files"].is_object()) return m["files"];
  } catch (const std::exception&) {
  }
  return json::object();
}

// Writes a cache file atomically (temp file + rename); false when it cannot (a read-only folder).
bool save_cache_files(const std::string& path, const std::string& about, const json& files) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << json{{"version", 1}, {"about", about}, {"files", files}}.dump(1) << "\n";
    if (!out.good()) return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  return !ec;
}

json load_manifest(const std::string& dir) { return load_cache_files(verified_manifest_path(dir)); }

bool save_manifest(const std::string& dir, const json& files) {
  return save_cache_files(verified_manifest_path(dir),
                          "shards checked by nanochat (data check): a shard whose size, mtime_ns and fingerprint "
                          "match is not checked again; delete this file to check everything again",
                          files);
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json entry_of(const ShardCheck& c) {
  return json{
      {"size", c.size}, {"mtime_ns", c.mtime_ns}, {"fingerprint", c.fingerprint}, {"check_version", kCheckVersion},
      {"ok", c.ok},     {"error", c.error},       {"row_groups", c.row_groups},   {"checked_at", utc_now()}};
}

// True when the manifest entry describes the file as it is now (c holds its fingerprint).
bool entry_matches(const json& files, const ShardCheck& c) {
  auto it = files.find(fs::path(c.path).filename().string());
  if (it == files.end() || !it->is_object()) return false;
  const json& e = *it;
  return e.value("size", int64_t{-2}) == c.size && e.value("mtime_ns", int64_t{-1}) == c.mtime_ns &&
         e.value("fingerprint", int64_t{-1}) == static_cast<int64_t>(c.fingerprint) &&
         e.value("check_version", 0) == kCheckVersion && e.contains("ok");
}

std::string format_mb(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(b) / 1e6);
  return buf;
}

}  // namespace

std::string verified_manifest_path(const std::string& dir) {
  return (fs::path(dir) / ".nanochat_verified.json").string();
}

bool record_results(const std::vector<ShardCheck>& results) {
  std::map<std::string, std::vector<const ShardCheck*>> by_dir;
  for (const auto& c : results)
    if (c.size >= 0) by_dir[fs::path(c.path).parent_path().string()].push_back(&c);
  bool all = true;
  for (const auto& [dir, checks] : by_dir) {
    const std::string d = dir.empty() ? "." : dir;
    DirLock lock(d);
    if (!lock.held()) {
      all = false;
      continue;
    }
    json files = load_manifest(d);
    for (const ShardCheck* c : checks) files[fs::path(c->path).filename().string()] = entry_of(*c);
    all = save_manifest(d, files) && all;
  }
  return all;
}

std::string corrupt_shard_advice(const std::string& path) {
  return str_cat("re-download ", path,
                 " (delete it, then run 'nanochat data download' again) or re-pack the corpus "
                 "('nanochat data pack'); 'nanochat data verify ",
                 path, "' checks it again");
}

void check_training_shards(const std::string& dir, bool skip, bool leader) {
  if (skip) {
    if (leader)
      std::fprintf(stderr,
                   "Data check skipped (--skip-data-check): a corrupt page would stop training only when the "
                   "loader reaches it\n");
    return;
  }
  std::vector<std::string> files = split_files(dir, "train");
  files.push_back(split_files(dir, "val").front());
  DirLock lock(dir);
  const json known = load_manifest(dir);
  std::vector<std::string> todo, errors, bad;  // bad: paths of the corrupt shards
  for (const auto& f : files) {
    ShardCheck c;
    c.path = f;
    fingerprint(c);
    if (!entry_matches(known, c)) {
      todo.push_back(f);
    } else if (!known[fs::path(f).filename().string()].value("ok", false)) {
      const json& e = known[fs::path(f).filename().string()];
      errors.push_back(
          str_cat(e.value("error", f + ": corrupt"), " [found by the check of ", e.value("checked_at", "?"), "]"));
      bad.push_back(f);
    }
  }
  if (todo.empty() && errors.empty()) {
    if (leader)
      std::fprintf(stderr, "Data check: all %zu shard(s) in %s were checked before and are unchanged (%s); skipping\n",
                   files.size(), dir.c_str(), verified_manifest_path(dir).c_str());
    return;
  }
  if (!todo.empty()) {
    const auto t0 = Clock::now();
    VerifyOptions vo;
    vo.progress = lock.held() || leader;
    std::vector<ShardCheck> res = verify_shards(todo, vo);
    PageStats sum;
    int64_t groups = 0;
    for (const auto& c : res) {
      groups += c.row_groups;
      sum.pages += c.stats.pages;
      sum.crc_pages += c.stats.crc_pages;
      sum.chunk_bytes += c.stats.chunk_bytes;
      if (!c.ok) {
        errors.push_back(c.error);
        bad.push_back(c.path);
      }
    }
    bool recorded = false;
    if (lock.held()) {
      json files_now = load_manifest(dir);
      for (const auto& c : res)
        if (c.size >= 0) files_now[fs::path(c.path).filename().string()] = entry_of(c);
      recorded = save_manifest(dir, files_now);
    }
    if (vo.progress)
      std::fprintf(stderr,
                   "Data check: %zu shard(s) (%lld row groups, %lld pages, %lld with CRCs, %s) checked in %.2f s; %s\n",
                   todo.size(), static_cast<long long>(groups), static_cast<long long>(sum.pages),
                   static_cast<long long>(sum.crc_pages), format_mb(sum.chunk_bytes).c_str(), seconds_since(t0),
                   recorded ? str_cat("recorded in ", verified_manifest_path(dir)).c_str()
                            : str_cat("could not record the result in ", dir,
                                      " (read-only?), so every start checks again; "
                                      "--skip-data-check skips the check")
                                  .c_str());
  }
  if (errors.empty()) return;
  std::string msg = str_cat("data check: ", errors.size(), " of ", files.size(), " shard(s) in ", dir,
                            " are corrupt; no training step was run:");
  for (const auto& e : errors) msg += "\n  " + e;
  fail(msg, "\nWhat to do: ", corrupt_shard_advice(bad.size() == 1 ? bad[0] : "each of them"),
       ". (--skip-data-check starts without this check.)");
}

// ---- content hashes ----

namespace {

// zlib CRC-32 of every byte of `path`, read in 4 MiB blocks.
uint32_t whole_file_crc32(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  std::vector<unsigned char> buf(size_t(4) << 20);
  uLong crc = crc32(0, nullptr, 0);
  for (;;) {
    const ssize_t k = ::read(fd, buf.data(), buf.size());
    if (k == 0) break;
    if (k < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      fail(path, ": cannot read: ", std::strerror(e));
    }
    crc = crc32(crc, buf.data(), static_cast<uInt>(k));
  }
  ::close(fd);
  return static_cast<uint32_t>(crc);
}

json load_content_cache(const std::string& dir) { return load_cache_files(content_cache_path(dir)); }

bool save_content_cache(const std::string& dir, const json& files) {
  return save_cache_files(content_cache_path(dir),
                          "CRC-32 of every byte of each shard, for the start-up agreement of a multi-rank job; a "
                          "shard whose size, mtime_ns and fingerprint match is not read again; delete this file to "
                          "hash everything again",
                          files);
}

}  // namespace

std::string content_cache_path(const std::string& dir) { return (fs::path(dir) / ".nanochat_content.json").string(); }

std::vector<uint32_t> content_crc32s(const std::string& dir, const std::vector<std::string>& files) {
  DirLock lock(dir, "hashing");
  json cache = load_content_cache(dir);
  std::vector<uint32_t> out(files.size());
  std::vector<ShardCheck> todo;  // the files not (or no longer) in the cache, as found now
  std::vector<size_t> where;
  for (size_t i = 0; i < files.size(); ++i) {
    ShardCheck c;
    c.path = files[i];
    fingerprint(c);
    auto it = cache.find(fs::path(c.path).filename().string());
    if (it != cache.end() && it->is_object() && it->value("size", int64_t{-2}) == c.size &&
        it->value("mtime_ns", int64_t{-1}) == c.mtime_ns &&
        it->value("fingerprint", int64_t{-1}) == static_cast<int64_t>(c.fingerprint) &&
        it->value("crc32", int64_t{-1}) >= 0) {
      out[i] = static_cast<uint32_t>(it->value("crc32", int64_t{0}));
    } else {
      todo.push_back(c);
      where.push_back(i);
    }
  }
  if (todo.empty()) return out;
  const auto t0 = Clock::now();
  int64_t bytes = 0;
  for (const auto& c : todo) bytes += c.size;
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::string> errors(todo.size());
  std::atomic<int64_t> done{0};
  auto last_note = t0;
  parallel_for(
      static_cast<int64_t>(todo.size()), threads,
      [&](int64_t k, int) {
        const ShardCheck& c = todo[static_cast<size_t>(k)];
        try {
          out[where[static_cast<size_t>(k)]] = whole_file_crc32(c.path);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(k)] = e.what();
        }
        done += c.size;
      },
      [&] {  // a line every 10 s on a long first hash
        if (seconds_since(last_note) < 10) return;
        last_note = Clock::now();
        std::fprintf(stderr, "Data manifest: hashing the shards in %s: %s of %s so far\n", dir.c_str(),
                     format_mb(done).c_str(), format_mb(bytes).c_str());
      });
  for (const auto& e : errors)
    if (!e.empty()) fail(e);
  for (size_t k = 0; k < todo.size(); ++k)
    cache[fs::path(todo[k].path).filename().string()] = {{"size", todo[k].size},
                                                         {"mtime_ns", todo[k].mtime_ns},
                                                         {"fingerprint", todo[k].fingerprint},
                                                         {"crc32", out[where[k]]}};
  const bool recorded = lock.held() && save_content_cache(dir, cache);
  const double s = seconds_since(t0);
  std::fprintf(stderr, "Data manifest: CRC-32 of %zu shard(s) (%s) in %.2f s (%.0f MB/s); %s\n", todo.size(),
               format_mb(bytes).c_str(), s, s > 0 ? static_cast<double>(bytes) / 1e6 / s : 0.0,
               recorded
                   ? str_cat("recorded in ", content_cache_path(dir)).c_str()
                   : str_cat("could not record them in ", dir, " (read-only?), so every start hashes again").c_str());
  return out;
}

}  // namespace nanochat::data
