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

void ThreadTuner::schedule_probe() {
  if (max_ == 1 || since_probe_ < interval_) return;
  if (settled_ + dir_ < 1 || settled_ + dir_ > max_) dir_ = -dir_;
  cur_ = settled_ + dir_;
  probing_ = true;
}

bool ThreadTuner::after_step(double seconds, double units) {
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
    schedule_probe();
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
