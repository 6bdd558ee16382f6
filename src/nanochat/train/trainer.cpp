#include "nanochat/train/trainer.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/peak.h"
#include "nanochat/core/timer.h"
#include "nanochat/core/profile.h"
#include "nanochat/data/loader.h"
#include "nanochat/data/parquet.h"
#include "nanochat/data/verify.h"
#include "nanochat/dist/agree.h"
#include "nanochat/dist/startup.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/threads.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "nanochat/train/chart.h"
#include "nanochat/train/checkpoint.h"
#include "nanochat/train/eval.h"
#include "nanochat/train/grad_accum.h"
#include "nanochat/train/job_checkpoint.h"
#include "nanochat/train/replicas.h"
#include "nanochat/train/sample.h"
#include "nanochat/train/schedules.h"
#include "nanochat/train/test_fault.h"

namespace fs = std::filesystem;
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


json args_to_json(const BaseTrainArgs& a) {
  return json{{"run", a.run}, {"device_type", a.device_type}, {"fp8", a.fp8}, {"fp8_recipe", a.fp8_recipe},
              {"depth", a.depth}, {"aspect_ratio", a.aspect_ratio}, {"head_dim", a.head_dim},
              {"max_seq_len", a.max_seq_len}, {"window_pattern", a.window_pattern},
              {"num_iterations", a.num_iterations}, {"target_flops", a.target_flops},
              {"target_param_data_ratio", a.target_param_data_ratio}, {"device_batch_size", a.device_batch_size},
              {"total_batch_size", a.total_batch_size}, {"embedding_lr", a.embedding_lr},
              {"unembedding_lr", a.unembedding_lr}, {"weight_decay", a.weight_decay}, {"matrix_lr", a.matrix_lr},
              {"scalar_lr", a.scalar_lr}, {"warmup_steps", a.warmup_steps}, {"warmdown_ratio", a.warmdown_ratio},
              {"final_lr_frac", a.final_lr_frac}, {"resume_from_step", a.resume_from_step},
              {"eval_every", a.eval_every}, {"eval_tokens", a.eval_tokens},
              {"core_metric_every", a.core_metric_every}, {"core_metric_max_per_task", a.core_metric_max_per_task},
              {"sample_every", a.sample_every}, {"save_every", a.save_every}, {"model_tag", a.model_tag},
              {"threads", a.threads}, {"seed", a.seed},
              {"check_replicas_every", a.check_replicas_every}};
}

// Python's json writes float('inf') as the bare token Infinity; nlohmann writes null. Keep a
// number: nanochat reads min_val_bpb back, we store a string "Infinity" for inf.
json num_or_inf(double v) {
  if (std::isinf(v)) return "Infinity";
  if (std::isnan(v)) return nullptr;
  return v;
}
double from_num_or_inf(const json& j) {
  if (j.is_string()) return std::numeric_limits<double>::infinity();
  if (j.is_null()) return std::numeric_limits<double>::quiet_NaN();
  return j.get<double>();
}

// Broadcasts a string from `root` to every rank (length first, then bytes).
void broadcast_string(Communicator& comm, std::string& s, int root) {
  uint64_t n = s.size();
  comm.broadcast(&n, sizeof n, root)->wait();
  s.resize(n);
  if (n) comm.broadcast(s.data(), n, root)->wait();
}

// Names, splits, sizes and row-group counts of the shards: ranks must train on the same data.
// A JSON object keyed by file name, so the agreement lists exactly the files that differ.
std::string data_manifest(const std::string& dir) {
  json m = json::object();
  for (const char* split : {"train", "val"})
    for (const auto& f : data::split_files(dir, split)) {
      data::ParquetReader r(f);
      m[fs::path(f).filename().string()] = {{"split", split}, {"bytes", r.file_size()}, {"row_groups", r.num_row_groups()}};
    }
  return m.dump();
}

}  // namespace

