#include "nanochat/serve/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace nanochat::serve {

namespace {

thread_local Connection* t_current = nullptr;

// Each wait is cut into slices this long so that a stopping server is noticed.
constexpr int kSliceMs = 100;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

void address_of(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int rc = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&a), &len)
                      : ::getsockname(sock, reinterpret_cast<sockaddr*>(&a), &len);
  ip.clear();
  port = -1;
  if (rc != 0) return;
  char text[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
  }
  ip = text;
}

// Before closing a connection whose request body was left unread: closing at once would reset it
// and the client could lose the answer (a 413, a 411) with its unsent bytes. The answer is out;
// what the client still sends is read and dropped for a short while.
void linger(int sock) {
  ::shutdown(sock, SHUT_WR);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  char drop[16384];
  for (int64_t dropped = 0; dropped < (int64_t{4} << 20);) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
    pollfd p{sock, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return;
    const ssize_t n = ::recv(sock, drop, sizeof drop, 0);
    if (n <= 0) return;
    dropped += n;
  }
}

}  // namespace

Connection::Connection(int sock, const ConnectionLimits& limits, std::function<bool()> stopping)
    : sock_(sock), limits_(limits), stopping_(std::move(stopping)) {}

Connection* Connection::current() { return t_current; }

bool Connection::wait_io(short events, Clock::time_point deadline) const {
  // Ready at once counts even when the server stops: an answer written then still leaves.
  for (bool first = true;; first = false) {
    if (!first && stopping_ && stopping_()) return false;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 && !first) return false;
    pollfd p{sock_, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, kSliceMs)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

ssize_t Connection::fill() {
  // Headers and body each have a deadline of their own; a handler's reads (none expected) wait
  // one read_timeout_s.
  const auto deadline = phase_ == Phase::Handler ? Clock::now() + seconds(limits_.read_timeout_s) : deadline_;
  if (!wait_io(POLLIN, deadline)) {
    timed_out_ = Clock::now() >= deadline;
    return -1;
  }
  const ssize_t n = ::recv(sock_, buf_.data(), buf_.size(), 0);
  if (n <= 0) return n;
  buf_pos_ = 0;
  buf_len_ = static_cast<size_t>(n);
  return n;
}

ssize_t Connection::read(char* ptr, size_t size) {
  if (buf_pos_ == buf_len_) {
    const ssize_t n = fill();
    if (n <= 0) return n;
  }
  size_t n = std::min(size, buf_len_ - buf_pos_);
  if (phase_ == Phase::Body) {
    if (body_bytes_ + static_cast<int64_t>(n) > limits_.max_body_raw) {
      over_limit_ = true;
      return -1;
    }
    body_bytes_ += static_cast<int64_t>(n);
  }
  std::memcpy(ptr, buf_.data() + buf_pos_, n);
  buf_pos_ += n;
  request_bytes_ += static_cast<int64_t>(n);
  return static_cast<ssize_t>(n);
}

bool Connection::is_readable() const {
  return buf_pos_ < buf_len_ || wait_io(POLLIN, Clock::now() + seconds(limits_.read_timeout_s));
}

bool Connection::is_writable() const {
  return !client_gone() && wait_io(POLLOUT, Clock::now() + seconds(limits_.write_timeout_s));
}

ssize_t Connection::write(const char* ptr, size_t size) {
  if (!wait_io(POLLOUT, Clock::now() + seconds(limits_.write_timeout_s))) return -1;
  for (;;) {
    const ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    if (n >= 0 || errno != EINTR) return n;
  }
}

void Connection::get_remote_ip_and_port(std::string& ip, int& port) const { address_of(sock_, true, ip, port); }

void Connection::get_local_ip_and_port(std::string& ip, int& port) const { address_of(sock_, false, ip, port); }

bool Connection::wait_for_request(Clock::duration wait) {
  return buf_pos_ < buf_len_ || wait_io(POLLIN, Clock::now() + wait);
}

void Connection::begin_request(Clock::time_point deadline) {
  phase_ = Phase::Headers;
  deadline_ = deadline;
  body_bytes_ = request_bytes_ = 0;
  over_limit_ = timed_out_ = close_ = false;
  note = RequestNote{};
  note.start = Clock::now();
}

void Connection::begin_body() {
  phase_ = Phase::Body;
  deadline_ = Clock::now() + seconds(limits_.read_timeout_s);
}

void Connection::end_body() { phase_ = Phase::Handler; }

bool Connection::client_gone() const {
  // The peer's FIN (POLLRDHUP) or a reset; bytes still unread (a pipelined request) do not count.
  pollfd p{sock_, static_cast<short>(POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

GuardedServer::GuardedServer(const ConnectionLimits& limits) : limits_(limits) {
  const auto threads = static_cast<size_t>(std::max(1, limits.threads));
  new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
}

void GuardedServer::widen_backlog() {
  if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, 1024);
}

// The keep-alive loop of httplib's own socket handling, on a Connection: the first request's
// headers must be in within read_timeout_s of the connection, a later one's within read_timeout_s
// of its first byte.
bool GuardedServer::process_and_close_socket(socket_t sock) {
  // The listener closed (stop()): waits give up at once instead of at their deadlines.
  Connection c(sock, limits_, [this] { return svr_sock_ == INVALID_SOCKET; });
  t_current = &c;
  ++connections_;
  bool ok = true;
  auto deadline = Connection::Clock::now() + seconds(limits_.read_timeout_s);
  for (int served = 0; served < limits_.keep_alive_max; ++served) {
    if (served > 0) {
      if (!c.wait_for_request(seconds(limits_.keep_alive_s))) break;
      deadline = Connection::Clock::now() + seconds(limits_.read_timeout_s);
    }
    c.begin_request(deadline);
    bool closed = false;
    ok = process_request(c, served + 1 == limits_.keep_alive_max, closed, [](httplib::Request&) {});
    // A request cut mid-headers has no answer and no log line of its own.
    if (!ok && c.timed_out() && c.bytes_read() > 0 && on_read_timeout) on_read_timeout(c);
    if (!ok || closed || c.closing()) break;
  }
  t_current = nullptr;
  --connections_;
  if (c.closing()) linger(sock);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace nanochat::serve
