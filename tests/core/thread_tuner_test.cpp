// The thread-count tuner (core/thread_tuner.h) driven by closed-form step costs: a quiet machine
// where every added thread helps (cost 1/t), one busy core that makes the full team slower than
// one thread fewer, a core that frees up later, and a larger team whose best count lies inside;
// and the run-queue delay (core/threads.h) that tells it a core is contended.
#include "nanochat/core/thread_tuner.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/threads.h"

using namespace nanochat;

namespace {

// Runs `steps` steps of `rows` rows each; cost(threads, step) is the seconds per row. Returns the
// thread count of every step.
// contended(step) says whether that step's threads waited for a CPU (default: always).
std::vector<int> drive(
    ThreadTuner& t, int steps, const std::function<double(int, int)>& cost, double rows = 4,
    const std::function<bool(int)>& contended = [](int) { return true; }) {
  std::vector<int> used;
  for (int s = 0; s < steps; ++s) {
    const int n = t.threads();
    used.push_back(n);
    t.after_step(cost(n, s) * rows, rows, contended(s));
  }
  return used;
}

int count(const std::vector<int>& v, int from, int to, int value) {
  int c = 0;
  for (int i = from; i < to; ++i) c += v[static_cast<size_t>(i)] == value;
  return c;
}

}  // namespace

TEST(ThreadTuner, QuietMachineKeepsEveryThreadAndProbesLessAndLessOften) {
  ThreadTuner t(4);
  const auto used = drive(t, 400, [](int n, int) { return 1.0 / n; });
  EXPECT_EQ(t.settled(), 4);
  // Probes at 3 threads double their interval (2, 4, ... 64 settled steps): 6 in the first
  // 130 steps, then one in 65.
  const int probes = 400 - count(used, 0, 400, 4);
  EXPECT_GE(probes, 8);
  EXPECT_LE(probes, 11);
  EXPECT_EQ(count(used, 0, 400, 2), 0);  // a failed probe never goes further down
}

TEST(ThreadTuner, WithoutContentionAQuietMachineRunsNoProbeAtAll) {
  ThreadTuner t(4);
  const auto used = drive(
      t, 400, [](int n, int) { return 1.0 / n; }, 4, [](int) { return false; });
  EXPECT_EQ(count(used, 0, 400, 4), 400);
}

TEST(ThreadTuner, ContentionIsTheShareOfThreadTimeSpentWaiting) {
  // 2 threads over a 1 s step: 0.1 s of waiting is 5% of 2 thread-seconds, the threshold.
  EXPECT_FALSE(ThreadTuner::contended(0.1, 1.0, 2));
  EXPECT_TRUE(ThreadTuner::contended(0.11, 1.0, 2));
  EXPECT_FALSE(ThreadTuner::contended(0.0, 1.0, 1));
  EXPECT_TRUE(ThreadTuner::contended(0.5, 1.0, 2));   // a thread sharing its core half the time
  EXPECT_TRUE(ThreadTuner::contended(-1.0, 1.0, 2));  // not reported: assume it may be
}

TEST(ThreadTuner, BelowTheMaximumItProbesUpEvenWithoutContention) {
  ThreadTuner t(2);
  // Busy (and contended) for 40 steps, then quiet and uncontended, 2 threads 1.8x as fast.
  drive(
      t, 200, [](int n, int s) { return s < 40 ? (n == 2 ? 1.3 : 1.0) : 1.0 / (n == 2 ? 1.8 : 1.0); }, 4,
      [](int s) { return s < 40; });
  EXPECT_EQ(t.settled(), 2);
}

TEST(ThreadTuner, OneBusyCoreOfTwoSettlesOnOneThreadAtTheFourthStep) {
  // Measured shape: 2 threads with one core busy ran at 0.77x of 1 thread.
  ThreadTuner t(2, 1, "row");
  const auto used = drive(t, 100, [](int n, int) { return n == 2 ? 1.0 / 0.77 : 1.0; });
  EXPECT_EQ(t.settled(), 1);
  EXPECT_EQ(used[0], 2);               // warm-up
  EXPECT_EQ(used[1], 2);               // measured
  EXPECT_EQ(used[2], 2);               // measured
  EXPECT_EQ(used[3], 1);               // the probe that wins
  EXPECT_EQ(count(used, 3, 8, 1), 5);  // then 4 steps before probing 2 threads again
  EXPECT_EQ(t.change(), "2 -> 1 threads: 1e+03 ms per row against 1.3e+03 ms");
  // Later probes back at 2 threads are rare: at most 5 of the last 90 steps.
  EXPECT_LE(count(used, 10, 100, 2), 5);
}

TEST(ThreadTuner, OneSlowStepOfTheSettledCountDoesNotMakeAProbeWin) {
  // Another process slows every third step by half; 1 thread is 4% slower than 2 at best.
  ThreadTuner t(2);
  drive(t, 300, [](int n, int s) { return (n == 2 ? 1.0 : 1.04) * (s % 3 == 0 ? 1.5 : 1.0); });
  EXPECT_EQ(t.settled(), 2);
}

