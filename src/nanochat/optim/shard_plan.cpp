#include "nanochat/optim/shard_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "nanochat/core/error.h"

namespace nanochat {

namespace {

void check_speeds(const std::vector<double>& speeds) {
  if (speeds.empty()) fail("optimizer shard plan: no ranks (empty speed list)");
  for (size_t r = 0; r < speeds.size(); ++r)
    if (!(speeds[r] > 0) || !std::isfinite(speeds[r]))
      fail("optimizer shard plan: rank ", r, " has speed ", speeds[r], "; speeds must be positive and finite");
}

}  // namespace

std::vector<int64_t> proportional_rows(int64_t rows, const std::vector<double>& speeds) {
  check_speeds(speeds);
  if (rows < 0) fail("optimizer shard plan: ", rows, " rows");
  const double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  std::vector<int64_t> out(speeds.size());
  std::vector<std::pair<double, size_t>> rem;  // (remainder, rank)
  int64_t dealt = 0;
  for (size_t r = 0; r < speeds.size(); ++r) {
    const double exact = static_cast<double>(rows) * speeds[r] / total;
    out[r] = std::min(rows - dealt, static_cast<int64_t>(std::floor(exact)));
    dealt += out[r];
    rem.push_back({exact - static_cast<double>(out[r]), r});
  }
  std::stable_sort(rem.begin(), rem.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; dealt < rows; k = (k + 1) % rem.size(), ++dealt) ++out[rem[k].second];
  return out;
}

std::vector<int> deal_whole_items(const std::vector<double>& costs, const std::vector<double>& speeds) {
  check_speeds(speeds);
  std::vector<size_t> order(costs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  for (size_t i = 0; i < costs.size(); ++i)
    if (!(costs[i] >= 0) || !std::isfinite(costs[i]))
      fail("optimizer shard plan: item ", i, " has cost ", costs[i], "; costs must be >= 0 and finite");
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(speeds.size(), 0.0);
  std::vector<int> owner(costs.size(), -1);
  for (size_t i : order) {
    size_t best = 0;
    double best_t = 0;
    for (size_t r = 0; r < speeds.size(); ++r) {
      const double t = (load[r] + costs[i]) / speeds[r];
      if (r == 0 || t < best_t) best = r, best_t = t;
    }
    load[best] += costs[i];
    owner[i] = static_cast<int>(best);
  }
  return owner;
}

double predicted_optimizer_time(const std::vector<double>& adam_elems, const std::vector<double>& muon_cost,
                                const std::vector<double>& speeds) {
  check_speeds(speeds);
  if (adam_elems.size() != speeds.size() || muon_cost.size() != speeds.size())
    fail("optimizer shard plan: ", adam_elems.size(), " AdamW and ", muon_cost.size(), " Muon loads for ",
         speeds.size(), " ranks");
  double worst = 0;
  for (size_t r = 0; r < speeds.size(); ++r) worst = std::max(worst, (adam_elems[r] + muon_cost[r]) / speeds[r]);
  return worst;
}

double muon_matrix_cost(int64_t m, int64_t n, int ns_steps) {
  return static_cast<double>(ns_steps) * static_cast<double>(m) * static_cast<double>(n) *
         static_cast<double>(std::min(m, n));
}

}  // namespace nanochat
