// Tests for kernels/ve_gate: finite differences of the backward in double (every input, repeated
// tokens, strided v), and the no-table path copying v.
#include "nanochat/kernels/ve_gate.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "nanochat/core/rng.h"
#include "support/fd_check.h"

using namespace nanochat;
using nanochat::testing::dot;
using nanochat::testing::expect_fd_grad;
using nanochat::testing::random_vec;
using Vec = std::vector<double>;

TEST(VeGate, BackwardMatchesFiniteDifferences) {
  Rng rng(13);
  const int64_t N = 5, C = 14, Hkv = 2, D = 4, W = Hkv * D, rows = 4, ld = W + 3;
  const std::vector<int32_t> idx = {2, 0, 2, 3, 2};  // repeated tokens
  Vec n1 = random_vec(rng, N * C), Wg = random_vec(rng, Hkv * kVeGateChannels, -0.5, 0.5);
  Vec table = random_vec(rng, rows * W), v_in = random_vec(rng, N * ld), R = random_vec(rng, N * W);
  auto loss = [&] {
    Vec out(N * W), gamma(N * Hkv);
    ve_gate_forward(n1.data(), C, Wg.data(), table.data(), idx.data(), v_in.data(), ld, out.data(), gamma.data(), N,
                    Hkv, D);
    return dot(R, out);
  };
  Vec out(N * W), gamma(N * Hkv);
  ve_gate_forward(n1.data(), C, Wg.data(), table.data(), idx.data(), v_in.data(), ld, out.data(), gamma.data(), N, Hkv,
                  D);
  for (double g : gamma) {
    EXPECT_GT(g, 0.0);
    EXPECT_LT(g, 3.0);
  }
  Vec dn1(N * C, 0.0), dWg(Hkv * kVeGateChannels, 0.0), dtable(rows * W, 0.0), dz(N * Hkv);
  ve_gate_backward(n1.data(), C, Wg.data(), table.data(), idx.data(), gamma.data(), R.data(), dn1.data(), dWg.data(),
                   dtable.data(), dz.data(), N, Hkv, D);
  expect_fd_grad("ve_gate dn1", n1, dn1, loss);  // channels >= 12 must get exactly 0
  expect_fd_grad("ve_gate dWg", Wg, dWg, loss);
  expect_fd_grad("ve_gate dtable", table, dtable, loss);
  // v_in's gradient is dv itself (identity path)
  Vec dvin(N * ld, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < W; ++j) dvin[n * ld + j] = R[n * W + j];
  expect_fd_grad("ve_gate dv_in", v_in, dvin, loss);
}

TEST(VeGate, NoTableCopiesV) {
  const int64_t N = 3, Hkv = 1, D = 4, ld = 6;
  std::vector<float> v_in(N * ld), out(N * D);
  for (size_t i = 0; i < v_in.size(); ++i) v_in[i] = static_cast<float>(i);
  ve_gate_forward<float>(nullptr, 12, nullptr, nullptr, nullptr, v_in.data(), ld, out.data(), nullptr, N, Hkv, D);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(out[n * D + d], v_in[n * ld + d]);
}
