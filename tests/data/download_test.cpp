// `data download` against a local HTTP server (tests/data/range_http_server.py, started per test on
// 127.0.0.1 with a free port and a 60 s lifetime): full download, resume of a partial .tmp with an
// HTTP Range request, a broken transfer resumed on retry, retries after 503, 404 (clear error, not
// retried), a file that is not parquet, and skipping shards already present.
#include "nanochat/data/download.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "nanochat/core/error.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace nanochat;
using namespace nanochat::data;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

int count(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// A served directory with four shards (0, 1, 2 and the validation shard 6542).
class Download : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nc_dl_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "www");
    const fs::path fx = fs::path(NANOCHAT_TEST_DATA) / "parquet";
    const char* src[] = {"nanochat_layout.parquet", "sample.parquet", "zstd_plain_small.parquet", "gzip_plain.parquet"};
    const char* dst[] = {"shard_00000.parquet", "shard_00001.parquet", "shard_00002.parquet", "shard_06542.parquet"};
    for (int i = 0; i < 4; ++i) fs::copy_file(fx / src[i], dir_ / "www" / dst[i]);
  }
  void TearDown() override {
    stop_server();
    fs::remove_all(dir_);
  }

  // Starts the server (fails the test if it is not listening within 10 s); returns the base URL.
  std::string start_server(std::vector<std::string> extra = {}) {
    stop_server();
    fs::remove(dir_ / "port");
    std::vector<std::string> args = {"timeout",
                                     "60",
                                     "python3",
                                     std::string(NANOCHAT_SOURCE_DIR) + "/tests/data/range_http_server.py",
                                     (dir_ / "www").string(),
                                     (dir_ / "port").string(),
                                     (dir_ / "log").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "timeout", nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
    EXPECT_GT(pid_, 0) << "cannot start the test HTTP server (is python3 installed?)";
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!fs::exists(dir_ / "port") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(fs::exists(dir_ / "port")) << "test HTTP server did not start within 10 s";
    return "http://127.0.0.1:" + slurp(dir_ / "port");
  }
  void stop_server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }
  DownloadOptions options(const std::string& url, int n) {
    DownloadOptions o;
    o.num_files = n;
    o.base_url = url;
    o.dir = (dir_ / "data").string();
    o.workers = 2;
    o.attempts = 3;
    o.backoff_s = 0.05;
    o.connect_timeout_s = 5;
    o.stall_timeout_s = 5;
    o.quiet = true;
    return o;
  }
  std::string log() { return slurp(dir_ / "log"); }
  bool same(const std::string& name) { return slurp(dir_ / "www" / name) == slurp(dir_ / "data" / name); }

  fs::path dir_;
  pid_t pid_ = -1;
};

}  // namespace

TEST_F(Download, FetchesTrainShardsAndTheValShardThenSkipsThem) {
  std::string url = start_server();
  DownloadResult r = download_shards(options(url + "/", 3));
  EXPECT_EQ(r.downloaded, 4);
  EXPECT_EQ(r.present, 0);
  for (const char* n : {"shard_00000.parquet", "shard_00001.parquet", "shard_00002.parquet", "shard_06542.parquet"}) {
    EXPECT_TRUE(same(n)) << n;
    EXPECT_FALSE(fs::exists(dir_ / "data" / (std::string(n) + ".tmp"))) << n;
  }
  r = download_shards(options(url, 3));
  EXPECT_EQ(r.downloaded, 0);
  EXPECT_EQ(r.present, 4);
  EXPECT_EQ(count(log(), "GET /shard_00000.parquet"), 1);
}

TEST_F(Download, ResumesAPartialTmpFileWithARangeRequest) {
  std::string url = start_server();
  fs::create_directories(dir_ / "data");
  std::string full = slurp(dir_ / "www" / "shard_00000.parquet");
  spit(dir_ / "data" / "shard_00000.parquet.tmp", full.substr(0, 5000));
  DownloadResult r = download_shards(options(url, 1));
  EXPECT_EQ(r.downloaded, 2);
  EXPECT_EQ(r.resumed, 1);
  EXPECT_TRUE(same("shard_00000.parquet"));
  EXPECT_NE(log().find("GET /shard_00000.parquet range=bytes=5000-"), std::string::npos) << log();
}

