#pragma once
// Shared by gemm.cpp and gemm_bf16.cpp (not part of the kernels' interface).
#include <cstdint>

namespace nanochat::detail {

/// Called before every oneDNN call of the program: applies the AVX2 build's ISA cap once
/// (gemm.cpp) and adds `flops` to the count sgemm_flops_issued reports.
void gemm_enter(int64_t flops);

}  // namespace nanochat::detail
