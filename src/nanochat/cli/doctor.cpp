// `nanochat doctor`: preflight for a distributed job (docs/architecture.md 1). Resolves and probes the
// master host:port, shows the interface and address Gloo would bind, whether the store port is
// free (on node 0) or answering, and the versions; with --nnodes > 1 a loopback master is a
// problem. Exits non-zero when a check fails.
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "nanochat/cli/commands.h"
#include "nanochat/cluster/env.h"
#include "nanochat/cluster/net.h"
#include "nanochat/cluster/store.h"
#include "nanochat/core/error.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/version.h"
#include "nanochat/launch/launcher.h"
#include "nanochat/launch/placement.h"

#ifdef NANOCHAT_HAVE_GLOO
#include <gloo/config.h>
#endif

namespace nanochat::cli {

namespace {

struct DoctorArgs {
  std::string master_addr;
  int master_port = 0;
  std::string iface;
  int nproc_per_node = 1;
  bool nproc_given = false;
  int nnodes = 1;
  std::string nnodes_text = "1";  // N, or an elastic job's MIN:MAX (its MAX counts here)
  std::string hybrid = "auto";
  bool allow_loopback_master = false;  // as nanochat run's flag (or NANOCHAT_ALLOW_LOOPBACK_MASTER=1)
};

void line(const char* status, const std::string& what) { std::printf("[%s] %s\n", status, what.c_str()); }

// The core types found and where `nanochat run` would put its ranks (launch/placement.h).
void report_placement(const DoctorArgs& a) {
  using namespace cluster;
  const CpuTopology topo = detect_core_types(sysfs_root(), allowed_cpus());
  line("info", "cores: " + describe_topology(topo));
  PlacementRequest req;
  req.nnodes = a.nnodes;
  req.nproc_per_node = a.nproc_per_node;
  req.nproc_given = a.nproc_given;
  req.mode = parse_hybrid_mode(a.hybrid);
  const Placement p = plan_placement(topo, req);
  line("info", str_cat("placement of `nanochat run` (--nnodes ", a.nnodes,
                       a.nproc_given ? str_cat(", --nproc-per-node ", a.nproc_per_node) : std::string(), ", --hybrid ",
                       a.hybrid, "): ", p.nproc, " rank(s) on this node, ", p.summary));
}

// This build, Gloo, the host's cores and the placement `nanochat run` would choose; returns the
// number of problems (a build without Gloo).
int report_build_and_host(const DoctorArgs& a) {
  using namespace cluster;
  int problems = 0;
  line("info", str_cat("nanochat.cpp ", build_id()));
#ifdef NANOCHAT_HAVE_GLOO
  line("info",
       str_cat("Gloo ", GLOO_VERSION_MAJOR, ".", GLOO_VERSION_MINOR, ".", GLOO_VERSION_PATCH, " (TCP transport)"));
#else
  line("FAIL", "built without Gloo: only single-process training works (install libgloo-dev and rebuild)");
  ++problems;
#endif
  line("info",
       str_cat(
           "host ", host_name(), ", ", physical_cores(), " physical cores available (CPUs ", cpu_affinity_list(), ")",
           a.nproc_given ? str_cat("; with --nproc-per-node ", a.nproc_per_node,
                                   " each rank gets OMP_NUM_THREADS=", std::max(1, physical_cores() / a.nproc_per_node))
                         : std::string()));
  if (const char* root = std::getenv("NANOCHAT_SYSFS_ROOT"); root && *root && !std::filesystem::is_directory(root))
    line("warn", str_cat("NANOCHAT_SYSFS_ROOT=", root,
                         " is not a folder: the core types below come from nothing "
                         "(unset it to read /sys, or point it at a folder laid out like /sys)"));
  report_placement(a);
  return problems;
}

// A multi-node job needs a master the other hosts can reach: a named one, not a loopback
// address (unless every node runs here). Returns the number of problems.
int check_master_address(const DoctorArgs& a, const std::string& master) {
  using namespace cluster;
  if (a.nnodes > 1 && a.master_addr.empty() && !std::getenv("MASTER_ADDR")) {
    line("FAIL", str_cat("--nnodes ", a.nnodes,
                         " needs --master-addr (or MASTER_ADDR): node 0's address on a network "
                         "every node shares"));
    return 1;
  }
  if (const std::string why = loopback_master_problem(master, a.nnodes); !why.empty()) {
    const char* allow = std::getenv("NANOCHAT_ALLOW_LOOPBACK_MASTER");
    if (a.allow_loopback_master || (allow && std::string(allow) == "1")) {
      line("warn", str_cat("master ", master, " is a loopback address here: with --nnodes ", a.nnodes,
                           " every node must run on this machine (--allow-loopback-master)"));
    } else {
      line("FAIL", why);
      return 1;
    }
  }
  return 0;
}

// The store port: free (so node 0 can host) or answering (a job is up), and whether what answers
// is a nanochat store that accepts this job's token. Only warnings.
void check_store_port(const std::string& master, int port, bool master_local) {
  using namespace cluster;
  if (master_local) {
    if (tcp_port_free(port))
      line("ok", str_cat("port ", port, " is free here: node 0 can host the store on it"));
    else
      line("warn", str_cat("port ", port,
                           " is in use on this host: fine if this job's node 0 is already running, "
                           "otherwise pick --master-port"));
  }
  std::string err;
  Fd fd = tcp_connect_once(master, port, Ms(3000), &err);
  if (fd) {
    fd.reset();
    try {
      StoreClientOptions co;
      co.host = master;
      co.port = port;
      co.job_token = job_token_from_env();
      co.connect_timeout = Ms(0);
      co.identity = "nanochat doctor on " + host_name();
      StoreClient probe(co);
      line("ok", str_cat("a nanochat store answers at ", host_port(master, port), " and accepts this job token"));
    } catch (const Error& e) {
      line("warn", str_cat("something listens at ", host_port(master, port), " but: ", e.what()));
    }
  } else if (master_local) {
    line("info", str_cat("nothing listens at ", host_port(master, port), " yet (", err, ")"));
  } else {
    line("warn", str_cat("cannot connect to ", host_port(master, port), ": ", err,
                         " (normal before node 0 starts; otherwise check the address and firewalls)"));
  }
}

int doctor(const DoctorArgs& a) {
  using namespace cluster;
  std::string master = a.master_addr;
  if (master.empty()) master = std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "127.0.0.1";
  int port = a.master_port;
  if (port == 0) port = static_cast<int>(env_int("MASTER_PORT").value_or(29500));

  std::printf("nanochat doctor\n");
  int problems = report_build_and_host(a);
  problems += check_master_address(a, master);

  // Master resolution and route.
  bool master_local = false;
  try {
    std::string via = route_address_to(master, port);
    master_local = resolves_to_loopback(master) || via == master;
    line("ok", str_cat("master ", host_port(master, port), " resolves; this host reaches it from ", via,
                       master_local ? " (the master is this host)" : ""));
  } catch (const Error& e) {
    line("FAIL", e.what());
    ++problems;
  }

  // The device Gloo would bind.
  std::string iface = a.iface;
  if (iface.empty()) iface = DistOptions{}.resolved().iface.value_or("");
  try {
    DeviceChoice d = choose_device(master, port, iface);
    line("ok", str_cat("Gloo would bind ", d.address, d.iface.empty() ? "" : " on " + d.iface, " (", d.reason, ")"));
    if (resolves_to_loopback(d.address) && !resolves_to_loopback(master)) {
      line("FAIL", "that is a loopback address but the master is not: other hosts cannot reach it; pick --iface");
      ++problems;
    }
  } catch (const Error& e) {
    line("FAIL", e.what());
    ++problems;
  }

  check_store_port(master, port, master_local);
  std::string ifs;
  for (const auto& i : list_interfaces())
    if (i.family == AF_INET || !i.loopback) ifs += str_cat(ifs.empty() ? "" : ", ", i.name, "=", i.address);
  line("info", "interfaces: " + ifs);
  std::printf("%s\n",
              problems == 0 ? "doctor: no problems found" : str_cat("doctor: ", problems, " problem(s)").c_str());
  return problems == 0 ? 0 : 1;
}

}  // namespace

void register_doctor(CLI::App& app) {
  auto args = std::make_shared<DoctorArgs>();
  auto* sub = app.add_subcommand("doctor", "preflight for distributed runs: master reachability, interface, versions");
  sub->add_option("--master-addr", args->master_addr, "address of node 0 (default MASTER_ADDR, else 127.0.0.1)");
  sub->add_option("--master-port", args->master_port, "store port (default MASTER_PORT, else 29500)");
  sub->add_option("--iface", args->iface, "network interface to check (default NANOCHAT_SOCKET_IFNAME / route)");
  sub->add_option(
         "--nproc-per-node", args->nproc_per_node,
         "ranks per node, for the thread split (left out: 1, or one per core type on a hybrid CPU, as `run` does)")
      ->capture_default_str();
  sub->add_option("--nnodes", args->nnodes_text,
                  "nodes of the job, N or MIN:MAX (as given to `nanochat run`): with more than one, the master must "
                  "not be loopback")
      ->capture_default_str();
  sub->add_flag("--allow-loopback-master", args->allow_loopback_master,
                "accept a loopback master with --nnodes > 1, as `nanochat run` does (every node on this machine)");
  sub->add_option("--hybrid", args->hybrid,
                  "placement to show: auto (one rank per core type) or off, as `nanochat run`")
      ->capture_default_str();
  sub->callback([args, sub] {
    args->nproc_given = sub->get_option("--nproc-per-node")->count() > 0;
    {  // N, or MIN:MAX like `nanochat run` (an elastic job may have MAX nodes)
      const std::string& v = args->nnodes_text;
      const std::string max = v.substr(v.find(':') == std::string::npos ? 0 : v.find(':') + 1);
      char* end = nullptr;
      const long n = std::strtol(max.c_str(), &end, 10);
      if (max.empty() || *end != '\0' || n < 1 || n > 65536)
        fail("--nnodes ", v, ": expected a number of nodes N, or MIN:MAX (e.g. 1:2)");
      args->nnodes = static_cast<int>(n);
    }
    int rc = doctor(*args);
    std::fflush(stdout);
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace nanochat::cli
