#include "nanochat/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "nanochat/core/error.h"
#include "nanochat/core/profile.h"
#include "nanochat/core/rng.h"
#include "nanochat/kernels/attention.h"
#include "nanochat/kernels/elementwise.h"
#include "nanochat/kernels/embedding.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/gemm_bf16.h"
#include "nanochat/kernels/lm_head_loss.h"
#include "nanochat/kernels/rmsnorm.h"
#include "nanochat/kernels/rotary.h"
#include "nanochat/kernels/smear.h"
#include "nanochat/kernels/ve_gate.h"

namespace nanochat {

using prof::Op;
using Prof = prof::Scope;

namespace {
constexpr float kQkScale = 1.2f;  // nanochat multiplies q and k by 1.2 after the QK norm
// Indices in params_ of the root scalars (registered first, docs/nanochat.md 1.2).
constexpr size_t kResid = 0, kX0 = 1, kSmearLambda = 2, kBackout = 3;
}  // namespace

// Pointers to one layer's weights (or their gradients: same offsets in the gradient buffer).
struct GPT::LayerParams {
  float* qkv;       // c_q, c_k, c_v stacked: ((H + 2 Hkv) D, C) (consecutive in the flat buffer)
  float* proj;      // attn.c_proj (C, H D)
  float* ve_gate;   // (Hkv, 12) or null
  float* fc;        // mlp.c_fc (4C, C)
  float* mlp_proj;  // mlp.c_proj (C, 4C)
  float* ve;        // value_embeds.{i} (Vp, Hkv D) or null
};

// Saved activations of one layer, N = B*T tokens.
struct GPT::LayerActs {
  float* rstd1;   // (N) of rmsnorm(h_in) (n1 itself is recomputed in the backward)
  float* q;       // (N, H, D) after rotary + QK norm * 1.2
  float* k;       // (N, Hkv, D)
  float* v;       // (N, Hkv, D) after value-embedding mixing
  float* rstd_q;  // (N, H)
  float* rstd_k;  // (N, Hkv)
  float* gamma;   // (N, Hkv) value-embedding gate (VE layers)
  float* att;     // (N, H D) attention output
  float* lse;     // (B, H, T)
  float* n2;      // (N, C) rmsnorm(h_mid)
  float* rstd2;   // (N)
  float* f;       // (N, 4C) c_fc output (pre-activation)
};

struct GPT::Acts {
  std::vector<LayerActs> layers;
  std::vector<float*> hs;  // L+1 buffers (N, C): hs[0] = x0 (smeared embedding), hs[i+1] = block i output
  float* e_norm;           // (N, C) rmsnorm(wte[idx])
  float* rstd_e;           // (N)
  float* sig;              // (N) smear gate sigmoid
  float* n_f;              // (N, C) final norm output
  float* rstd_f;           // (N)
  // scratch (forward and backward)
  float* hin;     // (N, C): h_in in the forward, h_f before the final norm; scratch in the backward
  float* n1;      // (N, C): rmsnorm(h_in) of the current layer (forward, and recomputed in the backward)
  float* qkv;     // (N, (H + 2 Hkv) D): fused projection output / its gradient
  float* a4;      // (N, 4C): relu^2 output
  float* b4;      // (N, 4C): gradient of the MLP hidden layer (shares a4's memory: a4 is dead by then)
  float* dh;      // (N, C) running gradient of the residual stream
  float* dx0;     // (N, C) gradient accumulated at x0
  float* dhf;     // (N, C) gradient at h_f (kept for the backout)
  float* dC;      // (N, C) gradient at a normalised input (dn1, dn2, dn_f, de)
  float* datt;    // (N, H D)
  float* dq;      // (N, H D)
  float* dk;      // (N, Hkv D)
  float* dv;      // (N, Hkv D)
  float* dz;      // (N, Hkv)
  float* logits;  // lm_head chunk scratch (lm_head_scratch_floats)
  float* dlm_t;   // (C, V) lm_head weight gradient of one micro-batch, transposed
  float* dw_t;    // scratch for transposed block weight gradients (linear_bwd_w_acc)
  // BFloat16 only (null in Float32): the bf16 operands of the products
  uint16_t* xb = nullptr;  // (N, max(C, H D, 4C)): a product's input rows
  uint16_t* gb = nullptr;  // (N, max(C, QKV, 4C)): a product's output gradient
  LmHeadBf16 lm;           // the lm_head's bf16 weight and scratch (lm_head_bf16_scratch)
};

std::vector<ParamInfo> GPT::param_table(const ModelConfig& cfg) {
  cfg.validate();
  const int64_t L = cfg.n_layer, C = cfg.n_embd, H = cfg.n_head, Hkv = cfg.n_kv_head;
  const int64_t D = cfg.head_dim(), Vp = cfg.padded_vocab();
  std::vector<ParamInfo> t;
  size_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    ParamInfo p;
    p.name = std::move(name);
    p.numel = 1;
    for (int64_t s : shape) p.numel *= static_cast<size_t>(s);
    p.shape = std::move(shape);
    p.offset = offset;
    offset += p.numel;
    t.push_back(std::move(p));
  };
  // Registration order of nanochat's GPT (docs/nanochat.md 1.2): root scalars, wte, blocks, lm_head,
  // smear_gate, value_embeds ascending.
  add("resid_lambdas", {L});
  add("x0_lambdas", {L});
  add("smear_lambda", {1});
  add("backout_lambda", {1});
  add("transformer.wte.weight", {Vp, C});
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    add(p + "attn.c_q.weight", {H * D, C});
    add(p + "attn.c_k.weight", {Hkv * D, C});
    add(p + "attn.c_v.weight", {Hkv * D, C});
    add(p + "attn.c_proj.weight", {C, H * D});
    if (cfg.has_value_embed(static_cast<int>(i))) add(p + "attn.ve_gate.weight", {Hkv, kVeGateChannels});
    add(p + "mlp.c_fc.weight", {4 * C, C});
    add(p + "mlp.c_proj.weight", {C, 4 * C});
  }
  add("lm_head.weight", {Vp, C});
  add("smear_gate.weight", {1, kSmearChannels});
  for (int64_t i = 0; i < L; ++i)
    if (cfg.has_value_embed(static_cast<int>(i))) add("value_embeds." + std::to_string(i) + ".weight", {Vp, Hkv * D});
  return t;
}

