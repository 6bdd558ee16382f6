#include "nanochat/train/balance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "nanochat/core/error.h"

namespace nanochat {

StepBalancer::StepBalancer(std::vector<int> device_batch, int64_t step_rows, Options opt)
    : B_(std::move(device_batch)), step_rows_(step_rows), opt_(opt) {
  if (B_.empty()) fail("the step balancer needs at least one rank");
  if (step_rows_ < 1) fail("a step needs at least one row (got ", step_rows_, ")");
  for (size_t r = 0; r < B_.size(); ++r)
    if (B_[r] < 1) fail("rank ", r, " has --device-batch-size ", B_[r], "; it must be >= 1");
  speed_.assign(B_.size(), 0.0);
  idle_steps_.assign(B_.size(), 0);
  rows_ = even_split();
}

int64_t StepBalancer::first_row(int rank) const {
  int64_t first = 0;
  for (int q = 0; q < rank; ++q) first += rows_.at(static_cast<size_t>(q));
  return first;
}

std::vector<int> StepBalancer::micro_batches(int rank) const {
  std::vector<int> out;
  const int B = B_.at(static_cast<size_t>(rank));
  for (int64_t left = rows_.at(static_cast<size_t>(rank)); left > 0; left -= B)
    out.push_back(static_cast<int>(std::min<int64_t>(B, left)));
  return out;
}

std::vector<int> StepBalancer::micro_batch_counts() const {
  std::vector<int> out;
  for (size_t r = 0; r < B_.size(); ++r) out.push_back(static_cast<int>((rows_[r] + B_[r] - 1) / B_[r]));
  return out;
}

std::vector<int64_t> StepBalancer::even_split() const {
  const int64_t R = step_rows_, W = static_cast<int64_t>(B_.size());
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < W; ++r) rows.push_back(R / W + (r < R % W ? 1 : 0));
  return rows;
}

std::vector<int64_t> StepBalancer::proportional_split() const {
  const size_t W = B_.size();
  // ranks not measured yet count at the mean of the measured ones
  double known = 0;
  int n_known = 0;
  for (double s : speed_)
    if (s > 0) known += s, ++n_known;
  if (n_known == 0) return even_split();
  std::vector<double> s = speed_;
  for (double& v : s)
    if (v <= 0) v = known / n_known;
  const double total_speed = std::accumulate(s.begin(), s.end(), 0.0);
  const int64_t units = step_rows_;
  std::vector<int64_t> n(W);
  std::vector<std::pair<double, size_t>> rest;  // (-remainder, rank): largest remainder first, low rank on ties
  int64_t dealt = 0;
  for (size_t r = 0; r < W; ++r) {
    const double share = static_cast<double>(units) * s[r] / total_speed;
    n[r] = static_cast<int64_t>(std::floor(share));
    dealt += n[r];
    rest.push_back({-(share - static_cast<double>(n[r])), r});
  }
  std::sort(rest.begin(), rest.end());
  for (size_t i = 0; dealt < units; i = (i + 1) % W, ++dealt) ++n[rest[i].second];
  return n;
}

double StepBalancer::predicted_seconds(const std::vector<int64_t>& rows) const {
  double worst = 0;
  for (size_t r = 0; r < rows.size(); ++r)
    if (rows[r] > 0 && speed_[r] > 0) worst = std::max(worst, static_cast<double>(rows[r]) / speed_[r]);
  return worst;
}

bool StepBalancer::observe(const std::vector<RankStepTimes>& times) {
  if (times.size() != B_.size()) fail("the step balancer got times of ", times.size(), " ranks for ", B_.size());
  for (size_t r = 0; r < times.size(); ++r) {
    if (times[r].rows > 0 && times[r].compute_seconds > 0) {
      const double s = times[r].rows / times[r].compute_seconds;
      speed_[r] = speed_[r] > 0 ? opt_.ema * s + (1 - opt_.ema) * speed_[r] : s;
      idle_steps_[r] = 0;
    } else {
      ++idle_steps_[r];
    }
  }
  if (opt_.mode == BalanceMode::Even) return false;
  std::vector<int64_t> next = proportional_split();
  bool probed = false;
  for (size_t r = 0; r < next.size(); ++r)
    if (next[r] == 0 && idle_steps_[r] >= opt_.probe_every) {  // measure it again: one row from the busiest
      auto donor = std::max_element(next.begin(), next.end());
      *donor -= 1;
      next[r] += 1;
      idle_steps_[r] = 0;
      probed = true;
    }
  if (next == rows_) return false;
  const double now = predicted_seconds(rows_), then = predicted_seconds(next);
  if (!probed && !(then < now * (1.0 - opt_.replan_gain))) return false;
  rows_ = std::move(next);
  return true;
}

FasterWithout faster_without(const std::vector<double>& speeds, const std::vector<double>& opt_seconds,
                             int64_t step_rows, double step_seconds) {
  const size_t W = speeds.size();
  if (W < 2 || opt_seconds.size() != W) return {};
  FasterWithout best;
  for (size_t r = 0; r < W; ++r) {
    double others = 0, opt = 0;
    for (size_t q = 0; q < W; ++q)
      if (q != r) others += speeds[q], opt += opt_seconds[q];
    if (others <= 0) continue;
    const double fewer = static_cast<double>(W - 1);
    const double alone = static_cast<double>(step_rows) / others + opt / fewer * static_cast<double>(W) / fewer;
    if (alone < 0.95 * step_seconds && (best.rank < 0 || alone < best.seconds)) best = {static_cast<int>(r), alone};
  }
  return best;
}

std::string split_percentages(const std::vector<int64_t>& rows) {
  const double total = static_cast<double>(std::accumulate(rows.begin(), rows.end(), int64_t{0}));
  std::string s;
  for (size_t r = 0; r < rows.size(); ++r) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.0f%%", r ? " / " : "",
                  total > 0 ? 100.0 * static_cast<double>(rows[r]) / total : 0.0);
    s += b;
  }
  return s;
}

}  // namespace nanochat
