#pragma once
// Inference engine: nanochat's Engine (nanochat/engine.py Engine.generate / generate_batch,
// commit 92d63d4) on this product's GPT and KV cache (model/gpt.h).
//
// generate(prompt, options):
//  1. Prefill: the prompt runs once through the model with a batch-1 KV cache.
//  2. The cache is copied into every row of a (num_samples)-row cache (KVCache::prefill_from) and
//     every row starts from the prompt's last logits.
//  3. Each step samples one token per row from its logits less the row's presence / frequency
//     penalties (apply_penalties; off by default) (temperature 0 = argmax, first index on ties; else
//     softmax(logits / temperature) restricted to the top_k largest and then to the smallest set
//     whose probability reaches top_p, drawn from one Rng(seed) row by row), unless the row has
//     forced tokens waiting, in which case the next forced token is taken instead.
//  4. A row ends when it produces <|assistant_end|> or <|bos|> (that token is not returned), when
//     max_tokens steps have run, when the context is full, or when the callback stops it.
//  5. Tool use (options.tools): tokens between <|python_start|> and <|python_end|> are collected;
//     at <|python_end|> their decoded text goes to use_calculator (engine/calculator.h), and a
//     result is forced next as <|output_start|> encode(result) <|output_end|>. A refused
//     expression forces nothing. Forced tokens count toward max_tokens, like sampled ones.
// Greedy decoding therefore equals nanochat's Engine token for token on the same weights.
//
// An Engine holds a reference to one GPT, which is not thread-safe: use one Engine (and one GPT)
// per thread. Caches are allocated per call and sized to prompt + max_tokens positions, or to the
// whole context (max_context()) when max_tokens < 0: per row n_layer x 2 x positions x n_kv_head x
// head_dim floats, so give max_tokens for large models. Rows that have ended are still fed (as in
// nanochat) until every row has ended.
#include <cstdint>
#include <functional>
#include <vector>

#include "nanochat/core/rng.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat {

class GPT;

/// Settings of one generate() call (nanochat Engine.generate's arguments, plus top_p and tools).
struct GenerateOptions {
  int num_samples = 1;       ///< rows sampled from the same prompt (>= 1)
  int max_tokens = -1;       ///< steps at most (forced tokens included); < 0: until the context is full
  double temperature = 1.0;  ///< >= 0; 0 = greedy
  int top_k = 0;             ///< sample among the k most likely tokens; <= 0 = all
  double top_p = 1.0;        ///< nucleus in (0, 1]; 1 = off (nanochat has none)
  uint64_t seed = 42;        ///< sampling seed (not used when greedy)
  /// OpenAI's penalties (-2..2, 0 = off; nanochat has none): before each sampled token (greedy
  /// included) a row's logits lose presence_penalty for every token id already in its answer and
  /// frequency_penalty times the number of times it is there (apply_penalties).
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  bool tools = true;  ///< run the calculator on python blocks and force its output
};

/// One token appended to a row's answer, as the callback sees it.
struct TokenEvent {
  int row = 0;          ///< 0 .. num_samples-1
  int32_t token = 0;    ///< never <|assistant_end|> or <|bos|> (those end the row, unreported)
  bool forced = false;  ///< true for tool output tokens the engine inserted, false when sampled
};

/// What the callback wants after a token.
enum class StreamControl {
  Continue,  ///< go on
  StopRow,   ///< end this row now (FinishReason::Cancelled); the others go on
  Stop,      ///< end every row now (FinishReason::Cancelled), e.g. a client went away
};

/// Called for every token appended to a live row, in row order within a step, on the thread
/// that called generate(). An exception thrown here propagates out of generate().
using TokenCallback = std::function<StreamControl(const TokenEvent&)>;

/// Why a row ended.
enum class FinishReason {
  Stop,       ///< produced <|assistant_end|> or <|bos|> (stop_token says which)
  Length,     ///< max_tokens steps ran
  Context,    ///< prompt + answer filled the model's context (Engine::max_context)
  Cancelled,  ///< the callback said StopRow or Stop
};

/// "stop" / "length" / "context" / "cancelled".
const char* finish_reason_name(FinishReason r);

/// One row's answer (nanochat generate_batch's row minus the prompt).
struct GeneratedRow {
  std::vector<int32_t> tokens;   ///< answer tokens, stop token excluded
  std::vector<uint8_t> sampled;  ///< per token: 1 sampled, 0 forced (nanochat's mask)
  FinishReason finish = FinishReason::Length;
  int32_t stop_token = -1;  ///< the token that ended the row when finish == Stop, else -1
};

struct GenerateResult {
  std::vector<GeneratedRow> rows;  ///< num_samples rows
  int64_t prompt_tokens = 0;       ///< prompt length
  int64_t steps = 0;               ///< decoding steps run (the longest row's answer, +1 if it stopped)
};

class Engine {
 public:
  /// The engine keeps references: model and tok must outlive it. Throws nanochat::Error when the
  /// tokenizer's vocabulary differs from the model's.
  Engine(GPT& model, const Tokenizer& tok);

  /// Longest prompt + answer the model can take (its rotary table: sequence_len * 10 positions,
  /// as nanochat's GPT allocates).
  int64_t max_context() const;

  /// Samples opt.num_samples answers to `prompt` (token ids, >= 1, each in [0, V)), streaming each
  /// token to on_token (if given). Throws nanochat::Error for an empty prompt, a token id out of
  /// range, a prompt of max_context() tokens or more (naming both numbers), num_samples < 1,
  /// temperature < 0 or top_p outside (0, 1].
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                          const TokenCallback& on_token = {});

  const Tokenizer& tokenizer() const { return tok_; }
  GPT& model() { return model_; }

 private:
  GPT& model_;
  const Tokenizer& tok_;
  int32_t bos_, assistant_end_, python_start_, python_end_, output_start_, output_end_;
};

/// logits[t] -= frequency * count(t) + presence * (count(t) > 0), where count(t) is how often id t
/// is in `answer` (ids outside [0, V) are skipped). Does nothing when both penalties are 0.
void apply_penalties(float* logits, int64_t V, const std::vector<int32_t>& answer, double presence, double frequency);

/// One draw from logits (V floats) with the rule of step 3 above; rng is used only when
/// temperature > 0. Throws nanochat::Error for temperature < 0 or top_p outside (0, 1].
int32_t sample_token(const float* logits, int64_t V, double temperature, int top_k, double top_p, Rng& rng);

}  // namespace nanochat
