#include "nanochat/train/zero2_grad_accum.h"

#include "nanochat/core/error.h"

namespace nanochat {

namespace {
// non-matrix tensors below this size are order-summed: the optimizer's small, replicated tensors
// (optim/muon_adamw_slots.h kSmallAdamW), for which it then sends nothing
constexpr size_t kOrderedBelowNumel = 1024;
}  // namespace

GradAccumulator::GradAccumulator(GPT& model, int max_micro_steps, Communicator& comm,
                                 std::function<void(size_t)> on_ready)
    : model_(model), max_(max_micro_steps), comm_(comm), on_ready_(std::move(on_ready)) {
  if (max_ < 1) fail("gradient accumulation needs room for >= 1 micro-batch per step (got ", max_, ")");
  std::vector<OrderedGradSum::Span> spans;
  ordered_.assign(model.params().size(), false);
  for (size_t k = 0; k < model.params().size(); ++k) {
    const ParamInfo& p = model.params()[k];
    if (p.name.rfind("transformer.h.", 0) != 0 && p.numel < kOrderedBelowNumel) {
      spans.push_back({model.grad_data() + p.offset, p.numel});
      ordered_[k] = true;
    }
  }
  small_ = std::make_unique<OrderedGradSum>(std::move(spans), max_, comm_);
}

void GradAccumulator::begin_step(const std::vector<int>& micro_per_rank) {
  if (static_cast<int>(micro_per_rank.size()) != comm_.world_size())
    fail("gradient accumulation: a split for ", micro_per_rank.size(), " ranks in a job of ", comm_.world_size());
  int64_t total = 0;
  for (int m : micro_per_rank) {
    if (m < 0) fail("gradient accumulation: a negative micro-batch count (", m, ")");
    total += m;
  }
  if (total > max_) fail("gradient accumulation: ", total, " micro-batches in one step, room for ", max_);
  split_ = micro_per_rank;
  A_ = split_[static_cast<size_t>(comm_.rank())];
  local_tokens_ = 0;
  count_.reset();
}

void GradAccumulator::submit_count() {
  step_tokens_ = static_cast<double>(local_tokens_);
  count_ = comm_.all_reduce_sum_f64(&step_tokens_, 1);
}

float GradAccumulator::micro_batch(int micro, const int32_t* idx, const int32_t* targets, int B, int T) {
  NC_CHECK(micro >= 0 && micro < A_, "micro-batch ", micro, " outside [0, ", A_, ")");
  int64_t n_valid = 0;
  const int64_t N = static_cast<int64_t>(B) * T;
  for (int64_t n = 0; n < N; ++n) n_valid += targets[n] >= 0;
  local_tokens_ += n_valid;
  if (micro + 1 == A_) submit_count();  // ahead of the reductions this backward launches
  // loss_scale = n_valid: the backward's per-token scale loss_scale / n_valid is exactly 1, so
  // this adds the gradient of the sum of the token losses
  std::function<void(size_t)> hook;
  if (micro + 1 == A_ && on_ready_)
    hook = [this](size_t k) {
      if (!ordered_[k]) on_ready_(k);
    };
  const float loss = model_.forward_backward(idx, targets, B, T, static_cast<float>(n_valid), hook);
  small_->after_micro_batch(micro);
  return loss;
}

float GradAccumulator::finish() {
  NC_CHECK(!split_.empty(), "gradient accumulation: finish() before begin_step()");
  if (A_ == 0) {
    submit_count();
    if (on_ready_)  // no backward ran here: hand the zero gradients over in its order
      for (size_t k : model_.grad_ready_order())
        if (!ordered_[k]) on_ready_(k);
  }
  NC_CHECK(count_, "gradient accumulation: finish() before the step's last micro-batch");
  small_->finish(split_);
  count_->wait();
  count_.reset();
  const double total = step_tokens_;
  if (total <= 0) fail("no rank had a valid target (every target was -1) in this step; nothing to train on");
  return static_cast<float>(1.0 / total);
}

}  // namespace nanochat
