#!/usr/bin/env python3
"""Writes the task fixtures under tests/fixtures/tasks/ and what nanochat's own tasks make of them.

  /work/venv/bin/python tools/tasks/make_task_fixtures.py NANOCHAT_CHECKOUT

NANOCHAT_CHECKOUT: a tree of nanochat at the commit docs/nanochat.md follows, e.g.
  mkdir /tmp/nanochat-ref && git -C /work/.mirror/karpathy+nanochat/repo archive HEAD tasks nanochat | tar -x -C /tmp/nanochat-ref
Needs pyarrow, numpy, filelock and torch (nanochat.common imports it) in the venv.

Writes:
  task_data/<owner>--<name>/<subset>/<split>/{manifest.json, NNNNN.parquet}  small datasets in the
      hub's schemas (SmolTalk in two shards; the files in different parquet layouts: codecs,
      dictionary or not, data page v1/v2, small pages and row groups)
  bad/task_data/...   rows nanochat rejects (SmolTalk roles out of order, an ARC answer key that
      is not a label)
  nested.parquet + nested.json  a file of nested columns with nulls and empty lists, and what
      pyarrow reads from it
  np_random.json  numpy's default_rng(seed): its first raw outputs and permutation(n)
  expected.json  per task: the examples nanochat's task returns (in its order) and its verdicts
      on a set of completions; the GSM8K / HumanEval helpers on tricky strings
"""
import json
import os
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "tasks")


def write(base, repo, subset, split, shards, schema, **layout):
    d = os.path.join(base, "task_data", repo.replace("/", "--"), subset, split)
    os.makedirs(d, exist_ok=True)
    names = []
    for i, rows in enumerate(shards):
        name = f"{i:05d}.parquet"
        table = pa.Table.from_pylist(rows, schema=schema)
        pq.write_table(table, os.path.join(d, name), **layout)
        names.append(name)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(names, f)


MSG = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
SMOL = pa.schema([("messages", MSG), ("source", pa.string())])
MMLU = pa.schema([("question", pa.string()), ("subject", pa.string()), ("choices", pa.list_(pa.string())),
                  ("answer", pa.int64())])
GSM = pa.schema([("question", pa.string()), ("answer", pa.string())])
ARC = pa.schema([("id", pa.string()), ("question", pa.string()),
                 ("choices", pa.struct([("text", pa.list_(pa.string())), ("label", pa.list_(pa.string()))])),
                 ("answerKey", pa.string())])
HUMANEVAL = pa.schema([("task_id", pa.string()), ("prompt", pa.string()), ("canonical_solution", pa.string()),
                       ("test", pa.string()), ("entry_point", pa.string())])


def m(role, content):
    return {"role": role, "content": content}


def smoltalk_rows(n, tag):
    rows = []
    for i in range(n):
        msgs = []
        if i % 3 == 0:
            msgs.append(m("system", f"You are a terse assistant ({tag} {i})."))
        turns = 1 + i % 3
        for t in range(turns):
            msgs.append(m("user", f"{tag} question {i}.{t}: what is {i} + {t}? \u00e9\u00e8 \u4e2d\u6587"))
            msgs.append(m("assistant", f"{i + t}" if t % 2 else f"The answer is {i + t}.\nThanks for asking."))
        rows.append({"messages": msgs, "source": f"fixture-{tag}"})
    return rows


def mmlu_rows(n):
    subjects = ["anatomy", "astronomy", "college_biology", "virology"]
    return [{"question": f"Question {i}: which option is number {i % 4}?" + ("\nSecond line." if i % 5 == 0 else ""),
             "subject": subjects[i % 4],
             "choices": [f"option {k} of {i}" if k != 2 else "" for k in range(4)] if i == 3 else
                        [f"option {k} of {i}" for k in range(4)],
             "answer": i % 4} for i in range(n)]


GSM_ANSWERS = [
    "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
    "No annotations here, just 1 + 1 = 2.\n#### 2",
    "<<3*4=12>>12 at the very start, and a total of 1,234.\n#### 1,234",
    "Odd ones: <<>> stays, <<a>b>> stays, <<<5+5=10>> and <<7>> and <<x=y=z>>.\n#### -5",
    "Ends with an annotation <<2+2=4>>\n#### 4<<1+1=2>>",
    "Decimal answer <<7/2=3.5>>.\n#### 3.50",
]


def gsm_rows():
    return [{"question": f"Problem {i}: compute the thing." + (" \u00bd" if i == 2 else ""), "answer": a}
            for i, a in enumerate(GSM_ANSWERS)]


