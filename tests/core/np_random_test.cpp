// NpRandom against numpy's own np.random.default_rng(seed): the first raw PCG64 outputs and
// permutation(n) (first 200 entries and sum(i * perm[i])) for seeds of one, two and more 32-bit
// words. np_random.json was written by numpy (tools/tasks/make_task_fixtures.py).
#include "nanochat/core/np_random.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace {
nlohmann::json cases() {
  std::ifstream f(std::string(NANOCHAT_TEST_DATA) + "/tasks/np_random.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}
}  // namespace

TEST(NpRandom, RawOutputsMatchNumpy) {
  const auto all = cases();
  ASSERT_EQ(all["raw"].size(), 5u);
  for (const auto& c : all["raw"]) {
    nanochat::NpRandom r(std::stoull(c["seed"].get<std::string>()));
    for (const auto& v : c["u64"]) EXPECT_EQ(r.next_u64(), std::stoull(v.get<std::string>())) << c["seed"];
  }
}

TEST(NpRandom, PermutationMatchesNumpy) {
  const auto all = cases();
  ASSERT_EQ(all["permutation"].size(), 30u);
  for (const auto& c : all["permutation"]) {
    const auto n = c["n"].get<int64_t>();
    const auto perm = nanochat::NpRandom(std::stoull(c["seed"].get<std::string>())).permutation(n);
    ASSERT_EQ(static_cast<int64_t>(perm.size()), n);
    const auto head = c["head"].get<std::vector<int64_t>>();
    EXPECT_EQ(std::vector<int64_t>(perm.begin(), perm.begin() + static_cast<int64_t>(head.size())), head)
        << "seed " << c["seed"] << " n " << n;
    int64_t s = 0;
    for (int64_t i = 0; i < n; ++i) s += i * perm[static_cast<size_t>(i)];
    EXPECT_EQ(s, c["sum_i_perm"].get<int64_t>()) << "seed " << c["seed"] << " n " << n;
  }
}
