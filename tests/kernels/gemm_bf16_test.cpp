// bf16 conversion (closed forms of round-to-nearest-even) and bgemm against a float64 product of
// the same bf16-rounded operands (every bf16 x bf16 product is exact in fp32, so only the fp32
// summation differs). The bgemm tests skip, saying why, on CPUs without native bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/gemm_bf16.h"

using namespace nanochat;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST(Bf16Convert, RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties go to the even mantissa (1)
  EXPECT_EQ(float_to_bf16(1.f + std::ldexp(1.f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up
  EXPECT_EQ(float_to_bf16(1.f + 3 * std::ldexp(1.f, -8)), 0x3f82);
  // just above the tie rounds up
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(float_to_bf16(-2.f), 0xc000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  // the largest float rounds to infinity (as IEEE rounding does)
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  const bf16 nan = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001)))));  // a NaN with low bits only
  EXPECT_EQ(bf16_to_float(0x3f81), 1.f + std::ldexp(1.f, -7));
}

TEST(Bf16Convert, VectorPathEqualsScalarRule) {
  std::mt19937 gen(7);
  std::vector<float> x(100003);
  std::uniform_int_distribution<uint32_t> bits;
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 ? from_bits(bits(gen)) : std::normal_distribution<float>()(gen);
  x[5] = std::numeric_limits<float>::denorm_min();
  x[6] = -0.f;
  std::vector<bf16> got(x.size());
  to_bf16(x.data(), got.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const bf16 want = float_to_bf16(x[i]);
    if (std::isnan(x[i]))
      ASSERT_TRUE(std::isnan(bf16_to_float(got[i]))) << i;
    else
      ASSERT_EQ(got[i], want) << "element " << i << " = " << x[i];
  }
  // a strided block
  std::vector<bf16> rows(3 * 5);
  to_bf16_rows(x.data() + 1, 7, rows.data(), 3, 5);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c)
      if (!std::isnan(x[1 + r * 7 + c])) {
        EXPECT_EQ(rows[r * 5 + c], float_to_bf16(x[1 + r * 7 + c]));
      }
}

class Bgemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!native_bf16_available())
      GTEST_SKIP() << "no native bfloat16 on this CPU/build (" << native_bf16_status()
                   << "): bgemm is only used where --dtype bfloat16 is accepted";
  }
};

TEST_F(Bgemm, MatchesFloat64OfRoundedOperands) {
  std::mt19937 gen(11);
  std::normal_distribution<float> nd;
  struct Case {
    bool ta, tb;
    int64_t M, N, K, pad;
    float beta;
  };
  const Case cases[] = {{false, true, 37, 29, 53, 0, 0.f},   {false, false, 37, 29, 53, 3, 1.f},
                        {true, false, 29, 37, 53, 5, 1.f},   {true, true, 16, 64, 200, 1, 0.5f},
                        {false, true, 300, 260, 96, 0, 1.f}, {false, true, 5, 7, 1, 0, 0.f}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "ta " << c.ta << " tb " << c.tb << " M " << c.M << " N " << c.N << " K " << c.K
                                      << " beta " << c.beta);
    const int64_t lda = (c.ta ? c.M : c.K) + c.pad, ldb = (c.tb ? c.K : c.N) + c.pad, ldc = c.N + c.pad;
    const int64_t a_rows = c.ta ? c.K : c.M, b_rows = c.tb ? c.N : c.K;
    std::vector<bf16> A(static_cast<size_t>(a_rows * lda)), B(static_cast<size_t>(b_rows * ldb));
    for (auto& v : A) v = float_to_bf16(nd(gen));
    for (auto& v : B) v = float_to_bf16(nd(gen));
    std::vector<float> C(static_cast<size_t>(c.M * ldc));
    for (auto& v : C) v = nd(gen);
    const std::vector<float> C0 = C;
    bgemm(c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
    auto a = [&](int64_t i, int64_t k) { return bf16_to_float(c.ta ? A[k * lda + i] : A[i * lda + k]); };
    auto b = [&](int64_t k, int64_t j) { return bf16_to_float(c.tb ? B[j * ldb + k] : B[k * ldb + j]); };
    double worst = 0;
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        double want = c.beta * static_cast<double>(C0[i * ldc + j]), mag = std::fabs(want);
        for (int64_t k = 0; k < c.K; ++k) {
          want += static_cast<double>(a(i, k)) * b(k, j);
          mag += std::fabs(static_cast<double>(a(i, k)) * b(k, j));
        }
        // fp32 summation of exact products: error <= K x 2^-24 x sum|terms| (a loose bound)
        worst = std::max(worst, std::fabs(C[i * ldc + j] - want) / (mag * (c.K + 1) * std::ldexp(1.0, -24)));
      }
    EXPECT_LE(worst, 1.0);
    for (int64_t i = 0; i < c.M; ++i)  // the padding columns of C are untouched
      for (int64_t j = c.N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]);
  }
}

TEST_F(Bgemm, CountsFlopsAndNamesItsKernel) {
  std::vector<bf16> A(8 * 16, float_to_bf16(1.f)), B(16 * 4, float_to_bf16(2.f));
  std::vector<float> C(8 * 4);
  const int64_t before = sgemm_flops_issued();
  bgemm(false, false, 8, 4, 16, A.data(), 16, B.data(), 4, 0.f, C.data(), 4);
  EXPECT_EQ(sgemm_flops_issued() - before, 2 * 8 * 4 * 16);
  for (float v : C) EXPECT_EQ(v, 32.f);
  EXPECT_FALSE(bgemm_impl(false, true, 64, 64, 64).empty());
}

TEST(Bf16Support, RefusalNamesTheFlag) {
  if (native_bf16_available()) {
    EXPECT_NO_THROW(require_native_bf16("--dtype bfloat16"));
    EXPECT_NE(native_bf16_status().find("bf16 kernels"), std::string::npos) << native_bf16_status();
    return;
  }
  try {
    require_native_bf16("--dtype bfloat16");
    ADD_FAILURE() << "accepted without native bf16";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--dtype bfloat16 needs a CPU with native bfloat16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--dtype float32"), std::string::npos) << msg;
  }
}
