#include "nanochat/train/trainer.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/peak.h"
#include "nanochat/core/profile.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/data/loader.h"
#include "nanochat/data/manifest.h"
#include "nanochat/data/verify.h"
#include "nanochat/dist/agree.h"
#include "nanochat/dist/startup.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "nanochat/train/eval.h"
#include "nanochat/train/grad_accum.h"
#include "nanochat/train/job_checkpoint.h"
#include "nanochat/train/loop_checkpoint.h"
#include "nanochat/train/metrics_log.h"
#include "nanochat/train/replicas.h"
#include "nanochat/train/report.h"
#include "nanochat/train/sample.h"

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
              {"check_replicas_every", a.check_replicas_every}};
}

std::vector<OptParam> optimizer_params(GPT& model) {
  std::vector<OptParam> ops;
  for (const auto& p : model.params())
    ops.push_back({p.name, p.shape, model.param_data() + p.offset, model.grad_data() + p.offset});
  return ops;
}

// The train loader of this rank; with the one-rank stream every rank reads the world-size-1
// stream and keeps micro-batches r, r+W, ... (LoaderOptions keep_stride).
data::LoaderOptions train_loader_options(const TrainPlan& plan, int rank, bool one_rank_stream) {
  data::LoaderOptions lo;
  lo.B = plan.B;
  lo.T = plan.T;
  lo.rank = one_rank_stream ? 0 : rank;
  lo.world_size = one_rank_stream ? 1 : plan.world_size;
  lo.keep_stride = one_rank_stream ? plan.world_size : 1;
  lo.keep_offset = one_rank_stream ? rank : 0;
  lo.split = "train";
  lo.data_dir = data_dir();
  return lo;
}

// Every rank reads the one-rank val stream and evaluates every W-th batch (evaluate_bpb), so the
// val bpb of given weights does not depend on the world size (and equals base-eval's).
data::LoaderOptions val_loader_options(const TrainPlan& plan) {
  data::LoaderOptions vo;
  vo.B = plan.B;
  vo.T = plan.T;
  vo.split = "val";
  vo.data_dir = data_dir();
  vo.prefetch = false;
  return vo;
}

// One rank's run of base_train after the set-up: the loop and its parts.
class TrainLoop {
 public:
  TrainLoop(const BaseTrainArgs& a, const TrainTestHooks& hooks, Communicator& comm, const Tokenizer& tok,
            const TrainPlan& plan, GPT& model, MuonAdamW& opt, GradAccumulator& accum, data::DataLoader& loader,
            MetricsLog& metrics, LoopState& st, double peak_gflops)
      : a_(a),
        hooks_(hooks),
        comm_(comm),
        tok_(tok),
        plan_(plan),
        model_(model),
        opt_(opt),
        accum_(accum),
        loader_(loader),
        metrics_(metrics),
        st_(st),
        peak_gflops_(peak_gflops),
        token_bytes_(tok.token_bytes()),
        x_(static_cast<size_t>(plan.B) * plan.T),
        y_(x_.size()) {
    run_meta_ = json{{"model_config", plan.model.to_json()},
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
      train_step(plan_.step_plan(step));
      ++st_.step;
    }
  }

  double profiled_seconds() const { return profiled_seconds_; }
  int64_t profiled_steps() const { return profiled_steps_; }

 private:
  void print0(const std::string& s) const { print_if(comm_.rank() == 0, s); }

