// The startup agreement through the binary: two ranks started by hand (torchrun's variables), each
// reading its own copy of the shards (--local-data), that
// differ in one flag, one val shard, one shard's bytes (same size), a missing or an extra shard
// stop with a message that names exactly what differs, with both values in full; identical shards
// under different paths agree. Also the build id `nanochat --version` prints.
#include <gtest/gtest.h>

#include <regex>
#include <thread>

#include "support/cli_util.h"

using namespace nctest;

namespace {

const char* kAgree =
    " base-train --depth 1 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern L"
    " --device-batch-size 2 --total-batch-size 256 --eval-every -1 --sample-every -1 --core-metric-every -1"
    " --threads 1 --model-tag t --num-iterations 1 --local-data";

// Starts rank 0 in d0 and rank 1 in d1 (rank 1 with extra flags and environment); returns both results.
std::pair<Result, Result> start_pair(const BaseDir& d0, const BaseDir& d1, const std::string& extra1 = "",
                                     const std::string& env1 = "") {
  const std::string port = std::to_string(free_port());
  auto env = [&](int r) {
    return "RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) +
           " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
           " NANOCHAT_RENDEZVOUS_TIMEOUT=60 NANOCHAT_ALLOW_LOOPBACK_MASTER=1";
  };
  Result res0, res1;
  std::thread t0([&] { res0 = run(d0, kAgree, env(0)); });
  std::thread t1([&] { res1 = run(d1, std::string(kAgree) + extra1, env(1) + " " + env1); });
  t0.join();
  t1.join();
  return {res0, res1};
}

// Rewrites `path` with all its documents but the last (a different size, same name).
void drop_last_doc(const std::string& path) {
  std::vector<std::string> docs;
  {
    data::ParquetReader r(path);
    for (int i = 0; i < r.num_row_groups(); ++i) {
      auto g = r.read_row_group(i);
      docs.insert(docs.end(), g.begin(), g.end());
    }
  }
  docs.pop_back();
  data::ParquetWriter w(path, 128);
  for (const auto& d : docs) w.write(d);
  w.close();
}

// Rewrites `path` with one letter of one document changed, trying documents until the file keeps
// its size (ZSTD's output length often does not change): same name, same size, other bytes.
void change_bytes_keep_size(const std::string& path) {
  const std::string before = slurp(path);
  std::vector<std::string> docs;
  {
    data::ParquetReader r(path);
    for (int i = 0; i < r.num_row_groups(); ++i) {
      auto g = r.read_row_group(i);
      docs.insert(docs.end(), g.begin(), g.end());
    }
  }
  for (size_t d = 0; d < docs.size(); ++d) {
    auto changed = docs;
    const size_t at = changed[d].find('e');
    if (at == std::string::npos) continue;
    changed[d][at] = 'a';
    data::ParquetWriter w(path, 128);
    for (const auto& doc : changed) w.write(doc);
    w.close();
    const std::string after = slurp(path);
    if (after.size() == before.size() && after != before) return;
  }
  FAIL() << "no one-letter change of " << path << " kept its size";
}

}  // namespace

// Byte-identical shards under different paths (another base dir, and NANOCHAT_DATA_DIR elsewhere
// on rank 1): the ranks agree and train. The path is no part of the agreement.
TEST(StartupAgreement, IdenticalShardsUnderDifferentPathsAgree) {
  BaseDir a("nc_ag_same_a"), b("nc_ag_same_b");
  const std::string moved = b.dir + "/elsewhere/shards";
  fs::create_directories(b.dir + "/elsewhere");
  fs::rename(b.dir + "/base_data_climbmix", moved);
  for (const char* f : {"shard_00000", "shard_00001", "shard_00002"})
    ASSERT_EQ(slurp(a.dir + "/base_data_climbmix/" + f + ".parquet"), slurp(moved + "/" + f + ".parquet")) << f;
  auto [r0, r1] = start_pair(a, b, "", "NANOCHAT_DATA_DIR=" + moved);
  ASSERT_EQ(r0.code, 0) << r0.out;
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_NE(r0.out.find("All 2 ranks agree"), std::string::npos) << r0.out;
  EXPECT_TRUE(fs::exists(a.ckpt() + "/model_000001.safetensors"));
  EXPECT_TRUE(fs::exists(a.ckpt() + "/optim_000001_rank1.safetensors"));  // node 0 holds every shard
  EXPECT_FALSE(fs::exists(b.ckpt())) << "the worker writes no checkpoint";
}

