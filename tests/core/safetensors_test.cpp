#include "nanochat/core/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "nanochat/core/arena.h"
#include "nanochat/core/error.h"

using namespace nanochat;

TEST(Safetensors, RoundTripKeepsValuesShapesAndMetadata) {
  auto path = std::filesystem::temp_directory_path() / "nc_st_roundtrip.safetensors";
  std::vector<float> a = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, 7.f};
  std::vector<int64_t> b = {1, -1, 1LL << 40};
  save_safetensors(path, {{"a", "F32", {2, 3}, a.data()}, {"b", "I64", {3}, b.data()}}, {{"k", "v"}});
  StFile f = load_safetensors(path);
  ASSERT_TRUE(f.has("a"));
  EXPECT_EQ(f.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.at("a").to_f32(), a);
  EXPECT_EQ(f.at("b").to_i64(), b);
  EXPECT_EQ(f.metadata.at("k"), "v");
  std::filesystem::remove(path);
}

TEST(Safetensors, TruncatedFileIsAClearError) {
  auto path = std::filesystem::temp_directory_path() / "nc_st_trunc.safetensors";
  std::vector<float> a(100, 1.f);
  save_safetensors(path, {{"a", "F32", {100}, a.data()}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  try {
    load_safetensors(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(Arena, AlignsAndReportsExhaustion) {
  Arena a(1024);
  float* p = a.alloc_f32(3);
  float* q = a.alloc_f32(5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
  EXPECT_THROW(a.alloc_f32(1000), Error);
  a.reset();
  EXPECT_EQ(a.used(), 0u);
}

#include "nanochat/core/format.h"

TEST(Format, ThousandsSeparatorsLikePython) {
  EXPECT_EQ(nanochat::with_commas(0), "0");
  EXPECT_EQ(nanochat::with_commas(999), "999");
  EXPECT_EQ(nanochat::with_commas(1000), "1,000");
  EXPECT_EQ(nanochat::with_commas(73531646), "73,531,646");
  EXPECT_EQ(nanochat::with_commas(-1234567), "-1,234,567");
}

TEST(Format, ParseSuffixNumber) {
  EXPECT_EQ(nanochat::parse_suffix_number("complete_000042", "complete_"), 42);
  EXPECT_EQ(nanochat::parse_suffix_number("d12", "d"), 12);
  EXPECT_EQ(nanochat::parse_suffix_number("d12x", "d"), -1);
  EXPECT_EQ(nanochat::parse_suffix_number("d", "d"), -1);
  EXPECT_EQ(nanochat::parse_suffix_number("complete_000042.tmp.5", "complete_"), -1);
}
