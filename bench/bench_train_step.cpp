// Training-step benchmark (model + optimizer speed). Measures this machine's fp32 FMA
// peak, then times forward+backward+MuonAdamW steps on random tokens and prints tok/s and MFU
// (FLOPs/token = nanochat's estimate_flops) per (config, thread count).
//
// usage: bench_train_step [--steps N] [--warmup N] [--threads 1,2] [--config NAME[,NAME..]|all]
//                         [--peak-seconds S] [--json] [--list-configs] [--peak-only]
//   d4:    depth 4, head_dim 128, T 512,  B 8, window "SSSL"
//   d6:    nanochat's runcpu config: depth 6, head_dim 64, T 512, window "L", B 8
//   d6b32: the same with runcpu's device batch B 32
//   d8:    depth 8, head_dim 128, T 512, B 8, window "SSSL"
//   d12:   depth 12, head_dim 128, T 1024, B 4, window "SSSL"
//   d4v8k, d8v8k: d4 and d8 with vocab 8192 (the quickstart's)
//   d4t2k, d8t2k: d4 and d8 at nanochat's default context, T 2048, B 2, window "SSSL" (short
//          windows of 512)
//   (the others: vocab 32768; all: aspect ratio 64: n_embd = ceil(depth*64/head_dim)*head_dim)
// --recompute-mlp turns on the model's MLP activation recompute (GPT::set_recompute_mlp).
// --dtype float32,bfloat16 runs each (config, threads) in each compute dtype (model/gpt.h
// ComputeDtype), bf16 rows with MFU against the measured bf16 dot-product peak, and prints the
// bf16 / fp32 tok/s ratio after the pair (bfloat16 needs native bf16: refused otherwise).
// --rounds R repeats the pair R times, alternating the order (fp32 first, then bf16 first, ...),
// and prints the median of the rounds' ratios: on a machine that other work slows down by
// different amounts over minutes, that is the figure to read.
// --json prints one JSON object per line (the peer benchmark, bench/peer/, reads it);
// --list-configs prints the config table (as JSON lines with --json) and exits; --peak-only
// measures and prints the FMA peak per thread count and exits. With --json, one progress line
// per step goes to stderr (a driver that times the run out still sees how far it got).
// Each row is followed by its profile: wall time per op family (core/profile.h), its share of
// the step, the family's model FLOPs (GPT::flops_per_token_by_family) and their rate against the
// FMA peak, the rate of the same GEMM calls run alone, and the points of MFU the family loses
// (MFU + the points lost = 100); then the optimizer's own FLOPs (Muon's Polar Express) and the MFU
// ceiling they leave at this batch. The JSON line carries the profile as profile_s (seconds per
// step per family).
// peak_rss_bytes is getrusage(RUSAGE_SELF).ru_maxrss after that row, i.e. the process-wide peak
// so far: run one config per process for a per-config figure (bench/peer does).
// Page faults per step (median over the timed steps, JSON page_faults_per_step) show whether the
// steady state touches fresh memory; the first step after a single warm-up step may still fault.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_configs.h"
#include "nanochat/core/peak.h"
#include "nanochat/core/profile.h"
#include "nanochat/core/rng.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/gemm_bf16.h"
#include "nanochat/kernels/lm_head_loss.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/optim/optim_math.h"
#include "nanochat/plan/plan.h"

using namespace nanochat;

namespace {

using bench::BenchConfig;
using bench::kConfigs;

std::vector<std::string> split(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

std::vector<int> parse_int_list(const char* s) {
  std::vector<int> out;
  for (const auto& t : split(s)) out.push_back(std::atoi(t.c_str()));
  return out;
}

long peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss * 1024L;  // Linux reports KiB
}

// Minor + major page faults of the process so far (getrusage); a steady training step should add
// none (first-touch faults cost ~13 us per 4 KiB page, see core/arena.h).
long page_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt + ru.ru_majflt;
}

/// CPU seconds used by the whole process (all threads) so far.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Median; of an even count, the mean of the two middle values.
double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

void print_list(const std::vector<double>& v) {
  std::printf("[");
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%.6f", i ? "," : "", v[i]);
  std::printf("]");
}

