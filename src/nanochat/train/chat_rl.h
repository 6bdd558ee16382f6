#pragma once
// Reinforcement learning on a task's rewards: nanochat scripts/chat_rl.py (commit 92d63d4), its
// simplified GRPO, which is REINFORCE with a mean baseline, on policy, with token-level
// normalisation:
//
// Rollout (sample_rollout): the example's conversation is primed for the answer
// (render_for_completion, P tokens); the engine (calculator on) samples num_samples answers,
// device_batch_size rows per generate() call, each call with its own seed. Each sample's sequence
// is prompt + answer (the final <|assistant_end|> / <|bos|> is not part of it), its mask 0 over the
// prompt and over tool output the engine forced, 1 over sampled tokens. reward = Task::reward of the
// decoded answer; advantage = reward - mean(rewards of the example).
//
// Loss of one pass (policy_gradient_backward): rows b of the pass, inputs seq_b[:-1], targets
// seq_b[1:] with -1 where mask_b[1:] is 0, logp_bt = -cross_entropy(logits_bt, target_bt);
//   loss = -sum_{b,t valid} A_b * logp_bt / (max(1, N_valid) * num_passes * examples_per_step)
// with N_valid the valid targets of the pass (all its rows). Its gradient is accumulated into the
// model's gradients; each row runs as its own forward/backward with
// loss_scale = A_b * n_b / (N_valid * num_passes * examples_per_step) on the row's mean loss
// (n_b its valid targets), which is the same sum (nanochat pads the pass's rows to one length with
// ignored targets; the causal model makes the padding irrelevant). Rows with A_b = 0 or n_b = 0
// add nothing and are skipped.
//
// Step (run_chat_rl): step s trains on the E = examples_per_step train examples s*E .. s*E+E-1
// (modulo the task's size), the set nanochat's ranks take together at that step (its rank r
// takes r, r + W, ...). They are dealt to the ranks as base-train deals rows (train/balance.h):
// contiguous ranges, rank 0 first, evenly at the first step and then by each rank's measured
// examples per second (the sampling dominates), so a slower machine adds its speed instead of
// holding the step back; any E >= 1 works at any world size (nanochat asks for a multiple of W).
// Each example's passes are accumulated with the loss above, then train/rl_sync.h sums the ranks'
// gradients (the mean over the step's examples whatever the split) and runs MuonAdamW (nanochat's setup_optimizer
// groups with chat_rl's learning rates; Muon momentum 0.95 and weight decay --weight-decay, both
// fixed) at lr = initial_lr * init_lr_frac * (1 - step / num_steps). num_steps = (train size / examples_per_step) *
// num_epochs (nanochat's), or opt.num_steps when set (ours, for short runs; the learning rate ramps down over it
// likewise). Every eval_every steps (step 0 included) pass@k for k = 1..device_batch_size on the first eval_examples of
// the validation task (device_batch_size samples per problem at temperature 1.0, top-k 50, 256 new tokens, seed 42;
// nanochat's run_gsm8k_eval). Every save_every steps (not step 0) and at the last step the
// weights after the step go to checkpoint_dir as model_<step>.safetensors and meta_<step>.json (as
// nanochat names them), with every rank's optimizer shard (nanochat saves none; here a run
// continues from any of them at any world size: resume_from_step) and the completion marker of
// checkpoint/checkpoint.h, rank 0 writing (checkpoint/loop_checkpoint.h save_checkpoint).
// checkpoint_dir/metrics.jsonl records each step's mean reward, mean sequence length, lrm and
// examples per rank, each evaluation's pass@k, and the job's membership changes.
//
// Membership (train/membership.h), as base-train's loop: a rank lost in a collective stops the run
// naming the step and what node 0 saved, unless the job is elastic (`nanochat run --nnodes
// MIN:MAX`, train/elastic.h): node 0 then writes its copy of the job's state (kept every
// copy_state_every steps) and the ranks that remain go on from it; ranks that ask to join are
// admitted after a step, from node 0's state of that step. A step's rollouts depend on its number,
// its examples and the weights only, so a step done again by other ranks samples the same.
//
// Sampling draws from this engine's generator (seeds derived from step, example and call), not
// torch's, so rollouts are not nanochat's token for token; the loss of given rollouts is
// (tests/train/chat_rl_test.cpp against the formula above in PyTorch).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/checkpoint/faults.h"
#include "nanochat/engine/engine.h"
#include "nanochat/eval/chat_eval.h"
#include "nanochat/plan/balance_mode.h"
#include "nanochat/tasks/task.h"

