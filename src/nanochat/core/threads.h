#pragma once
// Compute thread count of this process: the OpenMP threads our kernels run on. oneDNN's sgemm
// (kernels/gemm.h) is built on the same OpenMP runtime (DNNL_CPU_RUNTIME=OMP) and reads the same
// setting at each call, so this one knob governs both; kernels needs no setup of its own.
// The default is OpenMP's: OMP_NUM_THREADS, else every core (docs/architecture.md 6).
//
// How idle OpenMP threads wait between parallel regions is the runtime's wait policy. libgomp
// reads it (OMP_WAIT_POLICY, GOMP_SPINCOUNT) once, when it is loaded, before main() runs; its own
// default spins each idle thread for up to ~300,000 pause instructions (milliseconds), which takes
// the core from whatever else runs there and makes a shared machine slow for everyone, this
// process included. nanochat therefore makes idle threads sleep at once (passive) unless the user
// chose a policy: use_default_wait_policy() at the top of main() sets the variables and
// re-executes the program so that the runtime reads them.
// Parallel loops whose iterations are independent use schedule(guided) (schedule(simd : guided)
// for `parallel for simd`), so a thread that another process delays does not hold the others up
// at the loop's end; loops with a reduction keep schedule(static), whose fixed split keeps their
// sums reproducible run to run.
#include <cstdint>
#include <string>

namespace nanochat {

/// Sets the number of OpenMP threads for the parallel regions that start after the call, on the
/// calling thread. n < 1 is taken as 1.
void set_num_threads(int n);
/// Current number of OpenMP threads (what the next parallel region gets).
int num_threads();

/// nanochat's default wait policy, as the value of OMP_WAIT_POLICY it sets.
inline constexpr const char* kDefaultWaitPolicy = "passive";
/// Environment variable that marks OMP_WAIT_POLICY as set by nanochat rather than by the user
/// (it holds the value set; processes that nanochat starts inherit both).
inline constexpr const char* kDefaultWaitPolicyMarker = "NANOCHAT_DEFAULT_WAIT_POLICY";

/// Call first in main(), before any thread exists. If neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT
/// is set, sets OMP_WAIT_POLICY=kDefaultWaitPolicy (and the marker) and re-executes this program
/// (/proc/self/exe) with the same argv, so that libgomp reads it; the new process finds it set and
/// returns. A user's own setting is left alone. Returns normally (the runtime's default stays in
/// effect, and wait_policy_summary() says so) if the program cannot be re-executed. Also records
/// the policy the runtime applies, for wait_policy_summary().
void use_default_wait_policy(char** argv);

/// The spin count the OpenMP runtime applies (libgomp's GOMP_SPINCOUNT as it parsed it, read back
/// from omp_display_env): 0 = passive; -1 if the runtime does not report it (not libgomp).
/// Captured once, by use_default_wait_policy() or the first call.
int64_t wait_spin_count();

/// One line for start-up logs: the wait policy in effect and where it comes from, e.g.
/// "passive (idle threads sleep at once; nanochat's default, set OMP_WAIT_POLICY to change it)".
std::string wait_policy_summary();

/// The CPUs this process may run on (sched_getaffinity), as a list like "0-3,6".
std::string cpu_affinity_list();

/// Nanoseconds the threads of this process have spent runnable but waiting for a CPU (the second
/// field of /proc/self/task/*/schedstat, summed; threads that exited no longer count), or -1 where
/// the kernel does not report it. The difference over a step shows whether other work kept this
/// rank's threads off their cores (core/thread_tuner.h).
int64_t process_run_delay_ns();

/// Names the calling thread `name` so that `ps -L`, `top -H` and /proc/<pid>/task/<tid>/comm tell
/// a process's threads apart (the kernel keeps the first 15 characters). Errors are ignored: the
/// name only helps diagnosis. Names in use: nc-comm (a communicator's work queue), nc-loader (the
/// data loader's prefetch), nc-feed (rank 0's feed of the step's rows), nc-feed-recv (a worker's
/// feed receiver), nc-heartbeat.
void name_this_thread(const char* name);

}  // namespace nanochat
