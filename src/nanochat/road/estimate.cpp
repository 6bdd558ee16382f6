#include "nanochat/road/estimate.h"

#include <algorithm>
#include <cmath>

#include "nanochat/core/error.h"
#include "nanochat/core/rng.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/plan/plan.h"

namespace nanochat::road {

namespace {

// Fixed costs measured on the 2-core development VM (a start-up: the FMA peak, the data check,
// loading a checkpoint; a chat-eval problem's prompt; characters the tokenizer trains on per second).
constexpr double kStartupS = 0.25;        // a command that loads a checkpoint
constexpr double kTrainStartupS = 0.5;    // a training command: the FMA peak, the data check, the first step's set-up
constexpr double kStepOverheadS = 0.008;  // a training step's work beside the model: its rows, log line, metrics record
constexpr double kRolloutExampleS =
    0.04;                                 // chat-rl: an example's prompt, prefill and rewards beside its decoded tokens
constexpr double kSaveBytesPerS = 300e6;  // a checkpoint's weights and optimizer moments, written and fsynced
constexpr double kTokenizerCharsPerS = 25e6;
constexpr double kCorpusBuildS = 120.0;   // scripts/demo_corpus.sh on a fresh machine (downloads, extraction, packing)
constexpr double kShardDownloadS = 15.0;  // one ~90 MB shard at ~6 MB/s

// The value of a flag under any of its spellings ("-x" or "--max-problems"), else `dflt`.
int64_t num(const std::vector<std::string>& c, const std::string& flag, int64_t dflt) {
  static const std::map<std::string, std::string> kLong = {
      {"-x", "--max-problems"}, {"-m", "--max-new-tokens"}, {"-a", "--task-name"}, {"-n", "--num-files"}};
  std::string v = flag_value(c, flag);
  if (const auto it = kLong.find(flag); it != kLong.end() && v.empty()) v = flag_value(c, it->second);
  if (v.empty()) return dflt;
  try {
    return static_cast<int64_t>(std::stod(v));
  } catch (const std::exception&) {
    fail("speedrun: ", c[0], " ", flag, " ", v, " is not a number");
  }
}

BaseTrainArgs args_of(const std::vector<std::string>& c) {
  BaseTrainArgs a;
  a.depth = static_cast<int>(num(c, "--depth", a.depth));
  a.aspect_ratio = static_cast<int>(num(c, "--aspect-ratio", a.aspect_ratio));
  a.head_dim = static_cast<int>(num(c, "--head-dim", a.head_dim));
  a.max_seq_len = static_cast<int>(num(c, "--max-seq-len", a.max_seq_len));
  if (const std::string w = flag_value(c, "--window-pattern"); !w.empty()) a.window_pattern = w;
  a.num_iterations = num(c, "--num-iterations", a.num_iterations);
  if (const std::string r = flag_value(c, "--target-param-data-ratio"); !r.empty())
    a.target_param_data_ratio = std::stod(r);
  a.device_batch_size = static_cast<int>(num(c, "--device-batch-size", a.device_batch_size));
  a.total_batch_size = num(c, "--total-batch-size", a.total_batch_size);
  a.eval_every = num(c, "--eval-every", a.eval_every);
  a.eval_tokens = num(c, "--eval-tokens", a.eval_tokens);
  return a;
}

const std::vector<std::string>* command_of(const std::vector<Stage>& road, const std::string& name) {
  for (const Stage& s : road)
    for (const auto& c : s.commands)
      if (!c.empty() && c[0] == name) return &c;
  return nullptr;
}

}  // namespace

double SpeedProbe::train_tok_per_s(int64_t total_batch) const {
  const double micro = static_cast<double>(total_batch) / static_cast<double>(B * T);
  return static_cast<double>(total_batch) / (micro * micro_batch_s + optimizer_s);
}

int road_vocab_size(const std::vector<Stage>& road) {
  const auto* c = command_of(road, "tok-train");
  return c ? static_cast<int>(num(*c, "--vocab-size", 32768)) : 32768;
}

TrainSize base_train_size(const std::vector<std::string>& c, int vocab) {
  const TrainPlan plan = derive_plan(args_of(c), vocab, 1, "/nonexistent");
  TrainSize s;
  s.steps = plan.num_iterations;
  s.total_batch = plan.total_batch_size;
  s.params = plan.counts.total;
  s.scaling_params = plan.counts.scaling_params();
  s.depth = static_cast<int>(plan.model.n_layer);
  s.width = static_cast<int>(plan.model.n_embd);
  return s;
}

namespace {
SpeedProbe probe_at(const std::vector<std::string>& c, int vocab, int steps);
}  // namespace

// The training loop runs a small model on fewer threads when that is faster (core/thread_tuner.h):
// where a micro-batch is short the probe also times one thread, and keeps the faster. A second
// round where a round is quick, the best kept: a probe of a second is easily slowed by another
// program's moment on the cores, and nothing makes it faster than the machine is.
SpeedProbe probe_speed(const std::vector<std::string>& c, int vocab, int steps) {
  const int threads = num_threads();
  SpeedProbe best;
  auto run = [&](int n) {
    set_num_threads(n);
    Timer t;
    const SpeedProbe q = probe_at(c, vocab, steps);
    if (best.B == 0 || q.train_tok_per_s(q.B * q.T) > best.train_tok_per_s(best.B * best.T)) best = q;
    return t.seconds();
  };
  for (int round = 0; round < 2; ++round) {
    const double took = run(threads);
    if (threads > 1 && best.micro_batch_s < 0.25) run(1);
    if (took > 3.0) break;
  }
  set_num_threads(threads);
  return best;
}

namespace {
SpeedProbe probe_at(const std::vector<std::string>& c, int vocab, int steps) {
  const TrainPlan plan = derive_plan(args_of(c), vocab, 1, "/nonexistent");
  SpeedProbe p;
  p.depth = static_cast<int>(plan.model.n_layer);
  p.params = plan.counts.total;
  p.T = plan.T;
  p.B = plan.B;
  // at most 4,096 tokens a micro-batch (runcpu's 32 x 512 takes seconds): the times of fewer
  // rows, scaled to the plan's (the products are as efficient from a few rows of 512 up)
  const int rows = std::max(1, std::min(p.B, 4096 / p.T));
  GPT model(plan.model);
  model.init_weights(42);
  MuonAdamW opt(optimizer_params(model), plan.optim);
  Rng rng(7);
  std::vector<int32_t> idx(static_cast<size_t>(rows) * p.T), tgt(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    idx[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
    tgt[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  }
  // after a warm-up (first touch, kernel generation): at least `steps` steps and 0.7 s of them
  // (at most 20)
  std::vector<double> fb, op;
  Timer total;
  for (int s = 0; s <= 20 && (s <= steps || total.seconds() < 0.7); ++s) {
    Timer t;
    model.zero_grad();
    model.forward_backward(idx.data(), tgt.data(), rows, p.T, 1.f);
    const double t_fb = t.seconds();
    Timer t2;
    opt.step(1.f, 0.95f, 0.1f);
    model.params_changed();
    if (s == 0) {
      total = Timer();
      continue;
    }
    fb.push_back(t_fb);
    op.push_back(t2.seconds());
  }
  // the lower quartile: the loop's steady speed (a step slowed by a moment of another program's
  // work is the exception there, while a probe of a second feels it)
  auto lower_quartile = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 4];
  };
  const double scale = static_cast<double>(p.B) / static_cast<double>(rows);
  p.micro_batch_s = lower_quartile(fb) * scale;
  p.optimizer_s = lower_quartile(op);
  // An evaluation's forward of the same rows (val bpb: the loss per token, no gradients).
  std::vector<float> losses(idx.size());
  std::vector<double> fw;
  for (int s = 0; s < 4; ++s) {
    Timer t;
    model.forward_loss(idx.data(), tgt.data(), rows, p.T, losses.data());
    if (s > 0) fw.push_back(t.seconds());
  }
  p.forward_s = lower_quartile(fw) * scale;
  // A generated token: the KV-cache forward of one position (after a warm-up), for one row and
  // for a batch of 8 rows (a rollout's samples decode together), plus the engine's per-token work.
  std::vector<float> logits(static_cast<size_t>(8) * plan.model.padded_vocab());
  for (int n_rows : {1, 8}) {
    const int n = 32;
    KVCache cache(plan.model, n_rows, n + 1);
    std::vector<int32_t> tok(static_cast<size_t>(n_rows), 1);
    double t_dec = 0;
    for (int k = 0; k < n; ++k) {
      Timer t;
      model.forward_cached(tok.data(), n_rows, 1, cache, logits.data());
      if (k >= 4) t_dec += t.seconds();
    }
    (n_rows == 1 ? p.decode_token_s : p.decode8_token_s) = t_dec / (n - 4) + 1e-4;
  }
  return p;
}
}  // namespace

JobSpeed job_speed(const SpeedProbe& alone, const std::vector<SpeedProbe>& ranks, double exchange_s,
                   int64_t total_batch, double launch_s) {
  JobSpeed j;
  j.launch_s = launch_s;
  if (ranks.empty() || alone.B == 0) return j;
  SpeedProbe together = alone;  // per micro-batch of alone's B x T tokens, the ranks' rates added
  double rate = 0, optimizer = 0;
  for (const SpeedProbe& r : ranks) {
    if (r.micro_batch_s <= 0 || r.B * r.T == 0) continue;
    rate += static_cast<double>(r.B * r.T) / r.micro_batch_s;
    optimizer += r.optimizer_s;
  }
  if (rate <= 0) return j;
  together.micro_batch_s = static_cast<double>(alone.B * alone.T) / rate;
  together.optimizer_s = optimizer / static_cast<double>(ranks.size() * ranks.size());  // mean / W
  j.speedup = together.train_tok_per_s(total_batch) / alone.train_tok_per_s(total_batch);
  j.exchange_s_per_param = alone.params > 0 ? exchange_s / static_cast<double>(alone.params) : 0.0;
  return j;
}

std::map<std::string, double> estimate_stages(const std::vector<Stage>& road, const SpeedProbe& p, bool data_ready,
                                              const JobSpeed& job) {
  std::map<std::string, double> out;
  const double tok_s_fwd = static_cast<double>(p.B * p.T) / p.forward_s;
  int64_t base_total_batch = 0;
  for (const Stage& s : road) {
    double t = 0;
    for (const auto& c : s.commands) {
      if (c.empty()) continue;
      const std::string& cmd = c[0];
      if (cmd == "!bash")
        t += data_ready ? 1.0 : kCorpusBuildS;
      else if (cmd == "data" && c.size() > 1 && c[1] == "download")
        t += data_ready ? 1.0 : static_cast<double>(num(c, "-n", 0)) * kShardDownloadS + 10.0;
      else if (cmd == "data")
        t += 0.02;
      else if (cmd == "tok-train")
        t += static_cast<double>(num(c, "--max-chars", 2000000000)) / kTokenizerCharsPerS + 0.2;
      else if (cmd == "tok-eval")
        t += 0.1;
      else if (cmd == "base-train" || cmd == "chat-sft") {
        int64_t steps = 0, batch = 0, eval_every = 0, eval_tokens = 0;
        if (cmd == "base-train") {
          const TrainSize z = base_train_size(c, static_cast<int>(road_vocab_size(road)));
          steps = z.steps, batch = base_total_batch = z.total_batch;
          eval_every = num(c, "--eval-every", 250), eval_tokens = num(c, "--eval-tokens", 80LL * 524288);
        } else {
          batch = num(c, "--total-batch-size", base_total_batch);
          steps = num(c, "--num-iterations", -1);
          if (steps < 0) steps = 1000;  // one epoch of nanochat's mixture: unknown before it is rendered
          eval_every = num(c, "--eval-every", 200), eval_tokens = num(c, "--eval-tokens", 40LL * 524288);
        }
        t += static_cast<double>(steps * batch) / (p.train_tok_per_s(batch) * job.speedup) + kTrainStartupS +
             static_cast<double>(steps) * (kStepOverheadS + job.exchange_s_per_param * static_cast<double>(p.params)) +
             job.launch_s;
        const int64_t save_every = num(c, "--save-every", -1);
        const double saves = 1.0 + (save_every > 0 ? static_cast<double>(steps / save_every) : 0.0);
        t += saves * (0.05 + 12.0 * static_cast<double>(p.params) / kSaveBytesPerS);
        if (eval_every > 0)
          t += static_cast<double>(steps / eval_every + 1) * static_cast<double>(eval_tokens) / tok_s_fwd;
      } else if (cmd == "base-eval") {
        t += kStartupS + 2.0 * static_cast<double>(num(c, "--split-tokens", 40LL * 524288)) / tok_s_fwd;
        t += (7 * 16 + 128) * p.decode_token_s;  // the samples (8 unconditioned rows share their steps)
      } else if (cmd == "chat-eval") {
        // generative tasks answer up to -m tokens (a small model seldom stops early); categorical
        // ones (ARC, MMLU) forward their prompt once
        std::string tasks = flag_value(c, "-a");
        if (tasks.empty()) tasks = flag_value(c, "--task-name");
        if (tasks.empty()) tasks = "ARC-Easy|ARC-Challenge|MMLU|GSM8K|HumanEval";
        const int64_t problems = std::max<int64_t>(1, num(c, "-x", 1000)), len = num(c, "-m", 512);
        size_t at = 0;
        t += kStartupS;
        for (;;) {
          const size_t bar = tasks.find('|', at);
          const std::string name = tasks.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
          const bool categorical = name.rfind("ARC", 0) == 0 || name == "MMLU";
          t += static_cast<double>(problems) *
               (categorical ? 256.0 / tok_s_fwd : static_cast<double>(len) * p.decode_token_s);
          if (bar == std::string::npos) break;
          at = bar + 1;
        }
      } else if (cmd == "chat-rl") {
        const int64_t steps = num(c, "--num-steps", 100), ex = num(c, "--examples-per-step", 16);
        const int64_t samples = num(c, "--num-samples", 16), len = num(c, "--max-new-tokens", 256);
        const int64_t every = num(c, "--eval-every", 60), eval_ex = num(c, "--eval-examples", 400);
        // an example's samples decode together, a batch of up to 8 rows per token
        const double per_example =
            static_cast<double>(len) * (samples >= 8 ? static_cast<double>(samples) / 8.0 * p.decode8_token_s
                                                     : p.decode_token_s + (p.decode8_token_s - p.decode_token_s) *
                                                                              static_cast<double>(samples - 1) / 7.0);
        const double evals = every > 0 ? static_cast<double>((steps / every + 1) * eval_ex) : 0.0;
        // as a job the examples are dealt to the nodes by speed (the training stages' speed-up), and
        // every step sums the gradients
        t += kStartupS + (static_cast<double>(steps * ex) + evals) * (per_example + kRolloutExampleS) / job.speedup +
             static_cast<double>(steps) * job.exchange_s_per_param * static_cast<double>(p.params) + job.launch_s;
      } else
        t += kStartupS;
    }
    out[s.id] = t;
  }
  return out;
}

}  // namespace nanochat::road

