#include "nanochat/core/thread_tuner.h"

#include <algorithm>
#include <cstdio>

#include "nanochat/core/error.h"

namespace nanochat {

ThreadTuner::ThreadTuner(int max_threads, int warmup, std::string unit)
    : max_(max_threads),
      cur_(max_threads),
      settled_(max_threads),
      warmup_left_(std::max(0, warmup)),
      unit_(std::move(unit)) {
  if (max_threads < 1) fail("ThreadTuner: max_threads must be at least 1 (got ", max_threads, ")");
}

double ThreadTuner::settled_cost() const { return *std::min_element(window_.begin(), window_.end()); }

bool ThreadTuner::contended(double run_delay_s, double wall_s, int threads) {
  if (run_delay_s < 0) return true;
  return wall_s > 0 && run_delay_s > kContended * wall_s * std::max(1, threads);
}

void ThreadTuner::schedule_probe(bool contended) {
  if (max_ == 1 || since_probe_ < interval_) return;
  int d = dir_;
  if (settled_ + d < 1 || settled_ + d > max_) d = -d;
  if (d < 0 && !contended) {  // no straggler in sight: only up is worth a step
    if (settled_ == max_) return;
    d = 1;
  }
  dir_ = d;
  cur_ = settled_ + d;
  probing_ = true;
}

bool ThreadTuner::after_step(double seconds, double units, bool contended) {
  if (units <= 0 || !(seconds > 0)) return false;  // no work this step: nothing learnt
  if (warmup_left_ > 0) {
    --warmup_left_;
    return false;
  }
  const double cost = seconds / units;
  if (!probing_) {
    window_.push_back(cost);
    if (window_.size() > static_cast<size_t>(kWindow)) window_.pop_front();
    ++since_probe_;
    schedule_probe(contended);
    return false;
  }
  probing_ = false;
  since_probe_ = 0;
  const int probed = cur_;
  cur_ = settled_;
  const double before = settled_cost();
  if (cost < (1.0 - kMargin) * before) {
    char b[160];
    std::snprintf(b, sizeof b, "%d -> %d threads: %.3g ms per %s against %.3g ms", settled_, probed, cost * 1e3,
                  unit_.c_str(), before * 1e3);
    change_ = b;
    settled_ = cur_ = probed;
    window_.assign(1, cost);
    // On in the same direction after one more step; at the end of the range, back after 4.
    interval_ = settled_ + dir_ >= 1 && settled_ + dir_ <= max_ ? 1 : 4;
    return true;
  }
  dir_ = -dir_;
  interval_ = std::min(2 * interval_, kMaxInterval);
  return false;
}

}  // namespace nanochat
