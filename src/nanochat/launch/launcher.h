#pragma once
// The launcher behind `nanochat run` (docs/architecture.md 1, 3.7, 3.10), with torchrun's meanings:
// it starts --nproc-per-node ranks of a program on this node with RANK = node_rank*P + local,
// LOCAL_RANK, WORLD_SIZE = N*P, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS.
// Node 0's launcher hosts the job's store (ranks get NANOCHAT_STORE_HOSTED=1); the launchers of
// all nodes register in the store first, so a different --nnodes / --nproc-per-node on some node
// is one clear error on every node instead of a hang. Output lines of rank R are prefixed with
// "[rank R] ". Ctrl-C / SIGTERM are forwarded (SIGHUP stops the ranks with SIGTERM); if a rank fails, the other ranks
// (on every node) are stopped: a few seconds to exit on their own, then SIGTERM, then SIGKILL after a grace period.
// A failed rank's last stderr lines travel with its failure report, so every node quotes them. A
// node 0 launched again while an earlier launch of the same job still holds the port (waiting for
// its nodes, or started less than the rendezvous timeout ago) replaces it: the earlier one and the
// nodes running with it stop, nodes still waiting move over (docs/architecture.md 7.1.1).
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nanochat/cluster/net.h"
#include "nanochat/launch/placement.h"

namespace nanochat::cluster {

struct LaunchOptions {
  int nnodes = 1;
  /// --nnodes MIN:MAX: the job starts with nnodes = MAX nodes and goes on while at least MIN
  /// remain (a node whose ranks die or freeze leaves; the others regroup). 0: a fixed-size job.
  int min_nnodes = 0;
  int nproc_per_node = 1;
  int node_rank = 0;
  std::string master_addr;  ///< "" = 127.0.0.1 when nnodes == 1 (required otherwise)
  /// A loopback --master-addr with nnodes > 1 is refused (the other hosts cannot reach it) unless
  /// this is set or NANOCHAT_ALLOW_LOOPBACK_MASTER=1: every node on one machine (tests).
  bool allow_loopback_master = false;
  int master_port = 29500;
  std::string iface;              ///< passed to the ranks as NANOCHAT_SOCKET_IFNAME when set
  int threads_per_rank = 0;       ///< OMP_NUM_THREADS; 0 = env OMP_NUM_THREADS, else cores / P
  std::string job_token;          ///< "" = NANOCHAT_JOB_TOKEN, else a random one when nnodes == 1
  Ms rendezvous_timeout{300000};  ///< how long launchers wait for each other (NANOCHAT_RENDEZVOUS_TIMEOUT)
  Ms settle{3000};                ///< after a failure, time the other ranks get to exit on their own
  Ms grace{10000};                ///< time between SIGTERM and SIGKILL
  std::string program;            ///< what each rank runs; empty: this program (self_executable())
  std::vector<std::string> args;  ///< its arguments (the subcommand and its flags)
  /// Where the ranks run (launch/placement.h plan_placement; its nproc must equal
  /// nproc_per_node). Empty ranks: not pinned, threads as threads_per_rank says. Otherwise local
  /// rank l is pinned to ranks[l].cpus (sched_setaffinity before exec) with ranks[l].threads.
  Placement placement;
  /// Node 0: a text its launcher publishes in the job's store (before the nodes meet) for the nodes
  /// that follow it (below); `nanochat run ... speedrun` publishes each distributed stage so.
  std::string publish;
  /// A node that follows node 0 (the other nodes of `nanochat run ... speedrun`): once it reaches
  /// node 0's store, before it registers there, it reads node 0's published text (a launch that
  /// publishes none is an error naming node 0) and passes it here, which returns the args its ranks
  /// run instead of `args`, or nullopt for a launch it does not take part in (one it ran already):
  /// it then leaves that store unregistered and waits for node 0's next launch, until the
  /// rendezvous deadline. A launch whose ranks all ended is never followed.
  std::function<std::optional<std::vector<std::string>>(const std::string& published)> follow;
};

/// Runs the job's ranks on this node until they all exit. Returns 0 when every rank (on every
/// node) succeeded, 128+signal when interrupted by SIGINT/SIGTERM/SIGHUP (also while it waits for
/// the other nodes: then no rank was started). While it waits for other nodes (to join, or to
/// finish) it prints what it waits for every wait_report_interval() (cluster/env.h). Throws
/// nanochat::Error naming the failed rank, its host and its exit status when a rank fails (here or
/// on another node), and for setup errors (busy port, with the process holding it; unreachable
/// master; a loopback master, or a name resolving to one, with nnodes > 1; mismatched --nnodes
/// between nodes; a taken --node-rank; node 0 launched again while this launch waited or ran).
int launch(const LaunchOptions& opts);

/// Why a loopback `master` cannot serve `nnodes` > 1 nodes, and what to do (launcher, doctor).
std::string loopback_master_error(const std::string& master, int nnodes);

/// Why `master` cannot serve `nnodes` > 1 nodes, or "" when it can: written as a loopback address
/// (loopback_master_error()), or a name that resolves only to loopback addresses on this host (a
/// Debian/Ubuntu machine's own name maps to 127.0.1.1): the message names what it resolved to and
/// what to do. Resolves `master` (getaddrinfo).
std::string loopback_master_problem(const std::string& master, int nnodes);

/// Physical cores available to this process (distinct core ids of the CPUs in its affinity mask);
/// falls back to the logical CPU count.
int physical_cores();

}  // namespace nanochat::cluster
