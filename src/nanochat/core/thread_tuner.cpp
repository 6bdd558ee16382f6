#include "nanochat/core/thread_tuner.h"

#include <algorithm>
#include <cstdio>

#include "nanochat/core/error.h"

namespace nanochat {

ThreadTuner::ThreadTuner(int max_threads, int warmup)
    : max_(max_threads), cur_(max_threads), settled_(max_threads), warmup_left_(std::max(0, warmup)) {
  if (max_threads < 1) fail("ThreadTuner: max_threads must be at least 1 (got ", max_threads, ")");
}

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
    settled_cost_ = settled_cost_ < 0 ? cost : 0.7 * settled_cost_ + 0.3 * cost;
    ++since_probe_;
    schedule_probe();
    return false;
  }
  probing_ = false;
  since_probe_ = 0;
  const int probed = cur_;
  cur_ = settled_;
  if (cost < (1.0 - kMargin) * settled_cost_) {
    char b[160];
    std::snprintf(b, sizeof b, "%d -> %d threads: %.3g ms per unit against %.3g ms", settled_, probed, cost * 1e3,
                  settled_cost_ * 1e3);
    change_ = b;
    settled_ = cur_ = probed;
    settled_cost_ = cost;
    interval_ = 1;  // keep going this way after one step at the new count
    return true;
  }
  dir_ = -dir_;
  interval_ = std::min(2 * interval_, kMaxInterval);
  return false;
}

}  // namespace nanochat
