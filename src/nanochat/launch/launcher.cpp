#include "nanochat/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "nanochat/cluster/env.h"
#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"
#include "nanochat/launch/launcher_internal.h"

extern char** environ;

namespace nanochat::cluster {

int physical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int logical = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return logical;
  std::set<std::pair<std::string, std::string>> cores;
  int n_cpus = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    ++n_cpus;
    std::string base = str_cat("/sys/devices/system/cpu/cpu", c, "/topology/");
    std::ifstream core(base + "core_id"), pkg(base + "physical_package_id");
    std::string core_id, pkg_id;
    if (!(core >> core_id) || !(pkg >> pkg_id)) return n_cpus > 0 ? CPU_COUNT(&set) : logical;
    cores.insert({pkg_id, core_id});
  }
  if (cores.empty()) return logical;
  return static_cast<int>(cores.size());
}

namespace {

std::atomic<int> g_signal{0};
int g_wake_fd = -1;

void on_signal(int s) {
  g_signal.store(s);
  if (g_wake_fd >= 0) {
    char c = 1;
    ssize_t ignored = ::write(g_wake_fd, &c, 1);
    (void)ignored;
  }
}

// Restores the previous SIGINT/SIGTERM/SIGHUP handlers when the launcher returns. SIGHUP (the
// terminal or SSH session went away) stops the job like SIGTERM, unless it was ignored when the
// launcher started (`nohup nanochat run ...`): then it stays ignored.
struct SignalGuard {
  struct sigaction old_int {
  }, old_term{}, old_hup{};
  bool hup = false;
  Fd r, w;
  SignalGuard() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) fail("pipe: ", errno_str(errno));
    r.reset(p[0]);
    w.reset(p[1]);
    g_wake_fd = w.get();
    g_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    struct sigaction cur {};
    sigaction(SIGHUP, nullptr, &cur);
    if (cur.sa_handler != SIG_IGN) {
      sigaction(SIGHUP, &sa, &old_hup);
      hup = true;
    }
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    if (hup) sigaction(SIGHUP, &old_hup, nullptr);
    g_wake_fd = -1;
  }
};

}  // namespace

namespace launcher_detail {

int pending_signal() { return g_signal.load(); }

void throw_if_signalled() {
  if (int s = g_signal.load()) throw Interrupted{s};
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? str_cat("SIG", abbrev) : str_cat("signal ", sig);
}

}  // namespace launcher_detail

using namespace launcher_detail;

namespace {

// Takes the pending signal (the supervise loop reacts to each one once).
int take_signal() { return g_signal.exchange(0); }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return str_cat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return str_cat("was killed by signal ", WTERMSIG(status), " (", signal_name(WTERMSIG(status)), ")");
  return "stopped";
}

std::string random_token() {
  unsigned char b[16] = {0};
  std::ifstream f("/dev/urandom", std::ios::binary);
  f.read(reinterpret_cast<char*>(b), sizeof(b));
  if (!f) fail("cannot read /dev/urandom to make a job token; set NANOCHAT_JOB_TOKEN");
  std::string s;
  char h[3];
  for (unsigned char c : b) {
    std::snprintf(h, sizeof(h), "%02x", c);
    s += h;
  }
  return s;
}

struct Child {
  int rank = 0;
  pid_t pid = -1;
  Fd out, err;
  std::string out_buf, err_buf;
  std::deque<std::string> err_tail;  // its last kTailLines lines on stderr (failure reports)
  bool exited = false;
  int status = 0;
};

