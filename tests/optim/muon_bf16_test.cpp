// Muon in bfloat16 (MuonHyper::bf16, --dtype bfloat16) against nanochat's own muon_step_fused run
// with COMPUTE_DTYPE bfloat16 on the same inputs (tests/fixtures/muon_bf16.safetensors, written by
// tools/reference/make_muon_bf16_fixture.py): a tall, a wide and a square matrix, and a tall and a
// wide one with a side >= 128 (blocked Gram products, optim/optim_math.h). Our bf16 step
// must land close to nanochat's bf16 step -- within a small fraction of the distance between
// nanochat's bf16 and fp32 steps (1% of it), so it follows the bf16 path, not the fp32 one -- and our fp32
// step on nanochat's fp32 step as tightly as the float32 parity does. Where nanochat's own bf16
// step moves further than that when its gradient changes by one part in 10^7 (the fixture's
// "bf16_spread": a few bf16 roundings flip and Polar Express amplifies them), our step may be off
// by 1.5x that spread, in its largest and in its mean difference. Skipped, saying why, on CPUs
// without native bf16.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/kernels/gemm_bf16.h"
#include "nanochat/optim/optim_math.h"

namespace nanochat {
namespace {

const char* kFixture = NANOCHAT_TEST_DATA "/muon_bf16.safetensors";

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

double mean_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::fabs(static_cast<double>(a[i]) - b[i]);
  return a.empty() ? 0.0 : d / static_cast<double>(a.size());
}

struct Result {
  std::vector<float> p, mom, sec;
};

Result our_step(const StFile& f, int i, int64_t m, int64_t n, const MuonHyper& hp) {
  const std::string in = str_cat("in", i, ".");
  Result r{f.at(in + "p").to_f32(), f.at(in + "mom").to_f32(), f.at(in + "sec").to_f32()};
  const std::vector<float> g = f.at(in + "g").to_f32();
  const int64_t k = std::min(m, n);
  std::vector<float> x(static_cast<size_t>(m * n)), x2(x.size()), a(static_cast<size_t>(k * k)), b(a.size());
  std::vector<double> rowv(static_cast<size_t>(std::max(m, n)));
  const MuonScratch s{x.data(), x2.data(), a.data(), b.data(), rowv.data()};
  muon_update(r.p.data(), g.data(), r.mom.data(), r.sec.data(), m, n, 1.f, hp, s);
  return r;
}

TEST(MuonBf16, FollowsNanochatsBfloat16Step) {
  if (!native_bf16_available())
    GTEST_SKIP() << "no native bfloat16 on this CPU/build (" << native_bf16_status()
                 << "): --dtype bfloat16 is refused here";
  const StFile f = load_safetensors(kFixture);
  const nlohmann::json meta = nlohmann::json::parse(f.metadata.at("meta"));
  MuonHyper hp;
  hp.lr = meta["lr"].get<double>();
  hp.momentum = meta["momentum"].get<double>();
  hp.weight_decay = meta["weight_decay"].get<double>();
  hp.beta2 = meta["beta2"].get<double>();
  hp.ns_steps = meta["ns_steps"].get<int>();
  const auto shapes = meta["shapes"].get<std::vector<std::vector<int64_t>>>();
  ASSERT_EQ(shapes.size(), 5u);
  ASSERT_EQ(meta["bf16_spread"].size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t m = shapes[i][0], n = shapes[i][1];
    SCOPED_TRACE(str_cat("(", m, ", ", n, ")"));
    const std::string out = str_cat("out", i, ".");
    const std::vector<float> p0 = f.at(str_cat("in", i, ".p")).to_f32();
    const std::vector<float> ref_bf16 = f.at(out + "bf16.p").to_f32(), ref_fp32 = f.at(out + "fp32.p").to_f32();
    MuonHyper h32 = hp, h16 = hp;
    h16.bf16 = true;
    const Result ours32 = our_step(f, static_cast<int>(i), m, n, h32);
    const Result ours16 = our_step(f, static_cast<int>(i), m, n, h16);
    const double update = max_abs_diff(ref_fp32, p0);
    const double path_gap = max_abs_diff(ref_bf16, ref_fp32);  // what bf16 changes in nanochat's step
    const double gap_mean = mean_abs_diff(ref_bf16, ref_fp32);
    const double spread_max = meta["bf16_spread"][i]["max"].get<double>();
    const double spread_mean = meta["bf16_spread"][i]["mean"].get<double>();
    const double err16 = max_abs_diff(ours16.p, ref_bf16), err32 = max_abs_diff(ours32.p, ref_fp32);
    const double err16_mean = mean_abs_diff(ours16.p, ref_bf16);
    std::printf(
        "(%lld, %lld): max |update| %.3e; nanochat bf16 vs fp32 %.3e (mean %.3e), its bf16 spread %.3e (mean "
        "%.3e); ours vs nanochat: bf16 %.3e (mean %.3e), fp32 %.3e\n",
        static_cast<long long>(m), static_cast<long long>(n), update, path_gap, gap_mean, spread_max, spread_mean,
        err16, err16_mean, err32);
    EXPECT_GT(path_gap, 0.02 * update) << "the fixture's bf16 and fp32 steps barely differ: it tests nothing";
    EXPECT_LE(err32, 1e-4 * update) << "our fp32 step departs from nanochat's";
    EXPECT_LE(err16, std::max(0.01 * path_gap, 1.5 * spread_max)) << "our bf16 step is not on nanochat's bf16 path";
    EXPECT_LE(err16_mean, std::max(0.01 * gap_mean, 1.5 * spread_mean))
        << "our bf16 step is not on nanochat's bf16 path (mean difference)";
    // the momentum buffer and the second moment: fp32 before the cast in both
    EXPECT_LE(max_abs_diff(ours16.mom, f.at(out + "bf16.mom").to_f32()), 1e-8);
    const std::vector<float> sec_ref = f.at(out + "bf16.sec").to_f32();
    for (size_t j = 0; j < sec_ref.size(); ++j)
      EXPECT_NEAR(ours16.sec[j], sec_ref[j], 0.02 * sec_ref[j]) << "second moment " << j;
  }
}

}  // namespace
}  // namespace nanochat
