#!/usr/bin/env python3
"""Regenerates the tokenizer test fixtures in tests/fixtures/tokenizer/ (dev time only).

Independent truths, none produced by our C++ code:
  train_docs.jsonl   training documents: paragraphs of Austen's "Persuasion" (public domain; the
                     first --persuasion-chars characters) + multilingual.txt + code.txt
  small_tok/         nanochat's own trainer, rustbpe (PyPI), run on train_docs.jsonl at
                     vocab VOCAB (VOCAB-9 mergeable, nanochat's pattern), written in our file
                     format by this script: tokenizer.ranks, tokenizer.json (incl. the FNV-1a hash
                     computed here), token_bytes.bin
  tiktoken_ids.json  tiktoken.Encoding built from small_tok (tiktoken_ids.py) encoding
                     multilingual.txt, code.txt, emma_ch1.txt, tricky.txt
  split_fuzz.json    random strings over a nasty alphabet and their chunks under Python's `regex`
                     module (same semantics as tiktoken's fancy-regex: \\s = White_Space)

usage: pip install rustbpe tiktoken regex
       tools/tokenizer/make_fixtures.py AUSTEN_DIR   (a folder holding persuasion.txt and
       emma.txt, Jane Austen's novels as plain text, e.g. from Project Gutenberg)
"""
import argparse
import base64
import json
import os
import random
import struct
import subprocess
import sys

import regex
import rustbpe

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "fixtures", "tokenizer"))
PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
            "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]
VOCAB = 2048


def fnv_hash(pattern, tokens):
    """Tokenizer::hash(): FNV-1a 64 over length-prefixed (u32 LE) fields, see tokenizer.cpp."""
    h = 0xcbf29ce484222325

    def feed(b):
        nonlocal h
        for c in b:
            h ^= c
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF

    def s(b):
        feed(struct.pack("<I", len(b)))
        feed(b)

    s(b"nanochat.cpp tokenizer v1")
    s(pattern.encode())
    feed(struct.pack("<I", len(tokens)))
    for t in tokens:
        s(t)
    for i, name in enumerate(SPECIALS):
        s(name.encode())
        feed(struct.pack("<I", len(tokens) + i))
    return "%016x" % h


def write_tokenizer_dir(d, tokens):
    os.makedirs(d, exist_ok=True)
    m = len(tokens)
    with open(os.path.join(d, "tokenizer.ranks"), "wb") as f:
        for r, t in enumerate(tokens):
            f.write(base64.b64encode(t) + b" " + str(r).encode() + b"\n")
    meta = {"format": "nanochat.cpp-tokenizer-v1", "pattern": PATTERN, "num_mergeable": m,
            "vocab_size": m + len(SPECIALS),
            "special_tokens": {n: m + i for i, n in enumerate(SPECIALS)},
            "hash": fnv_hash(PATTERN, tokens)}
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(d, "token_bytes.bin"), "wb") as f:
        f.write(struct.pack("<%di" % (m + len(SPECIALS)), *([len(t) for t in tokens] + [0] * len(SPECIALS))))


def paragraphs(text):
    return [p.strip("\n") + "\n" for p in text.split("\n\n") if p.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("austen_dir")
    ap.add_argument("--persuasion-chars", type=int, default=90000)
    args = ap.parse_args()

    with open(os.path.join(args.austen_dir, "persuasion.txt"), encoding="utf-8") as f:
        persuasion = f.read()[: args.persuasion_chars]
    with open(os.path.join(args.austen_dir, "emma.txt"), encoding="utf-8") as f:
        emma = f.read()
    start = emma.index("CHAPTER I\n")
    end = emma.index("CHAPTER II\n")
    with open(os.path.join(FIX, "emma_ch1.txt"), "w", encoding="utf-8") as f:
        f.write(emma[start:end])
    with open(os.path.join(FIX, "multilingual.txt"), encoding="utf-8", newline="") as f:
        multi = f.read()
    with open(os.path.join(FIX, "code.txt"), encoding="utf-8", newline="") as f:
        code = f.read()

    docs = paragraphs(persuasion) + paragraphs(multi) + [code]
    with open(os.path.join(FIX, "train_docs.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")

    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(docs), VOCAB - len(SPECIALS), pattern=PATTERN)
    ranks = sorted(((r, bytes(b)) for b, r in tok.get_mergeable_ranks()))
    assert [r for r, _ in ranks] == list(range(len(ranks)))
    tokens = [b for _, b in ranks]
    assert len(tokens) == VOCAB - len(SPECIALS), len(tokens)
    write_tokenizer_dir(os.path.join(FIX, "small_tok"), tokens)

    texts = [os.path.join(FIX, n) for n in ["multilingual.txt", "code.txt", "emma_ch1.txt", "tricky.txt"]]
    out = subprocess.run([sys.executable, os.path.join(HERE, "tiktoken_ids.py"), os.path.join(FIX, "small_tok")] + texts,
                         check=True, capture_output=True).stdout
    with open(os.path.join(FIX, "tiktoken_ids.json"), "wb") as f:
        f.write(out)

    rng = random.Random(1234)
    alphabet = list("aZ 09'sStTlLvVrReEdDmM\n\r\t.,!?-_()\"\\") + [
        "\u00a0", "\u3000", "\u2028", "\u0085", "\u200b", "\u180e", "\u2009", "\x0b", "\x0c", "\x1c",
        "\u00ad", "é", "ß", "ж", "中", "😀", "👍🏽", "١", "Ⅻ", "²", "½", "\u0301", "ſ", "K", "ǅ", "\ufeff"]
    rx = regex.compile(PATTERN)
    cases = []
    for _ in range(400):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
        cases.append({"text": s, "chunks": rx.findall(s)})
    with open(os.path.join(FIX, "split_fuzz.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=True, indent=0)
        f.write("\n")
    print("wrote fixtures to", FIX, "docs", len(docs), "mergeable", len(tokens))


if __name__ == "__main__":
    main()
