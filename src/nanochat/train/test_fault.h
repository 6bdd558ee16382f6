#pragma once
// The tests' FaultInjector (checkpoint/faults.h): NANOCHAT_TEST_FAULT (parsed by core/test_fault.h, the
// one parser) and the hidden base-train flag --fault-inject. For the test suite only.
#include <memory>
#include <string>

#include "nanochat/checkpoint/faults.h"
#include "nanochat/core/test_fault.h"

namespace nanochat {

class GPT;

/// What the end-to-end tests may change in base-train, kept apart from the product's
/// BaseTrainArgs: the hidden flag --fault-inject and NANOCHAT_TEST_FAULT.
struct TrainTestHooks {
  std::string fault_inject;  ///< --fault-inject: "final-eval" makes the last evaluation fail
  TestFault fault;           ///< NANOCHAT_TEST_FAULT (test_fault_from_env)
};

/// The injector of `hooks`: no_faults() semantics for every hook whose fault is not asked for.
std::unique_ptr<FaultInjector> make_fault_injector(const TrainTestHooks& hooks);

/// Flips the lowest bit of the first element of `tensor`. Throws nanochat::Error when the model
/// has no such tensor.
void flip_lowest_bit(GPT& model, const std::string& tensor);

}  // namespace nanochat
