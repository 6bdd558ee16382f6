"""Writes the PyTorch-reference fixtures into tests/fixtures/ (see README.md next to this file).

    /usr/bin/python3 tools/reference/make_fixtures.py [--out tests/fixtures] [--check]

Truth is computed in float64 from float32 weights and cast to float32 when written. --check also
reruns everything in float32 (a stand-in for the C++ float32 engine) and prints, per tensor family,
max|f32 - f64| / max|f64|, so the tolerances used by the C++ tests can be judged. Deterministic:
fixed seeds, one thread, no wall-clock or environment input.
"""

import argparse
import json
import os
import sys
from collections import OrderedDict

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanochat_ref as ref  # noqa: E402

# nanochat's base_train lrs (before batch scaling), the Muon wd and momentum used for the 3 steps.
MODEL_OPTIM = dict(unembedding_lr=0.008, embedding_lr=0.3, matrix_lr=0.02, scalar_lr=0.5,
                   weight_decay=0.28, momentum=0.95)
MODEL_STEPS = 3


def model_cases():
    """(name, config, B, T, seed, ignore_positions) - small configs, each exercising a feature.

    Every case has n_layer >= 3: with n_layer <= 2 the backout layer (n_layer // 2) is the last
    layer, h_f = (1 - beta) h, and the final rmsnorm cancels the scale, so backout_lambda's
    gradient is ~eps-sized noise (untestable in float32) and its AdamW step has a random sign.
    n_embd 24 is the smallest width nanochat allows (the smear gate reads 24 channels)."""
    C = ref.GPTConfig
    return [
        # vocab 100 padded to 128; odd depth (VE on layers 0, 2); S window 128 >= T (plain causal)
        ("sl_v100", C(sequence_len=32, vocab_size=100, n_layer=3, n_head=2, n_kv_head=2, n_embd=24,
                      window_pattern="SL"), 2, 32, 1001, None),
        # sequence_len 512 -> S window 128 < T = 160, so the sliding window really cuts (layers 0, 1;
        # layer 2 is long as the last layer)
        ("window", C(sequence_len=512, vocab_size=64, n_layer=3, n_head=2, n_kv_head=2, n_embd=24,
                     window_pattern="S"), 1, 160, 1002, None),
        # GQA: 4 query heads share 2 kv heads (head_dim 6)
        ("gqa", C(sequence_len=32, vocab_size=64, n_layer=3, n_head=4, n_kv_head=2, n_embd=24,
                  window_pattern="L"), 2, 32, 1003, None),
        # ignored targets (-1), incl. the whole tail of row 1; MQA (1 kv head); vocab 50 -> 64
        ("ignore", C(sequence_len=32, vocab_size=50, n_layer=3, n_head=2, n_kv_head=1, n_embd=24,
                     window_pattern="L"), 2, 32, 1004, [(0, 0), (0, 5), (0, 17), (0, 18)] +
         [(1, t) for t in range(20, 32)]),
    ]


def to_dtype(P, dtype):
    return OrderedDict((k, v.detach().to(dtype).clone().requires_grad_(True)) for k, v in P.items())


def loss_and_grads(P, cfg, idx, targets):
    for v in P.values():
        v.grad = None
    loss = ref.forward(P, cfg, idx, targets)
    loss.backward()
    return loss.detach(), OrderedDict((k, v.grad.detach().clone()) for k, v in P.items())


def run_model_case(P32, cfg, idx, targets, dtype):
    """Returns dict of results computed in `dtype` from the float32 weights P32."""
    P = to_dtype(P32, dtype)
    out = {}
    with torch.no_grad():
        out["logits"] = ref.forward(P, cfg, idx)
        out["per_token_loss"] = ref.forward(P, cfg, idx, targets, reduction="none")
    out["loss"], out["grad"] = loss_and_grads(P, cfg, idx, targets)
    opt = ref.MuonAdamW(OrderedDict((k, v.data) for k, v in P.items()), cfg.n_embd,
                        **{k: MODEL_OPTIM[k] for k in ("unembedding_lr", "embedding_lr",
                                                        "matrix_lr", "scalar_lr", "weight_decay")})
    opt.record = {}
    for _ in range(MODEL_STEPS):
        _, grads = loss_and_grads(P, cfg, idx, targets)
        opt.step(grads, 1.0, MODEL_OPTIM["momentum"], MODEL_OPTIM["weight_decay"])
    out["step3"] = OrderedDict((k, v.detach().clone()) for k, v in P.items())
    out["ambiguous"] = ambiguous_elements(opt.record)
    return out


AMBIGUITY = 1e-3  # relative margin below which a discontinuous decision counts as ambiguous