void write_line(int fd, const std::string& prefix, const std::string& line) {
  std::string s = prefix + line + "\n";
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// Keeps the last kTailLines lines (each shortened to 400 bytes) of a rank's stderr.
void keep_tail(std::deque<std::string>* tail, const std::string& line) {
  if (!tail || line.empty()) return;
  tail->push_back(line.size() > 400 ? line.substr(0, 400) + "..." : line);
  while (tail->size() > kTailLines) tail->pop_front();
}

// Reads what is available; emits complete lines with the rank prefix (and keeps them in `tail`
// when given). Returns false at EOF.
bool pump(Fd& fd, std::string& buf, int out_fd, const std::string& prefix, std::deque<std::string>* tail = nullptr) {
  char tmp[65536];
  for (;;) {
    ssize_t k = ::read(fd.get(), tmp, sizeof(tmp));
    if (k > 0) {
      buf.append(tmp, static_cast<size_t>(k));
      size_t start = 0, nl;
      while ((nl = buf.find('\n', start)) != std::string::npos) {
        write_line(out_fd, prefix, buf.substr(start, nl - start));
        keep_tail(tail, buf.substr(start, nl - start));
        start = nl + 1;
      }
      buf.erase(0, start);
      if (buf.size() > (1u << 16)) {  // an endless line: emit it in pieces
        write_line(out_fd, prefix, buf);
        keep_tail(tail, buf);
        buf.clear();
      }
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (!buf.empty()) {
      write_line(out_fd, prefix, buf);
      keep_tail(tail, buf);
    }
    buf.clear();
    fd.reset();
    return false;
  }
}

std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& set) {
  std::set<std::string> names;
  for (const auto& kv : set) names.insert(kv.first);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string s = *e;
    auto eq = s.find('=');
    if (eq != std::string::npos && names.count(s.substr(0, eq))) continue;
    env.push_back(s);
  }
  for (const auto& kv : set) env.push_back(kv.first + "=" + kv.second);
  return env;
}

pid_t spawn(const std::string& program, const std::vector<std::string>& args, const std::vector<std::string>& env,
            int out_w, int err_w, const std::vector<int>& cpus) {
  // Everything the child needs is built before fork: between fork and exec only async-signal-safe
  // calls are allowed (the launcher may run the store thread).
  std::vector<char*> argv, envp;
  std::string argv0 = "nanochat";
  argv.push_back(argv0.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int c : cpus) CPU_SET(c, &mask);
  // what a failed exec says (built here: after fork only async-signal-safe calls)
  const std::string cannot = "nanochat run: cannot execute the rank program " + program + ": ";
  const std::string missing = cannot + "it is not there (moved, or being rebuilt); run this command again\n";
  const std::string busy = cannot + "it is being written (a build replacing it?); run this command again\n";
  const std::string denied = cannot + "permission denied\n";
  const std::string other = cannot + "exec failed\n";
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) fail("cannot start a rank: fork failed: ", errno_str(errno));
  if (pid == 0) {
    setpgid(0, 0);                     // Ctrl-C reaches the launcher only; it forwards the signal
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher dies -> the ranks stop
    if (getppid() != parent) _exit(127);
    dup2(out_w, 1);
    dup2(err_w, 2);
    if (!cpus.empty() && sched_setaffinity(0, sizeof mask, &mask) != 0) {
      const char msg[] =
          "nanochat run: cannot pin the rank to its cores (sched_setaffinity failed); try --hybrid off\n";
      ssize_t ignored = ::write(2, msg, sizeof(msg) - 1);
      (void)ignored;
      _exit(127);
    }
    execve(program.c_str(), argv.data(), envp.data());
    const std::string& msg = errno == ENOENT ? missing : errno == ETXTBSY ? busy : errno == EACCES ? denied : other;
    ssize_t ignored = ::write(2, msg.data(), msg.size());
    (void)ignored;
    _exit(127);
  }
  return pid;
}

std::string rank_range(int first, int count) {
  return count == 1 ? str_cat("rank ", first) : str_cat("ranks ", first, "-", first + count - 1);
}

bool loopback_master_allowed(const LaunchOptions& o) {
  const char* v = std::getenv("NANOCHAT_ALLOW_LOOPBACK_MASTER");
  return o.allow_loopback_master || (v && std::string(v) == "1");
}

