// `nanochat chat-sft`: nanochat's scripts/chat_sft.py flags, one rank of a job (train/sft.h).
// Started alone it trains in one process; under `nanochat run` it is one rank of a data-parallel job,
// like base-train.
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

#include "nanochat/cli/commands.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/train/sft.h"

namespace nanochat::cli {

void add_train_test_hook_flags(CLI::App* c, TrainTestHooks& h);  // cli/base_train.cpp

void register_chat_sft(CLI::App& app) {
  auto a = std::make_shared<SftArgs>();
  auto hooks = std::make_shared<TrainTestHooks>();
  CLI::App* c = app.add_subcommand(
      "chat-sft", "supervised fine-tuning of a base checkpoint on conversations (nanochat scripts/chat_sft.py)");
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // like argparse
  const char* inherit = " (default: inherit from the base checkpoint)";
  c->add_option("--run", a->run, "wandb run name (accepted for compatibility; logs go to metrics.jsonl)")
      ->capture_default_str();
  c->add_option("--device-type", a->device_type, "cuda|cpu|mps; only cpu runs here");
  c->add_option("--model-tag", a->model_tag,
                "base checkpoint tag under base_checkpoints/ (default: the largest d<N>); also the output tag");
  c->add_option("--model-step", a->model_step, "base checkpoint step (default: the last complete one)");
  c->add_option("--load-optimizer", a->load_optimizer,
                "1: start from the base checkpoint's optimizer moments (lrs reset), 0: a fresh optimizer")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 1}));
  c->add_option("--num-iterations", a->num_iterations,
                "stop at this step count as nanochat does (it trains N-1 steps), -1 = one epoch of the data")
      ->capture_default_str();
  c->add_option("--max-seq-len", a->max_seq_len, std::string("context length T") + inherit);
  c->add_option("--device-batch-size", a->device_batch_size, std::string("rows per micro-batch per rank") + inherit);
  c->add_option("--total-batch-size", a->total_batch_size, std::string("tokens per step, all ranks") + inherit);
  c->add_option("--embedding-lr", a->embedding_lr, std::string("AdamW lr of wte") + inherit);
  c->add_option("--unembedding-lr", a->unembedding_lr, std::string("AdamW lr of lm_head") + inherit);
  c->add_option("--matrix-lr", a->matrix_lr, std::string("Muon lr") + inherit);
  c->add_option("--init-lr-frac", a->init_lr_frac, "initial lr as a fraction of the base lr")->capture_default_str();
  c->add_option("--warmup-ratio", a->warmup_ratio, "fraction of the progress in the lr warmup")->capture_default_str();
  c->add_option("--warmdown-ratio", a->warmdown_ratio, "fraction of the progress in the lr warmdown")
      ->capture_default_str();
  c->add_option("--final-lr-frac", a->final_lr_frac, "lr multiplier at the end")->capture_default_str();
  c->add_option("--eval-every", a->eval_every, "val bpb every N steps (-1 = off)")->capture_default_str();
  c->add_option("--eval-tokens", a->eval_tokens, "tokens per val evaluation")->capture_default_str();
  c->add_option("--chatcore-every", a->chatcore_every,
                "ChatCORE every N steps and at the last (-1 = off; every rank needs the tasks' files)")
      ->capture_default_str();
  c->add_option("--chatcore-max-cat", a->chatcore_max_cat, "ChatCORE: problems per categorical task")
      ->capture_default_str();
  c->add_option("--chatcore-max-sample", a->chatcore_max_sample, "ChatCORE: problems per generative task")
      ->capture_default_str();
  c->add_option("--mmlu-epochs", a->mmlu_epochs, "epochs of MMLU in the mixture")->capture_default_str();
  c->add_option("--gsm8k-epochs", a->gsm8k_epochs, "epochs of GSM8K in the mixture")->capture_default_str();
  c->add_option("--train-jsonl", a->train_jsonl,
                "train on these conversation files instead of nanochat's mixture: one {\"messages\": [...]} per "
                "line; repeat the flag or separate files with commas")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("--val-jsonl", a->val_jsonl, "validation conversations for --train-jsonl (same format)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("--threads", a->threads, "OpenMP threads of this rank (0 = OMP_NUM_THREADS or all cores)")
      ->capture_default_str();
  c->add_option("--save-every", a->save_every, "also save every N steps (-1 = only at the end, as nanochat)")
      ->capture_default_str();
  c->add_option("--resume-from-step", a->resume_from_step,
                "continue an interrupted chat-sft from its own checkpoint at this step (same flags)")
      ->capture_default_str();
  c->add_option("--check-replicas-every", a->check_replicas_every,
                "compare the ranks' parameters every N steps and at every save (0 = never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--copy-state-every", a->copy_state_every,
                "with several ranks, node 0 keeps in memory a copy of the whole job state every N steps; when a node "
                "leaves the job node 0 saves that copy, so at most N steps are lost (0 = no copy; an elastic job, "
                "nanochat run --nnodes MIN:MAX, copies every 10 unless given)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--balance", a->balance, "how each step's rows are dealt to the ranks: speed or even")
      ->capture_default_str()
      ->check(CLI::IsMember({"speed", "even"}));
  c->add_flag("--local-data", a->local_data,
              "with several ranks, every node reads its own copy of the conversation files and tokenizer instead of "
              "getting its rows from node 0");
  c->add_flag("--profile", a->profile, "print where the steps' time went per op family at the end");
  add_train_test_hook_flags(c, *hooks);
  c->callback([a, hooks] {
    // A node joining a running elastic job has no communicator until rank 0 admits it.
    if (const char* j = std::getenv("NANOCHAT_JOIN"); j && std::string(j) == "1")
      return run_chat_sft_joining(*a, *hooks);
    std::unique_ptr<Communicator> comm = cluster::make_communicator_from_env();
    run_chat_sft(*a, *comm, *hooks);
  });
}

}  // namespace nanochat::cli
