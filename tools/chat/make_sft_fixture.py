#!/usr/bin/env python3
"""Writes tests/fixtures/sft/: nanochat's own chat SFT packing and one SFT optimizer step, for
tests/train/sft_parity_test.cpp.

What runs is nanochat's code at the mirror's HEAD, executed as is:
  * sft_data_generator_bos_bestfit, taken out of scripts/chat_sft.py with `ast` and executed with
    the globals the script gives it (args, tokenizer, train_dataset, ddp_rank 0 of 1, ...), over
    the conversations of train.jsonl rendered by nanochat's RustBPETokenizer on the first 300 tokens
    of the small test tokenizer (tests/fixtures/tokenizer/small_tok; as
    tools/chat/make_conversation_fixture.py builds it);
  * nanochat's GPT and MuonAdamW (nanochat/gpt.py, nanochat/optim.py, float32, with the shims of
    tools/reference/crosscheck_nanochat.py) on a tiny model: two "pretraining" steps on random
    tokens give the optimizer moments, which are saved as nanochat saves them (torch.save of
    optimizer.state_dict(): optim_000002_rank0.pt); then chat_sft's optimizer set-up (fresh lrs,
    weight_decay 0, load_state_dict, lrs restored, x init_lr_frac) and one SFT step on the first
    packed batch with chat_sft's schedules.

Files: train.jsonl (the conversations), packing.json (every generator call of one epoch: inputs,
targets, last_step, approx_progress, epoch), step.safetensors (param.* before, sft1.* after the
step, the batch, the loss and the settings in its metadata), optim_000002_rank0.pt.

usage: /work/venv/bin/python tools/chat/make_sft_fixture.py [NANOCHAT_GIT_DIR]
       (needs torch and tiktoken; default git dir /work/.mirror/karpathy+nanochat/repo)
"""
import ast
import json
import os
import random
import subprocess
import sys
import types

import numpy as np
import tiktoken
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
sys.path.insert(0, os.path.join(ROOT, "tools", "tokenizer"))
from make_conversation_fixture import nanochat_tokenizer_module  # noqa: E402
from tiktoken_ids import load_encoding  # noqa: E402
import crosscheck_nanochat as cc  # noqa: E402
import nanochat_ref as ref  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "sft")
T = 96           # --max-seq-len
B = 4            # --device-batch-size: rows of one generator call (one step at W = 1)
INIT_LR_FRAC = 0.8
LRS = dict(unembedding_lr=0.008, embedding_lr=0.3, matrix_lr=0.02)   # as inherited from the base run
BASE_WD = 0.1    # the Muon weight decay base_train's last step set (kept by load_state_dict)

WORDS = ("apple river stone cloud green quick seven violin table yellow garden silver window "
         "number orange planet simple coffee little moment").split()


NUM_MERGEABLE = 300  # the small test tokenizer's first 300 tokens (a smaller model, a smaller fixture)


def small_encoding():
    """small_tok cut to its first NUM_MERGEABLE tokens (a BPE cut at a rank is a BPE: every merge
    joins lower-ranked tokens), the specials after them: Tokenizer::from_tokens of the same tokens."""
    full = load_encoding(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "small_tok"))
    ranks = {full.decode_single_token_bytes(r): r for r in range(NUM_MERGEABLE)}
    names = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
             "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]
    return tiktoken.Encoding(name="sft-fixture", pat_str=full._pat_str, mergeable_ranks=ranks,
                             special_tokens={n: NUM_MERGEABLE + i for i, n in enumerate(names)})


def conversations(rng):
    convs = []
    for i in range(36):
        w = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
        kind = i % 4
        if kind == 0:
            m = [{"role": "user", "content": "Repeat: " + w(rng.randint(1, 5))},
                 {"role": "assistant", "content": w(rng.randint(1, 6))}]
        elif kind == 1:
            m = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": w(rng.randint(1, 3))},
                 {"role": "assistant", "content": w(rng.randint(2, 8))}]
        elif kind == 2:
            a, b = rng.randint(1, 99), rng.randint(1, 99)
            m = [{"role": "user", "content": f"What is {a}+{b}?"},
                 {"role": "assistant", "content": [{"type": "python", "text": f"{a}+{b}"},
                                                    {"type": "python_output", "text": str(a + b)},
                                                    {"type": "text", "text": f"It is {a + b}."}]}]
        else:
            m = [{"role": "user", "content": w(2)}, {"role": "assistant", "content": w(3)},
                 {"role": "user", "content": w(rng.randint(1, 4))}, {"role": "assistant", "content": w(2)}]
        convs.append({"messages": m})
    return convs


