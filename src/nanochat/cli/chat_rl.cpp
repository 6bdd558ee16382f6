// `nanochat chat-rl`: nanochat scripts/chat_rl.py (train/chat_rl.h). Loads a chat-sft checkpoint
// (--model-tag, --model-step), runs RL on GSM8K's train split (or --task, e.g. the offline
// Arithmetic) with pass@k on its test split, and saves the weights to
// chatrl_checkpoints/<model tag, else d<depth>>/. Under `nanochat run` rank 0 reads the checkpoint
// and the tokenizer from its base folder and sends them to every rank (a node needs only the
// binary, and the task's files for GSM8K), the examples are shared and the gradients averaged;
// rank 0 prints and saves. With `--nnodes MIN:MAX` the run is an elastic job (train/elastic.h):
// nodes may leave and join between steps; --resume-from-step continues an interrupted run.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/cli/commands.h"
#include "nanochat/cluster/gather.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/report_log.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/feed/step_source.h"
#include "nanochat/model/gpt.h"
#include "nanochat/plan/balance_mode.h"
#include "nanochat/tasks/hub.h"
#include "nanochat/tasks/registry.h"
#include "nanochat/train/chat_rl.h"
#include "nanochat/train/elastic.h"
#include "nanochat/train/test_fault.h"
#include "nanochat/train/trainer.h"

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

// What every generation of the run shares: the card's totals and the start-up lines said once.
struct RlTotals {
  nlohmann::ordered_json card;
  double reward_sum = 0;
  int64_t rewarded = 0;
  Timer timer;
  std::string checkpoint_dir;  // chatrl_checkpoints/<tag>, once a generation found the model
};

// The chat-sft checkpoint the run starts from: rank 0 reads it from its base folder (--model-tag,
// --model-step) and every rank gets its meta and weights, so a node needs no copy of it.
struct SftStart {
  std::unique_ptr<GPT> model;
  nlohmann::json meta;
  std::string tag;
  int64_t step = 0;
};

SftStart load_sft_from_rank0(Communicator& comm, const ChatRlArgs& a, const Tokenizer& tok) {
  LoadedModel lm;
  std::string error, head;
  if (comm.rank() == 0) try {
      lm = load_trained_model(a.model_tag, a.model_step, CheckpointSource::Sft);
      require_tokenizer_vocab(lm, tok.vocab_size());
      head = nlohmann::json{{"meta", lm.meta}, {"tag", lm.tag}, {"step", lm.step}}.dump();
    } catch (const std::exception& e) {
      error = e.what();
    }
  if (comm.world_size() == 1 && !error.empty()) fail(error);
  cluster::throw_if_any_rank_failed(comm, error);
  cluster::broadcast_string(comm, head, 0);
  const nlohmann::json h = nlohmann::json::parse(head);
  SftStart s;
  s.meta = h.at("meta");
  s.tag = h.at("tag").get<std::string>();
  s.step = h.at("step").get<int64_t>();
  if (comm.rank() == 0) {
    s.model = std::move(lm.model);
  } else {
    s.model = std::make_unique<GPT>(RunMeta::from_json(s.meta, "rank 0's chat-sft meta").model_config);
  }
  if (comm.world_size() > 1) {
    comm.broadcast(s.model->param_data(), s.model->num_params() * sizeof(float), 0)->wait();
    s.model->params_changed();
  }
  return s;
}

// Rank 0's downloaded files of task `name` (tasks/hub.h: every dataset folder of it, the manifest
// last) to the ranks that `need` them, each writing them into its own base folder as `nanochat
// data download --tasks` would. Collective.
void send_task_files(Communicator& comm, const std::string& name, bool need) {
  std::string list;  // rank 0: the files (relative to its base folder) of the train and test splits it has
  if (comm.rank() == 0) try {
      nlohmann::json files = nlohmann::json::array();
      for (const tasks::HubSource& src : tasks::hub_sources(name)) {
        const std::string dir = tasks::hub_dataset_dir(src, "."), manifest = dir + "/manifest.json";
        if ((src.split != "train" && src.split != "test") || !std::filesystem::exists(base_dir() + "/" + manifest))
          continue;
        for (const auto& shard : nlohmann::json::parse(read_file(base_dir() + "/" + manifest)))
          files.push_back(dir + "/" + shard.get<std::string>());
        files.push_back(manifest);
      }
      list = nlohmann::json{{"files", files}}.dump();
    } catch (const std::exception& e) {
      list = nlohmann::json{{"error", e.what()}}.dump();
    }
  cluster::broadcast_string(comm, list, 0);
  const nlohmann::json listed = nlohmann::json::parse(list);
  if (listed.contains("error"))
    fail("rank 0 could not list ", name, "'s files to send them: ", listed["error"].get<std::string>());
  size_t bytes = 0;
  for (const auto& f : listed.at("files")) {
    const std::string rel = f.get<std::string>();
    std::string data = comm.rank() == 0 ? read_file(base_dir() + "/" + rel) : std::string();
    cluster::broadcast_string(comm, data, 0);
    bytes += data.size();
    if (need) {
      std::filesystem::create_directories(std::filesystem::path(base_dir() + "/" + rel).parent_path());
      write_file_atomic(base_dir() + "/" + rel, data);
    }
  }
  if (need)
    std::printf("rank %d: took %s's files from rank 0 (%.1f MB) into %s/task_data\n", comm.rank(), name.c_str(),
                static_cast<double>(bytes) / 1e6, base_dir().c_str());
}

