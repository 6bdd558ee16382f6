#pragma once
// Causal (optionally sliding-window) multi-head self-attention with grouped-query heads, fp32 on
// CPU: forward, hand-written backward, and the KV-cache forward used at inference.
//
// Math (docs/nanochat.md 1.3, 1.6, 1.7, 1.10): for batch b, query head h, query position i,
//   S_ij = scale * q_i . k_j          for allowed keys max(0, i - window) <= j <= i
//   P_ij = softmax_j(S_ij),  out_i = sum_j P_ij v_j,  lse_i = log sum_j exp(S_ij)
// Backward (FlashAttention-2, Dao 2023): P is recomputed from q, k and lse; with
//   Delta_i = dout_i . out_i and dS_ij = P_ij (dout_i . v_j - Delta_i):
//   dq_i = scale * sum_j dS_ij k_j,  dk_j = scale * sum_i dS_ij q_i,  dv_j = sum_i P_ij dout_i,
// and a kv head's dk/dv sum over the query heads of its group.
//
// The fast kernels are tiled over query and key blocks with an online softmax (no (T, T) buffer
// exists), skip key tiles outside the causal/sliding window, use AVX-512 when compiled for it and
// run in parallel with OpenMP (the current thread count, see set_num_threads in core/threads.h).
// The operands a tile product streams through (V in the forward; Q, dO and K in the backward)
// are read from head-major copies, (heads, T, D): in the (B, T, heads, D) layout a tile's rows lie
// a power of two apart and share a few L1 cache sets. Scratch memory (tiles and these copies: per
// thread up to three heads' rows, and on the one-task-per-tile paths up to three arrays the size
// of q) is thread-local and only grows (no allocation per call once warmed up).
// Throughput is measured by bench/bench_attention (d4, d6 and d8 at T 512, d8 at T 2048).
//
// Window convention: window >= T (or window < 0) is plain causal attention; window w lets a query
// see w + 1 keys including itself (docs/nanochat.md 1.6).
//
// Errors: all functions throw nanochat::Error on invalid shapes (non-positive sizes, H % Hkv != 0,
// a cache too short for pos0 + Tq).

namespace nanochat {

/// Forward. q: (B, T, H, D), k and v: (B, T, Hkv, D), out: (B, T, H, D), all row-major fp32.
/// lse: (B, H, T) natural-log log-sum-exp of the scaled scores of each query row, saved for the
/// backward (may be nullptr when no backward follows).
/// Query position i attends keys j with max(0, i - window) <= j <= i (window >= T: plain causal).
/// GQA: query head h uses kv head h / (H / Hkv) (H % Hkv == 0). scale is the softmax scale
/// (1/sqrt(D) in nanochat).
void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int B, int T, int H,
                       int Hkv, int D, int window, float scale);

/// Backward. Inputs as saved by attention_forward plus dout (B, T, H, D).
/// Gradients dq (B, T, H, D), dk and dv (B, T, Hkv, D) are OVERWRITTEN (not accumulated).
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int D,
                        int window, float scale);

/// KV-cache forward (inference): Tq new queries at absolute positions pos0 .. pos0+Tq-1 attend
/// over cache keys/values 0 .. pos0+Tq-1 with the same causal + window rule.
/// q: (B, Tq, H, D); k_cache, v_cache: (B, Tmax, Hkv, D), already holding the new keys at
/// pos0 .. pos0+Tq-1; out: (B, Tq, H, D). Requires pos0 >= 0 and pos0 + Tq <= Tmax.
void attention_forward_cached(const float* q, const float* k_cache, const float* v_cache, float* out, int B, int Tq,
                              int pos0, int Tmax, int H, int Hkv, int D, int window, float scale);

/// How attention_backward_with splits work between OpenMP threads.
enum class AttentionBackwardMode {
  kAuto,   ///< kFused when there are at least 2 (batch, kv head) tasks per thread, else kSplit.
  kFused,  ///< one task per (b, kv head) computes dq, dk, dv together (5 tile products per pair).
  kSplit,  ///< a dq pass over (b, h, query tile) and a dk/dv pass over (b, kv head, key tile)
           ///< (7 tile products per pair, but more parallelism).
};

/// attention_backward with an explicit work split (for tests and benchmarks); results are the
/// same up to floating-point summation order.
void attention_backward_with(AttentionBackwardMode mode, const float* q, const float* k, const float* v,
                             const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv,
                             int B, int T, int H, int Hkv, int D, int window, float scale);

/// Straightforward reference implementation (loops over (b, h, i), one score row at a time),
/// instantiated for float and double. Same shapes and semantics as attention_forward /
/// attention_backward; used by the tests (finite differences in double) and as a baseline.
template <typename Real>
void attention_forward_reference(const Real* q, const Real* k, const Real* v, Real* out, Real* lse, int B, int T, int H,
                                 int Hkv, int D, int window, Real scale);
template <typename Real>
void attention_backward_reference(const Real* q, const Real* k, const Real* v, const Real* out, const Real* lse,
                                  const Real* dout, Real* dq, Real* dk, Real* dv, int B, int T, int H, int Hkv, int D,
                                  int window, Real scale);

}  // namespace nanochat
