// Checkpoints of data-parallel jobs through the binary (tiny model, 1-2 ranks, loopback):
// the last step is saved before the final evaluation (a rank killed during it loses nothing),
// node 0 writes the whole checkpoint (workers nothing) and its folder alone resumes at any world
// size, a node 0 that cannot write is named by every node, a kill of node 0 in the middle of a save
// leaves the previous step resumable, a corrupt checkpoint file is named with the newest intact step by every
// rank, and ranks whose replicas of the model differ stop the job naming the tensor and rank.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/safetensors.h"
#include "support/cli_util.h"
#include "support/two_nodes.h"
#include "support/weights_compare.h"

using namespace nctest;
using Clock = std::chrono::steady_clock;

namespace {

// 2 ranks x B 2 x T 64 = one micro-batch per rank per step.
const char* kCk =
    " base-train --depth 2 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 256 --sample-every -1 --core-metric-every -1"
    " --threads 1 --model-tag t";

// A port in 32000-32999 that was free a moment ago on 127.0.0.1 (these tests' own range).
std::string launch2() {
  return " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(test_port());
}

// The value of RANK in /proc/<pid>/environ, or -1.
int rank_of(pid_t pid) {
  const std::string env = slurp("/proc/" + std::to_string(pid) + "/environ");
  for (size_t at = 0; at < env.size();) {
    size_t end = env.find('\0', at);
    if (end == std::string::npos) end = env.size();
    if (env.compare(at, 5, "RANK=") == 0) return std::atoi(env.c_str() + at + 5);
    at = end + 1;
  }
  return -1;
}

// The child of `parent` whose RANK is `rank` (a scan of /proc/*/stat), or -1.
pid_t child_with_rank(pid_t parent, int rank) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string st = slurp("/proc/" + name + "/stat");
    const auto rp = st.rfind(')');
    if (rp == std::string::npos || rp + 4 > st.size()) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str()));
    if (std::atol(st.c_str() + rp + 4) == parent && rank_of(pid) == rank) return pid;
  }
  return -1;
}

