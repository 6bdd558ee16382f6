#include "nanochat/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "nanochat/checkpoint/job_checkpoint.h"
#include "nanochat/checkpoint/loop_checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/peak.h"
#include "nanochat/core/profile.h"
#include "nanochat/core/thread_tuner.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/data/verify.h"
#include "nanochat/engine/engine.h"
#include "nanochat/engine/sample_prompts.h"
#include "nanochat/eval/bpb.h"
#include "nanochat/eval/core_bundle.h"
#include "nanochat/eval/core_eval.h"
#include "nanochat/feed/step_source.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "nanochat/train/balance.h"
#include "nanochat/train/eval_hooks.h"
#include "nanochat/train/job_layout.h"
#include "nanochat/train/membership.h"
#include "nanochat/train/metrics_log.h"
#include "nanochat/train/report.h"
#include "nanochat/train/sync_factory.h"

using json = nlohmann::json;

namespace nanochat {

namespace {

// Everything the loop works with: the settings (plan, job layout), the parts it drives, and the
// run's state.
struct TrainContext {
  const TrainPlan& plan;
  const JobLayout& layout;
  const Tokenizer& tok;
  GPT& model;
  StepSync& sync;  // every collective of the loop goes through it (train/sync.h)
  StepSource& data;
  MetricsLog& metrics;
  LoopState& st;
  const FaultInjector& faults;
  RunMeta run_meta;  // meta fields that do not change during the run
  double peak_gflops = 0;
  bool profile = false;
  bool adapt_threads = false;  // --threads not given: the count follows the measured steps (core/thread_tuner.h)
  Membership& membership;      // a lost peer, ranks that join (train/membership.h)
  StepLog step_log;            // TrainJob::step_log
  ExtraEval extra_eval = {};   // TrainJob::extra_eval
};

// One rank's run of base_train after the set-up: the loop and its parts.
class TrainLoop {
 public:
  explicit TrainLoop(TrainContext& c)
      : c_(c),
        plan_(c.plan),
        model_(c.model),
        sync_(c.sync),
        st_(c.st),
        token_bytes_(c.tok.token_bytes()),
        x_(static_cast<size_t>(plan_.B) * plan_.T),
        y_(x_.size()) {
    NC_CHECK(plan_.step_schedule, "the plan of ", plan_.command, " has no step schedule");
  }

  // Steps until num_iterations (nanochat base_train.py's while loop); the last step is saved and
  // evaluated. Returns the final evaluation's error ("" = none). A peer that leaves the job (it
  // died, froze or was cut off: PeerLost) stops it with a message that names the step, what the
  // step was doing and what is saved -- unless the job's membership goes on without it
  // (train/membership.h).
  std::string run() {
    try {
      return run_steps();
    } catch (const PeerLost& e) {
      const Timer caught;  // an elastic job reports how long it took to go on from here
      c_.membership.peer_lost(e, st_.step, sync_.world_size(), c_.metrics);
      std::string copy_error;
      if (copied_ > last_saved_) try {  // rank 0: node 0's copy is newer than the last checkpoint
          if (sync_.save_copy(plan_.checkpoint_dir) == copied_) last_saved_ = copied_;
        } catch (const std::exception& s) {
          copy_error = str_cat(" (node 0 could not save its copy of step ", copied_, ": ", s.what(), ")");
        }
      c_.membership.go_on_without(
          PeerLoss{e, st_.step, phase_, sync_.rank() == 0 ? last_saved_ : -1, caught.seconds(), !copy_error.empty()});
      fail(peer_lost_message(e), copy_error);
    }
  }

