// GlooCommunicator's point-to-point, gather, scatter, byte all-gather and split
// (comm/communicator.h, cluster/gloo_communicator.h; docs/architecture.md 7.5). Each kind of
// operation uses its own Gloo slot, so none matches another's messages; the root of a gather or
// scatter posts every receive or send at once. Every wait has the collective timeout; a timeout
// records the rank waited for (and whether it never received or never sent) for the diagnosis of
// gloo_communicator.cpp. split() connects a new mesh among a color's ranks over the job's store.
#include <algorithm>
#include <cstring>

#include <gloo/types.h>

#include "nanochat/cluster/gloo_communicator_impl.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"

namespace nanochat::cluster {

#ifdef NANOCHAT_HAVE_GLOO

using namespace gloo_detail;

void GlooCommunicator::Impl::wait_sends(gloo::transport::UnboundBuffer& buf, std::vector<int> pending) {
  while (!pending.empty()) {
    int to = -1;
    try {
      if (!buf.waitSend(&to, coll_timeout)) fail("send to ", rank_desc(pending.front()), " aborted");
    } catch (...) {
      waiting_on = pending.front();
      waiting_send = true;
      throw;
    }
    auto it = std::find(pending.begin(), pending.end(), to);
    pending.erase(it == pending.end() ? pending.begin() : it);
  }
}

void GlooCommunicator::Impl::wait_recvs(gloo::transport::UnboundBuffer& buf, std::vector<int> pending) {
  while (!pending.empty()) {
    int from = -1;
    try {
      if (!buf.waitRecv(&from, coll_timeout)) fail("receive from ", rank_desc(pending.front()), " aborted");
    } catch (...) {
      waiting_on = pending.front();
      waiting_send = false;
      throw;
    }
    auto it = std::find(pending.begin(), pending.end(), from);
    pending.erase(it == pending.end() ? pending.begin() : it);
  }
}

// Gather: every other rank sends its bytes straight to the root, which posts all receives at once.
void GlooCommunicator::Impl::gather_to(const void* in, void* out_v, const std::vector<size_t>& bytes, int root) {
  const int W = env.world_size, r = env.rank;
  const uint64_t slot = gloo::Slot::build(kGatherSlotPrefix, 0);
  if (r != root) {
    if (bytes[r] == 0) return;
    auto buf = unbound(const_cast<void*>(in), bytes[r]);
    buf->send(root, slot);
    wait_sends(*buf, {root});
    return;
  }
  char* out = static_cast<char*>(out_v);
  const auto off = offsets_of(bytes);
  if (bytes[r] > 0 && in != out + off[r]) std::memmove(out + off[r], in, bytes[r]);
  if (off[W] == 0) return;
  auto buf = unbound(out, off[W]);
  std::vector<int> from;
  for (int j = 0; j < W; ++j)
    if (j != r && bytes[j] > 0) {
      buf->recv(j, slot, off[j], bytes[j]);
      from.push_back(j);
    }
  wait_recvs(*buf, from);
}

// Scatter: the root posts one send per other rank at once; each receives its part from the root.
void GlooCommunicator::Impl::scatter_from(const void* in_v, void* out, const std::vector<size_t>& bytes, int root) {
  const int W = env.world_size, r = env.rank;
  const uint64_t slot = gloo::Slot::build(kScatterSlotPrefix, 0);
  if (r != root) {
    if (bytes[r] == 0) return;
    auto buf = unbound(out, bytes[r]);
    buf->recv(root, slot);
    wait_recvs(*buf, {root});
    return;
  }
  const char* in = static_cast<const char*>(in_v);
  const auto off = offsets_of(bytes);
  if (bytes[r] > 0 && out != in + off[r]) std::memmove(out, in + off[r], bytes[r]);
  if (off[W] == 0) return;
  auto buf = unbound(const_cast<char*>(in), off[W]);
  std::vector<int> to;
  for (int j = 0; j < W; ++j)
    if (j != r && bytes[j] > 0) {
      buf->send(j, slot, off[j], bytes[j]);
      to.push_back(j);
    }
  wait_sends(*buf, to);
}

std::unique_ptr<GlooCommunicator::Impl> GlooCommunicator::Impl::child(uint64_t split, int color,
                                                                      const std::vector<int>& members) const {
  auto c = std::make_unique<Impl>();
  c->env = env;
  c->env.world_size = static_cast<int>(members.size());
  c->env.rank = static_cast<int>(std::find(members.begin(), members.end(), env.rank) - members.begin());
  c->opts = opts;
  c->coll_timeout = coll_timeout;
  c->host = host;
  c->dev_choice = dev_choice;
  c->client = client;
  c->store = store;
  for (int m : members) {
    c->peers.push_back(peers[m]);
    c->job_rank.push_back(job_rank[m]);
  }
  c->group = str_cat("group ", color, " of split ", split, group.empty() ? "" : " of ", group);
  c->key_prefix = str_cat(key_prefix, "split/", split, "/", color, "/");
  c->gloo_port = gloo_port;
  c->port_range = port_range;
  if (gloo_port == 0) c->dev = dev;  // ephemeral ports: the job's device makes the new pairs
  c->connect_gloo(c->gloo_port, c->port_range, Clock::now() + *opts.rendezvous_timeout);
  return c;
}

namespace {

void check_peer(const GlooCommunicator& c, int peer, const char* what) {
  if (peer < 0 || peer >= c.world_size() || peer == c.rank())
    fail(what, ": peer ", peer, " is not another rank in [0, ", c.world_size(), ") (this is rank ", c.rank(), ")");
}

size_t check_sizes(const GlooCommunicator& c, const std::vector<size_t>& bytes, int root, const char* what) {
  if (bytes.size() != static_cast<size_t>(c.world_size()))
    fail(what, " needs one size per rank (", c.world_size(), "), got ", bytes.size());
  if (root < 0 || root >= c.world_size()) fail(what, " root ", root, " is not a rank in [0, ", c.world_size(), ")");
  size_t total = 0;
  for (size_t b : bytes) total += b;
  return total;
}

}  // namespace

WorkPtr GlooCommunicator::send(const void* data, size_t bytes, int peer) {
  check_peer(*this, peer, "send");
  Impl* I = impl_.get();
  return I->submit(str_cat("send of ", bytes, " bytes to ", I->rank_desc(peer)), [I, data, bytes, peer] {
    if (bytes == 0) return;
    auto buf = I->unbound(const_cast<void*>(data), bytes);
    buf->send(peer, gloo::Slot::build(kSendRecvSlotPrefix, 0));
    I->wait_sends(*buf, {peer});
  });
}

WorkPtr GlooCommunicator::recv(void* data, size_t bytes, int peer) {
  check_peer(*this, peer, "recv");
  Impl* I = impl_.get();
  return I->submit(str_cat("recv of ", bytes, " bytes from ", I->rank_desc(peer)), [I, data, bytes, peer] {
    if (bytes == 0) return;
    auto buf = I->unbound(data, bytes);
    buf->recv(peer, gloo::Slot::build(kSendRecvSlotPrefix, 0));
    I->wait_recvs(*buf, {peer});
  });
}

WorkPtr GlooCommunicator::gather(const void* in, void* out, const std::vector<size_t>& bytes, int root) {
  const size_t total = check_sizes(*this, bytes, root, "gather");
  Impl* I = impl_.get();
  return I->submit(str_cat("gather of ", total, " bytes to rank ", root),
                   [I, in, out, bytes, root] { I->gather_to(in, out, bytes, root); });
}

WorkPtr GlooCommunicator::scatter(const void* in, void* out, const std::vector<size_t>& bytes, int root) {
  const size_t total = check_sizes(*this, bytes, root, "scatter");
  Impl* I = impl_.get();
  return I->submit(str_cat("scatter of ", total, " bytes from rank ", root),
                   [I, in, out, bytes, root] { I->scatter_from(in, out, bytes, root); });
}

WorkPtr GlooCommunicator::all_gather_bytes(const void* in, void* out, const std::vector<size_t>& bytes) {
  const size_t total = check_sizes(*this, bytes, 0, "all_gather_bytes");
  Impl* I = impl_.get();
  return I->submit(str_cat("all_gather_bytes of ", total, " bytes"),
                   [I, in, out, bytes] { I->ring_all_gather(in, out, bytes); });
}

WorkPtr GlooCommunicator::all_gather_varying(const float* in, size_t count, std::vector<float>* out,
                                             std::vector<uint64_t>* counts, size_t max_total) {
  Impl* I = impl_.get();
  return I->submit(str_cat("all_gather_varying of ", count, " floats from this rank"),
                   [I, in, count, out, counts, max_total] {
                     const size_t W = static_cast<size_t>(I->env.world_size);
                     const uint64_t mine = count;
                     counts->assign(W, 0);
                     I->ring_all_gather(&mine, counts->data(), std::vector<size_t>(W, sizeof(uint64_t)));
                     std::vector<size_t> bytes(W);
                     size_t total = 0;
                     for (size_t j = 0; j < W; ++j) {
                       bytes[j] = static_cast<size_t>((*counts)[j]) * sizeof(float);
                       total += static_cast<size_t>((*counts)[j]);
                     }
                     if (total > max_total) return;
                     if (out->size() < total) out->resize(total);
                     I->ring_all_gather(in, out->data(), bytes);
                   });
}

std::unique_ptr<Communicator> GlooCommunicator::split(int color) {
  if (color < 0) fail(impl_->me(), ": split: color ", color, " is negative; every rank passes a color >= 0");
  const std::vector<int> colors = all_gather_value<int>(*this, color);
  const uint64_t n = ++impl_->splits;
  std::vector<int> members;
  for (int j = 0; j < world_size(); ++j)
    if (colors[static_cast<size_t>(j)] == color) members.push_back(j);
  // a group of one has no peer: its collectives are identities (Gloo's ring needs a peer)
  if (members.size() == 1) return std::make_unique<LocalCommunicator>();
  SigpipeBlock no_sigpipe;  // a pinned port's new device starts Gloo threads
  std::unique_ptr<Impl> c = impl_->child(n, color, members);
  // a member the job's heartbeat finds lost fails the group's waits on it too (a frozen peer
  // would otherwise hold them until the collective timeout)
  auto link = std::make_shared<Impl::ParentLink>();
  link->impl = c.get();
  c->parent_link = link;
  on_peer_lost([link, members](int r, const std::string& why) {
    const auto at = std::find(members.begin(), members.end(), r);
    if (at == members.end()) return;
    std::lock_guard<std::mutex> lk(link->mu);
    if (link->impl) link->impl->peer_lost(static_cast<int>(at - members.begin()), why);
  });
  return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(c)));
}

#endif  // NANOCHAT_HAVE_GLOO

}  // namespace nanochat::cluster