// Validate options: this node's place in the job, or nanochat::Error naming the bad flag.
NodeCtx plan_node(const LaunchOptions& o) {
  if (o.nnodes < 1) fail("--nnodes must be at least 1 (got ", o.nnodes, ")");
  if (o.nproc_per_node < 1) fail("--nproc-per-node must be at least 1 (got ", o.nproc_per_node, ")");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    fail("--node-rank ", o.node_rank, " is outside [0, --nnodes ", o.nnodes, ")");
  if (o.args.empty() && !o.follow)
    fail(
        "nanochat run needs a subcommand to start on every rank, e.g. `nanochat run --nproc-per-node 2 base-train "
        "--depth 4`");
  if (o.master_port < 1 || o.master_port > 65535) fail("--master-port ", o.master_port, " is not a TCP port (1-65535)");
  std::string master = o.master_addr;
  if (master.empty()) {
    if (o.nnodes > 1)
      fail("--master-addr is required with --nnodes ", o.nnodes, ": give every node the address of node 0");
    master = "127.0.0.1";
  }
  if (o.nnodes > 1 && !loopback_master_allowed(o)) {
    std::string why = loopback_master_problem(master, o.nnodes);
    if (!why.empty()) fail(why);
  }
  std::string token = o.job_token.empty() ? job_token_from_env() : o.job_token;
  if (token.empty() && o.nnodes == 1) token = random_token();

  NodeCtx c;
  c.N = o.nnodes;
  c.P = o.nproc_per_node;
  c.k = o.node_rank;
  c.host = host_name();
  c.master = master;
  c.port = o.master_port;
  c.rdzv = o.rendezvous_timeout;
  c.token = token;
  c.elastic = o.min_nnodes > 0;
  c.min_nodes = o.min_nnodes;
  c.started = wall_seconds();
  c.tag = str_cat("nanochat run (node ", c.k, " on ", c.host, "): ");
  c.publish = o.publish;
  c.follow = o.follow;
  if (c.follow && c.k == 0) fail("internal: node 0 leads a job; only the other nodes follow it");
  return c;
}

// Threads per rank: the flag, else the user's OMP_NUM_THREADS, else this node's cores split.
std::string rank_threads(const LaunchOptions& o) {
  if (o.threads_per_rank > 0) return std::to_string(o.threads_per_rank);
  if (const char* t = std::getenv("OMP_NUM_THREADS"); t && *t) return t;
  return std::to_string(std::max(1, physical_cores() / o.nproc_per_node));
}

// "Gloo on 10.0.0.2 (eth0, the interface that routes to MASTER_ADDR m)": the address and
// interface this node's ranks will use (the choice every rank makes, cluster/env.h choose_device()).
std::string rank_address(const LaunchOptions& o, const NodeCtx& c) {
  std::string iface = o.iface;
  if (iface.empty()) iface = DistOptions{}.resolved().iface.value_or("");
  try {
    const DeviceChoice d = choose_device(c.master, c.port, iface);
    return str_cat("Gloo on ", d.address, " (", d.iface.empty() ? "" : d.iface + ", ", d.reason, ")");
  } catch (const Error& e) {
    return str_cat("Gloo address unknown here (", e.what(), ")");
  }
}

