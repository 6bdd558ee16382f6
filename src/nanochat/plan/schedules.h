#pragma once
// Training schedules of nanochat's scripts/base_train.py (docs/nanochat.md 3.4) and chat_sft.py,
// and the step's schedule a run's plan chooses from them (TrainPlan::step_schedule).
// `it` is the 0-based index of the optimizer step being made, `N` the number of steps.
#include <cstdint>
#include <functional>

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

/// The optimizer's schedule at a step (what StepSync::update applies, train/sync.h).
struct StepSchedule {
  float lr_multiplier = 1.f;
  float muon_momentum = 0.95f;
  float muon_weight_decay = 0.f;
};

/// A step's schedule as a run's plan gives it: the optimizer's, and the LR multiplier as the log
/// line and metrics.jsonl show it (not rounded to float).
struct ScheduledStep {
  double lrm = 0;
  StepSchedule optim;
};

/// A run's schedule (TrainPlan::step_schedule), chosen once when its plan is derived: the schedule
/// of step `it` (0-based) when the largest progress (0..1) the data stream has reported so far is
/// `progress` (0 when it reports none).
using StepScheduleFn = std::function<ScheduledStep(int64_t it, double progress)>;

/// base-train's (nanochat base_train.py): the LR multiplier and Muon's momentum of `lr` at the
/// step, Muon's weight decay `lr`.muon_weight_decay(it, wd_scaled); the progress is not used.
StepScheduleFn base_train_schedule(const LrSchedule& lr, double wd_scaled);

/// chat-sft's (nanochat chat_sft.py): the LR multiplier of `lr` at the progress, Muon's momentum
/// SftSchedule::muon_momentum(it), Muon's weight decay fixed at `muon_weight_decay`.
StepScheduleFn sft_schedule(const SftSchedule& lr, double muon_weight_decay);

}  // namespace nanochat
