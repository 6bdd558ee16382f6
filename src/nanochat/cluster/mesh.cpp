#include "nanochat/cluster/mesh.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

#include "nanochat/core/error.h"

namespace nanochat::cluster {

using json = nlohmann::json;

namespace {

// Binds a listening TCP socket to the numeric `address` and `port` (0 = any) with SO_REUSEADDR,
// as Gloo does. Returns the socket and *bound, or an invalid Fd with *err = errno.
Fd listen_on(const std::string& address, int port, int backlog, int* bound, int* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* ai = nullptr;
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0 || !ai) {
    *err = EADDRNOTAVAIL;
    return Fd();
  }
  Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int on = 1;
  bool ok = fd && setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0 &&
            ::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd.get(), backlog) == 0;
  *err = ok ? 0 : errno;
  freeaddrinfo(ai);
  if (!ok) return Fd();
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

// Whether Gloo makes this side connect: its pair compares the raw address bytes, then the ports
// as stored (network byte order); the larger side connects. -1 when it cannot be told (the
// families differ, or the same address with a kernel-chosen port).
int gloo_connects(const std::string& mine, int my_port, const std::string& theirs, int their_port) {
  unsigned char a[16] = {0}, b[16] = {0};
  const bool v6a = mine.find(':') != std::string::npos, v6b = theirs.find(':') != std::string::npos;
  if (v6a != v6b || inet_pton(v6a ? AF_INET6 : AF_INET, mine.c_str(), a) != 1 ||
      inet_pton(v6b ? AF_INET6 : AF_INET, theirs.c_str(), b) != 1)
    return -1;
  int c = std::memcmp(a, b, v6a ? 16 : 4);
  if (c != 0) return c > 0 ? 1 : 0;
  if (my_port == 0 || their_port == 0) return -1;
  return static_cast<int>(htons(static_cast<uint16_t>(my_port))) - htons(static_cast<uint16_t>(their_port)) > 0;
}

// Connects to address:port until it succeeds or `deadline` passes; "" on success, else why not.
std::string probe(const std::string& address, int port, Clock::time_point deadline) {
  std::string err = "no time left to try";
  while (remaining(deadline) > Ms(0)) {
    Fd fd = tcp_connect_once(address, port, remaining(deadline), &err);
    if (fd) return "";
    if (remaining(deadline) < Ms(300)) break;
    std::this_thread::sleep_for(Ms(200));  // refused or unreachable: the answer may change
  }
  return err;
}

}  // namespace

std::string PortRange::str() const { return str_cat(first, "-", last); }

PortRange parse_port_range(const std::string& text, const std::string& what) {
  auto bad = [&] { fail(what, " '", text, "' is not a port range: use FIRST-LAST, e.g. 29600-29699 (ports 1-65535)"); };
  const auto dash = text.find('-');
  auto num = [&](const std::string& s) {
    if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) bad();
    return std::atoi(s.c_str());
  };
  PortRange r;
  r.first = num(text.substr(0, dash));
  r.last = dash == std::string::npos ? r.first : num(text.substr(dash + 1));
  if (r.first < 1 || r.last > 65535 || r.first > r.last) bad();
  return r;
}

std::optional<PortRange> port_range_from_env() {
  const char* v = std::getenv("NANOCHAT_PORT_RANGE");
  if (!v || !*v) return std::nullopt;
  return parse_port_range(v, "NANOCHAT_PORT_RANGE");
}

Ms mesh_check_timeout() {
  const auto v = env_int("NANOCHAT_MESH_CHECK_TIMEOUT");
  if (v && *v < 0)
    fail("NANOCHAT_MESH_CHECK_TIMEOUT=", *v, " must be >= 0 (seconds; 0 turns the data-plane check off)");
  return Ms(v ? *v * 1000 : 3000);
}

void check_port_range_size(const PortRange& range, int local_world_size, const std::string& what) {
  if (range.size() >= local_world_size) return;
  fail(what, " has ", range.size(), range.size() == 1 ? " port" : " ports", " but this node runs ", local_world_size,
       " ranks, each listening on its own port (local rank i on the first port + i); use e.g. ", range.first, "-",
       range.first + local_world_size - 1, " and open it on every node");
}

int pinned_port(const PortRange& range, int local_rank) { return range.first + local_rank; }

