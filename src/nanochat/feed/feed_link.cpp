#include "nanochat/feed/feed_link.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>

#include "nanochat/cluster/env.h"
#include "nanochat/cluster/mesh.h"
#include "nanochat/cluster/startup.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/threads.h"

namespace nanochat::feed {

using namespace cluster;  // the sockets and deadlines (cluster/net.h) the feed runs on

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The port rank 0 listens on: its --port-range port, else 0 (the kernel picks).
int feed_port_wanted() {
  const auto range = port_range_from_env();
  if (!range) return 0;
  return range->first + DistEnv::from_env().local_rank;
}

// Rank 0 listens; returns the socket and *port, or throws naming the port and its holder.
Fd listen_for_feed(int want, int* port) {
  int err = 0;
  Fd fd = tcp_bind_any(want, port, &err);
  if (!fd) {
    std::string holder;
    for (const PortHolder& h : tcp_port_holders(want)) holder += str_cat(" (held by pid ", h.pid, ": ", h.command, ")");
    fail("rank 0 (host ", host_name(), ") cannot listen for the data connections on port ", want, ": ", errno_str(err),
         holder, "; free that port or choose another --port-range");
  }
  if (::listen(fd.get(), 64) != 0)
    fail("rank 0 (host ", host_name(), ") cannot listen on port ", *port, ": ", errno_str(errno));
  return fd;
}

// One accepted connection's Hello: its rank, or -1 (with a note on stderr) when it is not a rank of
// this job (a port scanner, another program): such a connection is dropped, not fatal.
int read_hello(int fd, int world, std::string* host, Clock::time_point deadline) {
  FeedFrame f;
  try {
    if (read_feed_frame(fd, &f, deadline, "a connecting rank") && f.kind == FeedKind::Hello && f.seq >= 1 &&
        f.seq < world) {
      *host = f.text;
      return static_cast<int>(f.seq);
    }
  } catch (const Error&) {
  }
  std::fprintf(stderr,
               "rank 0: dropped a connection to the data port that did not introduce itself as a rank of this job "
               "(another program?)\n");
  return -1;
}

}  // namespace

Clock::time_point feed_startup_deadline() { return Clock::now() + startup_timeout(); }

Clock::time_point feed_step_deadline() { return Clock::now() + *DistOptions{}.resolved().collective_timeout; }

FeedServer::FeedServer(Communicator& comm, Clock::time_point deadline) {
  const int W = comm.world_size();
  peers_.resize(static_cast<size_t>(W));
  const int want = feed_port_wanted();
  int64_t announced = -1;
  Fd listener;
  std::string error;
  try {
    listener = listen_for_feed(want, &port_);
    announced = port_;
  } catch (const Error& e) {
    error = e.what();
  }
  comm.broadcast(&announced, sizeof announced, 0)->wait();  // -1: the workers stop too
  if (!error.empty()) fail(error);
  int missing = W - 1;
  Clock::time_point next_report = Clock::now() + wait_report_interval();
  const Clock::time_point start = Clock::now();
  while (missing > 0) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      std::string who;
      for (int r = 1; r < W; ++r)
        if (!peers_[static_cast<size_t>(r)].fd) who += str_cat(who.empty() ? "" : ", ", r);
      fail("rank 0 (host ", host_name(), "): rank(s) ", who, " did not open the data connection to port ", port_,
           " within ", fixed(seconds_between(start, now), 0),
           " s (NANOCHAT_STARTUP_TIMEOUT); node 0's firewall must let every node reach that port");
    }
    pollfd p{listener.get(), POLLIN, 0};
    const int ms = static_cast<int>(std::min(remaining(deadline), Ms(1000)).count());
    if (::poll(&p, 1, ms) <= 0) {
      if (Clock::now() >= next_report) {
        std::fprintf(stderr, "rank 0: waiting for %d rank(s) to open the data connection to port %d (%.0f s)\n",
                     missing, port_, seconds_between(start, Clock::now()));
        next_report += wait_report_interval();
      }
      continue;
    }
    Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) continue;
    tune_tcp_socket(conn.get());
    std::string host;
    const int r = read_hello(conn.get(), W, &host, std::min(deadline, Clock::now() + Ms(10000)));
    if (r < 0) continue;
    Peer& peer = peers_[static_cast<size_t>(r)];
    if (peer.fd)
      fail("two connections to the data port both said they are rank ", r, " (hosts ", peer.host, " and ", host, ")");
    peer.fd = std::move(conn);
    peer.host = host;
    --missing;
  }
}