def nanochat_generator(git_dir, tokenizer, dataset):
    """sft_data_generator_bos_bestfit from scripts/chat_sft.py with its module globals."""
    src = subprocess.check_output(["git", "--git-dir", git_dir, "show", "HEAD:scripts/chat_sft.py"], text=True)
    fn = next(n for n in ast.parse(src).body
              if isinstance(n, ast.FunctionDef) and n.name == "sft_data_generator_bos_bestfit")
    g = {"torch": torch, "tokenizer": tokenizer, "train_dataset": dataset, "val_dataset": dataset,
         "ddp_rank": 0, "ddp_world_size": 1, "device_type": "cpu", "device": "cpu",
         "args": types.SimpleNamespace(max_seq_len=T, device_batch_size=B, num_iterations=-1),
         "last_step": False, "approx_progress": 0.0, "current_epoch": 1}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "scripts/chat_sft.py", "exec"), g)
    return g


def sft_step(model, sd_path, x, y, progress):
    """chat_sft.py's optimizer set-up on `model` (fresh lrs, weight_decay 0, the saved state loaded,
    lrs restored, x init_lr_frac) and its step 0 on (x, y). Returns loss, lrm, momentum, Muon wd."""
    opt = model.setup_optimizer(**LRS, weight_decay=0.0)
    base_lrs = [grp["lr"] for grp in opt.param_groups]
    opt.load_state_dict(torch.load(sd_path))
    for grp, lr in zip(opt.param_groups, base_lrs):
        grp["lr"] = lr
    for grp in opt.param_groups:
        grp["lr"] = grp["lr"] * INIT_LR_FRAC
        grp["initial_lr"] = grp["lr"]
    loss = model(x, y)
    loss.backward()
    warmup, warmdown, final = 0.0, 0.5, 0.0  # chat_sft.py's defaults
    if progress < warmup:
        lrm = (progress + 1e-8) / warmup
    elif progress <= 1.0 - warmdown:
        lrm = 1.0
    else:
        d = (progress - (1.0 - warmdown)) / warmdown
        lrm = (1 - d) * 1.0 + d * final
    momentum = 0.85  # get_muon_momentum(0)
    for grp in opt.param_groups:
        grp["lr"] = grp["initial_lr"] * lrm
        if grp["kind"] == "muon":
            grp["momentum"] = momentum
    muon_wd = [grp["weight_decay"] for grp in opt.param_groups if grp["kind"] == "muon"][0]
    opt.step()
    return loss.item(), lrm, momentum, muon_wd


