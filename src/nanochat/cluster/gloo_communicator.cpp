#include "nanochat/cluster/gloo_communicator.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "nanochat/cluster/gloo_communicator_impl.h"
#include "nanochat/cluster/gloo_mesh.h"
#include "nanochat/cluster/mesh.h"
#include "nanochat/core/error.h"
#include "nanochat/core/threads.h"

#ifdef NANOCHAT_HAVE_GLOO
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#endif

namespace nanochat::cluster {

#ifdef NANOCHAT_HAVE_GLOO

using namespace gloo_detail;

namespace {

// Float all-reduces up to this many values go through gather_sum, larger ones through
// ring_all_reduce; gather_sum gathers longer arrays (the f64 sums) in blocks of this many.
constexpr size_t kGatherSumMax = size_t(1) << 14;

// Removes Gloo's "[/path/file.cc:123] " source-location prefix.
std::string clean_gloo_message(std::string m) {
  if (!m.empty() && m[0] == '[') {
    auto close = m.find("] ");
    if (close != std::string::npos && m.substr(0, close).find(':') != std::string::npos) m = m.substr(close + 2);
  }
  return m;
}

std::string secs(Ms t) {
  char b[32];
  std::snprintf(b, sizeof(b), "%g", t.count() / 1000.0);
  return b;
}

// Adapts our Store to Gloo's rendezvous interface. Gloo's connectFullMesh calls get() without
// waiting first, so get() blocks until the key exists (bounded by the rendezvous deadline).
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(cluster::Store& s, Ms timeout) : s_(s), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_.set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = s_.get(key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { s_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    s_.wait(keys, std::min<Ms>(timeout.count() > 0 ? timeout : timeout_, timeout_));
  }

 private:
  cluster::Store& s_;
  Ms timeout_;
};

class GlooWork final : public Work {
 public:
  explicit GlooWork(std::shared_ptr<OpState> st) : st_(std::move(st)) {}
  void wait() override {
    std::unique_lock<std::mutex> lk(st_->mu);
    st_->cv.wait(lk, [&] { return st_->done; });
    if (st_->lost_peer >= 0) throw PeerLost(st_->error, st_->lost_peer);
    if (!st_->error.empty()) throw Error(st_->error);
  }

