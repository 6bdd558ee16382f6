#pragma once
// A node of a job started in the background (`nanochat run ...` with its output in a file) for the
// tests that freeze, wake or kill a node while the others train, and waits on its log.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/cli_util.h"
#include "support/proc_util.h"

namespace nctest {

// A `nanochat run` started in the background with its output in a file; killed (its process
// group: the launcher and its rank) on destruction if still running.
struct BackgroundNode {
  pid_t pid = -1;
  int status = -1;
  std::string log;
  // `wrap`: a command that runs the binary (e.g. `ip netns exec NS`), or "".
  BackgroundNode(const std::string& dir, const std::string& args, const std::string& env, const std::string& log_path,
                 const std::string& wrap = "")
      : log(log_path) {
    const std::string cmd =
        "NANOCHAT_BASE_DIR=" + dir + " " + env + " exec " + wrap + " " + NANOCHAT_BINARY + args + " > " + log + " 2>&1";
    pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);  // its own group: the test can freeze the whole node
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    ::setpgid(pid, pid);
  }
  bool wait_until(std::chrono::steady_clock::time_point deadline) {
    while (status < 0) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        status = st;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return true;
  }
  // The launcher's ranks (each in its own process group), from /proc.
  std::vector<pid_t> ranks() const {
    std::vector<pid_t> out;
    std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
    for (pid_t c; in >> c;) out.push_back(c);
    return out;
  }
  // SIGSTOP / SIGCONT to the launcher and its ranks: the whole node (a laptop asleep or awake).
  void signal_node(int sig) {
    for (pid_t r : ranks()) ::kill(r, sig);
    ::kill(-pid, sig);
  }
  ~BackgroundNode() {
    if (pid > 0 && status < 0) {
      for (pid_t r : ranks())
        if (slurp("/proc/" + std::to_string(r) + "/comm").rfind("nanochat", 0) == 0) {
          ::kill(r, SIGCONT);
          ::kill(r, SIGKILL);
        }
      ::kill(-pid, SIGCONT);
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
};

// Waits (at most 120 s) until `node` has logged `n` step lines (lines with `marker`); fails with its log when
// it ended first or the time passed.
inline ::testing::AssertionResult logged_steps(BackgroundNode& node, size_t n, const std::string& marker = "] step ") {
  const auto start = std::chrono::steady_clock::now();
  while (count_of(slurp(node.log), marker) < n) {
    if (std::chrono::steady_clock::now() >= start + std::chrono::seconds(120) ||
        node.wait_until(std::chrono::steady_clock::now()))
      return ::testing::AssertionFailure() << "no " << n << " step lines:\n" << slurp(node.log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ::testing::AssertionSuccess();
}

// Waits (at most 90 s) until `node` logged `line`; fails with its log when it ended first.
inline ::testing::AssertionResult logged_line(BackgroundNode& node, const std::string& line) {
  const auto start = std::chrono::steady_clock::now();
  while (slurp(node.log).find(line) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= start + std::chrono::seconds(90) ||
        node.wait_until(std::chrono::steady_clock::now()))
      return ::testing::AssertionFailure() << "no line '" << line << "':\n" << slurp(node.log);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ::testing::AssertionSuccess();
}

}  // namespace nctest
