// `nanochat run`: torchrun-style launcher (docs/architecture.md 1). Also registers the hidden
// `nanochat dist-selftest` that tests/launch/ and tests/cluster/ run under it.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "nanochat/cli/commands.h"
#include "nanochat/cli/road_job.h"
#include "nanochat/cluster/env.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/cluster/mesh.h"
#include "nanochat/cluster/startup.h"
#include "nanochat/core/error.h"
#include "nanochat/core/threads.h"
#include "nanochat/launch/launcher.h"
#include "nanochat/launch/placement.h"
#include "nanochat/launch/selftest.h"

namespace nanochat::cli {

namespace {

struct RunArgs {
  cluster::LaunchOptions launch;
  double rendezvous_timeout_s = 0;
  double grace_s = 10;
  double heartbeat_timeout_s = -1;  // -1: NANOCHAT_HEARTBEAT_TIMEOUT, else 10
  double min_nodes_timeout_s = -1;  // -1: NANOCHAT_ELASTIC_WAIT_TIMEOUT, else 600
  std::string nnodes = "1";         // N, or MIN:MAX (elastic)
  std::string port_range;
  bool standalone = false;
  std::string hybrid = "auto";
};

struct SelftestArgs {
  cluster::SelftestOptions st;
  std::vector<std::string> facts;
  std::vector<std::string> facts_on_rank;
  std::string iface;
};

std::pair<std::string, std::string> split_fact(const std::string& s, const char* flag) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0) fail(flag, " expects KEY=VALUE, got '", s, "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

// One rank per core type on a hybrid CPU (launch/placement.h): sets L.placement and, when the
// ranks are pinned, L.nproc_per_node.
void place_ranks(cluster::LaunchOptions& L, const RunArgs& a, bool nproc_given) {
  cluster::PlacementRequest req;
  req.nnodes = L.nnodes;
  req.nproc_per_node = L.nproc_per_node;
  req.nproc_given = nproc_given;
  req.threads_per_rank = L.threads_per_rank;
  req.mode = cluster::parse_hybrid_mode(a.hybrid);
  const cluster::CpuTopology topo = cluster::detect_core_types(cluster::sysfs_root(), cluster::allowed_cpus());
  if (!topo.hybrid()) return;
  L.placement = cluster::plan_placement(topo, req);
  L.nproc_per_node = L.placement.nproc;
  L.placement.summary = "cores: " + cluster::describe_topology(topo) + "; placement: " + L.placement.summary;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (!L.placement.ranks.empty() && L.threads_per_rank == 0 && omp && *omp)
    L.placement.summary += str_cat(" (OMP_NUM_THREADS=", omp,
                                   " from the environment is not used: each rank gets its cores; --threads-per-rank "
                                   "sets every rank's count)");
}

// The flags `run` was given, as words (the road job's stages are launched with them on node 0).
std::vector<std::string> given_run_flags(const CLI::App* sub) {
  std::vector<std::string> words;
  for (const CLI::Option* opt : sub->get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty() || opt->get_lnames()[0] == "help") continue;
    const std::string name = "--" + opt->get_lnames()[0];
    if (opt->get_expected_min() == 0) {  // a flag
      words.push_back(name);
      continue;
    }
    for (const std::string& v : opt->results()) {
      words.push_back(name);
      words.push_back(v);
    }
  }
  return words;
}

void register_selftest(CLI::App& app) {
  auto args = std::make_shared<SelftestArgs>();
  auto* sub = app.add_subcommand("dist-selftest", "check every collective against closed-form sums (tests)");
  sub->group("");  // hidden: a test hook, not a user command
  sub->add_option("--iterations", args->st.iterations, "rounds of checks")->capture_default_str();
  sub->add_option("--size", args->st.size, "base element count of the buffers")->capture_default_str();
  sub->add_option("--die-rank", args->st.die_rank, "this rank SIGKILLs itself (failure tests)");
  sub->add_option("--die-at", args->st.die_at, "... at the start of this iteration");
  sub->add_option("--fail-rank", args->st.fail_rank, "this rank fails with an error of its own (failure tests)");
  sub->add_option("--fail-at", args->st.fail_at, "... at the start of this iteration");
  sub->add_option("--fail-after-key", args->st.fail_after_key, "... once this key of the job's store is set");
  sub->add_option("--fact", args->facts, "KEY=VALUE agreed between ranks before the checks");
  sub->add_option("--fact-on-rank", args->facts_on_rank, "R:KEY=VALUE overriding a fact on rank R");
  sub->add_option("--iface", args->iface, "network interface for Gloo");
  sub->callback([args] {
    for (const auto& f : args->facts) args->st.facts.insert(split_fact(f, "--fact"));
    for (const auto& f : args->facts_on_rank) {
      auto colon = f.find(':');
      if (colon == std::string::npos) fail("--fact-on-rank expects R:KEY=VALUE, got '", f, "'");
      args->st.facts_on_rank[std::stoi(f.substr(0, colon))].insert(split_fact(f.substr(colon + 1), "--fact-on-rank"));
    }
    cluster::DistOptions opts;
    if (!args->iface.empty()) opts.iface = args->iface;
    auto comm = cluster::make_communicator_from_env(opts);
#ifdef NANOCHAT_HAVE_GLOO
    if (auto* g = dynamic_cast<cluster::GlooCommunicator*>(comm.get())) {
      const auto& d = g->device();
      std::cout << "dist-selftest: rank " << g->rank() << " of " << g->world_size() << ": Gloo bound " << d.address
                << (d.iface.empty() ? "" : " on " + d.iface) << " (" << d.reason << ")" << std::endl;
    }
#endif
    // Where the launcher put this rank (launch/placement.h), for the placement tests.
    std::cout << "dist-selftest: rank " << comm->rank() << " of " << comm->world_size() << " runs on CPUs "
              << cpu_affinity_list() << " with " << num_threads() << " OpenMP threads" << std::endl;
    cluster::startup_barrier(*comm, "selftest");
    cluster::run_selftest(*comm, args->st, std::cout);
  });
}

// --nnodes: "N" (a fixed-size job) or torchrun's elastic "MIN:MAX" (1 <= MIN <= MAX). The job
// starts with MAX nodes; the ranks go on while MIN remain, and nodes may join (train/elastic.h).
void parse_nnodes(const std::string& v, cluster::LaunchOptions& L) {
  auto number = [&](const std::string& s) {
    char* end = nullptr;
    const long n = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || n < 1 || n > 65536)
      fail("--nnodes ", v, ": expected a number of nodes N, or MIN:MAX with 1 <= MIN <= MAX (e.g. 1:2)");
    return static_cast<int>(n);
  };
  const size_t colon = v.find(':');
  if (colon == std::string::npos) {
    L.nnodes = number(v);
    return;
  }
  L.min_nnodes = number(v.substr(0, colon));
  L.nnodes = number(v.substr(colon + 1));
  if (L.min_nnodes > L.nnodes)
    fail("--nnodes ", v, ": MIN (", L.min_nnodes, ") is larger than MAX (", L.nnodes,
         "); use MIN:MAX, e.g. 1:", L.nnodes);
}

}  // namespace

