// Core-type detection and rank placement (launch/placement.h) on fake sysfs trees written the
// way Linux lays them out: an Intel hybrid desktop (i9-13900KF: 8 performance cores with two
// threads each, 16 efficiency cores), an Arm big.LITTLE phone (capacity only), a laptop whose
// types show only in their maximum frequency, a uniform machine, and trees with missing or
// malformed files. The expected types are written out by hand from each layout.
#include "nanochat/launch/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "nanochat/core/error.h"

using namespace nanochat;
using namespace nanochat::cluster;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

std::vector<int> range(int lo, int hi) {  // [lo, hi)
  std::vector<int> v(hi - lo);
  std::iota(v.begin(), v.end(), lo);
  return v;
}

class FakeSysfs {
 public:
  FakeSysfs() {
    root_ =
        fs::temp_directory_path() / ("nanochat_sysfs_" + std::to_string(getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(root_);
    fs::create_directories(root_ / "devices/system/cpu");
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  std::string root() const { return root_.string(); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  void cpu_file(int cpu, const std::string& rel, const std::string& text) {
    write("devices/system/cpu/cpu" + std::to_string(cpu) + "/" + rel, text);
  }
  void topology(int cpu, int package, int core) {
    cpu_file(cpu, "topology/physical_package_id", std::to_string(package) + "\n");
    cpu_file(cpu, "topology/core_id", std::to_string(core) + "\n");
  }

 private:
  fs::path root_;
  static inline int counter_ = 0;
};

// i9-13900KF: CPUs 0-15 are the 8 performance cores' two threads each (core ids 0,4,8,...,28
// with CPU 2k and 2k+1 on one core), CPUs 16-31 the 16 efficiency cores (core ids 32-47).
void intel_13900(FakeSysfs& s) {
  s.write("devices/cpu_core/cpus", "0-15\n");
  s.write("devices/cpu_atom/cpus", "16-31\n");
  for (int c = 0; c < 16; ++c) s.topology(c, 0, (c / 2) * 4);
  for (int c = 16; c < 32; ++c) s.topology(c, 0, 32 + (c - 16));
}

TEST(CpuList, ParsesRangesAndSingles) {
  EXPECT_THAT(parse_cpu_list("0-3,8,10-11\n", "x"), ElementsAre(0, 1, 2, 3, 8, 10, 11));
  EXPECT_THAT(parse_cpu_list("5", "x"), ElementsAre(5));
  EXPECT_EQ(cpu_list_str({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(cpu_list_str({7}), "7");
}

TEST(CpuList, RejectsWhatIsNotAList) {
  for (const char* bad : {"", "\n", "a-b", "3-1", "1,,2", "0-", "-4"}) {
    try {
      parse_cpu_list(bad, "/sys/x/cpus");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("/sys/x/cpus"));
    }
  }
}

TEST(CoreTypes, IntelHybridFromThePmuFolders) {
  FakeSysfs s;
  intel_13900(s);
  // The capacities would say the same; the PMU folders come first.
  for (int c = 0; c < 32; ++c) s.cpu_file(c, "cpu_capacity", c < 16 ? "1024\n" : "600\n");
  const CpuTopology t = detect_core_types(s.root(), range(0, 32));
  ASSERT_EQ(t.types.size(), 2u);
  EXPECT_TRUE(t.hybrid());
  EXPECT_EQ(t.types[0].name, "performance");
  EXPECT_EQ(t.types[0].cpus, range(0, 16));
  EXPECT_EQ(t.types[0].cores, 8);
  EXPECT_EQ(t.types[1].name, "efficiency");
  EXPECT_EQ(t.types[1].cpus, range(16, 32));
  EXPECT_EQ(t.types[1].cores, 16);
  EXPECT_THAT(t.source, HasSubstr("cpu_core/cpus"));
  EXPECT_THAT(describe_topology(t), HasSubstr("8 performance (CPUs 0-15, 16 logical), 16 efficiency (CPUs 16-31"));
}

TEST(CoreTypes, OnlyTheAllowedCpusCount) {
  FakeSysfs s;
  intel_13900(s);
  // taskset -c 0-3,16-17: two performance cores (4 threads), two efficiency cores.
  CpuTopology t = detect_core_types(s.root(), {0, 1, 2, 3, 16, 17});
  ASSERT_EQ(t.types.size(), 2u);
  EXPECT_THAT(t.types[0].cpus, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(t.types[0].cores, 2);
  EXPECT_THAT(t.types[1].cpus, ElementsAre(16, 17));
  EXPECT_EQ(t.types[1].cores, 2);
  // Only efficiency cores allowed: one type, not hybrid.
  t = detect_core_types(s.root(), {20, 21});
  ASSERT_EQ(t.types.size(), 1u);
  EXPECT_FALSE(t.hybrid());
  EXPECT_EQ(t.types[0].name, "efficiency");
}

TEST(CoreTypes, CapacityOnlyBigLittleWithThreeClusters) {
  FakeSysfs s;
  // 1 prime core (1024), 3 big (870: 0.85 of the prime, another type), 4 little (325).
  const int cap[8] = {325, 325, 325, 325, 870, 870, 870, 1024};
  for (int c = 0; c < 8; ++c) s.cpu_file(c, "cpu_capacity", std::to_string(cap[c]) + "\n");
  const CpuTopology t = detect_core_types(s.root(), range(0, 8));
  ASSERT_EQ(t.types.size(), 3u);
  EXPECT_EQ(t.types[0].name, "capacity 1024");
  EXPECT_THAT(t.types[0].cpus, ElementsAre(7));
  EXPECT_EQ(t.types[1].name, "capacity 870");
  EXPECT_THAT(t.types[1].cpus, ElementsAre(4, 5, 6));
  EXPECT_EQ(t.types[2].name, "capacity 325");
  EXPECT_THAT(t.types[2].cpus, ElementsAre(0, 1, 2, 3));
  // No topology files: one core per CPU.
  EXPECT_EQ(t.types[2].cores, 4);
  EXPECT_THAT(t.source, HasSubstr("cpu_capacity"));
}

TEST(CoreTypes, FrequencyOnlyLaptopKeepsFavouredCoresWithTheirType) {
  FakeSysfs s;
  // i5-12450H without the PMU folders: 4 performance cores with two threads (CPUs 0-7; two
  // favoured cores boost to 4.6 GHz, the others 4.4 GHz) and 4 efficiency cores at 3.3 GHz.
  for (int c = 0; c < 8; ++c) {
    s.cpu_file(c, "cpufreq/cpuinfo_max_freq", c < 4 ? "4600000\n" : "4400000\n");
    s.topology(c, 0, c / 2);
  }
  for (int c = 8; c < 12; ++c) {
    s.cpu_file(c, "cpufreq/cpuinfo_max_freq", "3300000\n");
    s.topology(c, 0, 8 + c);
  }
  const CpuTopology t = detect_core_types(s.root(), range(0, 12));
  ASSERT_EQ(t.types.size(), 2u);
  EXPECT_EQ(t.types[0].name, "max 4.60 GHz");
  EXPECT_EQ(t.types[0].cpus, range(0, 8));
  EXPECT_EQ(t.types[0].cores, 4);
  EXPECT_EQ(t.types[1].name, "max 3.30 GHz");
  EXPECT_EQ(t.types[1].cpus, range(8, 12));
  EXPECT_EQ(t.types[1].cores, 4);
}

TEST(CoreTypes, UniformMachineIsOneType) {
  FakeSysfs s;
  for (int c = 0; c < 4; ++c) {
    s.cpu_file(c, "cpu_capacity", "1024\n");
    s.topology(c, 0, c);
  }
  const CpuTopology t = detect_core_types(s.root(), range(0, 4));
  ASSERT_EQ(t.types.size(), 1u);
  EXPECT_FALSE(t.hybrid());
  EXPECT_EQ(t.types[0].cores, 4);
  EXPECT_THAT(describe_topology(t), HasSubstr("one core type"));
}

TEST(CoreTypes, MissingOrMalformedFilesFallBack) {
  {  // Nothing at all: one type with every allowed CPU.
    FakeSysfs s;
    const CpuTopology t = detect_core_types(s.root(), {0, 1, 2});
    ASSERT_EQ(t.types.size(), 1u);
    EXPECT_THAT(t.types[0].cpus, ElementsAre(0, 1, 2));
    EXPECT_EQ(t.types[0].cores, 3);
    EXPECT_THAT(t.source, HasSubstr("no core type information"));
  }
  {  // Only cpu_core present (a non-hybrid Intel kernel has no cpu_atom): capacity decides.
    FakeSysfs s;
    s.write("devices/cpu_core/cpus", "0-3\n");
    for (int c = 0; c < 4; ++c) s.cpu_file(c, "cpu_capacity", c < 2 ? "1024\n" : "500\n");
    const CpuTopology t = detect_core_types(s.root(), range(0, 4));
    ASSERT_EQ(t.types.size(), 2u);
    EXPECT_THAT(t.types[1].cpus, ElementsAre(2, 3));
  }
  {  // A malformed PMU list and one CPU without capacity: the frequencies decide.
    FakeSysfs s;
    s.write("devices/cpu_core/cpus", "garbage\n");
    s.write("devices/cpu_atom/cpus", "2-3\n");
    for (int c = 0; c < 3; ++c) s.cpu_file(c, "cpu_capacity", "1024\n");
    for (int c = 0; c < 4; ++c) s.cpu_file(c, "cpufreq/cpuinfo_max_freq", c < 2 ? "5000000\n" : "3000000\n");
    const CpuTopology t = detect_core_types(s.root(), range(0, 4));
    ASSERT_EQ(t.types.size(), 2u);
    EXPECT_THAT(t.source, HasSubstr("cpuinfo_max_freq"));
    EXPECT_THAT(t.types[0].cpus, ElementsAre(0, 1));
  }
  {  // Topology of one CPU missing: one core per CPU for that type.
    FakeSysfs s;
    intel_13900(s);
    fs::remove(fs::path(s.root()) / "devices/system/cpu/cpu3/topology/core_id");
    const CpuTopology t = detect_core_types(s.root(), range(0, 32));
    EXPECT_EQ(t.types[0].cores, 16);
    EXPECT_EQ(t.types[1].cores, 16);
  }
}

CpuTopology hybrid_4p4e() {
  CpuTopology t;
  t.types = {{"performance", range(0, 8), 4}, {"efficiency", range(8, 12), 4}};
  t.source = "test";
  return t;
}

TEST(Placement, OneRankPerTypeByDefaultOnOneNode) {
  PlacementRequest req;  // --nproc-per-node not given, one node
  const Placement p = plan_placement(hybrid_4p4e(), req);
  EXPECT_EQ(p.nproc, 2);
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].cpus, range(0, 8));
  EXPECT_EQ(p.ranks[0].threads, 4);
  EXPECT_EQ(p.ranks[1].cpus, range(8, 12));
  EXPECT_EQ(p.ranks[1].threads, 4);
  EXPECT_THAT(p.summary, HasSubstr("local rank 1 on the efficiency cores (CPUs 8-11, 4 threads)"));
}

TEST(Placement, ThreadsPerRankOverridesTheCoreCount) {
  PlacementRequest req;
  req.threads_per_rank = 3;
  const Placement p = plan_placement(hybrid_4p4e(), req);
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].threads, 3);
  EXPECT_EQ(p.ranks[1].threads, 3);
}

TEST(Placement, ExplicitMatchingNprocPinsOnEveryNode) {
  PlacementRequest req;
  req.nnodes = 3;
  req.nproc_per_node = 2;
  req.nproc_given = true;
  EXPECT_EQ(plan_placement(hybrid_4p4e(), req).ranks.size(), 2u);
}

TEST(Placement, CasesThatAreNotPinned) {
  PlacementRequest off;
  off.mode = HybridMode::Off;
  Placement p = plan_placement(hybrid_4p4e(), off);
  EXPECT_EQ(p.nproc, 1);
  EXPECT_TRUE(p.ranks.empty());
  EXPECT_THAT(p.summary, HasSubstr("--hybrid off"));

  PlacementRequest multi;
  multi.nnodes = 2;
  p = plan_placement(hybrid_4p4e(), multi);
  EXPECT_EQ(p.nproc, 1);
  EXPECT_TRUE(p.ranks.empty());
  EXPECT_THAT(p.summary, HasSubstr("pass --nproc-per-node 2 on every node"));

  PlacementRequest other;
  other.nproc_per_node = 4;
  other.nproc_given = true;
  p = plan_placement(hybrid_4p4e(), other);
  EXPECT_EQ(p.nproc, 4);
  EXPECT_TRUE(p.ranks.empty());

  CpuTopology uniform;
  uniform.types = {{"uniform", range(0, 4), 4}};
  p = plan_placement(uniform, PlacementRequest{});
  EXPECT_EQ(p.nproc, 1);
  EXPECT_TRUE(p.ranks.empty());
}

TEST(Placement, HybridModeFlag) {
  EXPECT_EQ(parse_hybrid_mode("auto"), HybridMode::Auto);
  EXPECT_EQ(parse_hybrid_mode("off"), HybridMode::Off);
  EXPECT_THROW(parse_hybrid_mode("on"), Error);
}

}  // namespace
