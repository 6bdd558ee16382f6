// The OpenMP wait policy and thread report of `nanochat base-train`, through the binary: by
// default idle OpenMP threads sleep at once (passive), read back from the runtime itself; a
// policy the user sets in the environment wins; the start-up line names the threads and the CPUs.
#include <gtest/gtest.h>
#include <sched.h>

#include <string>

#include "support/cli_util.h"

using namespace nctest;

namespace {

// The "Threads: ..." start-up line of a run ("" if absent).
std::string threads_line(const std::string& out) {
  const auto p = out.find("Threads: ");
  return p == std::string::npos ? std::string() : out.substr(p, out.find('\n', p) - p);
}

const std::string kOneStep = std::string(kTiny) + " --num-iterations 1 --eval-every -1";
// Empty values count as unset, so this is a run whose user chose no wait policy.
const std::string kNoPolicy = "OMP_WAIT_POLICY= GOMP_SPINCOUNT= NANOCHAT_DEFAULT_WAIT_POLICY=";

}  // namespace

TEST(Threads, DefaultWaitPolicyIsPassiveInTheRuntime) {
  BaseDir b("nc_threads_default");
  auto r = run(b, kOneStep, kNoPolicy);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string line = threads_line(r.out);
  ASSERT_FALSE(line.empty()) << "no Threads: start-up line\n" << r.out;
  // "passive" is what libgomp reports it applies (spin count 0), not the environment echoed back
  EXPECT_NE(line.find("wait policy passive, idle threads sleep at once (nanochat's default"), std::string::npos)
      << line;
  EXPECT_NE(line.find("Threads: 1 on CPUs "), std::string::npos) << line;  // kTiny passes --threads 1
}

TEST(Threads, TheUsersWaitPolicyWins) {
  BaseDir b("nc_threads_user");
  auto active = run(b, kOneStep, kNoPolicy + " OMP_WAIT_POLICY=active");
  ASSERT_EQ(active.code, 0) << active.out;
  EXPECT_NE(threads_line(active.out)
                .find("wait policy active, idle threads spin (from the environment: "
                      "OMP_WAIT_POLICY=active)"),
            std::string::npos)
      << threads_line(active.out);
  auto spin = run(b, kOneStep, kNoPolicy + " GOMP_SPINCOUNT=1234");
  ASSERT_EQ(spin.code, 0) << spin.out;
  EXPECT_NE(threads_line(spin.out).find("wait policy idle threads spin 1234 times, then sleep (from the "
                                        "environment: GOMP_SPINCOUNT=1234)"),
            std::string::npos)
      << threads_line(spin.out);
}

TEST(Threads, StartUpLineNamesTheCpusThisRankMayUse) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &set)) ++cpu;
  BaseDir b("nc_threads_cpus");
  // without --threads, OpenMP's default is one thread per CPU the process may use
  std::string args = kOneStep;
  args.replace(args.find(" --threads 1"), 12, "");
  auto r = run(b, args, kNoPolicy + " OMP_NUM_THREADS= taskset -c " + std::to_string(cpu));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(threads_line(r.out).find("Threads: 1 on CPUs " + std::to_string(cpu) + "; wait policy passive"),
            std::string::npos)
      << r.out;
}

// Without --threads and with more than one thread, the rank tunes its count from its steps
// (core/thread_tuner.h) and says so; --threads N keeps it fixed and the line says nothing of it.
TEST(Threads, StartUpLineSaysWhenTheCountFollowsTheSteps) {
  BaseDir b("nc_threads_tuned");
  std::string args = kOneStep;
  args.replace(args.find(" --threads 1"), 12, "");
  auto tuned = run(b, args, kNoPolicy + " OMP_NUM_THREADS=2");
  ASSERT_EQ(tuned.code, 0) << tuned.out;
  EXPECT_NE(threads_line(tuned.out).find("Threads: 2 on CPUs "), std::string::npos) << tuned.out;
  EXPECT_NE(threads_line(tuned.out).find("fewer while the steps measure faster with fewer (a busy core), --threads N "
                                         "fixes the count"),
            std::string::npos)
      << threads_line(tuned.out);
  auto fixed = run(b, args + " --threads 2", kNoPolicy);
  ASSERT_EQ(fixed.code, 0) << fixed.out;
  EXPECT_EQ(threads_line(fixed.out).find("fewer while"), std::string::npos) << threads_line(fixed.out);
}
