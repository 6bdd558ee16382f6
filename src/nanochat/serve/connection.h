#pragma once
// The connections of chat-web's HTTP server (docs/architecture.md 10). cpp-httplib 0.11 reads a
// request with a per-read timeout only, bounds a body by its Content-Length only and cannot tell a
// handler that its client left; GuardedServer is its Server with our own socket stream
// (Connection) under it:
//   - a request's headers must arrive within `read_timeout_s` of the connection (or, on a kept-alive
//     connection, of its first byte), and its body within `read_timeout_s` more; a client that
//     stalls is cut there instead of holding its thread;
//   - body bytes read from the socket are counted, whatever the framing (Content-Length or chunked),
//     and reading fails once they pass the bound (the server answers 413);
//   - a handler asks Connection::current()->client_gone() whether its client closed the socket;
//   - a response sent without length (close-delimited) closes the connection after it.
// Every connection has its own thread from a pool of `threads`, sized apart from the workers, so
// that clients reading or writing slowly never take the threads the page and /health need.
#include <httplib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace nanochat::serve {

struct ConnectionLimits {
  int threads = 256;            ///< connections served at once (more wait for a thread)
  double read_timeout_s = 10;   ///< headers within this, then the body within this again
  double write_timeout_s = 10;  ///< a client that reads nothing for this long is cut
  double keep_alive_s = 2;      ///< an idle kept-alive connection is closed after this
  int keep_alive_max = 100;     ///< requests on one connection
  int64_t max_body_raw = 0;     ///< body bytes as sent (chunk framing included) before reads fail
};

/// What the handlers of one request note for its log line.
struct RequestNote {
  std::chrono::steady_clock::time_point start;
  int prompt_tokens = -1;
  int completion_tokens = -1;
  int generated_tokens = 0;  ///< tokens generated so far, an answer cut short included
  double queue_wait_s = -1;
  std::string outcome;  ///< why it ended early: "client gone", "shutdown", ... ("" = normally)
};

/// One client connection: httplib's Stream over a socket, with deadlines and a body bound.
class Connection : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  Connection(int sock, const ConnectionLimits& limits, std::function<bool()> stopping);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return sock_; }

  /// Waits until the next request's first bytes arrive, at most `wait`; false when none came.
  bool wait_for_request(Clock::duration wait);
  /// A request starts: its headers must be in by `deadline`.
  void begin_request(Clock::time_point deadline);
  /// The headers are in: the body has read_timeout_s and the raw byte bound from now.
  void begin_body();
  /// The body is read: reads no longer count against it.
  void end_body();
  /// The client closed (or reset) its side of the connection.
  bool client_gone() const;
  /// Reading failed because the body passed its bound / a read deadline passed.
  bool body_over_limit() const { return over_limit_; }
  bool timed_out() const { return timed_out_; }
  /// Close the connection after this response (a body left unread, a close-delimited answer).
  void close_after_response() { close_ = true; }
  bool closing() const { return close_; }
  /// Bytes of this request read so far (headers and body, as sent).
  int64_t bytes_read() const { return request_bytes_; }

  RequestNote note;

  /// The connection that the calling thread serves, or nullptr.
  static Connection* current();

 private:
  friend class GuardedServer;
  enum class Phase { Headers, Body, Handler };
  bool wait_io(short events, Clock::time_point deadline) const;
  ssize_t fill();

  int sock_;
  ConnectionLimits limits_;
  std::function<bool()> stopping_;
  std::array<char, 4096> buf_{};
  size_t buf_pos_ = 0, buf_len_ = 0;
  Phase phase_ = Phase::Headers;
  Clock::time_point deadline_;
  int64_t body_bytes_ = 0, request_bytes_ = 0;
  bool over_limit_ = false, timed_out_ = false, close_ = false;
};

/// httplib::Server whose connections are Connection streams (see the top of this file).
class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(const ConnectionLimits& limits);
  /// After bind: a listen backlog of 1024 instead of the library's 5, so that a burst of
  /// connections is accepted at once instead of waiting for the client's SYN to be sent again.
  void widen_backlog();
  /// Connections open now (being read, answered or kept alive).
  int connections() const { return connections_.load(); }
  /// Called when a connection is cut because a read deadline passed mid-request.
  std::function<void(const Connection&)> on_read_timeout;

 private:
  bool process_and_close_socket(socket_t sock) override;
  ConnectionLimits limits_;
  std::atomic<int> connections_{0};
};

}  // namespace nanochat::serve
