"""Checks an exported optim_<S>_rank0.pt with real PyTorch and nanochat's own MuonAdamW.

Dev-time only (CI has no torch). Needs a checkout of Karpathy's nanochat and a venv with torch:
    /tmp/venv/bin/python tools/interop/check_optim_export.py NANOCHAT_CHECKOUT EXPORT_DIR TAG STEP \
        [--same-as OTHER_OPTIM.pt]
1. torch.load(optim_<S>_rank0.pt, weights_only=True) (torch's restricted unpickler).
2. nanochat's GPT is built from meta_<S>.json, its weights loaded from model_<S>.pt, the optimizer
   made by GPT.setup_optimizer and optimizer.load_state_dict(...) given the file; every state
   tensor must then have its parameter's shape (or the Muon stack's) and the groups their kinds.
3. One forward/backward and optimizer.step() run from the loaded state (it must be usable).
4. With --same-as (checked first), every state tensor and step, and every group field but the
   schedule's (lr, initial_lr, momentum, weight_decay: the run's settings), must equal that file's.
Exit 1 with a message on any mismatch.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from make_optim_fixture import load_nanochat  # noqa: E402  (sets TORCHDYNAMO_DISABLE)
import torch  # noqa: E402


def same(a, b, where):
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a.float(), b.float())):
            sys.exit("differs: " + where)
    elif isinstance(a, dict):
        if set(a) != set(b):
            sys.exit("keys differ: %s %s %s" % (where, sorted(a), sorted(b)))
        for k in a:
            same(a[k], b[k], "%s[%r]" % (where, k))
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            sys.exit("lengths differ: " + where)
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s[%d]" % (where, i))
    elif a != b:
        sys.exit("differs: %s %r %r" % (where, a, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkout")
    ap.add_argument("export")
    ap.add_argument("tag")
    ap.add_argument("step", type=int)
    ap.add_argument("--same-as")
    a = ap.parse_args()
    gpt = load_nanochat(a.checkout)
    d = os.path.join(a.export, "base_checkpoints", a.tag)
    meta = json.load(open(os.path.join(d, "meta_%06d.json" % a.step)))
    sd = torch.load(os.path.join(d, "optim_%06d_rank0.pt" % a.step), weights_only=True)
    print("torch.load(weights_only=True): %d state entries, %d groups" % (len(sd["state"]), len(sd["param_groups"])))
    if a.same_as:
        other = torch.load(a.same_as, weights_only=True)
        same(sd["state"], other["state"], "state")
        # lr, initial_lr and the Muon momentum / weight decay come from the run's settings (the
        # meta), not from the state: compared for their presence only
        sched = ("lr", "initial_lr", "momentum", "weight_decay")
        strip = lambda gs: [{k: (k if k in sched else v) for k, v in g.items()} for g in gs]  # noqa: E731
        same(strip(sd["param_groups"]), strip(other["param_groups"]), "param_groups")
        print("identical to", a.same_as)
    model = gpt.GPT(gpt.GPTConfig(**meta["model_config"]))
    model.init_weights()
    weights = torch.load(os.path.join(d, "model_%06d.pt" % a.step), weights_only=True)
    model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
    model.float()
    opt = model.setup_optimizer()
    opt.load_state_dict(sd)
    params = [p for g in opt.param_groups for p in g["params"]]
    for g in opt.param_groups:
        first = g["params"][0]
        st = opt.state[first]
        if g["kind"] == "adamw":
            for p in g["params"]:
                assert opt.state[p]["exp_avg"].shape == p.shape, (g["kind"], p.shape)
        else:
            assert st["momentum_buffer"].shape == (len(g["params"]),) + tuple(first.shape)
    print("MuonAdamW.load_state_dict accepted it: %d parameters, groups %s" %
          (len(params), [g["kind"] for g in opt.param_groups]))
    V = meta["model_config"]["vocab_size"]
    idx = torch.randint(0, V, (2, 17))
    loss = model(idx[:, :-1].contiguous(), targets=idx[:, 1:].contiguous())
    loss.backward()
    opt.step()
    print("optimizer.step() from the loaded state: ok, loss %.4f, AdamW step now %d" %
          (loss.item(), opt.state[params[0]]["step"]))


if __name__ == "__main__":
    main()
