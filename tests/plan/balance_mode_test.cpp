// --balance's one type past the flag (plan/balance_mode.h): each command's plan or options parse it
// with the same function and the same message.
#include "nanochat/plan/balance_mode.h"

#include <gtest/gtest.h>

#include <string>

#include "nanochat/core/error.h"

using namespace nanochat;

TEST(BalanceMode, ParsesSpeedAndEvenAndNamesTheFlagOtherwise) {
  EXPECT_EQ(parse_balance_mode("speed"), BalanceMode::Speed);
  EXPECT_EQ(parse_balance_mode("even"), BalanceMode::Even);
  try {
    parse_balance_mode("fast");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--balance must be speed or even (got fast)");
  }
}
