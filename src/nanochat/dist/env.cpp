#include "nanochat/dist/env.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

#include "nanochat/core/error.h"

namespace nanochat::dist {

std::optional<long> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0') fail("environment variable ", name, "='", v, "' is not an integer");
  return x;
}

namespace {
std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
}  // namespace

DistEnv DistEnv::from_env() {
  DistEnv e;
  auto ws = env_int("WORLD_SIZE");
  if (!ws) return e;
  if (*ws < 1) fail("WORLD_SIZE=", *ws, " must be at least 1");
  e.world_size = static_cast<int>(*ws);
  auto rank = env_int("RANK");
  if (!rank && e.world_size > 1) fail("WORLD_SIZE=", e.world_size, " is set but RANK is not; set RANK in [0, ", e.world_size, ")");
  e.rank = static_cast<int>(rank.value_or(0));
  if (e.rank < 0 || e.rank >= e.world_size)
    fail("RANK=", e.rank, " is outside [0, WORLD_SIZE=", e.world_size, "); every rank needs a distinct RANK below WORLD_SIZE");
  e.local_rank = static_cast<int>(env_int("LOCAL_RANK").value_or(e.rank));
  e.local_world_size = static_cast<int>(env_int("LOCAL_WORLD_SIZE").value_or(e.world_size));
  if (e.local_world_size < 1 || e.local_rank < 0 || e.local_rank >= e.local_world_size)
    fail("LOCAL_RANK=", e.local_rank, " is outside [0, LOCAL_WORLD_SIZE=", e.local_world_size, ")");
  e.master_addr = env_str("MASTER_ADDR");
  auto port = env_int("MASTER_PORT");
  if (e.world_size > 1) {
    if (e.master_addr.empty())
      fail("WORLD_SIZE=", e.world_size, " but MASTER_ADDR is not set; set it to the host of rank 0 (or of node 0's `nanochat run`)");
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
  auto secs = [](const char* name, Ms def) {
    const char* v = std::getenv(name);
    if (!v || !*v) return def;
    char* end = nullptr;
    double s = std::strtod(v, &end);
    if (*end != '\0' || !(s > 0)) fail("environment variable ", name, "='", v, "' must be a positive number of seconds");
    return Ms(static_cast<long>(s * 1000.0));
  };
  if (!o.collective_timeout) o.collective_timeout = secs("NANOCHAT_COLLECTIVE_TIMEOUT", Ms(300000));
  if (!o.rendezvous_timeout) o.rendezvous_timeout = secs("NANOCHAT_RENDEZVOUS_TIMEOUT", Ms(300000));
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
      fail("network interface '", iface, "' (from --iface / NANOCHAT_SOCKET_IFNAME / GLOO_SOCKET_IFNAME) has no IP address on ",
           host_name(), "; interfaces with IPv4 addresses here: ", available.empty() ? "none" : available);
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

}  // namespace nanochat::dist
