#include "nanochat/dist/launcher.h"

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
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "nanochat/core/error.h"
#include "nanochat/dist/env.h"
#include "nanochat/dist/store.h"

extern char** environ;

namespace nanochat::dist {

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
  struct sigaction old_int {}, old_term {}, old_hup {};
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

// A signal arrived while the launcher waited for the other nodes.
struct Interrupted {
  int sig;
};

void throw_if_signalled() {
  if (int s = g_signal.load()) throw Interrupted{s};
}

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

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? str_cat("SIG", abbrev) : str_cat("signal ", sig);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return str_cat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return str_cat("was killed by signal ", WTERMSIG(status), " (", signal_name(WTERMSIG(status)), ")");
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
  bool exited = false;
  int status = 0;
};

// A failure, local or reported by another node's launcher.
struct Failure {
  std::string desc;     // "rank 2 (host h, pid 7) was killed by signal 9 (SIGKILL)"
  bool crash = false;   // killed by a signal we did not send: the likely root cause
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

// Reads what is available; emits complete lines with the rank prefix. Returns false at EOF.
bool pump(Fd& fd, std::string& buf, int out_fd, const std::string& prefix) {
  char tmp[65536];
  for (;;) {
    ssize_t k = ::read(fd.get(), tmp, sizeof(tmp));
    if (k > 0) {
      buf.append(tmp, static_cast<size_t>(k));
      size_t start = 0, nl;
      while ((nl = buf.find('\n', start)) != std::string::npos) {
        write_line(out_fd, prefix, buf.substr(start, nl - start));
        start = nl + 1;
      }
      buf.erase(0, start);
      if (buf.size() > (1u << 16)) {  // an endless line: emit it in pieces
        write_line(out_fd, prefix, buf);
        buf.clear();
      }
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (!buf.empty()) write_line(out_fd, prefix, buf);
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
            int out_w, int err_w) {
  // Everything the child needs is built before fork: between fork and exec only async-signal-safe
  // calls are allowed (the launcher may run the store thread).
  std::vector<char*> argv, envp;
  std::string argv0 = "nanochat";
  argv.push_back(argv0.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) fail("cannot start a rank: fork failed: ", errno_str(errno));
  if (pid == 0) {
    setpgid(0, 0);  // Ctrl-C reaches the launcher only; it forwards the signal
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher dies -> the ranks stop
    if (getppid() != parent) _exit(127);
    dup2(out_w, 1);
    dup2(err_w, 2);
    execve(program.c_str(), argv.data(), envp.data());
    const char msg[] = "nanochat run: cannot execute the rank program\n";
    ssize_t ignored = ::write(2, msg, sizeof(msg) - 1);
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

// This node's place in the job, for the rendezvous and its messages.
struct NodeCtx {
  int N = 1, P = 1, k = 0;
  std::string host, master;
  int port = 0;
  Ms rdzv{0};
};

// The launchers of all nodes meet in the store: each registers its shape, node 0 checks them and
// says "go" once all have joined. Prints what it waits for every wait_report_interval(). Throws
// Interrupted on a signal, nanochat::Error on a mismatch or when the rendezvous deadline passes.
void meet(PrefixStore& store, const NodeCtx& c, WaitReporter& report, Clock::time_point deadline) {
  const int N = c.N, P = c.P, k = c.k;
  const std::string at = host_port(c.master, c.port);
  if (store.add(str_cat("claim/", k), 1) > 1) {
    std::string other = "another launcher";
    if (auto v = store.try_get(str_cat("node/", k))) other = str_cat("the launcher on host ", nlohmann::json::parse(*v).value("host", "?"));
    fail("--node-rank ", k, " is used twice: by this launcher (host ", c.host, ") and by ", other,
         "; give every node a distinct --node-rank in [0, ", N, ")");
  }
  nlohmann::json me = {{"nnodes", N}, {"nproc_per_node", P}, {"host", c.host}, {"pid", static_cast<long>(getpid())}};
  store.set(str_cat("node/", k), me.dump());
  auto check_shape = [&](int j, const std::string& v) {
    auto nj = nlohmann::json::parse(v);
    if (nj.value("nnodes", 0) == N && nj.value("nproc_per_node", 0) == P) return;
    std::string e = str_cat("the nodes of this job disagree: node ", k, " (host ", c.host, ") has --nnodes ", N,
                            " --nproc-per-node ", P, " but node ", j, " (host ", nj.value("host", "?"), ") has --nnodes ",
                            nj.value("nnodes", 0), " --nproc-per-node ", nj.value("nproc_per_node", 0),
                            "; start every node with the same --nnodes and --nproc-per-node");
    store.set("error", e);
    fail(e);
  };
  // Node 0 checks every node each round; the others only look for "go" (and, when they report or
  // give up, for who is missing), so the store's load does not grow with the square of the nodes.
  auto missing_nodes = [&](bool check) {
    std::vector<int> missing;
    for (int j = 0; j < N; ++j) {
      auto v = store.try_get(str_cat("node/", j));
      if (!v) missing.push_back(j);
      else if (check) check_shape(j, *v);
    }
    return missing;
  };
  bool checked_node0 = k == 0;
  for (;;) {
    throw_if_signalled();
    if (auto e = store.try_get("error")) fail(*e);
    if (store.try_get("go")) return;
    if (!checked_node0) {
      if (auto v = store.try_get("node/0")) {
        check_shape(0, *v);
        checked_node0 = true;
      }
    }
    std::vector<int> missing;
    if (k == 0) {
      missing = missing_nodes(true);
      if (missing.empty()) {
        store.set("go", "1");
        return;
      }
    }
    if (Clock::now() >= deadline) {
      if (k != 0) missing = missing_nodes(false);
      std::string e = k == 0 ? str_cat(node_list(missing), " of --nnodes ", N, " never joined the store at ", at,
                                       " within ", c.rdzv.count() / 1000.0,
                                       " s; start `nanochat run` on every node with the same --master-addr/--master-port")
                             : str_cat("node 0 (", at, ") did not start the job within ", c.rdzv.count() / 1000.0,
                                       " s: ", missing.empty() ? "it has not said go" : node_list(missing) + " never joined");
      if (k == 0) store.set("error", e);
      fail(e);
    }
    report.tick([&] {
      if (k != 0) missing = missing_nodes(false);
      return missing.empty() ? str_cat("waiting for node 0 to start the job at ", at)
                             : str_cat("waiting for ", node_list(missing), " of ", N, " to join at ", at);
    });
    std::this_thread::sleep_for(Ms(50));
  }
}

}  // namespace

std::string loopback_master_error(const std::string& master, int nnodes) {
  return str_cat("--master-addr ", master, " is a loopback address, but with --nnodes ", nnodes,
                 " the other nodes must reach node 0 over the network: on each of them ", master,
                 " is that node itself, so they would wait for a store that never answers. Give every node node 0's "
                 "address on a network they share (e.g. --master-addr 10.0.0.1; `nanochat doctor --nnodes ", nnodes,
                 " --master-addr ADDR` checks it). To run all the nodes on this one machine (tests), pass "
                 "--allow-loopback-master or set NANOCHAT_ALLOW_LOOPBACK_MASTER=1");
}

int launch(const LaunchOptions& o) {
  if (o.nnodes < 1) fail("--nnodes must be at least 1 (got ", o.nnodes, ")");
  if (o.nproc_per_node < 1) fail("--nproc-per-node must be at least 1 (got ", o.nproc_per_node, ")");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    fail("--node-rank ", o.node_rank, " is outside [0, --nnodes ", o.nnodes, ")");
  if (o.args.empty())
    fail("nanochat run needs a subcommand to start on every rank, e.g. `nanochat run --nproc-per-node 2 base-train "
         "--depth 4`");
  if (o.master_port < 1 || o.master_port > 65535) fail("--master-port ", o.master_port, " is not a TCP port (1-65535)");
  std::string master = o.master_addr;
  if (master.empty()) {
    if (o.nnodes > 1) fail("--master-addr is required with --nnodes ", o.nnodes, ": give every node the address of node 0");
    master = "127.0.0.1";
  }
  if (o.nnodes > 1 && is_loopback_literal(master) && !loopback_master_allowed(o)) fail(loopback_master_error(master, o.nnodes));
  std::string token = o.job_token.empty() ? job_token_from_env() : o.job_token;
  if (token.empty() && o.nnodes == 1) token = random_token();

  const int N = o.nnodes, P = o.nproc_per_node, k = o.node_rank, W = N * P;
  const std::string host = host_name();
  const std::string tag = str_cat("nanochat run (node ", k, " on ", host, "): ");

  SignalGuard signals;
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<StoreClient> client_ptr;
  std::unique_ptr<PrefixStore> store_ptr;
  const NodeCtx ctx{N, P, k, host, master, o.master_port, o.rendezvous_timeout};
  try {
    if (k == 0) server = std::make_unique<StoreServer>(o.master_port, token, master == "127.0.0.1" ? host : master);
    WaitReporter report(tag, o.rendezvous_timeout);
    StoreClientOptions co;
    co.host = master;
    co.port = o.master_port;
    co.job_token = token;
    co.connect_timeout = o.rendezvous_timeout;
    co.identity = str_cat("launcher of node ", k, " on ", host, " (pid ", getpid(), ")");
    co.on_retry = [&](const std::string& err) {
      throw_if_signalled();
      report.tick([&] { return str_cat("waiting for node 0's store at ", host_port(master, o.master_port), ": ", err); });
    };
    client_ptr = std::make_unique<StoreClient>(co);
    store_ptr = std::make_unique<PrefixStore>(*client_ptr, "nc/launch/");
    client_ptr->set_will(str_cat("nc/launch/gone/", k), str_cat("node ", k, "'s launcher (host ", host, ")"));
    meet(*store_ptr, ctx, report, Clock::now() + o.rendezvous_timeout);
  } catch (const Interrupted& i) {
    if (store_ptr) try {
        store_ptr->set("error", str_cat("node ", k, "'s launcher (host ", host, ") was stopped by ", signal_name(i.sig),
                                        " before the job started"));
      } catch (const Error&) {
      }
    std::fprintf(stderr, "%sgot %s while waiting for the other nodes; stopped (no rank was started)\n", tag.c_str(),
                 signal_name(i.sig).c_str());
    std::fflush(stderr);
    return 128 + i.sig;
  }
  PrefixStore& store = *store_ptr;

  // Threads per rank: the flag, else the user's OMP_NUM_THREADS, else this node's cores split.
  std::string threads;
  if (o.threads_per_rank > 0) {
    threads = std::to_string(o.threads_per_rank);
  } else if (const char* t = std::getenv("OMP_NUM_THREADS"); t && *t) {
    threads = t;
  } else {
    threads = std::to_string(std::max(1, physical_cores() / P));
  }
  std::fprintf(stderr, "%s%s of WORLD_SIZE=%d, OMP_NUM_THREADS=%s, store at %s\n", tag.c_str(),
               rank_range(k * P, P).c_str(), W, threads.c_str(), host_port(master, o.master_port).c_str());
  std::fflush(stderr);

  std::vector<Child> kids(P);
  for (int l = 0; l < P; ++l) {
    Child& c = kids[l];
    c.rank = k * P + l;
    int po[2], pe[2];
    if (::pipe2(po, O_CLOEXEC) != 0 || ::pipe2(pe, O_CLOEXEC) != 0) fail("pipe: ", errno_str(errno));
    Fd out_w(po[1]), err_w(pe[1]);
    c.out.reset(po[0]);
    c.err.reset(pe[0]);
    fcntl(c.out.get(), F_SETFL, O_NONBLOCK);
    fcntl(c.err.get(), F_SETFL, O_NONBLOCK);
    std::vector<std::pair<std::string, std::string>> vars = {
        {"RANK", std::to_string(c.rank)},         {"LOCAL_RANK", std::to_string(l)},
        {"WORLD_SIZE", std::to_string(W)},        {"LOCAL_WORLD_SIZE", std::to_string(P)},
        {"GROUP_RANK", std::to_string(k)},        {"MASTER_ADDR", master},
        {"MASTER_PORT", std::to_string(o.master_port)}, {"NANOCHAT_STORE_HOSTED", "1"},
        {"NANOCHAT_JOB_TOKEN", token},            {"OMP_NUM_THREADS", threads}};
    if (!o.iface.empty()) vars.push_back({"NANOCHAT_SOCKET_IFNAME", o.iface});
    c.pid = spawn(o.program, o.args, child_environment(vars), out_w.get(), err_w.get());
  }

  // Supervise: relay output, reap, react to failures and signals.
  std::vector<Failure> failures;  // local, in the order noticed
  std::optional<Failure> remote;
  int interrupted = 0;
  bool stopping = false, term_sent = false, kill_sent = false;
  Clock::time_point settle_deadline{}, kill_deadline{};
  auto last_remote_check = Clock::now();
  auto signal_live = [&](int sig) {
    for (auto& c : kids)
      if (!c.exited) ::kill(-c.pid, sig);
  };
  // Another node's launcher reported a failed rank, or vanished.
  auto check_remote = [&]() {
    try {
      for (int j = 0; j < N && !remote; ++j) {
        if (j == k) continue;
        if (auto v = store.try_get(str_cat("failure/", j))) {
          auto js = nlohmann::json::parse(*v);
          remote = Failure{js.value("desc", "a rank on node " + std::to_string(j) + " failed"), js.value("crash", false)};
        } else if (auto g = store.try_get(str_cat("gone/", j))) {
          remote = Failure{*g + " disappeared (its connection to the store dropped)", true};
        }
      }
    } catch (const Error& e) {
      remote = Failure{str_cat("node 0's launcher is unreachable (", e.what(), ")"), true};
    }
  };
  auto start_stopping = [&]() {
    if (stopping) return;
    stopping = true;
    settle_deadline = Clock::now() + o.settle;
  };
  for (;;) {
    std::vector<pollfd> pfds;
    pfds.push_back({signals.r.get(), POLLIN, 0});
    for (auto& c : kids) {
      if (c.out) pfds.push_back({c.out.get(), POLLIN, 0});
      if (c.err) pfds.push_back({c.err.get(), POLLIN, 0});
    }
    bool all_exited = std::all_of(kids.begin(), kids.end(), [](const Child& c) { return c.exited; });
    if (all_exited && pfds.size() == 1) break;
    ::poll(pfds.data(), pfds.size(), 100);
    {
      char b[64];
      while (::read(signals.r.get(), b, sizeof(b)) > 0) {
      }
    }
    for (auto& c : kids) {
      std::string prefix = str_cat("[rank ", c.rank, "] ");
      if (c.out) pump(c.out, c.out_buf, 1, prefix);
      if (c.err) pump(c.err, c.err_buf, 2, prefix);
    }
    int sig = g_signal.exchange(0);
    if (sig != 0) {
      if (!interrupted) {
        interrupted = sig;
        // SIGHUP: the terminal went away; the ranks (in their own process groups) get SIGTERM.
        const int fwd = sig == SIGHUP ? SIGTERM : sig;
        std::fprintf(stderr, "%sgot %s, %s\n", tag.c_str(), signal_name(sig).c_str(),
                     fwd == sig ? "forwarding it to the ranks" : "stopping the ranks with SIGTERM");
        std::fflush(stderr);
        signal_live(fwd);
        term_sent = true;
        kill_deadline = Clock::now() + o.grace;
      } else {
        signal_live(SIGKILL);  // a second Ctrl-C: stop now
        kill_sent = true;
      }
    }
    for (auto& c : kids) {
      if (c.exited) continue;
      int st = 0;
      pid_t r = ::waitpid(c.pid, &st, WNOHANG);
      if (r != c.pid) continue;
      c.exited = true;
      c.status = st;
      bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (ok || interrupted) continue;
      Failure f;
      f.desc = str_cat("rank ", c.rank, " (host ", host, ", pid ", c.pid, ") ", describe_status(st));
      f.crash = WIFSIGNALED(st) && !term_sent;
      if (failures.empty()) {
        nlohmann::json j = {{"desc", f.desc}, {"crash", f.crash}};
        try {
          store.set(str_cat("failure/", k), j.dump());
        } catch (const Error&) {
        }
      }
      failures.push_back(f);
      start_stopping();
    }
    if (N > 1 && !remote && Clock::now() - last_remote_check > Ms(250)) {
      last_remote_check = Clock::now();
      check_remote();
      if (remote) {
        bool local_running = std::any_of(kids.begin(), kids.end(), [](const Child& c) { return !c.exited; });
        if (local_running) start_stopping();
      }
    }
    auto now = Clock::now();
    if (stopping && !term_sent && now >= settle_deadline) {
      signal_live(SIGTERM);
      term_sent = true;
      kill_deadline = now + o.grace;
    }
    if (term_sent && !kill_sent && now >= kill_deadline) {
      signal_live(SIGKILL);
      kill_sent = true;
    }
  }

  if (interrupted) {
    std::fprintf(stderr, "%sstopped all ranks after %s\n", tag.c_str(), signal_name(interrupted).c_str());
    return 128 + interrupted;
  }
  // A local failure is often the echo of a remote one: give the other launchers a moment to report.
  if (N > 1 && !failures.empty() && !remote) {
    const auto until = Clock::now() + Ms(2000);
    while (!remote && Clock::now() < until) {
      check_remote();
      if (!remote) std::this_thread::sleep_for(Ms(100));
    }
  }
  // Node 0 hosts the store: keep it up until every other node is finished.
  if (failures.empty() && !remote) {
    store.set(str_cat("done/", k), "1");
    if (k == 0) {
      const auto deadline = Clock::now() + o.rendezvous_timeout;
      WaitReporter report(tag, o.rendezvous_timeout);
      for (int j = 1; j < N && !remote;) {
        if (int sig = g_signal.load()) {
          std::fprintf(stderr, "%sgot %s while waiting for node %d to finish; stopped\n", tag.c_str(),
                       signal_name(sig).c_str(), j);
          return 128 + sig;
        }
        if (store.try_get(str_cat("done/", j))) {
          ++j;
          continue;
        }
        report.tick([&] {
          return str_cat("this node's ranks finished; keeping the store at ", host_port(master, o.master_port),
                         " up until node ", j, " of ", N, " finishes too");
        });
        if (auto v = store.try_get(str_cat("failure/", j))) {
          auto js = nlohmann::json::parse(*v);
          remote = Failure{js.value("desc", "a rank on node " + std::to_string(j) + " failed"), js.value("crash", false)};
        } else if (auto g = store.try_get(str_cat("gone/", j))) {
          remote = Failure{*g + " disappeared before its ranks finished", true};
        } else if (Clock::now() >= deadline) {
          remote = Failure{str_cat("node ", j, " did not finish within ", o.rendezvous_timeout.count() / 1000.0,
                                   " s after this node's ranks did"),
                           false};
        } else {
          std::this_thread::sleep_for(Ms(100));
        }
      }
    }
  }
  // Node 0's store outlives this function only briefly: let the other launchers read the outcome.
  if (server && N > 1) server->wait_clients_at_most(1, Ms(10000));
  if (failures.empty() && !remote) return 0;

  // Name the most likely root cause first: a rank killed by a signal we did not send.
  std::vector<Failure> all = failures;
  if (remote) all.push_back(*remote);
  auto primary = std::find_if(all.begin(), all.end(), [](const Failure& f) { return f.crash; });
  if (primary == all.end()) primary = all.begin();
  std::string msg = primary->desc;
  std::string others;
  for (auto it = all.begin(); it != all.end(); ++it)
    if (it != primary) others += (others.empty() ? "" : "; ") + it->desc;
  if (term_sent) msg += "; the launcher stopped the other ranks";
  if (!others.empty()) msg += " (also: " + others + ")";
  fail(msg);
}

}  // namespace nanochat::dist
