// The numbers a DiLoCo node sends its change in (train/outer_wire.h), against their closed-form
// error bounds: float32 exact, bfloat16 within 2^-8 relative (ties to even), int8 within
// max|x of the block| / 254, a zero block exact, non-finite values refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "nanochat/core/rng.h"
#include "nanochat/train/outer_wire.h"

using namespace nanochat;

namespace {

std::vector<float> values(size_t n) {
  Rng rng(7);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    // magnitudes over several decades, both signs, per block a different scale
    const double mag = std::pow(10.0, -6.0 + 4.0 * static_cast<double>(rng.below(1000)) / 1000.0);
    x[i] = static_cast<float>((rng.below(2) ? 1 : -1) * mag * (1 + static_cast<double>(i / 256)));
  }
  return x;
}

std::vector<float> round_trip(WireDtype d, const std::vector<float>& x) {
  std::vector<uint8_t> bytes;
  EXPECT_TRUE(encode_wire(d, x.data(), x.size(), bytes));
  EXPECT_EQ(bytes.size(), wire_bytes(d, x.size()));
  std::vector<float> y(x.size(), 0.f);
  add_decoded_wire(d, bytes.data(), x.size(), y.data());
  return y;
}

}  // namespace

TEST(OuterWire, Float32IsExact) {
  const std::vector<float> x = values(1000);
  EXPECT_EQ(round_trip(WireDtype::Float32, x), x);
  EXPECT_EQ(wire_bytes(WireDtype::Float32, 1000), 4000u);
}

TEST(OuterWire, BFloat16RoundsToNearestWithinItsHalfUlp) {
  const std::vector<float> x = values(1000);
  const std::vector<float> y = round_trip(WireDtype::BFloat16, x);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::fabs(y[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << i;
  // ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to 1; 1 + 3*2^-8 goes up
  const std::vector<float> t = {1.f + std::ldexp(1.f, -8), 1.f + 3 * std::ldexp(1.f, -8)};
  const std::vector<float> r = round_trip(WireDtype::BFloat16, t);
  EXPECT_EQ(r[0], 1.f);
  EXPECT_EQ(r[1], 1.f + std::ldexp(1.f, -6));
  EXPECT_EQ(wire_bytes(WireDtype::BFloat16, 1000), 2000u);
}

TEST(OuterWire, Int8KeepsEachBlockWithinItsScale) {
  const size_t n = 3 * kInt8Block + 17;  // a short last block
  const std::vector<float> x = values(n);
  const std::vector<float> y = round_trip(WireDtype::Int8, x);
  for (size_t b = 0; b < n; b += kInt8Block) {
    float mx = 0;
    for (size_t i = b; i < std::min(n, b + kInt8Block); ++i) mx = std::max(mx, std::fabs(x[i]));
    for (size_t i = b; i < std::min(n, b + kInt8Block); ++i)
      EXPECT_LE(std::fabs(y[i] - x[i]), mx / 254 * (1 + 1e-6)) << i;
  }
  EXPECT_EQ(wire_bytes(WireDtype::Int8, n), n + 4 * 4);
  const std::vector<float> zeros(300, 0.f);
  EXPECT_EQ(round_trip(WireDtype::Int8, zeros), zeros);
}

TEST(OuterWire, DecodingAddsOntoWhatIsThere) {
  const std::vector<float> x = {1.f, -2.f, 0.5f};
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(encode_wire(WireDtype::Float32, x.data(), x.size(), bytes));
  std::vector<float> acc = {10.f, 10.f, 10.f};
  add_decoded_wire(WireDtype::Float32, bytes.data(), x.size(), acc.data());
  EXPECT_EQ(acc, (std::vector<float>{11.f, 8.f, 10.5f}));
}

TEST(OuterWire, NonFiniteValuesAreRefused) {
  for (WireDtype d : {WireDtype::Float32, WireDtype::BFloat16, WireDtype::Int8}) {
    std::vector<float> x = {1.f, std::numeric_limits<float>::quiet_NaN()};
    std::vector<uint8_t> bytes;
    EXPECT_FALSE(encode_wire(d, x.data(), x.size(), bytes)) << wire_dtype_name(d);
    x[1] = std::numeric_limits<float>::infinity();
    EXPECT_FALSE(encode_wire(d, x.data(), x.size(), bytes)) << wire_dtype_name(d);
  }
}
