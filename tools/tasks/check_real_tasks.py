#!/usr/bin/env python3
"""Real datasets through our task readers and nanochat's, side by side (dev-time check).

  /work/venv/bin/python tools/tasks/check_real_tasks.py NANOCHAT_CHECKOUT OUT_DIR \
      [--gsm8k DIR] [--socratic] [--humaneval FILE]
  NANOCHAT_TASK_DATA=OUT_DIR build/tests/test_tasks --gtest_filter='HubTasks.*'

The hub's parquet files cannot be fetched on every machine; the same datasets are published
elsewhere in their original form, with the columns the hub's exports carry:
  --gsm8k DIR      train.jsonl and test.jsonl of GSM8K (github.com/openai/grade-school-math,
                   grade_school_math/data/): question, answer (and train_socratic.jsonl /
                   test_socratic.jsonl with --socratic)
  --humaneval FILE HumanEval.jsonl.gz or .jsonl (github.com/openai/human-eval, data/): task_id,
                   prompt, canonical_solution, test, entry_point
This writes them as parquet in nanochat's hub layout under OUT_DIR/task_data (pyarrow's default
layout: snappy, dictionary pages, as the hub's exports are written) and OUT_DIR/expected.json
with what nanochat's own tasks (tasks/gsm8k.py, tasks/humaneval.py in NANOCHAT_CHECKOUT) make of
them: every example in nanochat's order, GSM8K's verdicts and rewards on a set of completions,
and HumanEval's verdicts on each problem's own solution and three wrong ones (nanochat executes
them). tests/tasks/registry_test.cpp then compares ours on the same files when
NANOCHAT_TASK_DATA points there (the cases whose data is absent are skipped).

NANOCHAT_CHECKOUT: nanochat at the commit docs/nanochat.md follows, e.g.
  mkdir /tmp/nanochat-ref && git -C /work/.mirror/karpathy+nanochat/repo archive HEAD tasks nanochat | tar -x -C /tmp/nanochat-ref
Needs pyarrow, numpy, filelock and torch (nanochat.common imports it) in the venv.
"""
import argparse
import gzip
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

GSM = pa.schema([("question", pa.string()), ("answer", pa.string())])
HUMANEVAL = pa.schema([("task_id", pa.string()), ("prompt", pa.string()), ("canonical_solution", pa.string()),
                       ("test", pa.string()), ("entry_point", pa.string())])
GSM_COMPLETIONS = ["#### 10", "so #### 1,234 done", "#### -5", "no marker", "#### 3.50", "#### 18", "#### 3",
                   "#### 70000", "#### 2\n#### 10"]


def read_jsonl(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write(out, repo, subset, split, rows, schema):
    d = os.path.join(out, "task_data", repo.replace("/", "--"), subset, split)
    os.makedirs(d, exist_ok=True)
    table = pa.Table.from_pylist([{k: r[k] for k in schema.names} for r in rows], schema=schema)
    pq.write_table(table, os.path.join(d, "00000.parquet"))
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(["00000.parquet"], f)
    print(f"wrote {d}: {len(rows)} rows", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("nanochat")
    ap.add_argument("out")
    ap.add_argument("--gsm8k", help="folder with GSM8K's train.jsonl and test.jsonl")
    ap.add_argument("--socratic", action="store_true", help="also the socratic subset (*_socratic.jsonl)")
    ap.add_argument("--humaneval", help="HumanEval.jsonl.gz")
    a = ap.parse_args()
    if not a.gsm8k and not a.humaneval:
        ap.error("give --gsm8k and/or --humaneval")
    out = os.path.abspath(a.out)
    subsets = []
    if a.gsm8k:
        subsets.append(("main", ""))
        if a.socratic:
            subsets.append(("socratic", "_socratic"))
        for subset, suffix in subsets:
            for split in ("train", "test"):
                write(out, "openai/gsm8k", subset, split, read_jsonl(os.path.join(a.gsm8k, f"{split}{suffix}.jsonl")), GSM)
    if a.humaneval:
        write(out, "openai/openai_humaneval", "openai_humaneval", "test", read_jsonl(a.humaneval), HUMANEVAL)

    os.environ["NANOCHAT_BASE_DIR"] = out
    sys.path.insert(0, a.nanochat)
    expected = {}
    if a.gsm8k:
        from tasks.gsm8k import GSM8K
        for subset, _ in subsets:
            for split in ("train", "test"):
                task = GSM8K(subset=subset, split=split)
                exs = [task[i] for i in range(len(task))]
                expected[f"GSM8K/{subset}/{split}"] = {
                    "examples": exs, "completions": GSM_COMPLETIONS,
                    "verdicts": [[int(task.evaluate(ex, c)) for c in GSM_COMPLETIONS] for ex in exs],
                    "rewards": [[float(task.reward(ex, c)) for c in GSM_COMPLETIONS] for ex in exs]}
                print(f"nanochat GSM8K {subset}/{split}: {len(exs)} examples", file=sys.stderr)
    if a.humaneval:
        from tasks.humaneval import HumanEval
        task = HumanEval()
        exs = [task[i] for i in range(len(task))]
        completions = []
        for ex in exs:
            sol = ex["messages"][1]["content"]
            completions.append([sol, "Here you go:\n```python\n" + sol + "\n```\nDone.", "def nope(:\n  pass",
                                sol.replace("return", "return 1 +")])
        verdicts = []
        for i, (ex, cs) in enumerate(zip(exs, completions)):
            verdicts.append([bool(task.evaluate(ex, c)) for c in cs])
            if (i + 1) % 20 == 0:
                print(f"nanochat HumanEval: {i + 1}/{len(exs)} problems executed", file=sys.stderr)
        expected["HumanEval/openai_humaneval/test"] = {"examples": exs, "completions": completions,
                                                       "verdicts": verdicts}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False)
    print(f"wrote {os.path.join(out, 'expected.json')}; now: NANOCHAT_TASK_DATA={out} build/tests/test_tasks "
          "--gtest_filter='HubTasks.*'", file=sys.stderr)


if __name__ == "__main__":
    main()
