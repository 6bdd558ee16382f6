#pragma once
// Process placement and distributed options, read from torchrun's environment variables
// (docs/architecture.md 1, 3.7): RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// plus nanochat's NANOCHAT_STORE_HOSTED, NANOCHAT_SOCKET_IFNAME (or GLOO_SOCKET_IFNAME),
// NANOCHAT_JOB_TOKEN, NANOCHAT_COLLECTIVE_TIMEOUT and NANOCHAT_RENDEZVOUS_TIMEOUT (seconds).
// Without torchrun's variables, ranks started directly by Slurm's srun (SLURM_PROCID, ...) or
// Open MPI's mpirun (OMPI_COMM_WORLD_RANK, ...) find their place from those launchers' variables.
#include <chrono>
#include <optional>
#include <string>

#include "nanochat/cluster/net.h"

namespace nanochat::cluster {

/// Where this process sits in the job. Defaults describe a single process (world size 1).
struct DistEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr;    ///< host of the store (MASTER_ADDR)
  int master_port = 0;        ///< port of the store (MASTER_PORT)
  bool store_hosted = false;  ///< NANOCHAT_STORE_HOSTED=1: a launcher hosts the store, rank 0 must not

  /// Reads the variables. When WORLD_SIZE is unset, srun's variables are used when SLURM_LOCALID
  /// is set (rank SLURM_PROCID, world SLURM_STEP_NUM_TASKS or SLURM_NTASKS, master MASTER_ADDR or
  /// the first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST), else Open MPI's
  /// (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE, master MASTER_ADDR); MASTER_PORT defaults
  /// to 29500 for both. None of them set means a single process. Rank 0 hosts the store then.
  /// Throws nanochat::Error naming the variable when one is malformed or inconsistent (e.g.
  /// RANK >= WORLD_SIZE, no MASTER_ADDR).
  static DistEnv from_env();
};

/// The first host of a Slurm host list: "node[01-04,07],gpu5" -> "node01", "rack[2-3]-n[8-9]" ->
/// "rack2-n8", "a,b" -> "a". Throws nanochat::Error on an unbalanced bracket or an empty list.
std::string first_host_of_nodelist(const std::string& nodelist);

/// Knobs of the Gloo communicator. Unset fields come from the environment, then the defaults.
struct DistOptions {
  std::optional<std::string> iface;      ///< --iface; else NANOCHAT_SOCKET_IFNAME, GLOO_SOCKET_IFNAME
  std::optional<Ms> collective_timeout;  ///< default 300 s (NANOCHAT_COLLECTIVE_TIMEOUT)
  std::optional<Ms> rendezvous_timeout;  ///< default 300 s (NANOCHAT_RENDEZVOUS_TIMEOUT)
  std::optional<std::string> job_token;  ///< default NANOCHAT_JOB_TOKEN, else ""
  int generation = 0;                    ///< rendezvous generation (a rebuilt job uses +1)

  /// Copy with every unset field filled from the environment or the default. Throws on a
  /// malformed timeout variable.
  DistOptions resolved() const;
};

/// The interface and address the Gloo device binds (docs/architecture.md 3.7).
struct DeviceChoice {
  std::string iface;    ///< interface name ("" if the address belongs to none we can list)
  std::string address;  ///< numeric address published to the peers
  std::string reason;   ///< how it was chosen, for logs and `nanochat doctor`
};

/// Chooses the device address: the named interface (`iface`, if non-empty; its first IPv4
/// address, else IPv6), otherwise the address of the interface that routes to master_addr.
/// Never the hostname's loopback address unless the master itself is loopback. Throws
/// nanochat::Error naming the interface (and listing the available ones) or the master.
DeviceChoice choose_device(const std::string& master_addr, int master_port, const std::string& iface);

/// Reads an integer environment variable; nullopt when unset. Throws naming the variable when
/// it is not an integer.
std::optional<long> env_int(const char* name);

/// Reads a duration in seconds (a positive decimal, e.g. "2.5") from environment variable `name`;
/// `def` when unset. Throws naming the variable when it is not a positive number.
Ms env_seconds(const char* name, Ms def);

/// How often a distributed wait (launchers meeting, the start-up barrier) prints what it waits
/// for: NANOCHAT_WAIT_REPORT_INTERVAL seconds, default 10.
Ms wait_report_interval();

}  // namespace nanochat::cluster
