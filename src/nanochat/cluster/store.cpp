#include "nanochat/cluster/store.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "nanochat/cluster/env.h"

namespace nanochat::cluster {

namespace {

constexpr uint32_t kMagic = 0x5453434e;  // "NCST"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxFrame = 64u << 20;

enum Op : uint8_t { kHello = 1, kSet, kGet, kWait, kAdd, kCheck, kDel, kWill, kBye };
enum Status : uint8_t { kOk = 0, kMissing = 1, kTimeout = 2, kErr = 3 };

// Little-endian field encoder for one frame (the u32 length is prepended by frame()).
struct Writer {
  std::string b;
  Writer& u8(uint8_t v) {
    b.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& i64(int64_t v) {
    auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    b += s;
    return *this;
  }
  Writer& strs(const std::vector<std::string>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (const auto& s : v) str(s);
    return *this;
  }
  std::string frame() const {
    Writer w;
    w.u32(static_cast<uint32_t>(b.size()));
    return w.b + b;
  }
};

// Decoder over one frame body; throws Error on a malformed frame.
struct Reader {
  const char* p;
  size_t n;
  void need(size_t k) {
    if (n < k) fail("malformed store message (truncated)");
  }
  uint8_t u8() {
    need(1);
    uint8_t v = static_cast<uint8_t>(*p);
    ++p;
    --n;
    return v;
  }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
    p += 4;
    n -= 4;
    return v;
  }
  int64_t i64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
    p += 8;
    n -= 8;
    return static_cast<int64_t>(v);
  }
  std::string str() {
    uint32_t k = u32();
    need(k);
    std::string s(p, k);
    p += k;
    n -= k;
    return s;
  }
  std::vector<std::string> strs() {
    uint32_t k = u32();
    if (k > n / 4) fail("malformed store message (bad count)");
    std::vector<std::string> v;
    v.reserve(k);
    for (uint32_t i = 0; i < k; ++i) v.push_back(str());
    return v;
  }
};

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) s += (i ? ", " : "") + ("'" + keys[i] + "'");
  if (keys.size() > 8) s += str_cat(" and ", keys.size() - 8, " more");
  return s;
}

bool parse_i64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0) h = h.substr(7);
  return host_port(h, std::atoi(serv));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// PrefixStore

void PrefixStore::wait(const std::vector<std::string>& keys, Ms timeout) {
  std::vector<std::string> k;
  k.reserve(keys.size());
  for (const auto& s : keys) k.push_back(prefix_ + s);
  base_.wait(k, timeout);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> k;
  k.reserve(keys.size());
  for (const auto& s : keys) k.push_back(prefix_ + s);
  return base_.check(k);
}

// ---------------------------------------------------------------------------------------------
// StoreServer

namespace {

struct Conn {
  Fd fd;
  std::string peer;
  std::string identity;
  std::string in;
  std::string out;
  bool hello = false;    // handshake accepted
  bool bye = false;      // said goodbye: no will
  bool closing = false;  // close once `out` is flushed
  bool dead = false;
  std::optional<std::pair<std::string, std::string>> will;
  // A parked get/wait.
  bool waiting = false;
  bool wait_is_get = false;
  std::vector<std::string> wait_keys;
  Clock::time_point wait_deadline;
};

}  // namespace

struct StoreServer::Impl {
  Fd listen_fd;
  Fd wake_r, wake_w;
  int port = 0;
  std::string token;
  std::string label;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::map<std::string, std::string> kv;
  std::vector<std::unique_ptr<Conn>> conns;
  std::atomic<size_t> rejected{0};
  mutable std::mutex cmu;
  mutable std::condition_variable ccv;
  size_t clients = 0;  // guarded by cmu

  std::string self() const { return host_port(label, port); }

  void log(const std::string& msg) const {
    std::fprintf(stderr, "nanochat: store on %s: %s\n", self().c_str(), msg.c_str());
    std::fflush(stderr);
  }

  static void reply(Conn& c, const Writer& w) { c.out += w.frame(); }

