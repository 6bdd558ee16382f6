#pragma once
// How many OpenMP threads a training rank uses, adjusted to what its steps measure
// (docs/architecture.md 6).
//
// Why: oneDNN's sgemm and our reductions split their work statically over the OpenMP team, so a
// parallel region ends when its slowest thread does. When another process keeps one of the cores
// busy, the thread that shares that core runs at a fraction of the speed and every region waits
// for it: with 2 cores and one busy, 2 threads ran at 0.77x of 1 thread on the free core
// (bench/run_busy_core_bench.sh). The tuner shrinks the team while a step runs faster with one
// thread fewer, and probes the neighbouring counts now and then so that it grows back once the
// core is free again.
//
// The rule (a hill climb on measured cost, one step per measurement):
//   - The first `warmup` steps are not measured (allocation, first touches, thread creation).
//   - The count in use ("settled") is judged by the lowest cost of its last kWindow steps: other
//     processes only ever slow a step down, so the minimum is the least disturbed figure.
//   - After at least `interval` settled steps (2 at first) one step runs at a neighbour
//     (settled - 1 first). When that step's cost is below (1 - kMargin) x the settled figure, the
//     neighbour becomes the settled count (its window starts with that step) and the next probe
//     goes on in the same direction after one more step, or, at the end of the range, the other
//     way after 4; otherwise the direction flips and the interval doubles, up to kMaxInterval.
//   - A probe to fewer threads needs a sign of a straggler: the step just measured was
//     "contended" (the caller passes whether other work kept the threads off their cores, from
//     the threads' run-queue delay, core/threads.h process_run_delay_ns). Without one it probes
//     up when it can and otherwise waits, so a quiet machine at max runs no probes at all.
//   With max = 1 the tuner never changes anything.
// Cost: seconds per unit of work (the trainer passes its compute seconds per row), so a step with
// more or fewer rows (the row balancer, train/balance.h) compares fairly; a step without work is
// skipped. Pure logic: the caller applies threads() (core/threads.h set_num_threads).
// Reproducibility: a static split's sums depend on the thread count, so a run whose count changes
// rounds differently from one that keeps it; `--threads N` fixes the count.
#include <cstdint>
#include <deque>
#include <string>

namespace nanochat {

class ThreadTuner {
 public:
  /// A probe must be this much cheaper than the settled count to replace it.
  static constexpr double kMargin = 0.05;
  /// The longest wait between probes, in measured steps.
  static constexpr int kMaxInterval = 64;
  /// Settled steps whose lowest cost stands for the settled count.
  static constexpr int kWindow = 4;

  /// `max_threads` >= 1: the count it starts at and never exceeds; `unit` names the work unit in
  /// change(). Throws nanochat::Error on max_threads < 1.
  explicit ThreadTuner(int max_threads, int warmup = 1, std::string unit = "unit");

  /// The thread count for the next step.
  int threads() const { return cur_; }
  int max_threads() const { return max_; }
  /// The count the tuner settled on (threads() differs from it during a probe step).
  int settled() const { return settled_; }

  /// Records the step just run at threads(): `seconds` of work over `units` of work (units <= 0:
  /// not measured); `contended`: its threads waited for a CPU (unknown: pass true). Returns true
  /// when the settled count changed; then change() says why.
  bool after_step(double seconds, double units, bool contended = true);

  /// Whether a step whose threads spent `run_delay_s` seconds in all waiting for a CPU, over
  /// `wall_s` seconds at `threads` threads, counts as contended: more than kContended of the
  /// threads' time. A negative delay (not reported) counts as contended.
  static bool contended(double run_delay_s, double wall_s, int threads);
  /// The share of the threads' time spent waiting for a CPU above which a step is contended.
  static constexpr double kContended = 0.05;

  /// "2 -> 1 threads: 41.2 ms per unit against 55 ms" for the last change of the settled count.
  const std::string& change() const { return change_; }

 private:
  void schedule_probe(bool contended);
  double settled_cost() const;

  int max_, cur_, settled_;
  int warmup_left_;
  std::string unit_;
  std::deque<double> window_;  // the settled count's last kWindow costs
  int dir_ = -1;               // direction of the next probe
  int interval_ = 2;           // measured settled steps before the next probe
  int since_probe_ = 0;
  bool probing_ = false;
  std::string change_;
};

}  // namespace nanochat
