// The Communicator's default implementations (comm/communicator.h).
#include "nanochat/comm/communicator.h"

namespace nanochat {

namespace {
struct DoneWork final : Work {
  void wait() override {}
};
}  // namespace

WorkPtr Communicator::all_gather_varying(const float* in, size_t count, std::vector<float>* out,
                                         std::vector<uint64_t>* counts, size_t max_total) {
  const size_t W = static_cast<size_t>(world_size());
  const uint64_t mine = count;
  counts->assign(W, 0);
  all_gather_bytes(&mine, counts->data(), std::vector<size_t>(W, sizeof(uint64_t)))->wait();
  std::vector<size_t> n(counts->begin(), counts->end());
  size_t total = 0;
  for (size_t c : n) total += c;
  if (total > max_total) return std::make_shared<DoneWork>();
  if (out->size() < total) out->resize(total);
  return all_gather(in, out->data(), n);
}

}  // namespace nanochat
