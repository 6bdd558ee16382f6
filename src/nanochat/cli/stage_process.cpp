#include "nanochat/cli/stage_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "nanochat/core/error.h"

namespace nanochat::cli {

namespace {

volatile sig_atomic_t g_child = 0;   // the running stage's pid
volatile sig_atomic_t g_signal = 0;  // the stop signal received while it ran

void pass_on(int sig) {
  g_signal = sig;
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
}

}  // namespace

int stop_signal() { return g_signal; }

int run_stage_process(const std::string& program, const std::vector<std::string>& args, const std::string& log_path,
                      const std::function<void(const std::string&)>& on_line) {
  std::ofstream log(log_path, std::ios::app);
  if (!log) fail("cannot open the stage log ", log_path, " (check that its folder is writable)");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) fail("cannot create a pipe for ", program, ": ", std::strerror(errno));
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) fail("cannot start ", program, ": ", std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);  // a terminal's Ctrl-C reaches speedrun alone, which passes it on once
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);  // even where our starter ignored them
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the parent died before the line above
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execv(program.c_str(), argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", program.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  g_child = pid;
  g_signal = 0;
  struct sigaction sa {
  }, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = pass_on;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  std::string pending;
  char buf[4096];
  auto emit = [&](const std::string& line) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    log << line << '\n';
    log.flush();
    if (on_line) on_line(line);
  };
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find_first_of("\n\r")) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty()) emit(line);
    }
  }
  if (!pending.empty()) emit(pending);
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace nanochat::cli
