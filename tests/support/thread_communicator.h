#pragma once
// Test-only Communicator: W ranks as W threads of one process sharing memory.
// Each rank's k-th collective goes into slot k of a shared hub. Slot k executes lazily: only once
// every rank has launched it AND some rank waits on it (it then reads every rank's input buffer
// and writes every rank's output). This models an asynchronous backend at its most unhelpful: a
// rank that reads a result without wait() sees stale data, and a rank that modifies an input
// between launch and wait changes what is sent.
// Reductions are float sums in rank order (like a ring/tree backend, up to summation order).
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"

namespace nanochat::testing {

class ThreadHub {
 public:
  explicit ThreadHub(int world) : world_(world), next_(world, 0) {}
  int world() const { return world_; }

  enum class Kind { AllReduce, AllReduceF64, ReduceScatter, AllGather, Broadcast, Barrier };
  struct Part {
    Kind kind = Kind::Barrier;
    const void* in = nullptr;
    void* out = nullptr;
    size_t n = 0;  // elements (all-reduce) or bytes (broadcast)
    std::vector<size_t> counts;
    int root = 0;
  };

  /// Registers rank's part of its next collective; returns the slot's sequence number.
  uint64_t submit(int rank, Part part) {
    std::unique_lock<std::mutex> lk(mu_);
    const uint64_t seq = next_[rank]++;
    Slot& s = slots_[seq];
    if (s.parts.empty()) s.parts.resize(world_);
    s.parts[rank] = std::move(part);
    ++s.arrived;
    maybe_execute(s);
    return seq;
  }

  /// Blocks until slot seq has executed; rethrows its failure.
  void wait(uint64_t seq) {
    std::unique_lock<std::mutex> lk(mu_);
    Slot& s = slots_[seq];
    s.waited = true;
    maybe_execute(s);
    cv_.wait(lk, [&] { return s.done; });
    if (s.error) std::rethrow_exception(s.error);
  }

  /// Number of collectives launched by rank r so far.
  uint64_t launched(int r) {
    std::lock_guard<std::mutex> lk(mu_);
    return next_[r];
  }

 private:
  struct Slot {
    std::vector<Part> parts;
    int arrived = 0;
    bool waited = false;
    bool done = false;
    std::exception_ptr error;
  };

  // Called with mu_ held.
  void maybe_execute(Slot& s) {
    if (s.done || !s.waited || s.arrived < world_) return;
    try {
      execute(s);
    } catch (...) {
      s.error = std::current_exception();
    }
    s.done = true;
    cv_.notify_all();
  }

  void execute(Slot& s) {
    const Part& p0 = s.parts[0];
    for (const Part& p : s.parts) {
      NC_CHECK(p.kind == p0.kind, "ranks issued different collectives in the same slot");
      NC_CHECK(p.n == p0.n && p.counts == p0.counts && p.root == p0.root,
               "ranks passed different sizes to the same collective");
    }
    std::vector<size_t> off(world_ + 1, 0);
    for (int r = 0; r < world_ && !p0.counts.empty(); ++r) off[r + 1] = off[r] + p0.counts[r];
    switch (p0.kind) {
      case Kind::AllReduce: {
        std::vector<float> acc(p0.n, 0.f);
        for (const Part& p : s.parts)
          for (size_t i = 0; i < p0.n; ++i) acc[i] += static_cast<const float*>(p.in)[i];
        for (Part& p : s.parts) std::memcpy(p.out, acc.data(), p0.n * sizeof(float));
        break;
      }
      case Kind::AllReduceF64: {
        std::vector<double> acc(p0.n, 0.0);
        for (const Part& p : s.parts)
          for (size_t i = 0; i < p0.n; ++i) acc[i] += static_cast<const double*>(p.in)[i];
        for (Part& p : s.parts) std::memcpy(p.out, acc.data(), p0.n * sizeof(double));
        break;
      }
      case Kind::ReduceScatter: {
        for (int j = 0; j < world_; ++j) {
          std::vector<float> acc(p0.counts[j], 0.f);
          for (const Part& p : s.parts)
            for (size_t i = 0; i < acc.size(); ++i) acc[i] += static_cast<const float*>(p.in)[off[j] + i];
          if (!acc.empty()) std::memcpy(s.parts[j].out, acc.data(), acc.size() * sizeof(float));
        }
        break;
      }
      case Kind::AllGather: {
        // Snapshot the inputs first: an input may alias a region of its rank's output.
        std::vector<std::vector<float>> ins(world_);
        for (int j = 0; j < world_; ++j) {
          const float* in = static_cast<const float*>(s.parts[j].in);
          ins[j].assign(in, in + p0.counts[j]);
        }
        for (Part& p : s.parts)
          for (int j = 0; j < world_; ++j)
            if (!ins[j].empty())
              std::memcpy(static_cast<float*>(p.out) + off[j], ins[j].data(), ins[j].size() * sizeof(float));
        break;
      }
      case Kind::Broadcast: {
        std::vector<char> buf(static_cast<const char*>(s.parts[p0.root].in),
                              static_cast<const char*>(s.parts[p0.root].in) + p0.n);
        for (Part& p : s.parts) std::memcpy(p.out, buf.data(), p0.n);
        break;
      }
      case Kind::Barrier:
        break;
    }
  }

  int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Slot> slots_;
  std::vector<uint64_t> next_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadHub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return hub_.world(); }

  WorkPtr all_reduce_sum(float* data, size_t n) override {
    return submit({ThreadHub::Kind::AllReduce, data, data, n, {}, 0});
  }
  WorkPtr all_reduce_sum_f64(double* data, size_t n) override {
    return submit({ThreadHub::Kind::AllReduceF64, data, data, n, {}, 0});
  }
  WorkPtr reduce_scatter_sum(float* in, float* out, const std::vector<size_t>& counts) override {
    NC_CHECK(counts.size() == static_cast<size_t>(hub_.world()), "one count per rank");
    return submit({ThreadHub::Kind::ReduceScatter, in, out, 0, counts, 0});
  }
  WorkPtr all_gather(const float* in, float* out, const std::vector<size_t>& counts) override {
    NC_CHECK(counts.size() == static_cast<size_t>(hub_.world()), "one count per rank");
    return submit({ThreadHub::Kind::AllGather, in, out, 0, counts, 0});
  }
  WorkPtr broadcast(void* data, size_t bytes, int root) override {
    return submit({ThreadHub::Kind::Broadcast, data, data, bytes, {}, root});
  }
  WorkPtr barrier() override { return submit({ThreadHub::Kind::Barrier, nullptr, nullptr, 0, {}, 0}); }

 private:
  class HubWork final : public Work {
   public:
    HubWork(ThreadHub& hub, uint64_t seq) : hub_(hub), seq_(seq) {}
    void wait() override { hub_.wait(seq_); }

   private:
    ThreadHub& hub_;
    uint64_t seq_;
  };
  WorkPtr submit(ThreadHub::Part p) { return std::make_shared<HubWork>(hub_, hub_.submit(rank_, std::move(p))); }

  ThreadHub& hub_;
  int rank_;
};

}  // namespace nanochat::testing
