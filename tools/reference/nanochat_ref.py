"""Dev-time PyTorch reference of nanochat's GPT and MuonAdamW (HEAD 92d63d4).

A restatement of docs/nanochat.md sections 1 (model) and 2 (optimizer) written for
torch 1.13 (Debian's python3-torch), which lacks F.rms_norm and SDPA's enable_gqa: the RMS norm and
the attention (explicit masked softmax, GQA by repeating kv heads) are written out by hand.

Everything is functional and dtype-agnostic: parameters live in an ordered dict keyed by nanochat's
state_dict names, so the same code runs in float64 (the fixtures' "truth") and float32 (to measure
how far a float32 implementation is expected to land from that truth).
Never needed by the product; used by make_fixtures.py to write tests/fixtures/.
"""

import json
import math
import struct
from collections import OrderedDict
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

# F.rms_norm with eps unset uses the machine epsilon of float32 (docs/nanochat.md 1.4). The same constant is
# used in float64 runs so that float64 is the exact-arithmetic image of the float32 model.
RMS_EPS = 2.0 ** -23
SOFTCAP = 15.0
ROTARY_BASE = 100000.0
VE_GATE_CHANNELS = 12
SMEAR_CHANNELS = 24
QK_SCALE = 1.2

POLAR_EXPRESS_COEFFS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


# ------------------------------------------------------------------------------------------------
# Model configuration (docs/nanochat.md 1.1, 1.2, 1.6)

