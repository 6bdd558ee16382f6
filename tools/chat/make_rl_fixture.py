#!/usr/bin/env python3
"""Writes tests/fixtures/chat/rl_pg.safetensors: the policy-gradient loss and gradients of
nanochat's chat_rl (scripts/chat_rl.py, the training loop's pass: padding with <|assistant_end|>,
inputs ids[:, :-1], targets ids[:, 1:] with -1 where mask[1:] is 0, logp = -model(inputs, targets,
loss_reduction='none'), pg_obj = sum(logp * advantages) / (num_valid * num_passes *
examples_per_rank), loss = -pg_obj, backward) computed with nanochat's own GPT (nanochat/gpt.py,
float32, CPU) on a small model (byte-level vocabulary of 265, d32, 3 layers (with 2 the backout
layer is the last one, whose gradient is zero up to rounding); tools/reference/nanochat_ref.py
init_params: nanochat's shapes, every weight nonzero, so that every tensor has a gradient).

One example of 8 samples in 2 passes of 4 rows (examples_per_rank = 2, so each pass divides by
num_valid * 2 * 2): rows of different lengths, masks with the prompt and a forced tool span at 0,
a row whose answer is entirely forced (no valid target), advantages from rewards (one row with
advantage 0). The gradients accumulate over both passes, as in chat_rl.

File: param.<state_dict key> and grad.<state_dict key> (F32), metadata "config" (model_config JSON), "rollout" (JSON: prefix_length,
sequences, masks, rewards, advantages, device_batch_size, examples_per_rank) and "losses" (the two
passes' loss.item()).

usage: /work/venv/bin/python tools/chat/make_rl_fixture.py [NANOCHAT_GIT_DIR]   (torch, tiktoken)
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import make_engine_fixture as mef  # noqa: E402

ref = mef.ref
ASSISTANT_END = mef.SP["<|assistant_end|>"]


def rollout():
    g = torch.Generator().manual_seed(5)
    prompt = [mef.SP["<|bos|>"], mef.SP["<|user_start|>"]] + list(b"How much is 3+4?") + \
        [mef.SP["<|user_end|>"], mef.SP["<|assistant_start|>"]]
    P = len(prompt)
    lengths = [6, 11, 3, 9, 1, 14, 7, 5]  # answer tokens per sample
    sequences, masks = [], []
    for i, n in enumerate(lengths):
        ans = torch.randint(0, 256, (n,), generator=g).tolist()
        m = [1] * n
        if i == 1:  # a tool call: python block sampled, its output forced
            ans = [mef.SP["<|python_start|>"]] + list(b"3+4") + [mef.SP["<|python_end|>"], mef.SP["<|output_start|>"],
                                                                  ord("7"), mef.SP["<|output_end|>"]] + ans[:3]
            m = [1, 1, 1, 1, 1, 0, 0, 0] + [1] * 3
        if i == 4:  # one forced token only: no valid target in this row
            m = [0]
        sequences.append(prompt + ans)
        masks.append([0] * P + m)
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0]
    mu = sum(rewards) / len(rewards)
    advantages = [r - mu for r in rewards]
    advantages[7] = 0.0  # a row that must add nothing (reward equal to the mean)
    rewards[7] = mu
    return P, sequences, masks, rewards, advantages


def main():
    git_dir = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/karpathy+nanochat/repo"
    NanochatGPT, NanochatConfig = mef.nanochat_gpt_class(git_dir)
    cfg = ref.GPTConfig(sequence_len=64, vocab_size=265, n_layer=3, n_head=2, n_kv_head=2, n_embd=32,
                        window_pattern="L")
    P = ref.init_params(cfg, 21)
    net = NanochatGPT(NanochatConfig(**json.loads(cfg.to_json())))
    net.init_weights()
    net.load_state_dict({k: v.clone() for k, v in P.items()}, strict=True)
    net.train()
    prefix, sequences, masks, rewards, advantages = rollout()
    device_batch_size, examples_per_rank = 4, 2
    # chat_rl.py get_batch(): pad, shift, mask
    max_length = max(len(s) for s in sequences)
    ids = torch.tensor([s + [ASSISTANT_END] * (max_length - len(s)) for s in sequences], dtype=torch.long)
    mask_ids = torch.tensor([m + [0] * (max_length - len(m)) for m in masks], dtype=torch.long)
    inputs_all = ids[:, :-1]
    targets_all = ids[:, 1:].clone()
    targets_all[mask_ids[:, 1:] == 0] = -1
    advantages_all = torch.tensor(advantages, dtype=torch.float)
    # chat_rl.py training loop: one example, num_passes passes
    num_passes = inputs_all.size(0) // device_batch_size
    losses = []
    net.zero_grad(set_to_none=True)
    for pass_idx in range(num_passes):
        b0, b1 = pass_idx * device_batch_size, (pass_idx + 1) * device_batch_size
        inputs, targets, adv = inputs_all[b0:b1], targets_all[b0:b1], advantages_all[b0:b1]
        logp = -net(inputs, targets, loss_reduction='none').view_as(inputs)
        pg_obj = (logp * adv.unsqueeze(-1)).sum()
        num_valid = (targets >= 0).sum().clamp(min=1)
        pg_obj = pg_obj / (num_valid * num_passes * examples_per_rank)
        loss = -pg_obj
        loss.backward()
        losses.append(loss.item())
    out = [("param." + k, v.numpy().astype(np.float32)) for k, v in P.items()]
    for name, p in net.named_parameters():
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        want = tuple(P[name].shape)
        grad = grad[tuple(slice(0, n) for n in want)]  # nanochat pads the vocabulary rows
        out.append(("grad." + name, grad.detach().numpy().astype(np.float32)))
    meta_out = {"rollout": json.dumps({"prefix_length": prefix, "sequences": sequences, "masks": masks, "rewards": rewards,
                                       "advantages": advantages, "device_batch_size": device_batch_size,
                                       "examples_per_rank": examples_per_rank}),
                "losses": json.dumps(losses),
                "config": json.dumps({"sequence_len": cfg.sequence_len, "vocab_size": cfg.vocab_size,
                                      "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_kv_head": cfg.n_kv_head,
                                      "n_embd": cfg.n_embd, "window_pattern": cfg.window_pattern})}
    path = os.path.join(ROOT, "tests", "fixtures", "chat", "rl_pg.safetensors")
    ref.save_safetensors(path, out, meta_out)
    print(f"losses {losses}; wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
