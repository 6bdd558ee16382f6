#pragma once
// Measures this machine's fp32 FMA peak (GFLOP/s) with independent FMA chains in the widest
// vector width the build targets (AVX-512, else AVX2, else scalar). MFU figures are reported
// against this measured peak (nanochat prints MFU against a GPU table; on CPU it prints 0).

namespace nanochat {

/// fp32 FMA peak in GFLOP/s using `threads` OpenMP threads, measured for about `seconds`.
double measure_fma_peak_gflops(int threads, double seconds = 0.3);

/// Name of the vector path measure_fma_peak_gflops uses ("avx512", "avx2" or "scalar").
const char* fma_peak_isa();

}  // namespace nanochat
