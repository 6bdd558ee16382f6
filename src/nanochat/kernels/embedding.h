#pragma once
// Token embedding lookup (nn.Embedding) and its backward, a scatter-add in which repeated tokens
// accumulate (index_add). Used for wte and for the value-embedding tables (docs/nanochat.md 1.3, 1.7).
#include <cstdint>

namespace nanochat {

/// out[n, :] = table[idx[n], :] for n < N. table: (rows, C), out: (N, C) row-major.
/// Indices must be valid rows (checked by the caller).
template <typename T>
void embedding_forward(const int32_t* idx, const T* table, T* out, int64_t N, int64_t C);

/// dtable[idx[n], :] += dout[n, :] for n < N (accumulates; repeated tokens sum).
/// Parallel over column blocks, so the result does not depend on the thread count.
template <typename T>
void embedding_backward(const int32_t* idx, const T* dout, T* dtable, int64_t N, int64_t C);

}  // namespace nanochat
