#include "nanochat/model/config.h"

#include <cctype>

#include "nanochat/core/error.h"

namespace nanochat {

ModelConfig ModelConfig::from_depth(int depth, int aspect_ratio, int head_dim, int max_seq_len, int vocab_size,
                                    const std::string& window_pattern) {
  if (depth < 1) fail("--depth must be >= 1 (got ", depth, ")");
  if (aspect_ratio < 1) fail("--aspect-ratio must be >= 1 (got ", aspect_ratio, ")");
  if (head_dim < 2 || head_dim % 2 != 0) fail("--head-dim must be a positive even number (got ", head_dim, ")");
  if (max_seq_len < 1) fail("--max-seq-len must be >= 1 (got ", max_seq_len, ")");
  if (vocab_size < 1) fail("vocab size must be >= 1 (got ", vocab_size, "); check the tokenizer");
  ModelConfig c;
  const int64_t base_dim = int64_t{depth} * aspect_ratio;
  c.n_embd = (base_dim + head_dim - 1) / head_dim * head_dim;
  c.n_head = c.n_embd / head_dim;
  c.n_kv_head = c.n_head;
  c.n_layer = depth;
  c.sequence_len = max_seq_len;
  c.vocab_size = vocab_size;
  c.window_pattern = window_pattern;
  c.validate();
  return c;
}

std::vector<int> ModelConfig::window_sizes() const {
  if (window_pattern.empty()) fail("--window-pattern must not be empty (use letters S and L, e.g. SSSL or L)");
  std::string pat;
  for (char ch : window_pattern) {
    char u = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (u != 'S' && u != 'L')
      fail("--window-pattern '", window_pattern, "' may only contain the letters S (short window) and L (long window)");
    pat += u;
  }
  const int64_t long_w = sequence_len;
  const int64_t short_w = ((sequence_len + 3) / 4 + 127) / 128 * 128;
  std::vector<int> w(static_cast<size_t>(n_layer));
  for (int64_t i = 0; i < n_layer; ++i) w[i] = static_cast<int>(pat[i % pat.size()] == 'L' ? long_w : short_w);
  if (n_layer > 0) w.back() = static_cast<int>(long_w);
  return w;
}

void ModelConfig::validate() const {
  if (n_layer < 1) fail("model config: n_layer must be >= 1 (got ", n_layer, ")");
  if (n_head < 1 || n_kv_head < 1)
    fail("model config: n_head and n_kv_head must be >= 1 (got ", n_head, ", ", n_kv_head, ")");
  if (n_embd % n_head != 0) fail("model config: n_embd (", n_embd, ") must be a multiple of n_head (", n_head, ")");
  if (n_head % n_kv_head != 0)
    fail("model config: n_head (", n_head, ") must be a multiple of n_kv_head (", n_kv_head, ")");
  if (head_dim() % 2 != 0) fail("model config: head_dim (", head_dim(), ") must be even for rotary");
  if (n_embd < 24) fail("model config: n_embd (", n_embd, ") must be >= 24 (smear gate input)");
  if (sequence_len < 1) fail("model config: sequence_len must be >= 1 (got ", sequence_len, ")");
  if (vocab_size < 1) fail("model config: vocab_size must be >= 1 (got ", vocab_size, ")");
  (void)window_sizes();
}

nlohmann::json ModelConfig::to_json() const {
  return nlohmann::json{{"sequence_len", sequence_len},
                        {"vocab_size", vocab_size},
                        {"n_layer", n_layer},
                        {"n_head", n_head},
                        {"n_kv_head", n_kv_head},
                        {"n_embd", n_embd},
                        {"window_pattern", window_pattern}};
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("model_config must be a JSON object, got: ", j.dump());
  ModelConfig c;
  auto get = [&](const char* key) -> int64_t {
    if (!j.contains(key) || !j.at(key).is_number_integer())
      fail("model_config is missing the integer key '", key, "': ", j.dump());
    return j.at(key).get<int64_t>();
  };
  c.sequence_len = get("sequence_len");
  c.vocab_size = get("vocab_size");
  c.n_layer = get("n_layer");
  c.n_head = get("n_head");
  c.n_kv_head = get("n_kv_head");
  c.n_embd = get("n_embd");
  if (j.contains("window_pattern")) {
    if (!j.at("window_pattern").is_string()) fail("model_config key 'window_pattern' must be a string: ", j.dump());
    c.window_pattern = j.at("window_pattern").get<std::string>();
  } else {
    c.window_pattern = "L";
  }
  c.validate();
  return c;
}

}  // namespace nanochat
