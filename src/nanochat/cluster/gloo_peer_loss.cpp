// A GlooCommunicator's side of the heartbeat (cluster/heartbeat.h, docs/architecture.md 7.12): when
// the heartbeat finds a peer lost, the operation waiting for that peer must end now, not at the
// collective timeout. Gloo's TCP pair has the call for exactly that, the one its buffers make when
// they time out waiting on it: tcp::Pair::signalExceptionExternal fails every pending send and
// receive on the pair (under the pair's lock) and closes its socket, as if the peer had closed the
// connection. Every later operation fails with the same reason (run_thread).
//
// That member is not public and its header does not compile from Debian's libgloo-dev (it includes
// a header the package lacks), so it is looked up by its exported name at run time and called
// only on an object whose dynamic type is gloo's tcp::Pair. Under the Itanium C++ ABI (x86-64,
// aarch64) a member function returning a class by value takes the return slot first, then `this`,
// then its arguments: the same registers as the free function type below. When the symbol is
// missing (another Gloo build), the wait ends at the collective timeout instead, and the
// failure still names the lost peer.
#include <dlfcn.h>

#include <cstdio>
#include <exception>
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

}  // namespace

void GlooCommunicator::Impl::start_heartbeat() {
  const Ms timeout = heartbeat_timeout();
  if (timeout <= Ms(0)) return;
  StoreClientOptions co;
  co.host = env.master_addr;
  co.port = env.master_port;
  co.job_token = *opts.job_token;
  co.connect_timeout = *opts.rendezvous_timeout;
  co.identity = str_cat("rank ", env.rank, " on ", host);
  heartbeat = std::make_unique<Heartbeat>(co, str_cat("nc/g", opts.generation, "/"), env.rank, env.world_size,
                                          timeout, [this](int r, const std::string& why) { peer_lost(r, why); });
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