/// Model FLOPs per op family for `tokens` tokens (GPT::flops_per_token_by_family).
std::array<double, prof::kNumOps> family_flops(const ModelConfig& cfg, int64_t tokens) {
  std::array<double, prof::kNumOps> f{};
  const auto per_token = GPT::flops_per_token_by_family(cfg);
  for (size_t k = 0; k < prof::kNumOps; ++k) f[k] = static_cast<double>(per_token[k]) * static_cast<double>(tokens);
  return f;
}

/// Seconds per step of the model's GEMM calls run on their own: the same calls with the same
/// shapes as GPT::forward_backward (per Linear: forward, weight gradient, input gradient; the
/// lm_head's chunked forward blocks, input and transposed weight gradients), on random operands,
/// with nothing in between. Per family; 0 for the families without GEMMs. A family whose step
/// time is close to this is bound by the GEMM library's speed on its shapes.
std::array<double, prof::kNumOps> gemms_alone(const ModelConfig& cfg, int64_t N, int64_t chunk_rows) {
  std::array<double, prof::kNumOps> out{};
  const int64_t C = cfg.n_embd, D = cfg.head_dim(), HD = cfg.n_head * D, QKV = HD + 2 * cfg.n_kv_head * D;
  const int64_t V = cfg.vocab_size;
  struct Linear {
    prof::Op op;
    int64_t in, out;
    float beta;  // the forward adds into the residual stream
  };
  const Linear linears[] = {{prof::Op::GemmQKV, C, QKV, 0.f},
                            {prof::Op::GemmAttnProj, HD, C, 1.f},
                            {prof::Op::GemmMlpFc, C, 4 * C, 0.f},
                            {prof::Op::GemmMlpProj, 4 * C, C, 1.f}};
  const int64_t wide = std::max({4 * C, QKV, HD});
  const int64_t m = std::max<int64_t>(1, std::min(chunk_rows, N));
  Rng rng(1);
  auto filled = [&rng](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(rng.uniform(-0.05, 0.05));
    return v;
  };
  std::vector<float> x = filled(N * wide), dy = filled(N * wide), y(N * wide), dx(N * wide);
  std::vector<float> W = filled(std::max(wide * wide, V * C)), dW(std::max(wide * wide, V * C), 0.f);
  std::vector<float> scratch(std::max(wide * wide, V * C)), q = filled(m * V);
  for (const Linear& l : linears) {
    auto run = [&] {
      linear_fwd(x.data(), W.data(), y.data(), N, l.in, l.out, l.beta);
      linear_bwd_w_acc(dy.data(), x.data(), dW.data(), N, l.in, l.out, scratch.data());
      linear_bwd_x(dy.data(), W.data(), dx.data(), N, l.in, l.out);
    };
    run();  // warm-up (oneDNN kernel generation, first touch)
    Timer t;
    run();
    out[static_cast<size_t>(l.op)] += t.seconds() * static_cast<double>(cfg.n_layer);
  }
  // lm_head: the fused kernel's GEMM calls per chunk of m rows (kernels/lm_head_loss.cpp)
  auto chunk = [&](int64_t r0, int64_t rows) {
    for (int64_t j0 = 0; j0 < V; j0 += kLmHeadVocabBlock)
      sgemm(false, true, rows, std::min(kLmHeadVocabBlock, V - j0), C, 1.f, x.data() + r0 * C, C, W.data() + j0 * C, C,
            0.f, q.data() + j0, V);
    linear_bwd_x(q.data(), W.data(), dx.data() + r0 * C, rows, C, V);
    sgemm(true, false, C, V, rows, 1.f, x.data() + r0 * C, C, q.data(), V, r0 == 0 ? 0.f : 1.f, scratch.data(), V);
  };
  chunk(0, m);  // warm-up
  Timer t;
  for (int64_t r0 = 0; r0 < N; r0 += m) chunk(r0, std::min(m, N - r0));
  add_transposed(scratch.data(), dW.data(), V, C);
  out[static_cast<size_t>(prof::Op::LmHeadLoss)] = t.seconds();
  return out;
}

