#include "nanochat/kernels/rmsnorm.h"

#include <cmath>

namespace nanochat {

template <typename T>
void rmsnorm_forward(const T* x, T* y, T* rstd, int64_t N, int64_t D, T eps, T scale) {
#pragma omp parallel for schedule(guided) if (N * D > 32768)
  for (int64_t n = 0; n < N; ++n) rstd[n] = detail::rmsnorm_row(x + n * D, y + n * D, D, eps, scale);
}

template <typename T>
void rmsnorm_backward(const T* y, const T* rstd, const T* dy, T* dx, int64_t N, int64_t D, T scale, bool accumulate) {
#pragma omp parallel for schedule(guided) if (N * D > 32768)
  for (int64_t n = 0; n < N; ++n)
    detail::rmsnorm_row_bwd(y + n * D, rstd[n], dy + n * D, dx + n * D, D, scale, accumulate);
}

template void rmsnorm_forward<float>(const float*, float*, float*, int64_t, int64_t, float, float);
template void rmsnorm_forward<double>(const double*, double*, double*, int64_t, int64_t, double, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, float*, int64_t, int64_t, float, bool);
template void rmsnorm_backward<double>(const double*, const double*, const double*, double*, int64_t, int64_t, double,
                                       bool);

}  // namespace nanochat