@dataclass
class GPTConfig:
    sequence_len: int = 2048
    vocab_size: int = 32768
    n_layer: int = 12
    n_head: int = 6
    n_kv_head: int = 6
    n_embd: int = 768
    window_pattern: str = "SSSL"

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    @property
    def padded_vocab(self):
        return -(-self.vocab_size // 64) * 64

    def to_json(self):
        return json.dumps(asdict(self), sort_keys=True)


def has_ve(i, n_layer):
    """Layer i carries a value-embedding table and ve_gate (alternating, ending at the last layer)."""
    return i % 2 == (n_layer - 1) % 2


def window_sizes(cfg):
    """Per-layer left window w (query i sees keys i-w .. i). Last layer is always long."""
    long_w = cfg.sequence_len
    quarter = -(-long_w // 4)  # ceil(seq/4)
    short_w = -(-quarter // 128) * 128  # rounded up to a multiple of 128
    pat = cfg.window_pattern.upper()
    assert pat and all(c in "SL" for c in pat), pat
    ws = [short_w if pat[i % len(pat)] == "S" else long_w for i in range(cfg.n_layer)]
    ws[-1] = long_w
    return ws


def param_shapes(cfg):
    """(state_dict key, shape) in nanochat's registration order (docs/nanochat.md 1.2)."""
    C, L, Vp = cfg.n_embd, cfg.n_layer, cfg.padded_vocab
    D, H, Hkv = cfg.head_dim, cfg.n_head, cfg.n_kv_head
    out = [("resid_lambdas", (L,)), ("x0_lambdas", (L,)), ("smear_lambda", (1,)),
           ("backout_lambda", (1,)), ("transformer.wte.weight", (Vp, C))]
    for i in range(L):
        p = f"transformer.h.{i}."
        out += [(p + "attn.c_q.weight", (H * D, C)), (p + "attn.c_k.weight", (Hkv * D, C)),
                (p + "attn.c_v.weight", (Hkv * D, C)), (p + "attn.c_proj.weight", (C, C))]
        if has_ve(i, L):
            out.append((p + "attn.ve_gate.weight", (Hkv, VE_GATE_CHANNELS)))
        out += [(p + "mlp.c_fc.weight", (4 * C, C)), (p + "mlp.c_proj.weight", (C, 4 * C))]
    out += [("lm_head.weight", (Vp, C)), ("smear_gate.weight", (1, SMEAR_CHANNELS))]
    out += [(f"value_embeds.{i}.weight", (Vp, Hkv * D)) for i in range(L) if has_ve(i, L)]
    return out


def init_params(cfg, seed):
    """Random float32 weights with nanochat's shapes but NON-degenerate values (every projection,
    gate and scalar nonzero), so that every gradient is nonzero and gets tested. Not nanochat's init
    (which zeroes c_proj / mlp.c_proj / smear_lambda); the C++ side loads these weights."""
    g = torch.Generator().manual_seed(seed)
    C, L = cfg.n_embd, cfg.n_layer
    s = math.sqrt(3.0 / C)

    def uni(shape, lo, hi):
        return torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo

    def nrm(shape, std):
        return torch.randn(shape, generator=g, dtype=torch.float64) * std

    P = OrderedDict()
    for name, shape in param_shapes(cfg):
        if name == "resid_lambdas":
            t = torch.tensor([1.15 - 0.10 * i / max(L - 1, 1) for i in range(L)], dtype=torch.float64)
            t = t + uni(shape, -0.05, 0.05)
        elif name == "x0_lambdas":
            t = torch.tensor([0.20 - 0.15 * i / max(L - 1, 1) for i in range(L)], dtype=torch.float64)
            t = t + uni(shape, -0.05, 0.05)
        elif name == "smear_lambda":
            t = uni(shape, 0.2, 0.5)
        elif name == "backout_lambda":
            t = uni(shape, 0.1, 0.3)
        elif name == "transformer.wte.weight":
            t = nrm(shape, 0.8)
        elif name == "lm_head.weight":
            t = nrm(shape, 0.5)  # large enough that the softcap is visibly nonlinear
        elif name == "smear_gate.weight":
            t = uni(shape, -0.5, 0.5)
        elif name.endswith("ve_gate.weight"):
            t = uni(shape, -0.4, 0.4)
        elif name.startswith("value_embeds."):
            t = uni(shape, -s, s)
        elif name.endswith("mlp.c_proj.weight"):
            t = uni(shape, -math.sqrt(3.0 / (4 * C)), math.sqrt(3.0 / (4 * C)))
        else:  # c_q, c_k, c_v, attn.c_proj, c_fc
            t = uni(shape, -s, s)
        P[name] = t.to(torch.float32)
    return P


# ------------------------------------------------------------------------------------------------
# Forward pass (docs/nanochat.md 1.3 - 1.6)

def rms_norm(x):
    """y = x * (mean(x^2) + eps)^-1/2 over the last dim, no weight (docs/nanochat.md 1.4)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + RMS_EPS)


def rotary_tables(head_dim, T, dtype):
    """cos, sin of shape (T, D/2). Angles are computed in float32 exactly as nanochat does
    (inv_freq = 1/base^((2j as f32)/D), angle = t*inv_freq in f32), then cos/sin in f32, then cast."""
    ch = torch.arange(0, head_dim, 2, dtype=torch.float32)
    inv_freq = 1.0 / (ROTARY_BASE ** (ch / head_dim))
    t = torch.arange(T, dtype=torch.float32)
    ang = torch.outer(t, inv_freq)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rotary(x, cos, sin):
    """x (B,T,heads,D), half-split, nanochat's sign: out1 = x1 cos + x2 sin, out2 = -x1 sin + x2 cos."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    return torch.cat([x1 * c + x2 * s, -x1 * s + x2 * c], dim=-1)


def attention(P, cfg, i, n1, ve, cos, sin, window, core=None):
    """Attention sub-block of layer i on n1 = rmsnorm(h_in) (B,T,C); returns (B,T,C).
    core: attention_masked (default) or attention_sdpa."""
    core = core or attention_masked
    B, T, C = n1.shape
    H, Hkv, D = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    pre = f"transformer.h.{i}.attn."
    q = (n1 @ P[pre + "c_q.weight"].t()).view(B, T, H, D)
    k = (n1 @ P[pre + "c_k.weight"].t()).view(B, T, Hkv, D)
    v = (n1 @ P[pre + "c_v.weight"].t()).view(B, T, Hkv, D)
    if ve is not None:
        gate = 3.0 * torch.sigmoid(n1[..., :VE_GATE_CHANNELS] @ P[pre + "ve_gate.weight"].t())
        v = v + gate.unsqueeze(-1) * ve.view(B, T, Hkv, D)
    q = rms_norm(apply_rotary(q, cos, sin)) * QK_SCALE
    k = rms_norm(apply_rotary(k, cos, sin)) * QK_SCALE
    y = core(q, k, v, window)  # (B,T,H,D)
    return y.reshape(B, T, H * D) @ P[pre + "c_proj.weight"].t()


def attention_masked(q, k, v, window):
    """Causal sliding-window attention, q (B,T,H,D), k/v (B,T,Hkv,D) -> (B,T,H,D); query i sees
    keys i-window .. i. An explicit masked softmax (torch 1.13 has no SDPA with windows or GQA)."""
    T, H, Hkv, D = q.shape[1], q.shape[2], k.shape[2], q.shape[3]
    rep = H // Hkv  # query head h uses kv head h // rep
    k = k.repeat_interleave(rep, dim=2)
    v = v.repeat_interleave(rep, dim=2)
    q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))  # (B,H,T,D)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    qi = torch.arange(T).view(T, 1)
    kj = torch.arange(T).view(1, T)
    allowed = (kj <= qi) & (kj >= qi - window)
    scores = scores.masked_fill(~allowed, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v  # (B,H,T,D)
    return y.permute(0, 2, 1, 3)


def attention_sdpa(q, k, v, window):
    """Same contract as attention_masked, through F.scaled_dot_product_attention (torch >= 2.5 for
    enable_gqa): what nanochat runs where FlashAttention 3 is unavailable (CPU): is_causal when
    the window covers T, else a boolean mask with (i - j) <= window."""
    T = q.shape[1]
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B,heads,T,D)
    gqa = q.shape[1] != k.shape[1]
    if window >= T:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    else:
        qi = torch.arange(T).view(T, 1)
        kj = torch.arange(T).view(1, T)
        mask = (kj <= qi) & (qi - kj <= window)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    return y.transpose(1, 2)


def mlp(P, i, n2):
    pre = f"transformer.h.{i}.mlp."
    f = n2 @ P[pre + "c_fc.weight"].t()
    return (torch.relu(f) ** 2) @ P[pre + "c_proj.weight"].t()


def forward(P, cfg, idx, targets=None, reduction="mean", core=None):
    """idx, targets (B,T) int64. Returns softcapped logits (B,T,V) if targets is None, else the
    cross-entropy loss (ignore_index -1; 'mean' scalar or 'none' flat (B*T,)).
    core: the attention kernel (attention_masked by default, or attention_sdpa)."""
    B, T = idx.shape
    assert T > 1
    L, V = cfg.n_layer, cfg.vocab_size
    dtype = P["transformer.wte.weight"].dtype
    cos, sin = rotary_tables(cfg.head_dim, T, dtype)
    e = rms_norm(P["transformer.wte.weight"][idx])
    # smear: s_t = e_t + lambda_s * sigmoid(w_s . e_t[:24]) * e_{t-1} for t >= 1
    g = P["smear_lambda"] * torch.sigmoid(e[:, 1:, :SMEAR_CHANNELS] @ P["smear_gate.weight"].t())
    x = torch.cat([e[:, :1], e[:, 1:] + g * e[:, :-1]], dim=1)
    x0 = x
    ws = window_sizes(cfg)
    backout_layer = L // 2
    hb = None
    for i in range(L):
        x = P["resid_lambdas"][i] * x + P["x0_lambdas"][i] * x0
        ve = P[f"value_embeds.{i}.weight"][idx] if has_ve(i, L) else None
        x = x + attention(P, cfg, i, rms_norm(x), ve, cos, sin, ws[i], core)
        x = x + mlp(P, i, rms_norm(x))
        if i == backout_layer:
            hb = x
    x = x - P["backout_lambda"] * hb
    logits = rms_norm(x) @ P["lm_head.weight"].t()
    logits = logits[..., :V]
    z = SOFTCAP * torch.tanh(logits / SOFTCAP)
    if targets is None:
        return z
    return F.cross_entropy(z.reshape(-1, V), targets.reshape(-1), ignore_index=-1,
                           reduction=reduction)


# ------------------------------------------------------------------------------------------------
# Optimizer (docs/nanochat.md 2.1 - 2.3), single process

def adamw_group_of(name):
    """AdamW group index (0..5) of a parameter name, or None for Muon (transformer.h.*)."""
    if name == "lm_head.weight":
        return 0
    if name == "transformer.wte.weight":
        return 1
    if name.startswith("value_embeds."):
        return 2
    if name == "resid_lambdas":
        return 3
    if name == "x0_lambdas":
        return 4
    if name in ("smear_gate.weight", "smear_lambda", "backout_lambda"):
        return 5
    if name.startswith("transformer.h."):
        return None
    raise ValueError(f"parameter {name} belongs to no optimizer group")


def build_groups(names_shapes, model_dim, unembedding_lr, embedding_lr, matrix_lr, scalar_lr,
                 weight_decay):
    """Param groups in nanochat's order (docs/nanochat.md 2.1).

    names_shapes: [(name, shape)] in model order."""
    dm = (model_dim / 768.0) ** -0.5
    adamw = [
        dict(lr=unembedding_lr * dm, betas=(0.8, 0.96), wd=0.01),
        dict(lr=embedding_lr * dm, betas=(0.8, 0.995), wd=0.001),
        dict(lr=embedding_lr * dm * 0.5, betas=(0.8, 0.995), wd=0.01),
        dict(lr=scalar_lr * 0.01, betas=(0.8, 0.95), wd=0.05),
        dict(lr=scalar_lr, betas=(0.96, 0.95), wd=0.0),
        dict(lr=0.2, betas=(0.8, 0.95), wd=0.0),
    ]
    groups = []
    for gi, hp in enumerate(adamw):
        groups.append(dict(kind="adamw", names=[n for n, _ in names_shapes if adamw_group_of(n) == gi],
                           eps=1e-10, **hp))
    muon = [(n, tuple(s)) for n, s in names_shapes if adamw_group_of(n) is None]
    for shape in sorted({s for _, s in muon}):
        groups.append(dict(kind="muon", names=[n for n, s in muon if s == shape], shape=shape,
                           lr=matrix_lr, momentum=0.95, beta2=0.9, ns_steps=5, wd=weight_decay))
    for g in groups:
        g["initial_lr"] = g["lr"]
    return groups


def polar_express(X, steps=5):
    """X (K,m,n), already pre-scaled. Tall (m>n): A = X^T X, X <- aX + X(bA + cA^2); else
    A = X X^T, X <- aX + (bA + cA^2) X."""
    tall = X.shape[-2] > X.shape[-1]
    for a, b, c in POLAR_EXPRESS_COEFFS[:steps]:
        if tall:
            A = X.transpose(-1, -2) @ X
            X = a * X + X @ (b * A + c * (A @ A))
        else:
            A = X @ X.transpose(-1, -2)
            X = a * X + (b * A + c * (A @ A)) @ X
    return X


def muon_update(G, P, M, Vb, mu, lr, wd, beta2, ns_steps=5, compute_dtype=None):
    """One Muon step on stacks G, P, M (K,m,n) and Vb ((K,m,1) if m>=n else (K,1,n)), in place on
    P, M, Vb (docs/nanochat.md 2.3). lr is the group lr (the shape factor is applied here).
    compute_dtype=torch.bfloat16: MuonEq, the pre-scale and Polar Express in bf16, as nanochat's
    muon_step_fused runs them with COMPUTE_DTYPE bf16 (on a GPU)."""
    K, m, n = P.shape
    M += (1 - mu) * (G - M)
    X = G + mu * (M - G)
    if compute_dtype is None:
        # MuonEq row equilibration
        target = X.norm(dim=(-2, -1), keepdim=True) / math.sqrt(m)
        rows = X.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        X = X * (target / rows)
        # pre-scale and Polar Express
        X = X / (X.norm(dim=(-2, -1), keepdim=True) * 1.01 + 1e-6)
        X = polar_express(X, ns_steps)
    else:  # the same steps on X cast to compute_dtype, the norms of MuonEq taken in fp32
        X = X.to(compute_dtype)
        target = X.float().norm(dim=(-2, -1), keepdim=True) / math.sqrt(m)
        rows = X.float().norm(dim=-1, keepdim=True).clamp_min(1e-6)
        X = X * (target / rows).to(X.dtype)
        X = X / (X.norm(dim=(-2, -1), keepdim=True) * 1.01 + 1e-6)
        X = polar_express(X, ns_steps).to(P.dtype)
    # Muon+
    X = X * (math.sqrt(min(m, n)) / X.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-6))
    # NorMuon
    red = -1 if m >= n else -2
    R = X.shape[red]
    vmean = X.pow(2).mean(dim=red, keepdim=True)
    vnorm = (vmean.sum(dim=(-2, -1), keepdim=True) * R).sqrt()
    Vb += (1 - beta2) * (vmean - Vb)
    stepv = Vb.clamp_min(1e-10).rsqrt()
    vnorm_new = (vmean * R * stepv.pow(2)).sum(dim=(-2, -1), keepdim=True).sqrt()
    X = X * (stepv * (vnorm / vnorm_new.clamp_min(1e-10)))
    # cautious weight decay + update
    lr_eff = lr * math.sqrt(max(1.0, m / n))
    mask = ((X * P) >= 0).to(P.dtype)
    P -= lr_eff * X + lr_eff * wd * P * mask
    return X