 private:
  std::shared_ptr<OpState> st_;
};

void finish(OpState& st, std::string error, int lost_peer = -1) {
  {
    std::lock_guard<std::mutex> lk(st.mu);
    st.done = true;
    st.error = std::move(error);
    st.lost_peer = lost_peer;
  }
  st.cv.notify_all();
}

}  // namespace

void GlooCommunicator::Impl::open_store(Clock::time_point t0) {
  const Ms rdzv = *opts.rendezvous_timeout;
  const int r = env.rank;
  if (r == 0 && !env.store_hosted) server = std::make_unique<StoreServer>(env.master_port, *opts.job_token, host);
  StoreClientOptions co;
  co.host = env.master_addr;
  co.port = env.master_port;
  co.job_token = *opts.job_token;
  co.connect_timeout = rdzv;
  co.identity = str_cat("rank ", r, " on ", host, " (pid ", getpid(), ")");
  // While the store is not up yet (rank 0 or node 0 starting late), say so every interval. The
  // client keeps this callback, so it holds copies only.
  auto next_report = std::make_shared<Clock::time_point>(t0 + wait_report_interval());
  const std::string where = host_port(env.master_addr, env.master_port);
  co.on_retry = [next_report, r, t0, rdzv, where](const std::string& err) {
    const auto now = Clock::now();
    if (now < *next_report) return;
    *next_report = now + wait_report_interval();
    std::fprintf(stderr, "rank %d: waiting for the job's store at %s: %s (%ld s of %g s)\n", r, where.c_str(),
                 err.c_str(), std::lround(std::chrono::duration<double>(now - t0).count()), rdzv.count() / 1000.0);
    std::fflush(stderr);
  };
  client = std::make_shared<StoreClient>(co);
  const std::string prefix = str_cat("nc/g", opts.generation, "/");
  store = std::make_shared<PrefixStore>(*client, prefix);
  client->set_will(str_cat(prefix, "dead/", r), str_cat("rank ", r, " (host ", host, ", pid ", getpid(), ")"));
}

void GlooCommunicator::Impl::wait_for_every_rank(Clock::time_point deadline) {
  const int W = env.world_size;
  std::vector<std::string> keys;
  for (int j = 0; j < W; ++j) keys.push_back(str_cat("info/", j));
  try {
    wait_and_report(*store, keys, remaining(deadline), static_cast<size_t>(env.rank),
                    [&](const std::vector<size_t>& m) {
                      std::string list;
                      for (size_t i = 0; i < m.size() && i < 8; ++i) list += str_cat(i ? ", " : "", m[i]);
                      return str_cat(me(), ": waiting for rank", m.size() == 1 ? " " : "s ", list,
                                     m.size() > 8 ? ", ..." : "", " of WORLD_SIZE=", W, " to join ", client->where());
                    });
  } catch (const StoreTimeout&) {
    std::string missing;
    int n_missing = 0;
    for (int j = 0; j < W; ++j)
      if (!store->check({str_cat("info/", j)})) {
        missing += (n_missing++ ? ", " : "") + std::to_string(j);
      }
    fail("rendezvous timed out after ", secs(*opts.rendezvous_timeout), " s at ", client->where(), ": rank",
         n_missing == 1 ? " " : "s ", missing, " of WORLD_SIZE=", W,
         " never joined. Start every rank (or every node's `nanochat run` with the same --nnodes), with the same "
         "MASTER_ADDR/MASTER_PORT");
  }
}

std::vector<nlohmann::json> GlooCommunicator::Impl::read_peer_infos(Clock::time_point deadline) {
  const int W = env.world_size;
  peers.resize(W);
  for (int j = 0; j < W; ++j) job_rank.push_back(j);
  std::vector<nlohmann::json> infos(W);
  std::string ws_mismatch;
  for (int j = 0; j < W; ++j) {
    auto& j_info = infos[j];
    j_info = nlohmann::json::parse(store->get(str_cat("info/", j), remaining(deadline) + Ms(1000)));
    peers[j].host = j_info.value("host", "?");
    peers[j].address = j_info.value("address", "?");
    peers[j].pid = j_info.value("pid", 0L);
    peers[j].node = j_info.value("node", -1L);
    int their_ws = j_info.value("world_size", 0);
    if (their_ws != W) ws_mismatch += str_cat("; ", rank_desc(j), " has WORLD_SIZE=", their_ws);
  }
  if (!ws_mismatch.empty())
    fail("ranks disagree on WORLD_SIZE: ", me(), " has WORLD_SIZE=", W, ws_mismatch,
         ". Start every node with the same --nnodes and --nproc-per-node");
  return infos;
}

void GlooCommunicator::Impl::rendezvous() {
  const auto t0 = Clock::now();
  const Ms rdzv = *opts.rendezvous_timeout;
  const auto deadline = t0 + rdzv;
  const int W = env.world_size, r = env.rank;
  host = host_name();
  open_store(t0);
  dev_choice = choose_device(env.master_addr, env.master_port, *opts.iface);

  nlohmann::json info = {
      {"host", host},    {"address", dev_choice.address}, {"pid", static_cast<long>(getpid())},
      {"world_size", W}, {"local_rank", env.local_rank},  {"node", env_int("GROUP_RANK").value_or(-1)}};
  const auto range = port_range_from_env();
  if (range) check_port_range_size(*range, env.local_world_size, "NANOCHAT_PORT_RANGE=" + range->str());
  if (store->add(str_cat("claim/", r), 1) > 1) {
    std::string other = "another process";
    try {
      auto j = nlohmann::json::parse(store->get(str_cat("info/", r), Ms(5000)));
      other = str_cat("host ", j.value("host", "?"), ", pid ", j.value("pid", 0L));
    } catch (const std::exception&) {
    }
    fail("RANK=", r, " is used by two processes: this one (host ", host, ", pid ", getpid(), ") and ", other,
         "; give every process a distinct RANK in [0, ", W, ")");
  }
  // The data-plane listeners of the mesh check (their ports are Gloo's when a range pins them).
  std::optional<MeshCheck> mesh;
  mesh.emplace(env, host, dev_choice.address, range);
  info.update(mesh->published());
  store->set(str_cat("info/", r), info.dump());

  wait_for_every_rank(deadline);
  const std::vector<nlohmann::json> infos = read_peer_infos(deadline);
  const Ms probe = mesh_check_timeout();
  if (probe > Ms(0)) mesh->run(*store, infos, probe, Clock::now() + probe + std::max(rdzv / 10, Ms(30000)));
  gloo_port = mesh->gloo_port();  // 0: the kernel picks each pair's port
  port_range = range ? range->str() : std::string();
  mesh.reset();  // closes its listener before Gloo binds the same port
  connect_gloo(gloo_port, port_range, deadline);
}

void GlooCommunicator::Impl::connect_gloo(int port, const std::string& range, Clock::time_point deadline) {
  const Ms rdzv = *opts.rendezvous_timeout;
  const int W = env.world_size, r = env.rank;
  // Gloo full mesh. The pair connect waits 5x the context timeout, so connect with a short one.
  try {
    gloo::transport::tcp::attr a;
    if (!opts.iface->empty()) {
      a.iface = *opts.iface;
      if (dev_choice.address.find(':') == std::string::npos) a.ai_family = AF_INET;
    } else {
      a.hostname = dev_choice.address;
    }
    Ms connect_t = std::clamp<Ms>(rdzv / 5, Ms(1000), Ms(12000));
    PrefixStore gloo_keys(*store, key_prefix + "gloo/");
    if (port > 0) {  // --port-range: every pair of this rank listens on `port`, one after another
      auto c = std::make_shared<OnePortContext>(r, W);
      c->setTimeout(connect_t);
      c->connect_one_port(gloo_keys, a, port, env.local_rank, std::max(deadline, Clock::now() + Ms(1000)));
      dev = c->getDevice();
      ctx = c;
    } else {
      if (!dev) dev = gloo::transport::tcp::CreateDevice(a);  // a sub-communicator shares the job's
      auto c = std::make_shared<gloo::rendezvous::Context>(r, W);
      c->setTimeout(connect_t);
      GlooStoreAdapter adapter(gloo_keys, std::max(remaining(deadline), Ms(1000)));
      std::shared_ptr<gloo::transport::Device> d = dev;
      c->connectFullMesh(adapter, d);
      ctx = c;
    }
    ctx->setTimeout(coll_timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(me(), ": connecting the Gloo mesh to the other ranks failed: ", clean_gloo_message(e.what()),
         ". This rank bound ", dev_choice.address, dev_choice.iface.empty() ? "" : " on " + dev_choice.iface, " (",
         dev_choice.reason,
         port > 0 ? str_cat(", data-plane port ", port, " (NANOCHAT_PORT_RANGE ", range, ")") : std::string(),
         "). Every pair of ranks needs direct TCP connections on the data-plane ports (ephemeral unless "
         "--port-range pins them): check firewalls, and pick an interface the other hosts can reach with --iface / "
         "NANOCHAT_SOCKET_IFNAME");
  }
  scratch.assign(kInFlight * kChunk, 0.f);
}

thread_local int GlooCommunicator::Impl::waiting_on = -1;
thread_local bool GlooCommunicator::Impl::waiting_send = false;

void GlooCommunicator::Impl::run_thread(int lane) {
  std::deque<Task>& q = queue[lane];
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lk(qmu);
      qcv[lane].wait(lk, [&] { return stopping || !q.empty(); });
      if (q.empty()) return;  // stopping and drained
      t = std::move(q.front());
      q.pop_front();
      if (stopping) {
        lk.unlock();
        finish(*t.st,
               str_cat(me(), ": ", t.what, " was cancelled: the communicator was closed or destroyed before it ran"));
        continue;
      }
      if (!broken.empty()) {
        std::string b = broken;
        const int peer = broken_peer;
        lk.unlock();
        finish(*t.st, str_cat(me(), ": ", t.what, " cannot run: the communicator failed earlier: ", b), peer);
        continue;
      }
    }
    std::string err;
    int lost_peer = -1;
    try {
      {
        std::lock_guard<std::mutex> lk(qmu);
        if (!lost.empty()) throw Error("a peer was lost before this operation started");  // diagnose names it
      }
      t.fn();
    } catch (const Error& e) {
      err = diagnose(t.what, e.what(), &lost_peer);
    } catch (const std::exception& e) {
      const std::string m = clean_gloo_message(e.what());
      // a closure caused by the other lane's timeout takes that lane's reason below
      err = closed_by_other_lane(m) ? str_cat(me(), ": ", t.what, " failed: ", m) : diagnose(t.what, m, &lost_peer);
    }
    if (!err.empty()) {
      bool first = false;
      {
        std::lock_guard<std::mutex> lk(qmu);
        if (broken.empty()) {  // the first failure is the reason; the other lane's follows from it
          broken = err;
          broken_peer = lost_peer;
          first = true;
          broken_cv.notify_all();
        } else if (lost_peer < 0) {  // ended by the other lane's failure: name that one
          err = str_cat(me(), ": ", t.what, " was ended by a failure on the other lane: ", broken);
          lost_peer = broken_peer;
        }
      }
      if (first) end_every_pair(err);
    }
    finish(*t.st, err, lost_peer);
  }
}