GPT::GPT(const ModelConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  windows_ = cfg_.window_sizes();
  params_ = param_table(cfg_);
  const int64_t L = cfg_.n_layer;
  ve_param_.assign(static_cast<size_t>(L), -1);
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_[i];
    index_[p.name] = i;
    num_params_ += p.numel;
    if (p.name == "transformer.wte.weight") wte_ = i;
    if (p.name == "lm_head.weight") lm_head_ = i;
    if (p.name == "smear_gate.weight") smear_gate_ = i;
    if (p.name.ends_with(".attn.c_q.weight")) layer_first_param_.push_back(i);
    if (p.name.rfind("value_embeds.", 0) == 0) ve_param_[std::stoll(p.name.substr(13))] = static_cast<int64_t>(i);
  }
  NC_CHECK(static_cast<int64_t>(layer_first_param_.size()) == L, "parameter table has ", layer_first_param_.size(),
           " blocks");
  params_buf_ = AlignedBuffer(num_params_ * sizeof(float));
  grads_buf_ = AlignedBuffer(num_params_ * sizeof(float));
  for (const ParamInfo& p : params_) {  // the Linear weights whose products run in bf16 (ComputeDtype)
    const bool matrix = p.name.ends_with(".attn.c_q.weight") || p.name.ends_with(".attn.c_k.weight") ||
                        p.name.ends_with(".attn.c_v.weight") || p.name.ends_with(".attn.c_proj.weight") ||
                        p.name.ends_with(".mlp.c_fc.weight") || p.name.ends_with(".mlp.c_proj.weight") ||
                        p.name == "lm_head.weight";
    if (matrix) {
      const size_t dst = bf16_ranges_.empty() ? 0 : bf16_ranges_.back().dst + bf16_ranges_.back().numel;
      bf16_ranges_.push_back({p.offset, p.numel, dst});
    }
  }
  // Rotary table: 10 x sequence_len rows, like nanochat's precomputed cos/sin buffers.
  const int64_t D = cfg_.head_dim();
  const int64_t rows = 10 * cfg_.sequence_len;
  rope_cos_ = AlignedBuffer(static_cast<size_t>(rows * (D / 2)) * sizeof(float));
  rope_sin_ = AlignedBuffer(static_cast<size_t>(rows * (D / 2)) * sizeof(float));
  rotary_table<float>(rope_cos_.f32(), rope_sin_.f32(), rows, D);
}

GPT::~GPT() = default;

const ParamInfo& GPT::param_info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("unknown parameter '", name, "' (not a state_dict key of this nanochat model config)");
  return params_[it->second];
}

float* GPT::param(const std::string& name) { return param_data() + param_info(name).offset; }  // marks stale
float* GPT::grad(const std::string& name) { return grad_data() + param_info(name).offset; }
const float* GPT::param(const std::string& name) const { return param_data() + param_info(name).offset; }
const float* GPT::grad(const std::string& name) const { return grad_data() + param_info(name).offset; }

GPT::LayerParams GPT::layer_params(int i, float* base) const {
  const size_t first = layer_first_param_[i];
  const bool ve = ve_param_[i] >= 0;
  LayerParams lp;
  lp.qkv = base + params_[first].offset;
  lp.proj = base + params_[first + 3].offset;
  lp.ve_gate = ve ? base + params_[first + 4].offset : nullptr;
  lp.fc = base + params_[first + (ve ? 5 : 4)].offset;
  lp.mlp_proj = base + params_[first + (ve ? 6 : 5)].offset;
  lp.ve = ve ? base + params_[ve_param_[i]].offset : nullptr;
  return lp;
}

void GPT::set_lm_head_chunk(int64_t rows) {
  NC_CHECK(rows >= 1, "lm_head chunk must be >= 1 row");
  lm_head_chunk_chosen_ = true;
  if (rows != lm_head_chunk_) {
    lm_head_chunk_ = rows;
    acts_.reset();
    acts_tokens_ = 0;
  }
}

void GPT::set_recompute_mlp(bool on) {
  if (on != recompute_mlp_) {
    recompute_mlp_ = on;
    acts_.reset();
    acts_tokens_ = 0;
  }
}

void GPT::zero_grad() { std::memset(grad_data(), 0, num_params_ * sizeof(float)); }