// Starts this node's P ranks with their environment; their output comes through pipes.
std::vector<Child> start_ranks(const LaunchOptions& o, const NodeCtx& ctx, const std::string& threads, bool joining) {
  const int P = ctx.P, W = ctx.world_at_start();
  std::vector<Child> kids(P);
  for (int l = 0; l < P; ++l) {
    Child& c = kids[l];
    c.rank = ctx.first_rank() + l;
    int po[2], pe[2];
    if (::pipe2(po, O_CLOEXEC) != 0 || ::pipe2(pe, O_CLOEXEC) != 0) fail("pipe: ", errno_str(errno));
    Fd out_w(po[1]), err_w(pe[1]);
    c.out.reset(po[0]);
    c.err.reset(pe[0]);
    fcntl(c.out.get(), F_SETFL, O_NONBLOCK);
    fcntl(c.err.get(), F_SETFL, O_NONBLOCK);
    std::vector<std::pair<std::string, std::string>> vars = {
        {"RANK", std::to_string(c.rank)},          {"LOCAL_RANK", std::to_string(l)},
        {"WORLD_SIZE", std::to_string(W)},         {"LOCAL_WORLD_SIZE", std::to_string(P)},
        {"GROUP_RANK", std::to_string(ctx.k)},     {"MASTER_ADDR", ctx.master},
        {"MASTER_PORT", std::to_string(ctx.port)}, {"NANOCHAT_STORE_HOSTED", "1"},
        {"NANOCHAT_JOB_TOKEN", ctx.token},         {"OMP_NUM_THREADS", threads}};
    const bool pinned = l < static_cast<int>(o.placement.ranks.size());  // its core type's CPUs and threads
    if (pinned)
      for (auto& [name, value] : vars)
        if (name == "OMP_NUM_THREADS") value = std::to_string(o.placement.ranks[l].threads);
    const std::vector<int> cpus = pinned ? o.placement.ranks[l].cpus : std::vector<int>{};
    if (!o.iface.empty()) vars.push_back({"NANOCHAT_SOCKET_IFNAME", o.iface});
    if (o.min_nnodes > 0)  // an elastic job: the ranks regroup when one leaves (train/elastic.h)
      vars.push_back({"NANOCHAT_MIN_WORLD_SIZE", std::to_string(o.min_nnodes * o.nproc_per_node)});
    if (joining) vars.push_back({"NANOCHAT_JOIN", "1"});  // rank 0 admits it at a step boundary
    c.pid = spawn(o.program.empty() ? self_executable() : o.program, o.args, child_environment(vars), out_w.get(),
                  err_w.get(), cpus);
  }
  return kids;
}

// The supervise phase: relays the ranks' output, reaps them, forwards signals, watches the other
// nodes' launchers, and after a failure stops the other ranks (settle, then SIGTERM, then SIGKILL
// after the grace period). run() returns once every rank exited and its output is drained.
class Supervisor {
 public:
  Supervisor(const LaunchOptions& o, const NodeCtx& c, PrefixStore& store, std::vector<Child>& kids, int wake_fd)
      : o_(o), c_(c), store_(store), kids_(kids), wake_fd_(wake_fd) {}
  void run();
  bool elastic() const { return o_.min_nnodes > 0; }
  // Another node's launcher reported a failed rank, or vanished: sets `remote`.
  void check_remote();

  std::vector<Failure> failures;  // local, in the order noticed
  std::vector<Failure> left;      // elastic job: local ranks that left while the job went on
  std::optional<Failure> remote;
  int interrupted = 0;     // the first signal that stopped the job
  bool term_sent = false;  // the launcher sent SIGTERM (or forwarded a signal) to the ranks

 private:
  bool wait_for_events();  // false once every rank exited and its pipes closed
  void relay_output();
  void on_signal(int sig);
  void reap();
  void watch_remote();
  void escalate();
  void signal_live(int sig);
  void start_stopping();

  const LaunchOptions& o_;
  const NodeCtx& c_;
  PrefixStore& store_;
  std::vector<Child>& kids_;
  int wake_fd_;
  bool stopping_ = false, kill_sent_ = false;
  Clock::time_point settle_deadline_{}, kill_deadline_{};
  Clock::time_point last_remote_check_ = Clock::now();
};

void Supervisor::run() {
  while (wait_for_events()) {
    relay_output();
    if (int sig = take_signal()) on_signal(sig);
    reap();
    watch_remote();
    escalate();
  }
}

bool Supervisor::wait_for_events() {
  std::vector<pollfd> pfds;
  pfds.push_back({wake_fd_, POLLIN, 0});
  for (auto& c : kids_) {
    if (c.out) pfds.push_back({c.out.get(), POLLIN, 0});
    if (c.err) pfds.push_back({c.err.get(), POLLIN, 0});
  }
  bool all_exited = std::all_of(kids_.begin(), kids_.end(), [](const Child& c) { return c.exited; });
  if (all_exited && pfds.size() == 1) return false;
  ::poll(pfds.data(), pfds.size(), 100);
  char b[64];
  while (::read(wake_fd_, b, sizeof(b)) > 0) {
  }
  return true;
}

