#pragma once
// The per-tensor math of nanochat's MuonAdamW (nanochat/optim.py; docs/nanochat.md 2.2 and 2.3), in
// fp32 with double accumulators for norms. The optimizer class (muon_adamw.h) decides which rank
// runs which piece; these functions know nothing about ranks or groups.
#include <cstddef>
#include <cstdint>

namespace nanochat {

/// Hyperparameters of one AdamW update (docs/nanochat.md 2.2). step is the 1-based count after increment.
struct AdamWHyper {
  double lr = 0, weight_decay = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-10;
  int64_t step = 1;
};

/// One AdamW step on n elements, in place on p, m (exp_avg) and v (exp_avg_sq) (docs/nanochat.md 2.2):
/// p <- p(1 - lr wd); m <- m + (1-b1)(g - m); v <- v + (1-b2)(g^2 - v);
/// p <- p - (lr / (1 - b1^t)) m / (sqrt(v / (1 - b2^t)) + eps), with g = grad_scale * grad.
void adamw_update(float* p, const float* grad, float* m, float* v, size_t n, float grad_scale, const AdamWHyper& hp);

/// Scratch for muon_update / polar_express on matrices up to max_elems = m*n elements and
/// max_side = min(m, n) (caller-owned, allocated once): x and x2 hold max_elems floats, a and b
/// hold max_side^2 floats, rowv holds max(m, n) doubles.
struct MuonScratch {
  float* x = nullptr;
  float* x2 = nullptr;
  float* a = nullptr;
  float* b = nullptr;
  double* rowv = nullptr;
};

/// Polar Express (docs/nanochat.md 2.3 step 5, arXiv 2505.16932, nanochat's 5 coefficient triples) on the
/// row-major (m, n) matrix in x, in place: tall (m > n): A = X^T X, X <- aX + X(bA + cA^2);
/// otherwise A = X X^T, X <- aX + (bA + cA^2)X. The caller pre-scales x (spectral norm < 1).
/// Products go through sgemm (kernels/gemm.h); the symmetric A and A^2 = A A^T of a side >= 128
/// are built from three half-size block products (3/4 of the FLOPs), the diagonal blocks split the
/// same way while their side is >= 256 (5/8 at a side of 512). Returns the pointer holding the result (x or
/// s.x2; the other is clobbered). steps <= 5.
float* polar_express(float* x, int64_t m, int64_t n, const MuonScratch& s, int steps = 5);

/// polar_express in bfloat16, as nanochat runs it on a GPU (nanochat/optim.py muon_step_fused with
/// COMPUTE_DTYPE bfloat16): x must hold bf16 values (fp32 numbers with 8 mantissa bits); every
/// matrix product has bf16 operands and fp32 accumulation (kernels/gemm_bf16.h bgemm; the Gram
/// matrices in blocks as polar_express: the blocks' sums are the
/// full product's up to fp32 summation order) and its result, like every elementwise result, is
/// rounded to bf16:
/// A = r(X^T X) (tall) or r(X X^T); B = r(r(b A) + r(c r(A A))); X <- r(r(a X) + r(X B)) (tall) or
/// r(r(a X) + r(B X)), with r() rounding to the nearest bf16. Scratch and result as polar_express;
/// the bf16 operand copies live in thread-local buffers grown to the largest matrix. Requires
/// native_bf16_available() (throws nanochat::Error otherwise).
float* polar_express_bf16(float* x, int64_t m, int64_t n, const MuonScratch& s, int steps = 5);

/// Multiply-add FLOPs (2 per multiply-add) of the matrix products polar_express runs on an
/// (m, n) matrix with `steps` iterations: per iteration the Gram matrix A (k, k) of X, k = min(m, n),
/// the Gram matrix of A, and the (m, n) product with B; a Gram matrix counts its blocks' products. The same for
/// polar_express_bf16. Excludes the elementwise work (O(m n) per iteration). Throws nanochat::Error for steps outside
/// [0, 5].
int64_t polar_express_flops(int64_t m, int64_t n, int steps = 5);

/// Hyperparameters of one Muon update (docs/nanochat.md 2.3); lr is the group lr (the shape factor
/// sqrt(max(1, m/n)) is applied inside).
struct MuonHyper {
  double lr = 0, momentum = 0.95, weight_decay = 0, beta2 = 0.9;
  int ns_steps = 5;
  /// Steps 2-5 in bfloat16 (nanochat's GPU numerics, --dtype bfloat16): the momentum-blended
  /// gradient rounded to bf16, MuonEq's factor, the pre-scale and every result rounded to bf16,
  /// Polar Express by polar_express_bf16; the rest stays fp32. Needs native bf16.
  bool bf16 = false;
};

/// One Muon step on a single (m, n) row-major matrix (docs/nanochat.md 2.3 steps 1-10), in place on p,
/// momentum (m*n) and second_moment (m floats if m >= n, else n floats): Nesterov momentum,
/// MuonEq row equilibration, pre-scale, Polar Express, Muon+ (Frobenius norm sqrt(min(m, n))),
/// NorMuon variance reduction, cautious weight decay (mask g*p >= 0) and the update with
/// lr_eff = lr sqrt(max(1, m/n)). g = grad_scale * grad; grad is not modified. hp.bf16: above.
void muon_update(float* p, const float* grad, float* momentum, float* second_moment, int64_t m, int64_t n,
                 float grad_scale, const MuonHyper& hp, const MuonScratch& s);

}  // namespace nanochat
