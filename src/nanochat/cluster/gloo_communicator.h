#pragma once
// GlooCommunicator: the Communicator over Gloo's TCP transport (docs/architecture.md 3.6, 3.7, 3.10).
//
// Rendezvous: the job's TCP store (cluster/store.h) at MASTER_ADDR:MASTER_PORT, hosted by rank 0
// unless NANOCHAT_STORE_HOSTED=1 (then node 0's launcher hosts it). Keys live under
// "nc/g<generation>/". Every rank claims its RANK, publishes host/address/pid, waits (with the
// rendezvous deadline) for all others, checks that every pair of ranks can open its data-plane
// connection (cluster/mesh.h: a few seconds, one clear error on every rank otherwise), and connects a
// Gloo full mesh on the device chosen by choose_device() (never the hostname's loopback address),
// on the rank's --port-range port (NANOCHAT_PORT_RANGE) when one is set, else on ephemeral ports.
//
// Execution: a collective blocks on Gloo's buffers, so a dedicated comm thread (the main lane)
// executes submitted operations in FIFO order; every call returns at once with a Work handle. A
// second thread, the side lane (started at the first all_gather_side), runs only all_gather_side, in
// FIFO order, at the same time as the main lane: the two share the Gloo pairs (whose sends and
// receives are locked per pair) and use different slots. The threads run plain loops (no
// OpenMP); while they work, the caller's OpenMP threads may compute, but they compete for cores:
// give the rank one core less than its share if the overlap matters (see the report of bench/dist/).
//
// Failure: any Gloo error or timeout (collective timeout, default 300 s) breaks the communicator.
// The comm thread then publishes its error in the store, looks for a dead peer (ranks leave a
// "last will" key the store sets when their connection drops) and fails the Work with one
// nanochat::Error naming this rank and the peer rank/host at fault; every later operation fails
// with the same message. The context is closed so the other ranks notice within milliseconds.
#include <map>
#include <memory>
#include <string>

#include "nanochat/cluster/env.h"
#include "nanochat/cluster/store.h"
#include "nanochat/comm/communicator.h"

namespace nanochat::cluster {

/// What a rank published at rendezvous.
struct PeerInfo {
  std::string host;     ///< gethostname() of the rank
  std::string address;  ///< address its Gloo device bound
  long pid = 0;
  long node = -1;  ///< its launcher's node (GROUP_RANK; -1: not started by `nanochat run`)
};

#ifdef NANOCHAT_HAVE_GLOO
class GlooCommunicator final : public Communicator {
 public:
  /// Joins the job: hosts the store if rank 0 and not NANOCHAT_STORE_HOSTED, rendezvous, connects
  /// the full mesh, starts the comm thread. Throws nanochat::Error (busy port, unreachable store,
  /// wrong job token, missing ranks after the rendezvous deadline, duplicate RANK, unreachable
  /// peers, bad --iface).
  GlooCommunicator(const DistEnv& env, const DistOptions& options);
  /// Fails queued operations that have not started, closes the mesh, says goodbye to the store;
  /// the store host waits (bounded) for the other ranks to disconnect before stopping the store.
  ~GlooCommunicator() override;
  /// Leaves the group for good while the object lives on (its owner may outlive the group: an
  /// elastic job's first generation, train/elastic.cpp): says goodbye on the heartbeat and stops
  /// it, stops the lanes, and closes the Gloo connections. Every operation submitted later fails
  /// at once with an Error quoting `why`; rank(), peers(), store() and the other accessors still
  /// answer, and a store this rank hosts keeps serving until the object is destroyed. A second
  /// call does nothing.
  void close(const std::string& why);

  int rank() const override;
  int world_size() const override;
  WorkPtr all_reduce_sum(float* data, size_t n) override;
  WorkPtr all_reduce_sum_f64(double* data, size_t n) override;
  WorkPtr reduce_scatter_sum(float* in, float* out, const std::vector<size_t>& counts) override;
  WorkPtr all_gather(const float* in, float* out, const std::vector<size_t>& counts) override;
  WorkPtr all_gather_side(const float* in, float* out, const std::vector<size_t>& counts) override;
  WorkPtr broadcast(void* data, size_t bytes, int root) override;
  WorkPtr barrier() override;
  WorkPtr send(const void* data, size_t bytes, int peer) override;
  WorkPtr recv(void* data, size_t bytes, int peer) override;
  WorkPtr gather(const void* in, void* out, const std::vector<size_t>& bytes, int root) override;
  WorkPtr scatter(const void* in, void* out, const std::vector<size_t>& bytes, int root) override;
  WorkPtr all_gather_bytes(const void* in, void* out, const std::vector<size_t>& bytes) override;
  /// The counts and the data in one task of the main lane (two ring all-gathers).
  WorkPtr all_gather_varying(const float* in, size_t count, std::vector<float>* out, std::vector<uint64_t>* counts,
                             size_t max_total) override;
  /// One all_gather_value of the colors here, then a new Gloo mesh among the group's ranks over
  /// the job's store (keys "split/<k>/<color>/", k = this communicator's split count) and the
  /// job's device (or, with --port-range, its pinned port), within the rendezvous deadline. The
  /// new communicator has its own comm thread; its messages name a rank by its rank in the
  /// group, the group and its job rank. It shares this one's store connection.
  std::unique_ptr<Communicator> split(int color) override;
  /// The job's communicator runs a heartbeat (cluster/heartbeat.h, NANOCHAT_HEARTBEAT_TIMEOUT): a
  /// peer that stops answering it, or dies, is reported to `fn` and fails the operation waiting
  /// for it (and every later one) with PeerLost naming it, in seconds instead of the collective
  /// timeout.
  void on_peer_lost(std::function<void(int peer, const std::string& why)> fn) override;

  /// The job's store, prefixed with this generation ("nc/g<k>/"). Thread-safe, but the comm
  /// thread uses the same connection when diagnosing a failure.
  Store& store();
  /// Rendezvous data of every rank (index = rank here).
  const std::vector<PeerInfo>& peers() const;
  /// The device this rank bound.
  const DeviceChoice& device() const;
  /// Where this rank sits (rank and world size of this communicator) and its resolved options
  /// (generation: the store prefix "nc/g<k>/").
  const DistEnv& env() const;
  const DistOptions& options() const;
  /// "rank R (host H)".
  std::string describe_rank(int r) const;

 private:
  struct Impl;
  explicit GlooCommunicator(std::unique_ptr<Impl> impl);  // a group of split()
  // Starts lane 0 (main: in the constructors) or 1 (side: at its first use, under Impl::qmu).
  void start_lane(int lane);
  WorkPtr gather_floats(const float* in, float* out, const std::vector<size_t>& counts, int lane);
  std::unique_ptr<Impl> impl_;
};
#endif

/// LocalCommunicator when WORLD_SIZE is unset or 1, else a GlooCommunicator built from the
/// environment (DistEnv::from_env) and `options`. Throws nanochat::Error when W > 1 and this
/// build has no Gloo, or when joining fails.
std::unique_ptr<Communicator> make_communicator_from_env(const DistOptions& options = {});

}  // namespace nanochat::cluster