  std::string run_steps() {
    for (;;) {
      const int64_t step = st_.step;
      const bool last = is_last(step);
      const bool in_sync = sync_.in_sync(step);
      const bool save_now = in_sync && plan_.cadence.save_at(step, last);
      // 1. the replicas are still identical (and a checkpoint never stores one rank's fault)
      phase_ = "comparing the replicas";
      if (in_sync && plan_.cadence.check_replicas_at(step, save_now)) sync_.check_replicas(step);
      if (last) return finish_last_step();
      // 2. val bpb and samples, 3. checkpoint, 4. one optimizer step. A regrouped job evaluates
      // its first step too: after a join nobody evaluated that boundary (the generation before
      // ended after the step that led to it, NodesJoin); after a leave it is evaluated again (the
      // loss may have cut that evaluation short), and the chart keeps the later record
      // (train/metrics_log.h).
      phase_ = "evaluating";
      if (in_sync) evaluate_and_sample(false);
      phase_ = "saving the checkpoint";
      if (save_now) save();
      phase_ = "training the step";
      train_step();
      ++st_.step;
      keep_copy_if_due();
      if (join_due_ && st_.step < plan_.num_iterations) admit_joiners();
    }
  }

  // Ranks ask to join the job (every rank saw it in the step's statistics): node 0 writes the state
  // of this boundary and the membership ends this run of the loop here (train/membership.h).
  [[noreturn]] void admit_joiners() {
    phase_ = "saving the state for the ranks that join";
    if (copied_ == st_.step && sync_.world_size() > 1) {  // node 0 holds the copy (one rank keeps none)
      if (sync_.save_copy(plan_.checkpoint_dir) == copied_) last_saved_ = copied_;  // rank 0; no collective
    } else {
      save();
    }
    c_.membership.admit_joiners(st_.step, sync_.rank() == 0 ? last_saved_ : -1);  // throws
    fail("internal: the job's membership admitted no rank at step ", st_.step);
  }

  // Node 0 keeps the job's state at this step boundary (--copy-state-every): a node lost later
  // costs no step before it.
  void keep_copy_if_due() {
    if (!plan_.cadence.copy_at(st_.step) || !sync_.in_sync(st_.step) || st_.step >= plan_.num_iterations) return;
    LoopState s = st_;
    s.loader_state = loader_state_;
    phase_ = "sending node 0 the copy of the job's state";
    sync_.keep_copy(c_.run_meta, s);
    copied_ = st_.step;
  }

  double profiled_seconds() const { return profiled_seconds_; }
  /// The stream's state after the last rows read (those of the step that ended the run, if one did).
  const json& stream_state() const { return pending_ ? pending_->loader_state : loader_state_; }
  int64_t profiled_steps() const { return profiled_steps_; }

 private:
  void print0(const std::string& s) const { print_line_if(sync_.rank() == 0, s); }

  // Whether `step` ends the run (it is not trained): its number, or, when the data stream ends the
  // run, its rows, read here before its evaluation and save (TrainPlan::run_end).
  bool is_last(int64_t step) {
    switch (plan_.run_end) {
      case RunEnd::Stream:
        prefetch(step);
        return pending_->end;
      case RunEnd::Steps:
        break;
    }
    return step == plan_.num_iterations;
  }

  // The step's rows before its evaluation and save (RunEnd::Stream).
  void prefetch(int64_t step) {
    if (pending_) return;
    Timer td;
    pending_ = std::make_unique<StepRows>(c_.data.next(step));
    pending_data_s_ = td.seconds();
  }

  void save() {
    st_.loader_state = loader_state_;
    sync_.save(plan_.checkpoint_dir, c_.run_meta, st_, c_.faults);
    last_saved_ = st_.step;
  }

