#!/usr/bin/env python3
"""Writes tests/fixtures/chat/chat_eval.json: what nanochat's own chat evaluation
(scripts/chat_eval.py run_categorical_eval and run_generative_eval, executed unmodified from a
nanochat git directory, with nanochat's GPT, Engine and RustBPETokenizer) decides on a handful of
problems, for the C++ runner (src/nanochat/eval/chat_eval.h) to reproduce.

The model is the engine fixture `tool_int` (tests/fixtures/chat/engine_tool_int.safetensors, made by
make_engine_fixture.py: byte-level vocabulary of 265, d32, 2 layers, a planted calculator call
`12*34` after <|assistant_start|>). The tasks live in memory and are judged by rules the C++ test
repeats:
  categorical: the chosen letter equals the reference answer (the assistant's last message);
  generative: the reference answer (a "needle") occurs in the decoded completion.
Each task object records the arguments nanochat's loop hands to evaluate(): the chosen letter per
problem, the completions per problem. Problems are kept only when every decision is unambiguous in
float32: for categorical ones the gap between the two largest letter logits, for generative ones
every greedy step's top-1/top-2 gap, is at least MIN_GAP (both measured with nanochat's GPT).

usage: /work/venv/bin/python tools/chat/make_chat_eval_fixture.py [NANOCHAT_GIT_DIR]   (torch, tiktoken)
"""
import json
import os
import sys
import types

import tiktoken
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import make_engine_fixture as mef  # noqa: E402

ref = mef.ref
MIN_GAP = 1e-3

# (question, letters, answer) for the categorical task
CATEGORICAL = [
    ("Which planet is red?", ["A", "B", "C", "D"], "A"),
    ("Pick the even number.", ["D", "C", "B", "A"], "B"),
    ("Which one is a fruit?", ["a", "b", "c"], "c"),
    ("What colour is the sky?", ["A", "B", "C", "D", "E"], "D"),
    ("Which word rhymes with cat?", ["Q", "R"], "R"),
    ("Select the prime.", ["1", "2", "3", "4"], "3"),
    ("Which is the largest ocean?", ["W", "X", "Y", "Z"], "X"),
    ("Multiple Choice question: 2+2?\n- 3=A\n- 4=B\n- 5=C\n- 6=D\n", ["A", "B", "C", "D"], "B"),
    ("Where does the sun rise?", ["E", "F", "G", "H"], "G"),
    ("Choose the mammal.", ["A", "B", "C", "D"], "D"),
    ("Which metal is liquid at room temperature?", ["x", "y", "z"], "y"),
    ("Pick one.", ["B", "C", "D"], "C"),
    ("Which instrument has keys?", ["5", "6", "7", "8"], "5"),
    ("Name the capital.", ["A", "B", "C", "D"], "D"),
]
# (question, needle) for the generative task; the planted call makes the answer contain
# <|python_start|>12*34<|python_end|><|output_start|>408<|output_end|>
GENERATIVE = [
    ("What is 12 times 34?", "408"),
    ("What is 12 times 35?", "420"),
    ("Show the expression.", "12*34"),
    ("Compute twelve by thirty-four.", "408"),
    ("Anything else?", "Paris"),
]
CAT_BATCH, CAT_MAX = 3, 10       # uneven last batch: 3 + 3 + 3 + 1 of the kept problems
CAT_BATCH_ALL = 5                # every kept problem: 5 + 5 + 4
GEN_SAMPLES, GEN_MAX_TOKENS, GEN_MAX = 2, 40, 4


def conversation(question, answer, letters=None):
    conv = {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}
    if letters is not None:
        conv["letters"] = letters
    return conv


class MemoryTask:
    """nanochat's Task interface (tasks/common.py: eval_type, len, getitem, evaluate) in memory,
    recording what evaluate() is asked."""

    def __init__(self, eval_type, convs):
        self.eval_type, self.convs, self.calls = eval_type, convs, []

    def __len__(self):
        return len(self.convs)

    def __getitem__(self, i):
        return self.convs[i]

    def evaluate(self, conv, completion):
        self.calls.append((self.convs.index(conv), completion))
        answer = conv["messages"][-1]["content"]
        return completion == answer if self.eval_type == "categorical" else answer in completion


