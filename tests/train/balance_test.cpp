// StepBalancer: how a step's rows are dealt to ranks of different speeds (train/balance.h), against
// hand-computed splits.
#include "nanochat/train/balance.h"

#include <gtest/gtest.h>

#include "nanochat/core/error.h"

using namespace nanochat;

namespace {

using Rows = std::vector<int64_t>;

// Times of a step in which rank r ran `rows[r]` rows at `speed[r]` rows/s.
std::vector<RankStepTimes> times(const Rows& rows, const std::vector<double>& speed) {
  std::vector<RankStepTimes> t;
  for (size_t r = 0; r < rows.size(); ++r)
    t.push_back({static_cast<double>(rows[r]), rows[r] > 0 ? static_cast<double>(rows[r]) / speed[r] : 0.0});
  return t;
}

}  // namespace

TEST(StepBalancer, TheFirstStepIsEvenRowByRow) {
  StepBalancer b({4, 4, 4}, 32, {});
  EXPECT_EQ(b.rows(), (Rows{11, 11, 10}));
  EXPECT_EQ(b.first_row(2), 22);
  EXPECT_EQ(b.micro_batches(0), (std::vector<int>{4, 4, 3}));  // the last micro-batch is shorter
  EXPECT_EQ(b.micro_batch_counts(), (std::vector<int>{3, 3, 3}));
  EXPECT_EQ(b.max_micro_batches(), 32);
}

TEST(StepBalancer, RowsFollowTheMeasuredSpeed) {
  StepBalancer b({2, 2}, 24, {});
  EXPECT_EQ(b.rows(), (Rows{12, 12}));
  EXPECT_TRUE(b.observe(times(b.rows(), {300.0, 100.0})));  // 3:1
  EXPECT_EQ(b.rows(), (Rows{18, 6}));
  EXPECT_NEAR(b.speeds()[0], 300.0, 1e-9);
  EXPECT_NEAR(b.predicted_seconds(b.rows()), 0.06, 1e-12);
  // the same speeds again: nothing to change
  EXPECT_FALSE(b.observe(times(b.rows(), {300.0, 100.0})));
  EXPECT_EQ(split_percentages(b.rows()), "75% / 25%");
}

TEST(StepBalancer, SmallDriftKeepsTheSplitASharpSlowdownChangesItAtOnce) {
  StepBalancer b({1, 1}, 100, {});
  b.observe(times(b.rows(), {100.0, 100.0}));
  ASSERT_EQ(b.rows(), (Rows{50, 50}));
  // rank 1 a little slower: 51/49 would be predicted ~2% faster, under the 5% needed
  EXPECT_FALSE(b.observe(times(b.rows(), {100.0, 96.0})));
  EXPECT_EQ(b.rows(), (Rows{50, 50}));
  // rank 1 at a quarter of its speed (a laptop unplugged): re-planned on the next step
  EXPECT_TRUE(b.observe(times(b.rows(), {100.0, 20.0})));
  EXPECT_GT(b.rows()[0], 60);
}

TEST(StepBalancer, ARankMuchSlowerGetsNoRowsAndIsMeasuredAgainLater) {
  StepBalancer::Options o;
  o.probe_every = 3;
  StepBalancer b({2, 2, 2}, 12, o);
  b.observe(times(b.rows(), {100.0, 100.0, 2.0}));
  EXPECT_EQ(b.rows(), (Rows{6, 6, 0}));
  EXPECT_EQ(b.micro_batches(2), std::vector<int>{});
  EXPECT_EQ(b.micro_batch_counts(), (std::vector<int>{3, 3, 0}));
  b.observe(times(b.rows(), {100.0, 100.0, 2.0}));
  b.observe(times(b.rows(), {100.0, 100.0, 2.0}));
  EXPECT_TRUE(b.observe(times(b.rows(), {100.0, 100.0, 2.0})));  // third step without rows: one row
  EXPECT_EQ(b.rows(), (Rows{5, 6, 1}));
  // it has become fast (the other program ended): within a few steps it gets its share back
  for (int step = 0; step < 6; ++step) b.observe(times(b.rows(), {100.0, 100.0, 100.0}));
  EXPECT_EQ(b.rows(), (Rows{4, 4, 4}));
}

TEST(StepBalancer, DeviceBatchesMayDifferAndTheLastMicroBatchIsShorter) {
  StepBalancer b({4, 6}, 24, {});
  EXPECT_EQ(b.rows(), (Rows{12, 12}));
  EXPECT_EQ(b.micro_batches(1), (std::vector<int>{6, 6}));
  b.observe(times(b.rows(), {100.0, 300.0}));
  EXPECT_EQ(b.rows(), (Rows{6, 18}));
  EXPECT_EQ(b.micro_batches(0), (std::vector<int>{4, 2}));
  EXPECT_EQ(b.micro_batches(1), (std::vector<int>{6, 6, 6}));
}

TEST(StepBalancer, EvenModeNeverChanges) {
  StepBalancer b({2, 2}, 8, {BalanceMode::Even});
  EXPECT_FALSE(b.observe(times(b.rows(), {300.0, 1.0})));
  EXPECT_EQ(b.rows(), (Rows{4, 4}));
}

TEST(StepBalancer, RejectsBadSizes) {
  EXPECT_THROW(StepBalancer({}, 8, {}), Error);
  EXPECT_THROW(StepBalancer({2}, 0, {}), Error);
  try {
    StepBalancer({2, 0}, 8, {});
    FAIL() << "accepted a device batch of 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 has --device-batch-size 0"), std::string::npos) << e.what();
  }
  StepBalancer b({2}, 8, {});
  EXPECT_THROW(b.observe({}), Error);
}

// The others alone: 24 rows at 300 rows/s = 0.08 s, plus their optimizer work (0.01 s) spread over
// one rank instead of two (0.02 s): 0.10 s against a measured 0.2 s step -> without rank 1.
TEST(StepBalancer, FasterWithoutNamesARankThatHoldsTheJobBack) {
  const FasterWithout f = faster_without({300.0, 30.0}, {0.01, 0.01}, 24, 0.2);
  EXPECT_EQ(f.rank, 1);
  EXPECT_NEAR(f.seconds, 0.10, 1e-12);
  EXPECT_EQ(faster_without({300.0, 30.0}, {0.01, 0.01}, 24, 0.104).rank, -1);  // within 5%: keep it
  EXPECT_EQ(faster_without({300.0, 300.0}, {0.01, 0.01}, 24, 0.06).rank, -1);  // both pull their weight
  EXPECT_EQ(faster_without({300.0}, {0.01}, 24, 1.0).rank, -1);                // one rank: nothing to leave out
  // A step that is mostly waiting (a loaded machine): leaving out the fast rank 0 would pass the
  // 5% test too (12 rows at 60 rows/s: 0.20 s < 0.95 x 0.22 s), but without the slow rank 1 the
  // step is far shorter (0.06 s): rank 1 is named.
  const FasterWithout w = faster_without({200.0, 60.0}, {0.0, 0.0}, 12, 0.22);
  EXPECT_EQ(w.rank, 1);
  EXPECT_NEAR(w.seconds, 0.06, 1e-9);
}
