// chat-sft (sft.h): set-up of nanochat's chat_sft on the training engine of trainer.h.
#include "nanochat/train/sft.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/checkpoint/interop_optim.h"
#include "nanochat/checkpoint/loop_checkpoint.h"
#include "nanochat/checkpoint/model_io.h"
#include "nanochat/cluster/gather.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/profile.h"
#include "nanochat/core/threads.h"
#include "nanochat/engine/engine.h"
#include "nanochat/eval/chat_eval.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/tasks/jsonl_task.h"
#include "nanochat/tasks/registry.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "nanochat/train/elastic.h"
#include "nanochat/train/job_layout.h"
#include "nanochat/train/membership.h"
#include "nanochat/train/metrics_log.h"
#include "nanochat/train/report.h"
#include "nanochat/train/sft_data.h"
#include "nanochat/train/sync_factory.h"
#include "nanochat/train/trainer.h"

using json = nlohmann::json;

namespace nanochat {

namespace {

// Whether every rank can open ChatCORE's five tasks (each rank reads its own copy of the task files,
// eval/chat_eval.h). Collective. When one cannot, rank 0 says which rank and what is missing, and
// chat-sft trains without ChatCORE rather than stopping at its first estimate.
bool chatcore_tasks_on_every_rank(Communicator& comm) {
  std::string missing;
  for (const std::string& name : chatcore_task_names()) {
    try {
      open_chat_eval_task(name);
    } catch (const Error& e) {
      missing = e.what();
      break;
    }
  }
  const std::vector<std::string> all = all_gather_strings(comm, missing);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) {
      print_line_if(
          comm.rank() == 0,
          str_cat("NOTE: ChatCORE (--chatcore-every) is skipped: rank ", r, " cannot open its tasks: ", all[r],
                  " (every rank needs them: `nanochat data download --tasks` on each node; or run chat-eval on "
                  "the saved checkpoint; --chatcore-every -1 silences this)"));
      return false;
    }
  return true;
}

}  // namespace

bool is_sft_meta(const RunMeta& meta) {
  const json& uc = meta.user_config;
  return uc.is_object() && (uc.contains("init_lr_frac") || uc.contains("mmlu_epochs") || uc.contains("load_optimizer"));
}

SftBase sft_base(const RunMeta& meta, const std::string& meta_path) {
  return SftBase{meta.model_config,     meta.max_seq_len, meta.device_batch_size,
                 meta.total_batch_size, meta.user_config, meta_path};
}

SftData open_sft_data(const SftArgs& a) {
  SftData d;
  if (a.train_jsonl.empty()) {
    if (!a.val_jsonl.empty()) fail("chat-sft: --val-jsonl needs --train-jsonl (without it the val set is nanochat's)");
    if (a.mmlu_epochs < 0 || a.gsm8k_epochs < 0) fail("chat-sft: --mmlu-epochs and --gsm8k-epochs must be >= 0");
    // nanochat's mixture (scripts/chat_sft.py); a task listed k times is k epochs of it
    std::vector<tasks::TaskPtr> train{tasks::open_task("SmolTalk", "", "train")};
    const tasks::TaskPtr mmlu = a.mmlu_epochs > 0 ? tasks::open_task("MMLU", "all", "auxiliary_train") : nullptr;
    const tasks::TaskPtr gsm8k = a.gsm8k_epochs > 0 ? tasks::open_task("GSM8K", "main", "train") : nullptr;
    for (int i = 0; i < a.mmlu_epochs; ++i) train.push_back(mmlu);
    for (int i = 0; i < a.gsm8k_epochs; ++i) train.push_back(gsm8k);
    d.train = std::make_shared<tasks::TaskMixture>(std::move(train));
    // val: SmolTalk test, MMLU test[:5200], GSM8K test[:420] (cut to the sets' sizes when smaller)
    auto head = [](const tasks::TaskPtr& t, int64_t n) -> tasks::TaskPtr {
      return std::make_shared<tasks::TaskSlice>(t, 0, std::min(n, t->size()));
    };
    d.val = std::make_shared<tasks::TaskMixture>(std::vector<tasks::TaskPtr>{
        tasks::open_task("SmolTalk", "", "test"), head(tasks::open_task("MMLU", "all", "test"), 5200),
        head(tasks::open_task("GSM8K", "main", "test"), 420)});
    d.description =
        str_cat("Training mixture: ", with_commas(d.train->size()), " rows (MMLU x", a.mmlu_epochs, ", GSM8K x",
                a.gsm8k_epochs, "); validation mixture: ", with_commas(d.val->size()), " rows");
    return d;
  }
  d.train = tasks::jsonl_tasks(a.train_jsonl);
  if (!a.val_jsonl.empty()) d.val = tasks::jsonl_tasks(a.val_jsonl);
  // the files as given (each argument may list several, comma-separated)
  auto files = [](const std::vector<std::string>& args) {
    std::string out;
    for (const std::string& f : args) out += (out.empty() ? "" : ",") + f;
    return out;
  };
  d.description = str_cat("Training conversations: ", with_commas(d.train->size()), " (", files(a.train_jsonl), ")",
                          d.val ? str_cat("; validation: ", with_commas(d.val->size()), " (", files(a.val_jsonl), ")")
                                : std::string("; no validation set"));
  return d;
}

