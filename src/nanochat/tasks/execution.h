#pragma once
// Runs Python code written by a model, for judging it (HumanEval; nanochat/execution.py
// execute_code, commit 92d63d4): a fresh `python3` process per program, in a new empty temporary
// folder (removed afterwards), with a scrubbed environment (PATH=/usr/bin:/bin), stdin from
// /dev/null, stdout and stderr captured (the first 1 MiB of each), and limits:
//   - time: the process group is killed (SIGKILL) at the deadline;
//   - memory: RLIMIT_AS and RLIMIT_DATA = max_memory_bytes; CPU time: RLIMIT_CPU = timeout + 1 s;
//     files written: RLIMIT_FSIZE = 64 MiB; no core files;
//   - network: the process runs in a new network namespace when the kernel lets this user make
//     one (then it has no interface but a down loopback); otherwise network is not blocked;
//   - a guard run before the code disables Python's process, file-removal and permission
//     functions (os.system, os.fork, os.kill, os.remove, shutil.rmtree, subprocess.Popen, ...),
//     like nanochat's.
// This protects against accidents, not against code written to escape (ctypes, ...).
#include <cstdint>
#include <string>

namespace nanochat::tasks {

struct ExecutionLimits {
  double timeout_s = 5.0;                         ///< wall-clock seconds (nanochat's default)
  int64_t max_memory_bytes = int64_t(256) << 20;  ///< address space (nanochat's default 256 MiB)
};

struct ExecutionResult {
  bool success = false;           ///< exit status 0
  std::string out, err;           ///< captured stdout / stderr
  std::string error;              ///< "" on success; else the last line of stderr, or what happened
  bool timeout = false;           ///< killed at the deadline
  bool memory_exceeded = false;   ///< "MemoryError" in stderr
  bool network_isolated = false;  ///< ran in its own network namespace
};

/// Runs `code` as a Python program under the limits above. Never throws for anything the code
/// does; throws nanochat::Error only when the process cannot be started (no temporary folder,
/// fork failed), naming what failed. A missing python3 is reported as an unsuccessful result.
ExecutionResult execute_python(const std::string& code, const ExecutionLimits& limits = {});

}  // namespace nanochat::tasks
