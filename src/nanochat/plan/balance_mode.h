#pragma once
// How each step's work is dealt to the ranks (--balance of base-train, chat-sft and chat-rl;
// train/balance.h StepBalancer): the one type past the flag's parsing.
#include <string>

namespace nanochat {

/// Speed: in proportion to the ranks' measured speed (evenly at the first step; with ZeRO-2 the
/// optimizer's shards follow the speeds too). Even: the same share per rank, give or take one.
enum class BalanceMode { Speed, Even };

/// --balance's value: "speed" or "even". Throws nanochat::Error naming the flag otherwise.
BalanceMode parse_balance_mode(const std::string& flag);

}  // namespace nanochat
