// Sandboxed runs of Python code (execution.h).
#include "nanochat/tasks/execution.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "nanochat/core/error.h"

namespace nanochat::tasks {

namespace {

// Runs first in the child interpreter: reads the program, then takes away what could do harm by
// accident, then runs the program as __main__.
constexpr const char* kGuard = R"PY(
import builtins, os, shutil, subprocess, sys
with open("program.py", encoding="utf-8") as f:
    source = f.read()
for attr in ("system", "kill", "killpg", "fork", "forkpty", "remove", "unlink", "rmdir", "removedirs",
             "rename", "renames", "replace", "truncate", "chmod", "fchmod", "lchmod", "chown", "fchown",
             "lchown", "chroot", "chdir", "fchdir", "getcwd", "setuid", "putenv", "lchflags"):
    if hasattr(os, attr):
        setattr(os, attr, None)
for attr in ("rmtree", "move", "chown"):
    setattr(shutil, attr, None)
subprocess.Popen = None
builtins.exit = None
builtins.quit = None
builtins.help = None
for mod in ("resource", "psutil", "joblib", "ipdb", "tkinter"):
    sys.modules[mod] = None
exec(compile(source, "<llm>", "exec"), {"__name__": "__main__"})
)PY";

constexpr size_t kMaxCapture = size_t(1) << 20;

void set_limit(int what, rlim_t v) {
  struct rlimit r {
    v, v
  };
  setrlimit(what, &r);
}

}  // namespace

ExecutionResult execute_python(const std::string& code, const ExecutionLimits& limits) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "nanochat-exec-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) fail("cannot create a temporary folder for running code: ", std::strerror(errno));
  const std::string dir = tmpl;
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  {
    std::ofstream f(dir + "/program.py", std::ios::binary);
    f << code;
    if (!f) fail(dir, "/program.py: cannot write the program to run");
  }
  int out_pipe[2], err_pipe[2], net_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 || pipe2(net_pipe, O_CLOEXEC) != 0)
    fail("cannot create pipes for running code: ", std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) fail("cannot start a process for running code: ", std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    const char isolated = unshare(CLONE_NEWNET) == 0 ? '1' : '0';
    (void)!write(net_pipe[1], &isolated, 1);
    const int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    if (chdir(dir.c_str()) != 0) _exit(126);
    const auto mem = static_cast<rlim_t>(limits.max_memory_bytes);
    set_limit(RLIMIT_AS, mem);
    set_limit(RLIMIT_DATA, mem);
    set_limit(RLIMIT_CPU, static_cast<rlim_t>(limits.timeout_s) + 1);
    set_limit(RLIMIT_FSIZE, rlim_t(64) << 20);
    set_limit(RLIMIT_CORE, 0);
    const char* argv[] = {"python3", "-I", "-c", kGuard, nullptr};
    const char* envp[] = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=1", nullptr};
    execve("/usr/bin/python3", const_cast<char* const*>(argv), const_cast<char* const*>(envp));
    const char msg[] = "cannot run /usr/bin/python3\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also here: the child may not have run its own setpgid yet
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(net_pipe[1]);
  ExecutionResult res;
  char isolated = '0';
  if (read(net_pipe[0], &isolated, 1) == 1) res.network_isolated = isolated == '1';
  close(net_pipe[0]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limits.timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* bufs[2] = {&res.out, &res.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      res.timeout = true;
      break;
    }
    const int k = poll(fds, 2, static_cast<int>(left.count()) + 1);
    if (k < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      } else if (bufs[i]->size() < kMaxCapture) {
        bufs[i]->append(buf, std::min(static_cast<size_t>(n), kMaxCapture - bufs[i]->size()));
      }
    }
  }
  if (res.timeout) kill(-pid, SIGKILL);
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  kill(-pid, SIGKILL);  // anything the program left behind in its group
  if (res.timeout) {
    res.out.clear();
    res.err.clear();
    res.error = "Execution timed out (process killed)";
    return res;
  }
  res.success = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  res.memory_exceeded = res.err.find("MemoryError") != std::string::npos;
  if (!res.success) {
    size_t e = res.err.find_last_not_of(" \t\r\n");
    if (e == std::string::npos) {
      res.error = WIFSIGNALED(status) ? str_cat("killed by signal ", WTERMSIG(status)) : "Execution failed";
    } else {
      const size_t b = res.err.rfind('\n', e);
      res.error = res.err.substr(b == std::string::npos ? 0 : b + 1, e - (b == std::string::npos ? 0 : b + 1) + 1);
    }
  }
  return res;
}

}  // namespace nanochat::tasks
