#pragma once
// How long the road will take on this machine, before it starts: the base model is built and a
// few of its training steps timed on random tokens (forward, backward, MuonAdamW; the threads the
// stages will use), and each stage's time is worked out from that speed and its flags:
//   training (base-train, chat-sft): steps x (micro-batches x measured micro-batch time + the
//     optimizer's), its evaluations at the measured forward's rate, a start-up;
//   evaluations and generation (base-eval, chat-eval, chat-rl): tokens forwarded at that rate,
//     generated tokens at a measured decode time each;
//   data and tokenizer: the download (online) or corpus build, characters at a fixed rate.
// --hours H picks the depth: the largest whose road (base-train at nanochat's tokens-to-params
// ratio, plus the other stages) fits H (road/plan.h).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nanochat/road/stages.h"

namespace nanochat::road {

/// The measured speed of one model on this machine.
struct SpeedProbe {
  int depth = 0;
  int64_t params = 0;
  int B = 0, T = 0;
  double micro_batch_s = 0;    ///< forward + backward of B x T tokens
  double optimizer_s = 0;      ///< one MuonAdamW step
  double forward_s = 0;        ///< an evaluation's forward (the loss, no gradients) of B x T tokens
  double decode_token_s = 0;   ///< one generated token of one row (a KV-cache forward of one position)
  double decode8_token_s = 0;  ///< one generated token of each of 8 rows together
  double train_tok_per_s(int64_t total_batch) const;
};

/// Builds the model of the base-train command `base_train` (its flags; vocab `vocab`), times
/// `steps` steps after one warm-up, with `threads` OpenMP threads (0 = as now).
SpeedProbe probe_speed(const std::vector<std::string>& base_train, int vocab, int steps = 2);

/// The nodes of a job measured together (`nanochat run ... speedrun`, cli/road_job.h): its training
/// stages (base-train, chat-sft, on every node) run at `speedup` x the probe's rate, and so do
/// chat-rl's rollouts (its examples are dealt by speed as rows are), each step also exchanging the
/// model (`exchange_s_per_param` x its parameters: ZeRO-2's reduce-scatter and
/// all-gather, timed as one all-reduce), and each launch costs `launch_s` (the nodes' rendezvous).
struct JobSpeed {
  double speedup = 1;
  double exchange_s_per_param = 0;
  double launch_s = 0;
};

/// The job's speed from its ranks' probes (`ranks`, measured at once, one per rank; `exchange_s`:
/// their all-reduce of `params` floats, the slowest rank's) against `alone` (node 0 measured
/// alone), at base-train's batch of `total_batch` tokens: the ranks' micro-batch rates add (the
/// rows are dealt by speed), the optimizer is sharded over them.
JobSpeed job_speed(const SpeedProbe& alone, const std::vector<SpeedProbe>& ranks, double exchange_s,
                   int64_t total_batch, double launch_s);

/// Seconds per stage id, from the probe and the stages' flags (`job`: the training stages' speed
/// as a job of nodes). `data_ready`: the shards are there already.
std::map<std::string, double> estimate_stages(const std::vector<Stage>& road, const SpeedProbe& p, bool data_ready,
                                              const JobSpeed& job = {});

/// The vocab size a road's tok-train makes (its --vocab-size, else 32768).
int road_vocab_size(const std::vector<Stage>& road);

/// base-train's steps and tokens per step from its flags (--num-iterations, else nanochat's ratio rule).
struct TrainSize {
  int64_t steps = 0, total_batch = 0, params = 0, scaling_params = 0;
  int depth = 0, width = 0;
};
TrainSize base_train_size(const std::vector<std::string>& base_train, int vocab);

}  // namespace nanochat::road

namespace nanochat::road {

/// `p` carried over to another model of the same shapes of batch: times scaled by the flops per
/// token (forward, backward, decode) and by the parameters (the optimizer).
SpeedProbe scale_probe(const SpeedProbe& p, const std::vector<std::string>& from_base_train,
                       const std::vector<std::string>& to_base_train, int vocab);

/// --hours: the largest depth (2 .. 32) whose road fits `seconds`, base-train running nanochat's
/// tokens-to-parameters rule (--num-iterations -1, its --target-param-data-ratio) with its
/// evaluations and saves spaced over the run. `road_for(depth)` makes the road of a depth.
struct DepthChoice {
  int depth = 0;                              ///< 0 = none fits
  double seconds = 0;                         ///< its road's estimate
  std::vector<std::pair<int, double>> tried;  ///< (depth, road seconds) of every depth looked at
};
DepthChoice choose_depth(double seconds, const SpeedProbe& probe, const std::vector<std::string>& probed_base_train,
                         const std::function<std::vector<Stage>(int)>& road_for, bool data_ready,
                         const JobSpeed& job = {});

/// The base-train overrides of a depth chosen for a time budget: --depth, --num-iterations -1 and
/// evaluations / saves about every tenth of its steps.
std::vector<FlagOverride> depth_overrides(int depth, int64_t steps);

}  // namespace nanochat::road
