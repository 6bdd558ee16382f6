"""Writes the nanochat interop fixtures of tests/fixtures/interop/ with real PyTorch and tiktoken.

Dev-time only (CI has neither): run in a venv that has torch 2.x and tiktoken from PyPI,
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch tiktoken
    /tmp/venv/bin/python tools/interop/make_fixtures.py tests/fixtures/interop
It writes:
  tensors.pt            torch.save of an OrderedDict: fp32, bf16, int32 and int64 tensors, one a
                        view at a nonzero storage offset (what the reader must handle)
  tensors.json          their dtypes, shapes and values (bf16 as the float32 they widen to)
  nanochat/             a nanochat base folder as nanochat writes it: tokenizer/tokenizer.pkl
                        (pickle.dump of a tiktoken Encoding), tokenizer/token_bytes.pt, and
                        base_checkpoints/d1/model_000003.pt + meta_000003.json of a 1-layer model
                        (bf16 matrices and embeddings, fp32 scalars, like a GPU run saves them)
  tokenizer.json        a sample text and the ids tiktoken gives it
"""
import json
import math
import os
import pickle
import sys
from collections import OrderedDict

import tiktoken
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
import nanochat_ref as ref  # noqa: E402

SPLIT_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
            "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]
TEXT = ("The capital of France is Paris. The chemical symbol of gold is Au. "
        "If yesterday was Friday, then tomorrow will be Sunday. Numbers: 12345, 3.14159! "
        "Unicode: caf\u00e9, \u00fcber, \u65e5\u672c\u8a9e.\n\nThe end.")
VOCAB = 320  # 256 bytes + 55 merges + 9 specials: no padding needed


def tiny_ranks():
    """256 single bytes, then 55 merges: the most frequent adjacent pair of TEXT, repeatedly."""
    ranks = {bytes([b]): b for b in range(256)}
    seq = [bytes([b]) for b in TEXT.encode("utf-8")]
    while len(ranks) < VOCAB - len(SPECIALS):
        counts = {}
        for a, b in zip(seq, seq[1:]):
            counts[(a, b)] = counts.get((a, b), 0) + 1
        (a, b), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        ranks[a + b] = len(ranks)
        out, i = [], 0
        while i < len(seq):
            if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(seq[i])
                i += 1
        seq = out
    return ranks


def write_tensors(out):
    big = torch.arange(10, dtype=torch.float32) * 0.25 - 1.0
    sd = OrderedDict()
    sd["a.f32"] = (torch.arange(6, dtype=torch.float32) * 0.5 - 1.0).reshape(2, 3)
    sd["b.bf16"] = torch.tensor([[1.5, -2.25, 0.0078125], [100.0, -0.5, 3.0]], dtype=torch.bfloat16)
    sd["c.i32"] = torch.tensor([7, -3, 2**31 - 1], dtype=torch.int32)
    sd["d.i64"] = torch.tensor([[1, -(2**40)]], dtype=torch.int64)
    sd["e.view"] = big[2:6]  # storage of 10 floats, offset 2
    torch.save(sd, os.path.join(out, "tensors.pt"))
    desc = OrderedDict()
    for k, v in sd.items():
        dt = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int32: "I32", torch.int64: "I64"}[v.dtype]
        vals = v.float().flatten().tolist() if v.is_floating_point() else v.flatten().tolist()
        desc[k] = {"dtype": dt, "shape": list(v.shape), "values": vals}
    with open(os.path.join(out, "tensors.json"), "w") as f:
        json.dump(desc, f, indent=1)


def write_nanochat_folder(out, enc):
    base = os.path.join(out, "nanochat")
    tok_dir = os.path.join(base, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    with open(os.path.join(tok_dir, "tokenizer.pkl"), "wb") as f:
        pickle.dump(enc, f)
    special = set(enc.encode_single_token(s) for s in SPECIALS)
    tb = [0 if i in special else len(enc.decode_single_token_bytes(i)) for i in range(enc.n_vocab)]
    torch.save(torch.tensor(tb, dtype=torch.int32), os.path.join(tok_dir, "token_bytes.pt"))

    cfg = ref.GPTConfig(sequence_len=64, vocab_size=VOCAB, n_layer=1, n_head=1, n_kv_head=1, n_embd=32,
                        window_pattern="L")
    P = ref.init_params(cfg, seed=5)
    sd = OrderedDict((k, v if v.dim() == 1 else v.to(torch.bfloat16)) for k, v in P.items())
    ck = os.path.join(base, "base_checkpoints", "d1")
    os.makedirs(ck, exist_ok=True)
    torch.save(sd, os.path.join(ck, "model_000003.pt"))
    meta = {"step": 3, "val_bpb": 4.5, "model_config": json.loads(cfg.to_json()),
            "user_config": {"depth": 1, "run": "fixture"}, "device_batch_size": 2, "max_seq_len": 64,
            "total_batch_size": 256, "dataloader_state_dict": {"pq_idx": 0, "rg_idx": 3, "epoch": 1},
            "loop_state": {"min_val_bpb": math.inf, "smooth_train_loss": 5.25, "total_training_time": 1.5}}
    with open(os.path.join(ck, "meta_000003.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)  # min_val_bpb is written as the bare token Infinity


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/interop"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    write_tensors(out)
    ranks = tiny_ranks()
    enc = tiktoken.Encoding(name="rustbpe", pat_str=SPLIT_PATTERN, mergeable_ranks=ranks,
                            special_tokens={s: len(ranks) + i for i, s in enumerate(SPECIALS)})
    write_nanochat_folder(out, enc)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump({"text": TEXT, "ids": enc.encode_ordinary(TEXT), "vocab_size": enc.n_vocab}, f, indent=1)
    print("torch", torch.__version__, "tiktoken", tiktoken.__version__ if hasattr(tiktoken, "__version__") else "?")


if __name__ == "__main__":
    main()
