// Times the optimizer's two kinds of work (optim/optim_math.h) on the parameters of a training
// config and prints each against what bounds it:
//  - AdamW over every AdamW parameter (embeddings, lm_head, scalars) is memory-bound: it reads p,
//    grad, exp_avg, exp_avg_sq and writes p, exp_avg, exp_avg_sq (28 bytes per element), so its
//    rate is printed in GB/s next to a memcpy of the same machine (8 bytes per element moved).
//  - Muon per matrix: the whole muon_update and its Polar Express products alone, in GFLOP/s
//    (polar_express_flops) against the FMA peak and against one plain sgemm of the same side.
// The sum (AdamW + every Muon matrix's update) is what one optimizer step costs on one rank;
// bench_train_step prints the optimizer's share of the step.
//
// usage: bench_optimizer [--config d4|d6|d6b32|d8|d12] [--threads N] [--repeats R] [--dtype float32|bfloat16]
//   the configs of bench_train_step (bench_configs.h; d6b32 has d6's parameters)
// --dtype bfloat16: Muon as --dtype bfloat16 training runs it (MuonHyper::bf16: Polar Express by
// polar_express_bf16, full products), against the bf16 dot-product peak; AdamW is the same fp32.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_configs.h"
#include "nanochat/core/peak.h"
#include "nanochat/core/rng.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/gemm_bf16.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/optim/optim_math.h"

using namespace nanochat;

namespace {

template <typename F>
double best_of(int repeats, F&& f) {
  f();  // warm-up: first touch, oneDNN kernel generation
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    f();
    best = std::min(best, t.seconds());
  }
  return best;
}

std::vector<float> filled(Rng& rng, size_t n, double scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal() * scale);
  return v;
}

