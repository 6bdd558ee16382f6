#include "nanochat/cluster/env.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "nanochat/core/error.h"

namespace nanochat::cluster {

std::optional<long> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0') fail("environment variable ", name, "='", v, "' is not an integer");
  return x;
}

Ms env_seconds(const char* name, Ms def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  double s = std::strtod(v, &end);
  if (*end != '\0' || !(s > 0)) fail("environment variable ", name, "='", v, "' must be a positive number of seconds");
  return Ms(static_cast<long>(s * 1000.0));
}

Ms wait_report_interval() { return env_seconds("NANOCHAT_WAIT_REPORT_INTERVAL", Ms(10000)); }

namespace {
std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Ranks on node `node` from a Slurm tasks-per-node list ("2(x3),1": nodes 0-2 run 2, node 3 runs 1).
std::optional<int> tasks_on_node(const std::string& list, long node) {
  std::istringstream is(list);
  std::string item;
  long first = 0;
  while (std::getline(is, item, ',')) {
    int n = 0, times = 1;
    if (std::sscanf(item.c_str(), "%d(x%d)", &n, &times) < 1 || n < 1 || times < 1) return std::nullopt;
    if (node < first + times) return n;
    first += times;
  }
  return std::nullopt;
}

// Placement from srun's variables; false when they are absent. SLURM_LOCALID is set by srun for
// each task but not in a batch script (which has SLURM_PROCID=0 and SLURM_NTASKS): a process
// started by the script itself is a single process, not rank 0 of a job.
bool from_slurm(DistEnv& e) {
  auto procid = env_int("SLURM_PROCID");
  const char* ws_name = std::getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  auto ws = env_int(ws_name);
  if (!procid || !ws || !env_int("SLURM_LOCALID")) return false;
  if (*ws < 1) fail(ws_name, "=", *ws, " must be at least 1");
  e.world_size = static_cast<int>(*ws);
  e.rank = static_cast<int>(*procid);
  if (e.rank < 0 || e.rank >= e.world_size)
    fail("SLURM_PROCID=", e.rank, " is outside [0, ", ws_name, "=", e.world_size, ")");
  e.local_rank = static_cast<int>(*env_int("SLURM_LOCALID"));
  std::string per_node = env_str("SLURM_STEP_TASKS_PER_NODE");
  if (per_node.empty()) per_node = env_str("SLURM_TASKS_PER_NODE");
  e.local_world_size = tasks_on_node(per_node, env_int("SLURM_NODEID").value_or(0)).value_or(e.world_size);
  e.local_world_size = std::max(e.local_world_size, e.local_rank + 1);
  e.master_addr = env_str("MASTER_ADDR");
  if (e.master_addr.empty() && e.world_size > 1) {
    const char* list_name = nullptr;
    for (const char* n : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
      if (!env_str(n).empty()) {
        list_name = n;
        break;
      }
    if (!list_name)
      fail("started by Slurm (", ws_name, "=", e.world_size,
           ") but neither MASTER_ADDR nor SLURM_STEP_NODELIST / "
           "SLURM_JOB_NODELIST is set; export MASTER_ADDR=<host of rank 0>");
    try {
      e.master_addr = first_host_of_nodelist(env_str(list_name));
    } catch (const Error& err) {
      fail(list_name, ": ", err.what(), "; export MASTER_ADDR=<host of rank 0> instead");
    }
  }
  return true;
}

// Placement from Open MPI's variables; false when they are absent.
bool from_open_mpi(DistEnv& e) {
  auto rank = env_int("OMPI_COMM_WORLD_RANK"), ws = env_int("OMPI_COMM_WORLD_SIZE");
  if (!rank || !ws) return false;
  if (*ws < 1) fail("OMPI_COMM_WORLD_SIZE=", *ws, " must be at least 1");
  e.world_size = static_cast<int>(*ws);
  e.rank = static_cast<int>(*rank);
  if (e.rank < 0 || e.rank >= e.world_size)
    fail("OMPI_COMM_WORLD_RANK=", e.rank, " is outside [0, OMPI_COMM_WORLD_SIZE=", e.world_size, ")");
  e.local_rank = static_cast<int>(env_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0));
  e.local_world_size = static_cast<int>(env_int("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(e.world_size));
  e.local_world_size = std::max(e.local_world_size, e.local_rank + 1);
  e.master_addr = env_str("MASTER_ADDR");
  if (e.master_addr.empty() && e.world_size > 1)
    fail("started by Open MPI (OMPI_COMM_WORLD_SIZE=", e.world_size,
         ") but MASTER_ADDR is not set: mpirun does not "
         "say which host runs rank 0. Pass it to every rank, e.g. `mpirun -x MASTER_ADDR=<host of rank 0> -x "
         "MASTER_PORT=29500 ...`");
  return true;
}

// Placement from srun's or mpirun's variables (torchrun's are absent).
DistEnv from_cluster_env() {
  DistEnv e;
  if (!from_slurm(e) && !from_open_mpi(e)) return DistEnv{};
  auto port = env_int("MASTER_PORT");
  if (port && (*port < 1 || *port > 65535)) fail("MASTER_PORT=", *port, " is not a TCP port (1-65535)");
  e.master_port = static_cast<int>(port.value_or(29500));
  e.store_hosted = false;  // no launcher of ours: rank 0 hosts the store
  return e;
}
}  // namespace

std::string first_host_of_nodelist(const std::string& nodelist) {
  std::string out;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] != '[') {
      out += nodelist[i++];
      continue;
    }
    size_t close = nodelist.find(']', i);
    if (close == std::string::npos) fail("host list '", nodelist, "' has an unbalanced '['");
    std::string inner = nodelist.substr(i + 1, close - i - 1);
    size_t cut = inner.find_first_of(",-");
    out += inner.substr(0, cut);
    i = close + 1;
  }
  if (out.empty()) fail("host list '", nodelist, "' names no host");
  return out;
}