// Gloo's buffer that times out waiting on a pair fails that pair's other waits with "Application
// timeout caused pair closure": here, the other lane's, which is diagnosing its timeout (the
// peer it waited for and why). Waits for that diagnosis to become `broken` (true) rather than
// racing it with a diagnosis that cannot name the peer; false for any other error, or when no
// diagnosis came within 10 s (then this lane diagnoses its own failure).
bool GlooCommunicator::Impl::closed_by_other_lane(const std::string& gloo_msg) {
  if (gloo_msg.find("Application timeout caused pair closure") == std::string::npos) return false;
  std::unique_lock<std::mutex> lk(qmu);
  return broken_cv.wait_for(lk, Ms(10000), [&] { return !broken.empty(); });
}

WorkPtr GlooCommunicator::Impl::submit(std::string what, std::function<void()> fn, int lane) {
  auto st = std::make_shared<OpState>();
  {
    std::unique_lock<std::mutex> lk(qmu);
    ++seq;
    if (stopping) {  // closed: no lane runs it
      const std::string why = closed;
      lk.unlock();
      finish(*st, str_cat(me(), ": ", what, " cannot run: the communicator was closed: ", why));
      return std::make_shared<GlooWork>(st);
    }
    queue[lane].push_back(Task{str_cat(what, " (collective #", seq, lane ? ", side lane)" : ")"), std::move(fn), st});
  }
  qcv[lane].notify_one();
  return std::make_shared<GlooWork>(st);
}

