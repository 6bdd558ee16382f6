// A GlooCommunicator's failures: the diagnosis of a failed operation (which peer, and why: it died,
// another rank failed first, a peer was lost, a timeout; docs/architecture.md 7.7), and the
// communicator's side of the heartbeat (cluster/heartbeat.h, docs/architecture.md 7.12): when
// the heartbeat finds a peer lost, the operation waiting for that peer must end now, not at the
// collective timeout. Gloo's TCP pair has the call for exactly that, the one its buffers make when
// they time out waiting on it: tcp::Pair::signalExceptionExternal fails every pending send and
// receive on the pair (under the pair's lock) and closes its socket, as if the peer had closed the
// connection. Every later operation fails with the same reason (run_thread). A failed operation
// fails every pair the same way (end_every_pair): the other lane may be waiting on a pair to a
// rank that is alive, and a pair that is only closed never ends a receive posted on it.
//
// That member is not public and its header does not compile from Debian's libgloo-dev (it includes
// a header the package lacks), so it is looked up by its exported name at run time and called
// only on an object whose dynamic type is gloo's tcp::Pair. Under the Itanium C++ ABI (x86-64,
// aarch64) a member function returning a class by value takes the return slot first, then `this`,
// then its arguments: the same registers as the free function type below. When the symbol is
// missing (another Gloo build), the wait ends at the collective timeout instead, and the
// failure still names the lost peer.
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <thread>
#include <typeinfo>

#include "nanochat/cluster/gloo_communicator_impl.h"

#ifdef NANOCHAT_HAVE_GLOO
#include <gloo/transport/pair.h>