// A shard of the same name and size with other bytes (one letter of one document changed) is
// refused on every rank, naming that file and its CRC-32 on each rank, and nothing else.
TEST(StartupAgreement, AShardOfTheSameSizeWithOtherBytesIsNamed) {
  BaseDir a("nc_ag_bytes_a"), b("nc_ag_bytes_b");
  const std::string f = "/base_data_climbmix/shard_00001.parquet";
  change_bytes_keep_size(b.dir + f);
  ASSERT_EQ(fs::file_size(a.dir + f), fs::file_size(b.dir + f));
  ASSERT_NE(slurp(a.dir + f), slurp(b.dir + f));
  auto [d0, d1] = start_pair(a, b);
  EXPECT_NE(d0.code, 0);
  EXPECT_NE(d1.code, 0);
  for (const auto* out : {&d0.out, &d1.out}) {
    EXPECT_NE(out->find("'data manifest' differs:"), std::string::npos) << *out;
    EXPECT_TRUE(std::regex_search(
        *out, std::regex(R"re(\n +shard_00001\.parquet/crc32: "[0-9a-f]{8}" on rank 0 \(host [^)]+\); )re"
                         R"re("[0-9a-f]{8}" on rank 1 \(host [^)]+\))re")))
        << *out;
    EXPECT_EQ(out->find("shard_00000"), std::string::npos) << "identical files are not listed: " << *out;
    EXPECT_EQ(out->find("shard_00002"), std::string::npos) << "identical files are not listed: " << *out;
    EXPECT_EQ(out->find("/bytes"), std::string::npos) << *out;
  }
}

// Rank 1 lacks the val shard: the message names it (whole, with its CRC-32) as missing on rank 1,
// and says that rank 1 would validate on another file.
TEST(StartupAgreement, AMissingValShardIsNamed) {
  BaseDir a("nc_ag_noval_a"), b("nc_ag_noval_b");
  fs::remove(b.dir + "/base_data_climbmix/shard_00002.parquet");
  auto [d0, d1] = start_pair(a, b);
  EXPECT_NE(d0.code, 0);
  EXPECT_NE(d1.code, 0);
  for (const auto* out : {&d0.out, &d1.out}) {
    EXPECT_TRUE(std::regex_search(
        *out, std::regex(R"re(\n +shard_00002\.parquet: \{[^}]*"crc32":"[0-9a-f]{8}"[^}]*"split":"val"\} )re"
                         R"re(on rank 0 \(host [^)]+\); missing on rank 1 \(host [^)]+\))re")))
        << *out;
    EXPECT_TRUE(std::regex_search(
        *out, std::regex(R"re(shard_00001\.parquet/split: "train" on rank 0 [^;]+; "val" on rank 1)re")))
        << *out;
  }
}

TEST(StartupAgreement, ADifferentFlagIsNamedWithBothValues) {
  BaseDir a("nc_ag_flag");
  auto [f0, f1] = start_pair(a, a, " --seed 7");
  EXPECT_NE(f0.code, 0);
  EXPECT_NE(f1.code, 0);
  for (const auto* out : {&f0.out, &f1.out}) {
    EXPECT_NE(out->find("'base-train flags' differs:"), std::string::npos) << *out;
    EXPECT_TRUE(std::regex_search(*out, std::regex("\n +seed: 42 on rank 0 \\(host [^)]+\\); 7 on rank 1 \\(host")))
        << *out;
    EXPECT_EQ(out->find("depth:"), std::string::npos) << "only the differing flag is listed: " << *out;
  }
}

