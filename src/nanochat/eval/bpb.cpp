#include "nanochat/eval/bpb.h"

#include <cmath>
#include <limits>

#include "nanochat/comm/communicator.h"
#include "nanochat/data/loader.h"
#include "nanochat/model/gpt.h"

namespace nanochat {

double evaluate_bpb(GPT& model, const ValBatchReader& read, int B, int T, int64_t steps,
                    const std::vector<int32_t>& token_bytes, const EvalRanks& ranks,
                    const std::function<void(int64_t done, int64_t steps)>& progress) {
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  std::vector<float> losses(x.size());
  double totals[2] = {0.0, 0.0};  // nats, bytes
  const int rank = ranks.rank, W = ranks.world_size;
  for (int64_t s = 0; s < steps; ++s) {
    const bool mine = s % W == rank;  // else another rank's batch
    read(s, mine ? x.data() : nullptr, mine ? y.data() : nullptr);
    if (!mine) continue;
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
  ranks.sum(totals, 2);
  if (totals[1] <= 0) return std::numeric_limits<double>::infinity();
  return totals[0] / (std::log(2.0) * totals[1]);
}

double evaluate_bpb(GPT& model, const ValBatchReader& read, int B, int T, int64_t steps,
                    const std::vector<int32_t>& token_bytes, Communicator& comm,
                    const std::function<void(int64_t done, int64_t steps)>& progress) {
  const EvalRanks ranks{comm.rank(), comm.world_size(),
                        [&comm](double* v, size_t n) { comm.all_reduce_sum_f64(v, n)->wait(); }};
  return evaluate_bpb(model, read, B, T, steps, token_bytes, ranks, progress);
}

double evaluate_bpb(GPT& model, data::DataLoader& loader, int64_t steps, const std::vector<int32_t>& token_bytes,
                    Communicator& comm, const std::function<void(int64_t done, int64_t steps)>& progress) {
  const ValBatchReader read = [&loader](int64_t, int32_t* x, int32_t* y) { loader.next(x, y); };
  return evaluate_bpb(model, read, loader.batch_size(), loader.seq_len(), steps, token_bytes, comm, progress);
}

}  // namespace nanochat
