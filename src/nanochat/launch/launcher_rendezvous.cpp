// The launchers' side of `nanochat run` that talks to the other nodes (launcher_internal.h): their
// rendezvous in node 0's store, their failure reports, and node 0 waiting for the others to finish.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "nanochat/cluster/env.h"
#include "nanochat/core/error.h"
#include "nanochat/launch/launcher_internal.h"

namespace nanochat::cluster::launcher_detail {

namespace {

// Prints "<tag>waiting for ... (20 s of 300 s)" every wait_report_interval() while a wait lasts.
class WaitReporter {
 public:
  WaitReporter(std::string tag, Ms limit)
      : tag_(std::move(tag)), limit_(limit), t0_(Clock::now()), every_(wait_report_interval()), next_(t0_ + every_) {}
  void tick(const std::function<std::string()>& what) {
    auto now = Clock::now();
    if (now < next_) return;
    next_ = now + every_;
    long elapsed = std::lround(std::chrono::duration<double>(now - t0_).count());
    std::fprintf(stderr, "%s%s (%ld s of %g s)\n", tag_.c_str(), what().c_str(), elapsed, limit_.count() / 1000.0);
    std::fflush(stderr);
  }

 private:
  std::string tag_;
  Ms limit_;
  Clock::time_point t0_;
  Ms every_;
  Clock::time_point next_;
};

// "node 1" / "nodes 1, 3".
std::string node_list(const std::vector<int>& nodes) {
  std::string s = nodes.size() == 1 ? "node " : "nodes ";
  for (size_t i = 0; i < nodes.size(); ++i) s += (i ? ", " : "") + std::to_string(nodes[i]);
  return s;
}

// Registers this launcher under "node/<k>"; throws when another launcher claimed --node-rank k,
// naming it (host, pid): after a dropped SSH session that is usually the old launcher, still
// waiting, which must be stopped rather than the new one renumbered.
void register_node(PrefixStore& store, const NodeCtx& c) {
  if (store.add(str_cat("claim/", c.k), 1) > 1) {
    std::string other = "another launcher (it has not said where it runs yet)", pid;
    const auto until = Clock::now() + Ms(2000);  // the claimant writes node/<k> right after its claim
    for (auto v = store.try_get(str_cat("node/", c.k));; v = store.try_get(str_cat("node/", c.k))) {
      if (v) {
        const auto j = nlohmann::json::parse(*v, nullptr, false);
        pid = std::to_string(j.value("pid", -1L));
        other = str_cat("the launcher on host ", j.value("host", std::string("?")), " (pid ", pid, ")");
        break;
      }
      if (Clock::now() >= until) break;
      std::this_thread::sleep_for(Ms(100));
    }
    // Tell the launchers already waiting (the first one with this --node-rank among them) at once.
    try {
      const int64_t n = store.add("duplicates", 1);
      store.set(str_cat("duplicate/", n),
                str_cat("a launcher on host ", c.host, " (pid ", getpid(), ") was also started with --node-rank ", c.k,
                        ", which ", other, " already has; that second launcher stopped"));
    } catch (const Error&) {
    }
    fail("--node-rank ", c.k, " is used twice: by this launcher (host ", c.host, ") and by ", other,
         ". If that is a launcher left over from an earlier run of this job (e.g. its SSH session dropped), stop it",
         pid.empty() ? "" : str_cat(" (`kill ", pid, "` on that host)"),
         " and start again; otherwise give every node a distinct --node-rank in [0, ", c.N, ")");
  }
  nlohmann::json me = {{"nnodes", c.N},
                       {"nproc_per_node", c.P},
                       {"host", c.host},
                       {"pid", static_cast<long>(getpid())},
                       {"started", c.started}};
  store.set(str_cat("node/", c.k), me.dump());
}

// Tells every node why the job cannot start: node 0 publishes `e` as "error"; a node other than node 0
// also counts itself in "error_seen", as it does when it reads someone else's error (see
// keep_store_until_error_read).
void publish_error(PrefixStore& store, const NodeCtx& c, const std::string& e) {
  store.set("error", e);
  if (c.k != 0) store.add("error_seen", 1);
}

// Throws the error another node published, after counting this node in "error_seen".
void fail_on_published_error(PrefixStore& store, const NodeCtx& c) {
  auto e = store.try_get("error");
  if (!e) return;
  if (c.k != 0) store.add("error_seen", 1);
  fail(*e);
}

// Node 0 hosts the store, so its exit closes every other node's connection: after an "error" it
// keeps the store up until each other node that registered has read it (at most 5 s), so that they
// print the cause rather than "the store closed the connection".
void keep_store_until_error_read(PrefixStore& store, const NodeCtx& c) {
  try {
    if (!store.try_get("error")) return;
    int64_t registered = 0;
    for (int j = 1; j < c.N; ++j) registered += store.try_get(str_cat("node/", j)).has_value();
    for (const auto until = Clock::now() + Ms(5000); Clock::now() < until && !pending_signal();) {
      if (store.add("error_seen", 0) >= registered) return;
      std::this_thread::sleep_for(Ms(20));
    }
  } catch (const Error&) {
  }
}

// Node j registered `v`; throws (and tells every node through "error") when its shape differs.
void check_shape(PrefixStore& store, const NodeCtx& c, int j, const std::string& v) {
  auto nj = nlohmann::json::parse(v);
  if (nj.value("nnodes", 0) == c.N && nj.value("nproc_per_node", 0) == c.P) return;
  std::string e = str_cat("the nodes of this job disagree: node ", c.k, " (host ", c.host, ") has --nnodes ", c.N,
                          " --nproc-per-node ", c.P, " but node ", j, " (host ", nj.value("host", "?"),
                          ") has --nnodes ", nj.value("nnodes", 0), " --nproc-per-node ", nj.value("nproc_per_node", 0),
                          "; start every node with the same --nnodes and --nproc-per-node");
  publish_error(store, c, e);
  fail(e);
}

// The nodes that have not registered yet; checks the shape of the others when `check`.
std::vector<int> missing_nodes(PrefixStore& store, const NodeCtx& c, bool check) {
  std::vector<int> missing;
  for (int j = 0; j < c.N; ++j) {
    auto v = store.try_get(str_cat("node/", j));
    if (!v)
      missing.push_back(j);
    else if (check)
      check_shape(store, c, j, *v);
  }
  return missing;
}

// Node 0 was launched again while this launcher waited for the others (read_superseded()).
struct Superseded {
  std::string msg;
};

// "node 0 was launched again on host H (pid P, at T)" and "node 0's earlier launch (pid Q on host
// G, started at S)", when "superseded" is set.
std::optional<std::pair<std::string, std::string>> superseded_parts(Store& store) {
  auto v = store.try_get("superseded");
  if (!v) return std::nullopt;
  const auto j = nlohmann::json::parse(*v, nullptr, false);
  const bool ok = j.is_object();
  std::string again =
      str_cat("node 0 was launched again on host ", ok ? j.value("host", std::string("?")) : "?", " (pid ",
              ok ? j.value("pid", -1L) : -1L, ", at ", clock_time(ok ? j.value("started", int64_t{0}) : 0), ")");
  std::string old = "node 0's earlier launch";
  if (auto n0 = store.try_get("node/0")) {
    const auto o = nlohmann::json::parse(*n0, nullptr, false);
    if (o.is_object())
      old =
          str_cat("node 0's earlier launch (pid ", o.value("pid", -1L), " on host ", o.value("host", std::string("?")),
                  ", started at ", clock_time(o.value("started", int64_t{0})), ")");
  }
  return std::make_pair(again, old);
}

// In the rendezvous: node 0 of an earlier launch stops (telling the nodes that joined it); another
// node throws Superseded to join the new launch.
void check_superseded(PrefixStore& store, const NodeCtx& c) {
  auto parts = superseded_parts(store);
  if (!parts) return;
  if (c.k != 0) {
    store.add("error_seen", 1);
    throw Superseded{str_cat(parts->first, " to replace ", parts->second)};
  }
  const std::string e = read_superseded(store, c)->desc;
  publish_error(store, c, e);
  fail(e);
}

// What holds node 0's port, when it is an earlier launch of node 0 of this job (it answers with
// this job's token, --nnodes and --nproc-per-node): sets "superseded" in its store, so that it and
// the nodes that joined it stop, and returns its description. A job that started more than the
// rendezvous timeout ago is not touched: that throws `busy` with its description. Any other holder
// (not a store, another job): nullopt.
std::optional<std::string> supersede_earlier_launch(const NodeCtx& c, const std::string& busy) {
  std::unique_ptr<StoreClient> client;
  std::optional<std::string> node0, go;
  try {
    StoreClientOptions co;
    co.host = c.master;
    co.port = c.port;
    co.job_token = c.token;
    co.connect_timeout = Ms(0);
    co.op_timeout = Ms(5000);
    co.identity = str_cat("a new launch of node 0 on ", c.host, " (pid ", getpid(), ")");
    client = std::make_unique<StoreClient>(co);
    node0 = client->try_get("nc/launch/node/0");
    go = client->try_get("nc/launch/go");
  } catch (const Error&) {
    return std::nullopt;
  }
  if (!node0) return std::nullopt;
  const auto j = nlohmann::json::parse(*node0, nullptr, false);
  if (!j.is_object() || j.value("nnodes", 0) != c.N || j.value("nproc_per_node", 0) != c.P) return std::nullopt;
  std::string who =
      str_cat("an earlier launch of node 0 of this job (pid ", j.value("pid", -1L), " on host ",
              j.value("host", std::string("?")), ", started at ", clock_time(j.value("started", int64_t{0})), ")");
  if (go) {
    const int64_t since = std::atoll(go->c_str());
    const double limit = c.rdzv.count() / 1000.0;
    if (static_cast<double>(wall_seconds() - since) > limit)
      fail(busy, ". It is ", who, ", running this job since ", clock_time(since),
           ": a new launch of node 0 replaces an earlier one only while that one waits for its nodes or started "
           "less than the rendezvous timeout (",
           limit, " s) ago; stop it first if you mean to start the job again");
    who += str_cat(", running the job since ", clock_time(since));
  } else {
    who += ", still waiting for its nodes";
  }
  try {
    client->set("nc/launch/superseded",
                nlohmann::json{{"host", c.host}, {"pid", static_cast<long>(getpid())}, {"started", c.started}}.dump());
  } catch (const Error&) {
    return std::nullopt;
  }
  return who;
}

// Node 0's store on c.port. When an earlier launch of node 0 of this job holds the port, this
// launch replaces it (supersede_earlier_launch()) and takes the port once it is released, waiting
// at most until `deadline`.
std::unique_ptr<StoreServer> host_store(const NodeCtx& c, WaitReporter& report, Clock::time_point deadline) {
  const std::string label = c.master == "127.0.0.1" ? c.host : c.master;
  std::string busy;
  try {
    return std::make_unique<StoreServer>(c.port, c.token, label);
  } catch (const Error& e) {
    busy = e.what();
  }
  const auto earlier = supersede_earlier_launch(c, busy);
  if (!earlier) fail(busy);
  std::fprintf(stderr,
               "%sport %d is held by %s: this new launch replaces it, so it stops (and the nodes that joined it "
               "stop and say how to join this launch); waiting for it to release the port\n",
               c.tag.c_str(), c.port, earlier->c_str());
  std::fflush(stderr);
  for (;;) {
    throw_if_signalled();
    std::this_thread::sleep_for(Ms(200));
    try {
      return std::make_unique<StoreServer>(c.port, c.token, label);
    } catch (const Error& e) {
      busy = e.what();
    }
    if (Clock::now() >= deadline)
      fail(busy, ". It is ", *earlier, "; it was told to stop but did not release the port within ",
           c.rdzv.count() / 1000.0, " s");
    report.tick([&] { return str_cat("waiting for ", *earlier, " to release port ", c.port); });
  }
}

// Prints (and appends to `seen`) the notices of launchers that were refused because their
// --node-rank was taken (register_node()), so that the launchers still waiting say so at once
// instead of blaming a missing node only when the rendezvous times out.
void report_duplicates(PrefixStore& store, const NodeCtx& c, std::vector<std::string>& seen) {
  const int64_t n = store.add("duplicates", 0);
  for (auto i = static_cast<int64_t>(seen.size()) + 1; i <= n; ++i) {
    auto d = store.try_get(str_cat("duplicate/", i));
    if (!d) break;
    seen.push_back(*d);
    const auto missing = missing_nodes(store, c, false);
    std::fprintf(stderr, "%s%s. %s\n", c.tag.c_str(), d->c_str(),
                 missing.empty() ? "Every node has joined; nothing to do"
                                 : str_cat("Still missing: ", node_list(missing), " of ", c.N,
                                           ": start that launcher again with the --node-rank of a missing node")
                                       .c_str());
    std::fflush(stderr);
  }
}

// An elastic job's node 0 waits this long after the last node arrived before it starts with the
// MIN or more nodes that are there (torchrun's last call).
Ms last_call_time() { return env_seconds("NANOCHAT_ELASTIC_LAST_CALL", Ms(30000)); }

struct LastCall {
  size_t present = 0;
  Clock::time_point since{};
  bool said = false;
};

// Node 0 of an elastic job: once MIN or more nodes are here and none arrived for the last call,
// publishes who starts ("present", before "go") and says go. True when it did. Says that it
// will once the others have had a moment to arrive (they usually start together).
bool start_without(PrefixStore& store, NodeCtx& c, const std::vector<int>& missing, LastCall& lc) {
  const size_t here = static_cast<size_t>(c.N) - missing.size();
  if (!c.elastic || static_cast<int>(here) < c.min_nodes) return false;
  if (here != lc.present) lc = {here, Clock::now(), false};
  const Ms grace = std::min(Ms(3000), last_call_time() / 2);
  if (!lc.said && Clock::now() - lc.since >= grace) {
    lc.said = true;
    std::fprintf(stderr,
                 "%s%zu of %d nodes are here (at least %d needed): the job starts with them in %g s unless "
                 "another arrives (the others may join later)\n",
                 c.tag.c_str(), here, c.N, c.min_nodes, (last_call_time() - grace).count() / 1000.0);
    std::fflush(stderr);
  }
  if (Clock::now() - lc.since < last_call_time()) return false;
  std::vector<int> present;
  for (int j = 0; j < c.N; ++j)
    if (std::find(missing.begin(), missing.end(), j) == missing.end()) present.push_back(j);
  store.set("present", nlohmann::json(present).dump());
  store.set("go", std::to_string(wall_seconds()));
  c.slot = 0;
  c.started_nodes = static_cast<int>(present.size());
  return true;
}

// After "go": this node's place among the nodes the job started with. False when the job started
// without it (it registered after node 0 decided): it joins like a node that comes later.
bool take_slot(PrefixStore& store, NodeCtx& c) {
  const auto v = store.try_get("present");
  if (!v) return true;  // every node started
  const auto present = nlohmann::json::parse(*v).get<std::vector<int>>();
  const auto at = std::find(present.begin(), present.end(), c.k);
  if (at == present.end()) return false;
  c.slot = static_cast<int>(at - present.begin());
  c.started_nodes = static_cast<int>(present.size());
  return true;
}

// The launchers of all nodes meet in the store: each registers its shape, node 0 checks them and
// says "go" once all have joined. Prints what it waits for every wait_report_interval(). Returns
// true when this node joins an elastic job that already started (it registers nothing; its ranks
// ask rank 0 to admit them). Throws Interrupted on a signal, nanochat::Error on a mismatch or when
// the rendezvous deadline passes.
bool meet(PrefixStore& store, NodeCtx& c, WaitReporter& report, Clock::time_point deadline) {
  const int N = c.N, k = c.k;
  const std::string at = host_port(c.master, c.port);
  check_superseded(store, c);
  if (c.elastic && k != 0 && store.try_get("go")) {
    if (auto v = store.try_get("node/0")) check_shape(store, c, 0, *v);
    return true;
  }
  register_node(store, c);
  // Node 0 checks every node each round; the others only look for "go" (and, when they report or
  // give up, for who is missing), so the store's load does not grow with the square of the nodes.
  bool checked_node0 = k == 0;
  LastCall last_call;
  std::vector<std::string> dups;  // notices of launchers refused for a --node-rank already taken
  for (int round = 0;; ++round) {
    if (round % 5 == 0) report_duplicates(store, c, dups);
    throw_if_signalled();
    check_superseded(store, c);
    fail_on_published_error(store, c);
    if (store.try_get("go")) return !take_slot(store, c);
    if (!checked_node0) {
      if (auto v = store.try_get("node/0")) {
        check_shape(store, c, 0, *v);
        checked_node0 = true;
      }
    }
    std::vector<int> missing;
    if (k == 0) {
      missing = missing_nodes(store, c, true);
      if (missing.empty()) {
        store.set("go", std::to_string(wall_seconds()));
        return false;
      }
      if (start_without(store, c, missing, last_call)) return false;
    }
    if (Clock::now() >= deadline) {
      if (k != 0) missing = missing_nodes(store, c, false);
      std::string e =
          k == 0 ? str_cat(node_list(missing), " of --nnodes ", N, " never joined the store at ", at, " within ",
                           c.rdzv.count() / 1000.0,
                           " s; start `nanochat run` on every node with the same --master-addr/--master-port")
                 : str_cat("node 0 (", at, ") did not start the job within ", c.rdzv.count() / 1000.0,
                           " s: ", missing.empty() ? "it has not said go" : node_list(missing) + " never joined");
      for (const auto& d : dups) e += "; meanwhile " + d + " (was it meant to be one of the missing nodes?)";
      if (k == 0) publish_error(store, c, e);
      fail(e);
    }
    report.tick([&] {
      if (k != 0) missing = missing_nodes(store, c, false);
      return missing.empty() ? str_cat("waiting for node 0 to start the job at ", at)
                             : str_cat("waiting for ", node_list(missing), " of ", N, " to join at ", at);
    });
    std::this_thread::sleep_for(Ms(50));
  }
}

}  // namespace

int64_t wall_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

std::string clock_time(int64_t epoch_s) {
  const std::time_t t = static_cast<std::time_t>(epoch_s);
  std::tm tm{};
  char buf[16];
  if (epoch_s <= 0 || !localtime_r(&t, &tm) || std::strftime(buf, sizeof buf, "%H:%M:%S", &tm) == 0) return "?";
  return buf;
}

std::optional<Failure> read_superseded(Store& store, const NodeCtx& c) {
  auto parts = superseded_parts(store);
  if (!parts) return std::nullopt;
  if (c.k == 0)
    return Failure{str_cat(parts->first, " and replaces this earlier launch (pid ", getpid(), ", started at ",
                           clock_time(c.started), "), which stops; the new launch goes on"),
                   true};
  return Failure{str_cat("this node joined ", parts->second, ", but ", parts->first,
                         " to replace it, so this node stops: run this node's command again to join the new launch"),
                 true};
}

std::string failure_report(const Failure& f) {
  nlohmann::json j = {{"desc", f.desc}, {"crash", f.crash}};
  if (!f.tail.empty()) j["stderr"] = f.tail;
  if (f.order >= 0) j["order"] = f.order;
  return j.dump();
}

void report_failure(Store& store, int node, Failure& f) {
  f.order = store.add("failures", 1);
  store.set(str_cat("failure/", node), failure_report(f));
}

Failure parse_failure_report(const std::string& report, int node) {
  try {
    auto js = nlohmann::json::parse(report);
    Failure f{js.value("desc", "a rank on node " + std::to_string(node) + " failed"), js.value("crash", false)};
    f.tail = js.value("stderr", std::string());
    f.order = js.value("order", int64_t{-1});
    return f;
  } catch (const nlohmann::json::exception& e) {
    return Failure{str_cat("a rank on node ", node, " failed (its launcher's report is unreadable: ", e.what(), ")"),
                   false};
  }
}

std::optional<Failure> read_remote_failure(Store& store, int node, const std::string& gone_what) {
  if (auto v = store.try_get(str_cat("failure/", node))) return parse_failure_report(*v, node);
  if (auto g = store.try_get(str_cat("gone/", node))) return Failure{*g + " " + gone_what, true};
  return std::nullopt;
}

std::string describe_failures(const std::vector<Failure>& local, const std::optional<Failure>& remote,
                              bool stopped_others) {
  std::vector<Failure> all = local;
  if (remote) all.push_back(*remote);
  if (all.empty()) return "";
  // The lead: a crash (a rank killed by a signal no launcher sent) on any node, the likely root
  // cause however late its launcher reported it; else the failure the launchers saw first
  // (Failure::order), when both nodes' orders are known: the other node's, or one of this node's.
  // Among this node's, the first failure that was not a rank this launcher stopped: within one
  // node the order noticed is not the order of the failures (one reap finds every rank that
  // exited since the last).
  const bool ordered = remote && !local.empty() && remote->order >= 0 && local[0].order >= 0;
  const bool remote_first = remote && (local.empty() || (ordered && remote->order < local[0].order));
  const auto end = ordered ? all.begin() + static_cast<std::ptrdiff_t>(local.size()) : all.end();
  auto primary = std::find_if(all.begin(), all.end(), [](const Failure& f) { return f.crash; });
  if (primary == all.end() && remote_first) primary = all.end() - 1;
  if (primary == all.end()) {
    primary = std::find_if(all.begin(), end, [](const Failure& f) { return !f.induced; });
    if (primary == end) primary = all.begin();
  }
  std::string msg = primary->desc;
  std::string others;
  for (auto it = all.begin(); it != all.end(); ++it)
    if (it != primary) others += (others.empty() ? "" : "; ") + it->desc;
  if (stopped_others) msg += "; the launcher stopped the other ranks";
  if (!others.empty()) msg += " (also: " + others + ")";
  if (remote && !remote->tail.empty()) {
    // name the rank the lines belong to: the lead may be a rank of this node
    const std::string& d = remote->desc;
    const size_t close = d.find(')');
    const std::string who =
        d.rfind("rank ", 0) == 0 && close != std::string::npos ? d.substr(0, close + 1) : "that rank";
    msg += "\n  the last lines " + who + " wrote to stderr on its node:";
    size_t start = 0;
    while (start < remote->tail.size()) {
      size_t nl = remote->tail.find('\n', start);
      if (nl == std::string::npos) nl = remote->tail.size();
      msg += "\n    " + remote->tail.substr(start, nl - start);
      start = nl + 1;
    }
  }
  return msg;
}

namespace {

// A follower (LaunchOptions::follow): reads the launch node 0 published and whether this node
// takes part in it (ls.args then set); a launch whose ranks all ended is not followed.
bool follow_launch(const NodeCtx& c, LauncherStore& ls) {
  std::string published;
  try {
    published = ls.store->get("published", Ms(10000));
  } catch (const StoreTimeout&) {
    fail("node 0's launcher at ", host_port(c.master, c.port),
         " published no stage: this node follows node 0's `nanochat run ... speedrun`; start node 0 with that "
         "command (the same --nnodes and --nproc-per-node)");
  }
  if (ls.store->try_get("ended")) return false;
  ls.args = c.follow(published);
  return ls.args.has_value();
}

}  // namespace

int join_launchers(NodeCtx& c, LauncherStore& ls) {
  const auto deadline = Clock::now() + c.rdzv;
  bool said_rejoin = false;
  std::string dropped;  // why node 0's store dropped this node before the job started
  for (;;) {
    try {
      WaitReporter report(c.tag, c.rdzv);
      if (c.k == 0) ls.server = host_store(c, report, deadline);
      StoreClientOptions co;
      co.host = c.master;
      co.port = c.port;
      co.job_token = c.token;
      co.connect_timeout = remaining(deadline);
      // a launcher's requests are small: an answer 10 s late means node 0 is cut off (a node whose
      // link dropped then reports and stops in seconds, not after the default 60 s)
      co.op_timeout = Ms(10000);
      co.identity = str_cat("launcher of node ", c.k, " on ", c.host, " (pid ", getpid(), ")");
      co.on_retry = [&](const std::string& err) {
        throw_if_signalled();
        report.tick([&] { return str_cat("waiting for node 0's store at ", host_port(c.master, c.port), ": ", err); });
      };
      ls.client = std::make_unique<StoreClient>(co);
      ls.store = std::make_unique<PrefixStore>(*ls.client, "nc/launch/");
      if (c.k == 0 && !c.publish.empty()) ls.store->set("published", c.publish);
      if (c.follow && !follow_launch(c, ls)) {  // not this launch: node 0's next one, unregistered here
        ls.store.reset();
        ls.client.reset();
        if (Clock::now() >= deadline)
          fail("node 0 at ", host_port(c.master, c.port), " started no new stage within ", c.rdzv.count() / 1000.0,
               " s");
        std::this_thread::sleep_for(Ms(1000));
        throw_if_signalled();  // Ctrl-C while node 0 runs a stage this node ran already
        continue;
      }
      ls.client->set_will(str_cat("nc/launch/gone/", c.k), str_cat("node ", c.k, "'s launcher (host ", c.host, ")"));
      ls.joining = meet(*ls.store, c, report, deadline);
      return 0;
    } catch (const Superseded& s) {
      // Node 0 was launched again before the job started: join the new launch once it is up.
      if (!said_rejoin) {
        std::fprintf(stderr, "%s%s; joining the new launch\n", c.tag.c_str(), s.msg.c_str());
        std::fflush(stderr);
        said_rejoin = true;
      }
      ls.store.reset();
      ls.client.reset();
      if (Clock::now() >= deadline)
        fail(s.msg, ", but the new launch did not answer at ", host_port(c.master, c.port), " within ",
             c.rdzv.count() / 1000.0, " s; start node 0 and then this node again");
      std::this_thread::sleep_for(Ms(300));
    } catch (const ConnectionLost& e) {
      // Node 0's store closed this node's connection before the job started: node 0 stopped, most
      // often because a new launch of node 0 replaced it and that one takes over the port (this
      // node may have connected just as the earlier one shut down). Wait for node 0 to come back,
      // as a node started before node 0 does, until the rendezvous deadline.
      if (c.k == 0) throw;
      if (dropped.empty()) {
        dropped = e.what();
        std::fprintf(stderr, "%s%s before the job started; waiting for node 0 to come back at %s\n", c.tag.c_str(),
                     dropped.c_str(), host_port(c.master, c.port).c_str());
        std::fflush(stderr);
      }
      ls.store.reset();
      ls.client.reset();
      if (Clock::now() >= deadline)
        fail(dropped, " before the job started, and node 0 did not come back within ", c.rdzv.count() / 1000.0,
             " s; start node 0 and then this node again");
      std::this_thread::sleep_for(Ms(300));
    } catch (const Interrupted& i) {
      if (ls.store) try {
          publish_error(*ls.store, c,
                        str_cat("node ", c.k, "'s launcher (host ", c.host, ") was stopped by ", signal_name(i.sig),
                                " before the job started"));
          if (c.k == 0) keep_store_until_error_read(*ls.store, c);
        } catch (const Error&) {
        }
      std::fprintf(stderr, "%sgot %s while waiting for %s; stopped (no rank of this launch was started)\n",
                   c.tag.c_str(), signal_name(i.sig).c_str(), c.follow ? "node 0's next stage" : "the other nodes");
      std::fflush(stderr);
      return 128 + i.sig;
    } catch (const Error& e) {
      if (c.k == 0 && ls.store) keep_store_until_error_read(*ls.store, c);
      if (!dropped.empty() && !ls.client)  // node 0 never came back
        fail(e.what(), " (this node had joined node 0 there, but ", dropped, " before the job started)");
      throw;
    }
  }
}

namespace {

// Whether rank 0 of an elastic job listed node j among those that trained to the end (true when
// it said nothing: a job that did not get there).
bool in_nodes_at_end(Store& store, int j) {
  const auto v = store.try_get("nodes_at_end");
  if (!v) return true;
  const auto nodes = nlohmann::json::parse(*v, nullptr, false);
  if (!nodes.is_array()) return true;
  for (const auto& n : nodes)
    if (n.is_number_integer() && n.get<long>() == j) return true;
  return false;
}

}  // namespace

int wait_for_nodes_to_finish(Store& store, const NodeCtx& c, std::optional<Failure>& remote, bool elastic) {
  const auto deadline = Clock::now() + (elastic ? std::min(c.rdzv, Ms(30000)) : c.rdzv);
  WaitReporter report(c.tag, c.rdzv);
  for (int j = 1; j < c.N && !remote;) {
    if (int sig = pending_signal()) {
      std::fprintf(stderr, "%sgot %s while waiting for node %d to finish; stopped\n", c.tag.c_str(),
                   signal_name(sig).c_str(), j);
      return 128 + sig;
    }
    if (store.try_get(str_cat("done/", j)) || (elastic && !in_nodes_at_end(store, j))) {
      ++j;  // done, or an elastic job's node that left before its end (rank 0 said who trained to the end)
      continue;
    }
    report.tick([&] {
      return str_cat("this node's ranks finished; keeping the store at ", host_port(c.master, c.port),
                     " up until node ", j, " of ", c.N, " finishes too");
    });
    if (auto f = read_remote_failure(store, j, "disappeared before its ranks finished")) {
      if (elastic) {  // that node left the job; the others went on without it
        ++j;
        continue;
      }
      remote = f;
    } else if (Clock::now() >= deadline && elastic) {
      std::fprintf(stderr, "%snode %d has not finished; the job went on without it\n", c.tag.c_str(), j);
      ++j;
    } else if (Clock::now() >= deadline) {
      remote = Failure{
          str_cat("node ", j, " did not finish within ", c.rdzv.count() / 1000.0, " s after this node's ranks did"),
          false};
    } else {
      std::this_thread::sleep_for(Ms(100));
    }
  }
  return 0;
}

}  // namespace nanochat::cluster::launcher_detail
