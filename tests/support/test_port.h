#pragma once
// Ports for tests that run in parallel processes (ctest -j): each process takes its own block.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace nctest {

/// Whether `port` on 127.0.0.1 can be bound now (nothing listens or binds there).
inline bool port_free_now(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

/// A port that was free a moment ago, from a block of 100 ports of this process's own (21000-30999,
/// below Linux's ephemeral range, chosen by pid): tests running in parallel processes then pick
/// different ports instead of racing for the same free one.
inline int test_port() {
  static int next = 0;
  const int base = 21000 + static_cast<int>(::getpid() % 100) * 100;
  for (int tries = 0; tries < 100; ++tries) {
    const int port = base + (next++ % 100);
    if (port_free_now(port)) return port;
  }
  return base + 99;
}

}  // namespace nctest
