// GradAccumulator: ranks and micro-batches with different numbers of valid targets (-1 ignored)
// give, after the SUM over ranks and the returned scale, the gradient of the mean loss over every
// valid token of the step — what one process computes on all rows at once. Also: the on_ready
// hook fires only on the last micro-batch and never for the order-summed small tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "nanochat/core/rng.h"
#include "nanochat/train/zero2_grad_accum.h"
#include "support/thread_communicator.h"
#include "support/tiny_gpt.h"

using namespace nanochat;
using nanochat::testing::ThreadCommunicator;
using nanochat::testing::ThreadHub;

namespace {

ModelConfig tiny() { return nctest::tiny_gpt_config(); }
void init(GPT& m) { nctest::init_tiny_gpt(m); }

// Four rows (valid targets 8, 5, 2, 0), dealt to two ranks in contiguous ranges by `split`, one
// row per micro-batch; compares with one process running all four rows in one batch.
void check_split(const std::vector<int>& split) {
  SCOPED_TRACE(::testing::PrintToString(split));
  const ModelConfig c = tiny();
  const int T = 8, W = 2, rows = 4;
  Rng rng(11);
  const int valid[rows] = {8, 5, 2, 0};
  std::vector<int32_t> idx(rows * T), tgt(rows * T);
  for (auto& v : idx) v = static_cast<int32_t>(rng.below(40));
  for (int row = 0; row < rows; ++row)
    for (int t = 0; t < T; ++t) tgt[static_cast<size_t>(row * T + t)] = t < valid[row] ? rng.below(40) : -1;
  // reference: one process, all four rows in one batch -> mean over the 15 valid targets
  GPT ref(c);
  init(ref);
  ref.zero_grad();
  ref.forward_backward(idx.data(), tgt.data(), rows, T);
  std::vector<std::vector<float>> grads(W);
  std::vector<float> scales(W);
  std::vector<std::vector<size_t>> ready(W);
  ThreadHub hub(W);
  std::vector<std::thread> th;
  for (int r = 0; r < W; ++r)
    th.emplace_back([&, r] {
      ThreadCommunicator comm(hub, r);
      GPT m(c);
      init(m);
      m.zero_grad();
      GradAccumulator acc(m, rows, comm, [&, r](size_t k) { ready[r].push_back(k); });
      acc.begin_step(split);
      const int first = r == 0 ? 0 : split[0];
      int local_valid = 0;
      for (int micro = 0; micro < split[r]; ++micro) {
        const size_t off = static_cast<size_t>((first + micro) * T);
        local_valid += valid[first + micro];
        acc.micro_batch(micro, idx.data() + off, tgt.data() + off, 1, T);
        if (micro + 1 < split[r]) {
          EXPECT_TRUE(ready[r].empty()) << "hook fired before the last micro-batch";
        }
      }
      EXPECT_EQ(acc.local_tokens(), local_valid);
      scales[r] = acc.finish();
      // what the optimizer does: sum the gradients the accumulator has not (the small tensors
      // already hold the step's sum on every rank)
      std::vector<float> small_sums;
      for (size_t k = 0; k < m.params().size(); ++k)
        if (acc.summed_here()[k]) {
          const float* g = m.grad_data() + m.params()[k].offset;
          small_sums.insert(small_sums.end(), g, g + m.params()[k].numel);
        }
      comm.all_reduce_sum(m.grad_data(), m.num_params())->wait();
      for (size_t k = 0, at = 0; k < m.params().size(); ++k)
        if (acc.summed_here()[k]) {
          std::copy_n(small_sums.data() + at, m.params()[k].numel, m.grad_data() + m.params()[k].offset);
          at += m.params()[k].numel;
        }
      grads[r].assign(m.grad_data(), m.grad_data() + m.num_params());
    });
  for (auto& t : th) t.join();
  double gmax = 0;
  for (size_t i = 0; i < ref.num_params(); ++i)
    gmax = std::max(gmax, std::fabs(static_cast<double>(ref.grad_data()[i])));
  size_t small = 0;
  for (const ParamInfo& p : ref.params()) small += p.name.rfind("transformer.h.", 0) != 0 && p.numel < 1024;
  for (int r = 0; r < W; ++r) {
    EXPECT_FLOAT_EQ(scales[r], 1.f / 15.f);
    for (size_t i = 0; i < ref.num_params(); ++i)
      ASSERT_NEAR(grads[r][i] * scales[r], ref.grad_data()[i], 2e-6 * gmax) << "rank " << r << " index " << i;
    // every parameter but the order-summed small tensors was handed to the hook, once, in the
    // same order on every rank (a rank without micro-batches too): the ranks' collectives match
    EXPECT_EQ(ready[r].size(), ref.params().size() - small);
    EXPECT_EQ(ready[r], ready[0]) << "rank " << r;
  }
}

}  // namespace

TEST(GradAccumulator, TokenWeightedAcrossRanksAndMicroBatchesForAnySplit) {
  for (const std::vector<int>& split : {std::vector<int>{2, 2}, {3, 1}, {1, 3}, {4, 0}, {0, 4}}) check_split(split);
}

TEST(GradAccumulator, AStepWithoutValidTargetsIsAnError) {
  LocalCommunicator comm;
  GPT m(tiny());
  m.init_weights(1);
  GradAccumulator acc(m, 1, comm);
  std::vector<int32_t> idx(8, 1), tgt(8, -1);
  EXPECT_THROW(acc.finish(), Error);         // no step begun
  EXPECT_THROW(acc.begin_step({2}), Error);  // more micro-batches than room for
  EXPECT_THROW(acc.begin_step({1, 0}), Error);
  acc.begin_step({1});
  acc.micro_batch(0, idx.data(), tgt.data(), 1, 8);
  EXPECT_THROW(acc.finish(), Error);
  EXPECT_THROW(GradAccumulator(m, 0, comm), Error);
}
