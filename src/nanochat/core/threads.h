#pragma once
// Compute thread count of this process: the OpenMP threads our kernels run on. oneDNN's sgemm
// (kernels/gemm.h) is built on the same OpenMP runtime (DNNL_CPU_RUNTIME=OMP) and reads the same
// setting at each call, so this one knob governs both; kernels needs no setup of its own.
// The default is OpenMP's: OMP_NUM_THREADS, else every core (docs/architecture.md 6).

namespace nanochat {

/// Sets the number of OpenMP threads for the parallel regions that start after the call, on the
/// calling thread. n < 1 is taken as 1.
void set_num_threads(int n);
/// Current number of OpenMP threads (what the next parallel region gets).
int num_threads();

}  // namespace nanochat
