// A rank killed in the middle of data-parallel base-train: `nanochat run` must stop the surviving
// rank within 10 s (the launcher's contract: a few seconds' settle, then SIGTERM), exit non-zero,
// and name the failed rank and the signal that killed it (src/nanochat/launch/launcher.cpp).
// Every wait has a deadline and every process the test started is killed on every path.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/safetensors.h"
#include "support/cli_util.h"
#include "support/weights_compare.h"

using namespace nctest;

namespace {

using Clock = std::chrono::steady_clock;

// Tiny model, as in dist_train_test.cpp, but with enough steps to still be training when a rank dies.
const char* kLongDist =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 768 --eval-every -1 --sample-every -1 --core-metric-every -1"
    " --save-every -1 --threads 1 --model-tag t --num-iterations 2000 --warmup-steps 1";

// (state, ppid) of a live or zombie process from /proc/<pid>/stat; nullopt once it is reaped.
struct ProcStat {
  char state;
  pid_t ppid;
};
std::optional<ProcStat> proc_stat(pid_t pid) {
  const std::string s = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto rp = s.rfind(')');  // the command name may hold spaces and parentheses
  if (s.empty() || rp == std::string::npos || rp + 4 > s.size()) return std::nullopt;
  ProcStat st{};
  st.state = s[rp + 2];
  st.ppid = static_cast<pid_t>(std::atol(s.c_str() + rp + 4));
  return st;
}

// A process has stopped running once it is gone or a zombie waiting for its parent's waitpid.
bool stopped(pid_t pid) {
  auto st = proc_stat(pid);
  return !st || st->state == 'Z' || st->state == 'X';
}

// The value of RANK in /proc/<pid>/environ, or -1.
int rank_of(pid_t pid) {
  const std::string env = slurp("/proc/" + std::to_string(pid) + "/environ");
  size_t at = 0;
  while (at < env.size()) {
    size_t end = env.find('\0', at);
    if (end == std::string::npos) end = env.size();
    if (env.compare(at, 5, "RANK=") == 0) return std::atoi(env.c_str() + at + 5);
    at = end + 1;
  }
  return -1;
}

// The live child processes of `parent` (a scan of /proc/*/stat).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str()));
    auto st = proc_stat(pid);
    if (st && st->ppid == parent && st->state != 'Z') out.push_back(pid);
  }
  return out;
}

// Owns the launcher (our child) and the ranks seen under it; kills whatever is left on destruction.
struct Job {
  pid_t launcher = -1;
  bool reaped = false;
  int status = 0;
  std::vector<pid_t> ranks;

  /// Polls waitpid until the launcher exits or `deadline`; true once it has been reaped.
  bool wait_until(Clock::time_point deadline) {
    while (!reaped) {
      if (::waitpid(launcher, &status, WNOHANG) == launcher) {
        reaped = true;
        break;
      }
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return reaped;
  }
  ~Job() {
    // Ranks first (they run in their own process groups), then the launcher; only pids that are
    // still running and still nanochat processes (never a recycled pid of someone else).
    if (launcher > 0 && !reaped)
      for (pid_t p : children_of(launcher)) ranks.push_back(p);
    for (pid_t r : ranks)
      if (!stopped(r) && slurp("/proc/" + std::to_string(r) + "/comm").rfind("nanochat", 0) == 0) ::kill(r, SIGKILL);
    if (launcher > 0 && !reaped) {
      ::kill(launcher, SIGKILL);
      ::waitpid(launcher, &status, 0);
    }
  }
};

// This machine's name as gethostname reports it (what the launcher puts in its messages).
std::string this_host() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "unknown-host";
  return buf;
}

