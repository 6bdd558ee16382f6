// `nanochat base-train`: nanochat's scripts/base_train.py flags (docs/nanochat.md 3.1), one rank of a job.
// Started alone it trains in one process; under `nanochat run` (or torchrun-style environment
// variables RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) it is one rank of a data-parallel job.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "nanochat/cli/commands.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/train/base_train.h"
#include "nanochat/train/test_fault.h"

namespace nanochat::cli {

/// Adds nanochat's base_train flags to a CLI11 (sub)command, writing into `a`.
void add_base_train_flags(CLI::App* c, BaseTrainArgs& a) {
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // like argparse
  c->add_option("--run", a.run, "wandb run name (accepted for compatibility; logs go to metrics.jsonl)")
      ->capture_default_str();
  c->add_option("--device-type", a.device_type, "cuda|cpu|mps; only cpu runs here")->capture_default_str();
  c->add_flag("--fp8", a.fp8, "FP8 Linear layers (CUDA only: ignored with a warning)");
  c->add_option("--fp8-recipe", a.fp8_recipe, "rowwise|tensorwise (ignored on CPU)")->capture_default_str();
  c->add_option("--depth", a.depth, "number of layers (the single size dial)")->capture_default_str();
  c->add_option("--aspect-ratio", a.aspect_ratio, "model_dim ~= depth x aspect_ratio")->capture_default_str();
  c->add_option("--head-dim", a.head_dim, "target head dimension")->capture_default_str();
  c->add_option("--max-seq-len", a.max_seq_len, "context length T")->capture_default_str();
  c->add_option("--window-pattern", a.window_pattern, "S/L attention windows tiled over layers (S = quarter context)")
      ->capture_default_str();
  c->add_option("--num-iterations", a.num_iterations, "explicit number of steps (-1 = off)")->capture_default_str();
  c->add_option("--target-flops", a.target_flops, "derive steps from a FLOPs budget (-1 = off)")->capture_default_str();
  c->add_option("--target-param-data-ratio", a.target_param_data_ratio, "tokens = ratio x scaling params (-1 = off)")
      ->capture_default_str();
  c->add_option("--device-batch-size", a.device_batch_size, "rows B per micro-step per rank")->capture_default_str();
  c->add_option("--total-batch-size", a.total_batch_size, "tokens per optimizer step over all ranks (-1 = auto)")
      ->capture_default_str();
  c->add_option("--embedding-lr", a.embedding_lr, "AdamW lr for wte (value embeds get half)")->capture_default_str();
  c->add_option("--unembedding-lr", a.unembedding_lr, "AdamW lr for lm_head")->capture_default_str();
  c->add_option("--weight-decay", a.weight_decay, "Muon cautious weight decay (before scaling)")->capture_default_str();
  c->add_option("--matrix-lr", a.matrix_lr, "Muon lr")->capture_default_str();
  c->add_option("--scalar-lr", a.scalar_lr, "x0 lambdas lr (resid lambdas get x0.01)")->capture_default_str();
  c->add_option("--warmup-steps", a.warmup_steps, "linear LR warmup steps")->capture_default_str();
  c->add_option("--warmdown-ratio", a.warmdown_ratio, "fraction of steps in the linear warmdown")
      ->capture_default_str();
  c->add_option("--final-lr-frac", a.final_lr_frac, "LR multiplier at the end")->capture_default_str();
  c->add_option("--resume-from-step", a.resume_from_step, "resume from a saved step (-1 = off)")->capture_default_str();
  c->add_option("--eval-every", a.eval_every, "val bpb every N steps (-1 = off)")->capture_default_str();
  c->add_option("--eval-tokens", a.eval_tokens, "tokens per val evaluation")->capture_default_str();
  c->add_option("--core-metric-every", a.core_metric_every,
                "CORE metric interval (-1 = off; not supported on this build)")
      ->capture_default_str();
  c->add_option("--core-metric-max-per-task", a.core_metric_max_per_task, "examples per CORE task")
      ->capture_default_str();
  c->add_option("--sample-every", a.sample_every, "greedy samples every N steps (-1 = off)")->capture_default_str();
  c->add_option("--save-every", a.save_every, "checkpoint every N steps (-1 = only at the end)")->capture_default_str();
  c->add_option("--model-tag", a.model_tag, "checkpoint directory name (default d<depth>)");
  c->add_option("--threads", a.threads, "OpenMP threads of this rank (0 = OMP_NUM_THREADS or all cores)")
      ->capture_default_str();
  c->add_option("--seed", a.seed, "initialisation seed")->capture_default_str();
  c->add_flag("--recompute-mlp", a.recompute_mlp,
              "recompute each layer's MLP hidden activation in the backward instead of keeping it: about (depth-1) x B "
              "x T x 16 x model_dim bytes less memory for 6-8% more step time (measured at d6b32; same results)");
  c->add_flag("--profile", a.profile,
              "print where the training steps' time went per op family (GEMMs by layer type, attention, lm_head + "
              "loss, norms, optimizer, data) at the end");
  c->add_flag("--skip-data-check", a.skip_data_check,
              "start without checking every page of the train/val shards (by default shards not checked before, or "
              "changed since, are decoded in full at start-up and a corrupt one stops the run before step 0)");
  c->add_option("--balance", a.balance,
                "how each step's rows are dealt to the ranks: speed = in proportion to each rank's measured speed, "
                "re-planned as speeds drift (a slower machine adds its speed instead of holding the others back); "
                "even = the same share for every rank. The result does not depend on it")
      ->capture_default_str()
      ->check(CLI::IsMember({"speed", "even"}));
  c->add_flag("--local-data", a.local_data,
              "with several ranks, every node reads its own copy of the shards and the tokenizer (same content, any "
              "path) instead of getting its rows and the tokenizer from node 0, which by default reads the data "
              "once and sends each rank its rows; workers then need nothing but the program");
  c->add_option("--dtype", a.dtype,
                "number format of the matrix products: float32, or bfloat16 = nanochat's GPU numerics (bf16 "
                "operands with fp32 accumulation for every Linear and the lm_head; fp32 weights, optimizer state, "
                "norms, softmax and loss); bfloat16 needs a CPU with AVX512_BF16 or AMX and is refused elsewhere")
      ->capture_default_str();
  c->add_option("--check-replicas-every", a.check_replicas_every,
                "compare the ranks' copies of the parameters (a CRC32 per tensor) every N steps and at every save; "
                "a difference stops the job naming the tensor and the rank (0 = never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--copy-state-every", a.copy_state_every,
                "with several ranks, node 0 keeps in memory a copy of the whole job state (the weights and every "
                "rank's optimizer shard, sent to it) every N steps; when a node leaves the job (killed, frozen, cut "
                "off) node 0 saves that copy, so at most N steps are lost instead of those since the last "
                "--save-every checkpoint (1 = none; 0 = no copy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--sync", a.sync,
                "how the nodes keep one model: zero2 = every step (the gradients' reduce-scatter and the weights' "
                "all-gather, about the model's size in fp32 over each node's link per step: the LAN's mode); "
                "diloco = each node trains alone for --sync-every steps, then the nodes average their change and "
                "take an outer Nesterov step (DiLoCo): about the model's size per round, for slow links")
      ->capture_default_str()
      ->check(CLI::IsMember({"zero2", "diloco"}));
  c->add_option("--sync-every", a.sync_every, "--sync diloco: inner steps per round (H)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--outer-lr", a.outer_lr,
                "--sync diloco: the outer step's learning rate (1 with --outer-momentum 0 = plain averaging)")
      ->capture_default_str();
  c->add_option("--outer-momentum", a.outer_momentum,
                "--sync diloco: the outer step's Nesterov momentum (the DiLoCo paper's 0.9 and --outer-lr 0.7 are "
                "made for hundreds of rounds; over tens of rounds --outer-lr 1 --outer-momentum 0.5 measured better, "
                "docs/multi-machine.md)")
      ->capture_default_str();
  c->add_option("--sync-dtype", a.sync_dtype,
                "--sync diloco: the numbers each node sends its change in: float32, bfloat16 (half the bytes) or "
                "int8 (a quarter, one scale per 256 numbers)")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "bfloat16", "int8"}));
  c->add_option("--outer-overlap", a.outer_overlap,
                "--sync diloco: K steps the nodes train on while the exchange travels, then apply it keeping those "
                "steps' progress (0 = wait for it at each boundary; K < --sync-every): hides a slow link behind K "
                "steps; rounds that end in an evaluation, sample or save still wait")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

/// The hidden test-only flags (train/test_fault.h TrainTestHooks).
void add_train_test_hook_flags(CLI::App* c, TrainTestHooks& h) {
  c->add_option("--fault-inject", h.fault_inject, "tests only: final-eval")->group("");  // hidden
}

void register_base_train(CLI::App& app) {
  auto args = std::make_shared<BaseTrainArgs>();
  auto hooks = std::make_shared<TrainTestHooks>();
  CLI::App* c = app.add_subcommand("base-train", "pretrain a nanochat GPT (nanochat scripts/base_train.py)");
  add_base_train_flags(c, *args);
  add_train_test_hook_flags(c, *hooks);
  c->callback([args, hooks] {
    // A node joining a running elastic job has no communicator until rank 0 admits it.
    if (const char* j = std::getenv("NANOCHAT_JOIN"); j && std::string(j) == "1")
      return run_base_train_joining(*args, *hooks);
    // World size 1 unless started by `nanochat run` or with torchrun's variables (RANK, ...).
    std::unique_ptr<Communicator> comm = cluster::make_communicator_from_env();
    run_base_train(*args, *comm, *hooks);
  });
}

}  // namespace nanochat::cli
