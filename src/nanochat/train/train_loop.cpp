#include "nanochat/train/train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "nanochat/checkpoint/job_checkpoint.h"
#include "nanochat/checkpoint/loop_checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/profile.h"
#include "nanochat/engine/engine.h"
#include "nanochat/engine/sample_prompts.h"
#include "nanochat/eval/bpb.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "nanochat/train/balance.h"
#include "nanochat/train/membership.h"
#include "nanochat/train/metrics_log.h"

using json = nlohmann::json;

namespace nanochat {

TrainLoop::TrainLoop(TrainContext& c)
    : c_(c),
      plan_(c.plan),
      model_(c.model),
      sync_(c.sync),
      st_(c.st),
      loader_state_(c.data.initial_state()),
      last_saved_(c.plan.cadence.resume_step),
      flops_per_token_(c.model.num_flops_per_token()),
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
std::string TrainLoop::run() {
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

std::string TrainLoop::run_steps() {
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
void TrainLoop::admit_joiners() {
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
void TrainLoop::keep_copy_if_due() {
  if (!plan_.cadence.copy_at(st_.step) || !sync_.in_sync(st_.step) || st_.step >= plan_.num_iterations) return;
  LoopState s = st_;
  s.loader_state = loader_state_;
  phase_ = "sending node 0 the copy of the job's state";
  sync_.keep_copy(c_.run_meta, s);
  copied_ = st_.step;
}

// Whether `step` ends the run (it is not trained): its number, or, when the data stream ends the
// run, its rows, read here before its evaluation and save (TrainPlan::run_end).
bool TrainLoop::is_last(int64_t step) {
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
void TrainLoop::prefetch(int64_t step) {
  if (pending_) return;
  Timer td;
  pending_ = std::make_unique<StepRows>(c_.data.next(step));
  pending_data_s_ = td.seconds();
}

void TrainLoop::save() {
  st_.loader_state = loader_state_;
  sync_.save(plan_.checkpoint_dir, c_.run_meta, st_, c_.faults);
  last_saved_ = st_.step;
}

// Why the job stops, on every rank: the step and what it was doing, the lost peer (e), and what
// node 0 holds: the last checkpoint (the steps after it are lost) and the command that resumes.
std::string TrainLoop::peer_lost_message(const PeerLost& e) const {
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
                    "): the ", step,
                    " steps trained are lost; with --save-every N a lost node costs at most N steps, with "
                    "--copy-state-every N too but without writing files (node 0 keeps a copy in memory)");
  // when the data ends the run (chat-sft), its step count is not known in advance
  const std::string of = plan_.run_end == RunEnd::Stream ? std::string() : str_cat(" of ", plan_.num_iterations);
  return str_cat("the job stopped in step ", step, of, " (", phase_, ") because a node left: ", e.what(), ". ", saved);
}

// The last step is saved BEFORE the final evaluation: a failure there (or a rank lost during
// it) must not lose the weights. Its meta then gets the final val bpb.
std::string TrainLoop::finish_last_step() {
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
void TrainLoop::evaluate_and_sample(bool last) {
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
void TrainLoop::run_micro_batches(const StepRows& rows, const StepShare& share, RankStep& my) {
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
void TrainLoop::train_step() {
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
void TrainLoop::adapt_threads(const StepShare& share, const RankStep& my, const Timer& step_timer) {
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
void TrainLoop::note_a_rank_that_slows_the_job(const StepStats& s) {
  const std::vector<RankStep>& all = s.ranks;
  // (a mode with an outer step: a slow rank costs its round, not each step; its advice would mislead)
  if (all.size() < 2 || noted_slow_rank_ || st_.step < 5 || !s.times_of_this_step) return;
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
void TrainLoop::log_step(const StepStats& s, double lrm) {
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
  r.times_of_this_step = s.times_of_this_step;
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

void TrainLoop::print0(const std::string& s) const { print_line_if(sync_.rank() == 0, s); }

}  // namespace nanochat
