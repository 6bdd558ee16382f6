#include "nanochat/train/base_train.h"

#include <memory>

#include "nanochat/cluster/env.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
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

}  // namespace

void run_base_train_joining(const BaseTrainArgs& a, TrainTestHooks hooks) {
  const std::unique_ptr<FaultInjector> faults = prepare_base_train(a, false, hooks);
  const long min_world = cluster::env_int("NANOCHAT_MIN_WORLD_SIZE").value_or(0);
  if (min_world <= 0)
    fail("NANOCHAT_JOIN=1 is for the ranks of a node that joins an elastic job (nanochat run --nnodes MIN:MAX)");
  run_elastic_joining(a, *faults, static_cast<int>(min_world));
}

void run_base_train(const BaseTrainArgs& a, Communicator& comm, TrainTestHooks hooks) {
  const std::unique_ptr<FaultInjector> faults = prepare_base_train(a, comm.rank() == 0, hooks);
  const long min_world = cluster::env_int("NANOCHAT_MIN_WORLD_SIZE").value_or(0);  // nanochat run --nnodes MIN:MAX
  // an elastic job (node 0 may start alone: its launcher hosts the store others join through)
  const bool launched = cluster::env_int("NANOCHAT_STORE_HOSTED").value_or(0) == 1;
  if (min_world > 0 && (comm.world_size() > 1 || launched)) {
    run_elastic(a, comm, *faults, static_cast<int>(min_world));
  } else {
    FixedMembership fixed;
    run_base_train_job(a, comm, *faults, fixed);
  }
}

}  // namespace nanochat
