#pragma once
// Value embeddings with their input-dependent gate (docs/nanochat.md 1.3 attention step 2, 1.7):
//   gamma[n, h] = 3 * sigmoid(sum_{j<12} n1[n, j] * Wg[h, j])        (Wg = ve_gate.weight (Hkv, 12))
//   v_out[n, h, :] = v_in[n, h, :] + gamma[n, h] * table[idx[n], h*D : (h+1)*D]
// table = value_embeds.{layer}.weight (rows, Hkv*D).
#include <cstdint>

namespace nanochat {

/// Number of leading channels of the normalised block input the gate reads.
inline constexpr int kVeGateChannels = 12;

/// n1: (N, C) normalised block input; v_in: rows of Hkv*D with leading dimension ld_v (the v
/// columns of a fused qkv projection); v_out: (N, Hkv, D) contiguous; gamma: (N, Hkv) saved for the
/// backward. If table == nullptr (a layer without value embedding) v_out = v_in and gamma is unused.
template <typename T>
void ve_gate_forward(const T* n1, int64_t C, const T* Wg, const T* table, const int32_t* idx, const T* v_in,
                     int64_t ld_v, T* v_out, T* gamma, int64_t N, int64_t Hkv, int64_t D);

/// Backward given dv: (N, Hkv, D), the gradient at v_out (which is also the gradient at v_in).
/// Accumulates: dn1[n, 0:12] += ..., dWg += ..., dtable[idx[n]] += gamma * dv (scatter-add).
/// dz: (N, Hkv) scratch (receives the gradient at the gate's pre-activation).
template <typename T>
void ve_gate_backward(const T* n1, int64_t C, const T* Wg, const T* table, const int32_t* idx, const T* gamma,
                      const T* dv, T* dn1, T* dWg, T* dtable, T* dz, int64_t N, int64_t Hkv, int64_t D);

}  // namespace nanochat