void Supervisor::relay_output() {
  for (auto& c : kids_) {
    std::string prefix = str_cat("[rank ", c.rank, "] ");
    if (c.out) pump(c.out, c.out_buf, 1, prefix);
    if (c.err) pump(c.err, c.err_buf, 2, prefix, &c.err_tail);
  }
}

void Supervisor::on_signal(int sig) {
  if (interrupted) {
    signal_live(SIGKILL);  // a second Ctrl-C: stop now
    kill_sent_ = true;
    return;
  }
  interrupted = sig;
  // SIGHUP: the terminal went away; the ranks (in their own process groups) get SIGTERM.
  const int fwd = sig == SIGHUP ? SIGTERM : sig;
  std::fprintf(stderr, "%sgot %s, %s\n", c_.tag.c_str(), signal_name(sig).c_str(),
               fwd == sig ? "forwarding it to the ranks" : "stopping the ranks with SIGTERM");
  std::fflush(stderr);
  signal_live(fwd);
  term_sent = true;
  kill_deadline_ = Clock::now() + o_.grace;
  // The other nodes name this node's launcher as the cause, not the ranks that broke after it.
  if (c_.N > 1 && failures.empty()) try {
      Failure f{str_cat("node ", c_.k, "'s launcher (host ", c_.host, ", pid ", getpid(), ") got ", signal_name(sig),
                        " and stopped its ranks"),
                true};
      report_failure(store_, c_.k, f);
    } catch (const Error&) {
    }
}

// Reaps exited ranks; the first local failure is reported to the other nodes through the store.
void Supervisor::reap() {
  for (auto& c : kids_) {
    if (c.exited) continue;
    int st = 0;
    pid_t r = ::waitpid(c.pid, &st, WNOHANG);
    if (r != c.pid) continue;
    c.exited = true;
    c.status = st;
    bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (ok || interrupted) continue;
    Failure f;
    f.desc = str_cat("rank ", c.rank, " (host ", c_.host, ", pid ", c.pid, ") ", describe_status(st));
    if (o_.min_nnodes > 0 && c.rank != 0 && !stopping_) {  // elastic: the others go on without it
      std::fprintf(stderr, "%s%s: it left the job, which goes on without it (--nnodes %d:%d)\n", c_.tag.c_str(),
                   f.desc.c_str(), o_.min_nnodes, c_.N);
      std::fflush(stderr);
      left.push_back(f);
      continue;
    }
    f.crash = WIFSIGNALED(st) && !term_sent;
    f.induced = stopping_ && (remote.has_value() || !failures.empty());
    if (WIFEXITED(st)) {  // its own error: the other nodes show its last words (drained first)
      if (c.err) pump(c.err, c.err_buf, 2, str_cat("[rank ", c.rank, "] "), &c.err_tail);
      for (const auto& line : c.err_tail) f.tail += (f.tail.empty() ? "" : "\n") + line;
    }
    if (failures.empty()) {
      try {
        report_failure(store_, c_.k, f);  // its order among the job's failures, for every node's report
      } catch (const Error&) {
      }
    }
    failures.push_back(f);
    start_stopping();
  }
}

// The other nodes' failure that came first: the report with the lowest order, else (a vanished
// launcher has none) the first node's.
void Supervisor::check_remote() {
  try {
    remote = read_superseded(store_, c_);
    for (int j = 0; j < c_.N && !(remote && remote->order < 0); ++j) {
      if (j == c_.k || (o_.min_nnodes > 0 && j != 0)) continue;  // elastic: only node 0 ends the job
      auto f = read_remote_failure(store_, j, "disappeared (its connection to the store dropped)");
      if (f && (!remote || (f->order >= 0 && f->order < remote->order))) remote = f;
    }
  } catch (const Error& e) {
    remote = Failure{str_cat("node 0's launcher is unreachable (", e.what(), ")"), true};
  }
}