DistEnv DistEnv::from_env() {
  DistEnv e;
  auto ws = env_int("WORLD_SIZE");
  if (!ws) return from_cluster_env();
  if (*ws < 1) fail("WORLD_SIZE=", *ws, " must be at least 1");
  e.world_size = static_cast<int>(*ws);
  auto rank = env_int("RANK");
  if (!rank && e.world_size > 1)
    fail("WORLD_SIZE=", e.world_size, " is set but RANK is not; set RANK in [0, ", e.world_size, ")");
  e.rank = static_cast<int>(rank.value_or(0));
  if (e.rank < 0 || e.rank >= e.world_size)
    fail("RANK=", e.rank, " is outside [0, WORLD_SIZE=", e.world_size,
         "); every rank needs a distinct RANK below WORLD_SIZE");
  e.local_rank = static_cast<int>(env_int("LOCAL_RANK").value_or(e.rank));
  e.local_world_size = static_cast<int>(env_int("LOCAL_WORLD_SIZE").value_or(e.world_size));
  if (e.local_world_size < 1 || e.local_rank < 0 || e.local_rank >= e.local_world_size)
    fail("LOCAL_RANK=", e.local_rank, " is outside [0, LOCAL_WORLD_SIZE=", e.local_world_size, ")");
  e.master_addr = env_str("MASTER_ADDR");
  auto port = env_int("MASTER_PORT");
  if (e.world_size > 1) {
    if (e.master_addr.empty())
      fail("WORLD_SIZE=", e.world_size,
           " but MASTER_ADDR is not set; set it to the host of rank 0 (or of node 0's `nanochat run`)");
    if (!port) fail("WORLD_SIZE=", e.world_size, " but MASTER_PORT is not set (e.g. MASTER_PORT=29500)");
  }
  if (port && (*port < 1 || *port > 65535)) fail("MASTER_PORT=", *port, " is not a TCP port (1-65535)");
  e.master_port = static_cast<int>(port.value_or(0));
  e.store_hosted = env_str("NANOCHAT_STORE_HOSTED") == "1";
  return e;
}

DistOptions DistOptions::resolved() const {
  DistOptions o = *this;
  if (!o.iface) {
    std::string v = env_str("NANOCHAT_SOCKET_IFNAME");
    if (v.empty()) v = env_str("GLOO_SOCKET_IFNAME");
    // torch accepts a comma-separated list; one device is enough for us.
    auto comma = v.find(',');
    if (comma != std::string::npos) v = v.substr(0, comma);
    o.iface = v;
  }
  if (!o.collective_timeout) o.collective_timeout = env_seconds("NANOCHAT_COLLECTIVE_TIMEOUT", Ms(300000));
  if (!o.rendezvous_timeout) o.rendezvous_timeout = env_seconds("NANOCHAT_RENDEZVOUS_TIMEOUT", Ms(300000));
  if (!o.job_token) o.job_token = env_str("NANOCHAT_JOB_TOKEN");
  return o;
}

DeviceChoice choose_device(const std::string& master_addr, int master_port, const std::string& iface) {
  DeviceChoice d;
  if (!iface.empty()) {
    auto ifs = list_interfaces();
    std::string v4, v6, available;
    for (const auto& i : ifs) {
      if (i.name == iface) {
        if (i.family == AF_INET && v4.empty()) v4 = i.address;
        if (i.family == AF_INET6 && v6.empty()) v6 = i.address;
      }
    }
    if (v4.empty() && v6.empty()) {
      for (const auto& i : ifs) {
        if (i.family != AF_INET) continue;
        available += (available.empty() ? "" : ", ") + i.name + " (" + i.address + ")";
      }
      fail("network interface '", iface,
           "' (from --iface / NANOCHAT_SOCKET_IFNAME / GLOO_SOCKET_IFNAME) has no IP address on ", host_name(),
           "; interfaces with IPv4 addresses here: ", available.empty() ? "none" : available);
    }
    d.iface = iface;
    d.address = v4.empty() ? v6 : v4;
    d.reason = "named by --iface / NANOCHAT_SOCKET_IFNAME / GLOO_SOCKET_IFNAME";
    return d;
  }
  d.address = route_address_to(master_addr, master_port);
  d.iface = interface_of_address(d.address);
  d.reason = "the interface that routes to MASTER_ADDR " + master_addr;
  return d;
}

}  // namespace nanochat::cluster
