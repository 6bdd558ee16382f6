#pragma once
// Helpers of the chat-web tests: a scripted Backend whose tokens the test controls (content,
// pace, a gate that holds generation), an in-process ChatServer on 127.0.0.1, and a raw HTTP client
// over a loopback socket (to read a stream piece by piece and to hang up mid-answer).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/serve/server.h"

namespace sctest {

using namespace nanochat::serve;
using Clock = std::chrono::steady_clock;

/// What every scripted backend of one server shares: the answer pieces, a gate and counters.
struct Script {
  std::vector<std::string> pieces;  ///< row r emits pieces[i] with "{r}" replaced by r (cycled if endless)
  bool endless = false;             ///< keep emitting until stopped (else "stop" after the pieces)
  int piece_delay_ms = 0;
  bool throw_at_start = false;
  std::mutex m;
  std::condition_variable cv;
  bool gate_open = true;
  std::atomic<int> running{0}, started{0}, cancelled{0}, finished{0};
  std::atomic<int> last_messages{0};       ///< messages in the last request rendered
  std::vector<ChatMessage> last_rendered;  ///< the last request's messages as rendered (under m)
  SampleParams last_params;                ///< the last generation's settings (under m)
  std::vector<ChatMessage> rendered() {
    std::lock_guard<std::mutex> lk(m);
    return last_rendered;
  }
  SampleParams params() {
    std::lock_guard<std::mutex> lk(m);
    return last_params;
  }
  void open() {
    {
      std::lock_guard<std::mutex> lk(m);
      gate_open = true;
    }
    cv.notify_all();
  }
  void close() {
    std::lock_guard<std::mutex> lk(m);
    gate_open = false;
  }
  /// Waits (at most 10 s) until `running` reaches n; false on timeout.
  bool wait_running(int n) {
    const auto end = Clock::now() + std::chrono::seconds(10);
    while (running.load() != n && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return running.load() == n;
  }
};

class ScriptedBackend : public Backend {
 public:
  explicit ScriptedBackend(std::shared_ptr<Script> s) : s_(std::move(s)) {}
  std::vector<RowEnd> generate(const std::vector<int32_t>&, const SampleParams& params,
                               const std::function<Control(int, const std::string&)>& on_piece) override {
    {
      std::lock_guard<std::mutex> lk(s_->m);
      s_->last_params = params;
    }
    ++s_->started;
    ++s_->running;
    struct Down {
      Script& s;
      ~Down() { --s.running; }
    } down{*s_};
    if (s_->throw_at_start) throw std::runtime_error("scripted failure");
    std::vector<RowEnd> ends(static_cast<size_t>(params.n), RowEnd{"length", 0});
    std::vector<bool> live(static_cast<size_t>(params.n), true);
    for (size_t i = 0;; ++i) {
      if (!s_->endless && i >= s_->pieces.size()) {
        for (int r = 0; r < params.n; ++r)
          if (live[r]) ends[r].finish_reason = "stop";
        break;
      }
      bool any = false;
      for (int r = 0; r < params.n; ++r) {
        if (!live[r]) continue;
        if (ends[r].tokens >= params.max_tokens) {
          live[r] = false;
          continue;
        }
        {
          std::unique_lock<std::mutex> lk(s_->m);
          s_->cv.wait(lk, [&] { return s_->gate_open; });
        }
        if (s_->piece_delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(s_->piece_delay_ms));
        std::string p = s_->pieces[i % s_->pieces.size()];
        if (auto at = p.find("{r}"); at != std::string::npos) p.replace(at, 3, std::to_string(r));
        ++ends[r].tokens;
        any = true;
        const Control c = on_piece(r, p);
        if (c == Control::StopAll) {
          ++s_->cancelled;
          for (int q = 0; q < params.n; ++q)
            if (live[q]) ends[q].finish_reason = "cancelled";
          return ends;
        }
        if (c == Control::StopRow) {
          live[r] = false;
          ends[r].finish_reason = "cancelled";
        }
      }
      if (!any) break;
    }
    ++s_->finished;
    return ends;
  }

 private:
  std::shared_ptr<Script> s_;
};

/// A model whose prompt is one token per byte of the messages' text plus 3 per message, with a
/// context of `context` tokens.
inline ServedModel scripted_model(std::shared_ptr<Script> s, int64_t context = 4096) {
  ServedModel m;
  m.id = "scripted";
  m.context_len = context;
  m.render = [s](const std::vector<ChatMessage>& msgs) {
    s->last_messages = static_cast<int>(msgs.size());
    {
      std::lock_guard<std::mutex> lk(s->m);
      s->last_rendered = msgs;
    }
    std::vector<int32_t> ids;
    for (const auto& x : msgs) {
      ids.insert(ids.end(), 3, 1);
      ids.insert(ids.end(), x.content.size(), 2);
    }
    return ids;
  };
  m.make = [s](int) { return std::make_unique<ScriptedBackend>(s); };
  return m;
}

/// A ChatServer on 127.0.0.1 and a free port, serving on its own thread until destroyed.
struct TestServer {
  std::unique_ptr<ChatServer> server;
  std::thread thread;
  int port = 0;
  TestServer(ServeOptions opt, ServedModel model) {
    opt.host = "127.0.0.1";
    opt.port = 0;
    server = std::make_unique<ChatServer>(opt, std::move(model));
    port = server->bind();
    thread = std::thread([this] { server->run(); });
  }
  ~TestServer() {
    server->stop();
    thread.join();
  }
};

/// A raw HTTP/1.1 connection to 127.0.0.1:port with deadlines on every read.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { hang_up(); }
  bool ok() const { return ok_; }
  void send_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  /// Sends s, waiting at most 2 s each time the socket is full; false when the peer stopped reading
  /// or closed.
  bool send_some(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 2000) <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
      if (n > 0) off += static_cast<size_t>(n);
    }
    return true;
  }
  /// POSTs a JSON body to path.
  void post(const std::string& path, const std::string& body) {
    send_all("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  /// Reads until `needle` is in what was received (or the peer closes / the deadline passes).
  bool read_until(const std::string& needle, std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
    const auto end = Clock::now() + deadline;
    while (got_.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return got_.find(needle) != std::string::npos;
      got_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  const std::string& received() const { return got_; }
  void hang_up() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string got_;
};

}  // namespace sctest
