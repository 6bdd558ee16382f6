#pragma once
// The phases of `nanochat run` (launch/launcher.h) that launcher.cpp and launcher_rendezvous.cpp
// share, and the pure pieces its tests check. Not an API for other code: use launch().
//
// Store keys of the launchers (under "nc/launch/"): "claim/<node>", "node/<node>" (its shape, host,
// pid and start time), "go" (the wall-clock second the job started), "error", "failure/<node>"
// (failure_report() of its first failed rank), "failures" (the count of those reports: each
// report's order), "present" (an elastic job that started with fewer than N nodes: the nodes it
// started with, set before "go"), "gone/<node>" (its will: set by the store when its connection
// drops), "done/<node>" (its ranks all succeeded) and "superseded" (node 0 was launched again: the
// new launch's host, pid and start time; every launcher of the earlier one stops) and, in an
// elastic job, "nodes_at_end" (set by rank 0: the nodes whose ranks trained to the end).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nanochat/cluster/net.h"
#include "nanochat/cluster/store.h"

namespace nanochat::cluster::launcher_detail {

/// A failed rank, local or reported by another node's launcher.
struct Failure {
  std::string desc;       ///< "rank 2 (host h, pid 7) was killed by signal 9 (SIGKILL)"
  bool crash = false;     ///< killed by a signal no launcher sent: the likely root cause
  bool induced = false;   ///< stopped by its launcher after a failure elsewhere: never the lead
  std::string tail = {};  ///< the failed rank's last lines on stderr ("\n"-separated), when it exited
  /// Where its launcher's report came among the job's ("failures" in the store: 1 = the failure
  /// the launchers saw first, on whichever node); -1: unknown (not reported, or no store).
  int64_t order = -1;
};

/// How many of a rank's last stderr lines its launcher keeps for the failure report.
constexpr size_t kTailLines = 6;

/// The report a launcher stores under "failure/<node>": JSON {"desc": ..., "crash": ..., "stderr": ...,
/// "order": ...} ("stderr" and "order" when known).
std::string failure_report(const Failure& f);

/// Reads the report of node `node` (failure_report()). A missing "desc" reads as "a rank on node
/// <node> failed", a missing "crash" as false, a missing "stderr" as "", a missing "order" as -1;
/// a report that is not such JSON reads as a failure of that node that quotes the parse error.
/// Never throws.
Failure parse_failure_report(const std::string& report, int node);

/// What another node's launcher left in the store: its failure report, else its will (it vanished;
/// the description is "<will> <gone_what>", a crash), else nothing. Throws nanochat::Error when the
/// store cannot be reached.
std::optional<Failure> read_remote_failure(Store& store, int node, const std::string& gone_what);

/// Reports `f` as node `node`'s failure: takes its order (adds 1 to "failures") and stores
/// failure_report(f) under "failure/<node>". Throws nanochat::Error when the store cannot be reached
/// (f.order is then -1 unless the count was taken).
void report_failure(Store& store, int node, Failure& f);

/// The launcher's final error message: the failure the launchers saw first leads (the remote
/// one, when its order is before this node's first failure's), else the most likely root cause
/// (the first crash, else the first failure that was not a rank this launcher stopped); then
/// "; the launcher stopped the other ranks" when `stopped_others`, then " (also: a; b)" for the
/// others, then the remote failure's stderr tail (its lines were not shown on this node), each
/// line indented. `local` in the order noticed; at least one failure in all.
std::string describe_failures(const std::vector<Failure>& local, const std::optional<Failure>& remote,
                              bool stopped_others);

/// A signal arrived while the launcher waited for the other nodes.
struct Interrupted {
  int sig;
};

/// The SIGINT/SIGTERM/SIGHUP that arrived and was not taken yet (0: none).
int pending_signal();
/// Throws Interrupted when pending_signal() is set.
void throw_if_signalled();
/// "SIGTERM" (or "signal 77" for a number without a name).
std::string signal_name(int sig);

/// This node's place in the job (the checked LaunchOptions), for every phase and its messages.
struct NodeCtx {
  int N = 1, P = 1, k = 0;   ///< nodes, ranks per node, this node's rank
  std::string host, master;  ///< this host's name; node 0's address (the store's)
  int port = 0;              ///< the store's port
  Ms rdzv{0};                ///< how long launchers wait for each other
  std::string token;         ///< the job token
  bool elastic = false;      ///< --nnodes MIN:MAX
  int min_nodes = 0;         ///< MIN of an elastic job
  int slot = -1;             ///< this node's index among the nodes the job started with (-1: all N, slot = k)
  int started_nodes = 0;     ///< how many nodes the job started with (0: all N)
  /// The rank of this node's first rank, and the job's world size at its start.
  int first_rank() const { return (slot >= 0 ? slot : k) * P; }
  int world_at_start() const { return (started_nodes > 0 ? started_nodes : N) * P; }
  int64_t started = 0;  ///< wall-clock second this launcher started (wall_seconds())
  std::string tag;      ///< "nanochat run (node K on HOST): ", the prefix of its messages
  std::string publish;  ///< node 0: LaunchOptions::publish
  std::function<std::optional<std::vector<std::string>>(const std::string&)> follow;  ///< LaunchOptions::follow
};

/// The launchers' store: node 0 hosts it (server), every launcher is a client of it.
struct LauncherStore {
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<StoreClient> client;
  std::unique_ptr<PrefixStore> store;  ///< "nc/launch/" view of client
  bool joining = false;  ///< this node joins an elastic job that already started (its ranks ask to be admitted)
  std::optional<std::vector<std::string>> args;  ///< a follower: the args node 0 published for its ranks
};

/// Rendezvous of the launchers: node 0 starts the store, every launcher connects (with its will
/// "gone/<k>") and registers; they go on once all N have joined with the same shape. In an elastic
/// job that already said "go", a node other than 0 goes on at once with ls.joining set; node 0 of an
/// elastic job says "go" with MIN or more nodes once none has arrived for the last call
/// (NANOCHAT_ELASTIC_LAST_CALL seconds, default 30), and sets c.slot and c.started_nodes on every
/// node it started with. Returns 0, or
/// 128+signal when a signal arrived meanwhile (after saying so; other nodes learn it through
/// "error"). Throws nanochat::Error on a mismatch, a busy port or when c.rdzv passes.
int join_launchers(NodeCtx& c, LauncherStore& ls);

/// Wall-clock seconds since the epoch (the launch times the launchers exchange).
int64_t wall_seconds();
/// "18:40:02": the local time of day of `epoch_s`, for messages.
std::string clock_time(int64_t epoch_s);

/// When node 0 was launched again ("superseded" is set): what that means for node c.k of the
/// earlier launch and what to do, as a crash-like failure. nullopt otherwise. Throws
/// nanochat::Error when the store cannot be reached.
std::optional<Failure> read_superseded(Store& store, const NodeCtx& c);

/// Node 0 after its ranks all succeeded: keeps the store up until every other node says done.
/// Sets `remote` when one reports a failure, vanishes or does not finish within c.rdzv (then it
/// stops waiting). Returns 0, or 128+signal when interrupted (after saying so). `elastic` (--nnodes
/// MIN:MAX): a node that failed or vanished had left the job and is skipped, so is one rank 0 did
/// not list in "nodes_at_end", and one still silent after 30 s (a frozen machine the job went on
/// without) too.
int wait_for_nodes_to_finish(Store& store, const NodeCtx& c, std::optional<Failure>& remote, bool elastic = false);

}  // namespace nanochat::cluster::launcher_detail
