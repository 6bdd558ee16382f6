"""Writes the CORE evaluation fixtures with nanochat's own code (dev time only; CI has no torch).

    /work/venv/bin/python tools/core_eval/make_core_fixture.py NANOCHAT_CHECKOUT tests/fixtures/core_eval \
        [--model NANOCHAT_BASE_FOLDER --tag TAG --step STEP]

1. py_random.json: Python's random.Random(seed) draws that the evaluation uses (shuffle, sample,
   getrandbits), for tests/core/py_random_test.cpp.
2. eval_bundle/: a small bundle in the DCLM bundle's format (core.yaml, eval_meta_data.csv,
   eval_data/*.jsonl) with tasks of every type, zero- and few-shot, with and without a custom
   continuation delimiter.
3. expected.json: nanochat's result on that bundle for the model of a nanochat base folder
   (default: tests/fixtures/interop/nanochat, tag d1, step 3): per task the per-example
   correctness of core_eval.evaluate_example over the examples base_eval.evaluate_core picks
   (random.Random(1337).shuffle, then max_per_task), the accuracy of core_eval.evaluate_task,
   the centered accuracy, the CORE metric and every example's prompts as nanochat's jinja
   templates render them -- for max_per_task -1 and 5. nanochat's GPT runs
   on CPU in float32 with the weights of model_<step>.pt; its tokenizer is tokenizer/tokenizer.pkl.
With --check-only the bundle is not rewritten and the expected results are printed as JSON
(for comparing an exported model of this product against `nanochat base-eval --eval core`).
"""
import argparse
import csv
import json
import os
import random
import sys
import types

os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "interop"))
from make_optim_fixture import load_nanochat  # noqa: E402

TASKS = [
    # label, type, file, num_fewshot, delimiter (None = the default ' ')
    ("animals_mc", "multiple_choice", "mc/animals.jsonl", 0, None),
    ("capitals_mc_3shot", "multiple_choice", "mc/capitals.jsonl", 3, "\nAnswer: "),
    ("pronoun_schema", "schema", "schema/pronouns.jsonl", 2, None),
    ("sentences_lm", "language_modeling", "lm/sentences.jsonl", 0, None),
    ("counting_lm_2shot", "language_modeling", "lm/counting.jsonl", 2, " "),
    ("greedy_lm", "language_modeling", "lm/greedy.jsonl", 0, ""),
]
BASELINES = {"animals_mc": 33.3, "capitals_mc_3shot": 25.0, "pronoun_schema": 50.0, "sentences_lm": 0.0,
             "counting_lm_2shot": 0.0, "greedy_lm": 0.0}


def examples():
    animals = [("The cat says", ["meow", "moo", "quack"], 0), ("The cow says", ["woof", "moo", "hiss"], 1),
               ("The duck says", ["quack", "roar", "baa"], 0), ("The dog says", ["tweet", "neigh", "woof"], 2),
               ("The sheep says", ["baa", "oink", "moo"], 0), ("The lion says", ["chirp", "roar", "meow"], 1),
               ("The pig says", ["hoot", "quack", "oink"], 2), ("The owl says", ["hoot", "bark", "moo"], 0)]
    capitals = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Germany", "Berlin"),
                ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Peru", "Lima"), ("Kenya", "Nairobi"),
                ("Norway", "Oslo"), ("Chile", "Santiago")]
    names = [c for _, c in capitals]
    mc2 = []
    for i, (country, city) in enumerate(capitals):
        wrong = [names[(i + k) % len(names)] for k in (1, 3, 5)]
        choices = wrong[:i % 4] + [city] + wrong[i % 4:]
        mc2.append({"query": "Question: What is the capital of %s?" % country, "choices": choices, "gold": i % 4})
    schema = []
    pairs = [("The trophy did not fit in the suitcase because the trophy", "the suitcase", "was too big."),
             ("Anna thanked Maria because Anna", "Maria", "had received help."),
             ("The ball broke the window because the ball", "the window", "was thrown hard."),
             ("Tom gave Bob a book because Bob", "Tom", "wanted to read it."),
             ("The city council refused the marchers a permit because the council", "the marchers",
              "feared violence."),
             ("The fish ate the worm because the fish", "the worm", "was hungry.")]
    for i, (right, other, cont) in enumerate(pairs):
        wrong = right.rsplit(" ", 1)[0] + " " + other if i % 2 == 0 else other + " " + right.split(" ", 1)[1]
        opts = [right, wrong] if i % 3 != 1 else [wrong, right]
        schema.append({"context_options": opts, "continuation": cont, "gold": opts.index(right)})
    sentences = [{"context": "  The quick brown fox jumps over the lazy\t", "continuation": "dog"},
                 {"context": "One, two, three,", "continuation": "four"},
                 {"context": "Once upon a", "continuation": "time"},
                 {"context": "\u00a0To be or not to be, that is the ", "continuation": "question"},
                 {"context": "a b c d e f", "continuation": "g h"},
                 {"context": "the the the the the", "continuation": "the"}]
    counting = [{"context": "%d + 1 =" % n, "continuation": "%d" % (n + 1)} for n in range(1, 9)]
    return {"mc/animals.jsonl": [{"query": q, "choices": c, "gold": g} for q, c, g in animals],
            "mc/capitals.jsonl": mc2, "schema/pronouns.jsonl": schema, "lm/sentences.jsonl": sentences,
            "lm/counting.jsonl": counting}


