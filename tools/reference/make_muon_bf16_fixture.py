"""Writes tests/fixtures/muon_bf16.safetensors: nanochat's own Muon step in bfloat16 and in float32
on the same inputs, the reference for `--dtype bfloat16`'s Muon (optim/optim_math.h MuonHyper::bf16).

    mkdir -p /tmp/nanochat-ref && git -C /work/.mirror/karpathy+nanochat/repo archive HEAD nanochat | tar -x -C /tmp/nanochat-ref
    /work/venv/bin/python tools/reference/make_muon_bf16_fixture.py /tmp/nanochat-ref [--out tests/fixtures]

For a tall, a wide and a square matrix, and a tall and a wide one with a side >= 128: random parameters, gradient, momentum buffer and second
moment, then nanochat/optim.py's muon_step_fused (the function under its torch.compile wrapper, run
eagerly) once with
its module's COMPUTE_DTYPE set to torch.bfloat16 (what nanochat does on a GPU: the blended gradient
cast to bf16, MuonEq and Polar Express in bf16) and once with float32 (its CPU path). Tensors per
matrix i: in{i}.{p,g,mom,sec} and out{i}.{bf16,fp32}.{p,mom,sec}, with hyper-parameters in the
metadata. lr_t is the group lr times sqrt(max(1, m/n)), as nanochat's caller passes it.

The bf16 step can be very sensitive to its input: a gradient changed by one part in 10^7 (below
fp32's own rounding) flips a few bf16 roundings, and after five Polar Express iterations that can
move the result as far as the bf16 step is from the fp32 one. The metadata's "bf16_spread" records,
per matrix, how far nanochat's own bf16 step moves under three such perturbations (the largest
max and mean |p - p_bf16| over them): no implementation can be held closer than that. Needs
torch (CPU) and filelock (nanochat.common imports it).
"""

import argparse
import json
import os
import sys

import torch

# the first three take one full product per Gram matrix; the last two (a side >= 128) take our
# blocked Gram path (optim/optim_math.h)
SHAPES = [(96, 40), (40, 96), (64, 64), (192, 130), (135, 200)]
LR, MOMENTUM, WD, BETA2, NS = 0.02, 0.95, 0.2, 0.9, 5
SEED = 4242
SPREAD_SEEDS, SPREAD_REL = (11, 12, 13), 1e-7


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nanochat", help="a tree of nanochat (the commit docs/nanochat.md follows)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))
    a = ap.parse_args()
    sys.path.insert(0, a.nanochat)
    import nanochat.optim as nopt
    # the function under its torch.compile wrapper: plain torch ops, run eagerly
    step = getattr(nopt.muon_step_fused, "_torchdynamo_orig_callable", None) or nopt.muon_step_fused.__wrapped__
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nanochat_ref as ref

    g = torch.Generator().manual_seed(SEED)
    tensors, meta = {}, {"shapes": SHAPES, "lr": LR, "momentum": MOMENTUM, "weight_decay": WD, "beta2": BETA2,
                         "ns_steps": NS}
    meta["bf16_spread"] = []
    for i, (m, n) in enumerate(SHAPES):
        p = torch.randn(m, n, generator=g) * 0.05
        grad = torch.randn(m, n, generator=g) * 0.01
        mom = torch.randn(m, n, generator=g) * 0.01
        red_dim = -1 if m >= n else -2
        sec = (torch.rand(m, 1, generator=g) if m >= n else torch.rand(1, n, generator=g)) * 1e-4 + 1e-5
        tensors.update({f"in{i}.p": p, f"in{i}.g": grad, f"in{i}.mom": mom, f"in{i}.sec": sec})
        for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            nopt.COMPUTE_DTYPE = dtype
            P, G, M, S = p.clone()[None], grad.clone()[None], mom.clone()[None], sec.clone()[None]
            step(G, P, M, S, torch.tensor(MOMENTUM), torch.tensor(LR * max(1.0, m / n) ** 0.5),
                                 torch.tensor(WD), torch.tensor(BETA2), NS, red_dim)
            tensors.update({f"out{i}.{name}.p": P[0], f"out{i}.{name}.mom": M[0], f"out{i}.{name}.sec": S[0]})
        # nanochat's bf16 step on the gradient times (1 + 1e-7 noise): the spread of the bf16 path
        nopt.COMPUTE_DTYPE = torch.bfloat16
        spread_max, spread_mean = 0.0, 0.0
        for seed in SPREAD_SEEDS:
            noise = torch.randn(m, n, generator=torch.Generator().manual_seed(seed))
            P, G, M, S = p.clone()[None], (grad * (1 + SPREAD_REL * noise))[None], mom.clone()[None], sec.clone()[None]
            step(G, P, M, S, torch.tensor(MOMENTUM), torch.tensor(LR * max(1.0, m / n) ** 0.5),
                 torch.tensor(WD), torch.tensor(BETA2), NS, red_dim)
            dev = (P[0] - tensors[f"out{i}.bf16.p"]).abs()
            spread_max, spread_mean = max(spread_max, dev.max().item()), max(spread_mean, dev.mean().item())
        meta["bf16_spread"].append({"max": spread_max, "mean": spread_mean})
        d = (tensors[f"out{i}.bf16.p"] - tensors[f"out{i}.fp32.p"]).abs().max().item()
        u = (tensors[f"out{i}.fp32.p"] - p).abs().max().item()
        print(f"({m}, {n}): max |update| {u:.3e}, max |p_bf16 - p_fp32| {d:.3e} ({d / u:.1%} of the update), "
              f"bf16 spread max {spread_max:.3e} mean {spread_mean:.3e}")
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "muon_bf16.safetensors")
    ref.save_safetensors(path, [(k, v.float().numpy()) for k, v in tensors.items()], {"meta": json.dumps(meta)})
    print("wrote", path)


if __name__ == "__main__":
    main()