int usage(const char* argv0, FILE* to = stderr, int rc = 2) {
  std::fprintf(to, "usage: %s [--config d4|d6|d6b32|d8|d12] [--threads N] [--repeats R] [--dtype float32|bfloat16]\n",
               argv0);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config = "d4";
  int threads = 1, repeats = 3;
  bool bf16_mode = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--config") && i + 1 < argc)
      config = argv[++i];
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc &&
             (!std::strcmp(argv[i + 1], "float32") || !std::strcmp(argv[i + 1], "bfloat16")))
      bf16_mode = !std::strcmp(argv[++i], "bfloat16");
    else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h"))
      return usage(argv[0], stdout, 0);
    else {
      std::fprintf(stderr, "bench_optimizer: unknown or incomplete option '%s'\n", argv[i]);
      return usage(argv[0]);
    }
  }
  const bench::BenchConfig* bc = nullptr;
  for (const auto& c : bench::kConfigs)
    if (config == c.name) bc = &c;
  if (bc == nullptr) {
    std::string known;
    for (const auto& c : bench::kConfigs) known += std::string(known.empty() ? "" : ", ") + c.name;
    std::fprintf(stderr, "bench_optimizer: unknown --config '%s' (known: %s)\n", config.c_str(), known.c_str());
    return 2;
  }
  if (threads < 1 || repeats < 1) {
    std::fprintf(stderr, "bench_optimizer: --threads and --repeats must be >= 1\n");
    return usage(argv[0]);
  }
  set_num_threads(threads);
  if (bf16_mode && !native_bf16_available()) {
    std::fprintf(stderr, "bench_optimizer: --dtype bfloat16: %s\n", native_bf16_status().c_str());
    return 2;
  }
  const ModelConfig cfg = bench::model_config(*bc);
  GPT model(cfg);  // only for the parameter list the optimizer groups
  std::vector<OptParam> ps;
  for (const auto& p : model.params())
    ps.push_back({p.name, p.shape, model.param_data() + p.offset, model.grad_data() + p.offset});
  const MuonAdamW opt(ps, OptimConfig{});
  const PeakKind kind = bf16_mode ? PeakKind::Bf16Dot : PeakKind::Fp32Fma;
  const double peak = measure_fma_peak_gflops(threads, 0.3, kind);
  std::printf("%s, %d thread(s), %s, %s peak %.1f GFLOP/s (%s; oneDNN %s), best of %d\n", config.c_str(), threads,
              bf16_mode ? "bfloat16" : "float32", bf16_mode ? "bf16 dot" : "FMA", peak, fma_peak_isa(kind), gemm_isa(),
              repeats);

  // AdamW: every AdamW parameter's elements in one call (the per-parameter calls add nothing but
  // their count).
  Rng rng(5);
  const auto adam_elems = static_cast<size_t>(bench::adamw_elements(opt));
  double t_adam = 0;
  {
    auto p = filled(rng, adam_elems, 0.02), g = filled(rng, adam_elems, 1e-3), m = filled(rng, adam_elems, 1e-4);
    std::vector<float> v(adam_elems, 1e-6f), copy(adam_elems);
    AdamWHyper hp;
    hp.lr = 1e-3;
    hp.weight_decay = 0.0;
    t_adam = best_of(repeats, [&] { adamw_update(p.data(), g.data(), m.data(), v.data(), adam_elems, 1.f, hp); });
    const double t_copy = best_of(repeats, [&] { std::memcpy(copy.data(), p.data(), 4 * adam_elems); });
    const double n = static_cast<double>(adam_elems);
    std::printf(
        "AdamW   %7.1f M elements: %8.1f ms  %5.1f GB/s (28 B per element); memcpy of the same floats %5.1f GB/s\n",
        n / 1e6, 1e3 * t_adam, 28.0 * n / t_adam / 1e9, 8.0 * n / t_copy / 1e9);
  }

  // Muon: one matrix per group shape, its count from the group.
  double t_muon = 0;
  for (const OptGroup& g : opt.groups()) {
    if (g.kind != OptKind::Muon) continue;
    const int64_t m = g.rows, n = g.cols, k = std::min(m, n), len = std::max(m, n);
    const auto count = static_cast<int64_t>(g.params.size());
    std::vector<float> x(m * n), x2(m * n), a(k * k), b(k * k), c(m * n);
    std::vector<double> rowv(len);
    const MuonScratch s{x.data(), x2.data(), a.data(), b.data(), rowv.data()};
    auto p = filled(rng, m * n, 0.02), grad = filled(rng, m * n, 1e-3), mom = filled(rng, m * n, 1e-3);
    std::vector<float> second(len, 1e-6f);
    MuonHyper hp;
    hp.lr = 0.02;
    hp.bf16 = bf16_mode;
    const double t_update =
        best_of(repeats, [&] { muon_update(p.data(), grad.data(), mom.data(), second.data(), m, n, 1.f, hp, s); });
    auto x0 = filled(rng, m * n, 0.5 / std::sqrt(static_cast<double>(m * n)));
    if (bf16_mode)  // polar_express_bf16 takes bf16 values: rounded once, outside the timing
      for (auto& v : x0) v = bf16_to_float(float_to_bf16(v));
    const double t_polar = best_of(repeats, [&] {
      std::copy(x0.begin(), x0.end(), x.begin());
      if (bf16_mode)
        polar_express_bf16(x.data(), m, n, s, 5);
      else
        polar_express(x.data(), m, n, s, 5);
    });
    const double t_gemm =
        best_of(repeats, [&] { sgemm(false, false, k, len, k, 1.f, a.data(), k, x0.data(), len, 0.f, c.data(), len); });
    const double fl = static_cast<double>(polar_express_flops(m, n, 5));
    std::printf(
        "Muon    %3lld x (%4lld, %4lld): update %7.1f ms each; Polar Express %7.1f ms, %6.1f GFLOP/s (%5.1f%% of "
        "peak); "
        "one (%lld, %lld) x (%lld, %lld) sgemm %6.1f GFLOP/s\n",
        static_cast<long long>(count), static_cast<long long>(m), static_cast<long long>(n), 1e3 * t_update,
        1e3 * t_polar, fl / t_polar / 1e9, 100.0 * fl / t_polar / 1e9 / peak, static_cast<long long>(k),
        static_cast<long long>(k), static_cast<long long>(k), static_cast<long long>(len),
        2.0 * static_cast<double>(k * k * len) / t_gemm / 1e9);
    t_muon += static_cast<double>(count) * t_update;
  }
  std::printf("one optimizer step on one rank: AdamW %.1f ms + Muon %.1f ms = %.1f ms\n", 1e3 * t_adam, 1e3 * t_muon,
              1e3 * (t_adam + t_muon));
  return 0;
}
