#include "nanochat/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>

#include "nanochat/core/error.h"
#include "nanochat/engine/calculator.h"
#include "nanochat/model/gpt.h"

namespace nanochat {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Context:
      return "context";
    case FinishReason::Cancelled:
      return "cancelled";
  }
  return "?";
}

namespace {

void check_sampling(double temperature, double top_p) {
  if (!(temperature >= 0.0)) fail("temperature must be >= 0, got ", temperature);
  if (!(top_p > 0.0 && top_p <= 1.0)) fail("top_p must be in (0, 1], got ", top_p);
}

}  // namespace

void apply_penalties(float* logits, int64_t V, const std::vector<int32_t>& answer, double presence, double frequency) {
  if (presence == 0.0 && frequency == 0.0) return;
  std::vector<int32_t> seen;  // distinct ids, for the presence term
  std::vector<uint32_t> count(static_cast<size_t>(V), 0);
  for (const int32_t t : answer) {
    if (t < 0 || t >= V) continue;
    if (count[static_cast<size_t>(t)]++ == 0) seen.push_back(t);
  }
  for (const int32_t t : seen) logits[t] -= static_cast<float>(frequency * count[static_cast<size_t>(t)] + presence);
}

int32_t sample_token(const float* logits, int64_t V, double temperature, int top_k, double top_p, Rng& rng) {
  check_sampling(temperature, top_p);
  if (temperature == 0.0) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  auto higher = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t k = V;
  if (top_k > 0 && top_k < V) {
    k = top_k;
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), higher);
  }
  double mx = -INFINITY;
  for (int64_t i = 0; i < k; ++i) mx = std::max(mx, static_cast<double>(logits[ids[i]]));
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[i] = std::exp((logits[ids[i]] - mx) / temperature);
    sum += p[i];
  }
  if (top_p < 1.0) {  // nucleus: the most likely tokens until their probability reaches top_p
    if (k == V) std::sort(ids.begin(), ids.end(), higher);  // (top-k already sorted its k)
    for (int64_t i = 0; i < k; ++i) p[i] = std::exp((logits[ids[i]] - mx) / temperature);
    double acc = 0;
    int64_t keep = 0;
    while (keep < k) {
      acc += p[keep++];
      if (acc >= top_p * sum) break;
    }
    k = keep;
    sum = acc;
  }
  double u = rng.uniform() * sum;
  for (int64_t i = 0; i < k; ++i) {
    u -= p[i];
    if (u < 0) return ids[i];
  }
  return ids[k - 1];
}

Engine::Engine(GPT& model, const Tokenizer& tok) : model_(model), tok_(tok) {
  if (model.config().vocab_size != tok.vocab_size())
    fail("the model's vocabulary (", model.config().vocab_size, ") differs from the tokenizer's (", tok.vocab_size(),
         "); use the tokenizer the model was trained with");
  bos_ = tok.bos_id();
  assistant_end_ = tok.encode_special("<|assistant_end|>");
  python_start_ = tok.encode_special("<|python_start|>");
  python_end_ = tok.encode_special("<|python_end|>");
  output_start_ = tok.encode_special("<|output_start|>");
  output_end_ = tok.encode_special("<|output_end|>");
}

int64_t Engine::max_context() const { return static_cast<int64_t>(model_.config().sequence_len) * 10; }

namespace {

// A row's tool state (nanochat engine.py RowState).
struct RowState {
  std::deque<int32_t> forced;
  bool in_python = false;
  std::vector<int32_t> expr;
  bool live = true;