  void save() {
    st_.loader_state = loader_.state();
    const TestFault& f = hooks_.fault;
    save_checkpoint(comm_, plan_.checkpoint_dir, model_, opt_, run_meta_, st_,
                    f.kind == "write-fail" && f.rank == comm_.rank());
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
      data::DataLoader val_loader(tok_, val_loader_options(plan_), nullptr);
      st_.val_bpb = evaluate_bpb(model_, val_loader, plan_.eval_steps, token_bytes_, comm_);
      st_.min_val_bpb = std::min(st_.min_val_bpb, st_.val_bpb);
      char b[96];
      std::snprintf(b, sizeof b, "Step %05lld | Validation bpb: %.6f", static_cast<long long>(step), st_.val_bpb);
      print0(b);
      metrics_.record({{"step", step}, {"val_bpb", number_or_infinity(st_.val_bpb)}});
    }
    if (a_.sample_every > 0 && comm_.rank() == 0 && (last || (step > 0 && step % a_.sample_every == 0))) {
      SampleOptions so;
      so.max_tokens = 16;
      for (const char* prompt : kSamplePrompts) {
        std::vector<int32_t> ids = tok_.encode(prompt);
        ids.insert(ids.begin(), tok_.bos_id());
        auto gen = generate(model_, ids, so);
        ids.insert(ids.end(), gen.begin(), gen.end());
        print0(tok_.decode(ids));
      }
    }
  }

  // One optimizer step: gradient accumulation over this rank's micro-batches of the step
  // (docs/nanochat.md 3.3), the update, the log line.
  void train_step(const StepPlan& sp) {
    const int64_t step = st_.step;
    prof::enable(a_.profile);
    Timer t;
    const double wait0 = opt_.comm_wait_seconds();
    float train_loss = 0.f;
    for (int64_t micro = 0; micro < sp.of_rank(comm_.rank()); ++micro) {
      {
        prof::Scope data_scope(prof::Op::Data);
        loader_.next(x_.data(), y_.data());
      }
      train_loss = accum_.micro_batch(static_cast<int>(micro), x_.data(), y_.data(), plan_.B, plan_.T);
      if (!std::isfinite(train_loss))
        fail("training diverged at step ", step, " (loss ", train_loss, " on rank ", comm_.rank(),
             "); lower the learning rates or check the data");
    }
    const float grad_scale = accum_.finish();  // 1 / valid tokens of the step over all ranks
    const double lrm = plan_.schedule.lr_multiplier(step);
    const double mom = plan_.schedule.muon_momentum(step);
    const double mwd = plan_.schedule.muon_weight_decay(step, plan_.weight_decay_scaled);
    opt_.step(static_cast<float>(lrm), static_cast<float>(mom), static_cast<float>(mwd), grad_scale);
    model_.zero_grad();
    const TestFault& f = hooks_.fault;
    if (f.kind == "flip-bit" && f.rank == comm_.rank() && f.step == step) flip_lowest_bit(model_, f.tensor);
    const double dt = t.seconds();
    prof::enable(false);
    profiled_seconds_ += dt;
    ++profiled_steps_;
    log_step(train_loss, lrm, dt, opt_.comm_wait_seconds() - wait0);
  }

  // The log line and metrics record of the step just made (docs/nanochat.md 3.10).
  void log_step(float train_loss, double lrm, double dt, double comm_wait) {
    const double ema_beta = 0.9;
    const int64_t step = st_.step, total = plan_.total_batch_size;
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
    r.loader_state = loader_.state();
    r.total_training_time = st_.total_training_time;
    r.world_size = plan_.world_size;
    r.comm_wait = comm_wait;
    print0(step_log_line(r));
    metrics_.record({{"step", step},
                     {"loss", train_loss},
                     {"smooth_loss", r.smooth_loss},
                     {"lrm", lrm},
                     {"dt_ms", dt * 1e3},
                     {"tok_per_sec", r.tok_per_sec},
                     {"mfu", r.mfu},
                     {"comm_wait_ms", comm_wait * 1e3}});
  }

  const BaseTrainArgs& a_;
  const TrainTestHooks& hooks_;
  Communicator& comm_;
  const Tokenizer& tok_;
  const TrainPlan& plan_;
  GPT& model_;
  MuonAdamW& opt_;
  GradAccumulator& accum_;
  data::DataLoader& loader_;
  MetricsLog& metrics_;
  LoopState& st_;
  const double peak_gflops_;
  const int64_t flops_per_token_ = model_.num_flops_per_token();
  const std::vector<int32_t> token_bytes_;
  json run_meta_;
  std::vector<int32_t> x_, y_;
  double profiled_seconds_ = 0.0;  // --profile: wall time of the profiled steps
  int64_t profiled_steps_ = 0;
};