/// Prints the per-op-family profile of the measured steps (wall time; see core/profile.h) with
/// each family's model FLOPs, their rate against the FMA peak, the rate of its GEMM calls run
/// alone (gemms_alone) and the points of MFU it loses: (its time - its FLOPs / peak) / step time,
/// so that MFU (over the mean step) + the points lost = 100. The rest row is time inside the step
/// but outside every profiled scope (zeroing gradients, input checks). Data is zero here: the
/// benchmark feeds random tokens (base-train --profile measures the loader).
void print_profile(double step_seconds_total, int steps, const std::array<double, prof::kNumOps>& flops,
                   const std::array<double, prof::kNumOps>& alone, double peak_gflops) {
  const double covered = prof::total_seconds();
  const double mean_step = step_seconds_total / steps, peak = peak_gflops * 1e9;
  std::printf(
      "    profile per step: wall time, share, model GFLOP, their rate (%% of the FMA peak), the same GEMM calls "
      "alone, MFU points lost\n");
  double lost_sum = 0, useful = 0;
  auto row = [&](const char* name, double s, double fl, double alone_s) {
    const double lost = 100.0 * (s - fl / peak) / mean_step;
    lost_sum += lost;
    useful += fl / peak;
    std::printf("      %-16s %9.1f ms %6.1f%%", name, 1e3 * s, 100.0 * s / mean_step);
    if (fl >= 0.05e9)
      std::printf(" %8.1f %7.1f (%5.1f%%)", fl / 1e9, fl / s / 1e9, 100.0 * fl / s / peak);
    else if (fl > 0)  // the gates' small projections
      std::printf(" %8s %7s  %6s ", "<0.1", "-", "");
    else
      std::printf(" %8s %7s  %6s ", "-", "-", "");
    if (alone_s > 0)
      std::printf(" %7.1f (%5.1f%%)", fl / alone_s / 1e9, 100.0 * fl / alone_s / peak);
    else
      std::printf(" %7s  %6s ", "-", "");
    std::printf(" %6.1f\n", lost);
  };
  for (size_t k = 0; k < prof::kNumOps; ++k) {
    const auto op = static_cast<prof::Op>(k);
    if (op == prof::Op::Data) continue;
    row(prof::name(op), prof::seconds(op) / steps, flops[k], alone[k]);
  }
  row("rest", (step_seconds_total - covered) / steps, 0.0, 0.0);
  std::printf("      MFU over the mean step %.1f%% + points lost %.1f = %.1f\n", 100.0 * useful / mean_step, lost_sum,
              100.0 * useful / mean_step + lost_sum);
}

/// The optimizer's own work per step: Muon's Polar Express FLOPs (optim_math.h), not model FLOPs,
/// and the AdamW parameter count; prints the MFU this step could reach if every op, the
/// optimizer's products included, ran at the peak: model / (model + Polar Express) FLOPs.
void print_optimizer_bound(const MuonAdamW& opt, double model_flops, double opt_seconds, double peak_gflops) {
  double muon = 0;
  for (const OptGroup& g : opt.groups())
    if (g.kind == OptKind::Muon)
      muon +=
          static_cast<double>(g.params.size()) * static_cast<double>(polar_express_flops(g.rows, g.cols, g.ns_steps));
  const double adam_elems = bench::adamw_elements(opt);
  std::printf(
      "    optimizer: %.2f s; Muon's Polar Express multiplies %.1f GFLOP (%.1f%% of the model's %.1f, %.2f s at "
      "the peak), AdamW updates %.1f M parameters; MFU ceiling of this step with every product at the peak: "
      "%.1f%%\n",
      opt_seconds, muon / 1e9, 100.0 * muon / model_flops, model_flops / 1e9, muon / (peak_gflops * 1e9),
      adam_elems / 1e6, 100.0 * model_flops / (model_flops + muon));
}

