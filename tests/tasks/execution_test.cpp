// The sandbox HumanEval judges with (tasks/execution.h): results, captured output, the time and
// memory limits, the guard, the scrubbed environment, the removed temporary folder, the network.
#include "nanochat/tasks/execution.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

namespace nanochat::tasks {
namespace {

TEST(ExecutePython, SuccessAndOutput) {
  const auto r = execute_python("import sys\nprint('hello', 6 * 7)\nprint('warn', file=sys.stderr)\n");
  EXPECT_TRUE(r.success) << r.err;
  EXPECT_EQ(r.out, "hello 42\n");
  EXPECT_EQ(r.err, "warn\n");
  EXPECT_EQ(r.error, "");
  EXPECT_FALSE(r.timeout);
}

TEST(ExecutePython, FailureNamesTheLastLineOfTheTraceback) {
  const auto r = execute_python("def f(x):\n    return x + 1\nassert f(1) == 3, 'wrong sum'\n");
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.error, "AssertionError: wrong sum");
  const auto s = execute_python("def f(:\n");
  EXPECT_FALSE(s.success);
  EXPECT_NE(s.error.find("SyntaxError"), std::string::npos) << s.error;
}

TEST(ExecutePython, TimeLimitKillsTheProcess) {
  ExecutionLimits lim;
  lim.timeout_s = 0.5;
  const auto r = execute_python("print('start', flush=True)\nwhile True:\n    pass\n", lim);
  EXPECT_FALSE(r.success);
  EXPECT_TRUE(r.timeout);
  EXPECT_EQ(r.error, "Execution timed out (process killed)");
}

TEST(ExecutePython, MemoryLimit) {
  const auto r = execute_python("x = bytearray(1 << 30)\nprint(len(x))\n");  // 1 GiB > 256 MiB
  EXPECT_FALSE(r.success);
  EXPECT_TRUE(r.memory_exceeded) << r.err;
  EXPECT_EQ(r.out, "");
  ExecutionLimits big;
  big.max_memory_bytes = int64_t(2) << 30;
  const auto ok = execute_python("x = bytearray(1 << 28)\nprint(len(x))\n", big);
  EXPECT_TRUE(ok.success) << ok.err;
}

TEST(ExecutePython, GuardEnvironmentAndFolder) {
  const auto r = execute_python(
      "import os\n"
      "print(sorted(k for k in os.environ if k != 'LC_CTYPE'))\n"  // LC_CTYPE: Python's own locale coercion
      "print(os.readlink('/proc/self/cwd'))\n"
      "open('scratch.txt', 'w').write('x')\n"
      "try:\n    os.system('true')\nexcept TypeError:\n    print('no system')\n"
      "import subprocess\n"
      "try:\n    subprocess.run(['true'])\nexcept TypeError:\n    print('no subprocess')\n");
  ASSERT_TRUE(r.success) << r.err;
  std::vector<std::string> lines;
  for (size_t b = 0, e; (e = r.out.find('\n', b)) != std::string::npos; b = e + 1)
    lines.push_back(r.out.substr(b, e - b));
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[0], "['OMP_NUM_THREADS', 'PATH']");
  EXPECT_NE(lines[1].find("nanochat-exec-"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(lines[1])) << "the temporary folder is left behind: " << lines[1];
  EXPECT_EQ(lines[2], "no system");
  EXPECT_EQ(lines[3], "no subprocess");
}

TEST(ExecutePython, NetworkBlockedWhenIsolated) {
  // A listener of ours on loopback; the program tries to reach it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  const auto r = execute_python("import socket\ns = socket.create_connection(('127.0.0.1', " + std::to_string(port) +
                                "), timeout=2)\nprint('connected')\n");
  close(fd);
  if (r.network_isolated) {
    EXPECT_FALSE(r.success) << "reached the host's loopback from an isolated run";
  } else {
    // Without a network namespace (the kernel refused one) the network is not blocked.
    EXPECT_TRUE(r.success) << r.err;
  }
}

}  // namespace
}  // namespace nanochat::tasks
