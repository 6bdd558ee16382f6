// Tests for kernels/smear: finite differences of the backward in double (input, gate weights,
// lambda), and the one-token decode step against the full forward.
#include "nanochat/kernels/smear.h"

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

TEST(Smear, BackwardMatchesFiniteDifferences) {
  Rng rng(9);
  const int64_t B = 2, T = 4, C = 26;
  Vec e = random_vec(rng, B * T * C), w = random_vec(rng, kSmearChannels, -0.5, 0.5);
  Vec lam = {0.7};
  Vec R = random_vec(rng, B * T * C);
  auto loss = [&] {
    Vec s(B * T * C), sig(B * T);
    smear_forward(e.data(), w.data(), lam[0], s.data(), sig.data(), B, T, C);
    return dot(R, s);
  };
  Vec s(B * T * C), sig(B * T), de(B * T * C), dw(kSmearChannels, 0.0), dl = {0.0};
  smear_forward(e.data(), w.data(), lam[0], s.data(), sig.data(), B, T, C);
  // position 0 of every row is not mixed
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(s[b * T * C + c], e[b * T * C + c]);
  smear_backward(e.data(), w.data(), lam[0], sig.data(), R.data(), de.data(), dw.data(), dl.data(), B, T, C);
  expect_fd_grad("smear de", e, de, loss);
  expect_fd_grad("smear dw", w, dw, loss);
  expect_fd_grad("smear dlambda", lam, dl, loss);
}

TEST(Smear, StepMatchesLastPositionOfForward) {
  Rng rng(10);
  const int64_t C = 30;
  Vec e = random_vec(rng, 2 * C), w = random_vec(rng, kSmearChannels, -0.5, 0.5);
  Vec s(2 * C), sig(2), step(C);
  smear_forward(e.data(), w.data(), 0.3, s.data(), sig.data(), 1, 2, C);
  smear_step(e.data() + C, e.data(), w.data(), 0.3, step.data(), 1, C);
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(step[c], s[C + c], 1e-15);
}
