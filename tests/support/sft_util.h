#pragma once
// chat-sft's test fixtures: a small base model's base-train flags and conversations written from
// the test corpus' words.
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace nctest {

// The base model: depth 3 (at depth 2 backout_lambda's gradient is rounding noise, see
// dist_train_test.cpp) and no weight decay (Muon's cautious decay flips on elements whose g*p is
// rounding noise, which the split of the rows changes), 4 steps saved at the end.
inline const char* kSftBase =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 256 --eval-every -1 --sample-every -1 --core-metric-every -1"
    " --threads 1 --model-tag t --num-iterations 4 --warmup-steps 1 --weight-decay 0";

// Writes `n` conversations of words from the corpus' vocabulary (a fixed seed): a user turn, an
// answer, some with a system prompt or a second turn.
inline void write_conversations(const std::string& path, int n, unsigned seed) {
  static const char* words[] = {"the",   "house", "sister", "letter", "walk",  "dance", "Mr.",  "Darcy",
                                "Jane",  "ball",  "said",   "very",   "much",  "good",  "time", "think",
                                "would", "could", "Lizzy",  "family", "young", "lady",  "came", "away"};
  std::mt19937 rng(seed);
  auto text = [&](int k) {
    std::string s;
    for (int i = 0; i < k; ++i) s += std::string(i ? " " : "") + words[rng() % 24];
    return s;
  };
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) {
    nlohmann::json m = nlohmann::json::array();
    if (i % 5 == 0) m.push_back({{"role", "system"}, {"content", "Answer briefly."}});
    m.push_back({{"role", "user"}, {"content", text(2 + static_cast<int>(rng() % 4))}});
    m.push_back({{"role", "assistant"}, {"content", text(2 + static_cast<int>(rng() % 6))}});
    if (i % 3 == 0) {
      m.push_back({{"role", "user"}, {"content", text(2)}});
      m.push_back({{"role", "assistant"}, {"content", text(3)}});
    }
    f << nlohmann::json{{"messages", m}}.dump() << "\n";
  }
}

}  // namespace nctest
