// Tests for kernels/gemm: sgemm against a naive double loop (every transpose case), the tiled
// transposed add, the accumulating weight gradient in both orientations, and the ISA oneDNN may use.
#include "nanochat/kernels/gemm.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
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

TEST(Gemm, AddTransposed) {
  const int64_t rows = 70, cols = 45;  // not multiples of the tile
  std::vector<float> src(cols * rows), dst(rows * cols);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  for (size_t i = 0; i < dst.size(); ++i) dst[i] = 0.5f * static_cast<float>(i);
  std::vector<float> want = dst;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want[r * cols + c] += src[c * rows + r];
  add_transposed(src.data(), dst.data(), rows, cols);
  EXPECT_EQ(dst, want);
}

TEST(Gemm, LinearBwdWAccBothOrientations) {
  Rng rng(25);
  const int64_t M = 9;
  for (auto [K, N] : {std::pair<int64_t, int64_t>{5, 11}, {11, 5}}) {
    std::vector<float> dy(M * N), x(M * K), dW(N * K), scratch(K * N, 1e30f);
    for (auto& v : dy) v = static_cast<float>(rng.uniform(-1, 1));
    for (auto& v : x) v = static_cast<float>(rng.uniform(-1, 1));
    for (auto& v : dW) v = static_cast<float>(rng.uniform(-1, 1));
    std::vector<double> want(dW.begin(), dW.end());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t m = 0; m < M; ++m) want[n * K + k] += double(dy[m * N + n]) * x[m * K + k];
    linear_bwd_w_acc(dy.data(), x.data(), dW.data(), M, K, N, scratch.data());
    for (int64_t i = 0; i < N * K; ++i) EXPECT_NEAR(dW[i], want[i], 1e-5) << "K=" << K << " N=" << N;
  }
}

// The instruction set oneDNN may use: an AVX2 build (CMake NANOCHAT_ISA=avx2) caps it at AVX2
// (on a machine with AVX-512 too); a native build leaves it at the machine's. The product is a
// 256^3 sgemm, large enough for oneDNN's JIT kernels: cmake/check_isa.cmake runs this test with
// ONEDNN_JIT_DUMP=1 and checks the kernels it wrote hold no AVX-512 instruction.
TEST(Gemm, IsaOfTheBuild) {
  const int n = 256;
  std::vector<float> A(n * n, 0.5f), B(n * n, 0.25f), C(n * n, 0.f);
  sgemm(false, false, n, n, n, 1.f, A.data(), n, B.data(), n, 0.f, C.data(), n);
  EXPECT_FLOAT_EQ(C[0], 0.5f * 0.25f * n);
  const std::string isa = gemm_isa();
#if defined(NANOCHAT_ISA_AVX2)
  EXPECT_EQ(isa, "avx2");
#else
  EXPECT_NE(isa, "other");
#endif
  std::printf("oneDNN ISA: %s\n", isa.c_str());
}