  void flush(Conn& c) {
    while (!c.out.empty()) {
      ssize_t k = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        c.dead = true;
        return;
      }
      c.out.erase(0, static_cast<size_t>(k));
    }
    if (c.closing) c.dead = true;
  }

  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!kv.count(k)) return false;
    return true;
  }

  // Answers a parked get/wait if its keys exist now (or its deadline passed).
  bool try_complete(Conn& c, Clock::time_point now) {
    if (!c.waiting) return false;
    if (has_all(c.wait_keys)) {
      Writer w;
      w.u8(kOk);
      if (c.wait_is_get) w.str(kv.at(c.wait_keys[0]));
      reply(c, w);
    } else if (now >= c.wait_deadline) {
      Writer w;
      w.u8(kTimeout);
      std::vector<std::string> missing;
      for (const auto& k : c.wait_keys)
        if (!kv.count(k)) missing.push_back(k);
      w.strs(missing);
      reply(c, w);
    } else {
      return false;
    }
    c.waiting = false;
    c.wait_keys.clear();
    return true;
  }

  void on_mutation() {
    auto now = Clock::now();
    for (auto& c : conns)
      if (c->waiting && try_complete(*c, now)) process(*c);
  }

  void set_key(const std::string& k, const std::string& v) {
    kv[k] = v;
    on_mutation();
  }

  void reject(Conn& c, const std::string& why_client, const std::string& why_log) {
    Writer w;
    w.u8(kErr).str(why_client);
    reply(c, w);
    c.closing = true;
    rejected.fetch_add(1);
    log(str_cat("refused a connection from ", c.peer, (c.identity.empty() ? "" : " (" + c.identity + ")"), ": ",
                why_log));
  }

  // The first frame of a connection: magic, protocol version, job token and the client's
  // identity; a mismatch is refused with a reason for the client and one for the store's log.
  void handle_hello(Conn& c, Reader& r) {
    uint32_t magic = r.u32();
    uint32_t version = r.u32();
    std::string tok = r.str();
    c.identity = r.str();
    if (magic != kMagic) {
      reject(c, "expected a nanochat store handshake", "it is not a nanochat store client");
    } else if (version != kVersion) {
      reject(c,
             str_cat("the store speaks protocol version ", kVersion, " but this process speaks ", version,
                     "; run the same nanochat build on every node"),
             str_cat("it speaks store protocol version ", version, ", this store speaks ", kVersion,
                     " (different nanochat builds?)"));
    } else if (tok != token) {
      reject(c,
             "the job token (NANOCHAT_JOB_TOKEN) does not match this job's; the port belongs to another "
             "job, or the token differs between nodes",
             "its job token (NANOCHAT_JOB_TOKEN) differs from this job's (another job on the same port, "
             "or a different token on that node)");
    } else {
      c.hello = true;
      {
        std::lock_guard<std::mutex> lk(cmu);
        ++clients;
      }
      ccv.notify_all();
      reply(c, Writer().u8(kOk));
    }
  }

  // Handles one complete frame body.
  void handle(Conn& c, Reader r) {
    uint8_t op = r.u8();
    if (!c.hello) {
      if (op != kHello)
        reject(c, "expected a nanochat store handshake", "it is not a nanochat store client");
      else
        handle_hello(c, r);
      return;
    }
    switch (op) {
      case kSet: {
        std::string k = r.str();
        std::string v = r.str();
        reply(c, Writer().u8(kOk));
        set_key(k, v);
        break;
      }
      case kGet:
      case kWait: {
        std::vector<std::string> keys;
        if (op == kGet)
          keys.push_back(r.str());
        else
          keys = r.strs();
        int64_t timeout_ms = r.i64();
        if (op == kGet && timeout_ms <= 0) {  // non-blocking try_get
          auto it = kv.find(keys[0]);
          if (it == kv.end())
            reply(c, Writer().u8(kMissing));
          else
            reply(c, Writer().u8(kOk).str(it->second));
          break;
        }
        c.waiting = true;
        c.wait_is_get = (op == kGet);
        c.wait_keys = std::move(keys);
        c.wait_deadline = Clock::now() + Ms(std::max<int64_t>(timeout_ms, 0));
        try_complete(c, Clock::now());
        break;
      }
      case kAdd: {
        std::string k = r.str();
        int64_t delta = r.i64();
        int64_t cur = 0;
        auto it = kv.find(k);
        if (it != kv.end() && !parse_i64(it->second, &cur)) {
          reply(c, Writer().u8(kErr).str(str_cat("key '", k, "' does not hold an integer")));
          break;
        }
        cur += delta;
        reply(c, Writer().u8(kOk).i64(cur));
        set_key(k, std::to_string(cur));
        break;
      }
      case kCheck: {
        auto keys = r.strs();
        reply(c, Writer().u8(kOk).u8(has_all(keys) ? 1 : 0));
        break;
      }
      case kDel: {
        std::string k = r.str();
        bool existed = kv.erase(k) > 0;
        reply(c, Writer().u8(kOk).u8(existed ? 1 : 0));
        break;
      }
      case kWill: {
        std::string k = r.str();
        std::string v = r.str();
        c.will = std::make_pair(k, v);
        reply(c, Writer().u8(kOk));
        break;
      }
      case kBye:
        c.bye = true;
        c.closing = true;
        reply(c, Writer().u8(kOk));
        break;
      default:
        reply(c, Writer().u8(kErr).str(str_cat("unknown store operation ", int(op))));
        c.closing = true;
    }
  }

  // Parses and handles complete frames until the connection parks on a wait.
  void process(Conn& c) {
    while (!c.waiting && !c.closing && !c.dead) {
      if (c.in.size() < 4) return;
      uint32_t len = 0;
      for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(static_cast<uint8_t>(c.in[i])) << (8 * i);
      if (len > kMaxFrame || len == 0) {
        if (!c.hello) {
          rejected.fetch_add(1);
          log(str_cat("dropped a connection from ", c.peer, ": it is not a nanochat store client"));
        } else {
          log(str_cat("dropped ", c.peer, ": oversized message (", len, " bytes)"));
        }
        c.dead = true;
        return;
      }
      if (c.in.size() < 4 + static_cast<size_t>(len)) return;
      std::string body = c.in.substr(4, len);
      c.in.erase(0, 4 + static_cast<size_t>(len));
      try {
        handle(c, Reader{body.data(), body.size()});
      } catch (const Error& e) {
        log(str_cat("dropped ", c.peer, ": ", e.what()));
        c.dead = true;
      }
    }
  }

  void read_from(Conn& c) {
    char buf[65536];
    for (;;) {
      ssize_t k = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (k > 0) {
        c.in.append(buf, static_cast<size_t>(k));
        if (c.in.size() > kMaxFrame + 8) {
          c.dead = true;
          return;
        }
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.dead = true;  // EOF or error
      return;
    }
  }

  void drop_dead() {
    bool mutated = false;
    for (size_t i = 0; i < conns.size();) {
      Conn& c = *conns[i];
      if (!c.dead) {
        ++i;
        continue;
      }
      if (c.hello) {
        {
          std::lock_guard<std::mutex> lk(cmu);
          --clients;
        }
        ccv.notify_all();
        if (!c.bye && c.will) {
          kv[c.will->first] = c.will->second;
          mutated = true;
        }
      }
      conns.erase(conns.begin() + static_cast<long>(i));
    }
    if (mutated) on_mutation();
  }

  void loop() {
    std::vector<pollfd> pfds;
    while (!stop.load()) {
      pfds.clear();
      pfds.push_back({listen_fd.get(), POLLIN, 0});
      pfds.push_back({wake_r.get(), POLLIN, 0});
      auto now = Clock::now();
      Ms wait_ms(1000);
      for (auto& c : conns) {
        short ev = POLLIN;
        if (!c->out.empty()) ev |= POLLOUT;
        pfds.push_back({c->fd.get(), ev, 0});
        if (c->waiting)
          wait_ms = std::min(wait_ms, std::max(Ms(0), std::chrono::duration_cast<Ms>(c->wait_deadline - now) + Ms(1)));
      }
      int pr = ::poll(pfds.data(), pfds.size(), static_cast<int>(wait_ms.count()));
      if (pr < 0 && errno != EINTR) {
        log(str_cat("poll failed: ", errno_str(errno)));
        return;
      }
      if (stop.load()) return;
      if (pr > 0 && (pfds[0].revents & POLLIN)) {
        for (;;) {
          int fd = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (fd < 0) break;
          auto c = std::make_unique<Conn>();
          c->fd.reset(fd);
          tune_tcp_socket(fd);
          c->peer = peer_name(fd);
          conns.push_back(std::move(c));
        }
      }
      if (pr > 0 && (pfds[1].revents & POLLIN)) {
        char b[64];
        while (::read(wake_r.get(), b, sizeof(b)) > 0) {
        }
      }
      // pfds[2 + i] corresponds to conns[i] as they were before accepting.
      size_t n_polled = pfds.size() - 2;
      for (size_t i = 0; i < n_polled && i < conns.size(); ++i) {
        Conn& c = *conns[i];
        short re = pfds[2 + i].revents;
        if (re & (POLLIN | POLLHUP | POLLERR)) read_from(c);
        process(c);
        if (!c.out.empty()) flush(c);
      }
      now = Clock::now();
      for (auto& c : conns) {
        if (c->waiting && try_complete(*c, now)) process(*c);
        if (!c->out.empty() || c->closing) flush(*c);
      }
      drop_dead();
    }
  }
};