def chat_eval_module(git_dir):
    """scripts/chat_eval.py as a module, its imports served by nanochat's own engine and stand-ins
    for what the two evaluation loops do not use (checkpoint loading, the dataset classes)."""
    mods = mef.nanochat_modules(git_dir)
    common = sys.modules["nanochat.common"]
    common.get_dist_info = lambda: (False, 0, 0, 1)
    common.print0 = print
    common.compute_cleanup = None
    sys.modules["nanochat.engine"] = mods["engine"]
    sys.modules["nanochat.tokenizer"] = mods["tokenizer"]
    sys.modules.setdefault("tasks", types.ModuleType("tasks"))
    for mod, cls in (("humaneval", "HumanEval"), ("mmlu", "MMLU"), ("arc", "ARC"), ("gsm8k", "GSM8K")):
        m = types.ModuleType("tasks." + mod)
        setattr(m, cls, None)
        sys.modules["tasks." + mod] = m
    ns = types.ModuleType("chat_eval")
    exec(compile(mef.show(git_dir, "scripts/chat_eval.py"), "scripts/chat_eval.py", "exec"), ns.__dict__)
    return ns, mods


def main():
    git_dir = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/karpathy+nanochat/repo"
    NanochatGPT, NanochatConfig = mef.nanochat_gpt_class(git_dir)
    ce, mods = chat_eval_module(git_dir)
    enc = tiktoken.Encoding(name="bytes", pat_str=mef.PATTERN, mergeable_ranks={bytes([i]): i for i in range(256)},
                            special_tokens=mef.SP)
    tok = mods["tokenizer"].RustBPETokenizer(enc, "<|bos|>")
    tensors, meta = ref.load_safetensors(os.path.join(ROOT, "tests", "fixtures", "chat", "engine_tool_int.safetensors"))
    net = NanochatGPT(NanochatConfig(**json.loads(meta["config"])))
    net.init_weights()
    net.load_state_dict({k[len("param."):]: torch.as_tensor(v) for k, v in tensors.items()}, strict=True)
    net.eval()

    # categorical: keep the problems whose letter decision is clear
    cat = []
    for q, letters, ans in CATEGORICAL:
        ids = tok.render_for_completion(conversation(q, ans, letters))
        with torch.no_grad():
            logits = net(torch.tensor([ids]))[0, -1]
        focus = logits[[tok.encode(l)[0] for l in letters]]
        top = torch.topk(focus, 2).values
        gap = (top[0] - top[1]).item()
        if gap >= MIN_GAP:
            cat.append({"question": q, "letters": letters, "answer": ans, "gap": gap})
    if len(cat) < CAT_MAX + 1:
        sys.exit(f"only {len(cat)} categorical problems have a clear decision; add problems")
    task = MemoryTask("categorical", [conversation(p["question"], p["answer"], p["letters"]) for p in cat])
    acc = ce.run_categorical_eval(task, tok, net, CAT_BATCH, max_problems=CAT_MAX)
    choices = {i: c for i, c in task.calls}
    if sorted(choices) != list(range(CAT_MAX)):
        sys.exit("nanochat's categorical loop did not judge every problem once")
    for i, p in enumerate(cat):
        p["expected_choice"] = choices.get(i)
    # all problems at another batch size (nanochat's letters must not depend on the batching)
    task = MemoryTask("categorical", task.convs)
    acc_all = ce.run_categorical_eval(task, tok, net, CAT_BATCH_ALL)
    for i, c in task.calls:
        cat[i]["expected_choice_all"] = c
    cat_out = {"batch_size": CAT_BATCH, "max_problems": CAT_MAX, "accuracy": acc, "problems": cat,
               "batch_size_all": CAT_BATCH_ALL, "accuracy_all": acc_all}

    # generative: greedy, two samples per problem; every greedy step must be clear
    gen = []
    for q, needle in GENERATIVE:
        prompt = tok.render_for_completion(conversation(q, needle))
        _, gap = mef.run_engine(mods, tok, mef.Recording(net), prompt, 1, GEN_MAX_TOKENS)
        if gap < MIN_GAP:
            sys.exit(f"generative problem {q!r}: a greedy step has a gap of {gap:.2e} < {MIN_GAP}")
        gen.append({"question": q, "needle": needle, "min_gap": gap})
    task = MemoryTask("generative", [conversation(p["question"], p["needle"]) for p in gen])
    engine = mods["engine"].Engine(net, tok)
    acc_gen = ce.run_generative_eval(task, tok, net, engine, GEN_SAMPLES, GEN_MAX_TOKENS, 0.0, 50, max_problems=GEN_MAX)
    for i, p in enumerate(gen):
        p["expected_completions"] = [c for j, c in task.calls if j == i]
    gen_out = {"num_samples": GEN_SAMPLES, "max_new_tokens": GEN_MAX_TOKENS, "temperature": 0.0, "top_k": 50,
               "max_problems": GEN_MAX, "accuracy": acc_gen, "problems": gen}

    out = {"model": "engine_tool_int.safetensors", "categorical": cat_out, "generative": gen_out}
    path = os.path.join(ROOT, "tests", "fixtures", "chat", "chat_eval.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"categorical accuracy {acc:.4f} ({len(cat)} clear problems), generative accuracy {acc_gen:.4f}; wrote {path}")


if __name__ == "__main__":
    main()