namespace nanochat::road {

SpeedProbe scale_probe(const SpeedProbe& p, const std::vector<std::string>& from, const std::vector<std::string>& to,
                       int vocab) {
  const TrainPlan a = derive_plan(args_of(from), vocab, 1, "/nonexistent");
  const TrainPlan b = derive_plan(args_of(to), vocab, 1, "/nonexistent");
  const double flops = static_cast<double>(b.counts.flops_per_token) / static_cast<double>(a.counts.flops_per_token);
  const double params = static_cast<double>(b.counts.total) / static_cast<double>(a.counts.total);
  SpeedProbe q = p;
  q.depth = static_cast<int>(b.model.n_layer);
  q.params = b.counts.total;
  q.micro_batch_s *= flops * static_cast<double>(b.B * b.T) / static_cast<double>(a.B * a.T);
  q.forward_s *= flops * static_cast<double>(b.B * b.T) / static_cast<double>(a.B * a.T);
  q.B = b.B;
  q.T = b.T;
  q.optimizer_s *= params;
  q.decode_token_s *= flops;
  q.decode8_token_s *= flops;
  return q;
}

std::vector<FlagOverride> depth_overrides(int depth, int64_t steps) {
  const std::string every = std::to_string(std::max<int64_t>(1, steps / 10));
  return {{"base-train", {"--depth"}, std::to_string(depth), true},
          {"base-train", {"--num-iterations"}, "-1", true},
          {"base-train", {"--eval-every"}, every, true},
          {"base-train", {"--save-every"}, every, true}};
}

DepthChoice choose_depth(double seconds, const SpeedProbe& probe, const std::vector<std::string>& probed,
                         const std::function<std::vector<Stage>(int)>& road_for, bool data_ready, const JobSpeed& job) {
  DepthChoice c;
  for (int depth = 2; depth <= 32; ++depth) {
    const std::vector<Stage> road = road_for(depth);
    const std::vector<std::string>* bt = command_of(road, "base-train");
    if (bt == nullptr) fail("speedrun: the road has no base-train stage");
    const SpeedProbe q = scale_probe(probe, probed, *bt, road_vocab_size(road));
    double total = 0;
    for (const auto& [id, t] : estimate_stages(road, q, data_ready, job)) total += t;
    c.tried.emplace_back(depth, total);
    if (total > seconds) break;  // deeper models only take longer
    c.depth = depth;
    c.seconds = total;
  }
  return c;
}

}  // namespace nanochat::road