TEST(ThreadTuner, GrowsBackWhenTheCoreFreesUp) {
  ThreadTuner t(2);
  // Busy for 60 steps, then quiet (2 threads 1.8x as fast as one).
  const auto used =
      drive(t, 200, [](int n, int s) { return s < 60 ? (n == 2 ? 1.3 : 1.0) : 1.0 / (n == 2 ? 1.8 : 1.0); });
  EXPECT_EQ(t.settled(), 2);
  // Back at 2 within the longest probe interval (+ the probe step) after the change.
  int back = -1;
  for (int s = 60; s < 200 && back < 0; ++s)
    if (used[static_cast<size_t>(s)] == 2 && used[static_cast<size_t>(s + 1)] == 2) back = s;
  ASSERT_GE(back, 0);
  EXPECT_LE(back - 60, ThreadTuner::kMaxInterval + 2);
  // Back at the top, the probes down fail and grow rare: one step in 2, 4, ... 32.
  EXPECT_LE(count(used, back, 200, 1), 8);
}

TEST(ThreadTuner, FindsTheBestCountInsideTheRange) {
  // 8 threads, 3 cores busy: the cost falls to 5 threads and rises after.
  ThreadTuner t(8);
  const auto cost = [](int n, int) { return n <= 5 ? 1.0 / n : 0.2 + 0.1 * (n - 5); };
  drive(t, 300, cost);
  EXPECT_EQ(t.settled(), 5);
}

TEST(ThreadTuner, NoiseBelowTheMarginNeverMovesIt) {
  ThreadTuner t(2);
  // The probe at 1 thread is only 3% cheaper: within kMargin, no change.
  drive(t, 200, [](int n, int) { return n == 2 ? 1.0 : 0.97; });
  EXPECT_EQ(t.settled(), 2);
}

TEST(ThreadTuner, StepsWithoutWorkAndTheWarmUpAreNotMeasured) {
  ThreadTuner t(2, 2);
  // Warm-up steps with an absurd cost, then steps without rows: nothing moves.
  EXPECT_FALSE(t.after_step(100.0, 1));
  EXPECT_FALSE(t.after_step(100.0, 1));
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(t.after_step(1.0, 0));
  EXPECT_EQ(t.threads(), 2);
  // Two measured steps at the settled count, then the probe.
  EXPECT_FALSE(t.after_step(1.0, 1));
  EXPECT_EQ(t.threads(), 2);
  EXPECT_FALSE(t.after_step(1.0, 1));
  EXPECT_EQ(t.threads(), 1);
  EXPECT_TRUE(t.after_step(0.5, 1));
  EXPECT_EQ(t.settled(), 1);
}

TEST(ThreadTuner, OneThreadNeverChanges) {
  ThreadTuner t(1);
  const auto used = drive(t, 50, [](int, int s) { return 1.0 + s; });
  EXPECT_EQ(count(used, 0, 50, 1), 50);
  EXPECT_THROW(ThreadTuner(0), Error);
}

// The run-queue delay the trainer feeds to contended(): two threads of this process kept busy on
// one CPU wait for it about half the time each, so the delay grows by a good part of the time they
// ran (the bound is a tenth of it, far from what a scheduler gives, so a loaded machine passes).
TEST(RunDelay, GrowsWhenTwoThreadsShareOneCpu) {
  const int64_t before = process_run_delay_ns();
  if (before < 0) GTEST_SKIP() << "this kernel does not report /proc/self/task/*/schedstat";
  cpu_set_t allowed, one;  // the first CPU this process may use
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &allowed)) ++cpu;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  std::atomic<bool> stop{false};
  auto spin = [&] {
    sched_setaffinity(0, sizeof one, &one);
    volatile uint64_t x = 0;
    while (!stop.load(std::memory_order_relaxed)) x = x + 1;
  };
  std::thread a(spin), b(spin);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const int64_t during = process_run_delay_ns();  // while both threads still count
  stop = true;
  a.join();
  b.join();
  EXPECT_GE(during, before);
  EXPECT_GT(during - before, 40'000'000) << "run delay grew by " << during - before << " ns in 400 ms";
}

// name_this_thread: the kernel reports the name (its first 15 characters) for that thread alone.
TEST(ThreadName, KernelReportsTheFirst15Characters) {
  auto comm_of = [](pid_t tid) {
    std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/comm");
    std::string name;
    std::getline(f, name);
    return name;
  };
  const std::string mine = comm_of(static_cast<pid_t>(::gettid()));
  std::string seen_short, seen_long;
  std::thread t([&] {
    const auto tid = static_cast<pid_t>(::gettid());
    name_this_thread("nc-test");
    seen_short = comm_of(tid);
    name_this_thread("nc-a-name-longer-than-fifteen");
    seen_long = comm_of(tid);
  });
  t.join();
  EXPECT_EQ(seen_short, "nc-test");
  EXPECT_EQ(seen_long, "nc-a-name-longe");
  EXPECT_EQ(comm_of(static_cast<pid_t>(::gettid())), mine) << "another thread's name changed this one's";
}
