#pragma once
// The nanochat GPT (nanochat/gpt.py; docs/nanochat.md 1) in fp32 on CPU: parameters in one
// flat buffer (named views in state_dict order), nanochat's initialisation, the training forward
// with a hand-written backward, evaluation losses, logits, and a KV-cache inference path.
//
// Memory: parameters and gradients are two flat AlignedBuffers. Activations live in one Arena
// sized for B*T tokens and reused by every call with at most that many tokens; a call with more
// tokens reallocates it once. Nothing is allocated inside forward_backward in the steady state.
// The lm_head + softcap + cross-entropy is fused and chunked over tokens (kernels/lm_head_loss.h),
// so (B*T, V) logits never exist in training or loss evaluation.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nanochat/core/arena.h"
#include "nanochat/core/profile.h"
#include "nanochat/model/config.h"

namespace nanochat {

/// One named parameter: name = nanochat state_dict key; offset/numel index both flat buffers.
struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;
  size_t numel = 0;
};

/// Parameter counts by group, as nanochat's GPT.num_scaling_params returns them (docs/nanochat.md
/// 1.9): wte, value embeddings, lm_head, the blocks' matrices (transformer.h.*), the scalars
/// (lambdas, smear gate) and their total.
struct ScalingParams {
  int64_t wte = 0, value_embeds = 0, lm_head = 0, transformer_matrices = 0, scalars = 0, total = 0;
  bool operator==(const ScalingParams&) const = default;
};

class KVCache;
struct LmHeadBf16;

/// The number format of the model's matrix products (base-train --dtype; docs/architecture.md 3.2).
/// Float32: everything fp32 (the default, and the reference the parity tests hold to nanochat).
/// BFloat16: nanochat's GPU numerics (PyTorch autocast(bfloat16) for Linear layers): the
/// parameters, gradients and optimizer state stay fp32; the block matrices (c_q, c_k, c_v, c_proj,
/// c_fc, mlp c_proj) and the lm_head are rounded to bf16 once per optimizer step, and every
/// activation or gradient is rounded to bf16 where it feeds one of their products, which
/// accumulate in fp32 (kernels/gemm_bf16.h). The products' outputs stay fp32 (autocast rounds them
/// to bf16). Everything else runs in fp32 as under autocast: embeddings, norms, rotary, attention
/// softmax, softcap, cross-entropy, and (unlike autocast, which would run them in bf16) the
/// attention core and the two small gate projections (ve_gate, smear_gate: 12 and 24 inputs).
/// Needs a CPU with native bf16 (kernels/gemm_bf16.h native_bf16_available).
enum class ComputeDtype { Float32, BFloat16 };

/// "float32" or "bfloat16" (nanochat's NANOCHAT_DTYPE names); throws nanochat::Error naming `flag`
/// for anything else ("float16" is named as unsupported).
ComputeDtype parse_compute_dtype(const std::string& name, const std::string& flag);
/// "float32" or "bfloat16".
const char* compute_dtype_name(ComputeDtype d);

/// nanochat's GPT model. Not thread-safe: one instance is used by one thread at a time (its
/// kernels use OpenMP internally).
class GPT {
 public:
  /// Builds the parameter table for cfg (validated; throws nanochat::Error for a bad config) and
  /// allocates zeroed parameter and gradient buffers. Call init_weights() or load weights next.
  explicit GPT(const ModelConfig& cfg);
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const ModelConfig& config() const { return cfg_; }
  /// Parameters in nanochat's state_dict / model.parameters() order (docs/nanochat.md 1.2).
  const std::vector<ParamInfo>& params() const { return params_; }
  /// Total number of parameter elements (= size of the flat buffers in floats).
  size_t num_params() const { return num_params_; }
  /// Write access to the parameters: marks the bf16 copy of the weights stale (params_changed).
  float* param_data() {
    bf16_stale_ = true;
    return params_buf_.f32();
  }
  const float* param_data() const { return params_buf_.f32(); }
  float* grad_data() { return grads_buf_.f32(); }
  const float* grad_data() const { return grads_buf_.f32(); }
  /// Named view into the parameter / gradient buffer; throws nanochat::Error for an unknown name.
  /// The non-const parameter view marks the bf16 weights stale like param_data().
  float* param(const std::string& name);
  float* grad(const std::string& name);
  const float* param(const std::string& name) const;
  const float* grad(const std::string& name) const;
  /// The ParamInfo of a name; throws nanochat::Error for an unknown name.
  const ParamInfo& param_info(const std::string& name) const;