int count_of(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

// Starts `nanochat run` with two ranks of kLongDist (env: extra VAR=value words) under `job`,
// output to `log`, and returns once rank 0 has logged 3 steps (fatal failure after 180 s, or if
// the job ends first); then job.ranks holds the launcher's children.
void start_training(const BaseDir& b, const std::string& env, const std::string& log, Job& job,
                    const std::string& flags = kLongDist) {
  const std::string cmd = env + " NANOCHAT_BASE_DIR=" + b.dir + " exec " + NANOCHAT_BINARY +
                          " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(free_port()) +
                          flags + " > " + log + " 2>&1";
  job.launcher = ::fork();
  ASSERT_GE(job.launcher, 0) << std::strerror(errno);
  if (job.launcher == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto start_deadline = Clock::now() + std::chrono::seconds(180);
  while (count_of(slurp(log), "] step ") < 3) {
    ASSERT_FALSE(job.wait_until(Clock::now())) << "the job ended before training got going:\n" << slurp(log);
    ASSERT_LT(Clock::now(), start_deadline) << "no training steps within 180 s:\n" << slurp(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  job.ranks = children_of(job.launcher);
}

}  // namespace

TEST(DistKill, KilledRankStopsTheJobAndIsNamed) {
  BaseDir b("nc_dk");
  const std::string log = b.dir + "/launcher.log";
  Job job;
  start_training(b, "", log, job);
  if (HasFatalFailure()) return;
  pid_t rank0 = -1, rank1 = -1;
  for (pid_t p : job.ranks) {
    const int r = rank_of(p);
    if (r == 0) rank0 = p;
    if (r == 1) rank1 = p;
  }
  ASSERT_GT(rank0, 0) << "no child of the launcher has RANK=0";
  ASSERT_GT(rank1, 0) << "no child of the launcher has RANK=1";
  ASSERT_EQ(job.ranks.size(), 2u);

  ASSERT_EQ(::kill(rank1, SIGKILL), 0) << std::strerror(errno);
  const auto killed_at = Clock::now();

  // The surviving rank must be stopped within 10 s of the failure (measured to the nearest 20 ms).
  while (!stopped(rank0) && Clock::now() < killed_at + std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double rank0_after_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_TRUE(stopped(rank0)) << "rank 0 still running 10 s after rank 1 was killed:\n" << slurp(log);

  ASSERT_TRUE(job.wait_until(killed_at + std::chrono::seconds(30)))
      << "the launcher did not exit within 30 s of the kill:\n"
      << slurp(log);
  const double launcher_after_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  std::printf("rank 0 stopped %.2f s and the launcher exited %.2f s after rank 1 was killed\n", rank0_after_s,
              launcher_after_s);

  const std::string out = slurp(log);
  ASSERT_TRUE(WIFEXITED(job.status)) << "the launcher itself was killed by a signal:\n" << out;
  EXPECT_NE(WEXITSTATUS(job.status), 0) << out;
  // The launcher's error names the killed rank first, with its pid and the signal: it is the root
  // cause (killed by a signal the launcher did not send), whatever rank 0 reported.
  const std::string expected = "nanochat: error: rank 1 (host " + this_host() + ", pid " + std::to_string(rank1) +
                               ") was killed by signal 9 (SIGKILL)";
  EXPECT_NE(out.find(expected), std::string::npos) << "expected: " << expected << "\n" << out;
  // the run got nowhere near its end: this is the failure path, not a finished job
  EXPECT_EQ(out.find("step 02000/"), std::string::npos) << out;
}

// A frozen rank (SIGSTOP: its sockets stay open, it never answers) ends the job within the
// collective timeout (NANOCHAT_COLLECTIVE_TIMEOUT, here 5 s) with a message naming rank 1, and the
// launcher does not wait forever for the stopped process.
TEST(DistKill, FrozenRankEndsTheJobWithinTheCollectiveTimeout) {
  BaseDir b("nc_dk_frozen");
  const std::string log = b.dir + "/launcher.log";
  Job job;
  start_training(b, "NANOCHAT_COLLECTIVE_TIMEOUT=5", log, job);
  if (HasFatalFailure()) return;
  pid_t rank1 = -1;
  for (pid_t p : job.ranks)
    if (rank_of(p) == 1) rank1 = p;
  ASSERT_GT(rank1, 0) << "no child of the launcher has RANK=1";
  ASSERT_EQ(::kill(rank1, SIGSTOP), 0) << std::strerror(errno);
  const auto frozen_at = Clock::now();
  // timeout 5 s + the step in flight + the launcher's settle and stop: well under a minute
  const bool ended = job.wait_until(frozen_at + std::chrono::seconds(60));
  if (!ended) ::kill(rank1, SIGCONT);  // let the cleanup kill it
  ASSERT_TRUE(ended) << "the job was still running 60 s after rank 1 froze:\n" << slurp(log);
  std::printf("the launcher exited %.2f s after rank 1 froze\n",
              std::chrono::duration<double>(Clock::now() - frozen_at).count());
  const std::string out = slurp(log);
  ASSERT_TRUE(WIFEXITED(job.status)) << out;
  EXPECT_NE(WEXITSTATUS(job.status), 0) << out;
  for (size_t p = out.find("error"); p != std::string::npos; p = out.find("error", p + 1)) {
    const size_t bol = out.rfind('\n', p) + 1;
    std::printf("  %s\n", out.substr(bol, out.find('\n', p) - bol).c_str());
    p = out.find('\n', p);
    if (p == std::string::npos) break;
  }
  // rank 0's own error names the rank it waited for (for its data, or for it to take ours,
  // whichever wait timed out first), and the timeout
  const size_t at = out.find("[rank 0] nanochat: error: ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string rank0_error = out.substr(at, out.find('\n', at) - at);
  const std::string rank1_desc = "rank 1 (host " + this_host() + ", pid " + std::to_string(rank1) + ")";
  EXPECT_TRUE(rank0_error.find("no data from " + rank1_desc) != std::string::npos ||
              rank0_error.find(rank1_desc + " did not receive this rank's data") != std::string::npos)
      << "expected rank 0's error to name " << rank1_desc << ":\n"
      << out;
  EXPECT_NE(rank0_error.find("within the collective timeout (5 s, NANOCHAT_COLLECTIVE_TIMEOUT)"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("step 02000/"), std::string::npos) << out;
  EXPECT_TRUE(stopped(rank1) || ::kill(rank1, 0) != 0) << "the frozen rank was left behind";
}

// A frozen rank is found by the heartbeat (NANOCHAT_HEARTBEAT_TIMEOUT, here 3 s) long before the
// collective timeout (left at its 300 s default, so only the heartbeat can end the job in time):
// rank 0 stops the job with a message that names the frozen rank, the step and what the step
// waited for, and what node 0 has saved (the last checkpoint, --save-every 2) with the resume flag.
TEST(DistKill, FrozenRankIsFoundByTheHeartbeatAndTheStopNamesStepAndCheckpoint) {
  BaseDir b("nc_dk_heartbeat");
  const std::string log = b.dir + "/launcher.log";
  Job job;
  std::string flags = kLongDist;
  flags.replace(flags.find("--save-every -1"), std::strlen("--save-every -1"), "--save-every 2");
  start_training(b, "NANOCHAT_HEARTBEAT_TIMEOUT=3", log, job, flags);
  if (HasFatalFailure()) return;
  pid_t rank1 = -1;
  for (pid_t p : job.ranks)
    if (rank_of(p) == 1) rank1 = p;
  ASSERT_GT(rank1, 0) << "no child of the launcher has RANK=1";
  ASSERT_EQ(::kill(rank1, SIGSTOP), 0) << std::strerror(errno);
  const auto frozen_at = Clock::now();
  // heartbeat 3 s + the launcher's settle and stop (10 s for a stopped process): far below the
  // 300 s collective timeout
  const bool ended = job.wait_until(frozen_at + std::chrono::seconds(60));
  if (!ended) ::kill(rank1, SIGCONT);  // let the cleanup kill it
  ASSERT_TRUE(ended) << "the job was still running 60 s after rank 1 froze:\n" << slurp(log);
  std::printf("the launcher exited %.2f s after rank 1 froze\n",
              std::chrono::duration<double>(Clock::now() - frozen_at).count());
  const std::string out = slurp(log);
  ASSERT_TRUE(WIFEXITED(job.status)) << out;
  EXPECT_NE(WEXITSTATUS(job.status), 0) << out;
  const std::string frozen =
      "rank 1 (host " + this_host() + ", pid " + std::to_string(rank1) + ") stopped answering its heartbeat for ";
  EXPECT_NE(out.find(frozen), std::string::npos) << "expected: " << frozen << "\n" << out;
  EXPECT_NE(out.find("NANOCHAT_HEARTBEAT_TIMEOUT 3.0 s"), std::string::npos) << out;
  // the step and the operation it waited in, and no sign of the collective timeout
  EXPECT_NE(out.find("the job stopped in step "), std::string::npos) << out;
  EXPECT_NE(out.find("(collective #"), std::string::npos) << out;
  EXPECT_EQ(out.find("within the collective timeout"), std::string::npos) << out;
  // what node 0 holds: the checkpoints of --save-every 2 are on disk, the message names the last
  const size_t at = out.find("The last checkpoint is step ");
  ASSERT_NE(at, std::string::npos) << out;
  const long last = std::atol(out.c_str() + at + std::strlen("The last checkpoint is step "));
  EXPECT_GE(last, 2) << out;
  EXPECT_EQ(last % 2, 0) << out;
  EXPECT_TRUE(fs::exists(b.ckpt() + "/model_" + std::string(6 - std::to_string(last).size(), '0') +
                         std::to_string(last) + ".safetensors"))
      << "the checkpoint the message names is not in " << b.ckpt() << "\n"
      << out;
  EXPECT_NE(out.find("--resume-from-step " + std::to_string(last)), std::string::npos) << out;
  EXPECT_TRUE(stopped(rank1) || ::kill(rank1, 0) != 0) << "the frozen rank was left behind";
}

// With --copy-state-every 1, a rank killed mid-run costs no completed step: node 0 writes its copy
// of the job's state as a checkpoint, and that checkpoint holds the same weights and optimizer
// state as an uninterrupted run's checkpoint of the same step (--balance even: the same split,
// so the same sums; held to the world-size tests' tolerance).
TEST(DistKill, KilledRankCostsNoCompletedStepWithTheStateCopy) {
  BaseDir b("nc_dk_copy");
  const std::string log = b.dir + "/launcher.log";
  auto with = [](const std::string& from, const std::string& to) {
    std::string f = kLongDist;
    f.replace(f.find(from), from.size(), to);
    return f + " --balance even";
  };
  int64_t step = -1;
  {
    Job job;
    start_training(b, "", log, job, with("--save-every -1", "--save-every -1 --copy-state-every 1"));
    if (HasFatalFailure()) return;
    pid_t rank1 = -1;
    for (pid_t p : job.ranks)
      if (rank_of(p) == 1) rank1 = p;
    ASSERT_GT(rank1, 0);
    ASSERT_EQ(::kill(rank1, SIGKILL), 0) << std::strerror(errno);
    ASSERT_TRUE(job.wait_until(Clock::now() + std::chrono::seconds(30))) << slurp(log);
    const std::string out = slurp(log);
    const std::string said = "The last checkpoint is step ";
    const size_t at = out.find(said);
    ASSERT_NE(at, std::string::npos) << out;
    step = std::atol(out.c_str() + at + said.size());
    // steps 0-2 were logged before the kill: the copy of step 2 was complete by then, and the one
    // of step 3 is the copy the kill may meet (seen under load)
    ASSERT_GE(step, 2) << out;
    EXPECT_NE(out.find("(node 0's copy of the job's state at step " + std::to_string(step) + ")"), std::string::npos)
        << out;
    // the step in progress, or at most the one before it when the kill met the copy itself
    const std::string stopped_in = "the job stopped in step ";
    const size_t in = out.find(stopped_in);
    ASSERT_NE(in, std::string::npos) << out;
    const long current = std::atol(out.c_str() + in + stopped_in.size());
    EXPECT_LE(current - step, 1) << out;
  }
  const nanochat::CheckpointPaths copy{b.ckpt(), step};
  ASSERT_TRUE(fs::exists(copy.marker())) << "no complete checkpoint of step " << step;
  const std::string kept = b.dir + "/from_copy";
  fs::create_directories(kept);
  for (const std::string& f : {copy.model(), copy.optim(0), copy.optim(1)})
    fs::copy_file(f, kept + "/" + fs::path(f).filename().string());
  fs::remove_all(b.ckpt());

  // the uninterrupted run, saving every step, stopped once step `step` is on disk
  {
    Job job;
    start_training(b, "", b.dir + "/reference.log", job, with("--save-every -1", "--save-every 1"));
    if (HasFatalFailure()) return;
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (!fs::exists(copy.marker()) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(fs::exists(copy.marker())) << slurp(b.dir + "/reference.log");
  }
  for (const std::string& f : {copy.model(), copy.optim(0), copy.optim(1)}) {
    const double d = nctest::max_rel_diff(nanochat::load_safetensors(f),
                                          nanochat::load_safetensors(kept + "/" + fs::path(f).filename().string()));
    std::printf("%s: max relative difference %.3g\n", fs::path(f).filename().string().c_str(), d);
    EXPECT_LE(d, 1e-4) << f;
  }
}