void run_base_train(const BaseTrainArgs& a, Communicator& comm) {
  const int rank = comm.rank(), W = comm.world_size();
  const bool master = rank == 0;
  auto print0 = [&](const std::string& s) {
    if (master) {
      std::printf("%s\n", s.c_str());
      std::fflush(stdout);
    }
  };
  if (!a.device_type.empty() && a.device_type != "cpu")
    fail("--device-type ", a.device_type, ": nanochat.cpp trains on CPUs only; use --device-type cpu or leave it unset");
  if (a.fp8) print0("WARNING: --fp8 is CUDA-only in nanochat; ignored on CPU (training runs in fp32)");
  if (a.threads > 0) set_num_threads(a.threads);
  const TestFault fault = test_fault_from_env();

  // Tokenizer and derived plan.
  const Tokenizer tok = Tokenizer::load(tokenizer_dir());
  TrainPlan plan = derive_plan(a, tok.vocab_size(), W);
  const ModelConfig& cfg = plan.model;
  const int B = a.device_batch_size, T = a.max_seq_len;

  print0("nanochat.cpp base-train");
  print0(str_cat("Device: cpu, dtype float32, ", num_threads(), " threads per rank, world size ", W));
  print0("Vocab size: " + with_commas(tok.vocab_size()));
  print0("Model config: " + cfg.to_json().dump());
  for (auto& l : plan.log) print0(l);
  data::check_training_shards(data_dir(), a.skip_data_check, master);  // a corrupt page stops the run here
  if (a.core_metric_every > 0)
    print0("NOTE: the CORE metric (--core-metric-every) needs nanochat's DCLM eval bundle and is not "
           "implemented in nanochat.cpp; it is skipped. Pass --core-metric-every -1 to silence this.");
  const double measured_peak = measure_fma_peak_gflops(num_threads(), 0.2);
  const std::string peak_cache = base_dir() + "/fma_peak.json";
  double peak_gflops = best_known_fma_peak_gflops(measured_peak, num_threads(), peak_cache);
  if (num_threads() > 1)  // one core alone is seldom disturbed: the n-thread peak is at least n x it
    peak_gflops = mfu_reference_peak_gflops(
        peak_gflops, best_known_fma_peak_gflops(measure_fma_peak_gflops(1, 0.1), 1, peak_cache),
        num_threads(), physical_cores_available());
  print0(str_cat("Measured fp32 FMA peak of this rank: ", static_cast<int64_t>(measured_peak), " GFLOP/s (",
                 fma_peak_isa(), ", ", num_threads(), " threads); MFU is reported against the highest peak seen on "
                 "this machine (at least threads x the 1-thread peak, up to the physical cores), ",
                 static_cast<int64_t>(peak_gflops), " GFLOP/s (", peak_cache, "), x world size"));

  // Model, optimizer (docs/nanochat.md 2.1 lrs x batch_lr_scale; Muon wd scaled).
  GPT model(cfg);
  model.init_weights(a.seed);
  model.set_recompute_mlp(a.recompute_mlp);
  std::vector<OptParam> ops;
  for (const auto& p : model.params())
    ops.push_back({p.name, p.shape, model.param_data() + p.offset, model.grad_data() + p.offset});
  OptimConfig oc;
  oc.unembedding_lr = static_cast<float>(a.unembedding_lr * plan.batch_lr_scale);
  oc.embedding_lr = static_cast<float>(a.embedding_lr * plan.batch_lr_scale);
  oc.matrix_lr = static_cast<float>(a.matrix_lr * plan.batch_lr_scale);
  oc.scalar_lr = static_cast<float>(a.scalar_lr * plan.batch_lr_scale);
  oc.weight_decay = static_cast<float>(plan.weight_decay_scaled);
  oc.model_dim = cfg.n_embd;
  MuonAdamW opt(ops, oc, &comm);
  // Token-weighted gradient accumulation with world-size-independent sums of the small tensors;
  // on the last micro-batch each finished gradient starts its reduction (grad_accum.h).
  GradAccumulator accum(model, static_cast<int>(plan.grad_accum_steps), comm,
                        W > 1 ? std::function<void(size_t)>([&opt](size_t k) { opt.grad_ready(k); })
                              : std::function<void(size_t)>());
  print0(str_cat("Scaling the LR for the AdamW parameters proportional to 1/sqrt(", cfg.n_embd, "/768) = ",
                 std::pow(static_cast<double>(cfg.n_embd) / 768.0, -0.5)));

  LrSchedule sched;
  sched.num_iterations = plan.num_iterations;
  sched.warmup_steps = a.warmup_steps;
  sched.warmdown_ratio = a.warmdown_ratio;
  sched.final_lr_frac = a.final_lr_frac;
  const int64_t N = plan.num_iterations;

  const std::string tag = a.model_tag.empty() ? "d" + std::to_string(a.depth) : a.model_tag;
  const std::string ckpt_dir = base_dir() + "/base_checkpoints/" + tag;
  const std::string metrics_path = ckpt_dir + "/metrics.jsonl";

  // Loop state (docs/nanochat.md 3.9 loop_state) and resume.
  int64_t step = 0;
  double val_bpb = std::numeric_limits<double>::quiet_NaN();
  double min_val_bpb = std::numeric_limits<double>::infinity();
  double smooth_train_loss = 0.0;
  double total_training_time = 0.0;
  double profiled_seconds = 0.0;  // --profile: wall time of the profiled steps
  int64_t profiled_steps = 0;
  prof::reset();
  json loader_state;  // null = fresh
  // Before the first collective: a rank slow to start is waited for (NANOCHAT_STARTUP_TIMEOUT) and
  // named, instead of failing the others at the collective timeout (dist/startup.h).
  dist::startup_barrier(comm, "train");
  if (a.resume_from_step >= 0) {
    // Rank 0 reads the weights and meta and broadcasts them, so nodes without a shared
    // filesystem only need their own ranks' optimizer shards. Every file read is checked against
    // the CRC32 its marker recorded; what any rank finds, every rank reports.
    CheckpointPaths cp{ckpt_dir, a.resume_from_step};
    std::string meta_text, marker_text, error, corrupt;
    if (master) try {
      const json marker = read_checkpoint_marker(cp);
      marker_text = marker.dump();
      for (const std::string& f : {cp.model(), cp.meta()})
        if (corrupt.empty()) corrupt = check_checkpoint_file(marker, f);
      if (corrupt.empty()) {
        meta_text = read_checkpoint_meta(cp).dump();
        StFile weights = load_safetensors(cp.model());
        for (const auto& p : model.params()) {
          const StTensor& t = weights.at(p.name);
          if (t.shape != p.shape || t.dtype != "F32")
            fail("checkpoint ", cp.model(), ": tensor ", p.name, " has the wrong shape or dtype for the model the flags give");
          std::memcpy(model.param_data() + p.offset, t.bytes.data(), p.numel * sizeof(float));
        }
      }
    } catch (const std::exception& e) {  // also a malformed file's JSON
      error = e.what();
    }
    agree_on_checkpoint_load(comm, cp, error, corrupt);
    broadcast_string(comm, meta_text, 0);
    broadcast_string(comm, marker_text, 0);
    comm.broadcast(model.param_data(), model.num_params() * sizeof(float), 0)->wait();
    json meta = json::parse(meta_text);
    const json marker = json::parse(marker_text);
    ModelConfig saved = ModelConfig::from_json(meta.at("model_config"));
    if (!(saved == cfg))
      fail("cannot resume from ", cp.meta(), ": its model_config ", saved.to_json().dump(),
           " differs from the one the flags give ", cfg.to_json().dump());
    const int W0 = meta.value("world_size", 1);
    if (W0 < 1) fail("checkpoint ", cp.meta(), ": world_size ", W0, " is not a rank count");
    if (meta.value("total_batch_size", int64_t{0}) != plan.total_batch_size ||
        meta.value("device_batch_size", 0) != B)
      fail("cannot resume from ", cp.meta(), ": it used --total-batch-size ", meta.value("total_batch_size", int64_t{0}),
           " and --device-batch-size ", meta.value("device_batch_size", 0), "; pass the same values to resume exactly");
    auto loader_state_of = [](const StFile& f) {
      auto it = f.metadata.find("loader_state");
      if (it == f.metadata.end())
        fail("checkpoint ", f.path, " has no loader state; it was not written by a complete save");
      return json::parse(it->second);
    };
    if (W0 == W) {
      error.clear();
      try {
        if (!fs::exists(cp.optim(rank)))
          fail("rank ", rank, " has no optimizer shard ", cp.optim(rank),
               "; every node needs its own ranks' optim_*_rank<r> files (resume on the same nodes, or share the folder)");
        corrupt = check_checkpoint_file(marker, cp.optim(rank));
        if (corrupt.empty()) {
          StFile optim_file = load_safetensors(cp.optim(rank));
          opt.load_state(optim_file);
          loader_state = loader_state_of(optim_file);
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      agree_on_checkpoint_load(comm, cp, error, corrupt);
    } else {
      // Another world size: rank 0 reads every old shard, reassembles the whole optimizer state
      // and sends it to every rank, which keeps its own part; the loader states are re-dealt
      // (approximate data resume, see data::reshard_loader_states).
      MuonAdamW::WholeState whole;
      whole.values.resize(opt.whole_state_floats());
      std::string states_text;
      if (master) try {
        std::vector<StFile> shards;
        std::vector<json> old_states;
        for (int r = 0; r < W0; ++r) {
          if (!fs::exists(cp.optim(r)))
            fail("resuming the ", W0, "-rank checkpoint ", cp.meta(), " with ", W, " ranks needs every old shard on rank 0, but ",
                 cp.optim(r), " is missing; copy all optim_", cp.step, "_rank<r> files into ", ckpt_dir,
                 " on this node");
          corrupt = check_checkpoint_file(marker, cp.optim(r));
          if (!corrupt.empty()) break;
          shards.push_back(load_safetensors(cp.optim(r)));
          old_states.push_back(loader_state_of(shards.back()));
        }
        if (corrupt.empty()) {
          whole = opt.assemble_whole_state(shards);
          // --loader-global-stream: every rank reads the one-rank stream, whose position after a
          // step is the same at any world size, so its state carries over exactly.
          states_text = a.loader_global_stream
                            ? json(std::vector<json>(static_cast<size_t>(W), old_states.front())).dump()
                            : json(data::reshard_loader_states(old_states, W)).dump();
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      // rank 0's failure reaches every rank at once (they would otherwise wait in the broadcast)
      agree_on_checkpoint_load(comm, cp, error, corrupt);
      int64_t nsteps = static_cast<int64_t>(whole.steps.size());
      comm.broadcast(&nsteps, sizeof nsteps, 0)->wait();
      whole.steps.resize(static_cast<size_t>(nsteps));
      comm.broadcast(whole.steps.data(), whole.steps.size() * sizeof(int64_t), 0)->wait();
      comm.broadcast(whole.values.data(), whole.values.size() * sizeof(float), 0)->wait();
      broadcast_string(comm, states_text, 0);
      opt.load_whole_state(whole);
      loader_state = json::parse(states_text).at(static_cast<size_t>(rank));
      print0(str_cat("Re-sharded the optimizer state of ", W0, " ranks for ", W, " ranks; ",
                     a.loader_global_stream
                         ? "the one-rank data stream resumes exactly"
                         : "the data stream resumes approximately (after the furthest row group read, "
                           "buffered documents kept; the same world size resumes exactly)"));
    }
    step = meta.at("step").get<int64_t>();
    val_bpb = from_num_or_inf(meta.value("val_bpb", json(nullptr)));
    const json& ls = meta.at("loop_state");
    min_val_bpb = from_num_or_inf(ls.at("min_val_bpb"));
    smooth_train_loss = ls.at("smooth_train_loss").get<double>();
    total_training_time = ls.at("total_training_time").get<double>();
    print0(str_cat("Resumed from step ", step, " (", cp.model(), ")"));
  }

  // Data.
  data::LoaderOptions lo;
  lo.B = B;
  lo.T = T;
  const bool global_stream = a.loader_global_stream && W > 1;
  lo.rank = global_stream ? 0 : rank;
  lo.world_size = global_stream ? 1 : W;
  lo.split = "train";
  lo.data_dir = data_dir();
  data::DataLoader train_loader(tok, lo, loader_state.is_null() ? nullptr : &loader_state);
  const std::vector<int32_t> token_bytes = tok.token_bytes();
  data::LoaderOptions vo = lo;
  vo.split = "val";
  vo.prefetch = false;
  // Every rank reads the one-rank val stream and evaluates every W-th batch (evaluate_bpb), so the
  // val bpb of given weights does not depend on the world size (and equals base-eval's).
  vo.rank = 0;
  vo.world_size = 1;
  const int64_t eval_steps = std::max<int64_t>(1, a.eval_tokens / (static_cast<int64_t>(B) * T));  // all ranks

  // Startup agreement (docs/architecture.md 3.10): one clear error on every rank if anything differs.
  if (W > 1) {
    json user = args_to_json(a);
    user.erase("threads");  // nodes may legitimately use different thread counts
    dist::agree(comm, {{"model config", cfg.to_json().dump()},
                       {"batch settings", str_cat("B=", B, " T=", T, " total=", plan.total_batch_size,
                                                  " grad_accum=", plan.grad_accum_steps)},
                       {"tokenizer hash", std::to_string(tok.hash())},
                       {"data manifest", data_manifest(lo.data_dir)},  // the directory may differ between nodes
                       {"base-train flags", user.dump()}});
    print0(str_cat("All ", W, " ranks agree on build, model, batch, tokenizer, data and flags"));
  }

  // Every rank can write its checkpoint folder (nodes need not share one), else all stop now.
  prepare_checkpoint_dirs(comm, ckpt_dir);
  // Metrics file: fresh run truncates; resume keeps the records up to the resume step.
  if (master) {
    std::vector<std::string> keep;
    if (a.resume_from_step >= 0) {
      std::ifstream in(metrics_path);
      for (std::string line; std::getline(in, line);) {
        try {
          if (json::parse(line).value("step", int64_t{0}) <= step) keep.push_back(line);
        } catch (const std::exception&) {
        }
      }
    }
    std::ofstream out(metrics_path, std::ios::trunc);
    for (auto& l : keep) out << l << "\n";
  }
  std::ofstream metrics;
  if (master) metrics.open(metrics_path, std::ios::app);
  auto record = [&](const json& j) {
    if (master) {
      metrics << j.dump() << "\n";
      metrics.flush();
    }
  };

  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size()), xs, ys;
  if (global_stream) {
    xs.resize(x.size());
    ys.resize(x.size());
  }
  const int64_t resume_step = a.resume_from_step;
  const int64_t flops_per_token = model.num_flops_per_token();
  const double ema_beta = 0.9;
  std::string eval_error;

  // Rank 0's meta_<step>.json: nanochat's fields plus the loop state.
  auto meta_json = [&] {
    return json{{"step", step},
                {"val_bpb", num_or_inf(val_bpb)},
                {"model_config", cfg.to_json()},
                {"user_config", args_to_json(a)},
                {"device_batch_size", B},
                {"max_seq_len", T},
                {"total_batch_size", plan.total_batch_size},
                {"world_size", W},
                {"tokenizer_hash", std::to_string(tok.hash())},
                {"dataloader_state_dict", train_loader.state()},
                {"loop_state", {{"min_val_bpb", num_or_inf(min_val_bpb)},
                                {"smooth_train_loss", smooth_train_loss},
                                {"total_training_time", total_training_time}}}};
  };
  auto save = [&] {
    CheckpointPaths cp{ckpt_dir, step};
    // Each rank's optimizer shard carries that rank's exact loader state, so a resume on any
    // node finds both in its own file.
    auto optim_meta = opt.state_metadata();
    optim_meta["loader_state"] = train_loader.state().dump();
    save_job_checkpoint(comm, cp, model, opt, optim_meta, meta_json(),
                        fault.kind == "write-fail" && fault.rank == rank);
    print0("Saved checkpoint " + cp.model());
  };
  // val bpb and (rank 0) greedy samples of the prompts.
  auto evaluate_and_sample = [&](bool last) {
    if (last && a.fault_inject == "final-eval") fail("fault injected into the final evaluation (--fault-inject)");
    if (a.eval_every > 0 && (last || step % a.eval_every == 0)) {
      data::DataLoader val_loader(tok, vo, nullptr);
      val_bpb = evaluate_bpb(model, val_loader, eval_steps, token_bytes, comm);
      min_val_bpb = std::min(min_val_bpb, val_bpb);
      char b[96];
      std::snprintf(b, sizeof b, "Step %05lld | Validation bpb: %.6f", static_cast<long long>(step), val_bpb);
      print0(b);
      record({{"step", step}, {"val_bpb", num_or_inf(val_bpb)}});
    }
    if (a.sample_every > 0 && master && (last || (step > 0 && step % a.sample_every == 0))) {
      SampleOptions so;
      so.max_tokens = 16;
      for (const char* prompt : kSamplePrompts) {
        std::vector<int32_t> ids = tok.encode(prompt);
        ids.insert(ids.begin(), tok.bos_id());
        auto gen = generate(model, ids, so);
        ids.insert(ids.end(), gen.begin(), gen.end());
        print0(tok.decode(ids));
      }
    }
  };

  for (;;) {
    const bool last = step == N;
    const bool save_now = last || (step > 0 && step != resume_step && a.save_every > 0 && step % a.save_every == 0);
    // 1. the replicas are still identical (and a checkpoint never stores one rank's fault)
    if (a.check_replicas_every > 0 && (save_now || (step > 0 && step % a.check_replicas_every == 0)))
      check_replicas(model, comm, step);
    if (!last) {
      // 2. val bpb and samples, 3. checkpoint
      evaluate_and_sample(false);
      if (save_now) save();
    } else {
      // The last step is saved BEFORE the final evaluation: a failure there (or a rank lost
      // during it) must not lose the weights. Its meta then gets the final val bpb.
      const bool final_eval = a.eval_every > 0;
      if (final_eval) val_bpb = std::numeric_limits<double>::quiet_NaN();  // not evaluated yet
      save();
      try {
        evaluate_and_sample(true);
      } catch (const Error& e) {
        eval_error = e.what();
        print0(str_cat("ERROR during the final evaluation/sampling: ", e.what(), " (the weights of step ", step,
                       " are saved)"));
      }
      if (final_eval && master && eval_error.empty())
        rewrite_checkpoint_meta(CheckpointPaths{ckpt_dir, step}, meta_json());
      break;
    }

    // 3. one optimizer step: gradient accumulation over micro-batches (docs/nanochat.md 3.3).
    prof::enable(a.profile);
    Timer t;
    const double wait0 = opt.comm_wait_seconds();
    float train_loss = 0.f;
    for (int64_t micro = 0; micro < plan.grad_accum_steps; ++micro) {
      {
        prof::Scope data_scope(prof::Op::Data);
        if (global_stream) {  // keep micro-batch `rank` of every W consecutive ones
          for (int r = 0; r < W; ++r) {
            if (r == rank) train_loader.next(x.data(), y.data());
            else train_loader.next(xs.data(), ys.data());
          }
        } else {
          train_loader.next(x.data(), y.data());
        }
      }
      train_loss = accum.micro_batch(static_cast<int>(micro), x.data(), y.data(), B, T);
      if (!std::isfinite(train_loss))
        fail("training diverged at step ", step, " (loss ", train_loss, " on rank ", rank,
             "); lower the learning rates or check the data");
    }
    const float grad_scale = accum.finish();  // 1 / valid tokens of the step over all ranks
    const double lrm = sched.lr_multiplier(step);
    const double mom = sched.muon_momentum(step);
    const double mwd = sched.muon_weight_decay(step, plan.weight_decay_scaled);
    opt.step(static_cast<float>(lrm), static_cast<float>(mom), static_cast<float>(mwd), grad_scale);
    model.zero_grad();
    if (fault.kind == "flip-bit" && fault.rank == rank && fault.step == step) flip_lowest_bit(model, fault.tensor);
    const double dt = t.seconds();
    prof::enable(false);
    profiled_seconds += dt;
    ++profiled_steps;
    const double comm_wait = opt.comm_wait_seconds() - wait0;

    // 4. log line (docs/nanochat.md 3.10).
    smooth_train_loss = ema_beta * smooth_train_loss + (1 - ema_beta) * train_loss;
    const double debiased = smooth_train_loss / (1 - std::pow(ema_beta, static_cast<double>(step + 1)));
    const double pct = 100.0 * static_cast<double>(step) / static_cast<double>(N);
    const int64_t tps = static_cast<int64_t>(static_cast<double>(plan.total_batch_size) / dt);
    const double mfu = 100.0 * static_cast<double>(flops_per_token) * static_cast<double>(plan.total_batch_size) / dt /
                       (peak_gflops * 1e9 * W);
    if (step > 10) total_training_time += dt;
    const json ls = train_loader.state();
    char line[512];
    std::snprintf(line, sizeof line,
                  "step %05lld/%05lld (%.2f%%) | loss: %.6f | lrm: %.2f | dt: %.2fms | tok/sec: %s | mfu: %.2f | "
                  "epoch: %s pq: %s rg: %s | total time: %.2fm",
                  static_cast<long long>(step), static_cast<long long>(N), pct, debiased, lrm, dt * 1e3,
                  with_commas(tps).c_str(), mfu, ls.value("epoch", json(0)).dump().c_str(),
                  ls.value("pq_idx", json(0)).dump().c_str(), ls.value("rg_idx", json(0)).dump().c_str(),
                  total_training_time / 60.0);
    std::string l = line;
    if (W > 1) {
      char cw[48];
      std::snprintf(cw, sizeof cw, " | comm wait: %.1f%%", 100.0 * comm_wait / dt);
      l += cw;
    }
    if (step > 10) {
      char eta[64];
      std::snprintf(eta, sizeof eta, " | eta: %.1fm",
                    static_cast<double>(N - step) * total_training_time / static_cast<double>(step - 10) / 60.0);
      l += eta;
    }
    print0(l);
    record({{"step", step}, {"loss", train_loss}, {"smooth_loss", debiased}, {"lrm", lrm}, {"dt_ms", dt * 1e3},
            {"tok_per_sec", tps}, {"mfu", mfu}, {"comm_wait_ms", comm_wait * 1e3}});
    ++step;
  }

  // End of run: summary and chart.
  print0(str_cat("Total training time: ", total_training_time / 60.0, "m"));
  if (a.profile && profiled_steps > 0) {
    print0(str_cat("Profile of rank ", rank, " over ", profiled_steps,
                   " steps (wall time per step, share of the step; the first steps include warm-up):"));
    double covered = 0;
    for (size_t k = 0; k < prof::kNumOps; ++k) {
      const auto op = static_cast<prof::Op>(k);
      const double sec = prof::seconds(op);
      covered += sec;
      char b[128];
      std::snprintf(b, sizeof b, "  %-16s %9.1f ms %6.1f%%", prof::name(op),
                    1e3 * sec / static_cast<double>(profiled_steps), 100.0 * sec / profiled_seconds);
      print0(b);
    }
    char b[128];
    std::snprintf(b, sizeof b, "  %-16s %9.1f ms %6.1f%%", "rest",
                  1e3 * (profiled_seconds - covered) / static_cast<double>(profiled_steps),
                  100.0 * (profiled_seconds - covered) / profiled_seconds);
    print0(b);
  }
  if (std::isfinite(min_val_bpb)) print0(str_cat("Minimum validation bpb: ", min_val_bpb));
  if (master) {
    metrics.close();
    ChartSeries loss{"train loss (debiased EMA, nats)", {}}, bpb{"validation bpb", {}};
    std::map<int64_t, double> lm, bm;
    std::ifstream in(metrics_path);
    for (std::string line; std::getline(in, line);) {
      try {
        json j = json::parse(line);
        if (j.contains("smooth_loss")) lm[j["step"]] = j["smooth_loss"];
        if (j.contains("val_bpb") && j["val_bpb"].is_number()) bm[j["step"]] = j["val_bpb"];
      } catch (const std::exception&) {
      }
    }
    for (auto& [s, v] : lm) loss.points.push_back({static_cast<double>(s), v});
    for (auto& [s, v] : bm) bpb.points.push_back({static_cast<double>(s), v});
    write_text_atomic(ckpt_dir + "/report.svg", render_svg_chart("base-train " + tag, {loss, bpb}));
    print0("Wrote " + ckpt_dir + "/report.svg and " + metrics_path);
  }
  if (!eval_error.empty()) fail("the final evaluation failed after the weights were saved: ", eval_error);
}

}  // namespace nanochat