void usage(const char* argv0, FILE* to = stderr) {
  std::fprintf(to,
               "usage: %s [--steps N] [--warmup N] [--threads 1,2] "
               "[--config d4,d6,d6b32,d8,d12,d8t2k,...|all] [--peak-seconds S] [--json] [--list-configs] "
               "[--peak-only] [--recompute-mlp] [--dtype float32,bfloat16] [--rounds R]\n",
               argv0);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5, warmup = 1;
  double peak_seconds = 0.3;
  bool json = false, list_only = false, peak_only = false, recompute_mlp = false;
  std::vector<int> threads = {1, 2};
  std::vector<std::string> which = {"all"};
  std::vector<ComputeDtype> dtypes = {ComputeDtype::Float32};
  int rounds = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--warmup") && i + 1 < argc)
      warmup = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = parse_int_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--config") && i + 1 < argc)
      which = split(argv[++i]);
    else if (!std::strcmp(argv[i], "--peak-seconds") && i + 1 < argc)
      peak_seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--json"))
      json = true;
    else if (!std::strcmp(argv[i], "--list-configs"))
      list_only = true;
    else if (!std::strcmp(argv[i], "--peak-only"))
      peak_only = true;
    else if (!std::strcmp(argv[i], "--recompute-mlp"))
      recompute_mlp = true;
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) {
      dtypes.clear();
      for (const auto& d : split(argv[++i])) {
        try {
          dtypes.push_back(parse_compute_dtype(d, "--dtype"));
          if (dtypes.back() == ComputeDtype::BFloat16) require_native_bf16("--dtype bfloat16");
        } catch (const std::exception& e) {
          std::fprintf(stderr, "bench_train_step: %s\n", e.what());
          return 2;
        }
      }
    } else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      usage(argv[0], stdout);
      return 0;
    } else {
      std::fprintf(stderr, "bench_train_step: unknown or incomplete option '%s'\n", argv[i]);
      usage(argv[0]);
      return 2;
    }
  }
  if (steps < 1 || warmup < 0 || rounds < 1 || threads.empty() || which.empty()) {
    usage(argv[0]);
    return 2;
  }
  std::vector<const BenchConfig*> selected;
  for (const auto& w : which) {
    bool found = false;
    for (const auto& bc : kConfigs) {
      if (w == "all" || w == bc.name) {
        if (std::find(selected.begin(), selected.end(), &bc) == selected.end()) selected.push_back(&bc);
        found = true;
      }
    }
    if (!found) {
      std::string known;
      for (const auto& bc : kConfigs) known += std::string(bc.name) + ", ";
      std::fprintf(stderr, "bench_train_step: unknown --config '%s' (known: %sall)\n", w.c_str(), known.c_str());
      return 2;
    }
  }

  if (list_only) {
    for (const BenchConfig* bc : selected) {
      ModelConfig cfg = bench::model_config(*bc);
      if (json) {
        std::printf(
            "{\"config\":\"%s\",\"depth\":%d,\"head_dim\":%d,\"n_embd\":%lld,\"n_head\":%lld,"
            "\"n_kv_head\":%lld,\"T\":%d,\"B\":%d,\"window\":\"%s\",\"vocab\":%d,"
            "\"flops_per_token\":%lld}\n",
            bc->name, bc->depth, bc->head_dim, static_cast<long long>(cfg.n_embd), static_cast<long long>(cfg.n_head),
            static_cast<long long>(cfg.n_kv_head), bc->T, bc->B, bc->pattern, bc->vocab,
            static_cast<long long>(GPT::flops_per_token(cfg)));
      } else {
        std::printf(
            "%-6s depth %2d  n_embd %4lld  heads %2lld x %3d  T %4d  B %2d  window %-4s  "
            "FLOPs/token %.1fM\n",
            bc->name, bc->depth, static_cast<long long>(cfg.n_embd), static_cast<long long>(cfg.n_head), bc->head_dim,
            bc->T, bc->B, bc->pattern, GPT::flops_per_token(cfg) / 1e6);
      }
    }
    return 0;
  }

  if (peak_only) {
    for (int nt : threads) {
      set_num_threads(nt);
      const double peak = measure_fma_peak_gflops(nt, peak_seconds);
      if (json)
        std::printf("{\"side\":\"peak\",\"threads\":%d,\"peak_gflops\":%.3f,\"peak_isa\":\"%s\"}\n", nt, peak,
                    fma_peak_isa());
      else
        std::printf("threads %d: FMA peak %.1f GFLOP/s (%s)\n", nt, peak, fma_peak_isa());
      std::fflush(stdout);
    }
    return 0;
  }

  if (!json)
    std::printf("%-6s %3s %3s %5s %-4s | %9s %9s | %10s %8s | %9s | %s\n", "cfg", "thr", "B", "T", "type", "step_ms",
                "tok/s", "GFLOP/s", "MFU", "peak RSS", "peak GFLOP/s (measured FMA or bf16 dot, ISA; oneDNN's ISA)");
  bool first_row = true;
  for (int nt : threads) {
    set_num_threads(nt);
    const double peak_fp32 = measure_fma_peak_gflops(nt, peak_seconds);
    const bool any_bf16 = std::find(dtypes.begin(), dtypes.end(), ComputeDtype::BFloat16) != dtypes.end();
    const double peak_bf16 = any_bf16 ? measure_fma_peak_gflops(nt, peak_seconds, PeakKind::Bf16Dot) : 0.0;
    for (const BenchConfig* bcp : selected) {
      std::vector<double> ratios;  // bf16 / fp32 per round
      for (int round = 0; round < rounds; ++round) {
        std::vector<ComputeDtype> order = dtypes;
        if (round % 2 == 1) std::reverse(order.begin(), order.end());
        std::vector<double> tps_of;  // per dtype of `order`
        for (const ComputeDtype dtype : order) {
          const bool bf = dtype == ComputeDtype::BFloat16;
          const double peak = bf ? peak_bf16 : peak_fp32;
          const char* peak_isa = fma_peak_isa(bf ? PeakKind::Bf16Dot : PeakKind::Fp32Fma);
          const BenchConfig& bc = *bcp;
          ModelConfig cfg = bench::model_config(bc);
          GPT model(cfg);
          model.init_weights(42);
          model.set_recompute_mlp(recompute_mlp);
          model.set_compute_dtype(dtype);
          std::vector<OptParam> ps;
          for (const auto& p : model.params())
            ps.push_back({p.name, p.shape, model.param_data() + p.offset, model.grad_data() + p.offset});
          OptimConfig oc;
          oc.model_dim = cfg.n_embd;
          oc.weight_decay = 0.2f;
          oc.bf16_polar_express = bf;  // as base-train --dtype bfloat16
          MuonAdamW opt(ps, oc);
          Rng rng(7);
          std::vector<int32_t> idx(static_cast<size_t>(bc.B) * bc.T), tgt(idx.size());
          for (size_t i = 0; i < idx.size(); ++i) {
            idx[i] = static_cast<int32_t>(rng.below(bc.vocab));
            tgt[i] = static_cast<int32_t>(rng.below(bc.vocab));
          }
          double t_fb = 0, t_opt = 0;
          float loss = 0;
          auto one_step = [&] {
            Timer t;
            model.zero_grad();
            loss = model.forward_backward(idx.data(), tgt.data(), bc.B, bc.T, 1.f);
            t_fb = t.seconds();
            Timer t2;
            opt.step(1.f, 0.95f, 0.1f);
            model.params_changed();
            t_opt = t2.seconds();
          };
          // warm-up: first touch of every buffer, oneDNN kernel generation
          std::vector<double> warm_times;
          for (int s = 0; s < warmup; ++s) {
            Timer t;
            one_step();
            warm_times.push_back(t.seconds());
            if (json) std::fprintf(stderr, "warmup %d/%d: %.3f s\n", s + 1, warmup, warm_times.back());
          }
          std::vector<double> times, fb_times, opt_times, cpu_times;
          std::vector<double> faults;  // page faults per timed step
          prof::reset();
          prof::enable(true);
          for (int s = 0; s < steps; ++s) {
            const double c0 = process_cpu_seconds();
            const long f0 = page_faults();
            Timer t;
            one_step();
            times.push_back(t.seconds());
            faults.push_back(static_cast<double>(page_faults() - f0));
            cpu_times.push_back(process_cpu_seconds() - c0);
            fb_times.push_back(t_fb);
            opt_times.push_back(t_opt);
            if (json) std::fprintf(stderr, "step %d/%d: %.3f s\n", s + 1, steps, times.back());
          }
          prof::enable(false);
          double sum_times = 0;
          for (double t : times) sum_times += t;
          const double med = median(times);
          const double tps = bc.B * bc.T / med;
          tps_of.push_back(tps);
          const double gflops = tps * static_cast<double>(model.num_flops_per_token()) / 1e9;
          const long rss = peak_rss_bytes();
          if (json) {
            std::printf(
                "{\"side\":\"ours\",\"config\":\"%s\",\"depth\":%d,\"head_dim\":%d,\"n_embd\":%lld,"
                "\"T\":%d,\"B\":%d,\"window\":\"%s\",\"vocab\":%d,\"dtype\":\"%s\",\"threads\":%d,\"steps\":%d,"
                "\"warmup\":%d,\"num_params\":%zu,\"flops_per_token\":%lld,\"step_s\":%.6f,"
                "\"fwdbwd_s\":%.6f,\"opt_s\":%.6f,\"tok_s\":%.3f,\"gflops\":%.3f,"
                "\"peak_gflops\":%.3f,\"peak_isa\":\"%s\",\"gemm_isa\":\"%s\",\"mfu\":%.5f,\"peak_rss_bytes\":%ld,"
                "\"step_cpu_s\":%.6f,\"page_faults_per_step\":%.0f,\"activation_bytes\":%zu,"
                "\"optimizer_state_bytes\":%zu,\"loss\":%.5f,\"step_times\":",
                bc.name, bc.depth, bc.head_dim, static_cast<long long>(cfg.n_embd), bc.T, bc.B, bc.pattern, bc.vocab,
                compute_dtype_name(dtype), nt, steps, warmup, model.num_params(),
                static_cast<long long>(model.num_flops_per_token()), med, median(fb_times), median(opt_times), tps,
                gflops, peak, peak_isa, gemm_isa(), gflops / peak, rss, median(cpu_times), median(faults),
                model.activation_bytes(), 4 * opt.state_floats(), loss);
            print_list(times);
            std::printf(",\"warmup_times\":");
            print_list(warm_times);
            std::printf(",\"profile_s\":{");
            for (size_t k = 0; k < prof::kNumOps; ++k)
              std::printf("%s\"%s\":%.6f", k ? "," : "", prof::name(static_cast<prof::Op>(k)),
                          prof::seconds(static_cast<prof::Op>(k)) / steps);
            std::printf("}}\n");
          } else {
            std::printf("%-6s %3d %3d %5d %-4s | %9.1f %9.0f | %10.1f %7.1f%% | %6.2f GB | %.1f (%s; oneDNN %s)\n",
                        bc.name, nt, bc.B, bc.T, bf ? "bf16" : "fp32", med * 1e3, tps, gflops, 100.0 * gflops / peak,
                        rss / 1e9, peak, peak_isa, gemm_isa());
            const auto flops = family_flops(cfg, static_cast<int64_t>(bc.B) * bc.T);
            // the GEMMs alone are timed in fp32 only (a bf16 row shows none)
            print_profile(sum_times, steps, flops,
                          bf ? std::array<double, prof::kNumOps>{}
                             : gemms_alone(cfg, static_cast<int64_t>(bc.B) * bc.T, model.lm_head_chunk()),
                          peak);
            double model_flops = 0;
            for (double f : flops) model_flops += f;
            print_optimizer_bound(opt, model_flops, prof::seconds(prof::Op::Optimizer) / steps, peak);
            std::printf("    page faults per step (median): %.0f\n", median(faults));
            // where the peak RSS goes: the big buffers the program holds (GB = 1e9 bytes)
            const double pg = 2.0 * 4.0 * static_cast<double>(model.num_params()) / 1e9;
            const double og = 4.0 * static_cast<double>(opt.state_floats()) / 1e9;
            const double ag = static_cast<double>(model.activation_bytes()) / 1e9;
            std::printf("    memory: params + grads %.2f GB, optimizer state %.2f GB, activations %.2f GB", pg, og, ag);
            if (first_row)  // later rows' peak RSS is the process's peak so far, not their own
              std::printf(", rest of the peak RSS (optimizer scratch, libraries, code) %.2f GB",
                          rss / 1e9 - pg - og - ag);
            std::printf("\n");
          }
          std::fflush(stdout);
          first_row = false;
        }
        if (order.size() == 2 && order[0] != order[1]) {
          const bool bf_second = order[1] == ComputeDtype::BFloat16;
          ratios.push_back(bf_second ? tps_of[1] / tps_of[0] : tps_of[0] / tps_of[1]);
          if (!json)
            std::printf("%-6s %3d  round %d: bf16 / fp32 tok/s %.2fx\n", bcp->name, nt, round + 1, ratios.back());
          std::fflush(stdout);
        }
      }
      if (!ratios.empty()) {
        if (json) {
          std::printf("{\"side\":\"ratio\",\"config\":\"%s\",\"threads\":%d,\"bf16_over_fp32_tok_s\":%.4f,\"rounds\":",
                      bcp->name, nt, median(ratios));
          print_list(ratios);
          std::printf("}\n");
        } else {
          std::printf("%-6s %3d  bf16 / fp32 tok/s: %.2fx (median of %zu round%s)\n", bcp->name, nt, median(ratios),
                      ratios.size(), ratios.size() > 1 ? "s" : "");
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