  // nanochat's python-block state machine (nanochat/engine.py Engine.generate) after token tok:
  // the tokens between <|python_start|> and <|python_end|> are an expression; when the
  // calculator evaluates it, <|output_start|> result <|output_end|> is queued to be forced next.
  void follow_tools(int32_t tok, const Tokenizer& t, int32_t py_start, int32_t py_end, int32_t out_start,
                    int32_t out_end) {
    if (tok == py_start) {
      in_python = true;
      expr.clear();
    } else if (tok == py_end && in_python) {
      in_python = false;
      if (!expr.empty()) {
        if (auto result = use_calculator(t.decode(expr))) {
          forced.push_back(out_start);
          for (int32_t id : t.encode(*result)) forced.push_back(id);
          forced.push_back(out_end);
        }
      }
      expr.clear();
    } else if (in_python) {
      expr.push_back(tok);
    }
  }
};

// Runs the prompt once (batch 1) into cache, whose B rows all receive it, and writes its last
// position's logits (V floats) to each of the B rows of logits (B, V).
void prefill(GPT& model, const std::vector<int32_t>& prompt, int B, KVCache& cache, float* logits) {
  const int T0 = static_cast<int>(prompt.size());
  const int64_t V = model.config().vocab_size;
  if (B == 1) {
    model.forward_cached(prompt.data(), 1, T0, cache, logits);
    return;
  }
  KVCache first(model.config(), 1, T0);
  model.forward_cached(prompt.data(), 1, T0, first, logits);
  cache.prefill_from(first);
  for (int b = 1; b < B; ++b) std::copy_n(logits, V, logits + static_cast<size_t>(b) * V);
}

// Refuses a prompt that is empty, holds an id outside [0, V) or fills the context, and bad
// sampling options.
void check_request(const std::vector<int32_t>& prompt, const GenerateOptions& opt, int64_t V, int64_t context) {
  const auto T0 = static_cast<int64_t>(prompt.size());
  if (prompt.empty()) fail("generation needs a prompt of at least one token");
  for (int32_t id : prompt)
    if (id < 0 || id >= V) fail("prompt token ", id, " is outside the vocabulary [0, ", V, ")");
  if (T0 >= context)
    fail("the prompt has ", T0, " tokens but the model's context is ", context,
         " positions (10 x sequence_len); shorten the conversation");
  if (opt.num_samples < 1) fail("num_samples must be >= 1, got ", opt.num_samples);
  check_sampling(opt.temperature, opt.top_p);
}

}  // namespace

GenerateResult Engine::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                const TokenCallback& on_token) {
  const int64_t V = model_.config().vocab_size;
  const int64_t T0 = static_cast<int64_t>(prompt.size());
  check_request(prompt, opt, V, max_context());

  const int B = opt.num_samples;
  // Positions the cache must hold: the prompt, then every answer token but the last.
  const int64_t want = opt.max_tokens < 0 ? max_context() : std::min(max_context(), T0 + opt.max_tokens);
  const int t_max = static_cast<int>(std::max(want, T0));
  const auto& cfg = model_.config();

  // 1-2. Prefill once (batch 1), then copy into every row.
  std::vector<float> logits(static_cast<size_t>(B) * V);
  KVCache cache(cfg, B, t_max);
  prefill(model_, prompt, B, cache, logits.data());

  GenerateResult res;
  res.prompt_tokens = T0;
  res.rows.resize(static_cast<size_t>(B));
  std::vector<RowState> st(static_cast<size_t>(B));
  std::vector<int32_t> column(static_cast<size_t>(B), bos_);
  Rng rng(opt.seed);
  int live = B;
  auto end_row = [&](int b, FinishReason why) {
    if (!st[b].live) return;
    st[b].live = false;
    res.rows[b].finish = why;
    --live;
  };

  for (int64_t step = 0; live > 0; ++step) {
    if (opt.max_tokens >= 0 && step >= opt.max_tokens) {
      for (int b = 0; b < B; ++b) end_row(b, FinishReason::Length);
      break;
    }
    if (step > 0) {  // feed the previous column (finished rows are fed too: rows stay aligned)
      if (cache.pos() >= cache.max_len()) {
        for (int b = 0; b < B; ++b) end_row(b, FinishReason::Context);
        break;
      }
      model_.forward_cached(column.data(), B, 1, cache, logits.data());
    }
    res.steps = step + 1;
    bool stop_all = false;
    for (int b = 0; b < B && !stop_all; ++b) {
      RowState& s = st[b];
      if (!s.live) continue;
      const bool forced = !s.forced.empty();
      int32_t tok;
      if (forced) {
        tok = s.forced.front();
        s.forced.pop_front();
      } else {
        float* row_logits = logits.data() + static_cast<size_t>(b) * V;
        apply_penalties(row_logits, V, res.rows[b].tokens, opt.presence_penalty, opt.frequency_penalty);
        tok = sample_token(row_logits, V, opt.temperature, opt.top_k, opt.top_p, rng);
      }
      column[b] = tok;
      GeneratedRow& row = res.rows[b];
      if (tok == assistant_end_ || tok == bos_) {
        row.stop_token = tok;
        end_row(b, FinishReason::Stop);
        continue;
      }
      row.tokens.push_back(tok);
      row.sampled.push_back(forced ? 0 : 1);
      if (opt.tools) s.follow_tools(tok, tok_, python_start_, python_end_, output_start_, output_end_);
      if (on_token) {
        const StreamControl c = on_token(TokenEvent{b, tok, forced});
        if (c == StreamControl::StopRow) end_row(b, FinishReason::Cancelled);
        if (c == StreamControl::Stop) stop_all = true;
      }
    }
    if (stop_all) {
      for (int b = 0; b < B; ++b) end_row(b, FinishReason::Cancelled);
      break;
    }
  }
  return res;
}

}  // namespace nanochat
