#pragma once
// Training schedules of nanochat's scripts/base_train.py (docs/nanochat.md 3.4).
// `it` is the 0-based index of the optimizer step being made, `N` the number of steps.
#include <cstdint>

namespace nanochat {

/// Round half to even, like Python's round() (used for warmdown_iters and batch exponents).
double round_half_even(double x);

/// Schedule hyperparameters (base_train flags --warmup-steps, --warmdown-ratio, --final-lr-frac).
struct LrSchedule {
  int64_t num_iterations = 0;  ///< N
  int64_t warmup_steps = 40;
  double warmdown_ratio = 0.65;
  double final_lr_frac = 0.05;

  /// round_half_even(warmdown_ratio * N).
  int64_t warmdown_iters() const;
  /// LR multiplier: linear warmup (it+1)/warmup, 1.0, then linear warmdown to final_lr_frac.
  double lr_multiplier(int64_t it) const;
  /// Muon momentum: 0.85 -> 0.97 over the first 400 steps, 0.97, then -> 0.90 during warmdown.
  double muon_momentum(int64_t it) const;
  /// Muon weight decay: wd_scaled * 0.5 * (1 + cos(pi * it / N)).
  double muon_weight_decay(int64_t it, double wd_scaled) const;
};

/// chat-sft's schedules (nanochat scripts/chat_sft.py get_lr_multiplier, get_muon_momentum): the LR
/// follows the progress through the data (0..1), since the number of steps is known only when the
/// epoch ends.
struct SftSchedule {
  double warmup_ratio = 0.0;    ///< --warmup-ratio
  double warmdown_ratio = 0.5;  ///< --warmdown-ratio
  double final_lr_frac = 0.0;   ///< --final-lr-frac
  /// (p + 1e-8) / warmup_ratio while p < warmup_ratio; 1.0 up to 1 - warmdown_ratio; then linear
  /// to final_lr_frac at p = 1 (and on beyond it, as nanochat's formula goes).
  double lr_multiplier(double progress) const;
  /// Muon momentum 0.85 -> 0.95 over the first 300 steps, then 0.95.
  static double muon_momentum(int64_t it);
};

}  // namespace nanochat
