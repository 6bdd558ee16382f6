#pragma once
// base_train's main loop (nanochat scripts/base_train.py; docs/nanochat.md 3.3-3.10) for one rank of a
// data-parallel job: derivations, init or resume, gradient accumulation, MuonAdamW steps, log
// lines, val bpb, samples, atomic checkpoints, metrics JSONL and an SVG report.
#include <string>

#include "nanochat/train/plan.h"
#include "nanochat/train/test_fault.h"

namespace nanochat {

class Communicator;

/// Runs base-train with `args` on this rank (comm->world_size() ranks in all). `hooks`: the
/// end-to-end tests' faults and data-stream switch (test_fault.h); NANOCHAT_TEST_FAULT is read
/// into hooks.fault here.
/// Output files go to base_dir()/base_checkpoints/<model_tag or d<depth>>/.
/// Throws nanochat::Error for user errors (missing tokenizer/data, bad flags, bad resume step).
void run_base_train(const BaseTrainArgs& args, Communicator& comm, TrainTestHooks hooks = {});

}  // namespace nanochat
