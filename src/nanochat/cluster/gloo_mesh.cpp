#include "nanochat/cluster/gloo_mesh.h"

#ifdef NANOCHAT_HAVE_GLOO
#include <arpa/inet.h>
#include <netinet/in.h>

#include <gloo/transport/context.h>
#include <gloo/transport/tcp/device.h>

#include "nanochat/core/error.h"

namespace nanochat::cluster {

namespace {

namespace tcp = gloo::transport::tcp;

void set_port(tcp::attr& a, int port) {
  if (a.ai_addr.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&a.ai_addr)->sin6_port = htons(static_cast<uint16_t>(port));
  else
    reinterpret_cast<sockaddr_in*>(&a.ai_addr)->sin_port = htons(static_cast<uint16_t>(port));
}

// A Gloo TCP device whose pairs bind `port`. Gloo's Device constructor finds the interface by
// comparing the whole socket address with the interface addresses (port 0), so it must see port
// 0; the port is set while this device is still under construction, before any pair exists
// (Gloo declares the attributes const and reads them when each pair binds its listener).
class OnePortDevice final : public tcp::Device {
 public:
  OnePortDevice(const tcp::attr& resolved, int port) : tcp::Device(resolved) {
    set_port(const_cast<tcp::attr&>(attr_), port);
  }
};

}  // namespace

void OnePortContext::connect_one_port(Store& store, const gloo::transport::tcp::attr& attr, int port, int local_rank,
                                      Clock::time_point deadline) {
  // resolves the hostname or interface (port 0)
  std::shared_ptr<gloo::transport::Device> dev = std::make_shared<OnePortDevice>(tcp::CreateDeviceAttr(attr), port);
  auto tctx = dev->createContext(rank, size);
  tctx->setTimeout(getTimeout());
  // Every rank walks its pairs in increasing peer order, which is the lexicographic order of
  // the pairs (min, max) for every rank: the smallest pair not yet connected always has both of
  // its ranks working on it.
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    auto& pair = tctx->createPair(peer);  // binds and listens on `port`
    pair->setLocalRank(local_rank);
    const auto bytes = pair->address().bytes();
    store.set(str_cat("pair/", rank, "/", peer), std::string(bytes.begin(), bytes.end()));
    const std::string theirs = store.get(str_cat("pair/", peer, "/", rank), remaining(deadline));
    pair->connect(std::vector<char>(theirs.begin(), theirs.end()));  // returns once connected
  }
  device_ = dev;
  transportContext_ = std::move(tctx);
}

}  // namespace nanochat::cluster
#endif
