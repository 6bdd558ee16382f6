// A slow link between two network namespaces, in user space, for kernels without tc netem: the
// benchmarks' stand-in for a home uplink (a development-time tool, Linux only).
//
// Opens two TUN devices, moves one into each namespace (10.83.0.1/24 in the first, 10.83.0.2/24
// in the second) and forwards every IP packet from one to the other after its serialisation time
// at --rate (bits/s, each direction its own queue) plus --delay-ms (one way; RTT = 2 x delay). A
// packet that would wait longer than --queue-ms behind the others is dropped (drop-tail), as a
// router's queue would; so is one the far device has no room for. Runs until killed; prints one
// line when the link is up.
//
// usage: delay_line NS_A NS_B --rate 20e6 --delay-ms 20 [--queue-ms 200] [--tag dl] [--mtu 1500]
// --mtu sets both devices' MTU. The forwarding's CPU is per packet: 51 MB each way at once took
// 4.9 s of the host's CPU at 1,500 bytes and 1.8 s at 9,000, against 1.55 s over a veth pair
// shaped in the kernel (tc tbf), whose offloads hand the stacks 64 KB segments as a real NIC's do.
// Needs root, /dev/net/tun (CONFIG_TUN) and iproute2's `ip`.
//
// Why C++: the benchmarks run the nodes on the same few cores as the link. For 50 MB one way at
// 20 Mbit/s a Python forwarder took 3.1 s of CPU, this loop 2.1 s, and with the offload below
// 1.5 s (bench/README.md, "Slow links").
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

// The virtio-net header the TUN device puts before each packet with IFF_VNET_HDR (the kernel's
// struct virtio_net_hdr; its header does not compile as C++).
struct VnetHdr {
  std::uint8_t flags, gso_type;  // gso_type 0: an ordinary packet
  std::uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
static_assert(sizeof(VnetHdr) == 10);

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "delay_line: %s\n", what.c_str());
  std::exit(1);
}

int open_tun(const std::string& name) {
  int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die("cannot open /dev/net/tun (" + std::string(std::strerror(errno)) + "): needs root and CONFIG_TUN");
  ifreq ifr{};
  // With a virtio-net header and TCP segmentation offload the namespaces' stacks hand over
  // segments of up to 64 KB that the line forwards whole (timed by their bytes on a 1,500-byte
  // wire, below): far fewer packets through the forwarder and through each kernel.
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_VNET_HDR;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (::ioctl(fd, TUNSETIFF, &ifr) < 0) die("TUNSETIFF " + name + ": " + std::strerror(errno));
  int hdr = sizeof(VnetHdr);
  if (::ioctl(fd, TUNSETVNETHDRSZ, &hdr) < 0) die("TUNSETVNETHDRSZ " + name + ": " + std::strerror(errno));
  if (::ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) < 0)
    die("TUNSETOFFLOAD " + name + ": " + std::strerror(errno));
  return fd;
}

void ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (::posix_spawnp(&pid, "ip", nullptr, nullptr, argv.data(), environ) != 0) die("cannot run ip (iproute2)");
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string line;
    for (const auto& a : args) line += a + " ";
    die("'" + line + "' failed");
  }
}

struct Packet {
  Clock::time_point deliver;
  std::vector<char> bytes;
};

// One direction of the link: a wire that is busy until free_at, then the fixed delay.
struct Direction {
  int from = -1, to = -1;
  Clock::time_point free_at{};
  std::deque<Packet> queue;  // in delivery order: deliver times grow with free_at
};

// The bytes a packet read from the TUN device takes on the wire: a TSO segment goes out as
// ceil(payload / gso_size) packets, each with its own copy of the headers.
double wire_bytes(const char* p, ssize_t n) {
  VnetHdr h;
  std::memcpy(&h, p, sizeof h);
  double bytes = static_cast<double>(n) - static_cast<double>(sizeof h);
  if (h.gso_type != 0 && h.gso_size > 0 && bytes > h.hdr_len) {
    double segments = std::ceil((bytes - h.hdr_len) / h.gso_size);
    bytes += (segments - 1) * h.hdr_len;
  }
  return bytes;
}