def arc_rows(n, numeric_every=3):
    rows = []
    for i in range(n):
        k = 3 + i % 3  # 3, 4 or 5 choices
        labels = [str(j + 1) for j in range(k)] if i % numeric_every == 0 else [chr(65 + j) for j in range(k)]
        rows.append({"id": f"Q{i}", "question": f"Science question {i}?",
                     "choices": {"text": [f"choice {j} for {i}" for j in range(k)], "label": labels},
                     "answerKey": labels[i % k]})
    return rows


HUMANEVAL_ROWS = [
    {"task_id": "Fixture/0",
     "prompt": 'from typing import List\n\n\ndef add_all(xs: List[int]) -> int:\n    """Sum of xs.\n    >>> add_all([1, 2])\n    3\n    """\n',
     "canonical_solution": "    return sum(xs)\n",
     "test": "def check(candidate):\n    assert candidate([1, 2, 3]) == 6\n    assert candidate([]) == 0\n",
     "entry_point": "add_all"},
    {"task_id": "Fixture/1",
     "prompt": '# a comment first\nimport math\n\ndef hyp(a, b):\n    """Length of the hypotenuse."""\n',
     "canonical_solution": "    return math.sqrt(a * a + b * b)\n",
     "test": "def check(candidate):\n    assert abs(candidate(3, 4) - 5.0) < 1e-9\n",
     "entry_point": "hyp"},
    {"task_id": "Fixture/2",
     "prompt": 'def shout(s: str) -> str:\n    """Upper case with an exclamation mark."""\n',
     "canonical_solution": "    return s.upper() + '!'\n",
     "test": "def check(candidate):\n    assert candidate('hi') == 'HI!'\n",
     "entry_point": "shout"},
]


def make_datasets():
    base = OUT
    shutil.rmtree(os.path.join(base, "task_data"), ignore_errors=True)
    write(base, "HuggingFaceTB/smol-smoltalk", "default", "train", [smoltalk_rows(7, "a"), smoltalk_rows(6, "b")],
          SMOL, compression="zstd")
    write(base, "HuggingFaceTB/smol-smoltalk", "default", "test", [smoltalk_rows(5, "t")], SMOL,
          compression="snappy", use_dictionary=False, data_page_version="2.0")
    write(base, "cais/mmlu", "all", "test", [mmlu_rows(11)], MMLU, compression="gzip", row_group_size=4)
    write(base, "cais/mmlu", "all", "auxiliary_train", [mmlu_rows(6)], MMLU, compression="none",
          use_dictionary=False)
    write(base, "openai/gsm8k", "main", "test", [gsm_rows()], GSM, compression="zstd", data_page_size=64)
    write(base, "allenai/ai2_arc", "ARC-Easy", "test", [arc_rows(9)], ARC, compression="snappy")
    write(base, "allenai/ai2_arc", "ARC-Challenge", "test", [arc_rows(5, 2)], ARC, compression="zstd",
          data_page_version="2.0", row_group_size=2)
    write(base, "openai/openai_humaneval", "openai_humaneval", "test", [HUMANEVAL_ROWS], HUMANEVAL)
    # rows nanochat rejects
    bad = os.path.join(base, "bad")
    shutil.rmtree(bad, ignore_errors=True)
    rows = smoltalk_rows(4, "x")
    rows[2]["messages"] = [m("user", "hi"), m("user", "again"), m("assistant", "ok")]
    write(bad, "HuggingFaceTB/smol-smoltalk", "default", "train", [rows], SMOL)
    arows = arc_rows(3)
    arows[1]["answerKey"] = "Z"
    write(bad, "allenai/ai2_arc", "ARC-Easy", "test", [arows], ARC)


def make_nested():
    schema = pa.schema([
        ("id", pa.int32()),
        ("flag", pa.bool_()),
        ("tags", pa.list_(pa.string())),
        ("msgs", MSG),
        ("pair", pa.struct([("a", pa.list_(pa.string())), ("n", pa.int64())])),
        ("name", pa.string()),
    ])
    rows = []
    for i in range(23):
        rows.append({
            "id": i - 3,
            "flag": None if i % 7 == 0 else i % 2 == 0,
            "tags": None if i % 5 == 1 else [] if i % 5 == 2 else [None if (i + k) % 4 == 0 else f"t{i}.{k}" for k in range(i % 4 + 1)],
            "msgs": None if i % 6 == 5 else [None if (i == 4 and k == 1) else m("user" if k % 2 == 0 else "assistant", None if i == 8 and k == 0 else f"c{i}.{k}") for k in range(i % 3)],
            "pair": None if i % 9 == 3 else {"a": None if i % 4 == 2 else [f"a{i}"] * (i % 3), "n": None if i % 8 == 1 else i * 1000000007},
            "name": None if i % 4 == 3 else ("" if i % 4 == 1 else f"name {i}"),
        })
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, os.path.join(OUT, "nested.parquet"), compression="zstd", row_group_size=10,
                   data_page_size=32, use_dictionary=["name", "tags"])
    back = pq.read_table(os.path.join(OUT, "nested.parquet")).to_pylist()
    with open(os.path.join(OUT, "nested.json"), "w") as f:
        json.dump(back, f, indent=0, ensure_ascii=False)


