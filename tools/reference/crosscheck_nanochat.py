"""Cross-checks the committed fixtures against nanochat's own gpt.py / optim.py (dev-time, optional).

    /usr/bin/python3 tools/reference/crosscheck_nanochat.py --nanochat /path/to/nanochat/checkout

Runs nanochat's real GPT and MuonAdamW (in float32, nanochat's CPU dtype) on the fixture weights
and prints max|nanochat - fixture| / max|fixture| per tensor family. The fixtures are float64
truth from an independent restatement (nanochat_ref.py), so agreement at the float32 level
(~1e-6 .. 1e-5) means the restatement matches the real code.

torch 1.13 shims installed here (only what nanochat needs and 1.13 lacks): torch.compile (identity),
F.rms_norm (eps = 2^-23), torch._foreach_copy_, a stub nanochat.common (COMPUTE_DTYPE float32,
print0, get_dist_info) and nanochat.flash_attention.flash_attn.flash_attn_func (masked softmax with
FA3's (left, 0) window semantics). `--nanochat` may be a work tree or a bare git directory.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nanochat_ref as ref  # noqa: E402


def install_shims():
    if not hasattr(torch, "compile"):
        torch.compile = lambda *a, **k: (lambda f: f)
    if not hasattr(F, "rms_norm"):
        def rms_norm(x, shape, weight=None, eps=None):
            e = 2.0 ** -23 if eps is None else eps
            return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + e)
        F.rms_norm = rms_norm
    if not hasattr(torch, "_foreach_copy_"):
        def foreach_copy(dst, src):
            for d, s in zip(dst, src):
                d.copy_(s)
        torch._foreach_copy_ = foreach_copy

    common = types.ModuleType("nanochat.common")
    common.COMPUTE_DTYPE = torch.float32
    common.print0 = lambda *a, **k: None
    common.get_dist_info = lambda: (False, 0, 0, 1)
    sys.modules["nanochat.common"] = common

    def flash_attn_func(q, k, v, causal=True, window_size=(-1, 0)):
        # q (B,T,H,D), k/v (B,T,Hkv,D); key j visible from query i iff i - left <= j <= i
        B, T, H, D = q.shape
        rep = H // k.shape[2]
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
        i = torch.arange(T).view(T, 1)
        j = torch.arange(T).view(1, T)
        ok = j <= i
        if window_size[0] >= 0:
            ok = ok & (j >= i - window_size[0])
        s = s.masked_fill(~ok, float("-inf"))
        return torch.einsum("bhij,bjhd->bihd", torch.softmax(s, dim=-1), v)

    fa = types.ModuleType("nanochat.flash_attention")
    fa.flash_attn = types.SimpleNamespace(flash_attn_func=flash_attn_func)
    sys.modules["nanochat.flash_attention"] = fa


def import_nanochat(path):
    src = path
    if not os.path.exists(os.path.join(path, "nanochat", "gpt.py")):  # bare git dir
        src = tempfile.mkdtemp(prefix="nanochat_src_")
        os.makedirs(os.path.join(src, "nanochat"))
        for f in ("gpt.py", "optim.py"):
            data = subprocess.check_output(["git", "--git-dir", path, "show", f"HEAD:nanochat/{f}"])
            with open(os.path.join(src, "nanochat", f), "wb") as fh:
                fh.write(data)
        open(os.path.join(src, "nanochat", "__init__.py"), "w").close()
    pkg = types.ModuleType("nanochat")
    pkg.__path__ = [os.path.join(src, "nanochat")]
    sys.modules["nanochat"] = pkg
    import nanochat.gpt as gpt  # noqa: E402
    import nanochat.optim as optim  # noqa: E402
    return gpt, optim


def rel(a, b):
    a = torch.as_tensor(np.asarray(a), dtype=torch.float64)
    b = torch.as_tensor(np.asarray(b), dtype=torch.float64)
    d = b.abs().max().item()
    return (a - b).abs().max().item() / (d if d > 0 else 1.0)


def check_model(gpt, path):
    T_, meta = ref.load_safetensors(path)
    cfg = gpt.GPTConfig(**json.loads(meta["config"]))
    hp = json.loads(meta["optim"])
    model = gpt.GPT(cfg)
    model.init_weights()
    sd = {k[len("param."):]: torch.from_numpy(v) for k, v in T_.items() if k.startswith("param.")}
    assert list(sd.keys()) == list(model.state_dict().keys()), "state_dict order differs"
    model.load_state_dict(sd, strict=True)
    idx = torch.from_numpy(T_["idx"])
    tg = torch.from_numpy(T_["targets"])
    with torch.no_grad():
        r_logits = rel(model(idx), T_["logits"])
        r_ptl = rel(model(idx, tg, loss_reduction="none"), T_["per_token_loss"])
    loss = model(idx, tg)
    loss.backward()
    r_loss = rel(loss.detach().reshape(1), T_["loss"])
    r_grad = max((rel(p.grad, T_["grad." + n]), n) for n, p in model.named_parameters())
    opt = model.setup_optimizer(unembedding_lr=hp["unembedding_lr"], embedding_lr=hp["embedding_lr"],
                                matrix_lr=hp["matrix_lr"], weight_decay=hp["weight_decay"],
                                scalar_lr=hp["scalar_lr"])
    model.load_state_dict(sd, strict=True)
    for _ in range(int(meta["optim_steps"])):
        model.zero_grad(set_to_none=True)
        model(idx, tg).backward()
        for g in opt.param_groups:
            g["lr"] = g["initial_lr"] * 1.0
            if g["kind"] == "muon":
                g["momentum"] = hp["momentum"]
                g["weight_decay"] = hp["weight_decay"]
        opt.step()
    def step_err(n, p):  # elements flagged ambiguous by the generator are excluded
        a, b = p.detach().clone().reshape(-1), torch.from_numpy(T_["step3." + n]).reshape(-1).clone()
        if "ambiguous." + n in T_:
            amb = torch.from_numpy(T_["ambiguous." + n])
            a[amb] = 0
            b[amb] = 0
        return rel(a, b)
    r_step = max((step_err(n, p), n) for n, p in model.named_parameters())
    print(f"{os.path.basename(path)}: logits {r_logits:.2e} loss {r_loss:.2e} per_token {r_ptl:.2e} "
          f"grad {r_grad[0]:.2e} [{r_grad[1]}] step3 {r_step[0]:.2e} [{r_step[1]}]")
    return max(r_logits, r_loss, r_ptl, r_grad[0]), r_step[0]


def check_optim(optim, path):
    T_, meta = ref.load_safetensors(path)
    hp = json.loads(meta["hyperparameters"])
    sched = json.loads(meta["schedule"])
    order = json.loads(meta["param_order"])
    params = {n: torch.nn.Parameter(torch.from_numpy(T_["param0." + n]).clone()) for n in order}
    groups = []
    for g in ref.build_groups([(n, tuple(params[n].shape)) for n in order], hp["model_dim"],
                              hp["unembedding_lr"], hp["embedding_lr"], hp["matrix_lr"],
                              hp["scalar_lr"], hp["weight_decay"]):
        d = dict(kind=g["kind"], params=[params[n] for n in g["names"]], lr=g["lr"],
                 weight_decay=g["wd"])
        if g["kind"] == "adamw":
            d.update(betas=g["betas"], eps=g["eps"])
        else:
            d.update(momentum=g["momentum"], ns_steps=g["ns_steps"], beta2=g["beta2"])
        groups.append(d)
    opt = optim.MuonAdamW(groups)
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    worst = 0.0
    for k, s in enumerate(sched):
        for n in order:
            params[n].grad = torch.from_numpy(T_[f"grad{k}." + n]).clone()
        for g in opt.param_groups:
            g["lr"] = g["initial_lr"] * s["lr_multiplier"]
            if g["kind"] == "muon":
                g["momentum"], g["weight_decay"] = s["momentum"], s["weight_decay"]
        opt.step()
        w = max((rel(params[n].detach(), T_[f"param{k + 1}." + n]), n) for n in order)
        worst = max(worst, w[0])
        print(f"{os.path.basename(path)} step {k + 1}: {w[0]:.2e} [{w[1]}]")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nanochat", required=True, help="nanochat work tree or bare git dir")
    ap.add_argument("--fixtures", default=os.path.join(HERE, "..", "..", "tests", "fixtures"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    install_shims()
    gpt, optim = import_nanochat(args.nanochat)
    ok = True
    for f in sorted(os.listdir(args.fixtures)):
        p = os.path.join(args.fixtures, f)
        if f.startswith("model_") and f.endswith(".safetensors"):
            fwd, st = check_model(gpt, p)
            ok &= fwd < 1e-4 and st < 1e-4
        elif f.startswith("optim_") and f.endswith(".safetensors"):
            ok &= check_optim(optim, p) < 1e-5
    print("AGREE" if ok else "DISAGREE")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
