#pragma once
// Per-op-family wall-time profile of the training step (what --profile prints).
//
// The model, optimizer and trainer wrap each op call in a `prof::Scope`; when profiling is off
// (the default) a scope costs one load and a branch. The caller enables it, runs steps, reads the
// per-family seconds and prints shares. Scopes are entered from the calling (main) thread only;
// the kernels' OpenMP threads run inside them, so the figures are wall time, not CPU time.
// Scopes must not nest (each family's time is exclusive).
#include <array>
#include <atomic>
#include <cstddef>

#include "nanochat/core/timer.h"

namespace nanochat::prof {

/// Op families of one training step. GEMM families include forward and both backward GEMMs
/// of that layer type (and the transposed-gradient accumulation that follows them).
enum class Op : int {
  GemmQKV,       ///< attn.c_q/c_k/c_v projections
  GemmAttnProj,  ///< attn.c_proj
  GemmMlpFc,     ///< mlp.c_fc
  GemmMlpProj,   ///< mlp.c_proj
  Attention,     ///< causal (windowed) attention forward + backward
  LmHeadLoss,    ///< lm_head GEMMs + softcap + cross-entropy (fused), its weight gradient
  NormRotary,    ///< rmsnorm, rotary + QK norm, smear, embedding, value-embedding gate
  Elementwise,   ///< relu^2, residual/lambda mixes, copies
  Optimizer,     ///< MuonAdamW step (communication waits included)
  Data,          ///< waiting for the data loader's next batch
  kCount
};

inline constexpr size_t kNumOps = static_cast<size_t>(Op::kCount);

/// Display name of a family.
inline const char* name(Op op) {
  static constexpr const char* kNames[kNumOps] = {
      "gemm qkv",       "gemm attn proj",  "gemm mlp fc", "gemm mlp proj", "attention",
      "lm_head + loss", "norm/rotary/emb", "elementwise", "optimizer",     "data"};
  return kNames[static_cast<size_t>(op)];
}

namespace detail {
inline std::atomic<bool> g_enabled{false};
inline std::array<double, kNumOps> g_seconds{};
inline std::array<long, kNumOps> g_calls{};
}  // namespace detail

/// Turns recording on or off (off by default).
inline void enable(bool on) { detail::g_enabled.store(on, std::memory_order_relaxed); }
/// Whether recording is on.
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
/// Clears every family's accumulated time and call count.
inline void reset() {
  detail::g_seconds.fill(0.0);
  detail::g_calls.fill(0);
}
/// Accumulated wall seconds of a family since the last reset().
inline double seconds(Op op) { return detail::g_seconds[static_cast<size_t>(op)]; }
/// Number of recorded scopes of a family since the last reset().
inline long calls(Op op) { return detail::g_calls[static_cast<size_t>(op)]; }
/// Sum of all families' seconds.
inline double total_seconds() {
  double s = 0;
  for (double v : detail::g_seconds) s += v;
  return s;
}

/// RAII scope: adds the wall time between construction and destruction to `op` when enabled.
class Scope {
 public:
  explicit Scope(Op op) : op_(op), on_(enabled()), t0_(on_ ? now_seconds() : 0.0) {}
  ~Scope() {
    if (!on_) return;
    detail::g_seconds[static_cast<size_t>(op_)] += now_seconds() - t0_;
    detail::g_calls[static_cast<size_t>(op_)] += 1;
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Op op_;
  bool on_;
  double t0_;
};

}  // namespace nanochat::prof