def ambiguous_elements(record):
    """Flat indices per parameter where a step's outcome jumps on a sign that float32 noise can
    flip: Muon elements whose update |g| < 1e-3 rms(g) at some step (the cautious weight-decay
    mask g*p >= 0 switches a decay of lr*wd*p on or off), AdamW elements whose first gradient is
    nonzero but below 1e-3 rms (the first AdamW step is lr*sign(g))."""
    out = OrderedDict()
    for name, tensors in record.items():
        flag = torch.zeros(tensors[0].numel(), dtype=torch.bool)
        for t in tensors:
            t = t.reshape(-1)
            nz = t[t != 0]
            if nz.numel() == 0:
                continue
            rms = nz.pow(2).mean().sqrt()
            flag |= (t != 0) & (t.abs() < AMBIGUITY * rms)
        idx = torch.nonzero(flag).reshape(-1)
        if idx.numel():
            out[name] = idx.to(torch.int64)
    return out


def f32(t):
    return t.detach().to(torch.float32).numpy()


def rel_err(a, b):
    """max|a-b| / max|b| (b = truth)."""
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    den = b.abs().max().item()
    return (a - b).abs().max().item() / (den if den > 0 else 1.0)


def make_model_fixture(out_dir, case, check):
    name, cfg, B, T, seed, ignore = case
    P32 = ref.init_params(cfg, seed)
    g = torch.Generator().manual_seed(seed + 500)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g, dtype=torch.int64)
    targets = torch.randint(0, cfg.vocab_size, (B, T), generator=g, dtype=torch.int64)
    for (b, t) in ignore or []:
        targets[b, t] = -1
    truth = run_model_case(P32, cfg, idx, targets, torch.float64)

    tensors = [("param." + k, v.numpy()) for k, v in P32.items()]
    tensors += [("idx", idx.numpy()), ("targets", targets.numpy()),
                ("logits", f32(truth["logits"])), ("loss", f32(truth["loss"]).reshape(1)),
                ("per_token_loss", f32(truth["per_token_loss"]))]
    tensors += [("grad." + k, f32(v)) for k, v in truth["grad"].items()]
    tensors += [("step3." + k, f32(v)) for k, v in truth["step3"].items()]
    tensors += [("ambiguous." + k, v.numpy()) for k, v in truth["ambiguous"].items()]
    meta = OrderedDict(config=cfg.to_json(),
                       optim=json.dumps(MODEL_OPTIM, sort_keys=True),
                       case=name, batch_size=str(B), seq_len=str(T), optim_steps=str(MODEL_STEPS),
                       param_order=json.dumps(list(P32.keys())),
                       ambiguous_rule=ambiguous_elements.__doc__.split("\n\n")[0].replace("\n", " "),
                       generator="tools/reference/make_fixtures.py (float64 truth from float32 weights)")
    path = os.path.join(out_dir, f"model_{name}.safetensors")
    ref.save_safetensors(path, tensors, meta)
    print(f"{path}: {os.path.getsize(path)} bytes, loss {truth['loss'].item():.6f}, "
          f"windows {ref.window_sizes(cfg)}")
    if check:
        lo = run_model_case(P32, cfg, idx, targets, torch.float32)
        worst_g = max(rel_err(lo["grad"][k], v) for k, v in truth["grad"].items())
        worst_gk = max(truth["grad"], key=lambda k: rel_err(lo["grad"][k], truth["grad"][k]))
        def step_err(k):  # ambiguous elements excluded, as in the C++ test
            a, b = lo["step3"][k].clone(), truth["step3"][k].clone()
            if k in truth["ambiguous"]:
                a.view(-1)[truth["ambiguous"][k]] = 0
                b.view(-1)[truth["ambiguous"][k]] = 0
            return rel_err(a, b)
        worst_s = max(step_err(k) for k in truth["step3"])
        worst_sk = max(truth["step3"], key=step_err)
        n_amb = sum(v.numel() for v in truth["ambiguous"].values())
        print(f"  f32 vs f64: logits {rel_err(lo['logits'], truth['logits']):.2e}  loss "
              f"{rel_err(lo['loss'], truth['loss']):.2e}  per_token {rel_err(lo['per_token_loss'], truth['per_token_loss']):.2e}"
              f"  grad(worst) {worst_g:.2e} [{worst_gk}]  step3(worst) {worst_s:.2e} [{worst_sk}]"
              f"  ambiguous elements {n_amb}")
        for k, v in truth["grad"].items():
            nz = (v != 0).sum().item()
            if nz == 0 and not k.startswith(("transformer.wte", "value_embeds", "lm_head")):
                raise SystemExit(f"degenerate fixture: gradient of {k} is all zero")


# ------------------------------------------------------------------------------------------------
# Optimizer-only fixture

