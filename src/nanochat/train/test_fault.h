#pragma once
// NANOCHAT_TEST_FAULT: faults the end-to-end tests inject into base-train through the binary.
// For the test suite only, not a user feature:
//   "flip-bit:<rank>:<step>:<tensor>"  that rank flips the lowest bit of the tensor's first
//                                      element right after that step's optimizer update
//                                      (a replica that silently diverges);
//   "write-fail:<rank>"                that rank's checkpoint writes fail.
#include <cstdint>
#include <string>

namespace nanochat {

class GPT;

/// The fault NANOCHAT_TEST_FAULT asks for; kind "" when it is unset or empty.
struct TestFault {
  std::string kind;  ///< "", "flip-bit" or "write-fail"
  int rank = -1;
  int64_t step = -1;
  std::string tensor;
};

/// What the end-to-end tests may change in base-train, kept apart from the product's
/// BaseTrainArgs: the hidden flags --fault-inject and --loader-global-stream, and
/// NANOCHAT_TEST_FAULT.
struct TrainTestHooks {
  std::string fault_inject;  ///< --fault-inject: "final-eval" makes the last evaluation fail
  /// --loader-global-stream: every rank reads the world-size-1 data stream and keeps micro-batches
  /// r, r+W, ... (data::LoaderOptions keep_stride), so W ranks x A micro-steps see exactly the
  /// batches of 1 rank x (A*W) micro-steps, and a resume at another world size is exact.
  bool loader_global_stream = false;
  TestFault fault;  ///< NANOCHAT_TEST_FAULT (test_fault_from_env)
};

/// Parses NANOCHAT_TEST_FAULT. Throws nanochat::Error quoting it when it is malformed.
TestFault test_fault_from_env();

/// Flips the lowest bit of the first element of `tensor`. Throws nanochat::Error when the model
/// has no such tensor.
void flip_lowest_bit(GPT& model, const std::string& tensor);

}  // namespace nanochat
