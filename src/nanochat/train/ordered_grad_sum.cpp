#include "nanochat/train/ordered_grad_sum.h"

#include <algorithm>
#include <cstring>

#include "nanochat/core/error.h"

namespace nanochat {

OrderedGradSum::OrderedGradSum(std::vector<Span> spans, int micro_steps, Communicator& comm)
    : spans_(std::move(spans)), A_(micro_steps), comm_(comm) {
  if (A_ < 1) fail("OrderedGradSum: micro_steps must be >= 1 (got ", A_, ")");
  for (const Span& s : spans_) per_micro_ += s.n;
  const size_t W = static_cast<size_t>(comm_.world_size());
  mine_ = AlignedBuffer(std::max<size_t>(1, static_cast<size_t>(A_) * per_micro_) * sizeof(float));
  all_ = AlignedBuffer(std::max<size_t>(1, W * A_ * per_micro_) * sizeof(float));
}

void OrderedGradSum::after_micro_batch(int micro) {
  NC_CHECK(micro >= 0 && micro < A_, "OrderedGradSum: micro-batch ", micro, " outside [0, ", A_, ")");
  float* dst = mine_.f32() + static_cast<size_t>(micro) * per_micro_;
  for (const Span& s : spans_) {
    std::memcpy(dst, s.g, s.n * sizeof(float));
    std::memset(s.g, 0, s.n * sizeof(float));
    dst += s.n;
  }
}

void OrderedGradSum::finish() {
  const int W = comm_.world_size(), rank = comm_.rank();
  const size_t per_rank = static_cast<size_t>(A_) * per_micro_;
  if (per_micro_ == 0) return;
  comm_.all_gather(mine_.f32(), all_.f32(), std::vector<size_t>(W, per_rank))->wait();
  const float* all = all_.f32();
  size_t off = 0;
  for (const Span& s : spans_) {
    for (size_t i = 0; i < s.n; ++i) {
      float acc = 0.f;
      if (rank == 0) {
        for (int micro = 0; micro < A_; ++micro)
          for (int r = 0; r < W; ++r)  // global micro-batch g = micro * W + r
            acc += all[static_cast<size_t>(r) * per_rank + static_cast<size_t>(micro) * per_micro_ + off + i];
      }
      s.g[i] = acc;
    }
    off += s.n;
  }
}

}  // namespace nanochat