namespace nanochat::cluster {

namespace {

using SignalFn = std::exception_ptr (*)(void* pair, const std::string& msg);

SignalFn signal_exception_fn() {
  static const SignalFn fn = reinterpret_cast<SignalFn>(::dlsym(
      RTLD_DEFAULT,
      "_ZN4gloo9transport3tcp4Pair23signalExceptionExternalERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"));
  return fn;
}

// True when the pending waits on `p` were failed now.
bool fail_pair(gloo::transport::Pair* p, const std::string& why) {
  const SignalFn fn = signal_exception_fn();
  if (!p || !fn || std::string(typeid(*p).name()) != "N4gloo9transport3tcp4PairE") return false;
  fn(p, why);
  return true;
}

std::string secs(Ms t) {
  char b[32];
  std::snprintf(b, sizeof(b), "%g", t.count() / 1000.0);
  return b;
}

}  // namespace

std::string GlooCommunicator::Impl::diagnose(const std::string& what, const std::string& gloo_msg, int* lost_peer) {
  const int W = env.world_size;
  *lost_peer = -1;
  {
    std::lock_guard<std::mutex> lk(qmu);
    if (!lost.empty()) *lost_peer = lost_rank;
  }
  if (*lost_peer >= 0) {  // the heartbeat found a peer gone: that is why this operation failed
    std::string msg;
    {
      std::lock_guard<std::mutex> lk(qmu);
      msg = str_cat(me(), ": ", what, " failed: ", lost);
    }
    try {
      store->set(str_cat("error/", job_rank[env.rank]), msg);  // the other ranks quote it
    } catch (const std::exception&) {
    }
    return msg;
  }
  bool store_ok = true;
  try {
    store->set(str_cat("error/", job_rank[env.rank]), str_cat(me(), ": ", what, " failed: ", gloo_msg));
  } catch (const std::exception&) {
    store_ok = false;
  }
  // Ranks whose store connection dropped without a goodbye and that reported no error of their
  // own died first (killed or crashed); ranks that reported an error failed because of something.
  std::vector<std::string> dead;
  std::vector<int> dead_ranks;
  std::vector<std::string> errors;
  std::string lost_elsewhere;  // another rank's heartbeat found a peer gone (peer_lost's key)
  if (store_ok) {
    // A killed peer's store connection drops at the same moment as its Gloo sockets; give the
    // store a moment to apply its last will.
    auto until = Clock::now() + Ms(3000);
    try {
      for (;;) {
        dead.clear();
        dead_ranks.clear();
        errors.clear();
        for (int j = 0; j < W; ++j) {
          if (auto l = store->try_get(str_cat("lost/", job_rank[j])); l && *lost_peer < 0) {
            *lost_peer = j;
            lost_elsewhere = *l;
          }
          if (j == env.rank) continue;
          auto e = store->try_get(str_cat("error/", job_rank[j]));
          if (e) errors.push_back(*e);
          if (auto v = store->try_get(str_cat("dead/", job_rank[j])); v && !e) {
            dead.push_back(*v);
            dead_ranks.push_back(j);
          }
        }
        if (!dead.empty() || *lost_peer >= 0 || Clock::now() >= until) break;
        std::this_thread::sleep_for(Ms(50));
      }
    } catch (const std::exception&) {
      store_ok = false;
    }
  }
  std::string msg = str_cat(me(), ": ", what, " failed: ");
  if (*lost_peer >= 0 && dead.empty()) {
    msg += lost_elsewhere;
  } else if (!dead.empty()) {
    *lost_peer = dead_ranks[0];
    for (size_t i = 0; i < dead.size(); ++i) msg += (i ? "; " : "") + dead[i];
    msg += dead.size() == 1 ? str_cat(" ", kDiedWhy)  // the heartbeat's words, when it finds it first
                            : " have died (killed or crashed: their connections to the store dropped)";
  } else if (!errors.empty()) {
    msg += "another rank failed first: " + errors[0];
  } else if (!store_ok) {
    std::string host_of_store = env.store_hosted ? "node 0's `nanochat run`" : rank_desc(0);
    msg += str_cat(client->where(), " is unreachable as well, so the process hosting it (", host_of_store,
                   ") has probably died");
  } else if (const int silent = waiting_on; silent >= 0 && waiting_send) {  // the rank a ring wait recorded
    msg += str_cat(rank_desc(silent), " did not receive this rank's data within the collective timeout (",
                   secs(coll_timeout),
                   " s, NANOCHAT_COLLECTIVE_TIMEOUT) and no rank reported a failure: that rank is hung or "
                   "stopped, the network to it failed, or it never posts the matching receive (a send with no "
                   "recv, or two ranks that both send first)");
  } else if (silent >= 0) {
    msg += str_cat("no data from ", rank_desc(silent), " within the collective timeout (", secs(coll_timeout),
                   " s, NANOCHAT_COLLECTIVE_TIMEOUT) and no rank reported a failure: that rank (or one before it in "
                   "the ring) is probably hung or stopped, or the network to it failed");
  } else {
    msg += str_cat(
        "no other rank reported a failure: a peer may be hung or stopped, or the network between hosts "
        "failed (collective timeout ",
        secs(coll_timeout), " s, NANOCHAT_COLLECTIVE_TIMEOUT)");
  }
  msg += ". Gloo reported: " + gloo_msg;
  return msg;
}

void GlooCommunicator::Impl::start_heartbeat() {
  const Ms timeout = heartbeat_timeout();
  if (timeout <= Ms(0)) return;
  StoreClientOptions co;
  co.host = env.master_addr;
  co.port = env.master_port;
  co.job_token = *opts.job_token;
  co.connect_timeout = *opts.rendezvous_timeout;
  co.identity = str_cat("rank ", env.rank, " on ", host);
  heartbeat = std::make_unique<Heartbeat>(co, str_cat("nc/g", opts.generation, "/"), env.rank, env.world_size, timeout,
                                          [this](int r, const std::string& why) { peer_lost(r, why); });
}

void GlooCommunicator::Impl::peer_lost(int r, const std::string& why) {
  const std::string msg = str_cat(rank_desc(r), " ", why);
  std::vector<std::function<void(int, const std::string&)>> hooks;
  {
    std::lock_guard<std::mutex> lk(qmu);
    if (!lost.empty()) return;  // the first loss is the reason
    lost = msg;
    lost_rank = r;
    hooks = lost_hooks;
    for (auto* b : live_buffers) {  // a receive posted for the lost rank would wait out the timeout
      b->abortWaitRecv();
      b->abortWaitSend();
    }
  }
  std::fprintf(stderr, "%s: %s\n", me().c_str(), msg.c_str());
  std::fflush(stderr);
  if (r != env.rank) try {  // the ranks whose operations fail because of this one name the lost rank too
      store->set(str_cat("lost/", job_rank[r]), msg);
    } catch (const std::exception&) {
    }
  bool ended = false;
  for (int i = 0; ctx && i < ctx->size; ++i) {
    if (i == env.rank || (r != env.rank && i != r)) continue;  // this rank itself is out: every pair
    try {
      ended = fail_pair(ctx->getPair(i).get(), msg) || ended;
    } catch (const std::exception&) {
      // the pair had failed already: its waits end anyway
    }
  }
  if (!ended)
    std::fprintf(stderr, "%s: the wait for it ends at the collective timeout (%ld s)\n", me().c_str(),
                 static_cast<long>(coll_timeout.count() / 1000));
  for (auto& h : hooks) h(r, msg);
}

void GlooCommunicator::Impl::end_every_pair(const std::string& why) {
  {
    // our own buffers first: Gloo does not end a send that a dead peer's reset left in a pair's
    // transmit queue
    std::lock_guard<std::mutex> lk(qmu);
    for (auto* b : live_buffers) {
      b->abortWaitRecv();
      b->abortWaitSend();
    }
  }
  bool ended = true;
  for (int i = 0; ctx && i < ctx->size; ++i) {
    if (i == env.rank) continue;
    try {
      ended = fail_pair(ctx->getPair(i).get(), why) && ended;
    } catch (const std::exception&) {
      // the pair had failed already
    }
  }
  if (ended || !ctx) return;
  try {  // without Gloo's call (another Gloo build): closed, a wait on another pair ends at its timeout
    ctx->closeConnections();
  } catch (const std::exception&) {
  }
}

void GlooCommunicator::Impl::UnboundDeleter::operator()(gloo::transport::UnboundBuffer* b) const {
  {
    std::lock_guard<std::mutex> lk(impl->qmu);
    impl->live_buffers.erase(std::remove(impl->live_buffers.begin(), impl->live_buffers.end(), b),
                             impl->live_buffers.end());
  }
  delete b;
}

GlooCommunicator::Impl::Unbound GlooCommunicator::Impl::unbound(void* data, size_t bytes) {
  Unbound b(ctx->createUnboundBuffer(data, bytes).release(), UnboundDeleter{this});
  std::lock_guard<std::mutex> lk(qmu);
  live_buffers.push_back(b.get());
  if (!lost.empty()) {  // lost before this operation waits: it ends at once
    b->abortWaitRecv();
    b->abortWaitSend();
  }
  return b;
}

void GlooCommunicator::on_peer_lost(std::function<void(int peer, const std::string& why)> fn) {
  std::string lost;
  int r = -1;
  {
    std::lock_guard<std::mutex> lk(impl_->qmu);
    impl_->lost_hooks.push_back(fn);
    lost = impl_->lost;
    r = impl_->lost_rank;
  }
  if (!lost.empty()) fn(r, lost);  // lost before the hook was registered
}

}  // namespace nanochat::cluster
#endif
