#pragma once
// The seven prompts nanochat's base_train and base_eval sample greedily to show what a base model
// continues (docs/nanochat.md 3.7; nanochat scripts/base_train.py and scripts/base_eval.py).
// base-train's samples, base-eval's samples and `sample` without -p all use this one list.
#include <array>

namespace nanochat {

inline constexpr std::array<const char*, 7> kBaseSamplePrompts = {
    "The capital of France is",
    "The chemical symbol of gold is",
    "If yesterday was Friday, then tomorrow will be",
    "The opposite of hot is",
    "The planets of the solar system are:",
    "My favorite color is",
    "If 5*x + 3 = 13, then x is",
};

}  // namespace nanochat