void GPT::init_weights(uint64_t seed) {
  const double C = static_cast<double>(cfg_.n_embd);
  const double s = std::sqrt(3.0) / std::sqrt(C);
  const int64_t L = cfg_.n_layer;
  float* P = param_data();
  std::memset(P, 0, num_params_ * sizeof(float));
  // Per-parameter generators seeded from (seed, index): deterministic and parallel over tensors.
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t pi = 0; pi < params_.size(); ++pi) {
    const ParamInfo& p = params_[pi];
    float* w = P + p.offset;
    Rng rng(seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL * (pi + 1));
    const std::string& n = p.name;
    auto ends_with = [&](const char* suf) {
      const size_t ls = std::strlen(suf);
      return n.size() >= ls && n.compare(n.size() - ls, ls, suf) == 0;
    };
    auto normal = [&](double std) {
      for (size_t j = 0; j < p.numel; ++j) w[j] = static_cast<float>(std * rng.normal());
    };
    auto uniform = [&](double lo, double hi) {
      for (size_t j = 0; j < p.numel; ++j) w[j] = static_cast<float>(rng.uniform(lo, hi));
    };
    if (n == "transformer.wte.weight") {
      normal(0.8);
    } else if (n == "lm_head.weight") {
      normal(0.001);
    } else if (ends_with("attn.c_q.weight") || ends_with("attn.c_k.weight") || ends_with("attn.c_v.weight")) {
      uniform(-s, s);
    } else if (ends_with("mlp.c_fc.weight")) {
      uniform(-0.4 * s, 0.4 * s);
    } else if (ends_with("attn.ve_gate.weight") || n == "smear_gate.weight") {
      uniform(0.0, 0.02);
    } else if (n.rfind("value_embeds.", 0) == 0) {
      uniform(-s, s);
    } else if (n == "resid_lambdas") {
      for (int64_t i = 0; i < L; ++i)
        w[i] = static_cast<float>(1.15 - 0.10 * static_cast<double>(i) / std::max<int64_t>(L - 1, 1));
    } else if (n == "x0_lambdas") {
      for (int64_t i = 0; i < L; ++i)
        w[i] = static_cast<float>(0.20 - 0.15 * static_cast<double>(i) / std::max<int64_t>(L - 1, 1));
    } else if (n == "backout_lambda") {
      w[0] = 0.2f;
    }
    // attn.c_proj, mlp.c_proj, smear_lambda: zeros (already cleared)
  }
}

void GPT::ensure_acts(int64_t N) {
  if (acts_ && N <= acts_tokens_) return;
  const int64_t L = cfg_.n_layer, C = cfg_.n_embd, H = cfg_.n_head, Hkv = cfg_.n_kv_head;
  const int64_t D = cfg_.head_dim(), V = cfg_.vocab_size;
  const int64_t QKV = (H + 2 * Hkv) * D;
  // Two passes over the same carving code: measure, then allocate.
  auto acts = std::make_unique<Acts>();
  size_t total = 0;
  Arena* arena = nullptr;
  auto take = [&](int64_t n) -> float* {
    if (!arena) {
      total += Arena::round_up(static_cast<size_t>(n) * sizeof(float));
      return nullptr;
    }
    return arena->alloc_f32(static_cast<size_t>(n));
  };
  auto carve = [&]() {
    acts->layers.assign(static_cast<size_t>(L), LayerActs{});
    acts->hs.assign(static_cast<size_t>(L + 1), nullptr);
    for (auto& h : acts->hs) h = take(N * C);
    for (int64_t i = 0; i < L; ++i) {
      LayerActs& la = acts->layers[i];
      la.rstd1 = take(N);
      la.q = take(N * H * D);
      la.k = take(N * Hkv * D);
      la.v = take(N * Hkv * D);
      la.rstd_q = take(N * H);
      la.rstd_k = take(N * Hkv);
      la.gamma = ve_param_[i] >= 0 ? take(N * Hkv) : nullptr;
      la.att = take(N * H * D);
      la.lse = take(N * H);
      la.n2 = take(N * C);
      la.rstd2 = take(N);
      la.f = recompute_mlp_ && i > 0 ? acts->layers[0].f : take(N * 4 * C);  // shared when recomputed
    }
    acts->e_norm = take(N * C);
    acts->rstd_e = take(N);
    acts->sig = take(N);
    acts->n_f = take(N * C);
    acts->rstd_f = take(N);
    acts->hin = take(N * C);
    acts->qkv = take(N * QKV);
    acts->n1 = take(N * C);
    acts->a4 = take(N * 4 * C);
    acts->b4 = acts->a4;
    acts->dh = take(N * C);
    acts->dx0 = take(N * C);
    acts->dhf = take(N * C);
    acts->dC = take(N * C);
    acts->datt = take(N * H * D);
    acts->dq = take(N * H * D);
    acts->dk = take(N * Hkv * D);
    acts->dv = take(N * Hkv * D);
    acts->dz = take(N * Hkv);
    acts->logits = take(lm_head_scratch_floats(lm_head_chunk_, N, C, V));
    acts->dlm_t = take(C * V);
    acts->dw_t = take(std::max(QKV, 4 * C) * C);
    if (dtype_ == ComputeDtype::BFloat16) {
      auto take_bf16 = [&](int64_t n) { return reinterpret_cast<uint16_t*>(take((n + 1) / 2)); };
      acts->xb = take_bf16(N * std::max({C, H * D, 4 * C}));
      acts->gb = take_bf16(N * std::max({C, QKV, 4 * C}));
      acts->lm.scratch = take_bf16(lm_head_bf16_scratch(lm_head_chunk_, N, C, V));
    }
  };
  carve();
  acts_.reset();
  arena_ = Arena();  // release the old arena before allocating the new one
  arena_ = Arena(total);
  arena = &arena_;
  carve();
  acts_ = std::move(acts);
  acts_tokens_ = N;
}

ComputeDtype parse_compute_dtype(const std::string& name, const std::string& flag) {
  if (name == "float32") return ComputeDtype::Float32;
  if (name == "bfloat16") return ComputeDtype::BFloat16;
  if (name == "float16")
    fail(flag,
         " float16 is not supported on CPU (it needs loss scaling, and CPUs run bf16 natively): use bfloat16 "
         "or float32");
  fail(flag, " must be float32 or bfloat16 (got '", name, "')");
}

const char* compute_dtype_name(ComputeDtype d) { return d == ComputeDtype::BFloat16 ? "bfloat16" : "float32"; }

void GPT::set_compute_dtype(ComputeDtype d) {
  if (d == dtype_) return;
  if (d == ComputeDtype::BFloat16) {
    require_native_bf16("--dtype bfloat16");
    const size_t n = bf16_ranges_.back().dst + bf16_ranges_.back().numel;
    if (params_bf16_.bytes() == 0) params_bf16_ = AlignedBuffer(n * sizeof(uint16_t));
  } else {
    params_bf16_ = AlignedBuffer();
  }
  dtype_ = d;
  if (!lm_head_chunk_chosen_) lm_head_chunk_ = d == ComputeDtype::BFloat16 ? kLmHeadChunkBf16 : kLmHeadChunkF32;
  bf16_stale_ = true;
  acts_.reset();  // the activation arena is carved again, with (or without) the bf16 operands
  arena_ = Arena();
  acts_tokens_ = 0;
}

