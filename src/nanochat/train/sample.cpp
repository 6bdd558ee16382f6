#include "nanochat/train/sample.h"

#include <algorithm>

#include "nanochat/core/error.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"

namespace nanochat {

int32_t sample_next_token(const float* logits, int64_t V, double temperature, int top_k, Rng& rng) {
  return sample_token(logits, V, std::max(temperature, 0.0), top_k, 1.0, rng);  // engine/engine.h
}

std::vector<int32_t> generate(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) fail("generation needs a prompt of at least one token");
  const auto& cfg = model.config();
  const int64_t limit = cfg.sequence_len * 10;
  const int64_t t_max = static_cast<int64_t>(prompt.size()) + std::max(opt.max_tokens, 0);
  if (t_max > limit)
    fail("prompt (", prompt.size(), " tokens) + max tokens (", opt.max_tokens, ") exceed the model's limit of ", limit,
         " positions (10 x sequence_len)");
  const int64_t V = cfg.vocab_size;
  KVCache cache(cfg, 1, static_cast<int>(t_max));
  std::vector<float> logits(static_cast<size_t>(V));
  model.forward_cached(prompt.data(), 1, static_cast<int>(prompt.size()), cache, logits.data());
  Rng rng(opt.seed);
  std::vector<int32_t> out;
  for (int i = 0; i < opt.max_tokens; ++i) {
    int32_t next = sample_next_token(logits.data(), V, opt.temperature, opt.top_k, rng);
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), next) != opt.stop_ids.end()) break;
    out.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 == opt.max_tokens) break;
    model.forward_cached(&next, 1, 1, cache, logits.data());
  }
  return out;
}

}  // namespace nanochat
