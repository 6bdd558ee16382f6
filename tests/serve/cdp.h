#pragma once
// A headless Chromium driven over the DevTools protocol through --remote-debugging-pipe: the
// browser reads JSON commands (each ended by a NUL byte) on its fd 3 and writes answers and events
// on its fd 4. No websocket is needed. Every wait has a deadline.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sctest {

class Chromium {
 public:
  using json = nlohmann::json;

  /// Starts `binary` headless with a fresh profile under `profile_dir`; throws if it cannot start.
  Chromium(const std::string& binary, const std::string& profile_dir) {
    int to_browser[2], from_browser[2], log[2];
    if (::pipe(to_browser) != 0 || ::pipe(from_browser) != 0 || ::pipe(log) != 0) throw std::runtime_error("pipe");
    std::vector<std::string> args = {binary,
                                     "--headless",
                                     "--no-sandbox",
                                     "--disable-gpu",
                                     "--disable-dev-shm-usage",
                                     "--no-first-run",
                                     "--no-default-browser-check",
                                     "--disable-extensions",
                                     "--remote-debugging-pipe",
                                     "--window-size=1100,800",
                                     "--user-data-dir=" + profile_dir,
                                     "about:blank"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const int in = ::fcntl(to_browser[0], F_DUPFD, 100), out = ::fcntl(from_browser[1], F_DUPFD, 100);
      ::dup2(in, 3);
      ::dup2(out, 4);
      ::dup2(log[1], 1);
      ::dup2(log[1], 2);
      for (int fd = 5; fd < 1024; ++fd) ::close(fd);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(to_browser[0]);
    ::close(from_browser[1]);
    ::close(log[1]);
    wfd_ = to_browser[1];
    rfd_ = from_browser[0];
    logfd_ = log[0];
    ::fcntl(logfd_, F_SETFL, O_NONBLOCK);
  }
  ~Chromium() {
    if (pid_ > 0) {
      try {
        send_raw({{"id", ++id_}, {"method", "Browser.close"}});
      } catch (...) {
      }
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      int st = 0;
      while (::waitpid(pid_, &st, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > end) {
          ::kill(-pid_, SIGKILL);
          ::waitpid(pid_, &st, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    for (int fd : {wfd_, rfd_, logfd_})
      if (fd >= 0) ::close(fd);
  }
  Chromium(const Chromium&) = delete;
  Chromium& operator=(const Chromium&) = delete;

  /// Sends a command (to the attached page when session is set) and returns its "result"; throws
  /// with the browser's error or on a 20 s deadline.
  json call(const std::string& method, json params = json::object(), bool to_page = true) {
    const int id = ++id_;
    json msg = {{"id", id}, {"method", method}, {"params", std::move(params)}};
    if (to_page && !session_.empty()) msg["sessionId"] = session_;
    send_raw(msg);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      size_t nul;
      while ((nul = buf_.find('\0')) != std::string::npos) {
        json j = json::parse(buf_.substr(0, nul));
        buf_.erase(0, nul + 1);
        if (j.contains("id") && j["id"] == id) {
          if (j.contains("error")) throw std::runtime_error(method + ": " + j["error"].dump());
          return j["result"];
        }
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
      pollfd p{rfd_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0)
        throw std::runtime_error(method + ": no answer from chromium within 20 s; its output: " + log());
      char b[65536];
      const ssize_t n = ::read(rfd_, b, sizeof b);
      if (n <= 0) throw std::runtime_error(method + ": chromium closed the pipe; its output: " + log());
      buf_.append(b, static_cast<size_t>(n));
    }
  }

  /// Opens a page at url and attaches to it (later calls go to that page).
  void open(const std::string& url) {
    const json t = call("Target.createTarget", {{"url", url}}, false);
    const json a = call("Target.attachToTarget", {{"targetId", t["targetId"]}, {"flatten", true}}, false);
    session_ = a["sessionId"];
  }

  /// The value of a JavaScript expression in the page (promises awaited).
  json eval(const std::string& expr) {
    const json r = call("Runtime.evaluate", {{"expression", expr}, {"returnByValue", true}, {"awaitPromise", true}});
    if (r.contains("exceptionDetails")) throw std::runtime_error("page script failed: " + r["exceptionDetails"].dump());
    return r["result"].contains("value") ? r["result"]["value"] : json();
  }

  /// Polls expr every 20 ms until it is true; false after `seconds`.
  bool wait_for(const std::string& expr, double seconds = 15) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (std::chrono::steady_clock::now() < end) {
      if (eval("!!(" + expr + ")") == true) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  /// Types text into the focused element as a user would (Input.insertText), then presses Enter.
  void type_and_enter(const std::string& text) {
    call("Input.insertText", {{"text", text}});
    for (const char* type : {"keyDown", "keyUp"})
      call("Input.dispatchKeyEvent",
           {{"type", type}, {"key", "Enter"}, {"code", "Enter"}, {"windowsVirtualKeyCode", 13}});
  }

  /// PNG bytes of the page as shown.
  std::string screenshot() {
    const json r = call("Page.captureScreenshot", {{"format", "png"}});
    return base64_decode(r["data"].get<std::string>());
  }

  /// What chromium printed so far (for failure messages).
  std::string log() {
    char b[4096];
    ssize_t n;
    while ((n = ::read(logfd_, b, sizeof b)) > 0) log_.append(b, static_cast<size_t>(n));
    return log_.size() > 4000 ? log_.substr(log_.size() - 4000) : log_;
  }

 private:
  void send_raw(const json& msg) {
    const std::string s = msg.dump() + std::string(1, '\0');
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::write(wfd_, s.data() + off, s.size() - off);
      if (n <= 0) throw std::runtime_error("chromium's command pipe is closed");
      off += static_cast<size_t>(n);
    }
  }
  static std::string base64_decode(const std::string& in) {
    std::string out;
    int val = 0, bits = -8;
    for (unsigned char c : in) {
      int d;
      if (c >= 'A' && c <= 'Z')
        d = c - 'A';
      else if (c >= 'a' && c <= 'z')
        d = c - 'a' + 26;
      else if (c >= '0' && c <= '9')
        d = c - '0' + 52;
      else if (c == '+')
        d = 62;
      else if (c == '/')
        d = 63;
      else
        continue;
      val = (val << 6) | d;
      bits += 6;
      if (bits >= 0) {
        out.push_back(static_cast<char>((val >> bits) & 0xFF));
        bits -= 8;
      }
    }
    return out;
  }

  pid_t pid_ = -1;
  int wfd_ = -1, rfd_ = -1, logfd_ = -1;
  int id_ = 0;
  std::string session_, buf_, log_;
};

/// The chromium to drive: $NANOCHAT_CHROMIUM, else the first of chromium / chromium-browser /
/// google-chrome found on PATH ("" if none).
inline std::string find_chromium() {
  if (const char* e = std::getenv("NANOCHAT_CHROMIUM"); e && *e) return e;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin";
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    size_t start = 0;
    while (start <= p.size()) {
      const size_t end = p.find(':', start);
      const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
      const std::string cand = dir + "/" + name;
      if (::access(cand.c_str(), X_OK) == 0) return cand;
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  return "";
}

}  // namespace sctest
