#include "nanochat/train/eval.h"

#include <cmath>
#include <limits>

#include "nanochat/comm/communicator.h"
#include "nanochat/data/loader.h"
#include "nanochat/model/gpt.h"

namespace nanochat {

double evaluate_bpb(GPT& model, data::DataLoader& loader, int64_t steps, const std::vector<int32_t>& token_bytes,
                    Communicator& comm, const std::function<void(int64_t done, int64_t steps)>& progress) {
  const int B = loader.batch_size(), T = loader.seq_len();
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  std::vector<float> losses(x.size());
  double totals[2] = {0.0, 0.0};  // nats, bytes
  const int rank = comm.rank(), W = comm.world_size();
  for (int64_t s = 0; s < steps; ++s) {
    loader.next(x.data(), y.data());
    if (s % W != rank) continue;  // another rank's batch
    model.forward_loss(x.data(), y.data(), B, T, losses.data());
    for (size_t i = 0; i < y.size(); ++i) {
      if (y[i] < 0) continue;
      const int32_t nb = token_bytes[static_cast<size_t>(y[i])];
      if (nb > 0) {
        totals[0] += losses[i];
        totals[1] += nb;
      }
    }
    if (progress) progress(s + 1, steps);
  }
  comm.all_reduce_sum_f64(totals, 2)->wait();
  if (totals[1] <= 0) return std::numeric_limits<double>::infinity();
  return totals[0] / (std::log(2.0) * totals[1]);
}

}  // namespace nanochat