def make_np_random():
    import numpy as np
    cases = {"raw": [], "permutation": []}
    for seed in [0, 1, 42, 2**32 + 5, 2**63 + 12345]:
        bg = np.random.default_rng(seed).bit_generator
        cases["raw"].append({"seed": str(seed), "u64": [str(int(v)) for v in bg.random_raw(8)]})
        for n in [0, 1, 2, 10, 1000, 65537]:
            perm = np.random.default_rng(seed).permutation(n)
            cases["permutation"].append({"seed": str(seed), "n": n, "head": [int(v) for v in perm[:200]],
                                         "sum_i_perm": int(np.sum(np.arange(n, dtype=np.int64) * perm))})
    with open(os.path.join(OUT, "np_random.json"), "w") as f:
        json.dump({"numpy": np.__version__, **cases}, f)


def main():
    ref = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    make_datasets()
    make_nested()
    make_np_random()
    os.environ["NANOCHAT_BASE_DIR"] = os.path.abspath(OUT)
    sys.path.insert(0, ref)
    from tasks.smoltalk import SmolTalk
    from tasks.mmlu import MMLU
    from tasks.gsm8k import GSM8K, extract_answer
    from tasks.arc import ARC
    from tasks.humaneval import HumanEval, extract_imports, extract_program

    def examples(task):
        return [task[i] for i in range(len(task))]

    expected = {}
    for name, task in [("SmolTalk/default/train", SmolTalk(split="train")),
                       ("SmolTalk/default/test", SmolTalk(split="test"))]:
        expected[name] = {"examples": examples(task)}
    for name, task in [("MMLU/all/test", MMLU(subset="all", split="test")),
                       ("MMLU/all/auxiliary_train", MMLU(subset="all", split="auxiliary_train")),
                       ("ARC-Easy/ARC-Easy/test", ARC(subset="ARC-Easy", split="test")),
                       ("ARC-Challenge/ARC-Challenge/test", ARC(subset="ARC-Challenge", split="test"))]:
        exs = examples(task)
        verdicts = [{letter: bool(task.evaluate(ex, letter)) for letter in ex["letters"]} for ex in exs]
        expected[name] = {"examples": exs, "verdicts": verdicts}
    gsm_completions = ["#### 10", "so #### 1,234 done", "#### -5", "no marker", "#### -", "#### 3.50", "#### 3.5",
                       "#### 4", "####4", "#### 2\n#### 10", "#### 12,"]
    task = GSM8K(subset="main", split="test")
    exs = examples(task)
    expected["GSM8K/main/test"] = {
        "examples": exs, "completions": gsm_completions,
        "verdicts": [[int(task.evaluate(ex, c)) for c in gsm_completions] for ex in exs],
        "rewards": [[float(task.reward(ex, c)) for c in gsm_completions] for ex in exs]}
    task = HumanEval()
    exs = examples(task)
    completions = []
    for ex in exs:
        sol = ex["messages"][1]["content"]
        completions.append([sol, "Here you go:\n```python\n" + sol + "\n```\nDone.", "def nope(:\n  pass",
                            sol.replace("return", "return 1 +")])
    expected["HumanEval/openai_humaneval/test"] = {
        "examples": exs, "completions": completions,
        "verdicts": [[bool(task.evaluate(ex, c)) for c in cs] for ex, cs in zip(exs, completions)]}
    probes = ["#### 7", "x #### -3.5,0 y", "#### ,", "#### -,5", "####  5", "a #### 1\n#### 2", "#### -x #### 9",
              "#### 1.2.3", ""]
    programs = ["```python\nprint(1)\n```", "text\n```\nA\n```\n```python\nB\n```", "```python   \n\n  x = 1\n\n```",
                "no fences  \n", "```python\n```", "```\n\n```", "````python\nq\n```", "```pythonx\ny\n```",
                "``` \t\nz\n```tail", "```python\nunterminated", "  ```python\n  indented\n  ```  ",
                "```\n```\nlater\n```"]
    prompts = [r["prompt"] for r in HUMANEVAL_ROWS] + ["\n\nimport os\n   from x import y\n# c\nimport z\ndef f(): pass\nimport w\n",
                                                       "", "import a", "def f():\n    import b\n"]
    expected["helpers"] = {
        "gsm8k_extract_answer": {p: extract_answer(p) for p in probes},
        "humaneval_program": {p: extract_program(p) for p in programs},
        "humaneval_imports": {p: extract_imports(p) for p in prompts},
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
