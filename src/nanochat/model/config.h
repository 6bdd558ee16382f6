#pragma once
// nanochat's GPTConfig (docs/nanochat.md 1.1) and the numbers derived from it: padded vocab,
// per-layer attention windows (1.6), value-embedding layers (1.2).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanochat {

/// Architecture hyperparameters of a nanochat GPT (field names and defaults of nanochat's GPTConfig).
struct ModelConfig {
  int64_t sequence_len = 2048;          ///< T used for windows and the rotary table (10 x sequence_len rows)
  int64_t vocab_size = 32768;           ///< V (tokenizer vocabulary); tables are padded to padded_vocab()
  int64_t n_layer = 12;                 ///< L
  int64_t n_head = 6;                   ///< H (query heads)
  int64_t n_kv_head = 6;                ///< Hkv (key/value heads; H must be a multiple)
  int64_t n_embd = 768;                 ///< C (model width)
  std::string window_pattern = "SSSL";  ///< 'S'/'L' per layer, tiled; last layer always 'L'

  /// base_train's build_model_meta (docs/nanochat.md 1.1):
  /// C = ceil(depth*aspect_ratio / head_dim) * head_dim, H = C / head_dim, Hkv = H, L = depth.
  /// Throws nanochat::Error (naming the flag) for values < 1.
  static ModelConfig from_depth(int depth, int aspect_ratio, int head_dim, int max_seq_len, int vocab_size,
                                const std::string& window_pattern);

  /// D = n_embd / n_head.
  int64_t head_dim() const { return n_embd / n_head; }
  /// Vp = ceil(V / 64) * 64 (nanochat's pad_vocab_size_to = 64).
  int64_t padded_vocab() const { return (vocab_size + 63) / 64 * 64; }
  /// Attention window per layer (docs/nanochat.md 1.6): 'L' = sequence_len, 'S' = ceil(ceil(T/4)/128)*128,
  /// the pattern (case-insensitive) tiled over layers, the last layer always long.
  /// Throws nanochat::Error naming --window-pattern if the pattern is empty or has other letters.
  std::vector<int> window_sizes() const;
  /// True iff layer i has a value embedding and ve_gate: i % 2 == (n_layer - 1) % 2.
  bool has_value_embed(int layer) const { return layer % 2 == (n_layer - 1) % 2; }
  /// Checks every invariant the model needs (positive sizes, C % H == 0, H % Hkv == 0, even D,
  /// C >= 24 for the smear gate, valid pattern); throws nanochat::Error describing the problem.
  void validate() const;

  /// nanochat's checkpoint meta "model_config" object.
  nlohmann::json to_json() const;
  /// Parses a "model_config" object. Missing window_pattern means "L" (nanochat patches old
  /// checkpoints the same way, docs/nanochat.md 3.9); other missing keys throw nanochat::Error.
  static ModelConfig from_json(const nlohmann::json& j);

  bool operator==(const ModelConfig&) const = default;
};

}  // namespace nanochat
