#include "nanochat/train/base_train.h"

#include <memory>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/threads.h"
#include "nanochat/kernels/gemm_bf16.h"
#include "nanochat/train/elastic.h"
#include "nanochat/train/membership.h"
#include "nanochat/train/trainer.h"

namespace nanochat {

namespace {

// Refuses what base-train cannot run, applies --threads; the fault injector of the run.
std::unique_ptr<FaultInjector> prepare_base_train(const BaseTrainArgs& a, bool master, TrainTestHooks& hooks) {
  if (!a.device_type.empty() && a.device_type != "cpu")
    fail("--device-type ", a.device_type,
         ": nanochat.cpp trains on CPUs only; use --device-type cpu or leave it unset");
  if (a.fp8) print_line_if(master, "WARNING: --fp8 is CUDA-only in nanochat; ignored on CPU (training runs in fp32)");
  if (a.threads > 0) set_num_threads(a.threads);
  if (parse_compute_dtype(a.dtype, "--dtype") == ComputeDtype::BFloat16) require_native_bf16("--dtype bfloat16");
  hooks.fault = test_fault_from_env();
  return make_fault_injector(hooks);
}

// base-train's elastic job: run_base_train_job once per generation of the job's ranks, node 0
// keeping a copy of the job's state (train/elastic.h).
ElasticJob base_train_elastic_job(const BaseTrainArgs& args, const FaultInjector& faults, int min_world, bool master) {
  BaseTrainArgs a = args;
  a.copy_state_every = elastic_copy_every(a.copy_state_every, a.sync == "diloco", a.sync_every, min_world, master);
  ElasticJob job;
  job.checkpoint_dir = [dir = base_checkpoint_dir(a, base_dir())] { return dir; };
  job.save_every = a.save_every;
  job.first_resume_step = a.resume_from_step;
  job.run = [a, &faults](Communicator& comm, Membership& membership, int64_t resume_from_step) {
    BaseTrainArgs g = a;
    g.resume_from_step = resume_from_step;
    run_base_train_job(g, comm, faults, membership);
  };
  return job;
}

}  // namespace

void run_base_train_joining(const BaseTrainArgs& a, TrainTestHooks hooks) {
  const std::unique_ptr<FaultInjector> faults = prepare_base_train(a, false, hooks);
  const int min_world = elastic_min_world_size();
  if (min_world <= 0)
    fail("NANOCHAT_JOIN=1 is for the ranks of a node that joins an elastic job (nanochat run --nnodes MIN:MAX)");
  run_elastic_joining(base_train_elastic_job(a, *faults, min_world, false), min_world);
}

void run_base_train(const BaseTrainArgs& a, Communicator& comm, TrainTestHooks hooks) {
  const std::unique_ptr<FaultInjector> faults = prepare_base_train(a, comm.rank() == 0, hooks);
  if (const int min_world = elastic_min_world_size(); min_world > 0 && elastic_job(comm)) {
    run_elastic(base_train_elastic_job(a, *faults, min_world, comm.rank() == 0), comm, min_world);
  } else {
    FixedMembership fixed;
    run_base_train_job(a, comm, *faults, fixed);
  }
}

}  // namespace nanochat
