#pragma once
// The data plane's ports and the startup mesh check (docs/architecture.md 7.10, 3.10).
//
// Ports: by default the kernel picks the ports Gloo's pairs listen on (ephemeral). With
// --port-range A-B (NANOCHAT_PORT_RANGE=A-B) the rank with local rank i on a node listens on port
// A + i only: a node of L ranks needs L ports, and the same range works on every node. (libgloo
// 2022 gives every pair of ranks its own listening socket; with a pinned port the pairs are
// connected one at a time in one global order, each binding the port after the previous pair's
// listener has closed, see cluster/gloo_mesh.h.)
//
// Mesh check: before Gloo connects, every rank binds its data-plane port itself, and for every
// pair of ranks the side that Gloo will make connect (the one with the larger address) opens a
// TCP connection to the other's port, within a few seconds. The results meet in the store; if
// any pair failed, every rank stops with the same message naming both hosts, the address and the
// port, instead of stalling in Gloo's connect or first collective.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "nanochat/cluster/env.h"
#include "nanochat/cluster/net.h"
#include "nanochat/cluster/store.h"

namespace nanochat::cluster {

/// An inclusive range of TCP ports.
struct PortRange {
  int first = 0;
  int last = 0;
  int size() const { return last - first + 1; }
  std::string str() const;  ///< "A-B"
};

/// Parses "A-B" (1 <= A <= B <= 65535; "A" alone is A-A). Throws nanochat::Error naming `what`
/// (the flag or variable) and the expected form.
PortRange parse_port_range(const std::string& text, const std::string& what);

/// NANOCHAT_PORT_RANGE parsed, or nullopt when unset or empty. Throws on a malformed value.
std::optional<PortRange> port_range_from_env();

/// Throws nanochat::Error when `range` has fewer than `local_world_size` ports (one per rank on
/// the node), naming `what` and a range that would fit.
void check_port_range_size(const PortRange& range, int local_world_size, const std::string& what);

/// The port of the rank with local rank `local_rank`: range.first + local_rank.
int pinned_port(const PortRange& range, int local_rank);

/// How long each rank probes its peers: NANOCHAT_MESH_CHECK_TIMEOUT seconds, default 3; 0 turns
/// the check off. Throws naming the variable when it is not a non-negative integer.
Ms mesh_check_timeout();

/// One rank's side of the mesh check. Construct before publishing the rendezvous info, put
/// published() into it, then call run() once every rank's info is known.
class MeshCheck {
 public:
  /// Binds the data-plane listener on `address`: at pinned_port() with a range, else on an
  /// ephemeral port. Throws nanochat::Error naming the port, the host and the range when the port
  /// is held by another process.
  MeshCheck(const DistEnv& env, const std::string& host, const std::string& address,
            const std::optional<PortRange>& range);
  ~MeshCheck();
  MeshCheck(const MeshCheck&) = delete;
  MeshCheck& operator=(const MeshCheck&) = delete;

  /// {"port": P, "pinned": bool} for the rendezvous info.
  nlohmann::json published() const;

  /// `infos[j]` is rank j's rendezvous info (host, address, port). Probes the peers this rank
  /// connects to (each within `probe_timeout`), publishes the result under "mesh/<rank>" in
  /// `store`, waits (until `deadline`) for every rank's result and closes the listeners. Throws
  /// the same nanochat::Error on every rank when any pair could not connect, naming both ranks
  /// and hosts, the address and port, and what to open; names the ranks that never reported
  /// when the deadline passes.
  void run(Store& store, const std::vector<nlohmann::json>& infos, Ms probe_timeout, Clock::time_point deadline);

  /// The port Gloo's pairs must bind (0: any port, when no range is set).
  int gloo_port() const { return range_ ? port_ : 0; }

 private:
  DistEnv env_;
  std::string host_, address_;
  std::optional<PortRange> range_;
  int port_ = 0;  // the listener's port
  Fd listener_;
};

}  // namespace nanochat::cluster
