// Times the attention kernels (kernels/attention.h) on the d4 and d6 training shapes.
// Usage: bench_attention [threads=1] [repeats=5] [--reference]
// (--reference also times the straightforward reference kernels, on the causal shapes.)
// Prints the best-of-repeats time per call and GFLOP/s. FLOPs are counted over the visible
// (query, key) pairs only, i.e. with the causal halving: forward = 4*B*H*D*pairs (QK^T and PV),
// backward = 10*B*H*D*pairs (the five products of FlashAttention-2's backward; the kFused split
// does exactly these, kSplit recomputes QK^T and dO V^T once more). For a full causal row set
// pairs = T(T+1)/2; with window w each query sees at most w+1 keys.
#include <omp.h>

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

double best_seconds(int repeats, const std::function<void()>& fn) {
  fn();  // warm-up (thread-local scratch, page faults)
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    fn();
    best = std::min(best, t.seconds());
  }
  return best;
}

void run_shape(const char* name, int B, int T, int H, int Hkv, int D, int window, int repeats,
               bool with_reference) {
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

  const double t_fwd = best_seconds(repeats, [&] {
    attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, H, Hkv, D,
                      window, scale);
  });
  auto bwd = [&](AttentionBackwardMode mode) {
    return best_seconds(repeats, [&] {
      attention_backward_with(mode, q.data(), k.data(), v.data(), out.data(), lse.data(),
                              dout.data(), dq.data(), dk.data(), dv.data(), B, T, H, Hkv, D,
                              window, scale);
    });
  };
  const double t_fused = bwd(AttentionBackwardMode::kFused);
  const double t_split = bwd(AttentionBackwardMode::kSplit);
  std::printf("%-4s B=%d T=%d H=%d Hkv=%d D=%d window=%d pairs/head=%.0f\n", name, B, T, H, Hkv, D,
              window, pairs);
  std::printf("  forward          %8.3f ms  %7.1f GFLOP/s\n", t_fwd * 1e3, fwd_flops / t_fwd * 1e-9);
  std::printf("  backward fused   %8.3f ms  %7.1f GFLOP/s\n", t_fused * 1e3,
              bwd_flops / t_fused * 1e-9);
  std::printf("  backward split   %8.3f ms  %7.1f GFLOP/s\n", t_split * 1e3,
              bwd_flops / t_split * 1e-9);
  if (with_reference) {
    const double t_ref_f = best_seconds(1, [&] {
      attention_forward_reference<float>(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T,
                                         H, Hkv, D, window, scale);
    });
    const double t_ref_b = best_seconds(1, [&] {
      attention_backward_reference<float>(q.data(), k.data(), v.data(), out.data(), lse.data(),
                                          dout.data(), dq.data(), dk.data(), dv.data(), B, T, H,
                                          Hkv, D, window, scale);
    });
    std::printf("  reference fwd    %8.3f ms  %7.1f GFLOP/s\n", t_ref_f * 1e3,
                fwd_flops / t_ref_f * 1e-9);
    std::printf("  reference bwd    %8.3f ms  %7.1f GFLOP/s\n", t_ref_b * 1e3,
                bwd_flops / t_ref_b * 1e-9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const bool ref = argc > 3 && std::strcmp(argv[3], "--reference") == 0;
  omp_set_num_threads(std::max(1, threads));
  std::printf("attention benchmark: %d thread(s), best of %d; measured fp32 FMA peak %.1f GFLOP/s (%s)\n",
              threads, repeats, measure_fma_peak_gflops(std::max(1, threads)), fma_peak_isa());
  run_shape("d4", 8, 512, 2, 2, 128, 512, repeats, ref);
  run_shape("d4", 8, 512, 2, 2, 128, 128, repeats, false);
  run_shape("d6", 8, 512, 6, 6, 64, 512, repeats, ref);
  run_shape("d6", 8, 512, 6, 6, 64, 128, repeats, false);
  return 0;
}
