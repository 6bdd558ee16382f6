#include "nanochat/plan/schedules.h"

#include <algorithm>
#include <cfenv>
#include <cmath>

namespace nanochat {

double round_half_even(double x) {
  const int old = std::fegetround();
  std::fesetround(FE_TONEAREST);
  double r = std::nearbyint(x);
  std::fesetround(old);
  return r;
}

int64_t LrSchedule::warmdown_iters() const {
  return static_cast<int64_t>(round_half_even(warmdown_ratio * static_cast<double>(num_iterations)));
}

double LrSchedule::lr_multiplier(int64_t it) const {
  const int64_t wd = warmdown_iters();
  if (it < warmup_steps) return static_cast<double>(it + 1) / static_cast<double>(warmup_steps);
  if (it <= num_iterations - wd) return 1.0;
  const double p = static_cast<double>(num_iterations - it) / static_cast<double>(wd);
  return p + (1.0 - p) * final_lr_frac;
}

double LrSchedule::muon_momentum(int64_t it) const {
  const int64_t wd = warmdown_iters();
  if (it < 400) return 0.85 + (0.97 - 0.85) * static_cast<double>(it) / 400.0;
  if (it >= num_iterations - wd) {
    const double p = static_cast<double>(it - (num_iterations - wd)) / static_cast<double>(wd);
    return 0.97 * (1.0 - p) + 0.90 * p;
  }
  return 0.97;
}

double LrSchedule::muon_weight_decay(int64_t it, double wd_scaled) const {
  return wd_scaled * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(it) / static_cast<double>(num_iterations)));
}

double SftSchedule::lr_multiplier(double progress) const {
  if (progress < warmup_ratio) return (progress + 1e-8) / warmup_ratio;
  if (progress <= 1.0 - warmdown_ratio) return 1.0;
  const double decay = (progress - (1.0 - warmdown_ratio)) / warmdown_ratio;
  return (1 - decay) * 1.0 + decay * final_lr_frac;
}

double SftSchedule::muon_momentum(int64_t it) {
  const double frac = std::min(static_cast<double>(it) / 300.0, 1.0);
  return (1 - frac) * 0.85 + frac * 0.95;
}

StepScheduleFn base_train_schedule(const LrSchedule& lr, double wd_scaled) {
  return [lr, wd_scaled](int64_t it, double) {
    const double lrm = lr.lr_multiplier(it);
    return ScheduledStep{lrm,
                         {static_cast<float>(lrm), static_cast<float>(lr.muon_momentum(it)),
                          static_cast<float>(lr.muon_weight_decay(it, wd_scaled))}};
  };
}

StepScheduleFn sft_schedule(const SftSchedule& lr, double muon_weight_decay) {
  return [lr, muon_weight_decay](int64_t it, double progress) {
    const double lrm = lr.lr_multiplier(progress);
    return ScheduledStep{lrm,
                         {static_cast<float>(lrm), static_cast<float>(SftSchedule::muon_momentum(it)),
                          static_cast<float>(muon_weight_decay)}};
  };
}

}  // namespace nanochat
