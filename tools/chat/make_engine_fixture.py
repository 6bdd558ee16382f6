#!/usr/bin/env python3
"""Writes tests/fixtures/chat/engine_<case>.safetensors: greedy generations of nanochat's own
Engine (nanochat/engine.py Engine.generate) driving nanochat's own GPT (nanochat/gpt.py with its
KV cache, float32 on the CPU), both executed as they are in a nanochat git directory, on small
models; every generation is also reproduced with tools/reference/nanochat_ref.py's forward in
float64 (a cross-check of the fixture).

The tokenizer is byte-level (256 single-byte tokens, no merges, nanochat's 9 specials at 256..264),
built as a tiktoken.Encoding for nanochat's RustBPETokenizer; the C++ test builds the same one with
Tokenizer::from_tokens. Random weights seldom produce a python block, so each model has a tool call
planted: its blocks are damped (the residual stream stays close to the current token's embedding)
and lm_head rows are added so that greedy decoding follows a chain of tokens
(<|assistant_start|> -> <|python_start|> -> expression bytes -> <|python_end|>, and
<|output_end|> -> <|assistant_end|>). The Engine then runs the calculator and forces its output.
Prompts not ending with <|assistant_start|> decode freely. Every decision is checked to have a
top-1/top-2 logit gap above MIN_GAP so that a float32 engine must make the same choices.

Each file: param.<state_dict key> (F32 weights), metadata "config" (model_config JSON) and "cases":
[{"name", "prompt", "num_samples", "max_tokens", "rows": [{"tokens", "mask", "stop_token"}]}]
(stop_token -1 when the row did not finish by <|assistant_end|>/<|bos|>).

usage: /work/venv/bin/python tools/chat/make_engine_fixture.py [NANOCHAT_GIT_DIR]   (torch, tiktoken)
"""
import json
import os
import subprocess
import sys
import tempfile
import types

import numpy as np
import tiktoken
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import nanochat_ref as ref  # noqa: E402

MIN_GAP = 1e-3
PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
            "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]
SP = {name: 256 + i for i, name in enumerate(SPECIALS)}


def show(git_dir, path):
    return subprocess.check_output(["git", "--git-dir", git_dir, "show", "HEAD:" + path], text=True)


def nanochat_gpt_class(git_dir):
    """nanochat's GPT and GPTConfig from nanochat/gpt.py with its real imports (common, optim,
    flash_attention: on a CPU its SDPA path), materialised in a temporary package folder."""
    tmp = tempfile.mkdtemp(prefix="nanochat_src_")
    os.makedirs(os.path.join(tmp, "nanochat"))
    for name in ("__init__", "common", "optim", "flash_attention", "gpt"):
        try:
            src = show(git_dir, f"nanochat/{name}.py")
        except subprocess.CalledProcessError:
            src = ""
        with open(os.path.join(tmp, "nanochat", name + ".py"), "w") as f:
            f.write(src)
    code = ("import sys, json; sys.path.insert(0, %r)\n"
            "from nanochat.gpt import GPT, GPTConfig\n") % tmp
    ns = {}
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "nanochat" or k.startswith("nanochat.")}
    try:
        exec(code, ns)
    finally:
        for k in [k for k in sys.modules if k == "nanochat" or k.startswith("nanochat.")]:
            sys.modules.pop(k)
        sys.modules.update(saved)
    return ns["GPT"], ns["GPTConfig"]


def nanochat_modules(git_dir):
    def show_head(path):
        return show(git_dir, path)

    sys.modules.setdefault("rustbpe", types.ModuleType("rustbpe"))
    pkg = types.ModuleType("nanochat")
    pkg.__path__ = []
    common = types.ModuleType("nanochat.common")
    common.COMPUTE_DTYPE = torch.float32  # what nanochat.common picks on a CPU
    common.compute_init = common.autodetect_device_type = None
    ckpt = types.ModuleType("nanochat.checkpoint_manager")
    ckpt.load_model = None
    sys.modules.update({"nanochat": pkg, "nanochat.common": common, "nanochat.checkpoint_manager": ckpt})
    mods = {}
    for name in ("tokenizer", "engine"):
        m = types.ModuleType("nanochat." + name)
        exec(compile(show_head(f"nanochat/{name}.py"), f"nanochat/{name}.py", "exec"), m.__dict__)
        mods[name] = m
    return mods