void GPT::refresh_bf16_weights() {
  if (dtype_ != ComputeDtype::BFloat16 || !bf16_stale_) return;
  auto* dst = static_cast<uint16_t*>(params_bf16_.data());
  const float* src = params_buf_.f32();
  for (const Bf16Range& r : bf16_ranges_) to_bf16(src + r.src, dst + r.dst, static_cast<int64_t>(r.numel));
  bf16_stale_ = false;
}

const uint16_t* GPT::wbf16(const float* W) const {
  const auto off = static_cast<size_t>(W - params_buf_.f32());
  // the last range starting at or before off (c_q, c_k, c_v are adjacent in both buffers, so the
  // fused qkv weight is read through c_q's range)
  auto it = std::upper_bound(bf16_ranges_.begin(), bf16_ranges_.end(), off,
                             [](size_t o, const Bf16Range& r) { return o < r.src; });
  NC_CHECK(it != bf16_ranges_.begin() && off < std::prev(it)->src + std::prev(it)->numel,
           "a bf16 product was asked for a weight that has no bf16 copy (offset ", off, ")");
  --it;
  return static_cast<const uint16_t*>(params_bf16_.data()) + it->dst + (off - it->src);
}

const LmHeadBf16* GPT::lm_head_bf16() {
  if (dtype_ != ComputeDtype::BFloat16) return nullptr;
  acts_->lm.W = wbf16(params_buf_.f32() + params_[lm_head_].offset);
  return &acts_->lm;
}

void GPT::lin_fwd(const float* x, const float* W, float* y, int64_t M, int64_t K, int64_t N, float beta) {
  if (dtype_ == ComputeDtype::Float32) {
    linear_fwd(x, W, y, M, K, N, beta);
    return;
  }
  to_bf16(x, acts_->xb, M * K);
  linear_fwd_bf16(acts_->xb, wbf16(W), y, M, K, N, beta);
}

void GPT::lin_bwd(const float* dy, const float* x, const float* W, float* dW, float* dx, int64_t M, int64_t K,
                  int64_t N) {
  if (dtype_ == ComputeDtype::Float32) {
    linear_bwd_w_acc(dy, x, dW, M, K, N, acts_->dw_t);
    linear_bwd_x(dy, W, dx, M, K, N);
    return;
  }
  to_bf16(dy, acts_->gb, M * N);
  to_bf16(x, acts_->xb, M * K);  // before dx is written: dx may share x's memory (b4 and a4)
  linear_bwd_w_bf16(acts_->gb, acts_->xb, dW, M, K, N);
  linear_bwd_x_bf16(acts_->gb, wbf16(W), dx, M, K, N);
}

void GPT::check_inputs(const int32_t* idx, const int32_t* targets, int B, int T) const {
  if (B < 1 || T < 1) fail("batch size and sequence length must be >= 1 (got B=", B, ", T=", T, ")");
  if (static_cast<int64_t>(T) > 10 * cfg_.sequence_len)
    fail("sequence length T=", T, " exceeds the rotary table (10 x sequence_len = ", 10 * cfg_.sequence_len, ")");
  const int64_t N = static_cast<int64_t>(B) * T, V = cfg_.vocab_size;
  for (int64_t n = 0; n < N; ++n)
    if (idx[n] < 0 || idx[n] >= V)
      fail("token id ", idx[n], " at position ", n, " is outside the vocabulary [0, ", V,
           "); the data and the model's vocab_size disagree");
  if (targets)
    for (int64_t n = 0; n < N; ++n)
      if (targets[n] < -1 || targets[n] >= V)
        fail("target ", targets[n], " at position ", n, " is outside [0, ", V, ") and is not the ignore index -1");
}

