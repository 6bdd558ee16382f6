#pragma once
// Text generation with the KV cache (nanochat engine.py Engine.generate / sample_next_token,
// docs/nanochat.md 7.1): batch-1 prefill of the prompt, then one token per step through the cache.
#include <cstdint>
#include <functional>
#include <vector>

#include "nanochat/core/rng.h"

namespace nanochat {

class GPT;

/// Sampling settings: temperature 0 = greedy (argmax, seed ignored); top_k <= 0 = full softmax.
struct SampleOptions {
  int max_tokens = 16;
  double temperature = 0.0;
  int top_k = 0;
  uint64_t seed = 42;
  /// Generation stops after emitting any of these ids (e.g. <|assistant_end|>, <|bos|>); the stop
  /// token is not returned.
  std::vector<int32_t> stop_ids;
};

/// Picks the next token from logits (V floats): argmax if temperature <= 0; otherwise softmax of
/// logits / temperature over the top_k largest (all if top_k <= 0) and a draw from rng.
int32_t sample_next_token(const float* logits, int64_t V, double temperature, int top_k, Rng& rng);

/// Generates up to opt.max_tokens new tokens after `prompt` (>= 1 token; the prompt plus the new
/// tokens must fit in the model's sequence_len x 10 rotary table). Calls on_token(id) for each new
/// token as it is produced (streaming), if given. Returns the new tokens (prompt excluded).
/// Throws nanochat::Error for an empty prompt or one longer than the model can take.
std::vector<int32_t> generate(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace nanochat