  /// nanochat's init_weights (docs/nanochat.md 1.2) drawn from our own RNG (core/rng.h): wte N(0, 0.8),
  /// lm_head N(0, 0.001), c_q/c_k/c_v U(-s, s) with s = sqrt(3/C), c_fc U(-0.4s, 0.4s), both
  /// c_proj zero, ve_gate and smear_gate U(0, 0.02), value_embeds U(-s, s), lambdas by formula,
  /// smear_lambda 0, backout_lambda 0.2. Deterministic for a seed (independent of thread count).
  void init_weights(uint64_t seed);
  /// Sets every gradient to zero.
  void zero_grad();

  /// Selects the number format of the matrix products (ComputeDtype); Float32 by default.
  /// BFloat16 throws nanochat::Error naming --dtype where the CPU lacks native bf16.
  void set_compute_dtype(ComputeDtype d);
  ComputeDtype compute_dtype() const { return dtype_; }
  /// Tells the model that its parameters were written through a pointer it handed out earlier (the
  /// optimizer's step, a broadcast): in BFloat16 the next forward rounds the weights to bf16 again,
  /// once for all the micro-batches until the next change. A no-op cost in Float32.
  void params_changed() { bf16_stale_ = true; }

  /// Training step for one micro-batch: forward + backward of loss * loss_scale, where loss is the
  /// mean cross-entropy over targets != -1. Gradients are ACCUMULATED into grad_data().
  /// idx, targets: (B, T) int32 row-major; idx in [0, V), targets in [0, V) or -1.
  /// Returns the mean loss (nats, unscaled). If every target is -1 the loss is 0 and nothing is
  /// accumulated (PyTorch would return NaN). Throws nanochat::Error for bad sizes or token ids.
  /// grad_ready (optional) is called with a parameter's index in params() as soon as the backward
  /// has finished accumulating its gradient (lm_head first, then each block's tensors and value
  /// embedding from the last layer down, the embedding and scalars last), so that its reduction
  /// can overlap the rest of the backward; every parameter is reported exactly once.
  float forward_backward(const int32_t* idx, const int32_t* targets, int B, int T, float loss_scale = 1.f,
                         const std::function<void(size_t)>& grad_ready = {});
  /// The order in which forward_backward reports parameters to grad_ready (every index of params()
  /// once). A rank that runs no micro-batch in a step reports its (zero) gradients in this order,
  /// so that every rank issues the same sequence of collectives.
  std::vector<size_t> grad_ready_order() const;
  /// Evaluation (no gradients): mean loss over targets != -1 (0 if none); if per_token_loss is
  /// not null it receives B*T losses in nats (0 at ignored positions).
  float forward_loss(const int32_t* idx, const int32_t* targets, int B, int T, float* per_token_loss = nullptr);
  /// Logits after the softcap, cropped to V: logits (B, T, V) row-major, caller-allocated.
  void forward_logits(const int32_t* idx, int B, int T, float* logits);
  /// The softcapped logits of one position per row: logits (B, V) row-major, caller-allocated,
  /// row b from position positions[b] in [0, T) of row b (nanochat's chat_eval reads
  /// model(ids)[b, pos_b] of a padded batch; the causal mask makes the padding after pos_b
  /// irrelevant). Same trunk as forward_logits, but only B rows of the lm_head are computed.
  /// Throws nanochat::Error for bad sizes, token ids or a position outside [0, T).
  void forward_logits_at(const int32_t* idx, int B, int T, const int32_t* positions, float* logits);

