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
#include <nlohmann/json.hpp>
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

// ---- hub datasets (nanochat's load_hub_dataset layout) ----------------------------------------

namespace {

// Serves a hub-like tree: /api/datasets/<repo>/parquet/<subset>/<split> lists the files' URLs
// (relative paths under /files/<repo>/...), written once the server's port is known.
struct HubTree {
  fs::path www;
  std::string url;
  void dataset(const std::string& repo, const std::string& subset, const std::string& split,
               const std::vector<std::string>& fixture_files) {
    nlohmann::json urls = nlohmann::json::array();
    for (size_t i = 0; i < fixture_files.size(); ++i) {
      const std::string rel = "files/" + repo + "/" + subset + "/" + split + "/" + std::to_string(i) + ".parquet";
      fs::create_directories((www / rel).parent_path());
      fs::copy_file(fs::path(NANOCHAT_TEST_DATA) / "parquet" / fixture_files[i], www / rel);
      urls.push_back(url + "/" + rel);
    }
    const fs::path listing = www / "api/datasets" / repo / "parquet" / subset / split;
    fs::create_directories(listing.parent_path());
    spit(listing, urls.dump());
  }
};

}  // namespace

TEST_F(Download, HubDatasetsFetchedWithTheManifestLastThenKept) {
  HubTree hub{dir_ / "www", start_server({"--full-paths"})};
  hub.dataset("cais/mmlu", "all", "test", {"sample.parquet", "gzip_plain.parquet"});
  hub.dataset("openai/gsm8k", "main", "test", {"no_text_column.parquet"});
  const fs::path out = dir_ / "data" / "task_data";
  const std::vector<HubDataset> sets = {{"cais/mmlu", "all", "test", (out / "cais--mmlu/all/test").string()},
                                        {"openai/gsm8k", "main", "test", (out / "openai--gsm8k/main/test").string()}};
  HubDownloadResult r = download_hub_datasets(sets, hub.url + "/", options(hub.url, 0));
  EXPECT_EQ(r.datasets_fetched, 2);
  EXPECT_EQ(r.datasets_present, 0);
  EXPECT_EQ(r.files.downloaded, 3);
  EXPECT_EQ(slurp(out / "cais--mmlu/all/test/manifest.json"), R"(["00000.parquet","00001.parquet"])");
  EXPECT_EQ(slurp(out / "openai--gsm8k/main/test/manifest.json"), R"(["00000.parquet"])");
  EXPECT_EQ(slurp(out / "cais--mmlu/all/test/00001.parquet"), slurp(dir_ / "www/files/cais/mmlu/all/test/1.parquet"));
  EXPECT_EQ(slurp(out / "openai--gsm8k/main/test/00000.parquet"),
            slurp(dir_ / "www/files/openai/gsm8k/main/test/0.parquet"));
  EXPECT_EQ(count(log(), "GET /api/datasets/cais/mmlu/parquet/all/test"), 1);
  // A second run finds the manifests and asks the server nothing.
  const std::string before = log();
  r = download_hub_datasets(sets, hub.url, options(hub.url, 0));
  EXPECT_EQ(r.datasets_present, 2);
  EXPECT_EQ(r.datasets_fetched, 0);
  EXPECT_EQ(log(), before);
}

TEST_F(Download, HubDatasetResumesAfterABrokenTransferAndFailsWithoutAManifest) {
  // First run: every file's first transfer breaks after 3000 bytes; with one attempt it fails,
  // leaving the .tmp and no manifest. The rerun resumes the .tmp with a Range request.
  HubTree hub{dir_ / "www", start_server({"--full-paths", "--drop-after", "3000"})};
  hub.dataset("allenai/ai2_arc", "ARC-Easy", "test", {"sample.parquet"});
  const fs::path d = dir_ / "data" / "arc";
  const std::vector<HubDataset> sets = {{"allenai/ai2_arc", "ARC-Easy", "test", d.string()}};
  DownloadOptions o = options(hub.url, 0);
  o.attempts = 1;
  try {
    download_hub_datasets(sets, hub.url, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allenai/ai2_arc ARC-Easy/test 00000.parquet"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(d / "manifest.json"));
  EXPECT_TRUE(fs::exists(d / "00000.parquet.tmp"));
  const HubDownloadResult r = download_hub_datasets(sets, hub.url, options(hub.url, 0));
  EXPECT_EQ(r.files.resumed, 1);
  EXPECT_EQ(slurp(d / "00000.parquet"), slurp(dir_ / "www/files/allenai/ai2_arc/ARC-Easy/test/0.parquet"));
  EXPECT_EQ(slurp(d / "manifest.json"), R"(["00000.parquet"])");
  EXPECT_NE(log().find("range=bytes=3000-"), std::string::npos) << log();
}

TEST_F(Download, HubListingErrorsNameTheUrl) {
  HubTree hub{dir_ / "www", start_server({"--full-paths"})};
  const fs::path d = dir_ / "data" / "x";
  try {
    download_hub_datasets({{"nobody/nothing", "default", "train", d.string()}}, hub.url, options(hub.url, 0));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("listing " + hub.url + "/api/datasets/nobody/nothing/parquet/default/train failed: HTTP 404"),
              std::string::npos)
        << m;
  }
  EXPECT_FALSE(fs::exists(d / "manifest.json"));
  fs::create_directories(dir_ / "www/api/datasets/bad/json/parquet/default");
  spit(dir_ / "www/api/datasets/bad/json/parquet/default/train", "<html>rate limited</html>");
  try {
    download_hub_datasets({{"bad/json", "default", "train", d.string()}}, hub.url, options(hub.url, 0));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not JSON (<html>rate limited</html>)"), std::string::npos) << e.what();
  }
}

TEST_F(Download, CliDownloadsTaskDatasetsIntoTheBaseDir) {
  HubTree hub{dir_ / "www", start_server({"--full-paths"})};
  hub.dataset("openai/gsm8k", "main", "test", {"sample.parquet"});
  hub.dataset("allenai/ai2_arc", "ARC-Easy", "test", {"gzip_plain.parquet"});
  const fs::path base = dir_ / "base";
  auto run = [&](const std::string& args) {
    const std::string cmd = "NANOCHAT_BASE_DIR=" + base.string() + " " + NANOCHAT_BINARY + " data download -q " + args +
                            " --hub-url " + hub.url + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    size_t k;
    while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
    const int st = ::pclose(p);
    return std::make_pair(WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
  };
  auto [rc, out] = run("--tasks GSM8K/main/test ARC-Easy SpellingBee");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("2 dataset(s): 2 downloaded (2 file(s), 0 resumed), 0 already present"), std::string::npos) << out;
  EXPECT_NE(out.find("SpellingBee: made on this machine"), std::string::npos) << out;
  EXPECT_EQ(slurp(base / "task_data/openai--gsm8k/main/test/manifest.json"), R"(["00000.parquet"])");
  EXPECT_EQ(slurp(base / "task_data/allenai--ai2_arc/ARC-Easy/test/00000.parquet"),
            slurp(dir_ / "www/files/allenai/ai2_arc/ARC-Easy/test/0.parquet"));
  std::tie(rc, out) = run("--tasks GSM8K/main/validation");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("not a dataset of GSM8K; those are: GSM8K/main/test, GSM8K/main/train"), std::string::npos) << out;
  std::tie(rc, out) = run("--tasks MMLU-Pro");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("SmolTalk, MMLU, GSM8K, ARC-Easy, ARC-Challenge, HumanEval"), std::string::npos) << out;
}
