#include "nanochat/plan/balance_mode.h"

#include "nanochat/core/error.h"

namespace nanochat {

BalanceMode parse_balance_mode(const std::string& flag) {
  if (flag != "speed" && flag != "even") fail("--balance must be speed or even (got ", flag, ")");
  return flag == "even" ? BalanceMode::Even : BalanceMode::Speed;
}

}  // namespace nanochat
