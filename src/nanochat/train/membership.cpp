#include "nanochat/train/membership.h"

#include <nlohmann/json.hpp>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/format.h"
#include "nanochat/train/metrics_log.h"

namespace nanochat {

void FixedMembership::peer_lost(const PeerLost& e, int64_t step, int world_size, MetricsLog& metrics) {
  metrics.record({{"step", step},
                  {"membership", str_cat("rank ", e.peer(), " left")},
                  {"reason", e.what()},
                  {"world_size", world_size},
                  {"world_size_after", 0}});
}

void FixedMembership::admit_joiners(int64_t step, int64_t) {
  fail("internal: ranks to admit at step ", step, " into a job of fixed ranks");
}

}  // namespace nanochat