void wait_and_report(Store& store, const std::vector<std::string>& keys, Ms timeout, size_t self,
                     const std::function<std::string(const std::vector<size_t>& missing)>& describe) {
  const auto t0 = Clock::now(), deadline = t0 + timeout;
  const Ms every = wait_report_interval();
  for (;;) {
    Ms slice = std::min(every, remaining(deadline));
    try {
      store.wait(keys, std::max(slice, Ms(1)));
      return;
    } catch (const StoreTimeout&) {
      if (Clock::now() >= deadline) throw;
    }
    std::vector<size_t> missing;
    size_t lowest_present = keys.size();
    for (size_t i = 0; i < keys.size(); ++i) {
      if (store.check({keys[i]}))
        lowest_present = std::min(lowest_present, i);
      else
        missing.push_back(i);
    }
    if (missing.empty() || self != lowest_present) continue;
    long elapsed = std::lround(std::chrono::duration<double>(Clock::now() - t0).count());
    std::fprintf(stderr, "%s (%ld s of %g s)\n", describe(missing).c_str(), elapsed,
                 std::round(timeout.count() / 100.0) / 10.0);
    std::fflush(stderr);
  }
}

std::string port_in_use_message(int port, const std::string& host_label) {
  auto holders = tcp_port_holders(port);
  if (holders.empty())
    return str_cat("port ", port, " on ", host_label,
                   " is already in use by another process (one this user cannot see; `ss -ltnp 'sport = :", port,
                   "'` as root names it); pick --master-port, or stop that process");
  std::string who, pids;
  for (const auto& h : holders) {
    who += str_cat(who.empty() ? "" : "; ", "pid ", h.pid, " (", h.command, ")");
    pids += str_cat(" ", h.pid);
  }
  return str_cat("port ", port, " on ", host_label, " is already in use by ", who,
                 ". If that is a launcher or rank left over from an earlier run of this job (e.g. its SSH session "
                 "dropped), stop it (`kill",
                 pids, "`) and start again; otherwise pick another --master-port");
}

