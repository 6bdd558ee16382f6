// bench_comm: bandwidth of the Gloo communicator's collectives (all-reduce, reduce-scatter,
// all-gather) for a few buffer sizes.
//
//   bench_comm [--world 2] [--sizes-mb 1,16,64] [--iters 5]
//       forks --world ranks on 127.0.0.1 (loopback) and prints rank 0's numbers;
//   WORLD_SIZE=.. RANK=.. MASTER_ADDR=.. MASTER_PORT=.. bench_comm [--sizes-mb ..] [--iters ..]
//       one rank per process (e.g. one per host or network namespace).
//
// Reported per operation and size S (bytes of the full buffer): median time over --iters runs
// after one warm-up, algbw = S / time, busbw = algbw * 2(W-1)/W for all-reduce and
// algbw * (W-1)/W for reduce-scatter / all-gather (the bytes each link must carry; the
// nccl-tests convention). Times are rank 0's, each run starting after a barrier.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "nanochat/cluster/env.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/core/error.h"

using namespace nanochat;
using namespace nanochat::cluster;

namespace {

struct Args {
  int world = 2;
  std::vector<double> sizes_mb = {1, 16, 64};
  int iters = 5;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) fail(k, " needs a value");
      return argv[++i];
    };
    if (k == "--world") {
      a.world = std::stoi(val());
    } else if (k == "--iters") {
      a.iters = std::stoi(val());
    } else if (k == "--sizes-mb") {
      a.sizes_mb.clear();
      std::stringstream ss(val());
      for (std::string t; std::getline(ss, t, ',');) a.sizes_mb.push_back(std::stod(t));
    } else {
      fail("unknown flag ", k, " (flags: --world N, --sizes-mb a,b,c, --iters N)");
    }
  }
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(Communicator& c, const Args& a) {
  const int W = c.world_size(), r = c.rank();
  if (r == 0) {
    std::printf("bench_comm: W=%d, float32 SUM, median of %d runs\n", W, a.iters);
    std::printf("%-15s %10s %10s %12s %12s\n", "op", "size_MiB", "ms", "algbw_GB/s", "busbw_GB/s");
  }
  for (double mb : a.sizes_mb) {
    const size_t n = static_cast<size_t>(mb * 1024 * 1024 / 4);
    std::vector<float> buf(n, 1.0f), out(n);
    std::vector<size_t> counts(W, n / W);
    for (size_t i = 0; i < n % W; ++i) counts[i] += 1;
    size_t off_r = 0;
    for (int j = 0; j < r; ++j) off_r += counts[j];
    struct Op {
      const char* name;
      double bus_factor;
      std::function<void()> run;
    };
    std::vector<Op> ops = {
        {"all_reduce", 2.0 * (W - 1) / W, [&] { c.all_reduce_sum(buf.data(), n)->wait(); }},
        {"reduce_scatter", 1.0 * (W - 1) / W, [&] { c.reduce_scatter_sum(buf.data(), out.data(), counts)->wait(); }},
        {"all_gather", 1.0 * (W - 1) / W, [&] { c.all_gather(buf.data() + off_r, out.data(), counts)->wait(); }},
    };
    for (auto& op : ops) {
      std::vector<double> t;
      for (int it = 0; it <= a.iters; ++it) {
        c.barrier()->wait();
        auto t0 = std::chrono::steady_clock::now();
        op.run();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (it > 0) t.push_back(s);  // the first run is a warm-up
      }
      const double sec = median(t);
      const double algbw = n * 4.0 / sec / 1e9;
      if (r == 0)
        std::printf("%-15s %10.1f %10.2f %12.3f %12.3f\n", op.name, n * 4.0 / (1024 * 1024), sec * 1e3, algbw,
                    algbw * op.bus_factor);
    }
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse(argc, argv);
    if (std::getenv("WORLD_SIZE")) {
      auto c = make_communicator_from_env();
      bench(*c, a);
      return 0;
    }
#ifdef NANOCHAT_HAVE_GLOO
    const int port = pick_free_port();
    std::vector<pid_t> pids;
    for (int r = 0; r < a.world; ++r) {
      std::fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        int rc = 0;
        try {
          DistEnv e;
          e.rank = r;
          e.local_rank = r;
          e.world_size = a.world;
          e.local_world_size = a.world;
          e.master_addr = "127.0.0.1";
          e.master_port = port;
          DistOptions o;
          o.job_token = "bench";
          GlooCommunicator c(e, o);
          bench(c, a);
        } catch (const std::exception& ex) {
          std::fprintf(stderr, "bench_comm: rank %d: %s\n", r, ex.what());
          rc = 1;
        }
        std::fflush(stdout);
        _exit(rc);
      }
      pids.push_back(pid);
    }
    int failed = 0;
    for (pid_t p : pids) {
      int st = 0;
      waitpid(p, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failed;
    }
    return failed ? 1 : 0;
#else
    fail("this build has no Gloo");
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_comm: error: %s\n", e.what());
    return 1;
  }
}
