#include "nanochat/kernels/embedding.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace nanochat {

template <typename T>
void embedding_forward(const int32_t* idx, const T* table, T* out, int64_t N, int64_t C) {
#pragma omp parallel for schedule(guided) if (N * C > 65536)
  for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * C, table + static_cast<int64_t>(idx[n]) * C, sizeof(T) * C);
}

template <typename T>
void embedding_backward(const int32_t* idx, const T* dout, T* dtable, int64_t N, int64_t C) {
  // Each thread owns a column range of every row: no two threads touch the same element, and each
  // element receives its additions in token order.
#pragma omp parallel if (N * C > 65536)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t per = (C + nt - 1) / nt;
    const int64_t c0 = std::min(C, tid * per), c1 = std::min(C, c0 + per);
    if (c1 > c0)
      for (int64_t n = 0; n < N; ++n) {
        T* dst = dtable + static_cast<int64_t>(idx[n]) * C;
        const T* src = dout + n * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
      }
  }
}

template void embedding_forward<float>(const int32_t*, const float*, float*, int64_t, int64_t);
template void embedding_forward<double>(const int32_t*, const double*, double*, int64_t, int64_t);
template void embedding_backward<float>(const int32_t*, const float*, float*, int64_t, int64_t);
template void embedding_backward<double>(const int32_t*, const double*, double*, int64_t, int64_t);

}  // namespace nanochat
