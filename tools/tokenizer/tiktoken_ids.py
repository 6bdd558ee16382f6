#!/usr/bin/env python3
"""Dev-time truth for the C++ encoder: encode texts with tiktoken using OUR exported tokenizer.

Loads DIR/tokenizer.ranks (tiktoken format: base64 bytes + rank) and DIR/tokenizer.json (split
pattern, special tokens) written by nanochat.cpp's Tokenizer::save, builds
tiktoken.Encoding(pat_str=pattern, mergeable_ranks=..., special_tokens=...) exactly as nanochat
wraps its rustbpe output (docs/nanochat.md 6.2), and encodes every input with encode_ordinary.

usage:
  tiktoken_ids.py DIR TEXTFILE... > ids.json      # {"<basename>": [ids...], ...} one entry per file
  tiktoken_ids.py DIR --jsonl DOCS.jsonl > ids.txt  # one line of space-separated ids per {"text"} doc

Needs `pip install tiktoken` (dev time only; the product and CI never import it). Files are read as
bytes and decoded as strict UTF-8 (no newline translation), so inputs must be valid UTF-8
(tiktoken takes str; invalid bytes are a C++-only extension tested elsewhere).
"""
import json
import os
import sys

import tiktoken
from tiktoken.load import load_tiktoken_bpe


def load_encoding(d):
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        meta = json.load(f)
    ranks = load_tiktoken_bpe(os.path.join(d, "tokenizer.ranks"))
    return tiktoken.Encoding(
        name="nanochat-cpp",
        pat_str=meta["pattern"],
        mergeable_ranks=ranks,
        special_tokens=meta["special_tokens"],
    )


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    enc = load_encoding(sys.argv[1])
    if sys.argv[2] == "--jsonl":
        out = sys.stdout
        with open(sys.argv[3], encoding="utf-8") as f:
            for line in f:
                ids = enc.encode_ordinary(json.loads(line)["text"])
                out.write(" ".join(map(str, ids)) + "\n")
        return
    result = {}
    for path in sys.argv[2:]:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")  # bytes as they are (no newline translation)
        ids = enc.encode_ordinary(text)
        assert enc.decode(ids) == text
        result[os.path.basename(path)] = ids
    json.dump(result, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
