#include "nanochat/comm/communicator.h"

#include <algorithm>
#include <cstring>

#include "nanochat/core/error.h"

namespace nanochat {

namespace {
class DoneWork final : public Work {
 public:
  void wait() override {}
};
WorkPtr done() {
  static WorkPtr w = std::make_shared<DoneWork>();
  return w;
}
}  // namespace

WorkPtr LocalCommunicator::all_reduce_sum(float*, size_t) { return done(); }
WorkPtr LocalCommunicator::all_reduce_sum_f64(double*, size_t) { return done(); }
WorkPtr LocalCommunicator::reduce_scatter_sum(float* in, float* out, const std::vector<size_t>& counts) {
  NC_CHECK(counts.size() == 1, "world size 1 needs exactly one count");
  if (in != out) std::copy(in, in + counts[0], out);
  return done();
}
WorkPtr LocalCommunicator::all_gather(const float* in, float* out, const std::vector<size_t>& counts) {
  NC_CHECK(counts.size() == 1, "world size 1 needs exactly one count");
  if (in != out) std::copy(in, in + counts[0], out);
  return done();
}
WorkPtr LocalCommunicator::broadcast(void*, size_t, int) { return done(); }
WorkPtr LocalCommunicator::barrier() { return done(); }

namespace {
void check_one(const std::vector<size_t>& bytes, int root, const char* what) {
  if (bytes.size() != 1) fail(what, " at world size 1 needs exactly one size, got ", bytes.size());
  if (root != 0) fail(what, " root ", root, " is not a rank in [0, 1)");
}
void copy_bytes(const void* in, void* out, size_t n) {
  if (n > 0 && in != out) std::memmove(out, in, n);
}
}  // namespace

WorkPtr LocalCommunicator::send(const void*, size_t bytes, int peer) {
  fail("send of ", bytes, " bytes to rank ", peer, ": a one-rank job has no other rank");
}
WorkPtr LocalCommunicator::recv(void*, size_t bytes, int peer) {
  fail("recv of ", bytes, " bytes from rank ", peer, ": a one-rank job has no other rank");
}
WorkPtr LocalCommunicator::gather(const void* in, void* out, const std::vector<size_t>& bytes, int root) {
  check_one(bytes, root, "gather");
  copy_bytes(in, out, bytes[0]);
  return done();
}
WorkPtr LocalCommunicator::scatter(const void* in, void* out, const std::vector<size_t>& bytes, int root) {
  check_one(bytes, root, "scatter");
  copy_bytes(in, out, bytes[0]);
  return done();
}
WorkPtr LocalCommunicator::all_gather_bytes(const void* in, void* out, const std::vector<size_t>& bytes) {
  check_one(bytes, 0, "all_gather_bytes");
  copy_bytes(in, out, bytes[0]);
  return done();
}
std::unique_ptr<Communicator> LocalCommunicator::split(int color) {
  if (color < 0) fail("split: color ", color, " is negative; every rank passes a color >= 0");
  return std::make_unique<LocalCommunicator>();
}

}  // namespace nanochat
