#pragma once
// Test helpers: start processes (the nanochat CLI, or forked copies of the test running a lambda),
// read their merged stdout+stderr, and wait for them, every wait with a deadline.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace nctest {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

/// A child process whose stdout and stderr go to one pipe that the test reads.
class Proc {
 public:
  Proc() = default;
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;
  Proc(Proc&& o) noexcept { *this = std::move(o); }
  Proc& operator=(Proc&& o) noexcept {
    std::swap(pid_, o.pid_);
    std::swap(fd_, o.fd_);
    std::swap(out_, o.out_);
    std::swap(status_, o.status_);
    std::swap(done_, o.done_);
    return *this;
  }
  ~Proc() {
    if (pid_ > 0 && !done_) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  /// Starts argv (argv[0] is a path) with extra environment variables ("NAME=value", replacing
  /// inherited ones; a bare "NAME" removes it), in its own process group. Everything is prepared
  /// before fork.
  static Proc spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env_extra) {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
      std::string s = *e;
      bool replaced = false;
      for (const auto& x : env_extra)
        if (s.compare(0, s.find('='), x, 0, x.find('=')) == 0) replaced = true;
      if (!replaced) env.push_back(s);
    }
    for (const auto& x : env_extra)
      if (x.find('=') != std::string::npos) env.push_back(x);
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    return start([&] {
      execve(a[0], a.data(), e.data());
      const char msg[] = "execve failed\n";
      ssize_t ignored = ::write(2, msg, sizeof(msg) - 1);
      (void)ignored;
      _exit(127);
    });
  }

  /// Forks; the child runs fn (which must not return normally; if it does, exit status 0).
  static Proc start(const std::function<void()>& fn) {
    int p[2];
    if (pipe(p) != 0) std::abort();
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      setpgid(0, 0);
      dup2(p[1], 1);
      dup2(p[1], 2);
      close(p[0]);
      close(p[1]);
      fn();
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(0);
    }
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    Proc pr;
    pr.pid_ = pid;
    pr.fd_ = p[0];
    return pr;
  }

  pid_t pid() const { return pid_; }
  const std::string& output() const { return out_; }

  /// Reads output until `needle` appears or the deadline passes; returns whether it appeared.
  bool wait_for_output(const std::string& needle, Ms timeout) {
    auto dl = Clock::now() + timeout;
    while (out_.find(needle) == std::string::npos) {
      if (Clock::now() >= dl) return false;
      if (!read_some(Ms(50)) && done_) return out_.find(needle) != std::string::npos;
      reap();
    }
    return true;
  }

  /// Waits for exit (reading output meanwhile). Returns false on timeout (the process is left).
  bool wait(Ms timeout) {
    auto dl = Clock::now() + timeout;
    for (;;) {
      read_some(Ms(20));
      reap();
      if (done_ && fd_ < 0) return true;
      if (done_) {  // drain the pipe (grandchildren may hold it open: bound it)
        auto drain_dl = std::min(dl, Clock::now() + Ms(2000));
        while (fd_ >= 0 && Clock::now() < drain_dl) read_some(Ms(20));
        return true;
      }
      if (Clock::now() >= dl) return false;
    }
  }

  bool done() {
    reap();
    return done_;
  }
  /// Raw wait status (valid once done).
  int status() const { return status_; }
  bool exited_ok() const { return done_ && WIFEXITED(status_) && WEXITSTATUS(status_) == 0; }
  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  void signal(int sig) { ::kill(pid_, sig); }

 private:
  // Returns true if something was read.
  bool read_some(Ms timeout) {
    if (fd_ < 0) {
      std::this_thread::sleep_for(timeout);
      return false;
    }
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char buf[8192];
    bool any = false;
    for (;;) {
      ssize_t k = ::read(fd_, buf, sizeof(buf));
      if (k > 0) {
        out_.append(buf, static_cast<size_t>(k));
        any = true;
        continue;
      }
      if (k == 0) {
        ::close(fd_);
        fd_ = -1;
      }
      break;
    }
    return any;
  }
  void reap() {
    if (done_ || pid_ <= 0) return;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      done_ = true;
      status_ = st;
    }
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
  int status_ = 0;
  bool done_ = false;
};

/// Path of the nanochat CLI built alongside the tests.
inline std::string nanochat_binary() { return NANOCHAT_BINARY; }

/// Number of non-overlapping occurrences of needle in hay.
inline size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

/// Runs `cmd` through /bin/sh with stderr joined to stdout; returns {exit code (128 + signal when
/// killed), output}.
inline std::pair<int, std::string> shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {127, "popen failed: " + cmd};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

/// Runs argv (argv[0] is a path) with a deadline; returns {exit code, output}, {127, "... not
/// found"} when argv[0] is not executable and {124, "timed out: ..."} past the deadline.
inline std::pair<int, std::string> run_argv(const std::vector<std::string>& argv,
                                            std::chrono::milliseconds deadline = std::chrono::milliseconds(20000)) {
  if (access(argv[0].c_str(), X_OK) != 0) return {127, argv[0] + " not found"};
  Proc p = Proc::spawn(argv, {});
  if (!p.wait(deadline)) return {124, "timed out: " + p.output()};
  return {p.exit_code(), p.output()};
}

}  // namespace nctest
