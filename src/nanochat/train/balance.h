#pragma once
// How one optimizer step's rows are dealt to the ranks: in proportion to their measured speed, so
// that a slower machine adds its speed to the job instead of holding every step back
// (docs/architecture.md 3.13).
//
// A step is R = total batch / T rows of the one-rank data stream. Rank r receives a contiguous
// range of them, rank 0 first, and runs it in micro-batches of its --device-batch-size B_r (the
// last one may be shorter). Rows are dealt one by one (not in whole micro-batches): at small
// batches a coarser unit left the fast rank waiting for a rounding. The result does not depend on
// the split beyond rounding (train/zero2_ordered_sum.h, zero2_grad_accum.h): the tests hold every split
// to the tolerance of the world-size tests.
//
// Every rank holds an identical StepBalancer and feeds it the same gathered per-rank timings after
// each step, so all ranks derive the same split with no message of its own. Policy:
//  * the first step splits evenly (nothing is measured yet); so does BalanceMode::Even always;
//  * speed of a rank = rows / forward-backward seconds, smoothed (EMA) over the steps it ran;
//  * rows are dealt in proportion to speed (largest remainders, ties to the lower rank);
//  * hysteresis: the split changes only when the new one's predicted compute time (the slowest
//    rank's rows / speed) is at least `replan_gain` shorter than the current one's; a rank that
//    slows sharply (a laptop on battery, a busy browser) makes that so at once;
//  * a rank dealt zero rows for `probe_every` steps gets one row, to measure it again.
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/plan/balance_mode.h"

namespace nanochat {

/// One rank's part of a step, as gathered to every rank after the step.
struct RankStepTimes {
  double rows = 0;             ///< rows this rank ran
  double compute_seconds = 0;  ///< its forward+backward wall time (the part that scales with rows)
};

class StepBalancer {
 public:
  struct Options {
    BalanceMode mode = BalanceMode::Speed;
    double replan_gain = 0.05;  ///< re-plan when the predicted step is this much shorter
    double ema = 0.5;           ///< weight of the newest speed measurement
    int probe_every = 10;       ///< steps with zero rows before a rank is measured again
  };

  /// device_batch: each rank's --device-batch-size (>= 1); step_rows: rows of one step (R >= 1).
  /// Throws nanochat::Error otherwise (naming the rank).
  StepBalancer(std::vector<int> device_batch, int64_t step_rows, Options opt);

  /// Rows of the next step per rank (sum = step_rows).
  const std::vector<int64_t>& rows() const { return rows_; }
  /// First row of `rank`'s range in the step.
  int64_t first_row(int rank) const;
  /// Micro-batch sizes (rows) of `rank` in the next step: its rows in chunks of its device batch,
  /// the last chunk possibly shorter.
  std::vector<int> micro_batches(int rank) const;
  /// Number of micro-batches per rank in the next step.
  std::vector<int> micro_batch_counts() const;
  /// The most micro-batches one step can have, all ranks together (one row each).
  int64_t max_micro_batches() const { return step_rows_; }
  /// Rows of one step, all ranks together (R).
  int64_t step_rows() const { return step_rows_; }
  /// Every rank's device batch, in rank order.
  const std::vector<int>& device_batches() const { return B_; }
  /// Current speed estimates in rows/s per rank (0 = not measured yet).
  const std::vector<double>& speeds() const { return speed_; }

  /// Feeds one step's gathered times (index = rank) and plans the next step. Returns true when
  /// the split changed. Throws nanochat::Error for a vector of another size.
  bool observe(const std::vector<RankStepTimes>& times);

  /// Predicted compute seconds of a split under the current speed estimates (the slowest rank).
  double predicted_seconds(const std::vector<int64_t>& rows) const;
  /// The split the current speed estimates give (before hysteresis).
  std::vector<int64_t> proportional_split() const;

 private:
  std::vector<int64_t> even_split() const;

  std::vector<int> B_;
  int64_t step_rows_;
  Options opt_;
  std::vector<int64_t> rows_;
  std::vector<double> speed_;
  std::vector<int> idle_steps_;
};

/// The rank the job would be faster without, if any: for each rank r, the step time of the others
/// alone is estimated as step_rows / (sum of their speeds, rows/s) plus their optimizer seconds
/// spread over one rank fewer (opt_seconds[q]: rank q's optimizer compute in the last step; the
/// update is sharded W ways). Of the ranks whose estimate is under 0.95 x step_seconds (the job's
/// measured step time) returns the one whose absence would make the step shortest, with that
/// estimate (when the step is mostly waiting, leaving out a fast rank can pass the test too);
/// -1 when none.
struct FasterWithout {
  int rank = -1;
  double seconds = 0;  ///< the estimated step time without it
};
FasterWithout faster_without(const std::vector<double>& speeds, const std::vector<double>& opt_seconds,
                             int64_t step_rows, double step_seconds);

/// "62% / 38%": each rank's share of `rows`, in rank order.
std::string split_percentages(const std::vector<int64_t>& rows);

}  // namespace nanochat
