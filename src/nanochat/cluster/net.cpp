#include "nanochat/cluster/net.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "nanochat/core/error.h"

namespace nanochat::cluster {

Ms remaining(Clock::time_point deadline) {
  auto now = Clock::now();
  if (now >= deadline) return Ms(0);
  return std::chrono::duration_cast<Ms>(deadline - now) + Ms(1);
}

std::string errno_str(int err) {
  char buf[256];
  // GNU strerror_r returns a char* that may or may not point into buf.
  const char* s = strerror_r(err, buf, sizeof(buf));
  return std::string(s);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return str_cat("[", host, "]:", port);
  return str_cat(host, ":", port);
}

void tune_tcp_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = 15, intvl = 5, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

namespace {

struct AddrInfoList {
  addrinfo* head = nullptr;
  ~AddrInfoList() {
    if (head) freeaddrinfo(head);
  }
};

// getaddrinfo for host:port; returns the gai error code (0 on success).
int resolve(const std::string& host, int port, int socktype, AddrInfoList* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = AI_ADDRCONFIG;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &out->head);
  if (rc == EAI_NONAME || rc == EAI_ADDRFAMILY) {
    // AI_ADDRCONFIG hides loopback-only hosts on machines without a configured address.
    hints.ai_flags = 0;
    rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &out->head);
  }
  return rc;
}

std::string gai_str(int rc) {
  if (rc == EAI_SYSTEM) return errno_str(errno);
  return gai_strerror(rc);
}

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(sa, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

bool is_loopback_sockaddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

namespace {

// True when `fd` is connected to itself: a connection to a port of this host where nothing listens
// yet can get that very port as its own (ephemeral) port, and TCP's simultaneous open then connects
// the socket to itself. It also holds the port, so the server that was about to bind it fails.
bool connected_to_itself(int fd) {
  sockaddr_storage mine{}, peer{};
  socklen_t ml = sizeof mine, pl = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &ml) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0)
    return false;
  return ml == pl && std::memcmp(&mine, &peer, ml) == 0;
}

}  // namespace

Fd tcp_connect_once(const std::string& host, int port, Ms attempt_timeout, std::string* err) {
  AddrInfoList ai;
  int rc = resolve(host, port, SOCK_STREAM, &ai);
  if (rc != 0) {
    *err = str_cat("cannot resolve '", host, "': ", gai_str(rc));
    return Fd();
  }
  for (addrinfo* a = ai.head; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd) {
      *err = str_cat("socket: ", errno_str(errno));
      continue;
    }
    int r = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno != EINPROGRESS) {
      *err = errno_str(errno);
      continue;
    }
    if (r != 0) {
      pollfd p{fd.get(), POLLOUT, 0};
      int pr;
      do {
        pr = ::poll(&p, 1, static_cast<int>(attempt_timeout.count()));
      } while (pr < 0 && errno == EINTR);
      if (pr == 0) {
        *err = str_cat("connection attempt timed out after ", attempt_timeout.count(),
                       " ms (is a firewall dropping packets to this port?)");
        continue;
      }
      int soerr = 0;
      socklen_t len = sizeof(soerr);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &len);
      if (pr < 0 || soerr != 0) {
        *err = errno_str(pr < 0 ? errno : soerr);
        continue;
      }
    }
    if (connected_to_itself(fd.get())) {  // nothing listens there yet: as refused (closing frees the port)
      *err = errno_str(ECONNREFUSED);
      continue;
    }
    int flags = fcntl(fd.get(), F_GETFL, 0);
    fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    tune_tcp_socket(fd.get());
    return fd;
  }
  if (err->empty()) *err = "no address to connect to";
  return Fd();
}

namespace {

// A failed send or receive: ConnectionLost when the peer closed or reset the connection, else Error.
[[noreturn]] void lost_connection(const std::string& what, int err) {
  const std::string msg = str_cat("lost the connection to ", what, ": ", errno_str(err));
  if (err == ECONNRESET || err == EPIPE) throw ConnectionLost(msg);
  throw Error(msg);
}

}  // namespace

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLOUT, 0};
    int pr = ::poll(&pfd, 1, static_cast<int>(remaining(deadline).count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) fail("timed out sending to ", what);
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      lost_connection(what, errno);
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    pollfd pfd{fd, POLLIN, 0};
    int pr = ::poll(&pfd, 1, static_cast<int>(remaining(deadline).count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) fail("timed out waiting for an answer from ", what);
    ssize_t k = ::recv(fd, p + got, n - got, MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      lost_connection(what, errno);
    }
    if (k == 0) {
      if (got == 0) return false;
      throw ConnectionLost(str_cat("lost the connection to ", what, " in the middle of a message"));
    }
    got += static_cast<size_t>(k);
  }
  return true;
}

