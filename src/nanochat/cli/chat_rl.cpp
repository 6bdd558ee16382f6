// `nanochat chat-rl`: nanochat scripts/chat_rl.py (train/chat_rl.h). Loads a chat-sft checkpoint
// (--model-tag, --model-step), runs RL on GSM8K's train split (or --task, e.g. the offline
// Arithmetic) with pass@k on its test split, and saves the weights to
// chatrl_checkpoints/<model tag, else d<depth>>/. Under `nanochat run` every rank loads the
// checkpoint from its own base folder, the examples are shared and the gradients averaged; rank 0
// prints and saves.
#include <cstdio>
#include <memory>
#include <string>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/cli/commands.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/report_log.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/model/gpt.h"
#include "nanochat/plan/balance_mode.h"
#include "nanochat/tasks/registry.h"
#include "nanochat/train/chat_rl.h"
#include "nanochat/train/test_fault.h"

namespace nanochat::cli {

namespace {
struct ChatRlArgs {
  std::string run = "dummy";
  std::string device_type;
  std::string model_tag;
  int64_t model_step = -1;
  std::string task = "GSM8K";
  ChatRlOptions opt;
  std::string balance = "speed";
  int threads = 0;
};

void run(ChatRlArgs a) {
  if (a.threads > 0) set_num_threads(a.threads);
  if (!a.device_type.empty() && a.device_type != "cpu")
    fail("--device-type ", a.device_type, ": this program runs on the CPU only (use cpu or leave it out)");
  a.opt.balance = parse_balance_mode(a.balance);
  std::unique_ptr<Communicator> comm = cluster::make_communicator_from_env();
  const bool main_rank = comm->rank() == 0;
  // the tests' slower machine (NANOCHAT_TEST_FAULT slow:<rank>:<factor>); none otherwise
  const std::unique_ptr<FaultInjector> faults = make_fault_injector(TrainTestHooks{"", test_fault_from_env()});
  a.opt.faults = faults.get();
  InferenceModel im = load_for_inference(CheckpointSource::Sft, a.model_tag, a.model_step);
  GPT& model = *im.lm.model;
  const tasks::TaskPtr train = tasks::open_task(a.task, "", "train");
  const tasks::TaskPtr val = tasks::open_task(a.task, "", "test");
  const std::string tag = a.model_tag.empty() ? "d" + std::to_string(model.config().n_layer) : a.model_tag;
  a.opt.checkpoint_dir = base_dir() + "/" + checkpoint_source_folder(CheckpointSource::Rl) + "/" + tag;
  a.opt.meta = im.lm.meta;
  a.opt.meta["model_config"] = model.config().to_json();
  a.opt.meta["chat_rl"] = {{"task", a.task},
                           {"source_step", im.lm.step},
                           {"num_samples", a.opt.rollout.num_samples},
                           {"examples_per_step", a.opt.examples_per_step},
                           {"max_new_tokens", a.opt.rollout.max_new_tokens},
                           {"temperature", a.opt.rollout.temperature},
                           {"top_k", a.opt.rollout.top_k},
                           {"init_lr_frac", a.opt.init_lr_frac}};
  const int64_t num_steps =
      a.opt.num_steps > 0 ? a.opt.num_steps : train->size() / std::max(a.opt.examples_per_step, 1) * a.opt.num_epochs;
  if (main_rank) {
    std::printf("chat-rl: sft model %s step %lld, %s (%lld train / %lld test problems), %d rank(s)\n",
                im.lm.tag.c_str(), static_cast<long long>(im.lm.step), a.task.c_str(),
                static_cast<long long>(train->size()), static_cast<long long>(val->size()), comm->world_size());
    std::printf("Calculated number of steps: %lld\n", static_cast<long long>(num_steps));
    std::printf("Total sequences per step: %d\n", a.opt.examples_per_step * a.opt.rollout.num_samples);
    if (comm->world_size() > 1)
      std::printf("Examples per rank: dealt by %s each step (the first evenly)\n",
                  a.opt.balance == BalanceMode::Speed ? "measured speed" : "count");
    else
      std::printf("Calculated examples per rank: %d\n", a.opt.examples_per_step);
    std::fflush(stdout);
  }
  ChatRlCallbacks cb;
  cb.on_eval = [&](int64_t step, const std::vector<double>& pk) {
    if (!main_rank) return;
    std::printf("Step %lld |", static_cast<long long>(step));
    for (size_t k = 0; k < pk.size(); ++k) std::printf("%s Pass@%zu: %.4f", k ? "," : "", k + 1, pk[k]);
    std::printf("\n");
    std::fflush(stdout);
  };
  cb.on_step = [&](const ChatRlStep& s) {
    if (!main_rank) return;
    std::string split;
    if (s.split.size() > 1) {
      split = " | examples per rank: ";
      for (size_t r = 0; r < s.split.size(); ++r) split += (r ? "/" : "") + std::to_string(s.split[r]);
      split += " | seconds per rank: ";
      char b[32];
      for (size_t r = 0; r < s.rank_seconds.size(); ++r) {
        std::snprintf(b, sizeof b, "%s%.2f", r ? "/" : "", s.rank_seconds[r]);
        split += b;
      }
    }
    std::printf("Step %lld/%lld | Average reward: %.4f | Average sequence length: %.2f | lrm: %.4f | loss: %.6f%s\n",
                static_cast<long long>(s.step), static_cast<long long>(s.num_steps), s.mean_reward,
                s.mean_sequence_length, s.lrm, s.loss, split.c_str());
    std::fflush(stdout);
  };
  cb.on_save = [&](int64_t step, const std::string& dir) {
    std::printf("Saved model checkpoint to %s (step %lld)\n", dir.c_str(), static_cast<long long>(step));
    std::fflush(stdout);
  };
  // The card's section: the last evaluation's pass@k and the mean reward of the run's steps.
  nlohmann::ordered_json card;
  card["model"] = im.lm.tag + " step " + std::to_string(im.lm.step) + " (sft)";
  card["task"] = a.task;
  card["steps"] = num_steps;
  card["ranks"] = comm->world_size();
  double reward_sum = 0;
  int64_t rewarded = 0;
  const auto on_eval = cb.on_eval;
  cb.on_eval = [&, on_eval](int64_t step, const std::vector<double>& pk) {
    on_eval(step, pk);
    card["pass@k step"] = step;
    card["pass@k"] = pk;
  };
  const auto on_step = cb.on_step;
  cb.on_step = [&, on_step](const ChatRlStep& s) {
    on_step(s);
    reward_sum += s.mean_reward;
    ++rewarded;
  };
  Timer timer;
  run_chat_rl(model, im.tokenizer, *train, *val, a.opt, *comm, cb);
  if (!main_rank) return;
  if (rewarded > 0) card["mean reward"] = reward_sum / static_cast<double>(rewarded);
  card["time_s"] = timer.seconds();
  log_report_section("chat-rl", "Chat RL", card);
}
}  // namespace

void register_chat_rl(CLI::App& app) {
  auto a = std::make_shared<ChatRlArgs>();
  CLI::App* c = app.add_subcommand("chat-rl",
                                   "reinforcement learning of a chat-sft checkpoint on GSM8K's rewards "
                                   "(nanochat chat_rl)");
  ChatRlOptions& o = a->opt;
  c->add_option("--run", a->run, "wandb run name (accepted for compatibility; nothing is sent)");
  c->add_option("--device-type", a->device_type, "cuda|cpu|mps; only cpu runs here");
  c->add_option("--model-tag", a->model_tag, "chat-sft tag to load (default: the largest d<N>); also the output tag");
  c->add_option("--model-step", a->model_step, "chat-sft step to load (default: the last complete one)");
  c->add_option("--task", a->task,
                "task to learn (train split) and evaluate (test split): GSM8K, or an offline one "
                "such as Arithmetic or SpellingBee")
      ->capture_default_str();
  c->add_option("--num-epochs", o.num_epochs, "epochs over the train split")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--num-steps", o.num_steps,
                "run this many steps instead of the epochs' (not a nanochat flag; -1 = train size / "
                "examples per step x epochs)")
      ->capture_default_str();
  c->add_option("--device-batch-size", o.rollout.device_batch_size, "samples per generate() call and per backward pass")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--examples-per-step", o.examples_per_step, "examples per optimizer step over all ranks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--num-samples", o.rollout.num_samples, "samples per example")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-new-tokens", o.rollout.max_new_tokens, "tokens per sample")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--temperature", o.rollout.temperature, "sampling temperature")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--top-k", o.rollout.top_k, "top-k sampling (0 = disabled)")->capture_default_str();
  c->add_option("--embedding-lr", o.embedding_lr, "learning rate of the embeddings (AdamW)")->capture_default_str();
  c->add_option("--unembedding-lr", o.unembedding_lr, "learning rate of lm_head (AdamW)")->capture_default_str();
  c->add_option("--matrix-lr", o.matrix_lr, "learning rate of the matrices (Muon)")->capture_default_str();
  c->add_option("--weight-decay", o.weight_decay, "Muon's weight decay")->capture_default_str();
  c->add_option("--init-lr-frac", o.init_lr_frac, "initial learning rate as a fraction of the rates above")
      ->capture_default_str();
  c->add_option("--eval-every", o.eval_every, "pass@k on the test split every N steps (0 = never)")
      ->capture_default_str();
  c->add_option("--eval-examples", o.eval_examples, "test problems of the pass@k evaluation")->capture_default_str();
  c->add_option("--save-every", o.save_every, "save the weights every N steps (and at the last step)")
      ->capture_default_str();
  c->add_option("--seed", o.rollout.seed, "mixed into every rollout's sampling seed")->capture_default_str();
  c->add_option("--balance", a->balance,
                "how a step's problems are dealt to the ranks: speed (by measured problems/s) or even")
      ->check(CLI::IsMember({"speed", "even"}))
      ->capture_default_str();
  add_threads_option(c, a->threads);
  c->callback([a] { run(*a); });
}

}  // namespace nanochat::cli