namespace {

// Rank 0 finds and reads the base checkpoint's meta; every rank gets it (or rank 0's error).
struct BaseCheckpoint {
  std::string dir;
  int64_t step = -1;
  RunMeta meta;
};

BaseCheckpoint find_base_checkpoint(Communicator& comm, const SftArgs& a) {
  std::string error;
  json found;
  if (comm.rank() == 0) try {
      const std::string root = base_dir() + "/" + checkpoint_source_folder(CheckpointSource::Base);
      const std::string tag = a.model_tag.empty() ? default_model_tag(root) : a.model_tag;
      const std::string dir = root + "/" + tag;
      int64_t step = a.model_step;
      if (step < 0) {
        const auto last = last_complete_step(dir);
        if (!last)
          fail("chat-sft: no complete base checkpoint in ", dir,
               "; train one with `nanochat base-train` (or pass --model-tag / --model-step)");
        step = *last;
      }
      const CheckpointPaths cp{dir, step};
      const json marker = read_checkpoint_marker(cp);
      const std::string bad = check_checkpoint_file(marker, cp.meta());
      if (!bad.empty()) fail(bad);
      const json meta = read_checkpoint_meta(cp);
      if (is_sft_meta(RunMeta::from_json(meta, cp.meta())))
        fail("chat-sft: ", cp.meta(),
             " was written by chat SFT (its user_config holds chat_sft's flags), not by base-train: chat-sft starts "
             "from a base checkpoint; put base-train's folder in base_checkpoints/, or continue an interrupted "
             "chat-sft with --resume-from-step");
      found = json{{"dir", dir}, {"step", step}, {"meta", meta}};
    } catch (const std::exception& e) {
      error = e.what();
    }
  if (comm.world_size() == 1 && !error.empty()) fail(error);  // one process: the message as it is
  cluster::throw_if_any_rank_failed(comm, error);
  std::string text = found.dump();
  cluster::broadcast_string(comm, text, 0);
  const json j = json::parse(text);
  const std::string dir = j.at("dir").get<std::string>();
  const int64_t step = j.at("step").get<int64_t>();
  return BaseCheckpoint{dir, step, RunMeta::from_json(j.at("meta"), CheckpointPaths{dir, step}.meta())};
}

// The Muon weight decay the interrupted run used (its meta's "muon_weight_decay"; 0 when it has
// none), read by rank 0 and sent to every rank. A missing or damaged meta is left to the resume,
// which names it.
double resumed_weight_decay(Communicator& comm, const TrainPlan& plan, int64_t step) {
  std::string text = "0";
  if (comm.rank() == 0) try {
      const CheckpointPaths cp{plan.checkpoint_dir, step};
      text = json(RunMeta::from_json(read_checkpoint_meta(cp), cp.meta()).muon_weight_decay.value_or(0.0)).dump();
    } catch (const std::exception&) {
      text = "0";
    }
  cluster::broadcast_string(comm, text, 0);
  return json::parse(text).get<double>();
}

// The conversation files exist where they are read (rank 0 of a served job, or every rank with
// --local-data), checked before the model is built; every rank throws the first rank's message
// naming the file and its flag.
void check_conversation_files(const SftArgs& a, Communicator& comm) {
  std::string missing;
  if (comm.rank() == 0 || a.local_data)
    for (const std::vector<std::string>* list : {&a.train_jsonl, &a.val_jsonl})
      for (const std::string& f : tasks::jsonl_paths(*list))
        if (missing.empty() && !std::filesystem::is_regular_file(f))
          missing = str_cat("chat-sft: cannot read ", f, " (no such file on this node); check the path given to ",
                            list == &a.train_jsonl ? "--train-jsonl" : "--val-jsonl");
  if (comm.world_size() == 1 && !missing.empty()) fail(missing);
  cluster::throw_if_any_rank_failed(comm, missing);
}

// What an SFT checkpoint's meta records: as the meta nanochat's scripts/chat_sft.py hands to
// save_checkpoint, the model with the SFT sequence length and the user's flags; besides, the base
// checkpoint, the batch, the world size and the tokenizer's hash.
RunMeta sft_run_meta(const SftArgs& a, const TrainPlan& plan, const Tokenizer& tok, const CheckpointPaths& base_cp,
                     double muon_weight_decay) {
  ModelConfig saved_cfg = plan.model;
  saved_cfg.sequence_len = plan.T;  // nanochat's SFT meta records the SFT sequence length
  RunMeta run;
  run.model_config = saved_cfg;
  run.user_config = sft_args_to_json(a);
  run.data_stream = "one-rank";
  run.base_checkpoint = base_cp.model();
  run.muon_weight_decay = muon_weight_decay;
  run.device_batch_size = plan.B;
  run.max_seq_len = plan.T;
  run.total_batch_size = plan.total_batch_size;
  run.world_size = plan.world_size;
  run.tokenizer_hash = std::to_string(tok.hash());
  return run;
}

// The starting weights (and optimizer moments) come from the base checkpoint, unless this run
// continues its own checkpoint (the resume in run_train_job reads it instead); then the lrs x
// --init-lr-frac. Returns the Muon weight decay the run keeps: the base run's last (nanochat's
// load_state_dict keeps the checkpoint's) when its optimizer was loaded, 0 for a fresh one, the
// interrupted run's when it resumes. Collective.
double start_from_base(const SftArgs& a, Communicator& comm, const BaseCheckpoint& base, const TrainPlan& plan,
                       GPT& model, MuonAdamW& opt) {
  auto print0 = [master = comm.rank() == 0](const std::string& s) { print_line_if(master, s); };
  const CheckpointPaths base_cp{base.dir, base.step};
  bool loaded = false;
  if (a.resume_from_step < 0) {
    warm_start(comm, base_cp, model, opt, a.load_optimizer != 0, &loaded);
    if (a.load_optimizer && loaded)
      print0("Loaded optimizer state from pretrained checkpoint (momentum buffers only, LRs reset)");
    else if (a.load_optimizer)
      print0("WARNING: optimizer checkpoint not found, starting with fresh optimizer (slightly worse)");
  }
  double muon_weight_decay = 0;
  if (a.load_optimizer && loaded) {
    for (const OptGroup& g : scheduled_groups(opt, base.meta, base.step, base_cp.meta()))
      if (g.kind == OptKind::Muon) muon_weight_decay = g.weight_decay;
  }
  if (a.resume_from_step >= 0) muon_weight_decay = resumed_weight_decay(comm, plan, a.resume_from_step);
  opt.scale_initial_lrs(a.init_lr_frac);
  print0(str_cat("Muon weight decay: ", muon_weight_decay, "; initial lrs x ", a.init_lr_frac));
  return muon_weight_decay;
}

// How chat_sft.py shows its steps: its line, a step named by the steps done (it counts the step
// before logging it), the packing summary at the end.
StepLog sft_step_log(int T) {
  StepLog l;
  l.line = sft_step_log_line;
  l.name_offset = 1;
  l.summary = [T](const json& state) { return sft_packing_summary(state.value("packer", json::object()), T + 1); };
  return l;
}

// `checkpoint_dir`: set to the run's checkpoint folder once its plan is known (when not null).
void sft(const SftArgs& a, Communicator& comm, const FaultInjector& faults, DataFeed& feed, Membership& membership,
         std::string* checkpoint_dir = nullptr) {
  const bool master = comm.rank() == 0;
  // a regrouped elastic job said the start-up lines once already
  auto print0 = [say = master && !membership.regrouped()](const std::string& s) { print_line_if(say, s); };
  const Tokenizer tok = load_tokenizer(feed);
  const BaseCheckpoint base = find_base_checkpoint(comm, a);
  const CheckpointPaths base_cp{base.dir, base.step};
  TrainPlan plan = derive_sft_plan(a, sft_base(base.meta, base_cp.meta()), comm.world_size(), base_dir());
  if (plan.model.vocab_size != tok.vocab_size())
    fail("chat-sft: the base checkpoint ", base_cp.model(), " has vocab ", plan.model.vocab_size,
         " but the tokenizer has ", tok.vocab_size(), "; use the tokenizer the model was trained with");
  check_conversation_files(a, comm);
  if (checkpoint_dir) *checkpoint_dir = plan.checkpoint_dir;

  print0("nanochat.cpp chat-sft");
  print_device_lines(plan, tok, master && !membership.regrouped(), a.threads == 0 && num_threads() > 1);
  print0(str_cat("Base checkpoint: ", base_cp.model()));
  for (const auto& l : plan.log) print0(l);
  const double peak = measure_and_print_peak(master && !membership.regrouped());
  if (feed.server)
    print0(str_cat("Data: node 0 packs the conversations and sends every rank its rows (port ", feed.port(), ")"));

  GPT model(plan.model);
  print0(plan.dmodel_lr_scale_line());
  prof::reset();
  const JobLayout layout = agree_on_job_layout(comm, sft_args_to_json(a), plan, tok);
  const std::unique_ptr<StepSync> sync = make_step_sync(plan, layout, model, comm);
  const double muon_weight_decay = start_from_base(a, comm, base, plan, model, sync->optimizer());
  plan.step_schedule = sft_step_schedule(a, muon_weight_decay);

  // Every rank opens the data where it reads it: node 0 (served) or each (local copies).
  SftStreamConfig sc{plan.T, plan.rows_per_step(), a.num_iterations};
  const RowStreamFactory stream = [&a, &tok, sc, master](const json* state) -> std::unique_ptr<RowStream> {
    const SftData d = open_sft_data(a);
    print_line_if(master, d.description);
    if (!d.val && a.eval_every > 0)
      fail("chat-sft: --eval-every ", a.eval_every,
           " needs validation conversations: pass --val-jsonl FILE, or "
           "--eval-every -1");
    return make_sft_stream(tok, d.train, d.val, sc, state);
  };
  const RunMeta run = sft_run_meta(a, plan, tok, base_cp, muon_weight_decay);
  TrainJob job{plan, layout, tok, model, *sync, stream, run, a.resume_from_step, peak, a.profile};
  job.adapt_threads = a.threads == 0 && num_threads() > 1;
  job.step_log = sft_step_log(plan.T);
  job.membership = &membership;
  const bool chatcore = a.chatcore_every > 0 && chatcore_tasks_on_every_rank(comm);
  if (chatcore)
    job.extra_eval = [&a, &model, &tok, &comm, master, B = plan.B](int64_t step, bool last, MetricsLog& metrics,
                                                                   StepSync&) {
      if (!(last || (step > 0 && step % a.chatcore_every == 0))) return;
      Engine engine(model, tok);
      const ChatCoreResult r =
          chat_core(engine, open_chat_eval_task, ChatCoreLimits{a.chatcore_max_cat, a.chatcore_max_sample, B}, comm,
                    [master](const ChatEvalResult& t) {
                      print_line_if(master, str_cat("  ", t.task, ": ", fixed(100 * t.accuracy, 2), "%"));
                    });
      char b[128];
      std::snprintf(b, sizeof b, "Step %05lld | ChatCORE: %.4f | ChatCORE_cat: %.4f", static_cast<long long>(step),
                    r.chatcore, r.chatcore_cat);
      print_line_if(master, b);
      json rec{{"step", step}, {"chatcore", r.chatcore}, {"chatcore_cat", r.chatcore_cat}};
      for (const auto& [name, acc] : r.accuracies) rec["chatcore/" + name] = acc;
      metrics.record(rec);
    };
  run_train_job(job, comm, faults, feed);
}

}  // namespace

