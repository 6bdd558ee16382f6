#include "nanochat/train/job_layout.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "nanochat/cluster/agree.h"
#include "nanochat/cluster/startup.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/data/manifest.h"
#include "nanochat/tokenizer/tokenizer.h"

using json = nlohmann::json;

namespace nanochat {

json args_to_json(const BaseTrainArgs& a) {
  json j{{"run", a.run},
         {"device_type", a.device_type},
         {"fp8", a.fp8},
         {"fp8_recipe", a.fp8_recipe},
         {"depth", a.depth},
         {"aspect_ratio", a.aspect_ratio},
         {"head_dim", a.head_dim},
         {"max_seq_len", a.max_seq_len},
         {"window_pattern", a.window_pattern},
         {"num_iterations", a.num_iterations},
         {"target_flops", a.target_flops},
         {"target_param_data_ratio", a.target_param_data_ratio},
         {"device_batch_size", a.device_batch_size},
         {"total_batch_size", a.total_batch_size},
         {"embedding_lr", a.embedding_lr},
         {"unembedding_lr", a.unembedding_lr},
         {"weight_decay", a.weight_decay},
         {"matrix_lr", a.matrix_lr},
         {"scalar_lr", a.scalar_lr},
         {"warmup_steps", a.warmup_steps},
         {"warmdown_ratio", a.warmdown_ratio},
         {"final_lr_frac", a.final_lr_frac},
         {"resume_from_step", a.resume_from_step},
         {"eval_every", a.eval_every},
         {"eval_tokens", a.eval_tokens},
         {"core_metric_every", a.core_metric_every},
         {"core_metric_max_per_task", a.core_metric_max_per_task},
         {"sample_every", a.sample_every},
         {"save_every", a.save_every},
         {"model_tag", a.model_tag},
         {"threads", a.threads},
         {"seed", a.seed},
         {"check_replicas_every", a.check_replicas_every},
         {"balance", a.balance},
         {"local_data", a.local_data},
         {"dtype", a.dtype},
         {"copy_state_every", a.copy_state_every}};
  if (a.sync != "zero2") {  // a ZeRO-2 run's meta stays as it was
    j["sync"] = a.sync;
    j["sync_every"] = a.sync_every;
    j["outer_lr"] = a.outer_lr;
    j["outer_momentum"] = a.outer_momentum;
    j["sync_dtype"] = a.sync_dtype;
    if (a.outer_overlap != 0) j["outer_overlap"] = a.outer_overlap;
  }
  return j;
}

namespace {

// Startup agreement (docs/architecture.md 3.10): one clear error on every rank if anything differs.
void agree_on_the_job(Communicator& comm, const json& flags, const Tokenizer& tok, const TrainPlan& plan) {
  const bool local_data = plan.data == DataSource::LocalCopies;
  json user = flags;
  user.erase("threads");            // nodes may use different thread counts
  user.erase("device_batch_size");  // and micro-batch sizes (a node with less memory runs smaller ones)
  std::map<std::string, std::string> facts = {
      {"model config", plan.model.to_json().dump()},
      {"batch settings", str_cat("T=", plan.T, " total=", plan.total_batch_size)},
      {"tokenizer hash", std::to_string(tok.hash())},
      {plan.command + " flags", user.dump()}};
  if (local_data) {
    // The shards' names, sizes, row groups and CRC-32s, never the directory's path (nodes may keep
    // their copies anywhere). Hashing a new corpus may take a while: the others wait at a barrier
    // with a deadline that names the slow rank, not at the collectives of cluster::agree.
    facts["data manifest"] = data::shard_manifest(data_dir());
    cluster::startup_barrier(comm, "data manifest");
  }
  cluster::agree(comm, facts);
  if (comm.rank() == 0) {
    std::printf("All %d ranks agree on build, model, batch, tokenizer, %s\n", comm.world_size(),
                local_data ? "data and flags" : "and flags; node 0 serves the data");
    std::fflush(stdout);
  }
}

// Every rank's --device-batch-size, in rank order.
std::vector<int> gather_device_batches(Communicator& comm, int B) { return all_gather_value<int>(comm, B); }

}  // namespace

JobLayout agree_on_job_layout(Communicator& comm, const BaseTrainArgs& a, const TrainPlan& plan, const Tokenizer& tok) {
  return agree_on_job_layout(comm, args_to_json(a), plan, tok);
}

JobLayout agree_on_job_layout(Communicator& comm, const json& flags, const TrainPlan& plan, const Tokenizer& tok) {
  // Before the first collective: a rank slow to start is waited for (NANOCHAT_STARTUP_TIMEOUT) and
  // named, instead of failing the others at the collective timeout (cluster/startup.h).
  cluster::startup_barrier(comm, "train");
  if (comm.world_size() > 1) agree_on_the_job(comm, flags, tok, plan);
  JobLayout l;
  l.rank = comm.rank();
  l.world_size = comm.world_size();
  l.device_batches = gather_device_batches(comm, plan.B);
  l.rows_per_step = plan.rows_per_step();
  l.eval_B = *std::min_element(l.device_batches.begin(), l.device_batches.end());
  l.eval_steps = plan.eval_steps_for(l.eval_B);
  return l;
}

}  // namespace nanochat
