// Starting a data-parallel base-train through the binary: a rank slow to start (a test-only
// start-up delay) is waited for at the start-up barrier and named, rather than failing the others
// at the short collective timeout; and ranks started directly by srun or mpirun (their environment
// variables set by hand, on loopback) form one job without `nanochat run`; a worker's own start-up
// error is shown on node 0's terminal.
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "support/cli_util.h"
#include "support/two_nodes.h"

using namespace nctest;

namespace {

const std::string kFlags = std::string(kTiny) + " --num-iterations 2";

bool has(const std::string& out, const std::string& s) { return out.find(s) != std::string::npos; }

// Runs two ranks at once, rank r with the environment env(r).
std::pair<Result, Result> run_pair(const BaseDir& b, const std::function<std::string(int)>& env) {
  Result r0, r1;
  std::thread t0([&] { r0 = run(b, kFlags, env(0)); });
  std::thread t1([&] { r1 = run(b, kFlags, env(1)); });
  t0.join();
  t1.join();
  return {r0, r1};
}

}  // namespace

TEST(DistStart, ASlowRankIsWaitedForAndNamedNotTimedOut) {
  BaseDir b("nc_ds_slow");
  const std::string launch = " run --nproc-per-node 2 --threads-per-rank 1 --master-port ";
  // Rank 1 starts 8 s late; a collective would give up after 3 s.
  const std::string env =
      "NANOCHAT_TEST_FAULT=start-delay:1:8 NANOCHAT_COLLECTIVE_TIMEOUT=3 NANOCHAT_WAIT_REPORT_INTERVAL=2";
  auto r = run(b, launch + std::to_string(free_port()) + kFlags, env);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 0] start-up: waiting for rank 1 (host ")) << r.out;
  EXPECT_TRUE(has(r.out, "All 2 ranks agree")) << r.out;
  // With a start-up deadline shorter than the delay, every rank stops naming rank 1.
  auto bad = run(b, launch + std::to_string(free_port()) + kFlags, env + " NANOCHAT_STARTUP_TIMEOUT=3");
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_TRUE(has(bad.out, "[rank 0] nanochat: error: rank 1 (host ")) << bad.out;
  EXPECT_TRUE(has(bad.out, "has not finished starting within 3 s (NANOCHAT_STARTUP_TIMEOUT)")) << bad.out;
}

TEST(DistStart, RanksStartedBySrunFormOneJob) {
  BaseDir b("nc_ds_srun");
  const std::string port = std::to_string(free_port());
  auto [r0, r1] = run_pair(b, [&](int r) {
    return "SLURM_PROCID=" + std::to_string(r) + " SLURM_LOCALID=" + std::to_string(r) +
           " SLURM_NTASKS=2 SLURM_NODEID=0 SLURM_TASKS_PER_NODE=2 SLURM_JOB_NODELIST='localhost' MASTER_PORT=" + port;
  });
  ASSERT_EQ(r0.code, 0) << r0.out;
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_TRUE(has(r0.out, "world size 2")) << r0.out;
  EXPECT_TRUE(has(r0.out, "All 2 ranks agree")) << r0.out;
}

TEST(DistStart, RanksStartedByMpirunFormOneJobAndNeedAMaster) {
  BaseDir b("nc_ds_mpi");
  const std::string port = std::to_string(free_port());
  auto [r0, r1] = run_pair(b, [&](int r) {
    return "OMPI_COMM_WORLD_RANK=" + std::to_string(r) + " OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(r) +
           " OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port;
  });
  ASSERT_EQ(r0.code, 0) << r0.out;
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_TRUE(has(r0.out, "world size 2")) << r0.out;
  EXPECT_TRUE(has(r0.out, "All 2 ranks agree")) << r0.out;
  auto none = run(b, kFlags, "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2");
  EXPECT_EQ(none.code, 1) << none.out;
  EXPECT_TRUE(has(none.out, "but MASTER_ADDR is not set")) << none.out;
  EXPECT_TRUE(has(none.out, "mpirun -x MASTER_ADDR=")) << none.out;
}

// Node 1 alone is given a --device-batch-size that does not fit the total batch: node 0's terminal
// shows node 1's own error (its rank's last stderr lines), not only "rank 1 ... exited with status 1".
TEST(DistStart, AWorkersOwnStartUpErrorIsShownOnNodeZero) {
  BaseDir n0("nc_ds_worker0"), n1("nc_ds_worker1");
  auto [a0, a1] = two_nodes(n0.dir, n1.dir, kFlags, "", " --device-batch-size 3");
  EXPECT_NE(a0.code, 0) << a0.out;
  EXPECT_NE(a1.code, 0) << a1.out;
  // node 1's own error line, as its rank printed it there
  const size_t at = a1.out.find("[rank 1] nanochat: error: ");
  ASSERT_NE(at, std::string::npos) << a1.out;
  const std::string own = a1.out.substr(at + 9, a1.out.find('\n', at) - at - 9);
  EXPECT_TRUE(has(a0.out, "nanochat: error: rank 1 (host ")) << a0.out;
  EXPECT_TRUE(has(a0.out, "the last lines rank 1 (host ")) << a0.out;
  EXPECT_TRUE(has(a0.out, "    " + own)) << "node 0 does not quote: " << own << "\n" << a0.out;
  EXPECT_TRUE(has(a0.out, "--device-batch-size 3")) << a0.out;
}
