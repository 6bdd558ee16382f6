// PyRandom against Python's own random.Random: the first 700 words of getrandbits(32) (past one
// MT19937 refill) for seeds of one and two 32-bit words, shuffle of lists of 0..1000 elements, and
// sample on both of its paths (the pool for n <= its set size, the rejection set above it).
// py_random.json was written by CPython 3.11 (tools/core_eval/make_core_fixture.py).
#include "nanochat/core/py_random.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

namespace {
nlohmann::json cases() {
  std::ifstream f(std::string(NANOCHAT_TEST_DATA) + "/core_eval/py_random.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}
}  // namespace

TEST(PyRandom, GetrandbitsMatchesPython) {
  const auto c = cases();
  ASSERT_EQ(c["getrandbits32"].size(), 6u);
  for (const auto& [seed, words] : c["getrandbits32"].items()) {
    nanochat::PyRandom r(std::stoull(seed));
    for (size_t i = 0; i < words.size(); ++i)
      ASSERT_EQ(r.getrandbits(32), words[i].get<uint32_t>()) << seed << " " << i;
  }
}

TEST(PyRandom, ShuffleMatchesPython) {
  const auto all = cases()["shuffle"];  // kept alive while iterated (cases() returns a temporary)
  for (const auto& c : all) {
    std::vector<int> x(c["n"].get<size_t>());
    std::iota(x.begin(), x.end(), 0);
    nanochat::PyRandom(c["seed"].get<uint64_t>()).shuffle(x);
    EXPECT_EQ(x, c["result"].get<std::vector<int>>()) << c["seed"] << " n=" << c["n"];
  }
}

TEST(PyRandom, SampleMatchesPythonOnBothPaths) {
  const auto all = cases()["sample"];
  ASSERT_GE(all.size(), 8u);
  for (const auto& c : all) {
    nanochat::PyRandom r(c["seed"].get<uint64_t>());
    const auto got = r.sample_indices(c["n"].get<size_t>(), c["k"].get<size_t>());
    EXPECT_EQ(got, c["result"].get<std::vector<size_t>>()) << c["seed"] << " n=" << c["n"] << " k=" << c["k"];
  }
  nanochat::PyRandom r(1);
  EXPECT_THROW(r.sample_indices(3, 4), std::exception);
}