StoreServer::StoreServer(int port, std::string job_token, std::string host_label) : impl_(new Impl) {
  impl_->token = std::move(job_token);
  impl_->label = host_label.empty() ? host_name() : std::move(host_label);
  int err = 0;
  impl_->listen_fd = tcp_bind_any(port, &impl_->port, &err);
  if (!impl_->listen_fd) {
    if (err == EADDRINUSE) fail(port_in_use_message(port, impl_->label));
    fail("cannot bind the store to port ", port, " on ", impl_->label, ": ", errno_str(err));
  }
  if (::listen(impl_->listen_fd.get(), 512) != 0)
    fail("cannot listen on port ", port, " on ", impl_->label, ": ", errno_str(errno));
  int fl = fcntl(impl_->listen_fd.get(), F_GETFL, 0);
  fcntl(impl_->listen_fd.get(), F_SETFL, fl | O_NONBLOCK);
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) fail("pipe: ", errno_str(errno));
  impl_->wake_r.reset(p[0]);
  impl_->wake_w.reset(p[1]);
  impl_->thread = std::thread([this] { impl_->loop(); });
}

StoreServer::~StoreServer() {
  impl_->stop.store(true);
  char b = 1;
  ssize_t ignored = ::write(impl_->wake_w.get(), &b, 1);
  (void)ignored;
  if (impl_->thread.joinable()) impl_->thread.join();
}

int StoreServer::port() const { return impl_->port; }