std::vector<InterfaceAddr> list_interfaces() {
  std::vector<InterfaceAddr> out;
  ifaddrs* ifa = nullptr;
  if (getifaddrs(&ifa) != 0) return out;
  for (ifaddrs* i = ifa; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    InterfaceAddr a;
    a.name = i->ifa_name;
    a.family = fam;
    a.address = numeric_host(i->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    a.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    a.up = (i->ifa_flags & IFF_UP) != 0;
    out.push_back(a);
  }
  freeifaddrs(ifa);
  return out;
}

std::string route_address_to(const std::string& host, int port) {
  AddrInfoList ai;
  int rc = resolve(host, port, SOCK_DGRAM, &ai);
  if (rc != 0) fail("cannot resolve the master address '", host, "': ", gai_str(rc));
  std::string last = "no address";
  for (addrinfo* a = ai.head; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last = errno_str(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      last = errno_str(errno);
      continue;
    }
    return numeric_host(reinterpret_cast<sockaddr*>(&ss), len);
  }
  fail("no route from this host to the master ", host_port(host, port), ": ", last);
}

std::string interface_of_address(const std::string& address) {
  for (const auto& i : list_interfaces())
    if (i.address == address) return i.name;
  // Link-local IPv6 addresses come back from getnameinfo with a "%iface" suffix.
  auto pct = address.find('%');
  if (pct != std::string::npos) return address.substr(pct + 1);
  return "";
}

bool resolves_to_loopback(const std::string& host) {
  AddrInfoList ai;
  if (resolve(host, 0, SOCK_STREAM, &ai) != 0 || !ai.head) return false;
  for (addrinfo* a = ai.head; a; a = a->ai_next)
    if (!is_loopback_sockaddr(a->ai_addr)) return false;
  return true;
}

std::vector<std::string> resolve_numeric(const std::string& host) {
  std::vector<std::string> out;
  AddrInfoList ai;
  if (resolve(host, 0, SOCK_STREAM, &ai) != 0) return out;
  for (addrinfo* a = ai.head; a; a = a->ai_next) {
    std::string h = numeric_host(a->ai_addr, a->ai_addrlen);
    if (std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  }
  return out;
}

bool is_loopback_literal(const std::string& host) {
  std::string h = host;
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (!h.empty() && h.back() == '.') h.pop_back();
  if (h == "localhost" || h == "ip6-localhost" || h == "ip6-loopback" || h == "localhost.localdomain") return true;
  if (h.size() > 10 && h.compare(h.size() - 10, 10, ".localhost") == 0) return true;
  sockaddr_in v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    return is_loopback_sockaddr(reinterpret_cast<sockaddr*>(&v4));
  }
  sockaddr_in6 v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    return is_loopback_sockaddr(reinterpret_cast<sockaddr*>(&v6));
  }
  return false;
}

namespace {

// Socket inodes bound to local TCP `port` in one /proc/net/tcp{,6} table, split by whether the
// socket listens (state 0A).
void scan_tcp_table(const char* path, int port, std::set<unsigned long>* listening, std::set<unsigned long>* other) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout;
    unsigned long inode = 0;
    if (!(is >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
    auto colon = local.rfind(':');
    if (colon == std::string::npos || inode == 0) continue;
    if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
    (state == "0A" ? listening : other)->insert(inode);
  }
}

std::string command_line_of(long pid) {
  std::ifstream f(str_cat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  std::replace(s.begin(), s.end(), '\0', ' ');
  if (s.size() > 160) s = s.substr(0, 157) + "...";
  return s.empty() ? "?" : s;
}

}  // namespace

std::vector<PortHolder> tcp_port_holders(int port) {
  std::vector<PortHolder> out;
  try {
    std::set<unsigned long> listening, other;
    scan_tcp_table("/proc/net/tcp", port, &listening, &other);
    scan_tcp_table("/proc/net/tcp6", port, &listening, &other);
    const std::set<unsigned long>& wanted = listening.empty() ? other : listening;
    if (wanted.empty()) return out;
    DIR* proc = opendir("/proc");
    if (!proc) return out;
    while (dirent* d = readdir(proc)) {
      char* end = nullptr;
      long pid = std::strtol(d->d_name, &end, 10);
      if (pid <= 0 || *end != '\0') continue;
      std::string fd_dir = str_cat("/proc/", pid, "/fd");
      DIR* fds = opendir(fd_dir.c_str());
      if (!fds) continue;  // another user's process
      bool holds = false;
      while (dirent* e = readdir(fds)) {
        char target[64];
        ssize_t n = readlink((fd_dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        unsigned long inode = 0;
        if (std::sscanf(target, "socket:[%lu]", &inode) == 1 && wanted.count(inode)) holds = true;
        if (holds) break;
      }
      closedir(fds);
      if (holds) out.push_back({pid, command_line_of(pid)});
    }
    closedir(proc);
  } catch (const std::exception&) {
  }
  return out;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == 0) return "unknown-host";
  return buf;
}

Fd tcp_bind_any(int port, int* bound_port, int* err) {
  *err = 0;
  Fd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd) {
    int zero = 0, one = 1;
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      socklen_t len = sizeof(a);
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
      *bound_port = ntohs(a.sin6_port);
      return fd;
    }
    if (errno == EADDRINUSE) {
      *err = EADDRINUSE;
      return Fd();
    }
  }
  fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    *err = errno;
    return Fd();
  }
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    *err = errno;
    return Fd();
  }
  socklen_t len = sizeof(a);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *bound_port = ntohs(a.sin_port);
  return fd;
}

bool tcp_port_free(int port) {
  int p = 0, err = 0;
  return static_cast<bool>(tcp_bind_any(port, &p, &err));
}

int pick_free_port() {
  int p = 0, err = 0;
  Fd fd = tcp_bind_any(0, &p, &err);
  if (!fd) fail("cannot bind any TCP port on this host: ", errno_str(err));
  return p;
}

}  // namespace nanochat::cluster