// Waits for the next posted receive from `peer` (the ring's previous rank); on a timeout or an
// abort records the peer for the diagnosis and rethrows.
void GlooCommunicator::Impl::recv_from(gloo::transport::UnboundBuffer& buf, int peer) {
  try {
    if (!buf.waitRecv(coll_timeout)) fail("receive from ", rank_desc(peer), " aborted");
  } catch (...) {
    waiting_on = peer;
    waiting_send = false;
    throw;
  }
}

void GlooCommunicator::Impl::send_to_done(gloo::transport::UnboundBuffer& buf, int peer) {
  try {
    if (!buf.waitSend(coll_timeout)) fail("send to ", rank_desc(peer), " aborted");
  } catch (...) {
    waiting_on = peer;
    waiting_send = true;
    throw;
  }
}

// Ring reduce-scatter with unequal segment sizes. Step s (0..W-2): send segment (r-1-s) to the next
// rank, receive segment (r-2-s) from the previous one and add it in place; after W-1 steps
// segment r holds the sum over all ranks. Segments travel in chunks of kChunk floats so the
// addition of one chunk overlaps the arrival of the next ones, and a reduced chunk is forwarded
// at once (the segment received at step s is the one sent at step s+1).
void GlooCommunicator::Impl::ring_reduce_scatter(float* in, float* out, const std::vector<size_t>& counts) {
  const int W = env.world_size, r = env.rank;
  const auto off = offsets_of(counts);
  const size_t total = off[W];
  auto seg = [&](int k) { return ((k % W) + W) % W; };
  if (total > 0) {
    const int next = (r + 1) % W, prev = (r - 1 + W) % W;
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, 0);
    auto inbuf = unbound(in, total * sizeof(float));
    auto tmp = unbound(scratch.data(), scratch.size() * sizeof(float));
    size_t sends = 0;
    auto send_chunks = [&](int j) {
      for (size_t b = 0; b < counts[j]; b += kChunk) {
        inbuf->send(next, slot, (off[j] + b) * sizeof(float), std::min(kChunk, counts[j] - b) * sizeof(float));
        ++sends;
      }
    };
    struct Piece {
      size_t begin, len;
      int step;
    };
    std::vector<Piece> recvs;
    for (int s = 0; s < W - 1; ++s) {
      int j = seg(r - 2 - s);
      for (size_t b = 0; b < counts[j]; b += kChunk) recvs.push_back({off[j] + b, std::min(kChunk, counts[j] - b), s});
    }
    auto post_recv = [&](size_t q) {
      tmp->recv(prev, slot, (q % kInFlight) * kChunk * sizeof(float), recvs[q].len * sizeof(float));
    };
    send_chunks(seg(r - 1));
    for (size_t q = 0; q < recvs.size() && q < kInFlight; ++q) post_recv(q);
    for (size_t q = 0; q < recvs.size(); ++q) {
      recv_from(*tmp, prev);
      const float* src = scratch.data() + (q % kInFlight) * kChunk;
      float* dst = in + recvs[q].begin;
      for (size_t i = 0; i < recvs[q].len; ++i) dst[i] += src[i];
      if (recvs[q].step < W - 2) {
        inbuf->send(next, slot, recvs[q].begin * sizeof(float), recvs[q].len * sizeof(float));
        ++sends;
      }
      if (q + kInFlight < recvs.size()) post_recv(q + kInFlight);
    }
    for (size_t i = 0; i < sends; ++i) send_to_done(*inbuf, next);
  }
  if (counts[r] > 0 && out != in + off[r]) std::memmove(out, in + off[r], counts[r] * sizeof(float));
}