OPTIM_SHAPES = [  # model order; names decide the group (docs/nanochat.md 2.1)
    ("resid_lambdas", (3,)),
    ("x0_lambdas", (3,)),
    ("smear_lambda", (1,)),
    ("backout_lambda", (1,)),
    ("transformer.wte.weight", (64, 16)),           # AdamW, exactly 1024 elements (large)
    ("transformer.h.0.attn.c_q.weight", (16, 16)),  # Muon square (group of 2)
    ("transformer.h.0.attn.c_k.weight", (8, 16)),   # Muon wide (m < n)
    ("transformer.h.0.mlp.c_fc.weight", (24, 8)),   # Muon tall, lr factor sqrt(3)
    ("transformer.h.0.mlp.c_proj.weight", (8, 24)),  # Muon wide
    ("transformer.h.1.attn.c_q.weight", (16, 16)),  # Muon square, gradient always zero
    ("transformer.h.1.attn.ve_gate.weight", (2, 12)),
    ("lm_head.weight", (68, 16)),                   # AdamW large, 68 rows (not divisible by 3)
    ("smear_gate.weight", (1, 24)),
    ("value_embeds.1.weight", (24, 8)),             # AdamW small (192 elements)
]
OPTIM_HP = dict(model_dim=32, unembedding_lr=0.008, embedding_lr=0.3, matrix_lr=0.02, scalar_lr=0.5,
                weight_decay=0.28)
OPTIM_SCHEDULE = [  # per step: lr multiplier, Muon momentum, Muon weight decay
    dict(lr_multiplier=1.0, momentum=0.85, weight_decay=0.28),
    dict(lr_multiplier=0.7, momentum=0.88, weight_decay=0.2),
    dict(lr_multiplier=0.45, momentum=0.91, weight_decay=0.12),
    dict(lr_multiplier=0.9, momentum=0.95, weight_decay=0.05),
    dict(lr_multiplier=0.2, momentum=0.97, weight_decay=0.0),
]
ZERO_GRAD = "transformer.h.1.attn.c_q.weight"


def optim_grads(seed):
    """Fresh float32 gradients per step, with varied scales and some exact zeros."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(len(OPTIM_SCHEDULE)):
        gr = OrderedDict()
        for i, (name, shape) in enumerate(OPTIM_SHAPES):
            scale = 10.0 ** (-3 + (i * 7 + k) % 4)  # 1e-3 .. 1
            t = torch.randn(shape, generator=g, dtype=torch.float64) * scale
            if name == ZERO_GRAD:
                t.zero_()
            if name in ("transformer.wte.weight", "lm_head.weight") and k % 2 == 1:
                t[::3] = 0  # rows not seen this step (exact zeros, moments still move)
            gr[name] = t.to(torch.float32)
        out.append(gr)
    return out


def run_optim(P32, grads, dtype):
    P = OrderedDict((k, v.to(dtype).clone()) for k, v in P32.items())
    hp = dict(OPTIM_HP)
    opt = ref.MuonAdamW(P, hp.pop("model_dim"), **hp)
    hist = []
    for k, sch in enumerate(OPTIM_SCHEDULE):
        opt.step(OrderedDict((n, v.to(dtype)) for n, v in grads[k].items()),
                 sch["lr_multiplier"], sch["momentum"], sch["weight_decay"])
        hist.append(OrderedDict((n, v.clone()) for n, v in P.items()))
    return hist, opt


def make_optim_fixture(out_dir, check, seed=2001):
    g = torch.Generator().manual_seed(seed)
    P32 = OrderedDict()
    for name, shape in OPTIM_SHAPES:
        P32[name] = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(torch.float32)
    grads = optim_grads(seed + 1)
    hist, opt = run_optim(P32, grads, torch.float64)
    tensors = [("param0." + n, v.numpy()) for n, v in P32.items()]
    for k in range(len(OPTIM_SCHEDULE)):
        tensors += [(f"grad{k}." + n, v.numpy()) for n, v in grads[k].items()]
        tensors += [(f"param{k + 1}." + n, f32(v)) for n, v in hist[k].items()]
    groups = [dict(kind=gr["kind"], names=gr["names"], lr=gr["initial_lr"]) for gr in opt.groups]
    meta = OrderedDict(hyperparameters=json.dumps(OPTIM_HP, sort_keys=True),
                       schedule=json.dumps(OPTIM_SCHEDULE),
                       param_order=json.dumps([n for n, _ in OPTIM_SHAPES]),
                       groups=json.dumps(groups),
                       generator="tools/reference/make_fixtures.py (float64 truth)")
    path = os.path.join(out_dir, "optim_mixed.safetensors")
    ref.save_safetensors(path, tensors, meta)
    print(f"{path}: {os.path.getsize(path)} bytes")
    if check:
        lo, _ = run_optim(P32, grads, torch.float32)
        for k in range(len(OPTIM_SCHEDULE)):
            worst = max(hist[k], key=lambda n: rel_err(lo[k][n], hist[k][n]))
            print(f"  step {k + 1}: f32 vs f64 worst {rel_err(lo[k][worst], hist[k][worst]):.2e} [{worst}]")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures"))
    ap.add_argument("--check", action="store_true", help="also compare a float32 rerun to the truth")
    ap.add_argument("--only", default=None, help="comma-separated case names (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    for case in model_cases():
        if only is None or case[0] in only:
            make_model_fixture(args.out, case, args.check)
    if only is None or "optim_mixed" in only:
        make_optim_fixture(args.out, args.check)


if __name__ == "__main__":
    main()
