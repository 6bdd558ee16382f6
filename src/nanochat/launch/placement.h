#pragma once
// Core types of this machine and where `nanochat run` puts its ranks (docs/architecture.md 6).
//
// A hybrid CPU (Intel's performance + efficiency cores, Arm's big.LITTLE) runs one GEMM split
// statically over all cores at the pace of its slowest cores. `nanochat run` on such a machine
// starts one rank per core type instead, each pinned to its cores with one OpenMP thread per
// physical core, and the row balancer (train/balance.h) gives each rank rows in proportion to its
// measured speed: the core types add their speeds like unequal machines do (3.13).
//
// Detection (Linux sysfs, under a root that tests replace with a fake tree), first match wins:
//   1. Intel hybrid: the PMU folders devices/cpu_core/cpus ("performance") and
//      devices/cpu_atom/cpus ("efficiency"), each a CPU list such as "0-15".
//   2. devices/system/cpu/cpuN/cpu_capacity for every CPU (the scheduler's relative speed, 1024
//      for the fastest; Arm big.LITTLE, recent x86 kernels).
//   3. devices/system/cpu/cpuN/cpufreq/cpuinfo_max_freq for every CPU (kHz).
// For 2 and 3 the CPUs are grouped by value, fastest first; a CPU joins the current group while
// its value is at least kSameTypeRatio of the group's largest (a favoured core's higher turbo
// clock, 5.8 vs 5.5 GHz, is the same type; 5.5 vs 4.3 GHz is not). Unreadable or missing files
// move on to the next method; none readable means one core type. Only the CPUs this process may
// run on (its affinity mask) count; a type left without CPUs is dropped.
// Physical cores per type: distinct (physical_package_id, core_id) of topology/, else one per CPU.
#include <string>
#include <vector>

namespace nanochat::cluster {

/// Two capacity or frequency values belong to one core type when the smaller is at least this
/// fraction of the larger one's group maximum.
inline constexpr double kSameTypeRatio = 0.9;

/// One kind of core on this machine.
struct CoreType {
  std::string name;       ///< "performance", "efficiency", "capacity 1024", "max 4.30 GHz"
  std::vector<int> cpus;  ///< logical CPUs, ascending
  int cores = 0;          ///< physical cores among them
};

/// The core types of this machine, fastest first (one entry on a uniform machine).
struct CpuTopology {
  std::vector<CoreType> types;
  std::string source;  ///< where they were read, e.g. "/sys/devices/cpu_core/cpus and .../cpu_atom/cpus"
  bool hybrid() const { return types.size() > 1; }
};

/// The sysfs root to read: NANOCHAT_SYSFS_ROOT when set (a fake tree, for tests and for
/// simulating a hybrid machine; see docs/architecture.md 6), else "/sys".
std::string sysfs_root();

/// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

/// Parses a kernel CPU list ("0-3,8,10-11\n"); throws nanochat::Error naming `what` on anything
/// else (an empty list is an error too).
std::vector<int> parse_cpu_list(const std::string& text, const std::string& what);

/// Writes CPUs as a kernel CPU list: {0,1,2,3,8} -> "0-3,8".
std::string cpu_list_str(const std::vector<int>& cpus);

/// Reads the core types under `root` (the folder that holds devices/), restricted to `allowed`.
/// Never throws: what it cannot read, it skips (see the header comment).
CpuTopology detect_core_types(const std::string& root, const std::vector<int>& allowed);

/// "8 performance (CPUs 0-15, 8 cores), 16 efficiency (CPUs 16-31, 16 cores), from ...".
std::string describe_topology(const CpuTopology& t);

/// `nanochat run --hybrid`: auto (one rank per core type where the rules below allow it) or off.
enum class HybridMode { Auto, Off };

/// Parses "auto" / "off"; throws nanochat::Error naming --hybrid otherwise.
HybridMode parse_hybrid_mode(const std::string& s);

/// One rank's place on this node.
struct RankPlace {
  std::vector<int> cpus;  ///< its affinity mask (sched_setaffinity before exec)
  int threads = 1;        ///< its OMP_NUM_THREADS
  std::string type;       ///< the core type's name
};

/// Where this node's ranks run. `ranks` empty: not pinned (every rank may use every allowed CPU
/// and gets the launcher's usual thread count).
struct Placement {
  int nproc = 1;                 ///< ranks on this node
  std::vector<RankPlace> ranks;  ///< one per local rank when pinned
  std::string summary;           ///< one line for the launcher's start-up and doctor
};

/// What the launcher was asked for.
struct PlacementRequest {
  int nnodes = 1;
  int nproc_per_node = 1;
  bool nproc_given = false;  ///< --nproc-per-node was on the command line
  int threads_per_rank = 0;  ///< --threads-per-rank (0 = not given)
  HybridMode mode = HybridMode::Auto;
};

/// The rules: with mode Off, or one core type, nothing is pinned (nproc = the request's). On a
/// hybrid machine in Auto mode the ranks are one per core type, pinned, each with threads = its
/// type's physical cores (or --threads-per-rank), when --nproc-per-node equals the number of
/// types or is not given on a one-node job (it becomes that number). A multi-node job without it
/// is not pinned (every node must start the same number of ranks): the summary says to pass
/// --nproc-per-node <types> on every node. Any other --nproc-per-node is not pinned either.
Placement plan_placement(const CpuTopology& topo, const PlacementRequest& req);

}  // namespace nanochat::cluster
