#pragma once
// NANOCHAT_TEST_FAULT: the one parser of the faults the end-to-end tests inject through the
// binary. For the test suite only, not a user feature:
//   "flip-bit:<rank>:<step>:<tensor>"  that rank flips the lowest bit of the tensor's first
//                                      element right after that step's optimizer update
//                                      (a replica that silently diverges);
//   "write-fail:<rank>"                that rank's checkpoint writes fail (only rank 0 writes);
//   "save-stall:<step>"                rank 0 stops after the first file of that step's save
//                                      (the test then kills it: a kill in the middle of a save);
//   "slow:<rank>:<factor>"             that rank's forward+backward takes <factor> times as long
//                                      (it sleeps after each micro-batch: a slower machine);
//   "start-delay:<rank>:<seconds>"     that rank sleeps before its first start-up barrier
//                                      (cluster/startup.h);
//   "die:<rank>:<step>"                the process started as RANK=<rank> kills itself (SIGKILL)
//                                      right after that step's optimizer update (a node lost
//                                      mid-step, at a step the test chooses);
//   "stop-setup:<rank>"                the process started as RANK=<rank> stops itself (SIGSTOP)
//                                      once its elastic job's first group formed, before the
//                                      command's set-up (a node frozen while a stage starts; the
//                                      test wakes it).
// Who acts on them: train/test_fault.h (the trainer's FaultInjector), cluster/startup.cpp and
// train/elastic.cpp (stop-setup).
#include <cstdint>
#include <string>

namespace nanochat {

/// One parsed NANOCHAT_TEST_FAULT; kind "" when it is unset or empty.
struct TestFault {
  std::string kind;  ///< "", "flip-bit", "write-fail", "save-stall", "slow", "start-delay", "die" or "stop-setup"
  int rank = -1;
  int64_t step = -1;
  std::string tensor;
  double amount = 0;  ///< slow: the factor; start-delay: the seconds
};

/// Parses `text` (the variable's value; null or "" gives kind ""). Throws nanochat::Error quoting
/// it when it is malformed.
TestFault parse_test_fault(const char* text);

/// parse_test_fault(getenv("NANOCHAT_TEST_FAULT")).
TestFault test_fault_from_env();

}  // namespace nanochat
