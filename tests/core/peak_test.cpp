#include "nanochat/core/peak.h"

#include <gtest/gtest.h>

// The measured peak must be a plausible positive number; its value is reported by benchmarks.
TEST(Peak, MeasuresAPositivePlausiblePeak) {
  double g = nanochat::measure_fma_peak_gflops(1, 0.05);
  EXPECT_GT(g, 0.5);      // even a scalar path on a slow machine does more than 0.5 GFLOP/s
  EXPECT_LT(g, 10000.0);  // and no single core does 10 TFLOP/s fp32
}
