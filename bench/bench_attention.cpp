// Times the attention kernels (kernels/attention.h) on the training shapes of d4, d6 and d8 at
// T 512 and of d8 at nanochat's default context (T 2048), each with its long and short window
// (nanochat's SSSL: the short window is T/4 rounded up to 128).
// Usage: bench_attention [threads=1] [repeats=5] [--reference]
// (--reference also times the straightforward reference kernels, on the causal shapes.)
// Prints the best-of-repeats time per call, GFLOP/s and its share of the measured FMA peak. FLOPs are counted over the
// visible (query, key) pairs only, i.e. with the causal halving: forward = 4*B*H*D*pairs (QK^T and PV), backward =
// 10*B*H*D*pairs (the five products of FlashAttention-2's backward; the kFused split does exactly these, kSplit
// recomputes QK^T and dO V^T once more). For a full causal row set pairs = T(T+1)/2; with window w each query sees at
// most w+1 keys. A decode step (one query against a 512-token KV cache) is timed last.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "nanochat/core/peak.h"
#include "nanochat/core/rng.h"
#include "nanochat/core/timer.h"
#include "nanochat/kernels/attention.h"

using namespace nanochat;

namespace {

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Best wall time and best process CPU time (all threads) over `repeats` calls after a warm-up.
// On a shared machine the CPU time is the steadier number: it leaves out time spent waiting for
// a core while other processes run.
struct Timing {
  double wall, cpu;
};
Timing best_seconds(int repeats, const std::function<void()>& fn) {
  fn();  // warm-up (thread-local scratch, page faults)
  Timing best{1e30, 1e30};
  for (int r = 0; r < repeats; ++r) {
    const double c0 = cpu_seconds();
    Timer t;
    fn();
    best.wall = std::min(best.wall, t.seconds());
    best.cpu = std::min(best.cpu, cpu_seconds() - c0);
  }
  return best;
}

double g_peak = 0;  // measured FMA peak of the thread count, GFLOP/s

void print_row(const char* what, Timing t, double flops) {
  const double rate = flops / t.wall * 1e-9;
  std::printf("  %-16s wall %8.3f ms %7.1f GFLOP/s %5.1f%% of peak | cpu %8.3f ms %7.1f GFLOP/s per core-second\n",
              what, t.wall * 1e3, rate, 100.0 * rate / g_peak, t.cpu * 1e3, flops / t.cpu * 1e-9);
}

void run_shape(const char* name, int B, int T, int H, int Hkv, int D, int window, int repeats, bool with_reference) {
  const size_t nq = size_t(B) * T * H * D, nkv = size_t(B) * T * Hkv * D;
  Rng rng(1);
  auto fill = [&](std::vector<float>& x) {
    for (auto& e : x) e = static_cast<float>(rng.uniform(-1, 1));
  };
  std::vector<float> q(nq), k(nkv), v(nkv), out(nq), dout(nq), dq(nq), dk(nkv), dv(nkv);
  std::vector<float> lse(size_t(B) * H * T);
  fill(q), fill(k), fill(v), fill(dout);
  const float scale = 1.f / std::sqrt(float(D));
  double pairs = 0;
  for (int i = 0; i < T; ++i) pairs += std::min(i, window) + 1;
  const double fwd_flops = 4.0 * B * H * D * pairs, bwd_flops = 10.0 * B * H * D * pairs;

  const Timing t_fwd = best_seconds(repeats, [&] {
    attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, H, Hkv, D, window, scale);
  });
  auto bwd = [&](AttentionBackwardMode mode) {
    return best_seconds(repeats, [&] {
      attention_backward_with(mode, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                              dk.data(), dv.data(), B, T, H, Hkv, D, window, scale);
    });
  };
  const Timing t_fused = bwd(AttentionBackwardMode::kFused);
  const Timing t_split = bwd(AttentionBackwardMode::kSplit);
  std::printf("%-4s B=%d T=%d H=%d Hkv=%d D=%d window=%d pairs/head=%.0f\n", name, B, T, H, Hkv, D, window, pairs);
  print_row("forward", t_fwd, fwd_flops);
  print_row("backward fused", t_fused, bwd_flops);
  print_row("backward split", t_split, bwd_flops);
  if (with_reference) {
    const Timing t_ref_f = best_seconds(1, [&] {
      attention_forward_reference<float>(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, H, Hkv, D, window,
                                         scale);
    });
    const Timing t_ref_b = best_seconds(1, [&] {
      attention_backward_reference<float>(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                                          dk.data(), dv.data(), B, T, H, Hkv, D, window, scale);
    });
    print_row("reference fwd", t_ref_f, fwd_flops);
    print_row("reference bwd", t_ref_b, bwd_flops);
  }
}

// One decode step (Tq = 1 at position ctx - 1) through the KV-cache path.
void run_decode(const char* name, int B, int H, int D, int ctx, int repeats) {
  Rng rng(2);
  std::vector<float> q(size_t(B) * H * D), kc(size_t(B) * ctx * H * D), vc(kc.size()), out(q.size());
  for (auto* x : {&q, &kc, &vc})
    for (auto& e : *x) e = static_cast<float>(rng.uniform(-1, 1));
  const Timing t = best_seconds(repeats * 20, [&] {
    attention_forward_cached(q.data(), kc.data(), vc.data(), out.data(), B, 1, ctx - 1, ctx, H, H, D, ctx,
                             1.f / std::sqrt(float(D)));
  });
  std::printf("%-4s decode B=%d H=%d D=%d context=%d\n", name, B, H, D, ctx);
  print_row("forward_cached", t, 4.0 * B * H * D * ctx);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const bool ref = argc > 3 && std::strcmp(argv[3], "--reference") == 0;
  omp_set_num_threads(std::max(1, threads));
  g_peak = measure_fma_peak_gflops(std::max(1, threads));
  std::printf("attention benchmark: %d thread(s), best of %d; measured fp32 FMA peak %.1f GFLOP/s (%s)\n", threads,
              repeats, g_peak, fma_peak_isa());
  run_shape("d4", 8, 512, 2, 2, 128, 512, repeats, ref);
  run_shape("d4", 8, 512, 2, 2, 128, 128, repeats, false);
  run_shape("d6", 8, 512, 6, 6, 64, 512, repeats, ref);
  run_shape("d6", 8, 512, 6, 6, 64, 128, repeats, false);
  run_shape("d8", 8, 512, 4, 4, 128, 512, repeats, false);
  run_shape("d8", 8, 512, 4, 4, 128, 128, repeats, false);
  run_shape("d8", 2, 2048, 4, 4, 128, 2048, repeats, false);
  run_shape("d8", 2, 2048, 4, 4, 128, 512, repeats, false);
  run_decode("d6", 1, 6, 64, 512, repeats);
  return 0;
}
