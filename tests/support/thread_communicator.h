#pragma once
// Test-only Communicator: W ranks as W threads of one process sharing memory.
// Each rank's k-th collective goes into slot k of a shared hub. Slot k executes lazily: only once
// every rank has launched it AND some rank waits on it (it then reads every rank's input buffer
// and writes every rank's output). This models an asynchronous backend at its most unhelpful: a
// rank that reads a result without wait() sees stale data, and a rank that modifies an input
// between launch and wait changes what is sent.
// Reductions are float sums in rank order (like a ring/tree backend, up to summation order).
// Point to point: a send's wait() returns once the matching recv has taken the data, and a recv's
// once the data is there (like Gloo's rendezvous); both fail after the hub's p2p deadline naming
// the peer. split(color) builds one new hub per color (shared by that color's ranks).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"

namespace nanochat::testing {

class ThreadHub {
 public:
  explicit ThreadHub(int world, std::chrono::milliseconds p2p_timeout = std::chrono::seconds(60))
      : world_(world), p2p_timeout_(p2p_timeout), next_(world, 0) {}
  int world() const { return world_; }

  enum class Kind {
    AllReduce,
    AllReduceF64,
    ReduceScatter,
    AllGather,
    Broadcast,
    Barrier,
    Gather,
    Scatter,
    AllGatherBytes
  };
  struct Part {
    Kind kind = Kind::Barrier;
    const void* in = nullptr;
    void* out = nullptr;
    size_t n = 0;                // elements (all-reduce) or bytes (broadcast)
    std::vector<size_t> counts;  // elements (reduce-scatter, all-gather) or bytes (gather, scatter, ...)
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

