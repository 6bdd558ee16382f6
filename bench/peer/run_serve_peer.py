"""Generation speed: our inference engine against nanochat's Engine on the same model, interleaved.

Exports a checkpoint with `nanochat export --to nanochat` into a temporary folder, loads the
export with nanochat's own code (nanochat/checkpoint_manager.py `load_model`: its GPT in float32 on
the CPU, its KV cache; nanochat/engine.py `Engine.generate`), read from a nanochat git directory
with `git archive` into a second temporary folder and run unmodified (only `rustbpe`, which trains
tokenizers and is not used here, gets an empty stand-in when it is not installed). Then, per
round: our engine alone (`bench_serve --engine-only`, its own process), then nanochat's Engine in
this process, on the same prompt token ids (the ones bench_serve rendered), the same max tokens,
temperature, thread count and number of answers. Each side is warmed up with one untimed answer.

Time to first token: from the generate call to the first token (prefill and the first sample).
tok/s: tokens after the first / time from the first to the last token, per answer; the round's
figure is the median over its answers. Ratios are ours / nanochat (tok/s: higher is better for
ours; TTFT: lower is better for ours). Started by run_serve_peer.sh; needs torch and tiktoken
(and filelock, which nanochat.common imports).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_GIT_DIR = "/work/.mirror/karpathy+nanochat/repo"
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-g", "--tag", default="demo", help="checkpoint tag under $NANOCHAT_BASE_DIR/base_checkpoints")
    p.add_argument("-s", "--step", type=int, default=-1, help="checkpoint step (default: the last)")
    p.add_argument("--rounds", type=int, default=5, help="ours, nanochat, ours, nanochat, ... (default 5 each)")
    p.add_argument("--requests", type=int, default=3, help="timed answers per side and round (default 3)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per answer (default 64)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy, same tokens on both sides")
    p.add_argument("--threads", type=int, default=1, help="threads on both sides (default 1)")
    p.add_argument("--nanochat-git-dir", default=os.environ.get("NANOCHAT_GIT_DIR", DEFAULT_GIT_DIR),
                   help="nanochat's git directory (bare or not; HEAD is used)")
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"),
                   help="where nanochat and bench/bench_serve are built (default build/)")
    p.add_argument("--keep", action="store_true", help="keep the temporary export and nanochat source")
    a = p.parse_args(argv)
    if not os.environ.get("NANOCHAT_BASE_DIR"):
        p.error("NANOCHAT_BASE_DIR must point at the base directory that holds base_checkpoints/<tag>")
    for name in ("nanochat", os.path.join("bench", "bench_serve")):
        if not os.access(os.path.join(a.build_dir, name), os.X_OK):
            p.error(f"{os.path.join(a.build_dir, name)} is missing: cmake --build build --target nanochat bench_serve")
    if a.rounds < 1 or a.requests < 1 or a.max_tokens < 2 or a.threads < 1:
        p.error("--rounds, --requests, --threads must be >= 1 and --max-tokens >= 2")
    return a


def med(xs):
    """Median, NaN for no values (an answer that ended at its first token has no rate)."""
    xs = list(xs)
    return statistics.median(xs) if xs else float("nan")


def ratio(x, y):
    return x / y if y > 0 else float("nan")


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def export(a, out):
    cmd = [os.path.join(a.build_dir, "nanochat"), "export", "--to", "nanochat", "-g", a.tag, "--out", out]
    if a.step >= 0:
        cmd += ["-s", str(a.step)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"run_serve_peer: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")


def nanochat_source(git_dir, out):
    """nanochat/ at HEAD of git_dir, unpacked into out; returns the commit."""
    try:
        rev = subprocess.check_output(["git", "--git-dir", git_dir, "rev-parse", "--short", "HEAD"], text=True).strip()
        tar = subprocess.run(["git", "--git-dir", git_dir, "archive", "HEAD", "nanochat"], check=True,
                             capture_output=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        sys.exit(f"run_serve_peer: cannot read nanochat/ from the git directory {git_dir} ({e}); "
                 "give one with --nanochat-git-dir")
    subprocess.run(["tar", "-x", "-C", out], input=tar, check=True)
    return rev


def load_nanochat(src_dir, export_dir, tag, step, threads):
    """nanochat's model (float32, CPU, eval), tokenizer and Engine class for the export."""
    import torch
    torch.set_num_threads(threads)
    os.environ["NANOCHAT_BASE_DIR"] = export_dir  # nanochat's get_base_dir reads it
    os.environ["NANOCHAT_DTYPE"] = "float32"
    try:
        import rustbpe  # noqa: F401
    except ImportError:
        sys.modules["rustbpe"] = types.ModuleType("rustbpe")  # trains tokenizers only
    sys.path.insert(0, src_dir)
    from nanochat.checkpoint_manager import load_model
    from nanochat.engine import Engine
    model, tokenizer, _ = load_model("base", torch.device("cpu"), phase="eval", model_tag=tag,
                                     step=None if step < 0 else step)
    return model, tokenizer, Engine(model, tokenizer), torch