namespace {

// Refuses what chat-sft cannot run, applies --threads; the fault injector of the run.
std::unique_ptr<FaultInjector> prepare_chat_sft(const SftArgs& a, TrainTestHooks& hooks) {
  if (!a.device_type.empty() && a.device_type != "cpu")
    fail("--device-type ", a.device_type,
         ": nanochat.cpp trains on CPUs only; use --device-type cpu or leave it unset");
  if (a.threads > 0) set_num_threads(a.threads);
  hooks.fault = test_fault_from_env();
  return make_fault_injector(hooks);
}

// chat-sft's elastic job: its job once per generation of the job's ranks, node 0 keeping a copy of
// the job's state (train/elastic.h); the checkpoints go to chatsft_checkpoints/<tag>/, which the
// base checkpoint's depth names when --model-tag is not given (rank 0 finds it, every rank learns it).
ElasticJob sft_elastic_job(const SftArgs& args, const FaultInjector& faults, int min_world, bool master) {
  SftArgs a = args;
  a.copy_state_every = elastic_copy_every(a.copy_state_every, false, 0, min_world, master);
  ElasticJob job;
  job.save_every = a.save_every;
  job.first_resume_step = a.resume_from_step;
  auto dir = std::make_shared<std::string>();
  job.run = [a, &faults, dir](Communicator& comm, Membership& membership, int64_t resume_from_step) {
    SftArgs g = a;
    g.resume_from_step = resume_from_step;
    with_data_feed(comm, g.local_data, [&](DataFeed& feed) { sft(g, comm, faults, feed, membership, dir.get()); });
  };
  job.checkpoint_dir = [dir] { return *dir; };
  return job;
}

}  // namespace

void run_chat_sft_joining(const SftArgs& a, TrainTestHooks hooks) {
  const std::unique_ptr<FaultInjector> faults = prepare_chat_sft(a, hooks);
  const int min_world = elastic_min_world_size();
  if (min_world <= 0)
    fail("NANOCHAT_JOIN=1 is for the ranks of a node that joins an elastic job (nanochat run --nnodes MIN:MAX)");
  run_elastic_joining(sft_elastic_job(a, *faults, min_world, false), min_world);
}

void run_chat_sft(const SftArgs& a, Communicator& comm, TrainTestHooks hooks) {
  const std::unique_ptr<FaultInjector> faults = prepare_chat_sft(a, hooks);
  if (const int min_world = elastic_min_world_size(); min_world > 0 && elastic_job(comm)) {
    run_elastic(sft_elastic_job(a, *faults, min_world, comm.rank() == 0), comm, min_world);
    return;
  }
  FixedMembership fixed;
  with_data_feed(comm, a.local_data, [&](DataFeed& feed) { sft(a, comm, *faults, feed, fixed); });
}

}  // namespace nanochat