  // Why the job stops, on every rank: the step and what it was doing, the lost peer (e), and what
  // node 0 holds: the last checkpoint (the steps after it are lost) and the command that resumes.
  std::string peer_lost_message(const PeerLost& e) const {
    const int64_t step = st_.step;
    // a worker cannot see node 0's disk: it says what node 0 saves (its copy, when newer)
    const int64_t on_disk = sync_.rank() == 0 ? last_saved_ : std::max(last_saved_, copied_);
    std::string saved;
    if (on_disk >= 0)
      saved = str_cat("The last checkpoint is step ", on_disk, " in node 0's ", plan_.checkpoint_dir,
                      step > on_disk ? str_cat(" (", step - on_disk, step - on_disk == 1 ? " step" : " steps",
                                               " trained since then lost)")
                                     : " (the last completed step: nothing trained is lost)",
                      "; to continue, run the same command on every node that is still here, with --nnodes "
                      "set to their number and --resume-from-step ",
                      on_disk, " (the optimizer state is dealt to any number of ranks)");
    else
      saved = str_cat("No checkpoint of this run was saved yet (--save-every ",
                      plan_.cadence.save_every > 0 ? std::to_string(plan_.cadence.save_every) : std::string("-1"),
                      "): the ", step, " steps trained are lost; with --save-every N a lost node costs at most N steps",
                      !c_.step_log.suggests_copy_state
                          ? std::string()
                          : ", with --copy-state-every N too but without writing files (node 0 keeps a copy in "
                            "memory)");
    // when the data ends the run (chat-sft), its step count is not known in advance
    const std::string of = plan_.run_end == RunEnd::Stream ? std::string() : str_cat(" of ", plan_.num_iterations);
    return str_cat("the job stopped in step ", step, of, " (", phase_, ") because a node left: ", e.what(), ". ",
                   saved);
  }

  // The last step is saved BEFORE the final evaluation: a failure there (or a rank lost during
  // it) must not lose the weights. Its meta then gets the final val bpb.
  std::string finish_last_step() {
    NC_CHECK(sync_.in_sync(st_.step), "the step synchronisation left the ranks apart at the last step ", st_.step);
    const bool final_eval = plan_.cadence.eval_every > 0;
    if (final_eval) st_.val_bpb = std::numeric_limits<double>::quiet_NaN();  // not evaluated yet
    save();
    std::string eval_error;
    try {
      evaluate_and_sample(true);
    } catch (const Error& e) {
      eval_error = e.what();
      print0(str_cat("ERROR during the final evaluation/sampling: ", e.what(), " (the weights of step ", st_.step,
                     " are saved)"));
    }
    if (final_eval && sync_.rank() == 0 && eval_error.empty())
      rewrite_checkpoint_meta(CheckpointPaths{plan_.checkpoint_dir, st_.step}, checkpoint_meta(c_.run_meta, st_));
    return eval_error;
  }

  // val bpb and (rank 0) greedy samples of the prompts.
  void evaluate_and_sample(bool last) {
    const int64_t step = st_.step;
    if (last) c_.faults.before_final_evaluation();
    if (plan_.cadence.eval_at(step, last)) {
      const JobLayout& l = c_.layout;
      const EvalRanks ranks{sync_.rank(), sync_.world_size(),
                            [this](double* v, size_t n) { sync_.sum_over_ranks(v, n); }};
      st_.val_bpb =
          evaluate_bpb(model_, c_.data.val_reader(l.eval_B), l.eval_B, plan_.T, l.eval_steps, token_bytes_, ranks);
      st_.min_val_bpb = std::min(st_.min_val_bpb, st_.val_bpb);
      char b[96];
      std::snprintf(b, sizeof b, "Step %05lld | Validation bpb: %.6f", static_cast<long long>(step), st_.val_bpb);
      print0(b);
      c_.metrics.record({{"step", step}, {"val_bpb", number_or_infinity(st_.val_bpb)}});
    }
    if (c_.extra_eval) c_.extra_eval(step, last, c_.metrics, sync_);
    if (plan_.cadence.sample_at(step, last) && sync_.rank() == 0) {
      // nanochat's base_train: Engine.generate_batch, one greedy row of at most 16 tokens
      Engine engine(model_, c_.tok);
      GenerateOptions go;
      go.max_tokens = 16;
      go.temperature = 0;
      for (const char* prompt : kBaseSamplePrompts) {
        std::vector<int32_t> ids = c_.tok.encode(prompt);
        ids.insert(ids.begin(), c_.tok.bos_id());
        const std::vector<int32_t> gen = engine.generate(ids, go).rows[0].tokens;
        ids.insert(ids.end(), gen.begin(), gen.end());
        print0(c_.tok.decode(ids));
      }
    }
  }