void GPT::forward_trunk(const int32_t* idx, int B, int T, KVCache* cache) {
  const int64_t L = cfg_.n_layer, C = cfg_.n_embd, H = cfg_.n_head, Hkv = cfg_.n_kv_head;
  const int64_t D = cfg_.head_dim();
  const int64_t N = static_cast<int64_t>(B) * T;
  const int64_t QKV = (H + 2 * Hkv) * D;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const int pos0 = cache ? cache->pos_ : 0;
  Acts& A = *acts_;
  float* P = params_buf_.f32();
  const float* cosp = rope_cos_.f32();
  const float* sinp = rope_sin_.f32();
  float* x0 = A.hs[0];
  refresh_bf16_weights();

  // 1. token embedding + rmsnorm
  {
    Prof ps(Op::NormRotary);
    embedding_forward(idx, P + params_[wte_].offset, A.e_norm, N, C);
    rmsnorm_forward(A.e_norm, A.e_norm, A.rstd_e, N, C, kRmsNormEps);
    // 2. smear (previous-token mixing)
    const float* smear_w = P + params_[smear_gate_].offset;
    const float smear_lambda = P[params_[kSmearLambda].offset];
    if (cache && T == 1) {
      if (cache->has_prev_)
        smear_step(A.e_norm, cache->prev_.f32(), smear_w, smear_lambda, x0, B, C);
      else
        std::memcpy(x0, A.e_norm, sizeof(float) * N * C);
    } else {
      smear_forward(A.e_norm, smear_w, smear_lambda, x0, A.sig, B, T, C);
    }
  }
  if (cache) {  // the last position's pre-smear embedding becomes the new previous embedding
    for (int b = 0; b < B; ++b)
      std::memcpy(cache->prev_.f32() + b * C, A.e_norm + (static_cast<int64_t>(b) * T + T - 1) * C, sizeof(float) * C);
    cache->has_prev_ = true;
  }
  // 3-4. blocks
  const float* resid = P + params_[kResid].offset;
  const float* x0l = P + params_[kX0].offset;
  for (int64_t i = 0; i < L; ++i) {
    LayerActs& la = A.layers[i];
    const LayerParams lp = layer_params(static_cast<int>(i), P);
    float* h_out = A.hs[i + 1];
    {
      Prof ps(Op::Elementwise);
      lambda_mix_forward(A.hs[i], x0, resid[i], x0l[i], A.hin, N * C);
    }
    {
      Prof ps(Op::NormRotary);
      rmsnorm_forward(A.hin, A.n1, la.rstd1, N, C, kRmsNormEps);
    }
    {
      Prof ps(Op::GemmQKV);
      lin_fwd(A.n1, lp.qkv, A.qkv, N, C, QKV);
    }
    {
      Prof ps(Op::NormRotary);
      rope_qknorm_forward(A.qkv, QKV, la.q, la.rstd_q, cosp, sinp, B, T, H, D, pos0, kRmsNormEps, kQkScale);
      rope_qknorm_forward(A.qkv + H * D, QKV, la.k, la.rstd_k, cosp, sinp, B, T, Hkv, D, pos0, kRmsNormEps, kQkScale);
      ve_gate_forward(A.n1, C, lp.ve_gate, lp.ve, idx, A.qkv + (H + Hkv) * D, QKV, la.v, la.gamma, N, Hkv, D);
    }
    if (cache) {
      const int64_t row = Hkv * D;
      float* kc = cache->k(static_cast<int>(i));
      float* vc = cache->v(static_cast<int>(i));
      for (int b = 0; b < B; ++b) {
        const size_t dst = (static_cast<size_t>(b) * cache->t_max_ + pos0) * row;
        const size_t src = static_cast<size_t>(b) * T * row;
        std::memcpy(kc + dst, la.k + src, sizeof(float) * T * row);
        std::memcpy(vc + dst, la.v + src, sizeof(float) * T * row);
      }
      attention_forward_cached(la.q, kc, vc, la.att, B, T, pos0, cache->t_max_, static_cast<int>(H),
                               static_cast<int>(Hkv), static_cast<int>(D), windows_[i], scale);
    } else {
      Prof ps(Op::Attention);
      attention_forward(la.q, la.k, la.v, la.att, la.lse, B, T, static_cast<int>(H), static_cast<int>(Hkv),
                        static_cast<int>(D), windows_[i], scale);
    }
    // h_mid = h_in + att * Wproj^T ; h_out = h_mid + relu(n2 Wfc^T)^2 Wmp^T
    {
      Prof ps(Op::Elementwise);
      std::memcpy(h_out, A.hin, sizeof(float) * N * C);
    }
    {
      Prof ps(Op::GemmAttnProj);
      lin_fwd(la.att, lp.proj, h_out, N, H * D, C, 1.f);
    }
    {
      Prof ps(Op::NormRotary);
      rmsnorm_forward(h_out, la.n2, la.rstd2, N, C, kRmsNormEps);
    }
    {
      Prof ps(Op::GemmMlpFc);
      lin_fwd(la.n2, lp.fc, la.f, N, C, 4 * C);
    }
    {
      Prof ps(Op::Elementwise);
      relu2_forward(la.f, A.a4, N * 4 * C);
    }
    {
      Prof ps(Op::GemmMlpProj);
      lin_fwd(A.a4, lp.mlp_proj, h_out, N, 4 * C, C, 1.f);
    }
  }
  if (cache) cache->pos_ += T;
  // 5. backout: h_f = h - beta * (output of block floor(L/2)); 6. final norm
  const float beta = P[params_[kBackout].offset];
  {
    Prof ps(Op::Elementwise);
    add_scaled(A.hs[L], -beta, A.hs[L / 2 + 1], A.hin, N * C);
  }
  Prof ps(Op::NormRotary);
  rmsnorm_forward(A.hin, A.n_f, A.rstd_f, N, C, kRmsNormEps);
}

