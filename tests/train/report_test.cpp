// The base-train step line's ranks part: whose times it shows, and a rank not timed yet.

#include <gtest/gtest.h>

#include "nanochat/train/report.h"

using namespace nanochat;

namespace {
StepReport two_rank_step() {
  StepReport r;
  r.step = 3;
  r.num_iterations = 10;
  r.smooth_loss = 2.5;
  r.lrm = 1;
  r.dt = 0.5;
  r.tok_per_sec = 2048;
  r.mfu = 40;
  r.loader_state = {{"epoch", 1}, {"pq_idx", 0}, {"rg_idx", 2}};
  r.world_size = 2;
  r.comm_wait = 0.05;
  return r;
}
}  // namespace

TEST(StepLine, EveryRanksTimesOfThisStep) {
  StepReport r = two_rank_step();
  r.ranks = {{0.5, 0.4, 0.05, 1000}, {0.5, 0.42, 0.03, 950}};
  EXPECT_EQ(step_log_line(r),
            "step 00003/00010 (30.00%) | loss: 2.500000 | lrm: 1.00 | dt: 500.00ms | tok/sec: 2,048 | mfu: 40.00 | "
            "epoch: 1 pq: 0 rg: 2 | total time: 0.00m | comm wait: 10.0% | ranks: r0 50% 0.40s+0.05s 1,000 tok/s, "
            "r1 50% 0.42s+0.03s 950 tok/s");
}

// Under DiLoCo a node sees the other nodes' times only at a round's end: the line says so, and
// before the first round's end a rank with no times shows "-" instead of zeros.
TEST(StepLine, OtherNodesTimesAreOfTheirLastRoundsEndAndARankNotTimedYetShowsADash) {
  StepReport r = two_rank_step();
  r.times_of_this_step = false;
  r.ranks = {{0.5, 0.4, 0.05, 1000}, {0.5, 0, 0, 0}};
  EXPECT_EQ(step_log_line(r),
            "step 00003/00010 (30.00%) | loss: 2.500000 | lrm: 1.00 | dt: 500.00ms | tok/sec: 2,048 | mfu: 40.00 | "
            "epoch: 1 pq: 0 rg: 2 | total time: 0.00m | comm wait: 10.0% | ranks (other nodes at their last "
            "round's end): r0 50% 0.40s+0.05s 1,000 tok/s, r1 50% -");
}