size_t StoreServer::num_clients() const {
  std::lock_guard<std::mutex> lk(impl_->cmu);
  return impl_->clients;
}

size_t StoreServer::num_rejected() const { return impl_->rejected.load(); }

bool StoreServer::wait_clients_at_most(size_t n, Ms timeout) const {
  std::unique_lock<std::mutex> lk(impl_->cmu);
  return impl_->ccv.wait_for(lk, timeout, [&] { return impl_->clients <= n; });
}

// ---------------------------------------------------------------------------------------------
// StoreClient

StoreClient::StoreClient(StoreClientOptions opts) : opts_(std::move(opts)) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + opts_.connect_timeout;
  Ms backoff(50);
  std::string last_err;
  for (;;) {
    ++attempts_;
    Ms attempt = std::min(opts_.attempt_timeout, std::max(remaining(deadline), Ms(100)));
    Fd fd = tcp_connect_once(opts_.host, opts_.port, attempt, &last_err);
    if (fd) {
      // Handshake. A refusal is final; a dropped connection (server starting/stopping) is retried.
      Writer w;
      w.u8(kHello).u32(kMagic).u32(kVersion).str(opts_.job_token).str(opts_.identity);
      std::string f = w.frame();
      try {
        auto hs_deadline = Clock::now() + std::max(attempt, Ms(10000));
        send_all(fd.get(), f.data(), f.size(), hs_deadline, where());
        unsigned char hdr[4];
        if (recv_all(fd.get(), hdr, 4, hs_deadline, where())) {
          uint32_t len = hdr[0] | (hdr[1] << 8) | (hdr[2] << 16) | (static_cast<uint32_t>(hdr[3]) << 24);
          if (len == 0 || len > kMaxFrame)
            fail(where(), " answered the handshake with garbage (is it a nanochat store?)");
          std::string body(len, '\0');
          recv_all(fd.get(), body.data(), len, hs_deadline, where());
          Reader r{body.data(), body.size()};
          uint8_t st = r.u8();
          if (st == kOk) {
            fd_ = std::move(fd);
            return;
          }
          std::string why = st == kErr ? r.str() : "unexpected answer";
          fail(where(), " refused this process: ", why);
        }
        last_err = "the connection was closed during the handshake";
      } catch (const Error& e) {
        std::string m = e.what();
        if (m.find(" refused this process: ") != std::string::npos || m.find("garbage") != std::string::npos) throw;
        last_err = m;
      }
    }
    if (Clock::now() >= deadline) {
      double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      char sbuf[32];
      std::snprintf(sbuf, sizeof(sbuf), "%.1f", secs);
      fail("cannot reach the store at ", host_port(opts_.host, opts_.port), " after ", sbuf, "s (", attempts_,
           " attempt", attempts_ == 1 ? "" : "s", "): ", last_err,
           ". Check that the master (node 0's `nanochat run`, or rank 0) is running, that MASTER_ADDR/"
           "MASTER_PORT (--master-addr/--master-port) name it, and that no firewall blocks the port");
    }
    if (opts_.on_retry) opts_.on_retry(last_err);
    std::this_thread::sleep_for(std::min(backoff, remaining(deadline)));
    backoff = std::min(backoff * 2, Ms(1000));
  }
}

StoreClient::~StoreClient() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!fd_ || broken_) return;
  try {
    std::string f = Writer().u8(kBye).frame();
    auto dl = Clock::now() + Ms(2000);
    send_all(fd_.get(), f.data(), f.size(), dl, where());
    unsigned char hdr[4];
    // Wait for the acknowledgement so the server has processed the goodbye before we close.
    if (recv_all(fd_.get(), hdr, 4, dl, where())) {
      uint32_t len = hdr[0] | (hdr[1] << 8) | (hdr[2] << 16) | (static_cast<uint32_t>(hdr[3]) << 24);
      if (len > 0 && len < 64) {
        char body[64];
        recv_all(fd_.get(), body, len, dl, where());
      }
    }
  } catch (const Error&) {
  }
}

std::string StoreClient::where() const { return "the store at " + host_port(opts_.host, opts_.port); }