  // This rank's micro-batches of the step (the rows the sync gave it), timed.
  void run_micro_batches(const StepRows& rows, const StepShare& share, RankStep& my) {
    const int64_t step = st_.step;
    const int rank = sync_.rank();
    int64_t next_row = share.first_row;
    for (size_t micro = 0; micro < share.micro_batches.size(); ++micro) {
      const int n = share.micro_batches[micro];
      split_rows(rows.rows.data() + static_cast<size_t>(next_row) * (static_cast<size_t>(plan_.T) + 1), n, plan_.T,
                 x_.data(), y_.data());
      next_row += n;
      Timer tc;
      const float loss = sync_.micro_batch(static_cast<int>(micro), x_.data(), y_.data(), n, plan_.T);
      c_.faults.after_micro_batch(rank, tc.seconds());
      my.compute += tc.seconds();
      if (!std::isfinite(loss))
        fail("training diverged at step ", step, " (loss ", loss, " on rank ", rank,
             "); lower the learning rates or check the data");
    }
  }

  // One optimizer step: this rank's share of the step's rows (train/balance.h) with gradient
  // accumulation (docs/nanochat.md 3.3), the update, the times of every rank, the log line, and
  // the split of the next step -- the synchronisation all in the StepSync.
  void train_step() {
    const int64_t step = st_.step;
    prof::enable(c_.profile);
    Timer t;
    if (c_.adapt_threads) run_delay_at_start_ = process_run_delay_ns();
    RankStep my;
    const StepShare share = sync_.begin_step(step);
    StepRows rows;
    if (pending_) {
      rows = std::move(*pending_);
      pending_.reset();
      my.data = pending_data_s_;
    } else {
      prof::Scope data_scope(prof::Op::Data);
      Timer td;
      rows = c_.data.next(step);  // the whole step's rows; this rank runs its part of them
      my.data = td.seconds();
    }
    loader_state_ = std::move(rows.loader_state);
    run_micro_batches(rows, share, my);
    progress_ = std::max(progress_, rows.progress);                    // a stream that reports no progress gives -1
    const ScheduledStep sched = plan_.step_schedule(step, progress_);  // the plan's: base-train's or chat-sft's
    my.opt_compute = sync_.update(sched.optim);
    model_.params_changed();  // the update wrote the weights through the optimizer's pointers
    if (c_.adapt_threads) adapt_threads(share, my, t);
    c_.faults.after_update(model_, sync_.rank(), step);
    my.dt = t.seconds();
    prof::enable(false);
    profiled_seconds_ += my.dt;
    ++profiled_steps_;
    my.joiners = c_.membership.joiners_waiting();
    const StepStats stats = sync_.finish(my);
    if (c_.membership.join_due(stats)) join_due_ = true;
    log_step(stats, sched.lrm);
    for (const std::string& note : stats.notes) print0(note);
    note_a_rank_that_slows_the_job(stats);
  }

  // Fewer threads while a step runs faster with fewer (another process keeps a core busy), more
  // again once they measure faster (core/thread_tuner.h). Cost: this rank's compute seconds per row;
  // a probe down only after a step whose threads waited for a CPU (their run-queue delay).
  void adapt_threads(const StepShare& share, const RankStep& my, const Timer& step_timer) {
    int rows = 0;
    for (int n : share.micro_batches) rows += n;
    const int64_t delay = process_run_delay_ns();
    const bool contended = ThreadTuner::contended(
        run_delay_at_start_ < 0 || delay < 0 ? -1.0 : static_cast<double>(delay - run_delay_at_start_) * 1e-9,
        step_timer.seconds(), num_threads());
    if (tuner_.after_step(my.compute + my.opt_compute, rows, contended)) {
      std::printf("%sThreads: %s (--threads N fixes the count)\n",
                  sync_.world_size() > 1 ? str_cat("rank ", sync_.rank(), ": ").c_str() : "", tuner_.change().c_str());
      std::fflush(stdout);
    }
    if (tuner_.threads() != num_threads()) set_num_threads(tuner_.threads());
  }