GREEDY_CONTEXTS = ["Hello", "The end of the", "It was a dark and", "In the beginning", "Numbers: 1 2 3",
                   "Once more", "She said that", "We went to the", "A long time", "The sun is"]


def greedy_examples(model, tok):
    """language_modeling rows whose continuation is (or, every other row, is not) what the model
    predicts greedily after the context: the few a barely trained model gets right."""
    from nanochat import core_eval
    meta = {"task_type": "language_modeling", "num_fewshot": 0, "continuation_delimiter": ""}
    rows = []
    for i, ctx in enumerate(GREEDY_CONTEXTS):
        ids = tok(ctx, prepend=tok.get_bos_token_id())
        for _ in range(2):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
        text = tok.decode(ids[-2:])
        if "\ufffd" in text or len(text.strip()) == 0 or text != text.rstrip():
            continue
        row = {"context": ctx, "continuation": text if i % 2 == 0 else text + "zq"}
        ok = core_eval.evaluate_example(0, model, tok, [row], "cpu", meta)
        rows.append(row)
        print("greedy row %r -> %s" % (row, ok))
    return rows


def write_bundle(root, model, tok):
    data = os.path.join(root, "eval_data")
    all_rows = examples()
    with torch.no_grad():
        all_rows["lm/greedy.jsonl"] = greedy_examples(model, tok)
    for rel, rows in all_rows.items():
        os.makedirs(os.path.dirname(os.path.join(data, rel)), exist_ok=True)
        with open(os.path.join(data, rel), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    with open(os.path.join(root, "core.yaml"), "w", encoding="utf-8") as f:
        f.write("# a handmade bundle in the DCLM eval bundle's format\nicl_tasks:\n")
        for label, typ, uri, k, delim in TASKS:
            f.write("- label: %s\n  dataset_uri: %s\n  num_fewshot: [%d]\n  icl_task_type: %s\n" % (label, uri, k, typ))
            if delim is not None:
                f.write("  continuation_delimiter: %s # separates context and answer\n" % json.dumps(delim))
    with open(os.path.join(root, "eval_meta_data.csv"), "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Eval Task", "Task Category", "Task Type", "#shots", "Random baseline", "Centered Metric?"])
        for label, typ, _, k, _ in TASKS:
            w.writerow([label, "fixture, handmade", typ, k, BASELINES[label], "yes"])


def py_random_cases():
    out = {"getrandbits32": {}, "shuffle": [], "sample": []}
    for seed in (0, 1, 42, 1337, 1234 + 7, 2**32 + 5):
        r = random.Random(seed)
        out["getrandbits32"][str(seed)] = [r.getrandbits(32) for _ in range(700)]
    for seed, n in ((1337, 0), (1337, 1), (1337, 10), (1337, 1000), (5, 37)):
        x = list(range(n))
        random.Random(seed).shuffle(x)
        out["shuffle"].append({"seed": seed, "n": n, "result": x})
    for seed, n, k in ((1234, 9, 3), (1240, 20, 5), (1300, 21, 6), (1301, 37, 6), (1302, 38, 6), (1303, 100, 10),
                       (1304, 85, 10), (1305, 86, 10), (1306, 500, 5), (1307, 5000, 25)):
        out["sample"].append({"seed": seed, "n": n, "k": k, "result": random.Random(seed).sample(range(n), k)})
    return out


