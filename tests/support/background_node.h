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

/// Freezes node 1 (SIGSTOP: a laptop whose lid closed) until node 0 says that rank 1 left the job,
/// prints how long `what` took to go on without it, and wakes node 1 (SIGCONT).
inline ::testing::AssertionResult freeze_until_let_go(BackgroundNode& node0, BackgroundNode& node1,
                                                      const std::string& what) {
  if (node1.ranks().empty()) return ::testing::AssertionFailure() << "node 1's launcher has no rank";
  node1.signal_node(SIGSTOP);
  const auto frozen = std::chrono::steady_clock::now();
  const ::testing::AssertionResult left = logged_line(node0, "Rank 1 left the job");
  if (left)
    std::printf("%s went on %.1f s after node 1 froze\n", what.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen).count());
  node1.signal_node(SIGCONT);
  return left;
}

/// Waits at most `seconds` for both nodes of an elastic job to end, then checks that each exited
/// with status 0 (its log in the message); their logs in *out0 and *out1.
inline ::testing::AssertionResult both_end_ok(BackgroundNode& node0, BackgroundNode& node1, int seconds,
                                              std::string* out0, std::string* out1) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (auto* n : {&node0, &node1})
    if (!n->wait_until(deadline)) return ::testing::AssertionFailure() << "still running:\n" << slurp(n->log);
  *out0 = slurp(node0.log);
  *out1 = slurp(node1.log);
  for (auto [n, out] : {std::pair{&node0, out0}, std::pair{&node1, out1}})
    if (!WIFEXITED(n->status) || WEXITSTATUS(n->status) != 0)
      return ::testing::AssertionFailure() << "a node did not exit with status 0:\n" << *out;
  return ::testing::AssertionSuccess();
}

/// The lines of an elastic job (train/elastic.cpp) whose node 1 was let go and admitted again:
/// node 0's "1 rank goes on" and "A rank joined", node 1's request to join again.
inline void expect_left_and_rejoined(const std::string& out0, const std::string& out1) {
  EXPECT_NE(out0.find("1 rank goes on (old rank 0) from "), std::string::npos) << out0;
  EXPECT_NE(out0.find("A rank joined the job at step "), std::string::npos) << out0;
  EXPECT_NE(out1.find("asking node 0 to admit it again"), std::string::npos) << out1;
}

}  // namespace nctest
