#include "nanochat/core/peak.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

// The measured peak must be a plausible positive number; its value is reported by benchmarks.
TEST(Peak, MeasuresAPositivePlausiblePeak) {
  double g = nanochat::measure_fma_peak_gflops(1, 0.05);
  EXPECT_GT(g, 0.5);      // even a scalar path on a slow machine does more than 0.5 GFLOP/s
  EXPECT_LT(g, 10000.0);  // and no single core does 10 TFLOP/s fp32
}

// The bf16 dot-product peak (the --dtype bfloat16 MFU reference) where the CPU has vdpbf16ps:
// positive, and kept in the cache apart from the fp32 FMA peak.
TEST(Peak, Bf16DotPeakIsMeasuredWhereSupportedAndCachedApart) {
  namespace fs = std::filesystem;
  using nanochat::PeakKind;
  const double g = nanochat::measure_fma_peak_gflops(1, 0.05, PeakKind::Bf16Dot);
  if (!nanochat::bf16_dot_supported()) {
    EXPECT_EQ(g, 0.0);
  } else {
    EXPECT_GT(g, 0.5);
    EXPECT_LT(g, 20000.0);
  }
  const std::string dir = (fs::temp_directory_path() / ("nc_peak_bf_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  const std::string cache = dir + "/fma_peak.json";
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(100.0, 1, cache), 100.0);
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(30.0, 1, cache, PeakKind::Bf16Dot), 30.0);
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(20.0, 1, cache, PeakKind::Bf16Dot), 30.0);
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(10.0, 1, cache), 100.0);
  std::ifstream in(cache);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"avx512_bf16/1\""), std::string::npos) << text;
  fs::remove_all(dir);
}

// The MFU reference is the highest peak seen on the machine (cached per ISA and thread count),
// so a measurement taken while the cores are busy cannot push MFU above 100%.
TEST(Peak, BestKnownPeakKeepsTheHighestMeasurementPerThreadCount) {
  namespace fs = std::filesystem;
  const std::string dir = (fs::temp_directory_path() / ("nc_peak_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  const std::string cache = dir + "/sub/fma_peak.json";  // parent folders are created
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(100.0, 1, cache), 100.0);
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(50.0, 1, cache), 100.0);   // a busy-machine reading
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(80.0, 2, cache), 80.0);    // per thread count
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(150.0, 1, cache), 150.0);  // a higher one replaces it
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(10.0, 1, cache), 150.0);
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(10.0, 2, cache), 80.0);
  {
    std::ofstream out(cache);
    out << "not json";
  }
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(42.0, 1, cache), 42.0);  // corrupt cache: start over
  EXPECT_DOUBLE_EQ(nanochat::best_known_fma_peak_gflops(41.0, 1, cache), 42.0);
  fs::remove_all(dir);
}

// The n-thread MFU reference is at least min(n, cores) x the 1-thread peak (a 2-thread reading with
// one core busy is about one core's worth), and the n-thread figure when that is higher.
TEST(Peak, MfuReferenceIsAtLeastThreadsTimesTheOneThreadPeak) {
  EXPECT_DOUBLE_EQ(nanochat::mfu_reference_peak_gflops(256.0, 242.0, 2, 2), 484.0);  // the busy reading
  EXPECT_DOUBLE_EQ(nanochat::mfu_reference_peak_gflops(470.0, 230.0, 2, 2), 470.0);  // a real 2-core peak
  EXPECT_DOUBLE_EQ(nanochat::mfu_reference_peak_gflops(256.0, 242.0, 4, 2), 484.0);  // 4 threads, 2 cores
  EXPECT_DOUBLE_EQ(nanochat::mfu_reference_peak_gflops(256.0, 242.0, 2, 0), 484.0);  // cores unknown
  EXPECT_DOUBLE_EQ(nanochat::mfu_reference_peak_gflops(100.0, 242.0, 1, 8), 242.0);
  const int cores = nanochat::physical_cores_available();
  EXPECT_GE(cores, 1);  // this process may run somewhere
  EXPECT_LE(cores, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
}
