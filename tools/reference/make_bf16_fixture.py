"""Writes tests/fixtures/bf16_autocast.safetensors: the reference for --dtype bfloat16 (see README.md
next to this file).

    /work/venv/bin/python tools/reference/make_bf16_fixture.py [--out tests/fixtures]

One small model (nanochat_ref.py's GPT, float32 weights) and one batch, evaluated three ways:
  truth.*     float64 from the float32 weights (the exact answer)
  autocast.*  float32 weights under torch.autocast("cpu", dtype=torch.bfloat16): what PyTorch (and
              nanochat on a GPU) computes in bf16 mixed precision
each with the softcapped logits, the mean loss and the gradient of every parameter; a float32 run
is only printed (the size of plain float32 rounding). The C++ test
holds our bf16 engine to the autocast figures and asks that its distance from the truth stays within
a small factor of autocast's own distance. Needs a PyTorch with CPU autocast (>= 1.10); printed
figures: max|x - truth| / max|truth| per family.
"""

import argparse
import json
import os
import sys
from collections import OrderedDict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanochat_ref as ref  # noqa: E402
from make_fixtures import rel_err, to_dtype  # noqa: E402

# n_layer 3 (backout before the last layer), GQA, a window that cuts (sequence_len 256: S window
# 64 < T = 80); n_embd 32, so the products reduce over 16..160 values.
CFG = ref.GPTConfig(sequence_len=256, vocab_size=64, n_layer=3, n_head=2, n_kv_head=1, n_embd=32,
                    window_pattern="SL")
B, T, SEED = 2, 80, 3001


def evaluate(P32, idx, targets, dtype, autocast):
    P = to_dtype(P32, dtype)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with ctx:
        with torch.no_grad():
            logits = ref.forward(P, CFG, idx).float()
        loss = ref.forward(P, CFG, idx, targets)
    loss.backward()
    return OrderedDict(logits=logits.detach(), loss=loss.detach().float().reshape(1),
                       grad=OrderedDict((k, v.grad.detach().float()) for k, v in P.items()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    P32 = ref.init_params(CFG, SEED)
    g = torch.Generator().manual_seed(SEED + 500)
    idx = torch.randint(0, CFG.vocab_size, (B, T), generator=g, dtype=torch.int64)
    targets = torch.randint(0, CFG.vocab_size, (B, T), generator=g, dtype=torch.int64)
    targets[1, 60:] = -1
    runs = OrderedDict(truth=evaluate(P32, idx, targets, torch.float64, False),
                       autocast=evaluate(P32, idx, targets, torch.float32, True),
                       f32=evaluate(P32, idx, targets, torch.float32, False))
    tensors = [("param." + k, v.numpy()) for k, v in P32.items()]
    tensors += [("idx", idx.numpy()), ("targets", targets.numpy())]
    for name in ("truth", "autocast"):
        r = runs[name]
        tensors += [(f"{name}.logits", r["logits"].float().numpy()), (f"{name}.loss", r["loss"].float().numpy())]
        tensors += [(f"{name}.grad.{k}", v.float().numpy()) for k, v in r["grad"].items()]
    meta = OrderedDict(config=CFG.to_json(), batch_size=str(B), seq_len=str(T),
                       param_order=json.dumps(list(P32.keys())), torch=torch.__version__,
                       generator="tools/reference/make_bf16_fixture.py (truth float64; autocast = "
                                 "torch.autocast('cpu', bfloat16) on float32 weights)")
    path = os.path.join(args.out, "bf16_autocast.safetensors")
    ref.save_safetensors(path, tensors, meta)
    truth = runs["truth"]
    print(f"{path}: {os.path.getsize(path)} bytes, loss {truth['loss'].item():.6f} (torch {torch.__version__})")
    for name in ("autocast", "f32"):
        r = runs[name]
        grads = sorted(((rel_err(r["grad"][k], v), k) for k, v in truth["grad"].items()), reverse=True)
        print(f"  {name:8s} vs truth: logits {rel_err(r['logits'], truth['logits']):.2e}  "
              f"loss {rel_err(r['loss'], truth['loss']):.2e}  grad(worst) {grads[0][0]:.2e} [{grads[0][1]}]  "
              f"grad(median) {grads[len(grads) // 2][0]:.2e}")


if __name__ == "__main__":
    main()
