#include "nanochat/train/elastic.h"

#include <cstdio>
#include <memory>
#include <optional>

#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/cluster/heartbeat.h"
#include "nanochat/cluster/regroup.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/format.h"
#include "nanochat/train/plan.h"

namespace nanochat {

#ifdef NANOCHAT_HAVE_GLOO
namespace {

// The line and record of a regroup, once the survivors are known (completed when they are ready).
Rejoined describe_regroup(const RankLeft& e, const cluster::Regrouped& g, int old_world) {
  Rejoined r;
  const int64_t age = g.step >= 0 ? e.step - g.step : -1;
  r.line = str_cat("Rank ", e.peer, " left the job in step ", e.step, " (why: above); ", g.members.size(),
                   g.members.size() == 1 ? " rank goes on (old rank " : " ranks go on (old ranks ",
                   g.members.size() == 1 ? "0" : nlohmann::json(g.members).dump(), ") ",
                   g.step >= 0 ? str_cat("from step ", g.step,
                                         ": the interrupted step is redone, and the optimizer "
                                         "state comes from node 0's copy of step ",
                                         g.step, " (", age, age == 1 ? " step" : " steps", " old)")
                               : std::string("from the start: node 0 held no copy and no checkpoint"));
  r.note = {{"step", g.step >= 0 ? g.step : 0},
            {"membership", str_cat("rank ", e.peer, " left")},
            {"reason", e.what()},
            {"world_size", old_world},
            {"world_size_after", g.members.size()},
            {"members", g.members},
            {"interrupted_step", e.step},
            {"restored_steps_old", age}};
  return r;
}

}  // namespace

void run_elastic(const BaseTrainArgs& a0, Communicator& comm, const FaultInjector& faults, int min_world_size) {
  auto* first = dynamic_cast<cluster::GlooCommunicator*>(&comm);
  NC_CHECK(first, "an elastic job needs the Gloo communicator");
  BaseTrainArgs a = a0;
  if (a.copy_state_every == 0) {
    a.copy_state_every = 1;  // a rank that leaves costs no completed step
    if (comm.rank() == 0)
      std::printf(
          "Elastic job (at least %d ranks): node 0 keeps a copy of the job's state every step "
          "(--copy-state-every 1; pass another N to copy less often)\n",
          min_world_size);
  }
  const cluster::Ms wait = std::max(cluster::heartbeat_timeout(), cluster::Ms(5000));
  std::unique_ptr<cluster::GlooCommunicator> owned;  // generations after the first
  cluster::GlooCommunicator* cur = first;
  std::optional<Rejoined> rejoined;
  for (;;) {
    try {
      run_generation(a, *cur, faults, rejoined ? &*rejoined : nullptr, true);
      return;
    } catch (const RankLeft& e) {
      if (e.peer == 0) throw;  // node 0 holds the store, the data and the checkpoints
      Timer since;
      const int old_world = cur->world_size();
      cluster::Regrouped g = cluster::regroup(*cur, e.peer, e.saved, wait);
      if (static_cast<int>(g.members.size()) < min_world_size)
        fail(e.what(), "; ", g.members.size(), " ranks remain, fewer than the ", min_world_size,
             " the job needs (--nnodes MIN:MAX): it stops",
             g.step >= 0 ? str_cat("; continue later with --resume-from-step ", g.step) : std::string());
      rejoined = describe_regroup(e, g, old_world);
      rejoined->since = since;
      rejoined->before = e.seconds;
      a.resume_from_step = g.step;
      if (!g.comm) {  // rank 0 alone: one process, no group to lose anyone from
        LocalCommunicator alone;
        run_generation(a, alone, faults, &*rejoined, false);
        return;
      }
      owned = std::move(g.comm);  // the previous later generation, if any, goes now
      cur = owned.get();
    } catch (const Error&) {
      if (cur->rank() != 0) {
        const std::string m = cluster::left_out_message(*cur);
        if (!m.empty()) fail("rank ", cur->rank(), ": ", m);
      }
      throw;
    }
  }
}
#else
void run_elastic(const BaseTrainArgs&, Communicator&, const FaultInjector&, int) {
  fail("an elastic job (--nnodes MIN:MAX) needs the Gloo communicator; this build has none");
}
#endif

}  // namespace nanochat
