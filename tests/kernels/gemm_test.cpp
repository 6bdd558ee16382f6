#include "nanochat/kernels/gemm.h"

#include <gtest/gtest.h>

#include <vector>

#include "nanochat/core/rng.h"

using namespace nanochat;

// Compares the oneDNN wrapper with a naive double-precision triple loop, all transpose cases.
TEST(Gemm, MatchesNaiveForAllTransposes) {
  Rng rng(1);
  const int M = 7, N = 5, K = 9;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      std::vector<float> A(M * K), B(K * N), C(M * N, 0.5f);
      for (auto& v : A) v = static_cast<float>(rng.uniform(-1, 1));
      for (auto& v : B) v = static_cast<float>(rng.uniform(-1, 1));
      std::vector<double> ref(M * N);
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          double s = 0;
          for (int k = 0; k < K; ++k) {
            double a = ta ? A[k * M + i] : A[i * K + k];
            double b = tb ? B[j * K + k] : B[k * N + j];
            s += a * b;
          }
          ref[i * N + j] = 2.0 * s + 0.25 * 0.5;
        }
      sgemm(ta, tb, M, N, K, 2.f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.25f, C.data(), N);
      for (int i = 0; i < M * N; ++i) EXPECT_NEAR(C[i], ref[i], 1e-5) << "ta=" << ta << " tb=" << tb;
    }
}
