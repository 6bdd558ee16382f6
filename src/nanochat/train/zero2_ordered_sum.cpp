#include "nanochat/train/zero2_ordered_sum.h"

#include <algorithm>
#include <cstring>

#include "nanochat/core/error.h"

namespace nanochat {

OrderedGradSum::OrderedGradSum(std::vector<Span> spans, int max_micro_steps, Communicator& comm)
    : spans_(std::move(spans)), max_(max_micro_steps), comm_(comm) {
  if (max_ < 1) fail("OrderedGradSum: max_micro_steps must be >= 1 (got ", max_, ")");
  for (const Span& s : spans_) per_micro_ += s.n;
  const size_t n = std::max<size_t>(1, static_cast<size_t>(max_) * per_micro_) * sizeof(float);
  mine_ = AlignedBuffer(n);
  all_ = AlignedBuffer(n);
}

void OrderedGradSum::after_micro_batch(int micro) {
  NC_CHECK(micro >= 0 && micro < max_, "OrderedGradSum: micro-batch ", micro, " outside [0, ", max_, ")");
  float* dst = mine_.f32() + static_cast<size_t>(micro) * per_micro_;
  for (const Span& s : spans_) {
    std::memcpy(dst, s.g, s.n * sizeof(float));
    std::memset(s.g, 0, s.n * sizeof(float));
    dst += s.n;
  }
}

void OrderedGradSum::finish(const std::vector<int>& micro_per_rank) {
  const int W = comm_.world_size();
  NC_CHECK(static_cast<int>(micro_per_rank.size()) == W, "OrderedGradSum: ", micro_per_rank.size(),
           " micro-batch counts for world size ", W);
  int64_t total = 0;
  std::vector<size_t> counts;
  for (int m : micro_per_rank) {
    NC_CHECK(m >= 0, "OrderedGradSum: negative micro-batch count ", m);
    total += m;
    counts.push_back(static_cast<size_t>(m) * per_micro_);
  }
  NC_CHECK(total <= max_, "OrderedGradSum: ", total, " micro-batches in a step, buffers hold ", max_);
  if (per_micro_ == 0) return;
  // On the side lane: the reduce-scatters the last backward launched may still be running.
  comm_.all_gather_side(mine_.f32(), all_.f32(), counts)->wait();
  const float* all = all_.f32();
  size_t off = 0;
  for (const Span& s : spans_) {
    for (size_t i = 0; i < s.n; ++i) {
      float acc = 0.f;  // the step's micro-batches in stream order: rank-major (contiguous ranges)
      for (int64_t g = 0; g < total; ++g) acc += all[static_cast<size_t>(g) * per_micro_ + off + i];
      s.g[i] = acc;
    }
    off += s.n;
  }
}

}  // namespace nanochat
