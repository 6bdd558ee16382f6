"""Writes nanochat optimizer fixtures with nanochat's own MuonAdamW, on real PyTorch.

Dev-time only (CI has no torch). Needs a checkout of Karpathy's nanochat (the folder holding
nanochat/gpt.py and nanochat/optim.py) and a venv with torch:
    /tmp/venv/bin/python tools/interop/make_optim_fixture.py NANOCHAT_CHECKOUT tests/fixtures/interop
It builds nanochat's GPT for the fixture's meta (nanochat/base_checkpoints/d1/meta_000003.json),
loads model_000003.pt, makes the optimizer with GPT.setup_optimizer, runs one forward/backward and
optimizer.step() on CPU (torch.compile disabled, compute dtype float32), and writes
  nanochat/base_checkpoints/d1/optim_000003_rank0.pt   torch.save(optimizer.state_dict())
  optim_2ranks/optim_000003_rank{0,1}.pt                the same state split as nanochat's
                                                         optimizer holds it on 2 ranks
                                                         (optim.py _compute_adamw / _compute_muon)
  optim_groups.json                                      per group: kind and parameter names, in
                                                         order (what the numbering means)
nanochat.common is replaced by a stand-in (it needs packages the optimizer does not use).
"""
import copy
import json
import os
import sys
import types

os.environ["TORCHDYNAMO_DISABLE"] = "1"  # the fused step functions run eagerly
import torch  # noqa: E402


def load_nanochat(checkout):
    common = types.ModuleType("nanochat.common")
    common.COMPUTE_DTYPE = torch.float32
    common.get_dist_info = lambda: (False, 0, 0, 1)
    common.print0 = lambda *a, **k: None
    sys.modules["nanochat.common"] = common
    sys.path.insert(0, checkout)
    import nanochat.gpt as gpt  # noqa: E402
    return gpt


def split_for_ranks(sd, world):
    """nanochat's per-rank view: AdamW tensors >= 1024 elements by rows, Muon stacks by chunks."""
    out = [copy.deepcopy(sd) for _ in range(world)]
    for group in sd["param_groups"]:
        idx = group["params"]
        if group["kind"] == "adamw":
            for i in idx:
                st = sd["state"][i]
                if st["exp_avg"].numel() < 1024:
                    continue
                rows = st["exp_avg"].shape[0] // world
                for r in range(world):
                    for k in ("exp_avg", "exp_avg_sq"):
                        out[r]["state"][i][k] = st[k][r * rows:(r + 1) * rows].clone()
        else:
            st = sd["state"][idx[0]]
            K = len(idx)
            c = (K + world - 1) // world
            for r in range(world):
                for k in ("momentum_buffer", "second_momentum_buffer"):
                    buf = torch.zeros((c,) + tuple(st[k].shape[1:]), dtype=st[k].dtype)
                    own = st[k][r * c:min(K, (r + 1) * c)]
                    buf[:own.shape[0]] = own
                    out[r]["state"][idx[0]][k] = buf
    return out


def main():
    checkout, out = sys.argv[1], sys.argv[2]
    gpt = load_nanochat(checkout)
    d1 = os.path.join(out, "nanochat", "base_checkpoints", "d1")
    meta = json.load(open(os.path.join(d1, "meta_000003.json")))
    torch.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig(**meta["model_config"]))
    model.init_weights()
    weights = torch.load(os.path.join(d1, "model_000003.pt"), weights_only=True)
    model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
    model.float()
    opt = model.setup_optimizer(unembedding_lr=0.004, embedding_lr=0.2, matrix_lr=0.02, weight_decay=0.1)
    idx = torch.randint(0, meta["model_config"]["vocab_size"], (2, 17))
    loss = model(idx[:, :-1].contiguous(), targets=idx[:, 1:].contiguous())
    loss.backward()
    opt.step()
    sd = opt.state_dict()
    torch.save(sd, os.path.join(d1, "optim_000003_rank0.pt"))
    two = os.path.join(out, "optim_2ranks")
    os.makedirs(two, exist_ok=True)
    for r, part in enumerate(split_for_ranks(sd, 2)):
        torch.save(part, os.path.join(two, "optim_000003_rank%d.pt" % r))
    names = {id(p): n for n, p in model.named_parameters()}
    groups = [{"kind": g["kind"], "params": [names[id(p)] for p in g["params"]]} for g in opt.param_groups]
    json.dump(groups, open(os.path.join(out, "optim_groups.json"), "w"), indent=1)
    print("wrote", d1, two, "loss", loss.item())


if __name__ == "__main__":
    main()
