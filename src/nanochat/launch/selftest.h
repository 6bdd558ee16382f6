#pragma once
// dist-selftest: a hidden subcommand (`nanochat dist-selftest`, usually under `nanochat run`) that
// exercises every collective of a Communicator against closed-form sums, so the launcher, the
// store and the Gloo communicator can be tested end to end with real processes (tests/launch/, tests/cluster/).
#include <iosfwd>
#include <map>
#include <string>

#include "nanochat/comm/communicator.h"

namespace nanochat::cluster {

struct SelftestOptions {
  int iterations = 2;                        ///< rounds of all checks
  size_t size = 4096;                        ///< base element count of the buffers
  int die_rank = -1;                         ///< this rank SIGKILLs itself ...
  int die_at = 0;                            ///< ... at the start of this iteration (testing failure handling)
  int fail_rank = -1;                        ///< this rank fails with an error of its own (exit status 1) ...
  int fail_at = 0;                           ///< ... at the start of this iteration ...
  std::string fail_after_key;                ///< ... once this key of the job's store is set, if given
  std::map<std::string, std::string> facts;  ///< agreed with cluster::agree before the checks
  std::map<int, std::map<std::string, std::string>> facts_on_rank;  ///< per-rank overrides
};

/// Runs the checks on `comm`, printing progress lines to `out` ("dist-selftest: rank R of W: ...").
/// Returns the number of checks passed; throws nanochat::Error naming the collective, the index,
/// the value and the expected value on the first mismatch.
size_t run_selftest(Communicator& comm, const SelftestOptions& opts, std::ostream& out);

}  // namespace nanochat::cluster