void GPT::backward_trunk(const int32_t* idx, int B, int T, const std::function<void(size_t)>& grad_ready) {
  const int64_t L = cfg_.n_layer, C = cfg_.n_embd, H = cfg_.n_head, Hkv = cfg_.n_kv_head;
  const int64_t D = cfg_.head_dim();
  const int64_t N = static_cast<int64_t>(B) * T;
  const int64_t NC = N * C;
  const int64_t QKV = (H + 2 * Hkv) * D;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  Acts& A = *acts_;
  float* P = params_buf_.f32();
  float* G = grad_data();
  const float* cosp = rope_cos_.f32();
  const float* sinp = rope_sin_.f32();
  const int64_t bl = L / 2;  // backout layer

  // final norm backward: dC holds the gradient at n_f
  {
    Prof ps(Op::NormRotary);
    rmsnorm_backward(A.n_f, A.rstd_f, A.dC, A.dhf, N, C);
  }
  const float beta = P[params_[kBackout].offset];
  {
    Prof ps(Op::Elementwise);
    G[params_[kBackout].offset] += static_cast<float>(-dot(A.dhf, A.hs[bl + 1], NC));
    std::memcpy(A.dh, A.dhf, sizeof(float) * NC);
    std::memset(A.dx0, 0, sizeof(float) * NC);
  }
  const float* resid = P + params_[kResid].offset;
  const float* x0l = P + params_[kX0].offset;
  float* g_resid = G + params_[kResid].offset;
  float* g_x0l = G + params_[kX0].offset;

  for (int64_t i = L - 1; i >= 0; --i) {
    LayerActs& la = A.layers[i];
    const LayerParams lp = layer_params(static_cast<int>(i), P);
    const LayerParams lg = layer_params(static_cast<int>(i), G);
    if (recompute_mlp_) {  // the c_fc output was overwritten by later layers: recompute it
      Prof ps(Op::GemmMlpFc);
      lin_fwd(la.n2, lp.fc, la.f, N, C, 4 * C);
    }
    {
      Prof ps(Op::Elementwise);
      if (i == bl) axpy(-beta, A.dhf, A.dh, NC);  // backout path into this block's output
      // MLP: h_out = h_mid + a Wmp^T, a = relu(f)^2, f = n2 Wfc^T
      relu2_forward(la.f, A.a4, N * 4 * C);
    }
    {
      Prof ps(Op::GemmMlpProj);
      lin_bwd(A.dh, A.a4, lp.mlp_proj, lg.mlp_proj, A.b4, N, 4 * C, C);
    }
    {
      Prof ps(Op::Elementwise);
      relu2_backward(la.f, A.b4, A.b4, N * 4 * C);
    }
    {
      Prof ps(Op::GemmMlpFc);
      lin_bwd(A.b4, la.n2, lp.fc, lg.fc, A.dC, N, C, 4 * C);
    }
    {
      Prof ps(Op::NormRotary);
      rmsnorm_backward(la.n2, la.rstd2, A.dC, A.dh, N, C, 1.f, true);  // dh is now d h_mid
    }
    // attention: h_mid = h_in + att Wproj^T
    {
      Prof ps(Op::GemmAttnProj);
      lin_bwd(A.dh, la.att, lp.proj, lg.proj, A.datt, N, H * D, C);
    }
    {
      Prof ps(Op::Attention);
      attention_backward(la.q, la.k, la.v, la.att, la.lse, A.datt, A.dq, A.dk, A.dv, B, T, static_cast<int>(H),
                         static_cast<int>(Hkv), static_cast<int>(D), windows_[i], scale);
    }
    {
      Prof ps(Op::NormRotary);
      rope_qknorm_backward(la.q, la.rstd_q, A.dq, A.qkv, QKV, cosp, sinp, B, T, H, D, 0, kQkScale);
      rope_qknorm_backward(la.k, la.rstd_k, A.dk, A.qkv + H * D, QKV, cosp, sinp, B, T, Hkv, D, 0, kQkScale);
    }
    {
      Prof ps(Op::Elementwise);
      const int64_t row = Hkv * D;
      float* dst = A.qkv + (H + Hkv) * D;
#pragma omp parallel for schedule(guided) if (N * row > 65536)
      for (int64_t n = 0; n < N; ++n) std::memcpy(dst + n * QKV, A.dv + n * row, sizeof(float) * row);
    }
    {
      // n1 is not kept per layer: recompute it with the forward's code from the same inputs
      // (bit-identical), saving (L-1) (N, C) buffers of activation memory.
      Prof ps(Op::NormRotary);
      lambda_mix_forward(A.hs[i], A.hs[0], resid[i], x0l[i], A.hin, NC);
      rmsnorm_forward(A.hin, A.n1, la.rstd1, N, C, kRmsNormEps);
    }
    {
      Prof ps(Op::GemmQKV);
      lin_bwd(A.qkv, A.n1, lp.qkv, lg.qkv, A.dC, N, C, QKV);
    }
    {
      Prof ps(Op::NormRotary);
      if (lp.ve)
        ve_gate_backward(A.n1, C, lp.ve_gate, lp.ve, idx, la.gamma, A.dv, A.dC, lg.ve_gate, lg.ve, A.dz, N, Hkv, D);
      rmsnorm_backward(A.n1, la.rstd1, A.dC, A.dh, N, C, 1.f, true);  // dh is now d h_in
    }
    // h_in = r h + a x0
    Prof ps(Op::Elementwise);
    double dr = 0, da = 0;
    lambda_mix_backward(A.hs[i], A.hs[0], resid[i], x0l[i], A.dh, A.dx0, &dr, &da, NC);
    g_resid[i] += static_cast<float>(dr);
    g_x0l[i] += static_cast<float>(da);
    if (grad_ready) {  // this block's matrices and its value embedding are final
      const size_t first = layer_first_param_[i];
      const size_t next = i + 1 < L ? layer_first_param_[i + 1] : static_cast<size_t>(lm_head_);
      for (size_t k = first; k < next; ++k) grad_ready(k);
      if (ve_param_[i] >= 0) grad_ready(static_cast<size_t>(ve_param_[i]));
    }
  }
  // x0 = s = h_0: total gradient at s is the trunk path plus every layer's x0 path
  {
    Prof ps(Op::Elementwise);
    axpy(1.f, A.dh, A.dx0, NC);
  }
  Prof ps(Op::NormRotary);
  smear_backward(A.e_norm, P + params_[smear_gate_].offset, P[params_[kSmearLambda].offset], A.sig, A.dx0, A.dC,
                 G + params_[smear_gate_].offset, G + params_[kSmearLambda].offset, B, T, C);
  rmsnorm_backward(A.e_norm, A.rstd_e, A.dC, A.dC, N, C);
  embedding_backward(idx, A.dC, G + params_[wte_].offset, N, C);
  if (grad_ready)
    for (size_t k : {kResid, kX0, kSmearLambda, kBackout, wte_, smear_gate_}) grad_ready(k);
}

std::vector<size_t> GPT::grad_ready_order() const {
  // mirrors forward_backward and backward_trunk: lm_head, the blocks from the last down, the rest
  std::vector<size_t> order{static_cast<size_t>(lm_head_)};
  const size_t L = layer_first_param_.size();
  for (size_t i = L; i-- > 0;) {
    const size_t next = i + 1 < L ? layer_first_param_[i + 1] : static_cast<size_t>(lm_head_);
    for (size_t k = layer_first_param_[i]; k < next; ++k) order.push_back(k);
    if (ve_param_[i] >= 0) order.push_back(static_cast<size_t>(ve_param_[i]));
  }
  for (size_t k : {kResid, kX0, kSmearLambda, kBackout, wte_, smear_gate_}) order.push_back(k);
  return order;
}