double number(const char* flag, const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v > 0)) die(std::string(flag) + " needs a positive number (got '" + text + "')");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  double rate = 0, delay_ms = -1, queue_ms = 200, mtu = 1500;
  std::string tag = "dl";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--rate")
      rate = number("--rate", value());
    else if (a == "--delay-ms")
      delay_ms = std::strtod(value(), nullptr);
    else if (a == "--queue-ms")
      queue_ms = number("--queue-ms", value());
    else if (a == "--mtu")
      mtu = number("--mtu", value());
    else if (a == "--tag")
      tag = value();
    else if (!a.empty() && a[0] == '-')
      die("unknown flag " + a + " (usage at the top of bench/dist/delay_line.cpp)");
    else
      pos.push_back(a);
  }
  if (pos.size() != 2 || rate <= 0 || delay_ms < 0)
    die("usage: delay_line NS_A NS_B --rate BITS_PER_S --delay-ms ONE_WAY_MS [--queue-ms 200] [--tag dl] [--mtu 1500]");
  const std::string names[2] = {tag + "a", tag + "b"};
  const char* addrs[2] = {"10.83.0.1/24", "10.83.0.2/24"};
  int fds[2];
  for (int k = 0; k < 2; ++k) {
    fds[k] = open_tun(names[k]);
    ip({"link", "set", names[k], "netns", pos[k]});
    ip({"-n", pos[k], "addr", "add", addrs[k], "dev", names[k]});
    ip({"-n", pos[k], "link", "set", names[k], "mtu", std::to_string(static_cast<int>(mtu))});
    ip({"-n", pos[k], "link", "set", names[k], "up"});
  }
  std::printf("link up: %g Mbit/s, %g ms RTT, between %s and %s\n", rate / 1e6, 2 * delay_ms, pos[0].c_str(),
              pos[1].c_str());
  std::fflush(stdout);

  const auto delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(delay_ms));
  const auto queue_limit =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(queue_ms));
  const double seconds_per_byte = 8.0 / rate;
  Direction dir[2];
  dir[0].from = fds[0], dir[0].to = fds[1];
  dir[1].from = fds[1], dir[1].to = fds[0];
  std::vector<char> buf(65536);
  for (;;) {
    auto now = Clock::now();
    Clock::time_point next = now + std::chrono::seconds(1);
    for (auto& d : dir) {
      while (!d.queue.empty() && d.queue.front().deliver <= now) {
        // A full device queue on the far side drops the packet, as a real link would.
        (void)!::write(d.to, d.queue.front().bytes.data(), d.queue.front().bytes.size());
        d.queue.pop_front();
      }
      if (!d.queue.empty() && d.queue.front().deliver < next) next = d.queue.front().deliver;
    }
    auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(next - now);
    timespec ts{static_cast<time_t>(wait.count() / 1000000000), static_cast<long>(wait.count() % 1000000000)};
    pollfd pf[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    if (::ppoll(pf, 2, &ts, nullptr) < 0 && errno != EINTR) die(std::string("ppoll: ") + std::strerror(errno));
    now = Clock::now();
    for (int k = 0; k < 2; ++k) {
      if (!(pf[k].revents & POLLIN)) continue;
      auto& d = dir[k];
      for (;;) {
        ssize_t n = ::read(d.from, buf.data(), buf.size());
        if (n <= static_cast<ssize_t>(sizeof(VnetHdr))) break;  // EAGAIN: drained
        auto start = d.free_at > now ? d.free_at : now;
        if (start - now > queue_limit) continue;  // drop-tail
        d.free_at = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(wire_bytes(buf.data(), n) * seconds_per_byte));
        d.queue.push_back({d.free_at + delay, std::vector<char>(buf.data(), buf.data() + n)});
      }
    }
  }
}
