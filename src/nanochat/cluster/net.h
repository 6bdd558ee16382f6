#pragma once
// Small POSIX socket helpers shared by the store, the Gloo communicator, the launcher and doctor
// (docs/architecture.md 3.7, 3.10). Every blocking call takes a deadline: a DROPping firewall must
// never stall a connect or a read for the kernel's two-minute default.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/core/error.h"

namespace nanochat::cluster {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

/// Milliseconds left until `deadline` (0 when it has passed).
Ms remaining(Clock::time_point deadline);

/// strerror(err) as a std::string.
std::string errno_str(int err);

/// Owns a file descriptor; closes it on destruction. Movable, not copyable.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// "host:port", with brackets around IPv6 literals ("[::1]:29500").
std::string host_port(const std::string& host, int port);

/// One bounded TCP connection attempt to host:port (every address getaddrinfo returns is tried,
/// each for at most `attempt_timeout`). Returns a connected blocking socket with TCP_NODELAY and
/// keepalive set, or an invalid Fd with *err describing the last failure (never throws).
Fd tcp_connect_once(const std::string& host, int port, Ms attempt_timeout, std::string* err);

/// Sets TCP_NODELAY and a short keepalive (a silently vanished peer is noticed in ~30 s).
void tune_tcp_socket(int fd);

/// The peer closed or reset the connection (not a timeout). The message names the connection.
class ConnectionLost : public Error {
 public:
  explicit ConnectionLost(const std::string& msg) : Error(msg) {}
};

/// Writes all n bytes before `deadline`. Throws ConnectionLost when the peer reset the connection,
/// nanochat::Error (naming `what`) on another failure or the timeout.
void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what);

/// Reads exactly n bytes before `deadline`. Returns false if the peer closed the connection before
/// the first byte; throws ConnectionLost on a reset or a short read, nanochat::Error (naming
/// `what`) on a timeout or another error.
bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what);

/// A network interface address (one entry per interface and address family).
struct InterfaceAddr {
  std::string name;     ///< e.g. "eth0"
  std::string address;  ///< numeric, e.g. "10.0.0.2" or "fe80::1"
  int family = 0;       ///< AF_INET or AF_INET6
  bool loopback = false;
  bool up = false;
};

/// All IPv4/IPv6 addresses of the host's interfaces (getifaddrs order).
std::vector<InterfaceAddr> list_interfaces();

/// The local address the kernel would use to reach host:port (a UDP socket is connected, nothing
/// is sent, getsockname is read). Throws nanochat::Error if the host cannot be resolved or there
/// is no route.
std::string route_address_to(const std::string& host, int port);

/// Name of the interface holding `address`, or "" if none does.
std::string interface_of_address(const std::string& address);

/// True if every address `host` resolves to is a loopback address (127.0.0.0/8, ::1).
bool resolves_to_loopback(const std::string& host);

/// The distinct numeric addresses `host` resolves to on this host (getaddrinfo order); empty when
/// it does not resolve. Never throws.
std::vector<std::string> resolve_numeric(const std::string& host);

/// True if `host` is written as a loopback address: an IPv4 literal in 127.0.0.0/8, ::1 (or
/// ::ffff:127.x.y.z), or a loopback name ("localhost", "*.localhost", "ip6-localhost",
/// "ip6-loopback"). Names are not resolved: a host name that maps to 127.0.1.1 in this machine's
/// /etc/hosts may still be a routable name on the other nodes.
bool is_loopback_literal(const std::string& host);

/// gethostname(), or "unknown-host".
std::string host_name();

/// Binds a TCP socket to the wildcard address on `port` (dual-stack [::], else 0.0.0.0) with
/// SO_REUSEADDR; port 0 picks a free port. Returns the bound socket and *bound_port, or an invalid
/// Fd with *err = errno (EADDRINUSE when another process holds the port).
Fd tcp_bind_any(int port, int* bound_port, int* err);

/// A process holding a TCP port, as found through /proc.
struct PortHolder {
  long pid = 0;
  std::string command;  ///< its command line (arguments joined by spaces, shortened), or "?"
};

/// The processes of this network namespace that hold a socket bound to TCP `port` (listening
/// ones first; others only when nothing listens): the socket inodes of /proc/net/tcp and
/// /proc/net/tcp6 are matched with the /proc/<pid>/fd links this user may read. Empty when none
/// is visible (e.g. another user's process without root). Never throws.
std::vector<PortHolder> tcp_port_holders(int port);

/// True if nothing on this machine listens on / holds TCP `port` (tries to bind the wildcard).
bool tcp_port_free(int port);

/// Asks the kernel for a currently unused TCP port (bind port 0, read it back, close). For tests.
int pick_free_port();

}  // namespace nanochat::cluster
