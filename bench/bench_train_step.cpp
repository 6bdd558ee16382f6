// Training-step benchmark (issue: model + optimizer speed). Measures this machine's fp32 FMA
// peak, then times forward+backward+MuonAdamW steps on random tokens and prints tok/s and MFU
// (FLOPs/token = nanochat's estimate_flops) at 1 and 2 threads.
//
// usage: bench_train_step [--steps N] [--threads 1,2] [--config d4|d6|all]
//   d4: depth 4, head_dim 128, T 512, B 8, window "SSSL" (vocab 32768)
//   d6: nanochat's runcpu config: depth 6, head_dim 64, T 512, window "L", B 8
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nanochat/core/peak.h"
#include "nanochat/core/rng.h"
#include "nanochat/core/timer.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/train/plan.h"

using namespace nanochat;

namespace {

struct BenchConfig {
  const char* name;
  int depth, head_dim, T, B;
  const char* pattern;
};

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) out.push_back(std::atoi(cur.c_str()));
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5;
  std::vector<int> threads = {1, 2};
  std::string which = "all";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--config") && i + 1 < argc) which = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--steps N] [--threads 1,2] [--config d4|d6|all]\n", argv[0]);
      return 2;
    }
  }
  const BenchConfig configs[] = {{"d4", 4, 128, 512, 8, "SSSL"}, {"d6", 6, 64, 512, 8, "L"}};
  std::printf("%-4s %3s %3s %5s | %9s %9s | %10s %8s | %s\n", "cfg", "thr", "B", "T", "step_ms",
              "tok/s", "GFLOP/s", "MFU", "peak GFLOP/s (measured FMA, " "ISA)");
  for (int nt : threads) {
    set_num_threads(nt);
    const double peak = measure_fma_peak_gflops(nt, 0.3);
    for (const auto& bc : configs) {
      if (which != "all" && which != bc.name) continue;
      ModelConfig cfg = ModelConfig::from_depth(bc.depth, 64, bc.head_dim, bc.T, 32768, bc.pattern);
      GPT model(cfg);
      model.init_weights(42);
      std::vector<OptParam> ps;
      for (const auto& p : model.params())
        ps.push_back({p.name, p.shape, model.param_data() + p.offset, model.grad_data() + p.offset});
      OptimConfig oc;
      oc.model_dim = cfg.n_embd;
      oc.weight_decay = 0.2f;
      MuonAdamW opt(ps, oc);
      Rng rng(7);
      std::vector<int32_t> idx(static_cast<size_t>(bc.B) * bc.T), tgt(idx.size());
      for (size_t i = 0; i < idx.size(); ++i) {
        idx[i] = static_cast<int32_t>(rng.below(32768));
        tgt[i] = static_cast<int32_t>(rng.below(32768));
      }
      auto one_step = [&] {
        model.zero_grad();
        model.forward_backward(idx.data(), tgt.data(), bc.B, bc.T, 1.f);
        opt.step(1.f, 0.95f, 0.1f);
      };
      one_step();  // warm-up: first touch of every buffer, oneDNN kernel generation
      std::vector<double> times;
      for (int s = 0; s < steps; ++s) {
        Timer t;
        one_step();
        times.push_back(t.seconds());
      }
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      const double tps = bc.B * bc.T / med;
      const double gflops = tps * static_cast<double>(model.num_flops_per_token()) / 1e9;
      std::printf("%-4s %3d %3d %5d | %9.1f %9.0f | %10.1f %7.1f%% | %.1f (%s)\n", bc.name, nt, bc.B,
                  bc.T, med * 1e3, tps, gflops, 100.0 * gflops / peak, peak, fma_peak_isa());
      std::fflush(stdout);
    }
  }
  return 0;
}