def time_nanochat(engine, tokenizer, prompt, a, seed):
    """One answer of nanochat's Engine.generate: (ttft s, stream s, tokens, token ids). The row's
    end (<|assistant_end|>/<|bos|>) is not counted, as our engine does not report it."""
    stop = {tokenizer.encode_special("<|assistant_end|>"), tokenizer.get_bos_token_id()}
    toks = []
    t0 = time.perf_counter()
    first = last = None
    for column, _ in engine.generate(prompt, num_samples=1, max_tokens=a.max_tokens,
                                     temperature=a.temperature, seed=seed):
        if column[0] in stop:
            break
        last = time.perf_counter()
        if first is None:
            first = last
        toks.append(column[0])
    if first is None:
        return 0.0, 0.0, 0, toks
    return first - t0, last - first, len(toks), toks


def run_ours(a, env):
    cmd = [os.path.join(a.build_dir, "bench", "bench_serve"), "-i", "base", "-g", a.tag, "--engine-only",
           "--requests", str(a.requests), "--max-tokens", str(a.max_tokens), "--threads", str(a.threads),
           "--temperature", repr(a.temperature)]
    if a.step >= 0:
        cmd += ["-s", str(a.step)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"run_serve_peer: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        sys.exit(f"run_serve_peer: no JSON line from {' '.join(cmd)}:\n{r.stdout}")
    return json.loads(lines[-1])


def main(argv):
    a = parse_args(argv)
    env = dict(os.environ)
    for k in THREAD_VARS:  # same thread count for both sides; torch reads these at import
        env[k] = os.environ[k] = str(a.threads)
    tmp = tempfile.mkdtemp(prefix="serve_peer_")
    try:
        export_dir, src_dir = os.path.join(tmp, "export"), os.path.join(tmp, "src")
        os.makedirs(src_dir)
        export(a, export_dir)
        rev = nanochat_source(a.nanochat_git_dir, src_dir)
        model, tokenizer, engine, torch = load_nanochat(src_dir, export_dir, a.tag, a.step, a.threads)
        cfg = model.config
        print(f"model base/{a.tag}: depth {cfg.n_layer}, n_embd {cfg.n_embd}, vocab {cfg.vocab_size}; "
              f"max tokens {a.max_tokens}, temperature {a.temperature}, {a.requests} answers per side and round, "
              f"{a.threads} thread(s) each side")
        print(f"host: {cpu_model()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
        print(f"nanochat {rev} (Engine.generate, GPT float32 on the CPU, torch {torch.__version__}, "
              f"{torch.get_num_threads()} thread(s)) vs ours ({os.path.relpath(a.build_dir, ROOT)}/bench/bench_serve "
              f"--engine-only)")
        print()
        print("| round | ours tok/s | nanochat tok/s | tok/s ours/nanochat | ours TTFT ms | nanochat TTFT ms | TTFT ours/nanochat |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        rows, mismatch = [], 0
        for rnd in range(1, a.rounds + 1):
            ours = run_ours(a, env)
            prompt = ours["prompt"]
            if rnd == 1:
                time_nanochat(engine, tokenizer, prompt, a, 999)  # warm-up, untimed
            ttft, rate = [], []
            for r in range(a.requests):
                t, s, n, toks = time_nanochat(engine, tokenizer, prompt, a, 1000 + r)
                ttft.append(t * 1000)
                if n > 1:
                    rate.append((n - 1) / max(s, 1e-9))
                if r == 0 and a.temperature == 0 and toks != ours["first_answer"]:
                    mismatch += 1
            row = (med(ours["tok_s"]), med(rate), med(ours["ttft_ms"]), med(ttft))
            rows.append(row)
            print(f"| {rnd} | {row[0]:.1f} | {row[1]:.1f} | {ratio(row[0], row[1]):.2f}x | {row[2]:.1f} | {row[3]:.1f} | "
                  f"{ratio(row[2], row[3]):.2f}x |", flush=True)
        m = [med(c) for c in zip(*rows)]
        ratio_rate = med(ratio(r[0], r[1]) for r in rows)
        ratio_ttft = med(ratio(r[2], r[3]) for r in rows)
        print(f"| median | {m[0]:.1f} | {m[1]:.1f} | {ratio_rate:.2f}x | {m[2]:.1f} | {m[3]:.1f} | "
              f"{ratio_ttft:.2f}x |")
        print()
        print(f"prompt {len(prompt)} tokens; load average {os.getloadavg()[0]:.2f} at the end")
        if a.temperature == 0:
            print("greedy answers: " + ("the same tokens on both sides in every round" if mismatch == 0 else
                                        f"differ from ours in {mismatch} of {a.rounds} rounds"))
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
