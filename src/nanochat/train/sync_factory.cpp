#include "nanochat/train/sync_factory.h"

#include "nanochat/cluster/env.h"
#include "nanochat/plan/plan.h"
#include "nanochat/train/diloco_sync.h"
#include "nanochat/train/job_layout.h"
#include "nanochat/train/zero2_sync.h"

namespace nanochat {

std::unique_ptr<StepSync> make_step_sync(const TrainPlan& plan, const JobLayout& layout, GPT& model,
                                         Communicator& comm) {
  switch (plan.sync) {
    case SyncMode::Diloco: {
      // a node = the ranks with the same rank - LOCAL_RANK (torchrun's and nanochat run's numbering)
      const int local_rank = static_cast<int>(cluster::env_int("LOCAL_RANK").value_or(0));
      return std::make_unique<DiLoCoSync>(model, plan, comm, layout.device_batches, layout.rows_per_step,
                                          DiLoCoSync::nodes_of_ranks(comm, local_rank));
    }
    case SyncMode::Zero2:
      break;
  }
  return std::make_unique<Zero2Sync>(model, plan.optim, comm, layout.device_batches, layout.rows_per_step,
                                     plan.balance);
}

}  // namespace nanochat