class RefModel:
    """nanochat's model interface for Engine (config, get_device, forward(ids, kv_cache)) over the
    reference forward: each call recomputes the whole sequence a cache has seen (the cached
    forward equals the full one), advancing the cache as nanochat's GPT does."""

    def __init__(self, P64, cfg):
        self.P, self.config = P64, cfg
        self.hist, self.last_hist, self.gaps = {}, None, []

    def get_device(self):
        return torch.device("cpu")

    def forward(self, ids, kv_cache=None):
        B, T = ids.shape
        key = id(kv_cache)
        if key in self.hist:
            h = torch.cat([self.hist[key], ids], dim=1)
        elif kv_cache.get_pos() > 0:  # a decode cache prefilled from the last batch-1 cache
            h = torch.cat([self.last_hist.expand(B, -1), ids], dim=1)
        else:
            h = ids
        self.hist[key] = self.last_hist = h
        kv_cache.advance(T)
        logits = ref.forward(self.P, self.config, h)[:, -T:, :]
        top = torch.topk(logits[:, -1, :], 2, dim=-1).values
        self.gaps.append((top[:, 0] - top[:, 1]).tolist())
        return logits


class Recording:
    """nanochat's GPT as the Engine sees it, recording each call's top-1/top-2 logit gap per row."""

    def __init__(self, model):
        self.m, self.config, self.gaps = model, model.config, []

    def get_device(self):
        return self.m.get_device()

    def forward(self, ids, kv_cache=None):
        logits = self.m.forward(ids, kv_cache=kv_cache)
        top = torch.topk(logits[:, -1, :].float(), 2, dim=-1).values
        self.gaps.append((top[:, 0] - top[:, 1]).tolist())
        return logits


def plant(P, chain_pairs, beta):
    """Adds beta * unit(rmsnorm(wte[a])) to lm_head row b for each (a, b): greedy goes a -> b."""
    wte = P["transformer.wte.weight"].double()
    for a, b in chain_pairs:
        e = ref.rms_norm(wte[a])
        P["lm_head.weight"][b] += (beta * e / e.norm()).float()


def make_model(seed, chain_pairs):
    cfg = ref.GPTConfig(sequence_len=64, vocab_size=265, n_layer=2, n_head=2, n_kv_head=2, n_embd=32,
                        window_pattern="L")
    P = ref.init_params(cfg, seed)
    for name in P:
        if ".attn.c_" in name or ".mlp.c_" in name:
            P[name] *= 0.5
    P["lm_head.weight"] *= 0.1
    plant(P, chain_pairs, beta=4.0)
    return cfg, P


def byte_ids(s):
    return list(s.encode("utf-8"))


def chain(expr):
    seq = [SP["<|assistant_start|>"], SP["<|python_start|>"]] + byte_ids(expr) + [SP["<|python_end|>"]]
    assert len(set(seq)) == len(seq), f"expression {expr!r} repeats a token: greedy could not follow it"
    pairs = list(zip(seq[:-1], seq[1:]))
    return pairs + [(SP["<|output_end|>"], SP["<|assistant_end|>"])]


def run_engine(mods, tok, model, prompt, num_samples, max_tokens):
    engine = mods["engine"].Engine(model, tok)
    ends = (SP["<|assistant_end|>"], SP["<|bos|>"])
    rows = [{"tokens": [], "mask": [], "stop_token": -1} for _ in range(num_samples)]
    done = [False] * num_samples
    gaps = []
    for step, (column, masks) in enumerate(engine.generate(prompt, num_samples=num_samples, max_tokens=max_tokens,
                                                           temperature=0.0)):
        for i, (t, m) in enumerate(zip(column, masks)):
            if done[i]:
                continue
            if m == 1:  # a sampled (argmax) decision: it must be unambiguous in float32
                g = model.gaps[step]  # step 0: the batch-1 prefill's logits, shared by every row
                gaps.append(g[i] if len(g) > i else g[0])
            if t in ends:
                done[i] = True
                rows[i]["stop_token"] = t
            else:
                rows[i]["tokens"].append(t)
                rows[i]["mask"].append(m)
        if all(done):
            break
    return rows, min(gaps)


