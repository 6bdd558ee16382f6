// The calculator tool against nanochat's own use_calculator (tests/fixtures/chat/calculator.json,
// written by tools/chat/make_calculator_fixture.py): the same accepted expressions with the same
// result text, the same refusals.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "nanochat/engine/calculator.h"

namespace nanochat {
namespace {

TEST(Calculator, MatchesNanochat) {
  std::ifstream f(std::string(NANOCHAT_TEST_DATA) + "/chat/calculator.json");
  ASSERT_TRUE(f) << "missing tests/fixtures/chat/calculator.json";
  std::stringstream ss;
  ss << f.rdbuf();
  const auto cases = nlohmann::json::parse(ss.str());
  ASSERT_GE(cases.size(), 60u);
  int accepted = 0, refused = 0;
  for (const auto& c : cases) {
    const std::string expr = c.at("expr");
    const auto got = use_calculator(expr);
    if (c.at("result").is_null()) {
      ++refused;
      EXPECT_FALSE(got.has_value()) << "'" << expr << "' gave " << got.value_or("");
    } else {
      ++accepted;
      ASSERT_TRUE(got.has_value()) << "'" << expr << "' was refused";
      EXPECT_EQ(*got, c.at("result").get<std::string>()) << expr;
    }
  }
  EXPECT_GE(accepted, 30);
  EXPECT_GE(refused, 20);
}

// Python's float repr rules at their edges (closed forms).
TEST(Calculator, PythonFloatStr) {
  EXPECT_EQ(python_float_str(1e16), "1e+16");
  EXPECT_EQ(python_float_str(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_str(0.0001), "0.0001");
  EXPECT_EQ(python_float_str(0.00001), "1e-05");
  EXPECT_EQ(python_float_str(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float_str(-2.5), "-2.5");
  EXPECT_EQ(python_float_str(123.0), "123.0");
  EXPECT_EQ(python_float_str(1.0 / 0.0), "inf");
  EXPECT_EQ(python_float_str(1.7976931348623157e308), "1.7976931348623157e+308");
}

// Integers beyond 64 bits are refused rather than wrapped (Python would give the big integer).
TEST(Calculator, RefusesIntegerOverflow) {
  EXPECT_FALSE(use_calculator("99999999999*99999999999").has_value());
  EXPECT_FALSE(use_calculator("99999999999999999999").has_value());
  EXPECT_EQ(use_calculator("9223372036854775807").value_or(""), "9223372036854775807");
}

// Deep nesting is refused, not recursed into without bound (text written by a model).
TEST(Calculator, BoundsNesting) {
  EXPECT_EQ(use_calculator(std::string(200, '(') + "1" + std::string(200, ')')).value_or(""), "1");  // Python: 1
  EXPECT_FALSE(use_calculator(std::string(201, '(') + "1" + std::string(201, ')')).has_value());     // Python: refused
  EXPECT_FALSE(use_calculator(std::string(100000, '(') + "1" + std::string(100000, ')')).has_value());
  EXPECT_FALSE(use_calculator(std::string(100000, '-') + "1").has_value());
  EXPECT_EQ(use_calculator(std::string(100, '-') + "1").value_or(""), "1");
}

}  // namespace
}  // namespace nanochat