// The start-up lines: run, device, vocab, model, the plan's derivations, the MFU reference peak.
double print_setup_and_measure_peak(const BaseTrainArgs& a, const Tokenizer& tok, const TrainPlan& plan, bool master) {
  auto print0 = [master](const std::string& s) { print_if(master, s); };
  print0("nanochat.cpp base-train");
  print0(str_cat("Device: cpu, dtype float32, ", num_threads(), " threads per rank, world size ", plan.world_size));
  print0(str_cat("Threads: ", num_threads(), " on CPUs ", cpu_affinity_list(), "; wait policy ", wait_policy_summary()));
  print0("Vocab size: " + with_commas(tok.vocab_size()));
  print0("Model config: " + plan.model.to_json().dump());
  for (auto& l : plan.log) print0(l);
  data::check_training_shards(data_dir(), a.skip_data_check, master);  // a corrupt page stops the run here
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
void agree_on_the_job(Communicator& comm, const BaseTrainArgs& a, const Tokenizer& tok, const TrainPlan& plan) {
  json user = args_to_json(a);
  user.erase("threads");  // nodes may legitimately use different thread counts
  dist::agree(comm, {{"model config", plan.model.to_json().dump()},
                     {"batch settings", str_cat("B=", plan.B, " T=", plan.T, " total=", plan.total_batch_size,
                                                " grad_accum=", plan.grad_accum_steps)},
                     {"tokenizer hash", std::to_string(tok.hash())},
                     {"data manifest", data::shard_manifest(data_dir())},  // the directory may differ between nodes
                     {"base-train flags", user.dump()}});
  print_if(comm.rank() == 0,
           str_cat("All ", comm.world_size(), " ranks agree on build, model, batch, tokenizer, data and flags"));
}

}  // namespace

void run_base_train(const BaseTrainArgs& a, Communicator& comm, TrainTestHooks hooks) {
  const int rank = comm.rank(), W = comm.world_size();
  const bool master = rank == 0;
  auto print0 = [master](const std::string& s) { print_if(master, s); };
  if (!a.device_type.empty() && a.device_type != "cpu")
    fail("--device-type ", a.device_type,
         ": nanochat.cpp trains on CPUs only; use --device-type cpu or leave it unset");
  if (a.fp8) print0("WARNING: --fp8 is CUDA-only in nanochat; ignored on CPU (training runs in fp32)");
  if (a.threads > 0) set_num_threads(a.threads);
  hooks.fault = test_fault_from_env();

  // Tokenizer, derived plan, start-up report.
  const Tokenizer tok = Tokenizer::load(tokenizer_dir());
  const TrainPlan plan = derive_plan(a, tok.vocab_size(), W, base_dir());
  const double peak_gflops = print_setup_and_measure_peak(a, tok, plan, master);

  // Model and optimizer (docs/nanochat.md 2.1: lrs x batch_lr_scale, Muon wd scaled; TrainPlan::optim).
  GPT model(plan.model);
  model.init_weights(a.seed);
  model.set_recompute_mlp(a.recompute_mlp);
  MuonAdamW opt(optimizer_params(model), plan.optim, &comm);
  // Token-weighted gradient accumulation with world-size-independent sums of the small tensors;
  // on the last micro-batch each finished gradient starts its reduction (grad_accum.h).
  GradAccumulator accum(
      model, static_cast<int>(plan.grad_accum_steps), comm,
      W > 1 ? std::function<void(size_t)>([&opt](size_t k) { opt.grad_ready(k); }) : std::function<void(size_t)>());
  print0(plan.dmodel_lr_scale_line());
  prof::reset();

  // Before the first collective: a rank slow to start is waited for (NANOCHAT_STARTUP_TIMEOUT) and
  // named, instead of failing the others at the collective timeout (dist/startup.h).
  dist::startup_barrier(comm, "train");
  const bool one_rank_stream = hooks.loader_global_stream && W > 1;
  LoopState st;  // docs/nanochat.md 3.9 loop_state
  if (a.resume_from_step >= 0) st = resume(comm, plan, a.resume_from_step, model, opt, hooks.loader_global_stream);

  data::DataLoader train_loader(tok, train_loader_options(plan, rank, one_rank_stream),
                                st.loader_state.is_null() ? nullptr : &st.loader_state);
  if (W > 1) agree_on_the_job(comm, a, tok, plan);
  // Every rank can write its checkpoint folder (nodes need not share one), else all stop now.
  prepare_checkpoint_dirs(comm, plan.checkpoint_dir);
  MetricsLog metrics(plan.checkpoint_dir + "/metrics.jsonl", master, a.resume_from_step >= 0 ? st.step : -1);

  TrainLoop loop(a, hooks, comm, tok, plan, model, opt, accum, train_loader, metrics, st, peak_gflops);
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

}  // namespace nanochat
