#pragma once
// Measures this machine's fp32 FMA peak (GFLOP/s) with independent FMA chains in the widest
// vector width the build targets (AVX-512, else AVX2, else scalar). MFU figures are reported
// against this measured peak (nanochat prints MFU against a GPU table; on CPU it prints 0).

#include <string>

namespace nanochat {

/// Which instruction the peak is measured with: fp32 FMA (the fp32 training's reference), or the
/// bf16 dot product vdpbf16ps (AVX512_BF16: per fp32 lane, two bf16 products added to the fp32
/// accumulator, 4 FLOPs), the reference of --dtype bfloat16 training.
enum class PeakKind { Fp32Fma, Bf16Dot };

/// True when this CPU runs vdpbf16ps (cpuid AVX512_BF16, checked at run time).
bool bf16_dot_supported();

/// Peak in GFLOP/s using `threads` OpenMP threads, measured for about `seconds`, with
/// independent FMA (or bf16 dot-product) chains. Bf16Dot returns 0 where !bf16_dot_supported().
double measure_fma_peak_gflops(int threads, double seconds = 0.3, PeakKind kind = PeakKind::Fp32Fma);

/// Name of the vector path measure_fma_peak_gflops uses ("avx512", "avx2" or "scalar"; for
/// Bf16Dot "avx512_bf16").
const char* fma_peak_isa(PeakKind kind = PeakKind::Fp32Fma);

/// The highest fp32 FMA peak seen on this machine for `threads` threads: max(measured, the value
/// cached in the JSON file `cache_path`, keyed by ISA and thread count), written back when the
/// new measurement is higher. A measurement taken while other processes use the cores reads low
/// (MFU against it could exceed 100%); the cached maximum keeps MFU comparable across runs.
/// A missing or unreadable cache is replaced; write failures are ignored (the cache is optional).
/// Bf16Dot peaks are kept under their own key ("avx512_bf16/<threads>").
double best_known_fma_peak_gflops(double measured, int threads, const std::string& cache_path,
                                  PeakKind kind = PeakKind::Fp32Fma);

/// Physical cores (distinct package/core ids in sysfs) among the CPUs this process may run on
/// (sched_getaffinity); 0 if that cannot be read.
int physical_cores_available();

/// The MFU reference for `threads` threads: the best known n-thread peak `best_n`, but at least
/// min(threads, cores) x the best known 1-thread peak `best_1` (GFLOP/s; cores <= 0 = unknown,
/// then threads is used). A 2-thread measurement taken while one core is busy reads about one
/// core's worth, which made MFU read over 100%; one core measured alone is seldom disturbed.
/// Turbo can make the 1-thread figure a little high, so MFU errs low, never above 100%.
double mfu_reference_peak_gflops(double best_n, double best_1, int threads, int cores);

/// This rank's peak as a trainer reports MFU against it (GFLOP/s).
struct MfuPeak {
  double measured = 0;   ///< measured now with `threads` threads (about 0.2 s)
  double reference = 0;  ///< best known n-thread peak, at least min(threads, cores) x the 1-thread one
};

/// Measures the `threads`-thread peak, keeps the best known in `cache_path`
/// (best_known_fma_peak_gflops) and, for threads > 1, raises it to threads x the best known
/// 1-thread peak up to the physical cores (mfu_reference_peak_gflops; the 1-thread peak is
/// measured for about 0.1 s).
MfuPeak measure_mfu_peak(int threads, const std::string& cache_path, PeakKind kind = PeakKind::Fp32Fma);

}  // namespace nanochat