FeedServer::~FeedServer() { shutdown(); }

void FeedServer::shutdown() noexcept {
  for (Peer& p : peers_)
    if (p.fd) ::shutdown(p.fd.get(), SHUT_RDWR);
}

void FeedServer::drop(int r) noexcept {
  if (r <= 0 || r >= static_cast<int>(peers_.size())) return;
  peers_[static_cast<size_t>(r)].left->store(true);
  if (peers_[static_cast<size_t>(r)].fd) ::shutdown(peers_[static_cast<size_t>(r)].fd.get(), SHUT_RDWR);
}

std::string FeedServer::describe(int r) const {
  return str_cat("rank ", r, " (host ", peers_.at(static_cast<size_t>(r)).host, ")");
}

void FeedServer::send(int r, const FeedFrame& f, Clock::time_point deadline) {
  Peer& p = peers_.at(static_cast<size_t>(r));
  if (p.left->load()) return;  // it left the job: the others go on without its rows
  std::lock_guard<std::mutex> lk(*p.mu);
  if (!p.fd) fail("the data connection to ", describe(r), " is closed");
  try {
    write_feed_frame(p.fd.get(), f, deadline, describe(r));
  } catch (const std::exception&) {
    if (!p.left->load()) throw;  // dropped while this frame was on its way
  }
}

void FeedServer::send_error(const std::string& message) noexcept {
  try {
    FeedFrame f;
    f.kind = FeedKind::Error;
    f.text = message;
    for (int r = 1; r < world_size(); ++r) {
      try {
        send(r, f, Clock::now() + Ms(3000));
      } catch (const std::exception&) {  // that rank is gone or stuck: the others still hear
      }
    }
  } catch (const std::exception&) {
  }
}

FeedClient::FeedClient(Communicator& comm, Clock::time_point deadline) : rank_(comm.rank()) {
  int64_t port = -1;
  comm.broadcast(&port, sizeof port, 0)->wait();
  std::string host = DistEnv::from_env().master_addr;
  if (host.empty()) host = "127.0.0.1";
  server_ = str_cat("rank 0 (at ", host, ")");
  if (port < 0)
    fail("rank ", rank_, ": rank 0 (host ", host, ") could not listen for the data connections; its error says why");
  std::string err;
  const Clock::time_point start = Clock::now();
  while (!fd_) {
    fd_ = tcp_connect_once(host, static_cast<int>(port), Ms(2000), &err);
    if (fd_) break;
    if (Clock::now() >= deadline)
      fail("rank ", rank_, " (host ", host_name(), ") could not open the data connection to rank 0 at ",
           host_port(host, static_cast<int>(port)), " within ", fixed(seconds_between(start, Clock::now()), 0),
           " s: ", err, ". Node 0's firewall must let this node reach that port (with --port-range: the range)");
    std::this_thread::sleep_for(Ms(200));
  }
  FeedFrame hello;
  hello.kind = FeedKind::Hello;
  hello.seq = rank_;
  hello.text = host_name();
  write_feed_frame(fd_.get(), hello, deadline, "the data connection to " + server_);
  receiver_ = std::thread([this] {
    name_this_thread("nc-feed-recv");
    receive_loop();
  });
}

FeedClient::~FeedClient() {
  stop_ = true;
  if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
  if (receiver_.joinable()) receiver_.join();
}

void FeedClient::abort(const std::string& reason) noexcept {
  try {
    main_q_.close(reason);
    val_q_.close(reason);
  } catch (...) {
  }
}

