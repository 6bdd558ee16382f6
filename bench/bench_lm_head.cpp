// Times the fused lm_head + softcap + cross-entropy (kernels/lm_head_loss.h), forward and
// backward, on the training shapes, against the three plain GEMMs of the same sizes (forward
// logits, dx, dW) run unfused on a materialised (N, V) buffer, and against the FMA peak.
// Usage: bench_lm_head [--threads 1] [--repeats 3] [--chunks 128,256,512] [--shape N,C,V]...
//                      [--dtype float32|bfloat16]
// FLOPs counted: 6 N C V (the three GEMMs); the softcap/CE elementwise work is not counted.
// --dtype bfloat16 times the fused kernel with bf16 operands (what --dtype bfloat16 training
// runs) against the bf16 dot-product peak, the same three products alone in bf16 (oneDNN), and
// the fused kernel's parts per call (the products, the fp32 -> bf16 roundings, the softcap/CE).
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
#include "nanochat/kernels/gemm_bf16.h"
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

// The bf16 lm_head of one shape: the fused kernel per chunk size, and its products alone.
void run_bf16(int64_t N, int64_t C, int64_t V, const std::vector<int64_t>& chunks, int repeats, double peak,
              const float* x, const float* W, const int32_t* tgt, float* dx, float* dW, float* dWt) {
  const double flops = 6.0 * static_cast<double>(N) * C * V;
  const double g = 2.0 * N * C * V * 1e-9;
  AlignedBuffer Wb(static_cast<size_t>(V * C) * sizeof(bf16)), xb(static_cast<size_t>(N * C) * sizeof(bf16)),
      qb(static_cast<size_t>(N * V) * sizeof(bf16));
  auto* wb = static_cast<bf16*>(Wb.data());
  to_bf16(W, wb, V * C);
  for (int64_t cr : chunks) {
    AlignedBuffer scratch(lm_head_scratch_floats(cr, N, C, V) * sizeof(float));
    AlignedBuffer bscratch(static_cast<size_t>(lm_head_bf16_scratch(cr, N, C, V)) * sizeof(bf16));
    const LmHeadBf16 bf{wb, static_cast<bf16*>(bscratch.data())};
    const double t = best_of(repeats, [&] {
      lm_head_softcap_ce(x, W, tgt, N, C, V, kLogitSoftcap, 1.f / N, scratch.f32(), cr, nullptr, dx, dW, dWt, &bf);
    });
    std::printf("  fused bf16 chunk %5lld: %8.1f ms  %6.1f GFLOP/s  %5.1f%% of the bf16 peak\n",
                static_cast<long long>(cr), t * 1e3, flops / t * 1e-9, 100 * flops / t * 1e-9 / peak);
  }
  // the three products alone on the whole (N, V) buffer, and the roundings the fused kernel adds
  auto* x16 = static_cast<bf16*>(xb.data());
  auto* q16 = static_cast<bf16*>(qb.data());
  AlignedBuffer logits(static_cast<size_t>(N * V) * sizeof(float));
  to_bf16(x, x16, N * C);
  const double tf = best_of(repeats, [&] { bgemm(false, true, N, V, C, x16, C, wb, C, 0.f, logits.f32(), V); });
  to_bf16(logits.f32(), q16, N * V);
  const double tx = best_of(repeats, [&] { bgemm(false, false, N, C, V, q16, V, wb, C, 0.f, dx, C); });
  const double tw = best_of(repeats, [&] { bgemm(true, false, C, V, N, x16, C, q16, V, 0.f, dWt, V); });
  const double tr = best_of(repeats, [&] { to_bf16(logits.f32(), q16, N * V); });
  std::printf(
      "  bf16 products on (N,V): fwd %.1f ms (%.0f GFLOP/s), dx %.1f ms (%.0f), dW^T %.1f ms (%.0f); sum %.1f ms = "
      "%.1f%% of the bf16 peak; rounding the (N, V) dlogits to bf16 %.1f ms\n",
      tf * 1e3, g / tf, tx * 1e3, g / tx, tw * 1e3, g / tw, (tf + tx + tw) * 1e3,
      100 * flops * 1e-9 / (tf + tx + tw) / peak, tr * 1e3);
  // the dW^T product as the fused kernel issues it: one call per chunk of 256 rows, accumulating
  const int64_t cr = 256;
  const double tc = best_of(repeats, [&] {
    for (int64_t r0 = 0; r0 < N; r0 += cr)
      bgemm(true, false, C, V, std::min(cr, N - r0), x16 + r0 * C, C, q16 + r0 * V, V, r0 == 0 ? 0.f : 1.f, dWt, V);
  });
  const double td = best_of(repeats, [&] {
    for (int64_t r0 = 0; r0 < N; r0 += cr)
      linear_bwd_w_bf16(q16 + r0 * V, x16 + r0 * C, dW, std::min(cr, N - r0), C, V);
  });
  std::printf(
      "  weight gradient in chunks of %lld rows, accumulating in fp32: (C, V) %.1f ms (%.0f GFLOP/s), (V, C) %.1f ms "
      "(%.0f)\n",
      static_cast<long long>(cr), tc * 1e3, g / tc, td * 1e3, g / td);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeats = 3;
  std::vector<int64_t> chunks = {128, 256, 512};
  std::vector<std::vector<int64_t>> shapes;
  bool bf16_mode = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--chunks") && i + 1 < argc)
      chunks = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc)
      shapes.push_back(parse_list(argv[++i]));
    else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc &&
             (!std::strcmp(argv[i + 1], "float32") || !std::strcmp(argv[i + 1], "bfloat16")))
      bf16_mode = !std::strcmp(argv[++i], "bfloat16");
    else {
      std::fprintf(stderr,
                   "usage: %s [--threads 1] [--repeats 3] [--chunks 128,256,512] [--shape N,C,V]... "
                   "[--dtype float32|bfloat16]\n",
                   argv[0]);
      return 2;
    }
  }
  if (shapes.empty()) shapes = {{4096, 256, 32768}, {4096, 384, 32768}, {4096, 768, 32768}};
  set_num_threads(threads);
  if (bf16_mode && !native_bf16_available()) {
    std::fprintf(stderr, "--dtype bfloat16: %s\n", native_bf16_status().c_str());
    return 2;
  }
  const PeakKind kind = bf16_mode ? PeakKind::Bf16Dot : PeakKind::Fp32Fma;
  const double peak = measure_fma_peak_gflops(threads, 0.3, kind);
  std::printf("threads %d, %s peak %.1f GFLOP/s (%s)\n", threads, bf16_mode ? "bf16 dot" : "FMA", peak,
              fma_peak_isa(kind));
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
    if (bf16_mode) {
      run_bf16(N, C, V, chunks, repeats, peak, x.f32(), W.f32(), tgt.data(), dx.f32(), dW.f32(), dWt.f32());
      continue;
    }
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