TEST_F(Download, ABrokenTransferIsResumedOnRetry) {
  std::string url = start_server({"--drop-after", "3000"});
  DownloadResult r = download_shards(options(url, 1));
  EXPECT_EQ(r.downloaded, 2);
  EXPECT_TRUE(same("shard_00000.parquet"));
  EXPECT_TRUE(same("shard_06542.parquet"));
  std::string l = log();
  EXPECT_NE(l.find("GET /shard_00000.parquet range=bytes=3000-"), std::string::npos) << l;
}

TEST_F(Download, RetriesAfterServerErrors) {
  std::string url = start_server({"--fail-first", "2"});
  DownloadResult r = download_shards(options(url, 1));
  EXPECT_EQ(r.downloaded, 2);
  EXPECT_TRUE(same("shard_00000.parquet"));
  EXPECT_EQ(count(log(), "GET /shard_00000.parquet"), 3);
}

TEST_F(Download, Missing404IsAClearErrorAndNotRetried) {
  std::string url = start_server();
  try {
    download_shards(options(url, 5));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("2 of 6 file(s) failed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shard_00003.parquet (" + url + "/shard_00003.parquet): HTTP 404"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shard_00004.parquet"), std::string::npos) << msg;
  }
  EXPECT_EQ(count(log(), "GET /shard_00003.parquet"), 1);  // 404 is permanent
  EXPECT_TRUE(same("shard_00002.parquet"));                // the others still arrived
  EXPECT_TRUE(same("shard_06542.parquet"));
}

TEST_F(Download, AFileThatIsNotParquetIsRejected) {
  spit(dir_ / "www" / "shard_00000.parquet", "<html>rate limited</html>");
  std::string url = start_server();
  try {
    download_shards(options(url, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a valid parquet file"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "data" / "shard_00000.parquet"));
  EXPECT_FALSE(fs::exists(dir_ / "data" / "shard_00000.parquet.tmp"));
  EXPECT_EQ(count(log(), "GET /shard_00000.parquet"), 3);  // retried (a transient bad response)
}

TEST_F(Download, ServerWithoutRangeSupportRestartsCleanly) {
  std::string url = start_server({"--no-range"});
  fs::create_directories(dir_ / "data");
  std::string full = slurp(dir_ / "www" / "shard_00000.parquet");
  spit(dir_ / "data" / "shard_00000.parquet.tmp", full.substr(0, 5000));
  DownloadResult r = download_shards(options(url, 1));
  EXPECT_EQ(r.downloaded, 2);
  EXPECT_TRUE(same("shard_00000.parquet"));
}

TEST_F(Download, NothingListensIsAClearError) {
  DownloadOptions o = options("http://127.0.0.1:9", 0);  // port 9 (discard): connection refused
  o.attempts = 2;
  try {
    download_shards(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("shard_06542.parquet"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rerun the same command to resume"), std::string::npos) << msg;
  }
}

TEST_F(Download, CliDownloadsIntoDir) {
  std::string url = start_server();
  std::string cmd = std::string(NANOCHAT_BINARY) + " data download -n 1 -q --base-url " + url + " --dir " +
                    (dir_ / "cli").string() + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
  int st = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_NE(out.find("2 shard(s) in"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir_ / "cli" / "shard_06542.parquet"));
}

TEST_F(Download, ATmpFileLongerThanTheShardIsDiscarded) {
  std::string url = start_server();
  fs::create_directories(dir_ / "data");
  spit(dir_ / "data" / "shard_00000.parquet.tmp", slurp(dir_ / "www" / "shard_00000.parquet") + "garbage");
  DownloadResult r = download_shards(options(url, 1));  // the server answers 416 to the resume
  EXPECT_EQ(r.downloaded, 2);
  EXPECT_TRUE(same("shard_00000.parquet"));
  EXPECT_EQ(count(log(), "GET /shard_00000.parquet"), 2);
}