  // Once, when the others alone would be faster than the whole job (measured, after warm-up).
  void note_a_rank_that_slows_the_job(const StepStats& s) {
    const std::vector<RankStep>& all = s.ranks;
    if (all.size() < 2 || noted_slow_rank_ || st_.step < 5) return;
    dt_ema_ = dt_ema_ > 0 ? 0.7 * dt_ema_ + 0.3 * all[0].dt : all[0].dt;
    if (st_.step < 8) return;
    std::vector<double> opt;
    for (const RankStep& x : all) opt.push_back(x.opt_compute);
    const int64_t R = c_.layout.rows_per_step;
    const FasterWithout f = faster_without(s.speeds, opt, R, dt_ema_);
    if (f.rank < 0) return;
    noted_slow_rank_ = true;
    print0(str_cat("NOTE: this job would be faster without rank ", f.rank, ": it ran ",
                   fixed(100.0 * all[static_cast<size_t>(f.rank)].rows / static_cast<double>(R), 0),
                   "% of the rows, but a step takes ", fixed(dt_ema_, 2),
                   " s where the other ranks alone would need about ", fixed(f.seconds, 2),
                   " s (their measured speed). Its speed or its link holds the others back: leave that node out, "
                   "or raise --total-batch-size so that each step has more rows to share and the link matters less"));
  }

  // The log line and metrics record of the step just made (docs/nanochat.md 3.10). The loss is the
  // step's token-weighted mean over all its rows (StepStats::loss), whatever the split.
  void log_step(const StepStats& s, double lrm) {
    const double ema_beta = 0.9;
    const int64_t step = st_.step, total = plan_.total_batch_size;
    // the step as the log and metrics name it (StepLog::name_offset): base_train.py its 0-based index, chat_sft.py the
    // steps done (it counts the step before logging it)
    const int64_t named = step + c_.step_log.name_offset;
    const float train_loss = static_cast<float>(s.loss);
    const double dt = s.ranks[0].dt;
    st_.smooth_train_loss = ema_beta * st_.smooth_train_loss + (1 - ema_beta) * train_loss;
    StepReport r;
    r.step = step;
    r.num_iterations = plan_.num_iterations;
    // both debias by beta^(named + 1): chat_sft.py after counting the step, base_train.py before it
    r.smooth_loss = st_.smooth_train_loss / (1 - std::pow(ema_beta, static_cast<double>(named + 1)));
    r.progress = progress_;
    r.lrm = lrm;
    r.dt = dt;
    r.tok_per_sec = static_cast<int64_t>(static_cast<double>(total) / dt);
    r.mfu = 100.0 * static_cast<double>(flops_per_token_) * static_cast<double>(total) / dt /
            (c_.peak_gflops * 1e9 * plan_.world_size);
    if (named > 10) st_.total_training_time += dt;  // both count the time after their step 10
    r.loader_state = loader_state_;
    r.total_training_time = st_.total_training_time;
    r.world_size = plan_.world_size;
    json rank_rows = json::array(), rank_compute = json::array(), rank_wait = json::array(), rank_data = json::array(),
         rank_tok = json::array();
    for (size_t q = 0; q < s.ranks.size(); ++q) {
      const RankStep& x = s.ranks[q];
      const double compute = x.compute + x.opt_compute;
      const double wait = std::max(0.0, x.dt - compute - x.data);
      r.ranks.push_back({static_cast<double>(s.split[q]) / static_cast<double>(c_.layout.rows_per_step), compute, wait,
                         x.dt > 0 ? static_cast<int64_t>(x.rows * plan_.T / x.dt) : 0});
      rank_rows.push_back(s.split[q]);
      rank_compute.push_back(compute * 1e3);
      rank_wait.push_back(wait * 1e3);
      rank_data.push_back(x.data * 1e3);
      rank_tok.push_back(r.ranks.back().tok_per_sec);
    }
    r.comm_wait = r.ranks[0].wait;
    print0(c_.step_log.line(r));
    json rec = {{"step", named},
                {"loss", train_loss},
                {"smooth_loss", r.smooth_loss},
                {"lrm", lrm},
                {"dt_ms", dt * 1e3},
                {"tok_per_sec", r.tok_per_sec},
                {"mfu", r.mfu},
                {"comm_wait_ms", r.comm_wait * 1e3}};
    if (s.ranks.size() > 1) {
      rec["rank_rows"] = rank_rows;
      rec["rank_compute_ms"] = rank_compute;
      rec["rank_wait_ms"] = rank_wait;
      rec["rank_data_ms"] = rank_data;
      rec["rank_tok_per_sec"] = rank_tok;
    }
    c_.metrics.record(rec);
  }

