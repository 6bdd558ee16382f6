#pragma once
// A Gloo context whose pairs all listen on one chosen port (--port-range, cluster/mesh.h).
//
// libgloo (2022) gives every pair of ranks its own listening socket, bound to the device's
// address and port when the pair is created, and closed once the pair is connected. Gloo's
// connectFullMesh creates all pairs first, so they cannot share a port. connect_one_port()
// instead creates and connects the pairs one at a time, every rank in the same global order
// (pair (a, b), a < b, in lexicographic order: deadlock-free), so each pair binds the port after
// the previous pair's listener has closed. The pairs themselves are Gloo's (same handshake, same
// timeouts, same collectives).
#ifdef NANOCHAT_HAVE_GLOO
#include <gloo/context.h>
#include <gloo/transport/tcp/attr.h>

#include <memory>

#include "nanochat/cluster/net.h"
#include "nanochat/cluster/store.h"

namespace nanochat::cluster {

class OnePortContext final : public gloo::Context {
 public:
  OnePortContext(int rank, int size) : gloo::Context(rank, size) {}

  /// Connects a pair to every other rank: a Gloo TCP device for `attr` (hostname or iface) with
  /// its port set to `port` and the pairs created and connected one by one; each pair's address
  /// is exchanged in `store` ("pair/<from>/<to>", waiting until `deadline`). `local_rank` is
  /// passed to the pairs as connectFullMesh does. Pair connects are bounded by getTimeout().
  /// Throws what Gloo throws (bind, connect timeout) and StoreTimeout when a peer never publishes.
  void connect_one_port(Store& store, const gloo::transport::tcp::attr& attr, int port, int local_rank,
                        Clock::time_point deadline);
};

}  // namespace nanochat::cluster
#endif
