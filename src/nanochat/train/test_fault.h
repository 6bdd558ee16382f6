#pragma once
// NANOCHAT_TEST_FAULT: faults the end-to-end tests inject into base-train through the binary.
// For the test suite only, not a user feature:
//   "flip-bit:<rank>:<step>:<tensor>"  that rank flips the lowest bit of the tensor's first
//                                      element right after that step's optimizer update
//                                      (a replica that silently diverges);
//   "write-fail:<rank>"                that rank's checkpoint writes fail (only rank 0 writes);
//   "save-stall:<step>"                rank 0 stops after the first file of that step's save
//                                      (the test then kills it: a kill in the middle of a save);
//   "slow:<rank>:<factor>"             that rank's forward+backward takes <factor> times as long
//                                      (it sleeps after each micro-batch: a slower machine).
#include <cstdint>
#include <string>

namespace nanochat {

class GPT;

/// The fault NANOCHAT_TEST_FAULT asks for; kind "" when it is unset or empty.
struct TestFault {
  std::string kind;  ///< "", "flip-bit", "write-fail", "save-stall" or "slow"
  int rank = -1;
  int64_t step = -1;
  std::string tensor;
  double amount = 0;  ///< slow: the factor
};

/// What the end-to-end tests may change in base-train, kept apart from the product's
/// BaseTrainArgs: the hidden flag --fault-inject and NANOCHAT_TEST_FAULT.
struct TrainTestHooks {
  std::string fault_inject;  ///< --fault-inject: "final-eval" makes the last evaluation fail
  TestFault fault;           ///< NANOCHAT_TEST_FAULT (test_fault_from_env)
};

/// Parses NANOCHAT_TEST_FAULT. Throws nanochat::Error quoting it when it is malformed.
TestFault test_fault_from_env();

/// Flips the lowest bit of the first element of `tensor`. Throws nanochat::Error when the model
/// has no such tensor.
void flip_lowest_bit(GPT& model, const std::string& tensor);

}  // namespace nanochat