  /// KV-cache forward (docs/nanochat.md 1.10): processes T new tokens per row starting at the cache's
  /// position, appends their keys/values, advances the cache by T. If logits != nullptr it
  /// receives the softcapped logits of every new position (B, T, V) when all_positions, else
  /// only of the last one (B, V). The cache must have been made for this model's config with
  /// batch B; throws nanochat::Error if it would overflow.
  /// Smear as in nanochat: a single token (T == 1) mixes in the previous call's last embedding;
  /// a multi-token call smears within itself only (its first token is not mixed), so feed a
  /// prompt in one call and then decode one token at a time to match the full forward exactly.
  void forward_cached(const int32_t* idx, int B, int T, KVCache& cache, float* logits, bool all_positions = false);

  /// estimate_flops (docs/nanochat.md 1.9): 6 * matmul params + sum over layers of 12*H*D*min(window, T).
  int64_t num_flops_per_token() const;
  /// Matmul parameter count (all Linear weights: block matrices incl. ve_gate, lm_head, smear_gate).
  int64_t num_matmul_params() const;
  /// num_scaling_params (docs/nanochat.md 1.9): parameter counts by group.
  ScalingParams num_scaling_params() const;

  /// The same counts computed from a config alone (no buffers are allocated).
  static std::vector<ParamInfo> param_table(const ModelConfig& cfg);
  static int64_t flops_per_token(const ModelConfig& cfg);
  /// flops_per_token split by the op family that runs them (core/profile.h): the 6 * params of
  /// each Linear go to its GEMM family (lm_head: LmHeadLoss; the ve_gate and smear_gate
  /// projections: NormRotary), the attention term to Attention; the other families carry none.
  /// The entries sum to flops_per_token(cfg).
  static std::array<int64_t, prof::kNumOps> flops_per_token_by_family(const ModelConfig& cfg);
  static int64_t matmul_params(const ModelConfig& cfg);
  static ScalingParams scaling_params(const ModelConfig& cfg);

  /// Bytes of the activation arena currently allocated (0 before the first call).
  size_t activation_bytes() const { return arena_.capacity(); }

  /// Rows of the fused lm_head chunk (tokens per chunk). Default: 256 in float32, 512 in bfloat16,
  /// where oneDNN's bf16 products gain on the taller operands (bench_lm_head --dtype bfloat16: 7-12%
  /// faster at C 256-768, V 32768; 512 costs fp32 7%). Once set here, a dtype change keeps it.
  /// For tuning/tests. Throws nanochat::Error for rows < 1.
  void set_lm_head_chunk(int64_t rows);
  /// Rows of the fused lm_head chunk in use.
  int64_t lm_head_chunk() const { return lm_head_chunk_; }
  /// Activation recompute for the MLP (off by default): the c_fc output (N, 4C) is not kept per
  /// layer but recomputed in the backward (one more c_fc GEMM per layer, ~+11% block GEMM FLOPs; 6-8% more step time at
  /// d6b32, bench/README.md), which saves (L-1) (N, 4C) floats, the largest activation. Gradients are bit-identical.
  void set_recompute_mlp(bool on);
  bool recompute_mlp() const { return recompute_mlp_; }

 private:
  struct LayerParams;
  struct LayerActs;
  struct Acts;