  TrainContext& c_;
  const TrainPlan& plan_;
  GPT& model_;
  StepSync& sync_;
  LoopState& st_;
  json loader_state_ = c_.data.initial_state();  // after the last step trained
  std::unique_ptr<StepRows> pending_;            // RunEnd::Stream: the step's rows, fetched before its evaluation
  double pending_data_s_ = 0;
  double progress_ = 0;  // the largest progress the stream reported (chat-sft; nanochat's progress = max(...))
  bool noted_slow_rank_ = false;
  ThreadTuner tuner_{num_threads(), 1, "row"};
  int64_t run_delay_at_start_ = -1;                   // process_run_delay_ns() when the step began
  int64_t last_saved_ = c_.plan.cadence.resume_step;  // the last step on disk (-1: none)
  int64_t copied_ = -1;                               // the step node 0 last copied (keep_copy)
  bool join_due_ = false;                             // ranks join at the end of this step (membership)
  const char* phase_ = "starting";                    // what the loop is doing, for a failure's message
  double dt_ema_ = 0;
  const int64_t flops_per_token_ = model_.num_flops_per_token();
  const std::vector<int32_t> token_bytes_;
  std::vector<int32_t> x_, y_;
  double profiled_seconds_ = 0.0;  // --profile: wall time of the profiled steps
  int64_t profiled_steps_ = 0;
};

// The start-up lines: run, device, vocab, model, the plan's derivations, the MFU reference peak.
// `reads_data`: this rank reads the shards (it checks them first).
double print_setup_and_measure_peak(const BaseTrainArgs& a, const Tokenizer& tok, const TrainPlan& plan, bool master,
                                    bool reads_data) {
  auto print0 = [master](const std::string& s) { print_line_if(master, s); };
  print0("nanochat.cpp base-train");
  print_device_lines(plan, tok, master, a.threads == 0 && num_threads() > 1);
  for (auto& l : plan.log) print0(l);
  if (reads_data) data::check_training_shards(data_dir(), a.skip_data_check, master);  // a corrupt page stops here
  return measure_and_print_peak(master, plan.dtype);
}

void train(const BaseTrainArgs& a, Communicator& comm, const FaultInjector& faults, DataFeed& feed,
           Membership& membership) {
  const int rank = comm.rank(), W = comm.world_size();
  const bool master = rank == 0;
  auto print0 = [master](const std::string& s) { print_line_if(master, s); };
  // A regrouped elastic job has said the start-up lines once already.
  const bool regrouped = membership.regrouped();

  // Tokenizer, derived plan, start-up report.
  const Tokenizer tok = load_tokenizer(feed);
  const TrainPlan plan = derive_plan(a, tok.vocab_size(), W, base_dir());
  const double peak_gflops = print_setup_and_measure_peak(a, tok, plan, master && !regrouped, !feed.client);
  if (feed.server && !regrouped)
    print0(str_cat("Data: node 0 reads ", data_dir(), " and sends every rank its rows (port ", feed.port(),
                   "); --local-data makes every node read its own copy"));

  // Model and optimizer (docs/nanochat.md 2.1: lrs x batch_lr_scale, Muon wd scaled; TrainPlan::optim).
  GPT model(plan.model);
  model.init_weights(a.seed);
  model.set_recompute_mlp(a.recompute_mlp);
  model.set_compute_dtype(plan.dtype);
  if (!regrouped) print0(plan.dmodel_lr_scale_line());
  prof::reset();

  // The whole job, agreed by every rank before any collective on tensors (job_layout.h); then
  // the mode of --sync with its optimizer (train/sync_factory.h).
  const JobLayout layout = agree_on_job_layout(comm, a, plan, tok);
  const std::unique_ptr<StepSync> sync = make_step_sync(plan, layout, model, comm);
  RunMeta run;
  run.model_config = plan.model;
  run.data_stream = "one-rank";
  run.user_config = args_to_json(a);
  run.device_batch_size = plan.B;
  run.max_seq_len = plan.T;
  run.total_batch_size = plan.total_batch_size;
  run.world_size = plan.world_size;
  run.dtype = compute_dtype_name(plan.dtype);
  run.tokenizer_hash = std::to_string(tok.hash());
  TrainJob job{plan,        layout,   tok, model, *sync, token_row_stream(tok, plan), run, a.resume_from_step,
               peak_gflops, a.profile};
  job.adapt_threads = a.threads == 0 && num_threads() > 1;
  job.membership = &membership;
  job.extra_eval = core_metric_hook(a.core_metric_every, a.core_metric_max_per_task, model, tok, comm, regrouped);
  run_train_job(job, comm, faults, feed);
}

}  // namespace

void print_device_lines(const TrainPlan& plan, const Tokenizer& tok, bool master, bool adapt_threads) {
  auto print0 = [master](const std::string& s) { print_line_if(master, s); };
  print0(str_cat("Device: cpu, dtype ", compute_dtype_name(plan.dtype),
                 plan.dtype == ComputeDtype::BFloat16
                     ? " (bf16 matrix products with fp32 accumulation; fp32 weights, optimizer state and the rest)"
                     : "",
                 ", ", num_threads(), " threads per rank, world size ", plan.world_size));
  print0(str_cat("Threads: ", num_threads(), " on CPUs ", cpu_affinity_list(), "; wait policy ", wait_policy_summary(),
                 adapt_threads
                     ? "; fewer while the steps measure faster with fewer (a busy core), --threads N fixes the count"
                     : ""));
  print0("Vocab size: " + with_commas(tok.vocab_size()));
  print0("Model config: " + plan.model.to_json().dump());
}

double measure_and_print_peak(bool master, ComputeDtype dtype) {
  const std::string peak_cache = base_dir() + "/fma_peak.json";
  const PeakKind kind = dtype == ComputeDtype::BFloat16 ? PeakKind::Bf16Dot : PeakKind::Fp32Fma;
  const MfuPeak peak = measure_mfu_peak(num_threads(), peak_cache, kind);
  print_line_if(master, str_cat("Measured ", kind == PeakKind::Bf16Dot ? "bf16 dot-product (vdpbf16ps)" : "fp32 FMA",
                                " peak of this rank: ", static_cast<int64_t>(peak.measured), " GFLOP/s (",
                                fma_peak_isa(kind), ", ", num_threads(),
                                " threads); MFU is reported against the highest peak seen on "
                                "this machine (at least threads x the 1-thread peak, up to the physical cores), ",
                                static_cast<int64_t>(peak.reference), " GFLOP/s (", peak_cache, "), x world size"));
  return peak.reference;
}

void run_train_job(const TrainJob& job, Communicator& comm, const FaultInjector& faults, DataFeed& feed) {
  const int rank = comm.rank();
  const bool master = rank == 0;
  auto print0 = [master](const std::string& s) { print_line_if(master, s); };
  const TrainPlan& plan = job.plan;
  const JobLayout& layout = job.layout;
  // Each step's rows are dealt to the ranks from the one data stream; the job's sync keeps them
  // one model (train/sync.h).
  StepSync& sync = job.sync;
  LoopState st;  // docs/nanochat.md 3.9 loop_state
  if (job.resume_from_step >= 0) st = sync.resume(plan, job.resume_from_step);

  const std::unique_ptr<StepSource> data =
      open_step_source(feed, job.stream, plan, st.loader_state.is_null() ? nullptr : &st.loader_state, st.step, rank);
  // Node 0 can write its checkpoint folder (it writes whole checkpoints), else all stop now.
  prepare_checkpoint_dirs(comm, plan.checkpoint_dir);
  MetricsLog metrics(plan.checkpoint_dir + "/metrics.jsonl", master, job.resume_from_step >= 0 ? st.step : -1);
  if (const std::string line = sync.describe(); !line.empty()) print0(line);
  FixedMembership fixed;
  Membership& membership = job.membership ? *job.membership : fixed;
  membership.started(metrics, master);  // a regrouped elastic job: who left, and how long it took to go on

  TrainContext ctx{plan,
                   layout,
                   job.tok,
                   job.model,
                   sync,
                   *data,
                   metrics,
                   st,
                   faults,
                   job.run_meta,
                   job.peak_gflops,
                   job.profile,
                   job.adapt_threads,
                   membership,
                   job.step_log,
                   job.extra_eval};
  TrainLoop loop(ctx);
  const std::string eval_error = loop.run();

  // End of run: summary and chart.
  print0(str_cat("Total training time: ", st.total_training_time / 60.0, "m"));
  if (job.profile && loop.profiled_steps() > 0)
    for (const auto& l : profile_report_lines(rank, loop.profiled_steps(), loop.profiled_seconds())) print0(l);
  if (std::isfinite(st.min_val_bpb)) print0(str_cat("Minimum validation bpb: ", st.min_val_bpb));
  if (job.step_log.summary && master && loop.stream_state().is_object())
    print0(job.step_log.summary(loop.stream_state()));
  metrics.write_chart(plan.checkpoint_dir + "/report.svg", plan.command + " " + plan.tag);
  print0("Wrote " + plan.checkpoint_dir + "/report.svg and " + metrics.path());
  if (!eval_error.empty()) fail("the final evaluation failed after the weights were saved: ", eval_error);
}

namespace {

// While it lives, a lost peer (Communicator::on_peer_lost) reaches the data feed, so that a wait
// for rank 0's frames, or rank 0's send to the lost rank, ends at once. The communicator outlives
// the feed: the hook holds a state this guard empties.
class FeedLossHook {
 public:
  FeedLossHook(Communicator& comm, DataFeed& feed) : s_(std::make_shared<State>()) {
    s_->feed = &feed;
    comm.on_peer_lost([s = s_](int peer, const std::string& why) {
      std::lock_guard<std::mutex> lk(s->mu);
      if (s->feed) s->feed->peer_lost(peer, why);
    });
  }
  ~FeedLossHook() {
    std::lock_guard<std::mutex> lk(s_->mu);
    s_->feed = nullptr;
  }
  FeedLossHook(const FeedLossHook&) = delete;
  FeedLossHook& operator=(const FeedLossHook&) = delete;

 private:
  struct State {
    std::mutex mu;
    DataFeed* feed = nullptr;
  };
  std::shared_ptr<State> s_;
};

}  // namespace

void run_base_train_job(const BaseTrainArgs& a, Communicator& comm, const FaultInjector& faults,
                        Membership& membership) {
  DataFeed feed = open_data_feed(comm, a.local_data);
  const FeedLossHook feed_loss(comm, feed);
  try {
    train(a, comm, faults, feed, membership);
  } catch (const MembershipChange&) {
    throw;  // the job goes on with another group of ranks (train/elastic.h)
  } catch (const std::exception& e) {
    feed.tell_workers(e.what());  // every node then shows node 0's error
    throw;
  }
}

}  // namespace nanochat