// The task's train and test splits on every rank. Each opens its own; a rank that lacks a
// downloaded task's files (GSM8K) gets rank 0's, so a node needs only the binary; any other
// failure stops every rank with the failing rank's message.
std::pair<tasks::TaskPtr, tasks::TaskPtr> open_rl_tasks(Communicator& comm, const std::string& name) {
  tasks::TaskPtr train, val;
  std::string error;
  auto open = [&] {
    error.clear();
    try {
      train = tasks::open_task(name, "", "train");
      val = tasks::open_task(name, "", "test");
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  open();
  if (comm.world_size() == 1 && !error.empty()) fail(error);
  const std::vector<uint8_t> failed = all_gather_value<uint8_t>(comm, error.empty() ? 0 : 1);
  const std::vector<std::string> hub = tasks::hub_task_names();
  const bool downloaded = std::find(hub.begin(), hub.end(), name) != hub.end();
  if (failed[0] == 0 && downloaded && std::count(failed.begin(), failed.end(), 1) > 0) {
    send_task_files(comm, name, !error.empty());
    if (!error.empty()) open();
  }
  cluster::throw_if_any_rank_failed(comm, error);
  return {train, val};
}

void print_start(const ChatRlArgs& a, const SftStart& sft, const tasks::Task& train, const tasks::Task& val,
                 int world_size, int64_t num_steps) {
  std::printf("chat-rl: sft model %s step %lld, %s (%lld train / %lld test problems), %d rank(s)\n", sft.tag.c_str(),
              static_cast<long long>(sft.step), a.task.c_str(), static_cast<long long>(train.size()),
              static_cast<long long>(val.size()), world_size);
  std::printf("Calculated number of steps: %lld\n", static_cast<long long>(num_steps));
  std::printf("Total sequences per step: %d\n", a.opt.examples_per_step * a.opt.rollout.num_samples);
  if (world_size > 1)
    std::printf("Examples per rank: dealt by %s each step (the first evenly)\n",
                a.opt.balance == BalanceMode::Speed ? "measured speed" : "count");
  else
    std::printf("Calculated examples per rank: %d\n", a.opt.examples_per_step);
  std::fflush(stdout);
}

ChatRlCallbacks rl_callbacks(bool main_rank, RlTotals& t) {
  ChatRlCallbacks cb;
  cb.on_eval = [main_rank, &t](int64_t step, const std::vector<double>& pk) {
    if (!main_rank) return;
    std::printf("Step %lld |", static_cast<long long>(step));
    for (size_t k = 0; k < pk.size(); ++k) std::printf("%s Pass@%zu: %.4f", k ? "," : "", k + 1, pk[k]);
    std::printf("\n");
    std::fflush(stdout);
    t.card["pass@k step"] = step;  // the card: the last evaluation's pass@k
    t.card["pass@k"] = pk;
  };
  cb.on_step = [main_rank, &t](const ChatRlStep& s) {
    if (!main_rank) return;
    std::string split;
    if (s.split.size() > 1) {
      split = " | examples per rank: ";
      for (size_t r = 0; r < s.split.size(); ++r) split += (r ? "/" : "") + std::to_string(s.split[r]);
      split += " | seconds per rank: ";
      for (size_t r = 0; r < s.rank_seconds.size(); ++r) split += (r ? "/" : "") + fixed(s.rank_seconds[r], 2);
    }
    std::printf("Step %lld/%lld | Average reward: %.4f | Average sequence length: %.2f | lrm: %.4f | loss: %.6f%s\n",
                static_cast<long long>(s.step), static_cast<long long>(s.num_steps), s.mean_reward,
                s.mean_sequence_length, s.lrm, s.loss, split.c_str());
    std::fflush(stdout);
    t.reward_sum += s.mean_reward;  // the card: the mean reward of the run's steps
    ++t.rewarded;
  };
  return cb;
}

// One generation of the run on `comm`'s ranks (the whole run unless the job is elastic).
void rl_generation(const ChatRlArgs& args, Communicator& comm, Membership& membership, int64_t resume_from_step,
                   RlTotals& totals) {
  ChatRlArgs a = args;
  a.opt.resume_from_step = resume_from_step;
  const bool main_rank = comm.rank() == 0;
  with_data_feed(comm, false, [&](DataFeed& feed) {
    const Tokenizer tok = load_tokenizer(feed);
    SftStart sft = load_sft_from_rank0(comm, a, tok);
    GPT& model = *sft.model;
    const auto [train, val] = open_rl_tasks(comm, a.task);
    const std::string tag = a.model_tag.empty() ? "d" + std::to_string(model.config().n_layer) : a.model_tag;
    a.opt.checkpoint_dir = base_dir() + "/" + checkpoint_source_folder(CheckpointSource::Rl) + "/" + tag;
    totals.checkpoint_dir = a.opt.checkpoint_dir;
    a.opt.meta = sft.meta;
    a.opt.meta["model_config"] = model.config().to_json();
    a.opt.meta["chat_rl"] = {{"task", a.task},
                             {"source_step", sft.step},
                             {"num_samples", a.opt.rollout.num_samples},
                             {"examples_per_step", a.opt.examples_per_step},
                             {"max_new_tokens", a.opt.rollout.max_new_tokens},
                             {"temperature", a.opt.rollout.temperature},
                             {"top_k", a.opt.rollout.top_k},
                             {"init_lr_frac", a.opt.init_lr_frac}};
    const int64_t num_steps =
        a.opt.num_steps > 0 ? a.opt.num_steps : train->size() / std::max(a.opt.examples_per_step, 1) * a.opt.num_epochs;
    if (main_rank && !membership.regrouped()) {
      print_start(a, sft, *train, *val, comm.world_size(), num_steps);
      totals.card["model"] = sft.tag + " step " + std::to_string(sft.step) + " (sft)";
      totals.card["task"] = a.task;
      totals.card["steps"] = num_steps;
    }
    totals.card["ranks"] = comm.world_size();
    totals.card["metrics"] = a.opt.checkpoint_dir + "/metrics.jsonl";  // its steps, and the nodes that left or joined
    run_chat_rl(model, tok, *train, *val, a.opt, comm, rl_callbacks(main_rank, totals), &membership);
  });
}

void run(ChatRlArgs a) {
  if (a.threads > 0) set_num_threads(a.threads);
  if (!a.device_type.empty() && a.device_type != "cpu")
    fail("--device-type ", a.device_type, ": this program runs on the CPU only (use cpu or leave it out)");
  a.opt.balance = parse_balance_mode(a.balance);
  // the tests' slower machine and dying rank (NANOCHAT_TEST_FAULT); none otherwise
  const std::unique_ptr<FaultInjector> faults = make_fault_injector(TrainTestHooks{"", test_fault_from_env()});
  a.opt.faults = faults.get();
  RlTotals totals;
  const int min_world = elastic_min_world_size();
  ElasticJob job;  // an elastic job's generations (`nanochat run --nnodes MIN:MAX`, train/elastic.h)
  job.first_resume_step = a.opt.resume_from_step;
  job.save_every = a.opt.save_every;
  job.next_step_after_checkpoint = 1;  // checkpoint s holds the weights after step s
  job.checkpoint_dir = [&totals] { return totals.checkpoint_dir; };
  job.run = [&a, &totals](Communicator& comm, Membership& membership, int64_t resume) {
    rl_generation(a, comm, membership, resume, totals);
  };
  bool main_rank = false;
  if (const char* j = std::getenv("NANOCHAT_JOIN"); j && std::string(j) == "1") {
    if (min_world <= 0)
      fail("NANOCHAT_JOIN=1 is for the ranks of a node that joins an elastic job (nanochat run --nnodes MIN:MAX)");
    a.opt.copy_state_every = elastic_copy_every(a.opt.copy_state_every, false, 0, min_world, false);
    run_elastic_joining(job, min_world);
  } else {
    std::unique_ptr<Communicator> comm = cluster::make_communicator_from_env();
    main_rank = comm->rank() == 0;
    if (min_world > 0 && elastic_job(*comm)) {
      a.opt.copy_state_every = elastic_copy_every(a.opt.copy_state_every, false, 0, min_world, main_rank);
      run_elastic(job, *comm, min_world);
    } else {
      FixedMembership one_group;
      rl_generation(a, *comm, one_group, a.opt.resume_from_step, totals);
    }
  }
  if (!main_rank) return;
  if (totals.rewarded > 0) totals.card["mean reward"] = totals.reward_sum / static_cast<double>(totals.rewarded);
  totals.card["time_s"] = totals.timer.seconds();
  log_report_section("chat-rl", "Chat RL", totals.card);
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
  c->add_option("--resume-from-step", o.resume_from_step,
                "continue an interrupted run after this checkpoint of chatrl_checkpoints/<tag> (its weights and "
                "optimizer state; -1 = from the start)")
      ->capture_default_str();
  c->add_option("--copy-state-every", o.copy_state_every,
                "node 0 keeps a copy of the job's state every N steps; when a node leaves the job node 0 saves "
                "that copy, so at most N steps are lost (0 = no copy; an elastic job, nanochat run --nnodes "
                "MIN:MAX, copies every 10 steps unless given)");
  c->add_option("--balance", a->balance,
                "how a step's problems are dealt to the ranks: speed (by measured problems/s) or even")
      ->check(CLI::IsMember({"speed", "even"}))
      ->capture_default_str();
  add_threads_option(c, a->threads);
  c->callback([a] { run(*a); });
}

}  // namespace nanochat::cli