// Ring all-gather with unequal segments (of bytes): step s sends segment (r-s) to the next rank and
// receives segment (r-s-1) from the previous one, directly into its place in `out`. Segments
// travel in chunks of kChunkBytes, a window of them in flight, and a received chunk is forwarded
// at once (the segment received at step s is the one sent at step s+1).
void GlooCommunicator::Impl::ring_all_gather(const void* in, void* out_v, const std::vector<size_t>& bytes, int lane) {
  const int W = env.world_size, r = env.rank;
  char* out = static_cast<char*>(out_v);
  const auto off = offsets_of(bytes);
  const size_t total = off[W];
  if (bytes[r] > 0 && in != out + off[r]) std::memmove(out + off[r], in, bytes[r]);
  if (total == 0) return;
  auto seg = [&](int k) { return ((k % W) + W) % W; };
  const int next = (r + 1) % W, prev = (r - 1 + W) % W;
  const uint64_t slot = gloo::Slot::build(kAllgatherSlotPrefix, static_cast<uint32_t>(lane));
  auto buf = unbound(out, total);
  size_t sends = 0;
  struct Piece {
    size_t begin, len;
    int step;
  };
  std::vector<Piece> recvs;
  for (int s = 0; s < W - 1; ++s) {
    int j = seg(r - s - 1);
    for (size_t b = 0; b < bytes[j]; b += kChunkBytes)
      recvs.push_back({off[j] + b, std::min(kChunkBytes, bytes[j] - b), s});
  }
  constexpr size_t kWindow = 2 * kInFlight;
  auto post_recv = [&](size_t q) { buf->recv(prev, slot, recvs[q].begin, recvs[q].len); };
  for (size_t b = 0; b < bytes[r]; b += kChunkBytes) {
    buf->send(next, slot, off[r] + b, std::min(kChunkBytes, bytes[r] - b));
    ++sends;
  }
  for (size_t q = 0; q < recvs.size() && q < kWindow; ++q) post_recv(q);
  for (size_t q = 0; q < recvs.size(); ++q) {
    recv_from(*buf, prev);
    if (recvs[q].step < W - 2) {
      buf->send(next, slot, recvs[q].begin, recvs[q].len);
      ++sends;
    }
    if (q + kWindow < recvs.size()) post_recv(q + kWindow);
  }
  for (size_t i = 0; i < sends; ++i) send_to_done(*buf, next);
}