def load_model_and_tokenizer(checkout, folder, tag, step):
    gpt = load_nanochat(checkout)
    sys.modules.setdefault("rustbpe", types.ModuleType("rustbpe"))  # only needed for training
    from nanochat.tokenizer import RustBPETokenizer
    d = os.path.join(folder, "base_checkpoints", tag)
    meta = json.load(open(os.path.join(d, "meta_%06d.json" % step)))
    model = gpt.GPT(gpt.GPTConfig(**meta["model_config"]))
    model.init_weights()
    w = torch.load(os.path.join(d, "model_%06d.pt" % step), weights_only=True)
    model.load_state_dict({k: v.float() for k, v in w.items()}, strict=True)
    model.float().eval()
    tok = RustBPETokenizer.from_directory(os.path.join(folder, "tokenizer"))
    return model, tok


def evaluate(bundle, model, tok, max_per_task):
    import yaml
    from nanochat import core_eval
    cfg = yaml.safe_load(open(os.path.join(bundle, "core.yaml"), encoding="utf-8"))
    base = {r["Eval Task"]: float(r["Random baseline"])
            for r in csv.DictReader(open(os.path.join(bundle, "eval_meta_data.csv"), encoding="utf-8"))}
    tasks, centered = [], []
    for t in cfg["icl_tasks"]:
        meta = {"task_type": t["icl_task_type"], "dataset_uri": t["dataset_uri"], "num_fewshot": t["num_fewshot"][0],
                "continuation_delimiter": t.get("continuation_delimiter", " ")}
        rows = [json.loads(line.strip()) for line in open(os.path.join(bundle, "eval_data", t["dataset_uri"]),
                                                          encoding="utf-8")]
        random.Random(1337).shuffle(rows)
        if max_per_task > 0:
            rows = rows[:max_per_task]
        correct = [bool(core_eval.evaluate_example(i, model, tok, rows, "cpu", meta)) for i in range(len(rows))]
        render = {"multiple_choice": core_eval.render_prompts_mc, "schema": core_eval.render_prompts_schema,
                  "language_modeling": core_eval.render_prompts_lm}[meta["task_type"]]
        prompts = []
        for i in range(len(rows)):  # the few-shot draw of evaluate_example, then nanochat's jinja templates
            shots = []
            if meta["num_fewshot"] > 0:
                others = [j for j in range(len(rows)) if j != i]
                shots = [rows[j] for j in random.Random(1234 + i).sample(others, meta["num_fewshot"])]
            prompts.append(render(rows[i], meta["continuation_delimiter"], shots))
        acc = core_eval.evaluate_task(model, tok, rows, "cpu", meta)
        c = (acc - 0.01 * base[t["label"]]) / (1.0 - 0.01 * base[t["label"]])
        centered.append(c)
        tasks.append({"label": t["label"], "correct": correct, "accuracy": acc, "centered": c, "prompts": prompts})
    return {"max_per_task": max_per_task, "tasks": tasks, "core_metric": sum(centered) / len(centered)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkout")
    ap.add_argument("out")
    ap.add_argument("--model", default=None)
    ap.add_argument("--tag", default="d1")
    ap.add_argument("--step", type=int, default=3)
    ap.add_argument("--check-only", action="store_true")
    a = ap.parse_args()
    folder = a.model or os.path.join(HERE, "..", "..", "tests", "fixtures", "interop", "nanochat")
    bundle = os.path.join(a.out, "eval_bundle")
    model, tok = load_model_and_tokenizer(a.checkout, folder, a.tag, a.step)
    if not a.check_only:
        os.makedirs(bundle, exist_ok=True)
        write_bundle(bundle, model, tok)
        with open(os.path.join(a.out, "py_random.json"), "w") as f:
            json.dump(py_random_cases(), f)
    with torch.no_grad():
        runs = [evaluate(bundle, model, tok, m) for m in (-1, 5)]
    if a.check_only:
        print(json.dumps(runs))
        return
    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump({"model": "tests/fixtures/interop/nanochat d1 step 3", "runs": runs}, f, indent=1)
    for r in runs:
        print("max_per_task %d:" % r["max_per_task"], ", ".join("%s %.4f" % (t["label"], t["accuracy"])
                                                                for t in r["tasks"]), "CORE %.4f" % r["core_metric"])


if __name__ == "__main__":
    main()
