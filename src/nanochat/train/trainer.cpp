#include "nanochat/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/peak.h"
#include "nanochat/core/profile.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/data/manifest.h"
#include "nanochat/data/verify.h"
#include "nanochat/dist/agree.h"
#include "nanochat/dist/startup.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "nanochat/train/balance.h"
#include "nanochat/train/eval.h"
#include "nanochat/train/grad_accum.h"
#include "nanochat/train/job_checkpoint.h"
#include "nanochat/train/loop_checkpoint.h"
#include "nanochat/train/metrics_log.h"
#include "nanochat/train/replicas.h"
#include "nanochat/train/report.h"
#include "nanochat/train/step_source.h"

using json = nlohmann::json;

namespace nanochat {

namespace {

// The seven prompts base_train samples greedily (docs/nanochat.md 3.7).
const char* const kSamplePrompts[] = {
    "The capital of France is",
    "The chemical symbol of gold is",
    "If yesterday was Friday, then tomorrow will be",
    "The opposite of hot is",
    "The planets of the solar system are:",
    "My favorite color is",
    "If 5*x + 3 = 13, then x is",
};

// Rank 0's output: a line on stdout, flushed (the other ranks print nothing).
void print_if(bool master, const std::string& s) {
  if (!master) return;
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

json args_to_json(const BaseTrainArgs& a) {
  return json{{"run", a.run},
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
              {"local_data", a.local_data}};
}

std::vector<OptParam> optimizer_params(GPT& model) {
  std::vector<OptParam> ops;
  for (const auto& p : model.params())
    ops.push_back({p.name, p.shape, model.param_data() + p.offset, model.grad_data() + p.offset});
  return ops;
}

// Every rank's --device-batch-size, in rank order.
std::vector<int> gather_device_batches(Communicator& comm, int B) {
  std::vector<double> all(static_cast<size_t>(comm.world_size()), 0.0);
  all[static_cast<size_t>(comm.rank())] = B;
  comm.all_reduce_sum_f64(all.data(), all.size())->wait();
  return std::vector<int>(all.begin(), all.end());
}

// One rank's part of a step, gathered to every rank after the step (all_reduce of disjoint slots).
struct StepTimes {
  double rows = 0;         // rows run
  double compute = 0;      // forward+backward seconds
  double opt_compute = 0;  // optimizer seconds not spent waiting
  double data = 0;         // seconds reading the stream
  double dt = 0;           // the step's wall seconds
  double last_loss = 0;    // loss of its last micro-batch
  static constexpr size_t kFields = 6;
};

std::vector<StepTimes> gather_step_times(Communicator& comm, const StepTimes& mine) {
  const size_t W = static_cast<size_t>(comm.world_size()), F = StepTimes::kFields;
  std::vector<double> all(W * F, 0.0);
  const double v[F] = {mine.rows, mine.compute, mine.opt_compute, mine.data, mine.dt, mine.last_loss};
  std::copy(v, v + F, all.begin() + static_cast<int64_t>(static_cast<size_t>(comm.rank()) * F));
  if (W > 1) comm.all_reduce_sum_f64(all.data(), all.size())->wait();
  std::vector<StepTimes> out(W);
  for (size_t r = 0; r < W; ++r) {
    const double* x = all.data() + r * F;
    out[r] = StepTimes{x[0], x[1], x[2], x[3], x[4], x[5]};
  }
  return out;
}

// One rank's run of base_train after the set-up: the loop and its parts.
class TrainLoop {
 public:
  TrainLoop(const BaseTrainArgs& a, const TrainTestHooks& hooks, Communicator& comm, const Tokenizer& tok,
            const TrainPlan& plan, GPT& model, MuonAdamW& opt, GradAccumulator& accum, StepBalancer& balancer,
            StepSource& data, MetricsLog& metrics, LoopState& st, double peak_gflops, int eval_B)
      : a_(a),
        hooks_(hooks),
        comm_(comm),
        tok_(tok),
        plan_(plan),
        model_(model),
        opt_(opt),
        accum_(accum),
        balancer_(balancer),
        data_(data),
        metrics_(metrics),
        st_(st),
        peak_gflops_(peak_gflops),
        eval_B_(eval_B),
        eval_steps_(std::max<int64_t>(1, a.eval_tokens / (static_cast<int64_t>(eval_B) * plan.T))),
        token_bytes_(tok.token_bytes()),
        x_(static_cast<size_t>(plan.B) * plan.T),
        y_(x_.size()) {
    run_meta_ = json{{"model_config", plan.model.to_json()},
                     {"data_stream", "one-rank"},
                     {"user_config", args_to_json(a)},
                     {"device_batch_size", plan.B},
                     {"max_seq_len", plan.T},
                     {"total_batch_size", plan.total_batch_size},
                     {"world_size", plan.world_size},
                     {"tokenizer_hash", std::to_string(tok.hash())}};
  }

  // Steps until num_iterations (nanochat base_train.py's while loop); the last step is saved and
  // evaluated. Returns the final evaluation's error ("" = none).
  std::string run() {
    for (;;) {
      const int64_t step = st_.step;
      const bool last = step == plan_.num_iterations;
      const bool save_now =
          last || (step > 0 && step != a_.resume_from_step && a_.save_every > 0 && step % a_.save_every == 0);
      // 1. the replicas are still identical (and a checkpoint never stores one rank's fault)
      if (a_.check_replicas_every > 0 && (save_now || (step > 0 && step % a_.check_replicas_every == 0)))
        check_replicas(model_, comm_, step);
      if (last) return finish_last_step();
      // 2. val bpb and samples, 3. checkpoint, 4. one optimizer step
      evaluate_and_sample(false);
      if (save_now) save();
      train_step();
      ++st_.step;
    }
  }

  double profiled_seconds() const { return profiled_seconds_; }
  int64_t profiled_steps() const { return profiled_steps_; }

 private:
  void print0(const std::string& s) const { print_if(comm_.rank() == 0, s); }

  void save() {
    st_.loader_state = loader_state_;
    const TestFault& f = hooks_.fault;
    save_checkpoint(comm_, plan_.checkpoint_dir, model_, opt_, run_meta_, st_,
                    f.kind == "write-fail" && f.rank == comm_.rank(), f.kind == "save-stall" && f.step == st_.step);
  }

  // The last step is saved BEFORE the final evaluation: a failure there (or a rank lost during
  // it) must not lose the weights. Its meta then gets the final val bpb.
  std::string finish_last_step() {
    const bool final_eval = a_.eval_every > 0;
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
    if (final_eval && comm_.rank() == 0 && eval_error.empty())
      rewrite_checkpoint_meta(CheckpointPaths{plan_.checkpoint_dir, st_.step}, checkpoint_meta(run_meta_, st_));
    return eval_error;
  }

  // val bpb and (rank 0) greedy samples of the prompts.
  void evaluate_and_sample(bool last) {
    const int64_t step = st_.step;
    if (last && hooks_.fault_inject == "final-eval") fail("fault injected into the final evaluation (--fault-inject)");
    if (a_.eval_every > 0 && (last || step % a_.eval_every == 0)) {
      st_.val_bpb = evaluate_bpb(model_, data_.val_reader(eval_B_), eval_B_, plan_.T, eval_steps_, token_bytes_, comm_);
      st_.min_val_bpb = std::min(st_.min_val_bpb, st_.val_bpb);
      char b[96];
      std::snprintf(b, sizeof b, "Step %05lld | Validation bpb: %.6f", static_cast<long long>(step), st_.val_bpb);
      print0(b);
      metrics_.record({{"step", step}, {"val_bpb", number_or_infinity(st_.val_bpb)}});
    }
    if (a_.sample_every > 0 && comm_.rank() == 0 && (last || (step > 0 && step % a_.sample_every == 0))) {
      // nanochat's base_train: Engine.generate_batch, one greedy row of at most 16 tokens
      Engine engine(model_, tok_);
      GenerateOptions go;
      go.max_tokens = 16;
      go.temperature = 0;
      for (const char* prompt : kSamplePrompts) {
        std::vector<int32_t> ids = tok_.encode(prompt);
        ids.insert(ids.begin(), tok_.bos_id());
        const std::vector<int32_t> gen = engine.generate(ids, go).rows[0].tokens;
        ids.insert(ids.end(), gen.begin(), gen.end());
        print0(tok_.decode(ids));
      }
    }
  }

  // This rank's micro-batches of the step (the rows the balancer gave it), timed.
  void run_micro_batches(const StepRows& rows, StepTimes& my) {
    const int64_t step = st_.step;
    const int rank = comm_.rank();
    const std::vector<int> mine = balancer_.micro_batches(rank);
    const TestFault& f = hooks_.fault;
    int64_t next_row = balancer_.first_row(rank);
    for (size_t micro = 0; micro < mine.size(); ++micro) {
      split_rows(rows.rows.data() + static_cast<size_t>(next_row) * (static_cast<size_t>(plan_.T) + 1), mine[micro],
                 plan_.T, x_.data(), y_.data());
      next_row += mine[micro];
      Timer tc;
      const float loss = accum_.micro_batch(static_cast<int>(micro), x_.data(), y_.data(), mine[micro], plan_.T);
      if (f.kind == "slow" && f.rank == rank)  // tests: a machine f.amount times slower
        std::this_thread::sleep_for(std::chrono::duration<double>((f.amount - 1) * tc.seconds()));
      my.compute += tc.seconds();
      my.rows += mine[micro];
      my.last_loss = loss;
      if (!std::isfinite(loss))
        fail("training diverged at step ", step, " (loss ", loss, " on rank ", rank,
             "); lower the learning rates or check the data");
    }
  }

  // One optimizer step: this rank's share of the step's rows (train/balance.h) with gradient
  // accumulation (docs/nanochat.md 3.3), the update, the times of every rank, the log line, and
  // the split of the next step.
  void train_step() {
    const int64_t step = st_.step;
    const int rank = comm_.rank();
    prof::enable(a_.profile);
    Timer t;
    StepTimes my;
    accum_.begin_step(balancer_.micro_batch_counts());
    StepRows rows;
    {
      prof::Scope data_scope(prof::Op::Data);
      Timer td;
      rows = data_.next(step);  // the whole step's rows; this rank runs its part of them
      my.data = td.seconds();
    }
    loader_state_ = std::move(rows.loader_state);
    run_micro_batches(rows, my);
    const float grad_scale = accum_.finish();  // 1 / valid tokens of the step over all ranks
    const double lrm = plan_.schedule.lr_multiplier(step);
    const double mom = plan_.schedule.muon_momentum(step);
    const double mwd = plan_.schedule.muon_weight_decay(step, plan_.weight_decay_scaled);
    const double opt_wait0 = opt_.comm_wait_seconds();
    Timer to;
    opt_.step(static_cast<float>(lrm), static_cast<float>(mom), static_cast<float>(mwd), grad_scale);
    my.opt_compute = to.seconds() - (opt_.comm_wait_seconds() - opt_wait0);
    model_.zero_grad();
    const TestFault& f = hooks_.fault;
    if (f.kind == "flip-bit" && f.rank == rank && f.step == step) flip_lowest_bit(model_, f.tensor);
    my.dt = t.seconds();
    prof::enable(false);
    profiled_seconds_ += my.dt;
    ++profiled_steps_;
    const std::vector<StepTimes> all = gather_step_times(comm_, my);
    const std::vector<int64_t> split = balancer_.rows();
    log_step(all, split, lrm);
    std::vector<RankStepTimes> times;
    for (const StepTimes& x : all) times.push_back({x.rows, x.compute});
    if (balancer_.observe(times))
      print0(str_cat("Rows per rank from step ", step + 1, " on: ", split_percentages(balancer_.rows()),
                     " (measured speeds, rows/s: ", speeds_text(), ")"));
    rebalance_optimizer(step);
    note_a_rank_that_slows_the_job(all);
  }

  // The optimizer's share of each rank follows the same measured speeds (optim/muon_adamw.h
  // rebalance, with its own hysteresis); the state that changes owner moves between the ranks.
  void rebalance_optimizer(int64_t step) {
    if (a_.balance == "even" || comm_.world_size() < 2) return;
    Timer t;
    if (!opt_.rebalance(balancer_.speeds())) return;
    const double seconds = t.seconds();  // outside every step's time: said here
    const std::vector<double> work = opt_.work_per_rank(opt_.layout());
    std::vector<int64_t> parts;
    for (double w : work) parts.push_back(static_cast<int64_t>(w));
    print0(str_cat("Optimizer work per rank from step ", step + 1, " on: ", split_percentages(parts), " (moved ",
                   fixed(static_cast<double>(opt_.last_moved_floats()) * 4e-6, 1),
                   " MB of optimizer state on rank 0 in ", fixed(seconds, 2), " s)"));
  }

  std::string speeds_text() const {
    std::string s;
    for (size_t r = 0; r < balancer_.speeds().size(); ++r)
      s += str_cat(r ? " / " : "", fixed(balancer_.speeds()[r], 1));
    return s;
  }

  // Once, when the others alone would be faster than the whole job (measured, after warm-up).
  void note_a_rank_that_slows_the_job(const std::vector<StepTimes>& all) {
    if (all.size() < 2 || noted_slow_rank_ || st_.step < 5) return;
    dt_ema_ = dt_ema_ > 0 ? 0.7 * dt_ema_ + 0.3 * all[0].dt : all[0].dt;
    if (st_.step < 8) return;
    std::vector<double> opt;
    for (const StepTimes& x : all) opt.push_back(x.opt_compute);
    const int64_t R = plan_.total_batch_size / plan_.T;
    const FasterWithout f = faster_without(balancer_.speeds(), opt, R, dt_ema_);
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
  // one of the step's last micro-batch in stream order (at W = 1 nanochat's: its last micro-batch).
  void log_step(const std::vector<StepTimes>& all, const std::vector<int64_t>& split, double lrm) {
    const double ema_beta = 0.9;
    const int64_t step = st_.step, total = plan_.total_batch_size;
    float train_loss = 0.f;
    for (size_t r = 0; r < all.size(); ++r)
      if (split[r] > 0) train_loss = static_cast<float>(all[r].last_loss);
    const double dt = all[0].dt;
    st_.smooth_train_loss = ema_beta * st_.smooth_train_loss + (1 - ema_beta) * train_loss;
    StepReport r;
    r.step = step;
    r.num_iterations = plan_.num_iterations;
    r.smooth_loss = st_.smooth_train_loss / (1 - std::pow(ema_beta, static_cast<double>(step + 1)));
    r.lrm = lrm;
    r.dt = dt;
    r.tok_per_sec = static_cast<int64_t>(static_cast<double>(total) / dt);
    r.mfu = 100.0 * static_cast<double>(flops_per_token_) * static_cast<double>(total) / dt /
            (peak_gflops_ * 1e9 * plan_.world_size);
    if (step > 10) st_.total_training_time += dt;
    r.loader_state = loader_state_;
    r.total_training_time = st_.total_training_time;
    r.world_size = plan_.world_size;
    json rank_rows = json::array(), rank_compute = json::array(), rank_wait = json::array(), rank_data = json::array(),
         rank_tok = json::array();
    for (size_t q = 0; q < all.size(); ++q) {
      const StepTimes& x = all[q];
      const double compute = x.compute + x.opt_compute;
      const double wait = std::max(0.0, x.dt - compute - x.data);
      r.ranks.push_back({static_cast<double>(split[q]) / static_cast<double>(total / plan_.T), compute, wait,
                         static_cast<int64_t>(x.rows * plan_.T / x.dt)});
      rank_rows.push_back(split[q]);
      rank_compute.push_back(compute * 1e3);
      rank_wait.push_back(wait * 1e3);
      rank_data.push_back(x.data * 1e3);
      rank_tok.push_back(r.ranks.back().tok_per_sec);
    }
    r.comm_wait = r.ranks[0].wait;
    print0(step_log_line(r));
    json rec = {{"step", step},
                {"loss", train_loss},
                {"smooth_loss", r.smooth_loss},
                {"lrm", lrm},
                {"dt_ms", dt * 1e3},
                {"tok_per_sec", r.tok_per_sec},
                {"mfu", r.mfu},
                {"comm_wait_ms", r.comm_wait * 1e3}};
    if (all.size() > 1) {
      rec["rank_rows"] = rank_rows;
      rec["rank_compute_ms"] = rank_compute;
      rec["rank_wait_ms"] = rank_wait;
      rec["rank_data_ms"] = rank_data;
      rec["rank_tok_per_sec"] = rank_tok;
    }
    metrics_.record(rec);
  }

  const BaseTrainArgs& a_;
  const TrainTestHooks& hooks_;
  Communicator& comm_;
  const Tokenizer& tok_;
  const TrainPlan& plan_;
  GPT& model_;
  MuonAdamW& opt_;
  GradAccumulator& accum_;
  StepBalancer& balancer_;
  StepSource& data_;
  json loader_state_ = data_.initial_state();  // after the last step trained
  MetricsLog& metrics_;
  LoopState& st_;
  const double peak_gflops_;
  const int eval_B_;          // the smallest device batch of the job
  const int64_t eval_steps_;  // val batches of eval_B_ x T per evaluation
  bool noted_slow_rank_ = false;
  double dt_ema_ = 0;
  const int64_t flops_per_token_ = model_.num_flops_per_token();
  const std::vector<int32_t> token_bytes_;
  json run_meta_;
  std::vector<int32_t> x_, y_;
  double profiled_seconds_ = 0.0;  // --profile: wall time of the profiled steps
  int64_t profiled_steps_ = 0;
};

// The start-up lines: run, device, vocab, model, the plan's derivations, the MFU reference peak.
// `reads_data`: this rank reads the shards (it checks them first).
double print_setup_and_measure_peak(const BaseTrainArgs& a, const Tokenizer& tok, const TrainPlan& plan, bool master,
                                    bool reads_data) {
  auto print0 = [master](const std::string& s) { print_if(master, s); };
  print0("nanochat.cpp base-train");
  print0(str_cat("Device: cpu, dtype float32, ", num_threads(), " threads per rank, world size ", plan.world_size));
  print0(
      str_cat("Threads: ", num_threads(), " on CPUs ", cpu_affinity_list(), "; wait policy ", wait_policy_summary()));
  print0("Vocab size: " + with_commas(tok.vocab_size()));
  print0("Model config: " + plan.model.to_json().dump());
  for (auto& l : plan.log) print0(l);
  if (reads_data) data::check_training_shards(data_dir(), a.skip_data_check, master);  // a corrupt page stops here
  if (a.core_metric_every > 0)
    print0(
        "NOTE: the CORE metric (--core-metric-every) needs nanochat's DCLM eval bundle and is not "
        "implemented in nanochat.cpp; it is skipped. Pass --core-metric-every -1 to silence this.");
  const std::string peak_cache = base_dir() + "/fma_peak.json";
  const MfuPeak peak = measure_mfu_peak(num_threads(), peak_cache);
  print0(str_cat("Measured fp32 FMA peak of this rank: ", static_cast<int64_t>(peak.measured), " GFLOP/s (",
                 fma_peak_isa(), ", ", num_threads(),
                 " threads); MFU is reported against the highest peak seen on "
                 "this machine (at least threads x the 1-thread peak, up to the physical cores), ",
                 static_cast<int64_t>(peak.reference), " GFLOP/s (", peak_cache, "), x world size"));
  return peak.reference;
}

// Startup agreement (docs/architecture.md 3.10): one clear error on every rank if anything differs.
// `local_data`: every node reads its own shards, so their content must agree too.
void agree_on_the_job(Communicator& comm, const BaseTrainArgs& a, const Tokenizer& tok, const TrainPlan& plan,
                      bool local_data) {
  json user = args_to_json(a);
  user.erase("threads");            // nodes may use different thread counts
  user.erase("device_batch_size");  // and micro-batch sizes (a node with less memory runs smaller ones)
  std::map<std::string, std::string> facts = {
      {"model config", plan.model.to_json().dump()},
      {"batch settings", str_cat("T=", plan.T, " total=", plan.total_batch_size)},
      {"tokenizer hash", std::to_string(tok.hash())},
      {"base-train flags", user.dump()}};
  if (local_data) {
    // The shards' names, sizes, row groups and CRC-32s, never the directory's path (nodes may keep
    // their copies anywhere). Hashing a new corpus may take a while: the others wait at a barrier
    // with a deadline that names the slow rank, not at the collectives of dist::agree.
    facts["data manifest"] = data::shard_manifest(data_dir());
    dist::startup_barrier(comm, "data manifest");
  }
  dist::agree(comm, facts);
  print_if(comm.rank() == 0, str_cat("All ", comm.world_size(), " ranks agree on build, model, batch, tokenizer, ",
                                     local_data ? "data and flags" : "and flags; node 0 serves the data"));
}

void train(const BaseTrainArgs& a, Communicator& comm, TrainTestHooks& hooks, DataFeed& feed) {
  const int rank = comm.rank(), W = comm.world_size();
  const bool master = rank == 0;
  auto print0 = [master](const std::string& s) { print_if(master, s); };

  // Tokenizer, derived plan, start-up report.
  const Tokenizer tok = load_tokenizer(feed);
  const TrainPlan plan = derive_plan(a, tok.vocab_size(), W, base_dir());
  const double peak_gflops = print_setup_and_measure_peak(a, tok, plan, master, !feed.client);
  if (feed.server)
    print0(str_cat("Data: node 0 reads ", data_dir(), " and sends every rank its rows (port ", feed.port(),
                   "); --local-data makes every node read its own copy"));

  // Model and optimizer (docs/nanochat.md 2.1: lrs x batch_lr_scale, Muon wd scaled; TrainPlan::optim).
  GPT model(plan.model);
  model.init_weights(a.seed);
  model.set_recompute_mlp(a.recompute_mlp);
  MuonAdamW opt(optimizer_params(model), plan.optim, &comm);
  print0(plan.dmodel_lr_scale_line());
  prof::reset();

  // Before the first collective: a rank slow to start is waited for (NANOCHAT_STARTUP_TIMEOUT) and
  // named, instead of failing the others at the collective timeout (dist/startup.h).
  dist::startup_barrier(comm, "train");
  // Each step's rows are dealt to the ranks by speed (or evenly) from the one data stream.
  const std::vector<int> device_batches = gather_device_batches(comm, plan.B);
  StepBalancer balancer(device_batches, plan.total_batch_size / plan.T,
                        {a.balance == "even" ? StepBalancer::Mode::Even : StepBalancer::Mode::Speed});
  // Token-weighted gradient accumulation with world-size- and split-independent sums of the small
  // tensors; on the last micro-batch each finished gradient starts its reduction (grad_accum.h).
  GradAccumulator accum(
      model, static_cast<int>(balancer.max_micro_batches()), comm,
      W > 1 ? std::function<void(size_t)>([&opt](size_t k) { opt.grad_ready(k); }) : std::function<void(size_t)>());
  LoopState st;  // docs/nanochat.md 3.9 loop_state
  if (a.resume_from_step >= 0) st = resume(comm, plan, a.resume_from_step, model, opt);

  const std::unique_ptr<StepSource> data =
      open_step_source(feed, tok, plan, st.loader_state.is_null() ? nullptr : &st.loader_state, st.step, rank);
  if (W > 1) agree_on_the_job(comm, a, tok, plan, !feed.server && !feed.client);
  // Node 0 can write its checkpoint folder (it writes whole checkpoints), else all stop now.
  prepare_checkpoint_dirs(comm, plan.checkpoint_dir);
  MetricsLog metrics(plan.checkpoint_dir + "/metrics.jsonl", master, a.resume_from_step >= 0 ? st.step : -1);
  if (W > 1)
    print0(str_cat("Rows per step: ", plan.total_batch_size / plan.T, ", dealt ",
                   a.balance == "even" ? "evenly" : "by measured speed", "; device batch per rank: ",
                   json(device_batches).dump(), "; first split ", split_percentages(balancer.rows())));

  const int eval_B = *std::min_element(device_batches.begin(), device_batches.end());
  TrainLoop loop(a, hooks, comm, tok, plan, model, opt, accum, balancer, *data, metrics, st, peak_gflops, eval_B);
  const std::string eval_error = loop.run();

  // End of run: summary and chart.
  print0(str_cat("Total training time: ", st.total_training_time / 60.0, "m"));
  if (a.profile && loop.profiled_steps() > 0)
    for (const auto& l : profile_report_lines(rank, loop.profiled_steps(), loop.profiled_seconds())) print0(l);
  if (std::isfinite(st.min_val_bpb)) print0(str_cat("Minimum validation bpb: ", st.min_val_bpb));
  metrics.write_chart(plan.checkpoint_dir + "/report.svg", "base-train " + plan.tag);
  print0("Wrote " + plan.checkpoint_dir + "/report.svg and " + metrics.path());
  if (!eval_error.empty()) fail("the final evaluation failed after the weights were saved: ", eval_error);
}

}  // namespace

void run_base_train(const BaseTrainArgs& a, Communicator& comm, TrainTestHooks hooks) {
  if (!a.device_type.empty() && a.device_type != "cpu")
    fail("--device-type ", a.device_type,
         ": nanochat.cpp trains on CPUs only; use --device-type cpu or leave it unset");
  if (a.fp8)
    print_if(comm.rank() == 0, "WARNING: --fp8 is CUDA-only in nanochat; ignored on CPU (training runs in fp32)");
  if (a.threads > 0) set_num_threads(a.threads);
  hooks.fault = test_fault_from_env();
  DataFeed feed = open_data_feed(comm, a.local_data);
  try {
    train(a, comm, hooks, feed);
  } catch (const std::exception& e) {
    feed.tell_workers(e.what());  // every node then shows node 0's error
    throw;
  }
}

}  // namespace nanochat
