// Times the fused lm_head + softcap + cross-entropy (kernels/lm_head_loss.h), forward and
// backward, on the training shapes, against the three plain GEMMs of the same sizes (forward
// logits, dx, dW) run unfused on a materialised (N, V) buffer, and against the FMA peak.
// Usage: bench_lm_head [--threads 1] [--repeats 3] [--chunks 128,256,512] [--shape N,C,V]...
// FLOPs counted: 6 N C V (the three GEMMs); the softcap/CE elementwise work is not counted.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nanochat/core/arena.h"
#include "nanochat/core/peak.h"
#include "nanochat/core/rng.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/lm_head_loss.h"
#include "nanochat/kernels/packed_gemm.h"

using namespace nanochat;

namespace {

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoll(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

template <typename F>
double best_of(int repeats, F&& fn) {
  fn();  // warm-up: first touch, kernel generation
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    fn();
    best = std::min(best, t.seconds());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeats = 3;
  std::vector<int64_t> chunks = {128, 256, 512};
  std::vector<std::vector<int64_t>> shapes;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--chunks") && i + 1 < argc)
      chunks = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc)
      shapes.push_back(parse_list(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--threads 1] [--repeats 3] [--chunks 128,256,512] [--shape N,C,V]...\n",
                   argv[0]);
      return 2;
    }
  }
  if (shapes.empty()) shapes = {{4096, 256, 32768}, {4096, 384, 32768}, {4096, 768, 32768}};
  set_num_threads(threads);
  const double peak = measure_fma_peak_gflops(threads, 0.3);
  std::printf("threads %d, FMA peak %.1f GFLOP/s (%s)\n", threads, peak, fma_peak_isa());
  for (const auto& sh : shapes) {
    if (sh.size() != 3) {
      std::fprintf(stderr, "--shape wants N,C,V\n");
      return 2;
    }
    const int64_t N = sh[0], C = sh[1], V = sh[2];
    const double flops = 6.0 * static_cast<double>(N) * C * V;
    Rng rng(3);
    AlignedBuffer x(N * C * sizeof(float)), W(V * C * sizeof(float)), dx(N * C * sizeof(float)),
        dW(V * C * sizeof(float)), dWt(V * C * sizeof(float));
    std::vector<int32_t> tgt(N);
    for (int64_t i = 0; i < N * C; ++i) x.f32()[i] = static_cast<float>(rng.normal());
    for (int64_t i = 0; i < V * C; ++i) W.f32()[i] = static_cast<float>(0.05 * rng.normal());
    for (auto& t : tgt) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
    std::printf("N %lld C %lld V %lld (%.1f GFLOP per call)\n", static_cast<long long>(N), static_cast<long long>(C),
                static_cast<long long>(V), flops * 1e-9);
    for (int64_t cr : chunks) {
      AlignedBuffer scratch(lm_head_scratch_floats(cr, N, C, V) * sizeof(float));
      const double t = best_of(repeats, [&] {
        lm_head_softcap_ce(x.f32(), W.f32(), tgt.data(), N, C, V, kLogitSoftcap, 1.f / N, scratch.f32(), cr, nullptr,
                           dx.f32(), dW.f32(), dWt.f32());
      });
      std::printf("  fused chunk %5lld: %8.1f ms  %6.1f GFLOP/s  %5.1f%% of peak  scratch %.0f MB\n",
                  static_cast<long long>(cr), t * 1e3, flops / t * 1e-9, 100 * flops / t * 1e-9 / peak,
                  lm_head_scratch_floats(cr, N, C, V) * 4e-6);
    }
    // unfused: the three GEMMs alone on a full (N, V) logits buffer (no softcap/CE)
    AlignedBuffer logits(static_cast<size_t>(N * V) * sizeof(float));
    std::memset(logits.f32(), 0, static_cast<size_t>(N * V) * sizeof(float));
    const double tf = best_of(repeats, [&] { linear_fwd(x.f32(), W.f32(), logits.f32(), N, C, V); });
    const double tx = best_of(repeats, [&] { linear_bwd_x(logits.f32(), W.f32(), dx.f32(), N, C, V); });
    const double tw =
        best_of(repeats, [&] { sgemm(true, false, C, V, N, 1.f, x.f32(), C, logits.f32(), V, 0.f, dWt.f32(), V); });
    const double g = 2.0 * N * C * V * 1e-9;
    std::printf(
        "  plain GEMMs on (N,V): fwd %.1f ms (%.0f GFLOP/s), dx %.1f ms (%.0f), dW^T %.1f ms "
        "(%.0f); sum %.1f ms = %.1f GFLOP/s\n",
        tf * 1e3, g / tf, tx * 1e3, g / tx, tw * 1e3, g / tw, (tf + tx + tw) * 1e3, flops * 1e-9 / (tf + tx + tw));
    // the same products through our packed GEMM (kernels/packed_gemm.h); dW in its own (V, C) layout
    const double pf = best_of(
        repeats, [&] { packed_sgemm(false, true, N, V, C, 1.f, x.f32(), C, W.f32(), C, 0.f, logits.f32(), V); });
    const double px = best_of(
        repeats, [&] { packed_sgemm(false, false, N, C, V, 1.f, logits.f32(), V, W.f32(), C, 0.f, dx.f32(), C); });
    const double pwt = best_of(
        repeats, [&] { packed_sgemm(true, false, C, V, N, 1.f, x.f32(), C, logits.f32(), V, 0.f, dWt.f32(), V); });
    const double pw = best_of(
        repeats, [&] { packed_sgemm(true, false, V, C, N, 1.f, logits.f32(), V, x.f32(), C, 0.f, dW.f32(), C); });
    // the forward as the fused kernel calls it: chunks of 256 rows times vocab blocks of 1024
    PackedB wt;
    const int64_t cr = 256, vb = 1024;
    const double bf = best_of(repeats, [&] {
      for (int64_t r0 = 0; r0 < N; r0 += cr)
        for (int64_t j0 = 0; j0 < V; j0 += vb)
          sgemm(false, true, std::min(cr, N - r0), std::min(vb, V - j0), C, 1.f, x.f32() + r0 * C, C, W.f32() + j0 * C,
                C, 0.f, logits.f32() + r0 * V + j0, V);
    });
    const double of = best_of(repeats, [&] {
      pack_b(true, C, V, W.f32(), C, wt);
      for (int64_t r0 = 0; r0 < N; r0 += cr)
        for (int64_t j0 = 0; j0 < V; j0 += vb)
          packed_sgemm_packed_b(false, std::min(cr, N - r0), std::min(vb, V - j0), C, 1.f, x.f32() + r0 * C, C, wt, j0,
                                0.f, logits.f32() + r0 * V + j0, V);
    });
    std::printf(
        "  fwd in blocks of %lld x %lld: oneDNN %.1f ms (%.0f GFLOP/s), ours with W packed once %.1f ms (%.0f)\n",
        static_cast<long long>(cr), static_cast<long long>(vb), bf * 1e3, g / bf, of * 1e3, g / of);
    std::printf(
        "  ours (%s):   fwd %.1f ms (%.0f GFLOP/s), dx %.1f ms (%.0f), dW^T %.1f ms (%.0f), dW %.1f ms (%.0f); "
        "fwd + dx + dW %.1f ms = %.1f GFLOP/s\n",
        packed_gemm_kernel(), pf * 1e3, g / pf, px * 1e3, g / px, pwt * 1e3, g / pwt, pw * 1e3, g / pw,
        (pf + px + pw) * 1e3, flops * 1e-9 / (pf + px + pw));
  }
  return 0;
}