namespace nanochat {

class Communicator;
class GPT;
class Membership;
class Tokenizer;

/// One example's samples.
struct RlRollout {
  int64_t example = 0;                          ///< index in the task
  int64_t prefix_length = 0;                    ///< prompt tokens P
  std::vector<std::vector<int32_t>> sequences;  ///< per sample: prompt + answer
  std::vector<std::vector<uint8_t>> masks;      ///< per sample, per token: 1 sampled, 0 prompt or forced
  std::vector<double> rewards;                  ///< per sample: Task::reward of the decoded answer
  std::vector<double> advantages;               ///< per sample: reward - mean(rewards)
};

/// Settings of the rollouts (chat_rl's flags).
struct RolloutOptions {
  int num_samples = 16;       ///< --num-samples: samples per example
  int device_batch_size = 8;  ///< --device-batch-size: rows per generate() call; divides num_samples
  int max_new_tokens = 256;   ///< --max-new-tokens
  double temperature = 1.0;   ///< --temperature
  int top_k = 50;             ///< --top-k (0 = all)
  uint64_t seed = 0;          ///< mixed into every call's seed
};

/// The seed of generate() call `call` of `example` at optimizer step `step` (a 64-bit mix of the
/// four numbers; different for any two (step, example, call)).
uint64_t rollout_seed(uint64_t base, int64_t step, int64_t example, int64_t call);

/// Samples and scores one example (layout above). Throws nanochat::Error when num_samples is not a
/// positive multiple of device_batch_size, and from the task and the engine.
RlRollout sample_rollout(Engine& engine, const tasks::Task& task, int64_t example, int64_t step,
                         const RolloutOptions& opt);

/// The policy-gradient loss of rows [row_begin, row_end) of `r` (one pass), its gradient
/// accumulated into model.grad_data() (loss formula above; `passes_times_examples` =
/// num_passes * examples_per_step: nanochat divides by its examples per rank and averages the W
/// ranks' gradients, which is the same). Returns the loss. Throws nanochat::Error for an empty or
/// out-of-range row range, a sequence shorter than 2 tokens or longer than the model's rotary table,
/// or passes_times_examples < 1.
double policy_gradient_backward(GPT& model, const RlRollout& r, size_t row_begin, size_t row_end,
                                int64_t passes_times_examples);

/// Settings of a run (nanochat chat_rl's flags and defaults).
struct ChatRlOptions {
  RolloutOptions rollout;
  int num_epochs = 1;
  int64_t num_steps = -1;      ///< > 0: run this many steps instead of (train size / examples_per_step) * num_epochs
  int examples_per_step = 16;  ///< over all ranks (any world size)
  BalanceMode balance = BalanceMode::Speed;  ///< --balance (even: the same number per rank, give or take one)
  const FaultInjector* faults = nullptr;     ///< the tests' hooks (after each example); null = none
  float embedding_lr = 0.2f, unembedding_lr = 0.004f, matrix_lr = 0.02f, scalar_lr = 0.5f;
  float weight_decay = 0.0f;  ///< Muon's
  float init_lr_frac = 0.05f;
  int eval_every = 60;
  int64_t eval_examples = 400;
  int save_every = 60;
  /// Node 0 keeps a copy of the job's state every N steps (an elastic job: a rank that leaves costs
  /// at most the steps since it); 0 = none.
  int64_t copy_state_every = 0;
  /// >= 0: continue after checkpoint S of checkpoint_dir (its weights and optimizer state; the
  /// metrics records after S are dropped), at step S + 1; -1 = from the start.
  int64_t resume_from_step = -1;
  std::string checkpoint_dir;  ///< "" = save nothing
  nlohmann::json meta;  ///< written into meta_<step>.json with the loop state ("model_config": the model's when absent)
};

/// What a step did, for the log line and the tests.
struct ChatRlStep {
  int64_t step = 0, num_steps = 0;
  double mean_reward = 0;            ///< mean over this step's examples (all ranks)
  double mean_sequence_length = 0;   ///< tokens per sample, prompt included (all ranks' samples)
  std::vector<int64_t> split;        ///< examples per rank in this step
  std::vector<double> rank_seconds;  ///< each rank's sampling + backward seconds in this step
  double lrm = 0;                    ///< 1 - step / num_steps
  double loss = 0;                   ///< sum of this rank's pass losses
};

struct ChatRlCallbacks {
  std::function<void(const ChatRlStep&)> on_step;
  std::function<void(int64_t step, const std::vector<double>& pass_at_k)> on_eval;
  std::function<void(int64_t step, const std::string& dir)> on_save;  ///< rank 0 after a save
};

/// The whole run (layout above) on `model` (its weights are updated in place). Every rank must
/// call together with the same tasks and options; `membership`: the job's (null: a fixed group,
/// FixedMembership). Throws nanochat::Error when the train task has fewer examples than
/// examples_per_step (x num_epochs leaves no step), examples_per_step < 1, num_samples is not a
/// multiple of device_batch_size, the resumed checkpoint is the last step or lacks optimizer
/// state, a rank is lost (fixed membership), or from the parts above and the checkpoint writer; an
/// elastic membership's MembershipChange passes through.
void run_chat_rl(GPT& model, const Tokenizer& tok, const tasks::Task& train, const tasks::Task& val,
                 const ChatRlOptions& opt, Communicator& comm, const ChatRlCallbacks& cb = {},
                 Membership* membership = nullptr);

}  // namespace nanochat
