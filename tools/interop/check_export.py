"""Checks a `nanochat export --to nanochat` folder with real PyTorch: the loss a reference model
built from it gives equals what `nanochat base-eval` reports for the same checkpoint.

Dev-time only (needs torch, tiktoken and pyarrow from PyPI in a venv; CI has none of them):
    /tmp/venv/bin/python tools/interop/check_export.py --export OUT -g TAG [-s STEP] \
        [--base-dir $NANOCHAT_BASE_DIR] [--binary build/nanochat] [--split-tokens 8192]

1. torch.load(model_<S>.pt, weights_only=True) and load_state_dict(strict=True) into a module
   whose state_dict keys are nanochat's (the forward is tools/reference/nanochat_ref.py);
   tiktoken's Encoding is unpickled from tokenizer/tokenizer.pkl and token_bytes.pt loaded.
2. The train and val bits per byte are computed in Python over the same batches the C++ loader
   yields (BOS-aligned best-fit packing, docs/nanochat.md 5.4; docs/nanochat.md 3.6 for bpb).
3. `nanochat base-eval -g TAG -s S --split-tokens N` runs on the checkpoint the export came from,
   and both numbers are printed with their difference; exit 1 when they differ by more than 1e-4.
"""
import argparse
import glob
import json
import math
import os
import pickle
import re
import subprocess
import sys

import pyarrow.parquet as pq
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
import nanochat_ref as ref  # noqa: E402


class StateDictModule(torch.nn.Module):
    """Empty parameters at nanochat's state_dict names, so load_state_dict checks keys and shapes."""

    def __init__(self, shapes):
        super().__init__()
        for name, shape in shapes:
            *path, leaf = name.split(".")
            mod = self
            for part in path:
                if not hasattr(mod, part):
                    mod.add_module(part, torch.nn.Module())
                mod = getattr(mod, part)
            mod.register_parameter(leaf, torch.nn.Parameter(torch.empty(shape)))


def batches(files, enc, bos, B, T, buffer_size=1000, doc_batch=128):
    """The C++ loader's batches for one rank: rows of T+1 tokens, BOS-aligned best fit."""
    def doc_stream():
        while True:
            for f in files:
                pf = pq.ParquetFile(f)
                for rg in range(pf.num_row_groups):
                    texts = pf.read_row_group(rg, columns=["text"]).column("text").to_pylist()
                    for i in range(0, len(texts), doc_batch):
                        yield [[bos] + enc.encode_ordinary(t or "") for t in texts[i:i + doc_batch]]
    stream, buf = doc_stream(), []
    while True:
        rows = []
        for _ in range(B):
            row = []
            while len(row) < T + 1:
                while len(buf) < buffer_size:
                    buf.extend(next(stream))
                room = T + 1 - len(row)
                best = -1
                for i, d in enumerate(buf):
                    if len(d) <= room and (best < 0 or len(d) > len(buf[best])):
                        best = i
                if best >= 0:
                    row += buf.pop(best)
                else:
                    short = min(range(len(buf)), key=lambda i: len(buf[i]))
                    row += buf.pop(short)[:room]
            rows.append(row)
        t = torch.tensor(rows, dtype=torch.int64)
        yield t[:, :-1], t[:, 1:]


def python_bpb(P, cfg, files, enc, token_bytes, B, T, steps):
    bos = enc.encode_single_token("<|bos|>")
    nats, nbytes = 0.0, 0
    it = batches(files, enc, bos, B, T)
    with torch.no_grad():
        for _ in range(steps):
            x, y = next(it)
            loss = ref.forward(P, cfg, x, y, reduction="none").double()
            tb = token_bytes[y.reshape(-1)].long()
            nats += loss[tb > 0].sum().item()
            nbytes += tb.sum().item()
    return nats / (math.log(2) * nbytes) if nbytes else math.inf


def cpp_bpb(binary, base_dir, tag, step, split_tokens):
    env = dict(os.environ, NANOCHAT_BASE_DIR=base_dir)
    out = subprocess.run([binary, "base-eval", "-g", tag, "-s", str(step), "--split-tokens", str(split_tokens)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(train|val) bpb: ([0-9.]+)$", out, re.M)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True)
    ap.add_argument("-g", "--tag", required=True)
    ap.add_argument("-s", "--step", type=int, default=-1)
    ap.add_argument("--base-dir", default=os.environ.get("NANOCHAT_BASE_DIR", os.path.expanduser("~/.cache/nanochat")))
    ap.add_argument("--binary", default="build/nanochat")
    ap.add_argument("--split-tokens", type=int, default=8192)
    a = ap.parse_args()
    ck = os.path.join(a.export, "base_checkpoints", a.tag)
    step = a.step if a.step >= 0 else max(int(re.findall(r"\d+", os.path.basename(p))[0])
                                          for p in glob.glob(os.path.join(ck, "model_*.pt")))
    with open(os.path.join(ck, f"meta_{step:06d}.json")) as f:
        meta = json.load(f)
    sd = torch.load(os.path.join(ck, f"model_{step:06d}.pt"), weights_only=True)
    cfg = ref.GPTConfig(**meta["model_config"])
    model = StateDictModule(ref.param_shapes(cfg))
    model.load_state_dict(sd, strict=True)
    P = {k: v.detach().float() for k, v in model.state_dict().items()}
    with open(os.path.join(a.export, "tokenizer", "tokenizer.pkl"), "rb") as f:
        enc = pickle.load(f)
    token_bytes = torch.load(os.path.join(a.export, "tokenizer", "token_bytes.pt"), weights_only=True)
    assert enc.n_vocab == cfg.vocab_size == token_bytes.numel(), (enc.n_vocab, cfg.vocab_size)
    B, T = meta["device_batch_size"], meta["max_seq_len"]
    steps = max(1, a.split_tokens // (B * T))
    shards = sorted(glob.glob(os.path.join(os.environ.get("NANOCHAT_DATA_DIR", os.path.join(a.base_dir, "base_data_climbmix")), "*.parquet")))
    print(f"torch {torch.__version__}: loaded {len(sd)} tensors ({type(sd).__name__}), vocab {enc.n_vocab}, "
          f"{steps} batches of {B} x {T} per split")
    cpp = cpp_bpb(a.binary, a.base_dir, a.tag, step, a.split_tokens)
    worst = 0.0
    for split, files in (("train", shards[:-1]), ("val", shards[-1:])):
        py = python_bpb(P, cfg, files, enc, token_bytes, B, T, steps)
        worst = max(worst, abs(py - cpp[split]))
        print(f"{split}: python reference bpb {py:.6f} | nanochat base-eval bpb {cpp[split]:.6f} | diff {py - cpp[split]:+.2e}")
    sys.exit(0 if worst <= 1e-4 else 1)


if __name__ == "__main__":
    main()
