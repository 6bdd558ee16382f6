// `nanochat run` and `nanochat doctor` on a hybrid CPU, through the binary: a fake sysfs tree
// (NANOCHAT_SYSFS_ROOT) declares this machine's first allowed CPU a performance core and the
// others efficiency cores. The ranks report the CPUs sched_getaffinity gives them and their
// OpenMP thread count (dist-selftest), so the test sees the pinning itself, not the launcher's
// word for it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "nanochat/cluster/net.h"
#include "nanochat/launch/placement.h"
#include "support/proc_util.h"

using namespace nanochat;
using namespace nanochat::cluster;
using nctest::Proc;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

struct FakeHybrid {
  std::string root;
  std::vector<int> perf, eff;
  FakeHybrid() {
    root = (fs::temp_directory_path() / ("nanochat_hybrid_" + std::to_string(getpid()))).string();
    fs::remove_all(root);
    fs::create_directories(root + "/devices/cpu_core");
    fs::create_directories(root + "/devices/cpu_atom");
    const std::vector<int> cpus = allowed_cpus();
    perf = {cpus.front()};
    eff.assign(cpus.begin() + 1, cpus.end());
    std::ofstream(root + "/devices/cpu_core/cpus") << cpu_list_str(perf) << "\n";
    // With one allowed CPU the efficiency list names a CPU this process may not use: one type.
    std::ofstream(root + "/devices/cpu_atom/cpus")
        << (eff.empty() ? std::to_string(cpus.front() + 1) : cpu_list_str(eff)) << "\n";
  }
  ~FakeHybrid() { fs::remove_all(root); }
};

Proc run_cli(std::vector<std::string> args, const FakeHybrid& h) {
  args.insert(args.begin(), nctest::nanochat_binary());
  return Proc::spawn(args, {"NANOCHAT_RENDEZVOUS_TIMEOUT=20", "NANOCHAT_COLLECTIVE_TIMEOUT=30", "NANOCHAT_JOB_TOKEN",
                            "OMP_NUM_THREADS=7", "NANOCHAT_SYSFS_ROOT=" + h.root});
}

}  // namespace

TEST(HybridLaunch, OneRankPerCoreTypeEachPinnedToItsCores) {
  FakeHybrid h;
  Proc p = run_cli({"run", "--master-port", std::to_string(pick_free_port()), "dist-selftest", "--iterations", "1"}, h);
  ASSERT_TRUE(p.wait(Ms(60000)));
  const std::string& out = p.output();
  ASSERT_TRUE(p.exited_ok()) << out;
  if (h.eff.empty()) {  // one allowed CPU: one core type, one unpinned rank
    EXPECT_THAT(out, HasSubstr("rank 0 of 1 runs on CPUs " + cpu_list_str(h.perf)));
    return;
  }
  EXPECT_THAT(out, HasSubstr("ranks 0-1 of WORLD_SIZE=2, OMP_NUM_THREADS=1/" + std::to_string(h.eff.size())));
  EXPECT_THAT(out, HasSubstr("placement: one rank per core type"));
  EXPECT_THAT(out, HasSubstr("(OMP_NUM_THREADS=7 from the environment is not used"));
  EXPECT_THAT(out, HasSubstr("[rank 0] dist-selftest: rank 0 of 2 runs on CPUs " + cpu_list_str(h.perf) +
                             " with 1 OpenMP threads"));
  EXPECT_THAT(out, HasSubstr("[rank 1] dist-selftest: rank 1 of 2 runs on CPUs " + cpu_list_str(h.eff) + " with " +
                             std::to_string(h.eff.size()) + " OpenMP threads"));
  EXPECT_THAT(out, HasSubstr("rank 1 of 2: OK"));
}

TEST(HybridLaunch, OffRunsOneUnpinnedRankWithTheUsualThreads) {
  FakeHybrid h;
  Proc p = run_cli({"run", "--hybrid", "off", "--master-port", std::to_string(pick_free_port()), "dist-selftest",
                    "--iterations", "1"},
                   h);
  ASSERT_TRUE(p.wait(Ms(60000)));
  const std::string& out = p.output();
  ASSERT_TRUE(p.exited_ok()) << out;
  const std::vector<int> all = allowed_cpus();
  EXPECT_THAT(out, HasSubstr("rank 0 of 1 runs on CPUs " + cpu_list_str(all) + " with 7 OpenMP threads"));
  EXPECT_THAT(out, Not(HasSubstr("rank 1 of")));
}

TEST(HybridLaunch, ABadHybridValueIsRefused) {
  FakeHybrid h;
  Proc p = run_cli({"run", "--hybrid", "yes", "dist-selftest"}, h);
  ASSERT_TRUE(p.wait(Ms(15000)));
  EXPECT_NE(p.exit_code(), 0);
  EXPECT_THAT(p.output(), HasSubstr("--hybrid expects auto or off, got 'yes'"));
}

TEST(HybridLaunch, DoctorShowsTheCoresAndThePlacement) {
  FakeHybrid h;
  Proc p = run_cli({"doctor", "--master-port", std::to_string(pick_free_port())}, h);
  ASSERT_TRUE(p.wait(Ms(15000)));
  const std::string& out = p.output();
  EXPECT_THAT(out, HasSubstr("cores: 1 performance (CPUs " + cpu_list_str(h.perf)));
  if (h.eff.empty()) return;
  EXPECT_THAT(out, HasSubstr(std::to_string(h.eff.size()) + " efficiency (CPUs " + cpu_list_str(h.eff)));
  EXPECT_THAT(out, HasSubstr("2 rank(s) on this node, one rank per core type: local rank 0 on the performance cores"));
  Proc multi = run_cli({"doctor", "--nnodes", "2", "--master-addr", "127.0.0.1"}, h);
  ASSERT_TRUE(multi.wait(Ms(15000)));
  EXPECT_THAT(multi.output(), HasSubstr("pass --nproc-per-node 2 on every node"));
}