def render_prompt(tok, user, assistant_prefix=""):
    conv = {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": "x"}]}
    ids = tok.render_for_completion(conv)
    return ids + tok.encode(assistant_prefix) if assistant_prefix else ids


MODELS = [
    # name, seed, planted expression, what the calculator does with it
    ("tool_int", 11, "12*34", "integer product"),
    ("tool_float", 12, "7/2", "true division: a float"),
    ("tool_refused", 13, "9/0", "division by zero: refused, nothing forced"),
]


def main():
    git_dir = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/karpathy+nanochat/repo"
    NanochatGPT, NanochatConfig = nanochat_gpt_class(git_dir)
    mods = nanochat_modules(git_dir)
    enc = tiktoken.Encoding(name="bytes", pat_str=PATTERN, mergeable_ranks={bytes([i]): i for i in range(256)},
                            special_tokens=SP)
    tok = mods["tokenizer"].RustBPETokenizer(enc, "<|bos|>")
    out_dir = os.path.join(ROOT, "tests", "fixtures", "chat")
    os.makedirs(out_dir, exist_ok=True)
    for name, seed, expr, _ in MODELS:
        cfg, P = make_model(seed, chain(expr))
        net = NanochatGPT(NanochatConfig(**json.loads(cfg.to_json())))
        net.init_weights()
        net.load_state_dict({k: v.clone() for k, v in P.items()}, strict=True)
        net.eval()
        P64 = {k: v.double() for k, v in P.items()}
        cases = []
        specs = [
            ("tool_call", render_prompt(tok, "Please compute this."), 1, 40),
            ("tool_call_3_rows", render_prompt(tok, "Again, compute it."), 3, 40),
            ("tool_call_cut", render_prompt(tok, "Compute."), 1, 9),
            ("free_text", tok.encode("The capital of France is", prepend=tok.get_bos_token_id()), 1, 24),
            ("free_text_in_answer", render_prompt(tok, "Say something.", "Well,"), 2, 20),
        ]
        for cname, prompt, n, mx in specs:
            rows, gap = run_engine(mods, tok, Recording(net), prompt, n, mx)
            # cross-check: the float64 reference forward makes the same generation
            ref_rows, _ = run_engine(mods, tok, RefModel(P64, cfg), prompt, n, mx)
            if ref_rows != rows:
                sys.exit(f"{name}/{cname}: nanochat's GPT and the reference forward disagree")
            if gap < MIN_GAP:
                sys.exit(f"{name}/{cname}: a greedy decision has a gap of {gap:.2e} < {MIN_GAP}; change the seed")
            cases.append({"name": cname, "prompt": prompt, "num_samples": n, "max_tokens": mx, "rows": rows,
                          "min_gap": gap})
            print(f"{name}/{cname}: min gap {gap:.3g}; row 0: {tok.decode(rows[0]['tokens'])!r} "
                  f"stop {rows[0]['stop_token']}")
        forced = any(0 in r["mask"] for c in cases for r in c["rows"])
        if expr != "9/0" and not forced:
            sys.exit(f"{name}: the planted tool call did not run")
        tensors = [("param." + k, v.numpy().astype(np.float32)) for k, v in P.items()]
        meta = {"config": json.dumps({"sequence_len": cfg.sequence_len, "vocab_size": cfg.vocab_size,
                                      "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_kv_head": cfg.n_kv_head,
                                      "n_embd": cfg.n_embd, "window_pattern": cfg.window_pattern}),
                "cases": json.dumps(cases), "expression": expr}
        path = os.path.join(out_dir, f"engine_{name}.safetensors")
        ref.save_safetensors(path, tensors, meta)
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