def main():
    git_dir = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/karpathy+nanochat/repo"
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    convs = conversations(random.Random(5))
    with open(os.path.join(OUT, "train.jsonl"), "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps(c) + "\n")
    tokmod = nanochat_tokenizer_module(git_dir)
    tok = tokmod.RustBPETokenizer(small_encoding(), "<|bos|>")
    assert max(len(tok.render_conversation(c)[0]) for c in convs) <= T + 1, "a conversation longer than a row"

    # packing: one epoch of generator calls, with the globals the loop reads after each
    g = nanochat_generator(git_dir, tok, convs)
    gen = g["sft_data_generator_bos_bestfit"]("train")
    calls = []
    for _ in range(100):
        x, y = next(gen)
        calls.append({"inputs": x.tolist(), "targets": y.tolist(), "last_step": g["last_step"],
                      "approx_progress": g["approx_progress"], "epoch": g["current_epoch"]})
        if g["last_step"]:
            break
    # nanochat's loop ends at the step whose rows are the call that set last_step; one more call
    # is the look-ahead a step before it fetched (asserted: the epoch ends within the calls made)
    assert calls[-1]["last_step"], "one epoch did not end"
    with open(os.path.join(OUT, "packing.json"), "w") as f:
        json.dump({"source": "nanochat scripts/chat_sft.py sft_data_generator_bos_bestfit", "T": T, "B": B,
                   "dataset_size": len(convs), "calls": calls}, f)

    # one SFT step on nanochat's model and optimizer
    cc.install_shims()
    gpt, _optim = cc.import_nanochat(git_dir)
    cfg = gpt.GPTConfig(sequence_len=T, vocab_size=tok.get_vocab_size(), n_layer=2, n_head=1, n_kv_head=1,
                        n_embd=24, window_pattern="SL")
    torch.manual_seed(0)
    model = gpt.GPT(cfg)
    model.init_weights()
    with torch.no_grad():  # non-degenerate weights (nanochat's init zeroes projections)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    base_opt = model.setup_optimizer(**LRS, weight_decay=0.28, scalar_lr=0.5)
    gen_tok = torch.Generator().manual_seed(1)
    for it in range(2):
        xb = torch.randint(0, cfg.vocab_size, (B, T), generator=gen_tok)
        yb = torch.randint(0, cfg.vocab_size, (B, T), generator=gen_tok)
        model(xb, yb).backward()
        for grp in base_opt.param_groups:
            grp["lr"] = grp["initial_lr"] * 1.0
            if grp["kind"] == "muon":
                grp["momentum"], grp["weight_decay"] = 0.9, BASE_WD
        base_opt.step()
        model.zero_grad(set_to_none=True)
    torch.save(base_opt.state_dict(), os.path.join(OUT, "optim_000002_rank0.pt"))
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}

    sd_path = os.path.join(OUT, "optim_000002_rank0.pt")
    x = torch.tensor(calls[0]["inputs"], dtype=torch.int32)
    y = torch.tensor(calls[0]["targets"], dtype=torch.int64)
    progress = calls[1]["approx_progress"]  # chat_sft.py's step 0: after the look-ahead call
    loss, lrm, momentum, muon_wd = sft_step(model, sd_path, x, y, progress)
    after = {k: v.detach().clone() for k, v in model.state_dict().items()}

    # the same step in float64: elements where nanochat's own float32 result is 1e-5 of its tensor's
    # scale away from it are rounding noise amplified (e.g. a gradient that cancels to ~1e-8 under
    # AdamW's normalisation); the test leaves them out, as tests/model/parity_test.cpp does
    gpt.COMPUTE_DTYPE = torch.float64
    model64 = gpt.GPT(cfg)
    model64.init_weights()
    model64.load_state_dict(before)
    model64.double()
    sft_step(model64, sd_path, x, y, progress)
    ambiguous = {}
    for k, v in after.items():
        v64 = model64.state_dict()[k]
        bad = ((v.double() - v64).abs() > 1e-5 * v64.abs().max()).numpy()
        if bad.any():
            ambiguous[k] = bad.reshape(-1).nonzero()[0].astype(np.int64)
    print("ambiguous elements:", {k: len(v) for k, v in ambiguous.items()})

    tensors = {f"param.{k}": v.numpy().astype(np.float32) for k, v in before.items()}
    tensors.update({f"sft1.{k}": v.numpy().astype(np.float32) for k, v in after.items()})
    tensors.update({f"ambiguous.{k}": v for k, v in ambiguous.items()})
    tensors["idx"] = x.numpy().astype(np.int64)
    tensors["targets"] = y.numpy().astype(np.int64)
    tensors = list(tensors.items())
    meta = {"config": json.dumps(dict(sequence_len=T, vocab_size=cfg.vocab_size, n_layer=2, n_head=1, n_kv_head=1,
                                      n_embd=24, window_pattern="SL")),
            "lrs": json.dumps(LRS), "init_lr_frac": repr(INIT_LR_FRAC), "lrm": repr(lrm), "progress": repr(progress),
            "momentum": repr(momentum), "muon_weight_decay": repr(muon_wd), "loss": repr(loss),
            "source": "nanochat scripts/chat_sft.py optimizer set-up and step, nanochat/gpt.py, nanochat/optim.py"}
    ref.save_safetensors(os.path.join(OUT, "step.safetensors"), tensors, meta)
    print(f"wrote {OUT}: {len(convs)} conversations, {len(calls)} generator calls, loss {loss:.6f}, "
          f"lrm {lrm}, muon wd {muon_wd}")


if __name__ == "__main__":
    main()
