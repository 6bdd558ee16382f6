#pragma once
// base-train's entry (nanochat scripts/base_train.py on this engine): refuses what it cannot run,
// applies --threads, and chooses the job's membership once (train/membership.h): a job of fixed
// ranks runs run_base_train_job (train/trainer.h) once; an elastic job (`nanochat run --nnodes
// MIN:MAX`) runs it once per generation of its ranks (train/elastic.h).
#include "nanochat/plan/plan.h"
#include "nanochat/train/test_fault.h"

namespace nanochat {

class Communicator;

/// Runs base-train with `args` on this rank (comm->world_size() ranks in all). `hooks`: the
/// end-to-end tests' faults and data-stream switch (test_fault.h); NANOCHAT_TEST_FAULT is read
/// into hooks.fault here.
/// Output files go to base_dir()/base_checkpoints/<model_tag or d<depth>>/.
/// Throws nanochat::Error for user errors (missing tokenizer/data, bad flags, bad resume step).
void run_base_train(const BaseTrainArgs& args, Communicator& comm, TrainTestHooks hooks = {});

/// base-train on a node that joins a running elastic job (`nanochat run` started this rank with
/// NANOCHAT_JOIN=1): no communicator yet; rank 0 admits it at a step boundary (train/elastic.h).
void run_base_train_joining(const BaseTrainArgs& args, TrainTestHooks hooks = {});

}  // namespace nanochat