// The binary under sh, output to `log`; killed (with its ranks) on destruction if still running.
struct BgJob {
  pid_t pid = -1;
  int status = 0;
  bool reaped = false;
  BgJob(const BaseDir& b, const std::string& args, const std::string& log, const std::string& env = "") {
    const std::string cmd =
        env + " NANOCHAT_BASE_DIR=" + b.dir + " exec " + NANOCHAT_BINARY + args + " > " + log + " 2>&1";
    pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  bool wait_until(Clock::time_point deadline) {
    while (!reaped) {
      if (::waitpid(pid, &status, WNOHANG) == pid)
        reaped = true;
      else if (Clock::now() >= deadline)
        break;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return reaped;
  }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
  ~BgJob() {
    if (pid <= 0 || reaped) return;
    for (int r = 0; r < 2; ++r)
      if (pid_t c = child_with_rank(pid, r); c > 0) ::kill(c, SIGKILL);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
};

// Like cli_util.h's run, with NANOCHAT_BASE_DIR=dir.

// Copies b's shards and tokenizer into a fresh base dir (a second "node" without shared files).
struct NodeDir {
  std::string dir;
  explicit NodeDir(const BaseDir& b, const std::string& name) {
    dir = (fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy(b.dir + "/base_data_climbmix", dir + "/base_data_climbmix", fs::copy_options::recursive);
    fs::copy(b.dir + "/tokenizer", dir + "/tokenizer", fs::copy_options::recursive);
  }
  ~NodeDir() { fs::remove_all(dir); }
};

// Prints the output's error lines (what a user would read).
void show_errors(const std::string& out) {
  for (size_t p = out.find("error: "); p != std::string::npos; p = out.find("error: ", p + 1)) {
    const size_t bol = out.rfind('\n', p) + 1;
    std::printf("  %s\n", out.substr(bol, out.find('\n', p) - bol).c_str());
  }
}

void flip_byte(const std::string& path, size_t from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(f.tellg());
  f.seekg(static_cast<std::streamoff>(size - from_end));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(size - from_end));
  f.write(&c, 1);
}

}  // namespace

// Rank 1 is killed (SIGKILL) while the final evaluation runs (a long one: 4096 batches). The last
// step's checkpoint was written before it started, so it is complete, base-eval loads it, and the
// job resumes from it.
TEST(Checkpoint, LastStepIsSavedBeforeTheFinalEvaluation) {
  BaseDir b("nc_ck_final");
  const std::string log = b.dir + "/log.txt";
  const std::string flags = std::string(kCk) + " --num-iterations 4 --eval-every 100 --eval-tokens 524288";
  {
    BgJob job(b, launch2() + flags, log);
    const auto deadline = Clock::now() + std::chrono::seconds(180);
    while (slurp(log).find("step 00003/00004") == std::string::npos) {
      ASSERT_FALSE(job.wait_until(Clock::now())) << "the job ended early:\n" << slurp(log);
      ASSERT_LT(Clock::now(), deadline) << slurp(log);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // The final evaluation starts once rank 0 has logged the save of step 4 (or, before the fix,
    // right away: then the save comes only after the evaluation).
    const auto evaluating = Clock::now() + std::chrono::seconds(3);
    while (slurp(log).find("Saved checkpoint " + b.ckpt() + "/model_000004") == std::string::npos &&
           Clock::now() < evaluating)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const pid_t rank1 = child_with_rank(job.pid, 1);
    ASSERT_GT(rank1, 0) << slurp(log);
    ASSERT_EQ(::kill(rank1, SIGKILL), 0);
    ASSERT_TRUE(job.wait_until(Clock::now() + std::chrono::seconds(60))) << slurp(log);
    const std::string out = slurp(log);
    show_errors(out);
    EXPECT_NE(job.code(), 0) << out;
    EXPECT_EQ(out.find("Step 00004 | Validation bpb"), std::string::npos)
        << "the kill came after the final evaluation; make it longer\n"
        << out;
  }
  ASSERT_EQ(complete_checkpoint_steps(b.ckpt()), std::vector<int64_t>{4}) << slurp(log);
  auto e = run(b, " base-eval -g t -s 4 --split-tokens 256 --threads 1");
  EXPECT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("val bpb: "), std::string::npos) << e.out;
  auto r = run(b, launch2() + std::string(kCk) + " --num-iterations 4 --eval-every -1 --resume-from-step 4");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Resumed from step 4"), std::string::npos) << r.out;
}

// Without the fault the final val bpb lands in metrics.jsonl and in the rewritten meta, whose
// new checksum the marker holds.
TEST(Checkpoint, FinalValBpbIsRecordedAfterTheSave) {
  BaseDir b("nc_ck_meta");
  auto r = run(b, std::string(kCk) + " --num-iterations 3 --eval-every 100 --eval-tokens 256");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto meta = json::parse(slurp(b.ckpt() + "/meta_000003.json"));
  ASSERT_TRUE(meta.at("val_bpb").is_number()) << meta.dump();
  const std::string key = "Step 00003 | Validation bpb: ";
  const auto at = r.out.find(key);
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NEAR(meta["val_bpb"].get<double>(), std::stod(r.out.substr(at + key.size(), 8)), 1e-6);
  EXPECT_NE(slurp(b.ckpt() + "/metrics.jsonl").find("\"step\":3,\"val_bpb\""), std::string::npos);
  const CheckpointPaths cp{b.ckpt(), 3};
  const json marker = read_checkpoint_marker(cp);
  EXPECT_EQ(marker["crc32"]["meta_000003.json"].get<uint32_t>(), file_crc32(cp.meta())) << marker.dump();
  EXPECT_EQ(check_checkpoint_file(marker, cp.model()), "");
}

namespace {

// The settings of dist_train_test.cpp whose runs at any world size agree to 1e-4 (depth 3, no
// weight decay, 12 rows per step).
const char* kEq =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 768 --eval-every -1 --sample-every -1 --core-metric-every -1"
    " --threads 1 --model-tag t --num-iterations 5 --warmup-steps 1 --weight-decay 0";

}  // namespace

// Node 0 writes the whole checkpoint; the worker, whose base dir cannot even hold a checkpoint
// folder, writes nothing. The save is made under the optimizer layout of the ranks' speeds (rank
// 1 slowed). Node 0's folder alone resumes the run with 1 and with 3 ranks (and the two nodes
// again, evenly split), and all end where the uninterrupted one-rank run ends.
TEST(Checkpoint, NodeZeroWritesTheWholeCheckpointThatAloneResumesAtAnyWorldSize) {
  BaseDir n0("nc_ck_whole0"), u("nc_ck_whole_u");
  NodeDir n1(n0, "nc_ck_whole1");
  std::ofstream(n1.dir + "/base_checkpoints") << "not a folder\n";
  auto ur = run(u, kEq);
  ASSERT_EQ(ur.code, 0) << ur.out;
  const StFile uninterrupted = load_safetensors(u.ckpt() + "/model_000005.safetensors");
  auto [a0, a1] = two_nodes(n0.dir, n1.dir, std::string(kEq) + " --save-every 3", "NANOCHAT_TEST_FAULT=slow:1:3");
  ASSERT_EQ(a0.code, 0) << a0.out << "\n--- node 1:\n" << a1.out;
  ASSERT_EQ(a1.code, 0) << a1.out;
  EXPECT_TRUE(fs::is_regular_file(n1.dir + "/base_checkpoints"));  // the worker wrote nothing
  EXPECT_EQ(complete_checkpoint_steps(n0.ckpt()), (std::vector<int64_t>{3, 5}));
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(fs::exists(CheckpointPaths{n0.ckpt(), 3}.optim(r)));
  // saved under the optimizer layout of the measured speeds: the slower rank 1 owns fewer rows
  // (moved after step 0 or 1: the first step's speeds are noisy on a loaded machine, and a small
  // gain is not worth the move)
  const auto moved = a0.out.find("Optimizer work per rank from step ");
  EXPECT_LT(moved, a0.out.find("model_000003.safetensors")) << a0.out;
  const auto layout =
      nlohmann::json::parse(load_safetensors(CheckpointPaths{n0.ckpt(), 3}.optim(1)).metadata.at("layout"));
  const auto lm_rows = layout.at("adamw").at("lm_head.weight").get<std::vector<int64_t>>();
  ASSERT_EQ(lm_rows.size(), 2u);
  EXPECT_GT(2 * lm_rows[0], 3 * lm_rows[1]) << layout.dump();  // over 60% (rank 1 three times slower)
  for (int W : {1, 3}) {
    SCOPED_TRACE("resumed by " + std::to_string(W) + " ranks");
    const std::string launch =
        W == 1 ? std::string()
               : " run --nproc-per-node 3 --threads-per-rank 1 --master-port " + std::to_string(test_port());
    auto r = run(n0, launch + kEq + " --resume-from-step 3 --balance even");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("Resumed from step 3"), std::string::npos) << r.out;
    EXPECT_LE(max_rel_diff(uninterrupted, load_safetensors(n0.ckpt() + "/model_000005.safetensors")), 1e-4);
  }
  // the same two nodes resume too (node 0 deals the state; the worker still needs no folder)
  auto [b0, b1] = two_nodes(n0.dir, n1.dir, std::string(kEq) + " --resume-from-step 3", "");
  EXPECT_EQ(b0.code, 0) << b0.out << "\n--- node 1:\n" << b1.out;
  EXPECT_NE(b0.out.find("Read the optimizer state of all 2 ranks"), std::string::npos) << b0.out;
  EXPECT_LE(max_rel_diff(uninterrupted, load_safetensors(n0.ckpt() + "/model_000005.safetensors")), 1e-4);
  // a corrupt file of node 0's newest step: both nodes' advice names node 0's folder (the worker has
  // none), where the way back is
  flip_byte(CheckpointPaths{n0.ckpt(), 5}.model(), 50);
  auto [c0, c1] = two_nodes(n0.dir, n1.dir, std::string(kEq) + " --resume-from-step 5", "");
  EXPECT_NE(c0.code, 0);
  EXPECT_NE(c1.code, 0);
  const std::string advice = "newest intact checkpoint in " + n0.ckpt() + " (rank 0's folder, on host ";
  EXPECT_NE(c0.out.find(advice), std::string::npos) << c0.out;
  EXPECT_NE(c1.out.find("[rank 1] nanochat: error: checkpoint file " + CheckpointPaths{n0.ckpt(), 5}.model()),
            std::string::npos)
      << c1.out;
  EXPECT_NE(c1.out.find(advice), std::string::npos) << c1.out;
  EXPECT_NE(c1.out.find("is step 3: resume with --resume-from-step 3"), std::string::npos) << c1.out;
}

// Node 0 cannot write: before the first step (its folder) and in the middle of a save (test-only
// fault), both nodes name rank 0, its host and the file.
TEST(Checkpoint, NodeZeroThatCannotWriteIsNamedByEveryNode) {
  BaseDir n0("nc_ck_node0");
  NodeDir n1(n0, "nc_ck_node1");
  auto both_name_rank0_and = [](const Result& r0, const Result& r1, const std::string& path) {
    show_errors(r0.out + r1.out);
    for (const Result* r : {&r0, &r1}) {
      EXPECT_NE(r->code, 0) << r->out;
      EXPECT_NE(r->out.find("rank 0 (host "), std::string::npos) << r->out;
      EXPECT_NE(r->out.find(") could not write " + path), std::string::npos) << path << "\n" << r->out;
      EXPECT_EQ(r->out.find("connection"), std::string::npos) << r->out;
    }
  };
  const std::string flags = std::string(kCk) + " --num-iterations 2 --eval-every -1";
  std::ofstream(n0.dir + "/base_checkpoints") << "not a folder\n";
  auto [bad0, bad1] = two_nodes(n0.dir, n1.dir, flags, "");
  both_name_rank0_and(bad0, bad1, n0.dir + "/base_checkpoints");
  fs::remove(n0.dir + "/base_checkpoints");
  auto [w0, w1] = two_nodes(n0.dir, n1.dir, flags, "NANOCHAT_TEST_FAULT=write-fail:0");
  both_name_rank0_and(w0, w1, n0.ckpt() + "/optim_000002_rank0.safetensors");
  EXPECT_TRUE(complete_checkpoint_steps(n0.ckpt()).empty());
}

// Node 0 is killed (SIGKILL) in the middle of writing step 4 (test-only fault: it stops after the
// step's first file): step 2 stays complete and resumes; step 4 never counts.
TEST(Checkpoint, AKillOfNodeZeroDuringASaveLeavesThePreviousCheckpointResumable) {
  BaseDir b("nc_ck_kill");
  const std::string log = b.dir + "/log.txt";
  const std::string flags = std::string(kCk) + " --num-iterations 6 --save-every 2 --eval-every -1";
  pid_t rank0 = -1;
  {
    BgJob job(b, launch2() + flags, log, "NANOCHAT_COLLECTIVE_TIMEOUT=120 NANOCHAT_TEST_FAULT=save-stall:4");
    const auto deadline = Clock::now() + std::chrono::seconds(180);
    while (slurp(log).find("stalled in the middle of a save") == std::string::npos) {
      ASSERT_FALSE(job.wait_until(Clock::now())) << "the job ended early:\n" << slurp(log);
      ASSERT_LT(Clock::now(), deadline) << slurp(log);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(fs::exists(CheckpointPaths{b.ckpt(), 4}.optim(0)));  // the save was under way
    rank0 = child_with_rank(job.pid, 0);
    ASSERT_GT(rank0, 0) << slurp(log);
    ASSERT_EQ(::kill(rank0, SIGKILL), 0);
    ASSERT_TRUE(job.wait_until(Clock::now() + std::chrono::seconds(150))) << slurp(log);
    EXPECT_NE(job.code(), 0) << slurp(log);
  }
  ASSERT_EQ(complete_checkpoint_steps(b.ckpt()), std::vector<int64_t>{2}) << slurp(log);
  // A kill in the middle of a file's write leaves its temporary file, named by the writer's pid (the
  // killed rank 0 here): the next job on this folder removes it, but not one whose writer lives.
  const std::string stale = CheckpointPaths{b.ckpt(), 4}.model() + ".tmp." + std::to_string(rank0) + ".0";
  const std::string live = CheckpointPaths{b.ckpt(), 4}.meta() + ".tmp." + std::to_string(::getpid()) + ".0";
  for (const auto& f : {stale, live}) std::ofstream(f) << "partial";
  for (int W : {1, 2}) {
    const std::string launch = W == 1 ? std::string() : launch2();
    auto r = run(b, launch + flags + " --resume-from-step 2");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("Resumed from step 2"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(stale)) << r.out;
    EXPECT_TRUE(fs::exists(live));
  }
}

// A byte flipped in a saved file: the resume names the file and the newest intact step; with two
// ranks both print it (the rank that read the bad file tells the other).
TEST(Checkpoint, CorruptFileIsNamedWithTheNewestIntactStep) {
  BaseDir b("nc_ck_crc");
  const std::string flags = std::string(kCk) + " --num-iterations 6 --save-every 2 --eval-every -1";
  auto r = run(b, launch2() + flags);
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(complete_checkpoint_steps(b.ckpt()), (std::vector<int64_t>{2, 4, 6}));
  const CheckpointPaths s4{b.ckpt(), 4}, s6{b.ckpt(), 6};
  flip_byte(s6.optim(1), 100);  // rank 1's shard of step 6
  auto bad = run(b, launch2() + flags + " --resume-from-step 6");
  EXPECT_NE(bad.code, 0);
  show_errors(bad.out);
  const std::string msg = "checkpoint file " + s6.optim(1) + " is corrupt";
  for (int rank = 0; rank < 2; ++rank) {
    const std::string line = "[rank " + std::to_string(rank) + "] nanochat: error: " + msg;
    EXPECT_NE(bad.out.find(line), std::string::npos) << line << "\n" << bad.out;
  }
  EXPECT_NE(bad.out.find("newest intact checkpoint in " + b.ckpt() + " (rank 0's folder, on host "), std::string::npos)
      << bad.out;
  EXPECT_NE(bad.out.find(" is step 4: resume with --resume-from-step 4"), std::string::npos) << bad.out;
  // the weights of step 4 too: the way back is step 2; one process (re-sharding) reads both shards
  flip_byte(s4.model(), 50);
  auto one = run(b, flags + " --resume-from-step 4");
  EXPECT_NE(one.code, 0);
  EXPECT_NE(one.out.find("checkpoint file " + s4.model() + " is corrupt"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("is step 2: resume with --resume-from-step 2"), std::string::npos) << one.out;
  auto ev = run(b, " base-eval -g t -s 4 --split-tokens 256 --threads 1");
  EXPECT_NE(ev.code, 0);
  EXPECT_NE(ev.out.find("checkpoint file " + s4.model() + " is corrupt"), std::string::npos) << ev.out;
  // base-eval reads no optimizer shard: step 6's weights are intact
  EXPECT_NE(ev.out.find("is step 6: pass -s 6"), std::string::npos) << ev.out;
  auto good = run(b, launch2() + flags + " --resume-from-step 2");
  EXPECT_EQ(good.code, 0) << good.out;
}

// Rank 1's copy of one tensor changes by one bit after step 2 (test-only fault): the replica
// check (every 2 steps) stops the job at step 4 at the latest, naming the tensor and rank 1.
TEST(Checkpoint, DivergedReplicaStopsTheJob) {
  BaseDir b("nc_ck_replica");
  const std::string flags = std::string(kCk) + " --num-iterations 8 --eval-every -1 --check-replicas-every 2";
  auto ok = run(b, launch2() + flags);
  ASSERT_EQ(ok.code, 0) << ok.out;
  auto bad = run(b, launch2() + flags, "NANOCHAT_TEST_FAULT=flip-bit:1:2:resid_lambdas");
  EXPECT_NE(bad.code, 0);
  show_errors(bad.out);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string line =
        "[rank " + std::to_string(rank) + "] nanochat: error: the ranks' copies of the model differ at step ";
    EXPECT_NE(bad.out.find(line), std::string::npos) << line << "\n" << bad.out;
  }
  EXPECT_NE(bad.out.find("tensor resid_lambdas on rank 1 (host "), std::string::npos) << bad.out;
  EXPECT_EQ(bad.out.find("step 00004/"), std::string::npos) << "the job went on after the check\n" << bad.out;
}