void FeedClient::receive_loop() {
  std::string reason;
  bool from_rank0 = false;  // rank 0 sent an Error frame: its message is the job's cause
  try {
    for (;;) {
      pollfd p{fd_.get(), POLLIN, 0};  // between frames: no deadline (a long evaluation or save)
      const int pr = ::poll(&p, 1, 1000);
      if (stop_) break;
      if (pr < 0 && errno != EINTR) fail("the data connection to ", server_, ": poll: ", errno_str(errno));
      if (pr <= 0) continue;
      FeedFrame f;
      if (!read_feed_frame(fd_.get(), &f, feed_step_deadline(), server_)) {
        reason = str_cat("rank ", rank_, ": ", server_,
                         " closed the data connection (it stopped; its output or nanochat run's message says why)");
        break;
      }
      if (f.kind == FeedKind::Val) {
        val_q_.push(std::move(f));
      } else if (f.kind == FeedKind::Error) {
        reason = str_cat("rank ", rank_, ": ", server_, " stopped the job: ", f.text);
        from_rank0 = true;
        break;
      } else if (f.kind == FeedKind::End) {
        reason = str_cat("rank ", rank_, ": ", server_, " sent no more data");
        break;
      } else {
        main_q_.push(std::move(f));
      }
    }
  } catch (const std::exception& e) {
    reason = str_cat("rank ", rank_, ": ", e.what());
  }
  if (reason.empty()) reason = str_cat("rank ", rank_, ": the data connection to ", server_, " was closed");
  main_q_.close(reason);
  val_q_.close(reason);
  if (from_rank0) echo_unless_delivered(reason);
}

void FeedClient::echo_unless_delivered(const std::string& reason) {
  // Rank 0's message reaches the user through the error next() throws. When this rank waits
  // elsewhere instead (a collective whose own error would name only a lost peer), or stops for
  // another reason first, it is printed here: after a grace period, or when the client is
  // destroyed, if no wait of next() has thrown it by then.
  const Clock::time_point until = Clock::now() + Ms(2000);
  while (!stop_ && Clock::now() < until && !main_q_.reason_delivered() && !val_q_.reason_delivered())
    std::this_thread::sleep_for(Ms(20));
  if (main_q_.reason_delivered() || val_q_.reason_delivered()) return;
  std::fprintf(stderr, "%s\n", reason.c_str());
}

FeedFrame FeedClient::next(FeedKind kind, int64_t seq, Clock::time_point deadline, const std::string& what) {
  FeedFrame f = next_any(kind, deadline, what);
  if (f.seq != seq)
    fail("rank ", rank_, ": expected ", what, " (seq ", seq, ") from ", server_, " but got seq ", f.seq,
         ": the data feed is out of step");
  return f;
}

FeedFrame FeedClient::next_any(FeedKind kind, Clock::time_point deadline, const std::string& what) {
  FeedQueue& q = kind == FeedKind::Val ? val_q_ : main_q_;
  const Clock::time_point start = Clock::now();
  FeedFrame f;
  for (;;) {
    const Clock::time_point until = std::min(deadline, Clock::now() + wait_report_interval());
    if (q.try_pop(until, &f)) break;
    const double waited = seconds_between(start, Clock::now());
    if (Clock::now() >= deadline)
      fail("rank ", rank_, ": waited ", fixed(waited, 0), " s for ", what, " from ", server_, " and gave up");
    std::fprintf(stderr, "rank %d: waiting for %s from %s (%.0f s of %.0f s)\n", rank_, what.c_str(), server_.c_str(),
                 waited, seconds_between(start, deadline));
  }
  if (f.kind != kind)
    fail("rank ", rank_, ": expected ", what, " (frame kind ", static_cast<int>(kind), ") from ", server_,
         " but got kind ", static_cast<int>(f.kind), ", seq ", f.seq, ": the data feed is out of step");
  return f;
}

}  // namespace nanochat::feed