float GPT::forward_backward(const int32_t* idx, const int32_t* targets, int B, int T, float loss_scale,
                            const std::function<void(size_t)>& grad_ready) {
  NC_CHECK(targets != nullptr, "forward_backward needs targets");
  check_inputs(idx, targets, B, T);
  const int64_t N = static_cast<int64_t>(B) * T;
  int64_t n_valid = 0;
  for (int64_t n = 0; n < N; ++n) n_valid += targets[n] >= 0;
  if (n_valid == 0) {
    if (grad_ready)
      for (size_t k : grad_ready_order()) grad_ready(k);
    return 0.f;
  }
  ensure_acts(N);
  forward_trunk(idx, B, T, nullptr);
  const float grad_scale = loss_scale / static_cast<float>(n_valid);
  double loss_sum = 0;
  {
    Prof ps(Op::LmHeadLoss);
    loss_sum = lm_head_softcap_ce(acts_->n_f, params_buf_.f32() + params_[lm_head_].offset, targets, N, cfg_.n_embd,
                                  cfg_.vocab_size, kLogitSoftcap, grad_scale, acts_->logits, lm_head_chunk_, nullptr,
                                  acts_->dC, grad_data() + params_[lm_head_].offset, acts_->dlm_t, lm_head_bf16());
  }
  if (grad_ready) grad_ready(lm_head_);
  backward_trunk(idx, B, T, grad_ready);
  return static_cast<float>(loss_sum / static_cast<double>(n_valid));
}

float GPT::forward_loss(const int32_t* idx, const int32_t* targets, int B, int T, float* per_token_loss) {
  NC_CHECK(targets != nullptr, "forward_loss needs targets");
  check_inputs(idx, targets, B, T);
  const int64_t N = static_cast<int64_t>(B) * T;
  ensure_acts(N);
  forward_trunk(idx, B, T, nullptr);
  int64_t n_valid = 0;
  for (int64_t n = 0; n < N; ++n) n_valid += targets[n] >= 0;
  const double loss_sum = lm_head_softcap_ce(acts_->n_f, params_buf_.f32() + params_[lm_head_].offset, targets, N,
                                             cfg_.n_embd, cfg_.vocab_size, kLogitSoftcap, 0.f, acts_->logits,
                                             lm_head_chunk_, per_token_loss, nullptr, nullptr, nullptr, lm_head_bf16());
  return n_valid ? static_cast<float>(loss_sum / static_cast<double>(n_valid)) : 0.f;
}

void GPT::forward_logits(const int32_t* idx, int B, int T, float* logits) {
  check_inputs(idx, nullptr, B, T);
  const int64_t N = static_cast<int64_t>(B) * T;
  ensure_acts(N);
  forward_trunk(idx, B, T, nullptr);
  lin_fwd(acts_->n_f, params_buf_.f32() + params_[lm_head_].offset, logits, N, cfg_.n_embd, cfg_.vocab_size);
  softcap_inplace(logits, N * cfg_.vocab_size, kLogitSoftcap);
}

void GPT::forward_logits_at(const int32_t* idx, int B, int T, const int32_t* positions, float* logits) {
  check_inputs(idx, nullptr, B, T);
  for (int b = 0; b < B; ++b)
    if (positions[b] < 0 || positions[b] >= T)
      fail("forward_logits_at: position ", positions[b], " of row ", b, " is outside [0, ", T, ")");
  const int64_t N = static_cast<int64_t>(B) * T, C = cfg_.n_embd, V = cfg_.vocab_size;
  ensure_acts(N);
  forward_trunk(idx, B, T, nullptr);
  const float* W = param_data() + params_[lm_head_].offset;
  for (int b = 0; b < B; ++b)
    sgemm(false, true, 1, V, C, 1.f, acts_->n_f + (static_cast<int64_t>(b) * T + positions[b]) * C, C, W, C, 0.f,
          logits + static_cast<int64_t>(b) * V, V);
  softcap_inplace(logits, static_cast<int64_t>(B) * V, kLogitSoftcap);
}

void GPT::forward_cached(const int32_t* idx, int B, int T, KVCache& cache, float* logits, bool all_positions) {
  check_inputs(idx, nullptr, B, T);
  if (!(cache.cfg_ == cfg_)) fail("KV cache was made for a different model config");
  if (B != cache.B_) fail("KV cache batch is ", cache.B_, " but the input has B=", B);
  if (cache.pos_ + T > cache.t_max_)
    fail("KV cache overflow: position ", cache.pos_, " + ", T, " new tokens > capacity ", cache.t_max_,
         " (start a new sequence or make a longer cache)");
  if (static_cast<int64_t>(cache.pos_) + T > 10 * cfg_.sequence_len)
    fail("position ", cache.pos_ + T, " exceeds the rotary table (10 x sequence_len = ", 10 * cfg_.sequence_len, ")");
  const int64_t N = static_cast<int64_t>(B) * T, C = cfg_.n_embd, V = cfg_.vocab_size;
  ensure_acts(N);
  forward_trunk(idx, B, T, &cache);
  if (!logits) return;
  const float* W = params_buf_.f32() + params_[lm_head_].offset;
  if (all_positions) {
    lin_fwd(acts_->n_f, W, logits, N, C, V);
    softcap_inplace(logits, N * V, kLogitSoftcap);
  } else {
    // last position of each row: rows b*T + T-1 of n_f (leading dimension T*C)
    if (dtype_ == ComputeDtype::BFloat16) {
      to_bf16_rows(acts_->n_f + (T - 1) * C, T * C, acts_->xb, B, C);
      linear_fwd_bf16(acts_->xb, wbf16(W), logits, B, C, V);
    } else {
      sgemm(false, true, B, V, C, 1.f, acts_->n_f + (T - 1) * C, T * C, W, C, 0.f, logits, V);
    }
    softcap_inplace(logits, static_cast<int64_t>(B) * V, kLogitSoftcap);
  }
}