  void ensure_acts(int64_t N);
  void check_inputs(const int32_t* idx, const int32_t* targets, int B, int T) const;
  // Trunk forward for (B, T) tokens up to the final normalised activations (acts_->n_f); with a
  // cache, positions start at cache->pos() and keys/values are appended to it.
  void forward_trunk(const int32_t* idx, int B, int T, KVCache* cache);
  // Backward from acts_->dC (= gradient at the final normalised activations) to all parameters.
  void backward_trunk(const int32_t* idx, int B, int T, const std::function<void(size_t)>& grad_ready);
  LayerParams layer_params(int i, float* base) const;
  // In BFloat16: rounds the matrix weights to bf16 when they changed since the last rounding.
  void refresh_bf16_weights();
  // The bf16 copy of the weight W (a pointer into the parameters).
  const uint16_t* wbf16(const float* W) const;
  // The lm_head's bf16 operands for lm_head_softcap_ce in BFloat16, else null.
  const LmHeadBf16* lm_head_bf16();
  // y (+)= x W^T (M tokens, K inputs, N outputs) in the compute dtype; W points into the parameters.
  void lin_fwd(const float* x, const float* W, float* y, int64_t M, int64_t K, int64_t N, float beta = 0.f);
  // dW += dy^T x and dx = dy W in the compute dtype (dW accumulates; dx is overwritten).
  void lin_bwd(const float* dy, const float* x, const float* W, float* dW, float* dx, int64_t M, int64_t K, int64_t N);

  ModelConfig cfg_;
  std::vector<ParamInfo> params_;
  std::map<std::string, size_t> index_;
  size_t num_params_ = 0;
  AlignedBuffer params_buf_, grads_buf_;
  AlignedBuffer rope_cos_, rope_sin_;  // (10 * sequence_len, D/2)
  std::vector<int> windows_;
  static constexpr int64_t kLmHeadChunkF32 = 256, kLmHeadChunkBf16 = 512;
  int64_t lm_head_chunk_ = kLmHeadChunkF32;
  bool lm_head_chunk_chosen_ = false;  // set_lm_head_chunk was called: the dtype keeps its chunk
  bool recompute_mlp_ = false;
  ComputeDtype dtype_ = ComputeDtype::Float32;
  // The bf16 copy of the matrices, packed in parameter order (no room for the embeddings).
  struct Bf16Range {
    size_t src, numel, dst;  // offset in the parameters, element count, offset in params_bf16_
  };
  AlignedBuffer params_bf16_;
  std::vector<Bf16Range> bf16_ranges_;  // ascending src
  bool bf16_stale_ = true;
  std::vector<size_t> layer_first_param_;  // index in params_ of each layer's c_q
  size_t wte_ = 0, lm_head_ = 0, smear_gate_ = 0;
  std::vector<int64_t> ve_param_;  // per layer: index in params_ of value_embeds.{i}, or -1
  // activations
  Arena arena_;
  int64_t acts_tokens_ = 0;  // capacity in tokens
  std::unique_ptr<Acts> acts_;
};

/// Key/value cache for generation (nanochat engine.py KVCache, docs/nanochat.md 1.10): per layer k and v of
/// shape (B, T_max, Hkv, D) fp32, the current position (all rows aligned), and the previous
/// position's normalised embedding for the smear at decode steps.
class KVCache {
 public:
  /// Allocates a zeroed cache for batch B and at most t_max positions of model cfg.
  KVCache(const ModelConfig& cfg, int B, int t_max);
  int batch() const { return B_; }
  int max_len() const { return t_max_; }
  int pos() const { return pos_; }
  /// Forgets all positions (the memory is kept).
  void reset() {
    pos_ = 0;
    has_prev_ = false;
  }
  /// Copies the first other.pos() positions of a batch-1 (or same-batch) cache into every row of
  /// this one and sets the position (nanochat's KVCache.prefill). Throws on shape mismatch.
  void prefill_from(const KVCache& other);

  float* k(int layer) { return k_.f32() + static_cast<size_t>(layer) * layer_stride_; }
  float* v(int layer) { return v_.f32() + static_cast<size_t>(layer) * layer_stride_; }
  const float* k(int layer) const { return k_.f32() + static_cast<size_t>(layer) * layer_stride_; }
  const float* v(int layer) const { return v_.f32() + static_cast<size_t>(layer) * layer_stride_; }

 private:
  friend class GPT;
  ModelConfig cfg_;
  int B_ = 0, t_max_ = 0, pos_ = 0;
  bool has_prev_ = false;
  size_t layer_stride_ = 0;
  AlignedBuffer k_, v_;
  AlignedBuffer prev_;  // (B, C) normalised pre-smear embedding of the last position
};

}  // namespace nanochat
