#pragma once
// The one place a training job's step synchronisation is chosen (TrainPlan::sync, --sync) and
// built with the optimizer it owns (train/sync.h). The loop, the checkpoints and the commands see
// only StepSync.
#include <memory>

#include "nanochat/train/sync.h"

namespace nanochat {

class Communicator;
class GPT;
struct JobLayout;

/// The sync of plan.sync over `model`'s parameters (plan/plan.h optimizer_params) and `comm`'s
/// ranks, with its MuonAdamW built from plan.optim: Zero2Sync (SyncMode::Zero2) or DiLoCoSync
/// (SyncMode::Diloco). `layout`: the job as agreed (its device batches and rows per step). The
/// references must outlive the sync. Throws nanochat::Error like the implementations'
/// constructors.
std::unique_ptr<StepSync> make_step_sync(const TrainPlan& plan, const JobLayout& layout, GPT& model,
                                         Communicator& comm);

}  // namespace nanochat