int64_t GPT::matmul_params(const ModelConfig& cfg) {
  int64_t n = 0;
  for (const auto& p : param_table(cfg)) {
    const bool linear =
        p.name.rfind("transformer.h.", 0) == 0 || p.name == "lm_head.weight" || p.name == "smear_gate.weight";
    if (linear) n += static_cast<int64_t>(p.numel);
  }
  return n;
}

int64_t GPT::flops_per_token(const ModelConfig& cfg) {
  const int64_t H = cfg.n_head, D = cfg.head_dim(), T = cfg.sequence_len;
  int64_t attn = 0;
  for (int w : cfg.window_sizes()) attn += 12 * H * D * std::min<int64_t>(w, T);
  return 6 * matmul_params(cfg) + attn;
}

std::array<int64_t, prof::kNumOps> GPT::flops_per_token_by_family(const ModelConfig& cfg) {
  std::array<int64_t, prof::kNumOps> f{};
  auto add = [&f](Op op, int64_t flops) { f[static_cast<size_t>(op)] += flops; };
  auto ends_with = [](const std::string& s, const char* tail) { return s.ends_with(tail); };
  for (const auto& p : param_table(cfg)) {
    const int64_t six_n = 6 * static_cast<int64_t>(p.numel);
    if (p.name == "lm_head.weight")
      add(Op::LmHeadLoss, six_n);
    else if (p.name == "smear_gate.weight" || ends_with(p.name, ".attn.ve_gate.weight"))
      add(Op::NormRotary, six_n);
    else if (ends_with(p.name, ".attn.c_q.weight") || ends_with(p.name, ".attn.c_k.weight") ||
             ends_with(p.name, ".attn.c_v.weight"))
      add(Op::GemmQKV, six_n);
    else if (ends_with(p.name, ".attn.c_proj.weight"))
      add(Op::GemmAttnProj, six_n);
    else if (ends_with(p.name, ".mlp.c_fc.weight"))
      add(Op::GemmMlpFc, six_n);
    else if (ends_with(p.name, ".mlp.c_proj.weight"))
      add(Op::GemmMlpProj, six_n);
  }
  const int64_t H = cfg.n_head, D = cfg.head_dim(), T = cfg.sequence_len;
  for (int w : cfg.window_sizes()) add(Op::Attention, 12 * H * D * std::min<int64_t>(w, T));
  int64_t sum = 0;
  for (int64_t v : f) sum += v;
  NC_CHECK(sum == flops_per_token(cfg), "internal: FLOPs per family do not add up to estimate_flops");
  return f;
}

ScalingParams GPT::scaling_params(const ModelConfig& cfg) {
  ScalingParams m;
  for (const auto& p : param_table(cfg)) {
    const auto n = static_cast<int64_t>(p.numel);
    if (p.name == "transformer.wte.weight")
      m.wte += n;
    else if (p.name.rfind("value_embeds.", 0) == 0)
      m.value_embeds += n;
    else if (p.name == "lm_head.weight")
      m.lm_head += n;
    else if (p.name.rfind("transformer.h.", 0) == 0)
      m.transformer_matrices += n;
    else
      m.scalars += n;
    m.total += n;
  }
  return m;
}

int64_t GPT::num_matmul_params() const { return matmul_params(cfg_); }
int64_t GPT::num_flops_per_token() const { return flops_per_token(cfg_); }
ScalingParams GPT::num_scaling_params() const { return scaling_params(cfg_); }

KVCache::KVCache(const ModelConfig& cfg, int B, int t_max) : cfg_(cfg), B_(B), t_max_(t_max) {
  if (B < 1 || t_max < 1) fail("KV cache needs batch >= 1 and length >= 1 (got ", B, ", ", t_max, ")");
  layer_stride_ = static_cast<size_t>(B) * t_max * cfg.n_kv_head * cfg.head_dim();
  k_ = AlignedBuffer(layer_stride_ * cfg.n_layer * sizeof(float));
  v_ = AlignedBuffer(layer_stride_ * cfg.n_layer * sizeof(float));
  prev_ = AlignedBuffer(static_cast<size_t>(B) * cfg.n_embd * sizeof(float));
}

void KVCache::prefill_from(const KVCache& other) {
  if (!(other.cfg_ == cfg_)) fail("KV cache prefill: the caches belong to different model configs");
  if (other.B_ != 1 && other.B_ != B_) fail("KV cache prefill: source batch ", other.B_, " must be 1 or ", B_);
  if (other.pos_ > t_max_) fail("KV cache prefill: source holds ", other.pos_, " positions but capacity is ", t_max_);
  const size_t row = static_cast<size_t>(cfg_.n_kv_head * cfg_.head_dim());
  for (int64_t l = 0; l < cfg_.n_layer; ++l)
    for (int b = 0; b < B_; ++b) {
      const int sb = other.B_ == 1 ? 0 : b;
      const size_t src = (static_cast<size_t>(sb) * other.t_max_) * row;
      const size_t dst = (static_cast<size_t>(b) * t_max_) * row;
      std::memcpy(k(static_cast<int>(l)) + dst, other.k(static_cast<int>(l)) + src, sizeof(float) * other.pos_ * row);
      std::memcpy(v(static_cast<int>(l)) + dst, other.v(static_cast<int>(l)) + src, sizeof(float) * other.pos_ * row);
    }
  for (int b = 0; b < B_; ++b)
    std::memcpy(prev_.f32() + b * cfg_.n_embd, other.prev_.f32() + (other.B_ == 1 ? 0 : b) * cfg_.n_embd,
                sizeof(float) * cfg_.n_embd);
  pos_ = other.pos_;
  has_prev_ = other.has_prev_;
}

}  // namespace nanochat