  /// One message from `from` to `to` (point to point); returns its id for wait_send.
  uint64_t post_send(int from, int to, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t id = ++next_msg_;
    mail_[{from, to}].push_back(Msg{id, data, bytes});
    cv_.notify_all();
    return id;
  }
  /// Blocks until message `id` from `from` to `to` was received; throws after the p2p deadline.
  void wait_send(int from, int to, uint64_t id) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, p2p_timeout_, [&] { return taken_.count(id) > 0; }))
      fail("rank ", from, ": send to rank ", to, ": rank ", to, " posted no matching recv within ",
           p2p_timeout_.count(), " ms");
    const std::string err = taken_[id];
    if (!err.empty()) fail(err);
  }
  /// Takes the next message from `from` to `to` into data (it must have `bytes` bytes); throws
  /// after the p2p deadline or for another size.
  void recv(int to, int from, void* data, size_t bytes) {
    std::unique_lock<std::mutex> lk(mu_);
    auto& q = mail_[{from, to}];
    if (!cv_.wait_for(lk, p2p_timeout_, [&] { return !q.empty(); }))
      fail("rank ", to, ": recv from rank ", from, ": no data within ", p2p_timeout_.count(), " ms");
    const Msg m = q.front();
    q.pop_front();
    std::string err;
    if (m.bytes != bytes)
      err = str_cat("rank ", to, " asked rank ", from, " for ", bytes, " bytes but it sent ", m.bytes);
    else if (bytes > 0)
      std::memcpy(data, m.data, bytes);
    taken_[m.id] = err;
    cv_.notify_all();
    if (!err.empty()) fail(err);
  }
  /// The hub of the ranks of color `color` in split number `split` (created by its first caller).
  std::shared_ptr<ThreadHub> group_hub(uint64_t split, int color, int size) {
    std::lock_guard<std::mutex> lk(mu_);
    auto& h = groups_[{split, color}];
    if (!h) h = std::make_shared<ThreadHub>(size, p2p_timeout_);
    return h;
  }

  /// Number of collectives launched by rank r so far.
  uint64_t launched(int r) {
    std::lock_guard<std::mutex> lk(mu_);
    return next_[r];
  }

 private:
  struct Msg {
    uint64_t id;
    const void* data;
    size_t bytes;
  };
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
      case Kind::Gather: {
        Part& root = s.parts[static_cast<size_t>(p0.root)];
        std::vector<char> all(off[world_]);
        for (int j = 0; j < world_; ++j)
          if (p0.counts[j]) std::memcpy(all.data() + off[j], s.parts[j].in, p0.counts[j]);
        if (!all.empty()) std::memcpy(root.out, all.data(), all.size());
        break;
      }
      case Kind::Scatter: {
        const char* in = static_cast<const char*>(s.parts[static_cast<size_t>(p0.root)].in);
        std::vector<char> all(in, in + off[world_]);
        for (int j = 0; j < world_; ++j)
          if (p0.counts[j]) std::memcpy(s.parts[j].out, all.data() + off[j], p0.counts[j]);
        break;
      }
      case Kind::AllGatherBytes: {
        std::vector<char> all(off[world_]);
        for (int j = 0; j < world_; ++j)
          if (p0.counts[j]) std::memcpy(all.data() + off[j], s.parts[j].in, p0.counts[j]);
        for (Part& p : s.parts)
          if (!all.empty()) std::memcpy(p.out, all.data(), all.size());
        break;
      }
    }
  }

  int world_;
  std::chrono::milliseconds p2p_timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Slot> slots_;
  std::vector<uint64_t> next_;
  std::map<std::pair<int, int>, std::deque<Msg>> mail_;  // (from, to) -> messages in order
  std::map<uint64_t, std::string> taken_;                // received message id -> error ("" = ok)
  uint64_t next_msg_ = 0;
  std::map<std::pair<uint64_t, int>, std::shared_ptr<ThreadHub>> groups_;
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
  WorkPtr send(const void* data, size_t bytes, int peer) override {
    check_peer(peer);
    if (bytes == 0) return std::make_shared<FnWork>([] {});
    const uint64_t id = hub_.post_send(rank_, peer, data, bytes);
    return std::make_shared<FnWork>([this, peer, id] { hub_.wait_send(rank_, peer, id); });
  }
  WorkPtr recv(void* data, size_t bytes, int peer) override {
    check_peer(peer);
    if (bytes == 0) return std::make_shared<FnWork>([] {});
    return std::make_shared<FnWork>([this, data, bytes, peer] { hub_.recv(rank_, peer, data, bytes); });
  }
  WorkPtr gather(const void* in, void* out, const std::vector<size_t>& bytes, int root) override {
    NC_CHECK(bytes.size() == static_cast<size_t>(hub_.world()), "one size per rank");
    return submit({ThreadHub::Kind::Gather, in, out, 0, bytes, root});
  }
  WorkPtr scatter(const void* in, void* out, const std::vector<size_t>& bytes, int root) override {
    NC_CHECK(bytes.size() == static_cast<size_t>(hub_.world()), "one size per rank");
    return submit({ThreadHub::Kind::Scatter, in, out, 0, bytes, root});
  }
  WorkPtr all_gather_bytes(const void* in, void* out, const std::vector<size_t>& bytes) override {
    NC_CHECK(bytes.size() == static_cast<size_t>(hub_.world()), "one size per rank");
    return submit({ThreadHub::Kind::AllGatherBytes, in, out, 0, bytes, 0});
  }
  std::unique_ptr<Communicator> split(int color) override {
    if (color < 0) fail("split: color ", color, " is negative");
    const int W = hub_.world();
    std::vector<int> colors(static_cast<size_t>(W));
    colors[static_cast<size_t>(rank_)] = color;
    const uint64_t split_id = hub_.launched(rank_);
    all_gather_bytes(&colors[static_cast<size_t>(rank_)], colors.data(), std::vector<size_t>(W, sizeof(int)))->wait();
    int size = 0, mine = 0;
    for (int j = 0; j < W; ++j)
      if (colors[static_cast<size_t>(j)] == color) {
        if (j == rank_) mine = size;
        ++size;
      }
    auto hub = hub_.group_hub(split_id, color, size);
    return std::unique_ptr<Communicator>(new ThreadCommunicator(hub, mine));
  }

 private:
  ThreadCommunicator(std::shared_ptr<ThreadHub> owned, int rank)
      : hub_(*owned), rank_(rank), owned_(std::move(owned)) {}
  void check_peer(int peer) const {
    if (peer < 0 || peer >= hub_.world() || peer == rank_)
      fail("rank ", rank_, ": peer ", peer, " is not another rank in [0, ", hub_.world(), ")");
  }
  // Runs fn at the first wait(); later waits rethrow its failure, if any (wait() is idempotent).
  class FnWork final : public Work {
   public:
    explicit FnWork(std::function<void()> fn) : fn_(std::move(fn)) {}
    void wait() override {
      if (fn_) {
        auto f = std::move(fn_);
        fn_ = nullptr;
        try {
          f();
        } catch (...) {
          error_ = std::current_exception();
        }
      }
      if (error_) std::rethrow_exception(error_);
    }

   private:
    std::function<void()> fn_;
    std::exception_ptr error_;
  };

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
  std::shared_ptr<ThreadHub> owned_;  // a split's group hub
};

}  // namespace nanochat::testing