def adamw_update(p, grad, m, v, lr, wd, b1, b2, bc1, bc2, eps):
    """One AdamW step in place on p, m, v (docs/nanochat.md 2.2); bc1, bc2 = 1 - beta^t. The
    scalars may be Python floats or 0-D tensors."""
    p.mul_(1 - lr * wd)
    m += (1 - b1) * (grad - m)
    v += (1 - b2) * (grad * grad - v)
    p -= (lr / bc1) * m / ((v / bc2).sqrt() + eps)


class MuonAdamW:
    """Single-process MuonAdamW over a dict of named tensors (updated in place)."""

    def __init__(self, params, model_dim, unembedding_lr=0.008, embedding_lr=0.3, matrix_lr=0.02,
                 scalar_lr=0.5, weight_decay=0.28):
        self.params = params
        self.groups = build_groups([(n, tuple(t.shape)) for n, t in params.items()], model_dim,
                                   unembedding_lr, embedding_lr, matrix_lr, scalar_lr, weight_decay)
        self.state = {}
        # If a dict: name -> list of per-step tensors whose near-zero entries make the step
        # discontinuous (Muon: the update g, sign of g*p picks the decay mask; AdamW: the
        # gradient at the first step, whose sign is the whole update). Used to flag fixture
        # elements that a float32 engine cannot be expected to reproduce.
        self.record = None
        # the update kernels; a benchmark may swap in compiled versions of the same functions
        self.adamw_update = adamw_update
        self.muon_update = muon_update
        # torch.bfloat16: Muon's Polar Express in bf16 (muon_update's compute_dtype)
        self.compute_dtype = None

    @torch.no_grad()
    def step(self, grads, lr_multiplier, momentum, weight_decay):
        for g in self.groups:
            g["lr"] = g["initial_lr"] * lr_multiplier
            if g["kind"] == "muon":
                g["momentum"], g["wd"] = momentum, weight_decay
        for g in self.groups:
            if g["kind"] == "adamw":
                for name in g["names"]:
                    self._adamw(name, grads[name], g)
            elif g["names"]:
                self._muon(g, grads)

    def _adamw(self, name, grad, g):
        p = self.params[name]
        st = self.state.setdefault(name, dict(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p)))
        st["step"] += 1
        if self.record is not None and st["step"] == 1:
            self.record.setdefault(name, []).append(grad.clone())
        b1, b2 = g["betas"]
        t = st["step"]
        self.adamw_update(p, grad, st["m"], st["v"], g["lr"], g["wd"], b1, b2, 1 - b1 ** t,
                          1 - b2 ** t, g["eps"])

    def _muon(self, g, grads):
        names = g["names"]
        K = len(names)
        m, n = g["shape"]
        P = torch.stack([self.params[nm] for nm in names])
        G = torch.stack([grads[nm] for nm in names])
        st = self.state.setdefault(names[0], dict(
            M=torch.zeros_like(P),
            V=torch.zeros((K, m, 1) if m >= n else (K, 1, n), dtype=P.dtype)))
        X = self.muon_update(G, P, st["M"], st["V"], g["momentum"], g["lr"], g["wd"], g["beta2"],
                             g["ns_steps"], compute_dtype=self.compute_dtype)
        for k, nm in enumerate(names):
            self.params[nm].copy_(P[k])
            if self.record is not None:
                self.record.setdefault(nm, []).append(X[k].clone())


# ------------------------------------------------------------------------------------------------
# safetensors I/O (8-byte LE header length, JSON header, raw little-endian bytes)

_DTYPES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64",
           np.dtype("int32"): "I32", np.dtype("uint8"): "U8"}
_NP = {v: k for k, v in _DTYPES.items()}


def save_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, np.ndarray) written in that order; metadata: dict str -> str."""
    header, blobs, off = OrderedDict(), [], 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        dt = _DTYPES[arr.dtype]
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """Returns (OrderedDict name -> np.ndarray, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=OrderedDict)
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = OrderedDict()
    for name, h in header.items():
        b, e = h["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype=_NP[h["dtype"]].newbyteorder("<")) \
            .reshape(h["shape"]).copy()
    return out, meta
