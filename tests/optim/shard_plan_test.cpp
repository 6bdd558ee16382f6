// The optimizer's speed-proportional shard plan (optim/shard_plan.h) against closed forms: AdamW
// rows in proportion to speed with largest remainders, every row dealt once; Muon matrices each
// owned by exactly one rank, dealt longest first to the rank that finishes earliest, within
// Graham's list-scheduling bound on equal ranks; bad speeds are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "nanochat/core/error.h"
#include "nanochat/optim/shard_plan.h"

using namespace nanochat;

TEST(ShardPlan, RowsFollowTheSpeedsWithLargestRemainders) {
  EXPECT_EQ(proportional_rows(12, {2, 1, 1}), (std::vector<int64_t>{6, 3, 3}));
  EXPECT_EQ(proportional_rows(10, {1, 1, 1}), (std::vector<int64_t>{4, 3, 3}));  // tie: lower rank
  EXPECT_EQ(proportional_rows(7, {3, 1}), (std::vector<int64_t>{5, 2}));         // 5.25, 1.75
  EXPECT_EQ(proportional_rows(0, {3, 1}), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(proportional_rows(768, {1}), (std::vector<int64_t>{768}));
  std::mt19937 rng(5);
  for (int t = 0; t < 200; ++t) {
    const int W = 1 + static_cast<int>(rng() % 6);
    const int64_t R = static_cast<int64_t>(rng() % 5000);
    std::vector<double> s(static_cast<size_t>(W));
    for (auto& x : s) x = 0.1 + static_cast<double>(rng() % 1000) / 100.0;
    const auto rows = proportional_rows(R, s);
    EXPECT_EQ(std::accumulate(rows.begin(), rows.end(), int64_t{0}), R);  // every row dealt once
    const double total = std::accumulate(s.begin(), s.end(), 0.0);
    for (int r = 0; r < W; ++r) {
      const double exact = static_cast<double>(R) * s[static_cast<size_t>(r)] / total;
      EXPECT_LE(std::abs(static_cast<double>(rows[static_cast<size_t>(r)]) - exact), 1.0) << "rank " << r;
    }
  }
}

TEST(ShardPlan, MatricesAreOwnedOnceAndTheSlowRankGetsFewer) {
  // 4 equal matrices, rank 0 three times as fast: 3 and 1 (both finish at 1 unit; tie to rank 0).
  EXPECT_EQ(deal_whole_items({1, 1, 1, 1}, {3, 1}), (std::vector<int>{0, 0, 0, 1}));
  EXPECT_EQ(deal_whole_items({1, 1, 1, 1, 1, 1}, {1, 1, 1}), (std::vector<int>{0, 1, 2, 0, 1, 2}));
  // the most expensive first: 5 alone on rank 0, then 3, 2 on rank 1
  EXPECT_EQ(deal_whole_items({2, 5, 3}, {1, 1}), (std::vector<int>{1, 0, 1}));
  EXPECT_TRUE(deal_whole_items({}, {1, 2}).empty());
  std::mt19937 rng(9);
  for (int t = 0; t < 200; ++t) {
    const int W = 1 + static_cast<int>(rng() % 5);
    const size_t K = rng() % 40;
    std::vector<double> c(K);
    for (auto& x : c) x = static_cast<double>(1 + rng() % 100);
    const auto owner = deal_whole_items(c, std::vector<double>(static_cast<size_t>(W), 2.0));
    ASSERT_EQ(owner.size(), K);
    std::vector<double> load(static_cast<size_t>(W), 0.0);
    for (size_t i = 0; i < K; ++i) {
      ASSERT_GE(owner[i], 0);
      ASSERT_LT(owner[i], W);
      load[static_cast<size_t>(owner[i])] += c[i];
    }
    // greedy on equal ranks (Graham's list-scheduling bound): makespan <= total / W + largest * (W - 1) / W
    const double total = std::accumulate(c.begin(), c.end(), 0.0);
    const double largest = K ? *std::max_element(c.begin(), c.end()) : 0.0;
    EXPECT_LE(*std::max_element(load.begin(), load.end()), total / W + largest * (W - 1) / W + 1e-9);
  }
}

TEST(ShardPlan, PredictedTimeIsTheSlowestRanksAndCostsFollowTheMatrixProducts) {
  EXPECT_DOUBLE_EQ(predicted_optimizer_time({100, 50}, {0, 50}, {2, 1}), 100.0);
  EXPECT_DOUBLE_EQ(muon_matrix_cost(256, 1024, 5), 5.0 * 256 * 1024 * 256);
  EXPECT_DOUBLE_EQ(muon_matrix_cost(1024, 256, 5), muon_matrix_cost(256, 1024, 5));
}

TEST(ShardPlan, BadSpeedsAreNamed) {
  for (const std::vector<double>& s : {std::vector<double>{}, {1, 0}, {1, -2}}) {
    try {
      proportional_rows(4, s);
      FAIL() << "accepted bad speeds";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer shard plan"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(deal_whole_items({-1}, {1}), Error);
  EXPECT_THROW(predicted_optimizer_time({1}, {1, 2}, {1}), Error);
}