TEST(StartupAgreement, ADifferentValShardAndAnExtraShardAreNamed) {
  BaseDir a("nc_ag_data_a"), b("nc_ag_data_b");
  const std::string val = "/base_data_climbmix/shard_00002.parquet";
  drop_last_doc(b.dir + val);
  const auto size_a = fs::file_size(a.dir + val), size_b = fs::file_size(b.dir + val);
  ASSERT_NE(size_a, size_b);
  auto [d0, d1] = start_pair(a, b);
  EXPECT_NE(d0.code, 0);
  EXPECT_NE(d1.code, 0);
  for (const auto* out : {&d0.out, &d1.out}) {
    EXPECT_NE(out->find("'data manifest' differs:"), std::string::npos) << *out;
    EXPECT_TRUE(std::regex_search(*out, std::regex("shard_00002\\.parquet/bytes: [0-9]+ on rank [01]"))) << *out;
    EXPECT_NE(out->find(std::to_string(size_a) + " on rank 0"), std::string::npos) << *out;
    EXPECT_NE(out->find(std::to_string(size_b) + " on rank 1"), std::string::npos) << *out;
    EXPECT_EQ(out->find("shard_00000"), std::string::npos) << "identical files are not listed: " << *out;
  }
  // One more shard on rank 1 only: it becomes rank 1's val shard, and the message says so.
  fs::copy_file(a.dir + val, b.dir + "/base_data_climbmix/shard_00003.parquet");
  auto [e0, e1] = start_pair(a, b);
  EXPECT_NE(e0.code, 0);
  EXPECT_TRUE(std::regex_search(e0.out, std::regex("shard_00003\\.parquet: \\{[^}]*\\} on rank 1 \\(host [^)]+\\); "
                                                   "missing on rank 0")))
      << e0.out;
  EXPECT_TRUE(std::regex_search(e0.out, std::regex("shard_00002\\.parquet/split: \"val\" on rank 0 [^;]+; \"train\" on "
                                                   "rank 1")))
      << e0.out;
}

// `nanochat --version` names the commit the binary was built from (when built in a git checkout):
// a commit of this repository (HEAD when the build is fresh; an older one if it was committed to
// since).
TEST(StartupAgreement, VersionNamesTheCommit) {
  auto capture = [](const std::string& cmd, int* rc) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    std::string s;
    char buf[512];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) s.append(buf, n);
    *rc = pclose(p);
    return s;
  };
  int rc = 0;
  const std::string v = capture(std::string(NANOCHAT_BINARY) + " --version", &rc);
  EXPECT_EQ(rc, 0) << v;
  const std::string git = "git -C " + std::string(NANOCHAT_SOURCE_DIR) + " ";
  capture(git + "rev-parse --git-dir", &rc);
  if (rc != 0) {
    EXPECT_NE(v.find("(unknown commit)"), std::string::npos) << v;
    return;
  }
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(v, m, std::regex("^nanochat\\.cpp [0-9.]+ \\(commit ([0-9a-f]{12})(, dirty [0-9a-f]{8})?\\)")))
      << v;
  capture(git + "cat-file -e " + m[1].str() + "^{commit}", &rc);
  EXPECT_EQ(rc, 0) << m[1].str() << " is not a commit of " << NANOCHAT_SOURCE_DIR;
}

// cmake/build_id.cmake in a scratch git repository: the id follows the commit and the dirty state,
// the output is rewritten only when the id changes, and outside git it says "unknown commit".
TEST(StartupAgreement, TheBuildIdFollowsTheCommit) {
  const std::string repo = (fs::temp_directory_path() / ("nc_ag_git_" + std::to_string(::getpid()))).string();
  const std::string out = repo + "_id.cpp";
  fs::remove_all(repo);
  fs::create_directories(repo);
  auto sh = [&](const std::string& cmd) {
    FILE* p = popen(("cd " + repo + " && " + cmd + " 2>&1").c_str(), "r");
    std::string s;
    char buf[512];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) s.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << cmd << ": " << s;
    return s;
  };
  auto gen = [&] {
    sh("cmake -DSOURCE_DIR=" + repo + " -DOUTPUT=" + out + " -DVERSION=9.8.7 -P " + NANOCHAT_SOURCE_DIR +
       "/cmake/build_id.cmake");
    return slurp(out);
  };
  EXPECT_NE(gen().find("\"9.8.7 (unknown commit)\""), std::string::npos);
  const std::string git = "git -c user.name=t -c user.email=t@t ";
  sh("git init -q . && echo a > f && git add f && " + git + "commit -qm one");
  const std::string c1 = sh("git rev-parse --short=12 HEAD").substr(0, 12);
  EXPECT_NE(gen().find("\"9.8.7 (commit " + c1 + ")\""), std::string::npos) << slurp(out);
  const auto t1 = fs::last_write_time(out);
  gen();
  EXPECT_EQ(fs::last_write_time(out), t1) << "an unchanged id must not rewrite the file";
  sh("echo b > f");
  EXPECT_NE(gen().find("\"9.8.7 (commit " + c1 + ", dirty "), std::string::npos) << slurp(out);
  sh(git + "commit -qam two");
  const std::string c2 = sh("git rev-parse --short=12 HEAD").substr(0, 12);
  ASSERT_NE(c1, c2);
  EXPECT_NE(gen().find("\"9.8.7 (commit " + c2 + ")\""), std::string::npos) << slurp(out);
  fs::remove_all(repo);
  fs::remove(out);
}