// The all-reduce of a few values (the step's token count, the small AdamW tensors, evaluation
// sums) on our own ring, whose buffers end their waits when a peer is lost or the other lane
// fails (Gloo's algorithms keep theirs out of reach): every rank's values are all-gathered, then
// added in rank order, so every rank gets the same bits. A longer array (only the f64 sums) goes
// in blocks of kGatherSumMax values, so the gathered copy stays W x 128 KiB.
template <typename T>
void GlooCommunicator::Impl::gather_sum(T* data, size_t n) {
  const size_t W = static_cast<size_t>(env.world_size);
  std::vector<T> all(std::min(n, kGatherSumMax) * W);
  for (size_t b = 0; b < n; b += kGatherSumMax) {
    const size_t m = std::min(kGatherSumMax, n - b);
    ring_all_gather(data + b, all.data(), std::vector<size_t>(W, m * sizeof(T)));
    for (size_t i = 0; i < m; ++i) {
      T s = all[i];
      for (size_t r = 1; r < W; ++r) s += all[r * m + i];
      data[b + i] = s;
    }
  }
}

// A larger all-reduce: our reduce-scatter of near-equal segments, then our all-gather, in place.
void GlooCommunicator::Impl::ring_all_reduce(float* data, size_t n) {
  const size_t W = static_cast<size_t>(env.world_size), r = static_cast<size_t>(env.rank);
  std::vector<size_t> counts(W), bytes(W);
  size_t begin = 0;
  for (size_t j = 0; j < W; ++j) {
    counts[j] = n / W + (j < n % W ? 1 : 0);
    bytes[j] = counts[j] * sizeof(float);
    if (j < r) begin += counts[j];
  }
  ring_reduce_scatter(data, data + begin, counts);
  ring_all_gather(data + begin, data, bytes);
}