// Every 250 ms with several nodes: a failure elsewhere stops this node's ranks too.
void Supervisor::watch_remote() {
  if (c_.N == 1 || remote || Clock::now() - last_remote_check_ <= Ms(250)) return;
  last_remote_check_ = Clock::now();
  check_remote();
  if (remote) {
    bool local_running = std::any_of(kids_.begin(), kids_.end(), [](const Child& c) { return !c.exited; });
    if (local_running) start_stopping();
  }
}

// Stopping: SIGTERM once the settle time is over, SIGKILL once the grace period is over too.
void Supervisor::escalate() {
  auto now = Clock::now();
  if (stopping_ && !term_sent && now >= settle_deadline_) {
    signal_live(SIGTERM);
    term_sent = true;
    kill_deadline_ = now + o_.grace;
  }
  if (term_sent && !kill_sent_ && now >= kill_deadline_) {
    signal_live(SIGKILL);
    kill_sent_ = true;
  }
}

void Supervisor::signal_live(int sig) {
  for (auto& c : kids_)
    if (!c.exited) {
      ::kill(-c.pid, sig);
      // a stopped rank (SIGSTOP, Ctrl-Z) acts on SIGTERM only once it runs again
      if (sig == SIGTERM) ::kill(-c.pid, SIGCONT);
    }
}

void Supervisor::start_stopping() {
  if (stopping_) return;
  stopping_ = true;
  settle_deadline_ = Clock::now() + o_.settle;
}

// The report phase, once every local rank exited: collects the other nodes' outcome (node 0
// keeps its store up until they finish) and returns 0, returns 128+signal, or throws the failure.
int conclude(Supervisor& s, const NodeCtx& c, LauncherStore& ls) {
  if (c.k == 0 && !c.publish.empty()) try {  // a follower arriving now does not take part in this launch
      ls.store->set("ended", "1");
    } catch (const Error&) {
    }
  if (s.interrupted) {
    std::fprintf(stderr, "%sstopped all ranks after %s\n", c.tag.c_str(), signal_name(s.interrupted).c_str());
    // Node 0 hosts the store: keep it up (at most 5 s, or until another signal) so that the other
    // nodes read which signal stopped this one, rather than find the store gone.
    if (ls.server && c.N > 1) {
      std::fflush(stderr);
      for (const auto until = Clock::now() + Ms(5000); Clock::now() < until && !pending_signal();)
        if (ls.server->wait_clients_at_most(1, Ms(100))) break;
    }
    return 128 + s.interrupted;
  }
  // A local failure is often the echo of a remote one: give the other launchers a moment to report.
  if (c.N > 1 && !s.failures.empty() && !s.remote) {
    const auto until = Clock::now() + Ms(2000);
    while (!s.remote && Clock::now() < until) {
      s.check_remote();
      if (!s.remote) std::this_thread::sleep_for(Ms(100));
    }
  }
  // Node 0 hosts the store: keep it up until every other node is finished.
  if (s.failures.empty() && !s.remote) {
    ls.store->set(str_cat("done/", c.k), "1");
    if (c.k == 0) {
      if (int rc = wait_for_nodes_to_finish(*ls.store, c, s.remote, s.elastic())) return rc;
    }
  }
  // Node 0's store outlives this function only briefly: let the other launchers read the outcome.
  if (ls.server && c.N > 1) ls.server->wait_clients_at_most(1, Ms(10000));
  if (s.failures.empty() && !s.remote && (c.k == 0 || s.left.empty())) return 0;
  if (s.failures.empty() && !s.remote)  // elastic: this node's ranks left; the job went on without them
    fail(describe_failures(s.left, std::nullopt, false), "; this node left the job, which went on without it");
  fail(describe_failures(s.failures, s.remote, s.term_sent));
}

}  // namespace

