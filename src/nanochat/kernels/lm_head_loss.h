#pragma once
// The model's head (docs/nanochat.md 1.3 steps 6-8, backward 1.7): logits = x * W[:V]^T (vocab
// padding cropped), softcap z = cap * tanh(logits / cap) with cap = 15, cross-entropy against
// targets with ignore_index -1. Fused and chunked over tokens so the (N, V) logits never exist:
// each chunk's logits go to a small scratch, are turned into dlogits in place, and feed the two
// backward GEMMs (dx = dlogits * W, dW += dlogits^T * x) before the next chunk.
//
// Per row: lse = log sum_j exp(z_j), loss = lse - z_y; with grad_scale s (= loss_scale / N_valid):
// dz = s * (softmax(z) - onehot(y)), dlogits = dz * (1 - (z/cap)^2); ignored rows: loss 0, grad 0.
#include <cstdint>

namespace nanochat {

/// nanochat's logit softcap.
inline constexpr float kLogitSoftcap = 15.f;

/// One row of softcap + cross-entropy. row: V raw logits, overwritten with dlogits (scaled by
/// grad_scale) when want_grad, else with the softcapped logits z. target in [0, V) or -1 (ignored:
/// returns 0 and, with want_grad, a zero row). Returns the loss lse - z_target in nats.
/// float uses the vectorised exp/tanh of vecmath.h; double uses std::exp/std::tanh (reference).
template <typename T>
double softcap_ce_row(T* row, int64_t V, int32_t target, T cap, T grad_scale, bool want_grad);

/// z[i] = cap * tanh(z[i] / cap) for n values, in place (vectorised).
void softcap_inplace(float* z, int64_t n, float cap);

/// Logit columns per forward GEMM call of lm_head_softcap_ce: a (chunk rows, block) tile of logits
/// stays in L2 while the softcap pass consumes it.
inline constexpr int64_t kLmHeadVocabBlock = 1024;

/// Floats of scratch lm_head_softcap_ce needs for N rows in chunks of chunk_rows.
int64_t lm_head_scratch_floats(int64_t chunk_rows, int64_t N, int64_t C, int64_t V);

/// The bf16 operands of lm_head_softcap_ce's products (autocast's numerics, gemm_bf16.h): W is the
/// lm_head weight rounded to bf16 (W's layout); scratch holds lm_head_bf16_scratch values. Each
/// chunk's x rows, its dlogits and its scaled x rows are rounded to bf16 where they feed a product;
/// the softcap, the softmax and the loss stay fp32.
struct LmHeadBf16 {
  const uint16_t* W = nullptr;
  uint16_t* scratch = nullptr;
};

/// bf16 values of scratch LmHeadBf16 needs for N rows in chunks of chunk_rows: chunk x (C + V).
int64_t lm_head_bf16_scratch(int64_t chunk_rows, int64_t N, int64_t C, int64_t V);

/// Fused chunked lm_head + softcap + cross-entropy.
/// x: (N, C) final normalised activations; W: lm_head weight (>= V rows, C); targets: (N) in
/// [0, V) or -1. scratch: lm_head_scratch_floats(chunk_rows, N, C, V) floats, 64-byte aligned.
/// Each chunk's logits are computed in column blocks, each softcapped and summed while hot in
/// cache and overwritten with q = exp(z - cap) (1 - (z/cap)^2); the row scale s / sum exp(z - cap)
/// is applied to the small operands (x rows, dx rows) instead of the (chunk, V) block.
/// per_token_loss (N), optional, receives each row's
/// loss (0 at ignored rows). If dx != nullptr, the backward runs: dx (N, C) is overwritten with
/// the input gradient and dW (rows 0..V-1) accumulates the weight gradient, both for the loss
/// sum_rows(loss) * grad_scale. Returns the sum of losses over non-ignored rows (nats).
/// dWt (optional, C * V floats of scratch): if given, the weight gradient is first summed over all
/// chunks in transposed (C, V) layout, dWt = x^T * dlogits, and added to dW once at the end. BLAS
/// runs that product ~25% faster than dlogits^T * x (whose reduction runs over the short chunk).
/// With oneDNN's AVX2 kernels (not its AVX-512 ones) the fp32 dWt product reads the chunk's scaled
/// rows stored transposed, (C, rows), as a plain product: 8% faster at d4 (bench/README.md).
/// bf (optional): the three products run with bf16 operands and fp32 accumulation, reading bf->W
/// instead of W; requires native bf16 (gemm_bf16.h: throws nanochat::Error without it).
double lm_head_softcap_ce(const float* x, const float* W, const int32_t* targets, int64_t N, int64_t C, int64_t V,
                          float cap, float grad_scale, float* scratch, int64_t chunk_rows, float* per_token_loss,
                          float* dx, float* dW, float* dWt = nullptr, const LmHeadBf16* bf = nullptr);

}  // namespace nanochat