void register_run(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto& L = args->launch;
  auto* sub =
      app.add_subcommand("run",
                         "start the ranks of a data-parallel job on this node (torchrun's flags and environment); "
                         "usage: nanochat run [flags] <subcommand> [its flags]");
  sub->prefix_command();  // everything from the first positional on is the ranks' command line
  // torchrun's underscore spellings are accepted too (--nproc_per_node, --master_addr, ...).
  sub->add_option("--nnodes", args->nnodes,
                  "number of nodes (machines) in the job; MIN:MAX (torchrun's elastic form) starts with MAX nodes "
                  "and goes on while at least MIN remain: a node that dies or freezes leaves and the others regroup "
                  "and continue the run; a node whose command runs again (or that wakes) joins at the next step")
      ->capture_default_str();
  sub->add_option("--nproc-per-node,--nproc_per_node", L.nproc_per_node, "ranks to start on this node")
      ->capture_default_str();
  sub->add_option("--node-rank,--node_rank", L.node_rank, "index of this node in [0, nnodes); node 0 hosts the store")
      ->capture_default_str();
  sub->add_option("--master-addr,--master_addr", L.master_addr,
                  "address of node 0, reachable from every node (default 127.0.0.1 with one node)");
  sub->add_flag("--allow-loopback-master", L.allow_loopback_master,
                "accept a loopback --master-addr with --nnodes > 1: every node runs on this machine (tests; also "
                "NANOCHAT_ALLOW_LOOPBACK_MASTER=1)");
  sub->add_option("--master-port,--master_port", L.master_port, "TCP port of the job's store on node 0")
      ->capture_default_str();
  sub->add_option("--iface", L.iface, "network interface for Gloo (default: the one that routes to --master-addr)");
  sub->add_option("--threads-per-rank", L.threads_per_rank,
                  "OpenMP threads per rank (default: OMP_NUM_THREADS, else physical cores / nproc-per-node)");
  sub->add_option("--job-token", L.job_token,
                  "shared token that every node must present to the store (default NANOCHAT_JOB_TOKEN)");
  sub->add_option("--rendezvous-timeout", args->rendezvous_timeout_s,
                  "seconds to wait for all nodes (default NANOCHAT_RENDEZVOUS_TIMEOUT, else 300)");
  sub->add_option("--port-range", args->port_range,
                  "A-B: the ports the ranks' Gloo connections listen on (local rank i uses A+i; default "
                  "NANOCHAT_PORT_RANGE, else ephemeral ports); open them in every node's firewall");
  sub->add_option("--heartbeat-timeout", args->heartbeat_timeout_s,
                  "seconds without a heartbeat after which a rank counts as gone (frozen: a machine asleep, a process "
                  "stopped; or cut off), ending the wait for it (default NANOCHAT_HEARTBEAT_TIMEOUT, else 10; 0 = "
                  "no heartbeat, a frozen rank is then found at the collective timeout)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--min-nodes-timeout", args->min_nodes_timeout_s,
                  "elastic job (--nnodes MIN:MAX) left with fewer than MIN nodes: seconds it waits for nodes to join "
                  "before node 0 stops it with its checkpoint (default NANOCHAT_ELASTIC_WAIT_TIMEOUT, else 600)")
      ->check(CLI::PositiveNumber);
  sub->add_flag("--standalone", args->standalone, "torchrun's one-node job (the default here; refuses --nnodes > 1)");
  sub->add_option("--hybrid", args->hybrid,
                  "auto: on a CPU with several core types (performance + efficiency), one rank per type, pinned "
                  "to its cores, when --nproc-per-node is not given (one node) or equals the number of types; off: "
                  "never pin")
      ->capture_default_str();
  sub->add_option("--grace", args->grace_s, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str();
  sub->add_option("--publish", L.publish, "node 0: a text the launcher publishes for the nodes that follow it")
      ->group("");  // hidden: speedrun's stages (cli/road_job.h)
  sub->callback([args, sub] {
    auto& L = args->launch;
    L.args = sub->remaining();  // the ranks' command line (prefix_command keeps it verbatim)
    if (!L.args.empty() && L.args.front() == "--") L.args.erase(L.args.begin());
    parse_nnodes(args->nnodes, L);
    const bool road = !L.args.empty() && L.args.front() == "speedrun";  // the whole road as a job (cli/road_job.h)
    // base-train, chat-sft and chat-rl regroup when a node leaves or joins (train/elastic.h)
    if (L.min_nnodes > 0 && !road && !L.args.empty() && L.args.front() != "base-train" &&
        L.args.front() != "chat-sft" && L.args.front() != "chat-rl" && L.args.front() != "road-probe")
      fail("--nnodes ", args->nnodes,
           " (an elastic job: nodes may leave and join) is for base-train, chat-sft, chat-rl and speedrun; ",
           L.args.front(), " runs on a fixed set of nodes: pass --nnodes ", L.nnodes,
           " (if a node leaves, the job stops and names node 0's last checkpoint to resume from; --save-every N "
           "bounds what is lost)");
    if (args->standalone && L.nnodes != 1)
      fail("--standalone is a one-node job; drop it, or --nnodes ", L.nnodes, ", and pass --master-addr");
    if (args->rendezvous_timeout_s > 0) {
      L.rendezvous_timeout = cluster::Ms(static_cast<long>(args->rendezvous_timeout_s * 1000));
    } else {
      cluster::DistOptions d;
      L.rendezvous_timeout = *d.resolved().rendezvous_timeout;
    }
    L.grace = cluster::Ms(static_cast<long>(args->grace_s * 1000));
    if (args->min_nodes_timeout_s > 0)  // the ranks inherit it (cluster/regroup.h)
      ::setenv("NANOCHAT_ELASTIC_WAIT_TIMEOUT", std::to_string(args->min_nodes_timeout_s).c_str(), 1);
    if (args->heartbeat_timeout_s >= 0)  // the ranks inherit it (cluster/heartbeat.h)
      ::setenv("NANOCHAT_HEARTBEAT_TIMEOUT", std::to_string(args->heartbeat_timeout_s).c_str(), 1);
    if (!args->port_range.empty()) {
      const auto pr = cluster::parse_port_range(args->port_range, "--port-range");
      ::setenv("NANOCHAT_PORT_RANGE", pr.str().c_str(), 1);  // the ranks inherit it
    }
    place_ranks(L, *args, sub->get_option("--nproc-per-node")->count() > 0);
    if (auto pr = cluster::port_range_from_env()) {
      const std::string what =
          args->port_range.empty() ? "NANOCHAT_PORT_RANGE=" + pr->str() : "--port-range " + pr->str();
      cluster::check_port_range_size(*pr, L.nproc_per_node, what);
      if (L.node_rank == 0 && L.master_port >= pr->first && L.master_port <= pr->last)
        fail(what, " contains --master-port ", L.master_port,
             ", which node 0 needs for the job's store; pick a range without it (e.g. ", L.master_port + 100, "-",
             L.master_port + 100 + std::max(pr->size(), L.nproc_per_node) - 1, ")");
    }
    if (road && L.node_rank == 0) {
      // what the stages' launches would refuse, before the road's first stage
      if (L.nnodes > 1 && L.master_addr.empty())
        fail("--master-addr is required with --nnodes ", L.nnodes, ": give every node the address of node 0");
      const char* allow = std::getenv("NANOCHAT_ALLOW_LOOPBACK_MASTER");
      if (!L.allow_loopback_master && !(allow && std::string(allow) == "1"))
        if (const std::string why = cluster::loopback_master_problem(L.master_addr, L.nnodes); !why.empty()) fail(why);
      lead_road_job(given_run_flags(sub), L.args);
    }
    // a follower waits for node 0's stages as long as a road's stage may take: --rendezvous-timeout
    // when given, else 12 hours (base-eval or tok-train of a large road run on node 0 meanwhile)
    int rc = road ? follow_road_job(
                        L, args->rendezvous_timeout_s > 0 ? L.rendezvous_timeout : cluster::Ms(12L * 3600 * 1000))
                  : cluster::launch(L);
    if (rc != 0) {
      std::fflush(stdout);
      std::fflush(stderr);
      std::exit(rc);
    }
  });
  register_selftest(app);
}

}  // namespace nanochat::cli
