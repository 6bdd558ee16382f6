#pragma once
// The points where the end-to-end tests inject faults into base-train. The product runs with
// no_faults() (every hook does nothing); train/test_fault.h builds the tests' injector from
// NANOCHAT_TEST_FAULT and the hidden --fault-inject flag. The loop, the step's synchronisation
// (train/sync.h) and the checkpoint writer call these hooks instead of comparing fault names.
#include <cstdint>
#include <string>

namespace nanochat {

class GPT;

class FaultInjector {
 public:
  virtual ~FaultInjector() = default;
  /// After a micro-batch's forward+backward on `rank` that took `seconds` (a slower machine sleeps).
  virtual void after_micro_batch(int /*rank*/, double /*seconds*/) const {}
  /// After step `step`'s optimizer update on `rank` (a replica that silently diverges).
  virtual void after_update(GPT& /*model*/, int /*rank*/, int64_t /*step*/) const {}
  /// Before the final evaluation; throws nanochat::Error to make it fail.
  virtual void before_final_evaluation() const {}
  /// Before `rank` writes a file of a checkpoint; throws nanochat::Error to make the write fail.
  virtual void before_checkpoint_write(int /*rank*/) const {}
  /// After `rank` wrote `path`, a file of step `step`'s checkpoint (a save that stalls until killed).
  virtual void after_checkpoint_file(int /*rank*/, int64_t /*step*/, const std::string& /*path*/) const {}
};

/// The product's injector: no faults.
const FaultInjector& no_faults();

}  // namespace nanochat
