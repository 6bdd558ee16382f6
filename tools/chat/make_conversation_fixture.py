#!/usr/bin/env python3
"""Writes tests/fixtures/chat/conversations.json: conversations rendered by nanochat's own
RustBPETokenizer.render_conversation / render_for_completion (nanochat/tokenizer.py at the commit
the mirror's HEAD holds) with the small test tokenizer (tests/fixtures/tokenizer/small_tok).

nanochat's tokenizer.py is read from a nanochat git directory and executed as is; its module-level
`import rustbpe` (needed only to train) is satisfied by an empty stand-in, and the tokenizer is
built with the class's own constructor from a tiktoken.Encoding of small_tok's ranks, exactly as
RustBPETokenizer.train_from_iterator builds it.

usage: /work/venv/bin/python tools/chat/make_conversation_fixture.py [NANOCHAT_GIT_DIR]
       (needs `pip install tiktoken`; default git dir /work/.mirror/karpathy+nanochat/repo)
"""
import json
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "tokenizer"))
from tiktoken_ids import load_encoding  # noqa: E402


def nanochat_tokenizer_module(git_dir):
    src = subprocess.check_output(["git", "--git-dir", git_dir, "show", "HEAD:nanochat/tokenizer.py"], text=True)
    sys.modules.setdefault("rustbpe", types.ModuleType("rustbpe"))
    mod = types.ModuleType("nanochat_tokenizer")
    exec(compile(src, "nanochat/tokenizer.py", "exec"), mod.__dict__)
    return mod


def U(t):
    return {"role": "user", "content": t}


def A(c):
    return {"role": "assistant", "content": c}


def S(t):
    return {"role": "system", "content": t}


def P(kind, text):
    return {"type": kind, "text": text}


CASES = [
    ("one_turn", [U("Hello there!"), A("Hi! How can I help you today?")], None),
    ("system_merged", [S("You are a terse assistant."), U("Name a color."), A("Blue.")], None),
    ("two_turns", [U("What is 2+2?"), A("4."), U("And times three?"), A("12, since 4 x 3 = 12.")], None),
    ("tool_call", [U("How many r's are in strawberry?"),
                   A([P("text", "Let me count. "), P("python", "'strawberry'.count('r')"),
                      P("python_output", "3"), P("text", "There are 3 r's in strawberry.")])], None),
    ("arithmetic_tool", [S("Use the calculator."), U("What is 1,234 * 56?"),
                         A([P("python", "1234*56"), P("python_output", "69104"), P("text", "1,234 x 56 = 69,104.")]),
                         U("Thanks"), A("You're welcome!")], None),
    ("ends_with_user", [U("First question"), A("First answer"), U("Second question")], None),
    ("unicode", [U("Ça va? 日本語 🙂\nnew line\ttab"), A("Très bien — merci! ✓")], None),
    ("empty_strings", [U(""), A("")], None),
    ("list_single_text", [U("Say hi"), A([P("text", "hi")])], None),
    ("truncated_in_assistant", [U("Tell me a long story about a dragon."),
                                A("Once upon a time, a dragon lived in a cave by the sea, and every morning it flew out.")],
     20),
    ("truncated_in_user", [S("System prompt that is fairly long, with many words in it."), U("Question?"), A("Answer.")],
     7),
    ("truncated_one", [U("Hi"), A("Hello")], 1),
]

ERRORS = [
    ("assistant_first", [A("Hi"), U("Hello")]),
    ("two_users", [U("a"), U("b")]),
    ("system_then_assistant", [S("sys"), A("a")]),
    ("system_in_middle", [U("a"), A("b"), S("c"), A("d")]),
    ("unknown_part", [U("a"), A([P("image", "x")])]),
]


def main():
    git_dir = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/karpathy+nanochat/repo"
    mod = nanochat_tokenizer_module(git_dir)
    enc = load_encoding(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "small_tok"))
    tok = mod.RustBPETokenizer(enc, "<|bos|>")
    out = {"source": "nanochat/tokenizer.py render_conversation / render_for_completion", "cases": [], "errors": []}
    for name, messages, max_tokens in CASES:
        conv = {"messages": messages}
        kw = {} if max_tokens is None else {"max_tokens": max_tokens}
        ids, mask = tok.render_conversation(conv, **kw)
        case = {"name": name, "conversation": conv, "max_tokens": max_tokens, "ids": ids, "mask": mask}
        if messages[-1]["role"] == "assistant":
            case["completion_ids"] = tok.render_for_completion(conv)
        out["cases"].append(case)
    for name, messages in ERRORS:
        try:
            tok.render_conversation({"messages": messages})
        except (AssertionError, ValueError) as e:
            out["errors"].append({"name": name, "conversation": {"messages": messages}, "python_error": type(e).__name__})
            continue
        sys.exit(f"nanochat accepted the conversation {name}")
    path = os.path.join(ROOT, "tests", "fixtures", "chat", "conversations.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        # one case per line: small, diffable
        f.write("{\"source\": %s,\n" % json.dumps(out["source"]))
        for key in ("cases", "errors"):
            rows = [json.dumps(c, ensure_ascii=False) for c in out[key]]
            f.write(" %s: [\n  %s\n ]%s\n" % (json.dumps(key), ",\n  ".join(rows), "," if key == "cases" else ""))
        f.write("}\n")
    print(f"wrote {path}: {len(out['cases'])} cases, {len(out['errors'])} refused")


if __name__ == "__main__":
    main()