// Broadcast as a pipeline down the ring: root+1 receives from the root, every later rank from
// the one before it, and each forwards a chunk to the next rank as soon as it arrives (the rank
// before the root forwards nothing). Chunks of kChunkBytes with a window of receives posted, so
// a large buffer (the weights at a resume) takes about one transfer time plus a chunk per hop.
void GlooCommunicator::Impl::ring_broadcast(void* data, size_t bytes, int root) {
  const int W = env.world_size, r = env.rank;
  if (W == 1 || bytes == 0) return;
  const int next = (r + 1) % W, prev = (r - 1 + W) % W;
  const uint64_t slot = gloo::Slot::build(kBroadcastSlotPrefix, 0);
  auto buf = unbound(data, bytes);
  const size_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  auto len = [&](size_t q) { return std::min(kChunkBytes, bytes - q * kChunkBytes); };
  size_t sends = 0;
  if (r == root) {
    for (size_t q = 0; q < chunks; ++q, ++sends) buf->send(next, slot, q * kChunkBytes, len(q));
  } else {
    constexpr size_t kWindow = 2 * kInFlight;
    auto post_recv = [&](size_t q) { buf->recv(prev, slot, q * kChunkBytes, len(q)); };
    for (size_t q = 0; q < chunks && q < kWindow; ++q) post_recv(q);
    for (size_t q = 0; q < chunks; ++q) {
      recv_from(*buf, prev);
      if (next != root) {
        buf->send(next, slot, q * kChunkBytes, len(q));
        ++sends;
      }
      if (q + kWindow < chunks) post_recv(q + kWindow);
    }
  }
  for (size_t i = 0; i < sends; ++i) send_to_done(*buf, next);
}

void GlooCommunicator::Impl::ring_barrier() {
  const size_t W = static_cast<size_t>(env.world_size);
  if (W == 1) return;
  char mine = 1;
  std::vector<char> all(W);
  ring_all_gather(&mine, all.data(), std::vector<size_t>(W, 1));
}

GlooCommunicator::GlooCommunicator(const DistEnv& env, const DistOptions& options) : impl_(new Impl) {
  NC_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, "bad rank/world size");
  impl_->env = env;
  impl_->opts = options.resolved();
  impl_->coll_timeout = *impl_->opts.collective_timeout;
  SigpipeBlock no_sigpipe;  // Gloo's threads created here inherit the blocked SIGPIPE
  impl_->rendezvous();
  start_lane(0);
  if (env.world_size > 1) impl_->start_heartbeat();
}

GlooCommunicator::GlooCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { start_lane(0); }

void GlooCommunicator::start_lane(int lane) {
  impl_->thread[lane] = std::thread([this, lane] {
    name_this_thread(lane == 0 ? "nc-comm" : "nc-comm-side");
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    impl_->run_thread(lane);
  });
}

GlooCommunicator::~GlooCommunicator() {
  if (impl_->parent_link) {  // a group: its parent no longer reports losses to it
    std::lock_guard<std::mutex> lk(impl_->parent_link->mu);
    impl_->parent_link->impl = nullptr;
  }
  impl_->heartbeat.reset();  // says goodbye: the other ranks do not report this one as lost
  {
    std::lock_guard<std::mutex> lk(impl_->qmu);
    impl_->stopping = true;
  }
  for (int lane = 0; lane < Impl::kLanes; ++lane) {
    impl_->qcv[lane].notify_all();
    if (impl_->thread[lane].joinable()) impl_->thread[lane].join();
  }
  SigpipeBlock no_sigpipe;
  impl_.reset();  // closes the mesh, says goodbye, and (store host) lingers for the others
}

void GlooCommunicator::close(const std::string& why) {
  impl_->heartbeat.reset();  // says goodbye
  {
    std::lock_guard<std::mutex> lk(impl_->qmu);
    if (impl_->stopping) return;
    impl_->stopping = true;
    impl_->closed = why;
  }
  for (int lane = 0; lane < Impl::kLanes; ++lane) {
    impl_->qcv[lane].notify_all();
    if (impl_->thread[lane].joinable()) impl_->thread[lane].join();
  }
  SigpipeBlock no_sigpipe;
  impl_->ctx.reset();  // its pairs' sockets
  impl_->dev.reset();  // and the device's event loop
}

int GlooCommunicator::rank() const { return impl_->env.rank; }
int GlooCommunicator::world_size() const { return impl_->env.world_size; }
Store& GlooCommunicator::store() { return *impl_->store; }
const std::vector<PeerInfo>& GlooCommunicator::peers() const { return impl_->peers; }
const DeviceChoice& GlooCommunicator::device() const { return impl_->dev_choice; }
const DistEnv& GlooCommunicator::env() const { return impl_->env; }
const DistOptions& GlooCommunicator::options() const { return impl_->opts; }
std::string GlooCommunicator::describe_rank(int r) const { return impl_->rank_desc(r); }