MeshCheck::MeshCheck(const DistEnv& env, const std::string& host, const std::string& address,
                     const std::optional<PortRange>& range)
    : env_(env), host_(host), address_(address), range_(range) {
  const int r = env.rank;
  const int want = range_ ? pinned_port(*range_, env.local_rank) : 0;
  int err = 0;
  listener_ = listen_on(address_, want, 4 * env.world_size + 16, &port_, &err);
  if (listener_) return;
  if (!range_)
    fail("rank ", r, " (host ", host_, ") cannot listen on ", address_, " for the data plane: ", errno_str(err));
  std::string busy;
  if (err == EADDRINUSE) {
    std::string who;
    for (const PortHolder& h : tcp_port_holders(want))
      who += str_cat(who.empty() ? "" : "; ", "pid ", h.pid, " (", h.command, ")");
    busy = who.empty() ? "; another process holds it (one this user cannot see; `ss -ltnp` as root names it): stop it "
                         "or pick another --port-range"
                       : str_cat("; it is held by ", who, ": stop it or pick another --port-range");
  }
  fail("rank ", r, " (host ", host_, ") cannot listen on its data-plane port ", want, " (--port-range ", range_->str(),
       ", local rank ", env_.local_rank, ") on ", address_, ": ", errno_str(err), busy);
}

MeshCheck::~MeshCheck() = default;

json MeshCheck::published() const { return {{"port", port_}, {"pinned", range_.has_value()}}; }

void MeshCheck::run(Store& store, const std::vector<json>& infos, Ms probe_timeout, Clock::time_point deadline) {
  const int W = env_.world_size, r = env_.rank;
  struct Target {
    int peer;
    std::string address;
    int port;
    std::string error;
  };
  std::vector<Target> targets;
  for (int p = 0; p < W; ++p) {
    if (p == r) continue;
    const json& in = infos[static_cast<size_t>(p)];
    const std::string addr = in.value("address", "");
    const int theirs = in.value("port", 0);
    const bool pinned = range_ && in.value("pinned", false);
    const int dir = gloo_connects(address_, pinned ? port_ : 0, addr, pinned ? theirs : 0);
    if (dir != 0 && theirs > 0) targets.push_back({p, addr, theirs, ""});
  }
  const auto probe_deadline = Clock::now() + probe_timeout;
  {
    std::vector<std::thread> threads;
    for (auto& t : targets)
      threads.emplace_back([&t, probe_deadline] { t.error = probe(t.address, t.port, probe_deadline); });
    for (auto& th : threads) th.join();
  }
  json failures = json::array();
  for (const auto& t : targets)
    if (!t.error.empty())
      failures.push_back({{"peer", t.peer}, {"address", t.address}, {"port", t.port}, {"error", t.error}});
  store.set(str_cat("mesh/", r), failures.dump());

  std::vector<std::string> keys;
  for (int j = 0; j < W; ++j) keys.push_back(str_cat("mesh/", j));
  try {
    store.wait(keys, remaining(deadline));
  } catch (const StoreTimeout&) {
    std::string missing;
    for (int j = 0; j < W; ++j)
      if (!store.check({keys[static_cast<size_t>(j)]}))
        missing += str_cat(missing.empty() ? "" : ", ", "rank ", j, " (host ",
                           infos[static_cast<size_t>(j)].value("host", "?"), ")");
    fail("rank ", r, " (host ", host_, "): the data-plane check of the other ranks did not finish: ", missing,
         " never reported (see that rank's output; it may have failed or be stuck)");
  }
  listener_.reset();  // every peer has finished probing: Gloo may bind the port now

  auto host_of = [&](int j) { return infos[static_cast<size_t>(j)].value("host", std::string("?")); };
  std::string lines;
  std::set<std::string> closed;  // "host (address ports)" that did not accept
  int n = 0;
  for (int j = 0; j < W; ++j) {
    for (const auto& f : json::parse(store.get(keys[static_cast<size_t>(j)], Ms(5000)))) {
      const int p = f.at("peer").get<int>();
      const std::string where = host_port(f.at("address").get<std::string>(), f.at("port").get<int>());
      if (++n <= 20)
        lines += str_cat("\n  rank ", j, " (host ", host_of(j), ") cannot connect to rank ", p, " (host ", host_of(p),
                         ") at ", where, ": ", f.at("error").get<std::string>());
      closed.insert(str_cat(host_of(p), " (", where, ")"));
    }
  }
  if (n == 0) return;
  if (n > 20) lines += str_cat("\n  ... and ", n - 20, " more");
  std::string hosts;
  for (const auto& h : closed) hosts += (hosts.empty() ? "" : ", ") + h;
  const std::string advice =
      range_
          ? str_cat("Open TCP ports ", range_->str(), " (--port-range) for the other nodes in the firewall of ", hosts,
                    ", e.g. `ufw allow proto tcp from <other nodes> to any port ", range_->first, ":", range_->last,
                    "` or `iptables -A INPUT -p tcp --dport ", range_->first, ":", range_->last, " -j ACCEPT`")
          : str_cat("Gloo listens on ephemeral ports here (no --port-range), which ", hosts,
                    " does not accept: pin them with `nanochat run --port-range A-B` (NANOCHAT_PORT_RANGE) on every "
                    "node and open that range in every node's firewall");
  fail("the ranks cannot reach each other's data-plane (Gloo) ports, checked before training:", lines, "\n", advice,
       " (docs/multi-machine.md, section 3). If the hosts have several networks, pick one they share with --iface.");
}

}  // namespace nanochat::cluster