std::string StoreClient::request(const std::string& frame, Ms answer_timeout, uint8_t* status) {
  std::lock_guard<std::mutex> lk(mu_);
  if (broken_) fail("the connection to ", where(), " was lost earlier (is the store host still running?)");
  try {
    auto dl = Clock::now() + answer_timeout;
    send_all(fd_.get(), frame.data(), frame.size(), dl, where());
    unsigned char hdr[4];
    if (!recv_all(fd_.get(), hdr, 4, dl, where()))
      throw ConnectionLost(str_cat(where(),
                                   " closed the connection (the process hosting it, node 0's launcher or rank 0, "
                                   "may have exited)"));
    uint32_t len = hdr[0] | (hdr[1] << 8) | (hdr[2] << 16) | (static_cast<uint32_t>(hdr[3]) << 24);
    if (len == 0 || len > kMaxFrame) fail(where(), " sent a malformed answer");
    std::string body(len, '\0');
    recv_all(fd_.get(), body.data(), len, dl, where());
    *status = static_cast<uint8_t>(body[0]);
    return body.substr(1);
  } catch (const Error&) {
    broken_ = true;
    throw;
  }
}

namespace {
void expect_ok(uint8_t st, const std::string& payload, const std::string& where) {
  if (st == kOk) return;
  if (st == kErr) {
    Reader r{payload.data(), payload.size()};
    fail(where, ": ", r.str());
  }
  fail(where, " gave an unexpected answer (status ", int(st), ")");
}
}  // namespace

void StoreClient::set(const std::string& key, const std::string& value) {
  uint8_t st = 0;
  auto p = request(Writer().u8(kSet).str(key).str(value).frame(), opts_.op_timeout, &st);
  expect_ok(st, p, where());
}

std::string StoreClient::get(const std::string& key, Ms timeout) {
  uint8_t st = 0;
  int64_t ms = std::max<int64_t>(timeout.count(), 1);
  auto p = request(Writer().u8(kGet).str(key).i64(ms).frame(), timeout + opts_.op_timeout, &st);
  if (st == kTimeout)
    throw StoreTimeout(str_cat("timed out after ", ms / 1000.0, " s waiting for key '", key, "' in ", where()));
  expect_ok(st, p, where());
  Reader r{p.data(), p.size()};
  return r.str();
}

std::optional<std::string> StoreClient::try_get(const std::string& key) {
  uint8_t st = 0;
  auto p = request(Writer().u8(kGet).str(key).i64(0).frame(), opts_.op_timeout, &st);
  if (st == kMissing) return std::nullopt;
  expect_ok(st, p, where());
  Reader r{p.data(), p.size()};
  return r.str();
}

void StoreClient::wait(const std::vector<std::string>& keys, Ms timeout) {
  if (keys.empty()) return;
  uint8_t st = 0;
  int64_t ms = std::max<int64_t>(timeout.count(), 1);
  auto p = request(Writer().u8(kWait).strs(keys).i64(ms).frame(), timeout + opts_.op_timeout, &st);
  if (st == kTimeout) {
    Reader r{p.data(), p.size()};
    auto missing = r.strs();
    throw StoreTimeout(
        str_cat("timed out after ", ms / 1000.0, " s waiting for key(s) ", join_keys(missing), " in ", where()));
  }
  expect_ok(st, p, where());
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  uint8_t st = 0;
  auto p = request(Writer().u8(kAdd).str(key).i64(delta).frame(), opts_.op_timeout, &st);
  expect_ok(st, p, where());
  Reader r{p.data(), p.size()};
  return r.i64();
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  uint8_t st = 0;
  auto p = request(Writer().u8(kCheck).strs(keys).frame(), opts_.op_timeout, &st);
  expect_ok(st, p, where());
  Reader r{p.data(), p.size()};
  return r.u8() != 0;
}

bool StoreClient::erase(const std::string& key) {
  uint8_t st = 0;
  auto p = request(Writer().u8(kDel).str(key).frame(), opts_.op_timeout, &st);
  expect_ok(st, p, where());
  Reader r{p.data(), p.size()};
  return r.u8() != 0;
}

void StoreClient::set_will(const std::string& key, const std::string& value) {
  uint8_t st = 0;
  auto p = request(Writer().u8(kWill).str(key).str(value).frame(), opts_.op_timeout, &st);
  expect_ok(st, p, where());
}

std::string job_token_from_env() {
  const char* t = std::getenv("NANOCHAT_JOB_TOKEN");
  return t ? t : "";
}

}  // namespace nanochat::cluster
