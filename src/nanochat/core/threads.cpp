#include "nanochat/core/threads.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"

namespace nanochat {

void set_num_threads(int n) { omp_set_num_threads(n < 1 ? 1 : n); }

int num_threads() { return omp_get_max_threads(); }

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// What omp_display_env(1) writes to stderr, caught in a memory file (stderr is restored after).
std::string display_env_text() {
  const int mem = memfd_create("nanochat_omp_env", MFD_CLOEXEC);
  if (mem < 0) return "";
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  if (saved < 0 || dup2(mem, STDERR_FILENO) < 0) {
    if (saved >= 0) close(saved);
    close(mem);
    return "";
  }
  omp_display_env(1);
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string text;
  char buf[4096];
  for (off_t off = 0;;) {
    const ssize_t n = pread(mem, buf, sizeof buf, off);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    off += n;
  }
  close(mem);
  return text;
}

int64_t read_spin_count() {
  const std::string text = display_env_text();
  const std::string key = "GOMP_SPINCOUNT = '";
  const auto pos = text.find(key);
  if (pos == std::string::npos) return -1;
  return std::strtoll(text.c_str() + pos + key.size(), nullptr, 10);
}

int64_t& spin_count_cache() {
  static int64_t v = -2;  // -2: not read yet
  return v;
}

}  // namespace

void use_default_wait_policy(char** argv) {
  if (!env("OMP_WAIT_POLICY") && !env("GOMP_SPINCOUNT")) {
    setenv("OMP_WAIT_POLICY", kDefaultWaitPolicy, 1);
    setenv(kDefaultWaitPolicyMarker, kDefaultWaitPolicy, 1);
    execv(self_executable().c_str(), argv);
    // Not re-executed: the runtime keeps its own default; say so rather than claim ours.
    unsetenv("OMP_WAIT_POLICY");
    unsetenv(kDefaultWaitPolicyMarker);
  }
  (void)wait_spin_count();
}

int64_t wait_spin_count() {
  int64_t& v = spin_count_cache();
  if (v == -2) v = read_spin_count();
  return v;
}

std::string wait_policy_summary() {
  const int64_t spin = wait_spin_count();
  std::string what;
  if (spin < 0)
    what = "unknown, the OpenMP runtime does not report its spin count";
  else if (spin == 0)
    what = "passive, idle threads sleep at once";
  else if (spin >= 1'000'000'000)
    what = "active, idle threads spin";
  else
    what = str_cat("idle threads spin ", spin, " times, then sleep");
  const char* policy = env("OMP_WAIT_POLICY");
  const char* spins = env("GOMP_SPINCOUNT");
  const char* marker = env(kDefaultWaitPolicyMarker);
  std::string from;
  if (policy && !spins && marker && std::strcmp(policy, marker) == 0)
    from = "nanochat's default, set OMP_WAIT_POLICY or GOMP_SPINCOUNT to change it";
  else if (policy || spins)
    from = str_cat("from the environment:", policy ? str_cat(" OMP_WAIT_POLICY=", policy) : "",
                   spins ? str_cat(" GOMP_SPINCOUNT=", spins) : "");
  else
    from = "the OpenMP runtime's default";
  return what + " (" + from + ")";
}

std::string cpu_affinity_list() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "unknown";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE;) {
    if (!CPU_ISSET(c, &set)) {
      ++c;
      continue;
    }
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) ++e;
    if (!out.empty()) out += ',';
    out += e == c ? std::to_string(c) : str_cat(c, "-", e);
    c = e + 1;
  }
  return out;
}

int64_t process_run_delay_ns() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/task", ec), end;
  if (ec) return -1;
  int64_t total = 0;
  bool any = false;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    std::ifstream f(it->path() / "schedstat");
    int64_t on_cpu = 0, waiting = 0;
    if (!(f >> on_cpu >> waiting)) continue;  // the thread exited meanwhile
    total += waiting;
    any = true;
  }
  return any ? total : -1;
}

void name_this_thread(const char* name) {
  char kept[16] = {};
  std::strncpy(kept, name, sizeof kept - 1);
  (void)pthread_setname_np(pthread_self(), kept);
}

}  // namespace nanochat