WorkPtr GlooCommunicator::all_reduce_sum(float* data, size_t n) {
  Impl* I = impl_.get();
  return I->submit(str_cat("all_reduce_sum of ", n, " floats"), [I, data, n] {
    if (n == 0 || I->env.world_size == 1) return;  // a sum over one rank
    if (n <= kGatherSumMax) return I->gather_sum(data, n);
    I->ring_all_reduce(data, n);
  });
}

WorkPtr GlooCommunicator::all_reduce_sum_f64(double* data, size_t n) {
  Impl* I = impl_.get();
  return I->submit(str_cat("all_reduce_sum_f64 of ", n, " doubles"), [I, data, n] {
    if (n == 0 || I->env.world_size == 1) return;  // a sum over one rank
    I->gather_sum(data, n);
  });
}

WorkPtr GlooCommunicator::reduce_scatter_sum(float* in, float* out, const std::vector<size_t>& counts) {
  if (counts.size() != static_cast<size_t>(world_size()))
    fail("reduce_scatter_sum needs one count per rank (", world_size(), "), got ", counts.size());
  Impl* I = impl_.get();
  size_t total = 0;
  for (size_t c : counts) total += c;
  return I->submit(str_cat("reduce_scatter_sum of ", total, " floats"),
                   [I, in, out, counts] { I->ring_reduce_scatter(in, out, counts); });
}

WorkPtr GlooCommunicator::gather_floats(const float* in, float* out, const std::vector<size_t>& counts, int lane) {
  if (counts.size() != static_cast<size_t>(world_size()))
    fail(lane ? "all_gather_side" : "all_gather", " needs one count per rank (", world_size(), "), got ",
         counts.size());
  Impl* I = impl_.get();
  size_t total = 0;
  std::vector<size_t> bytes;
  for (size_t c : counts) {
    total += c;
    bytes.push_back(c * sizeof(float));
  }
  if (lane != 0) {
    std::lock_guard<std::mutex> lk(I->qmu);
    if (!I->thread[lane].joinable() && !I->stopping) start_lane(lane);
  }
  return I->submit(
      str_cat("all_gather of ", total, " floats"),
      [I, in, out, bytes, lane] { I->ring_all_gather(in, out, bytes, lane); }, lane);
}

WorkPtr GlooCommunicator::all_gather(const float* in, float* out, const std::vector<size_t>& counts) {
  return gather_floats(in, out, counts, 0);
}

WorkPtr GlooCommunicator::all_gather_side(const float* in, float* out, const std::vector<size_t>& counts) {
  return gather_floats(in, out, counts, 1);
}

WorkPtr GlooCommunicator::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size()) fail("broadcast root ", root, " is not a rank in [0, ", world_size(), ")");
  Impl* I = impl_.get();
  return I->submit(str_cat("broadcast of ", bytes, " bytes from rank ", root),
                   [I, data, bytes, root] { I->ring_broadcast(data, bytes, root); });
}

WorkPtr GlooCommunicator::barrier() {
  Impl* I = impl_.get();
  return I->submit("barrier", [I] { I->ring_barrier(); });
}

#endif  // NANOCHAT_HAVE_GLOO

std::unique_ptr<Communicator> make_communicator_from_env(const DistOptions& options) {
  DistEnv env = DistEnv::from_env();
  if (env.world_size == 1) return std::make_unique<LocalCommunicator>();
#ifdef NANOCHAT_HAVE_GLOO
  return std::make_unique<GlooCommunicator>(env, options);
#else
  (void)options;
  fail("WORLD_SIZE=", env.world_size,
       " needs the Gloo communicator, but this nanochat was built without Gloo; install "
       "libgloo-dev and rebuild");
#endif
}

}  // namespace nanochat::cluster