std::string loopback_master_error(const std::string& master, int nnodes) {
  return str_cat("--master-addr ", master, " is a loopback address, but with --nnodes ", nnodes,
                 " the other nodes must reach node 0 over the network: on each of them ", master,
                 " is that node itself, so they would wait for a store that never answers. Give every node node 0's "
                 "address on a network they share (e.g. --master-addr 10.0.0.1; `nanochat doctor --nnodes ",
                 nnodes,
                 " --master-addr ADDR` checks it). To run all the nodes on this one machine (tests), pass "
                 "--allow-loopback-master or set NANOCHAT_ALLOW_LOOPBACK_MASTER=1");
}

std::string loopback_master_problem(const std::string& master, int nnodes) {
  if (nnodes <= 1) return "";
  if (is_loopback_literal(master)) return loopback_master_error(master, nnodes);
  if (!resolves_to_loopback(master)) return "";
  std::string addrs;
  for (const auto& a : resolve_numeric(master)) addrs += (addrs.empty() ? "" : ", ") + a;
  return str_cat("--master-addr ", master, " resolves to ", addrs, " on this host (", host_name(),
                 "): a loopback address (Debian and Ubuntu map a machine's own name to 127.0.1.1 in /etc/hosts), "
                 "which no other host can reach, so with --nnodes ",
                 nnodes,
                 " the nodes would wait for each other until the rendezvous timeout. Give every node node 0's "
                 "address on your LAN instead (e.g. --master-addr 192.168.1.10; `hostname -I` on node 0 lists its "
                 "addresses), or map ",
                 master, " to that address in /etc/hosts on every node; `nanochat doctor --nnodes ", nnodes,
                 " --master-addr ADDR` checks it. To run all the nodes on this one machine (tests), pass "
                 "--allow-loopback-master or set NANOCHAT_ALLOW_LOOPBACK_MASTER=1");
}

int launch(const LaunchOptions& o) {
  if (!o.placement.ranks.empty() && static_cast<int>(o.placement.ranks.size()) != o.nproc_per_node)
    fail("internal: the placement has ", o.placement.ranks.size(), " ranks but --nproc-per-node is ", o.nproc_per_node);
  NodeCtx c = plan_node(o);
  SignalGuard signals;
  LauncherStore ls;
  if (int rc = join_launchers(c, ls)) return rc;

  std::string threads = rank_threads(o);
  if (!o.placement.ranks.empty()) {
    threads.clear();
    for (const auto& r : o.placement.ranks) threads += str_cat(threads.empty() ? "" : "/", r.threads);
  }
  if (ls.joining)
    std::fprintf(stderr,
                 "%sthe elastic job at %s is already training: this node's %d rank%s ask%s node 0 to admit them at "
                 "its next step boundary; OMP_NUM_THREADS=%s, %s\n",
                 c.tag.c_str(), host_port(c.master, c.port).c_str(), c.P, c.P == 1 ? "" : "s", c.P == 1 ? "s" : "",
                 threads.c_str(), rank_address(o, c).c_str());
  else
    std::fprintf(stderr, "%s%s of WORLD_SIZE=%d, OMP_NUM_THREADS=%s, store at %s, %s\n", c.tag.c_str(),
                 rank_range(c.first_rank(), c.P).c_str(), c.world_at_start(), threads.c_str(),
                 host_port(c.master, c.port).c_str(), rank_address(o, c).c_str());
  if (!o.placement.summary.empty()) std::fprintf(stderr, "%s%s\n", c.tag.c_str(), o.placement.summary.c_str());
  std::fflush(stderr);
  LaunchOptions followed;  // a follower's ranks run what node 0 published
  if (ls.args) {
    followed = o;
    followed.args = *ls.args;
  }
  std::vector<Child> kids = start_ranks(ls.args ? followed : o, c, threads, ls.joining);

  Supervisor s(o, c, *ls.store, kids, signals.r.get());
  s.run();
  return conclude(s, c, ls);
}

}  // namespace nanochat::cluster
