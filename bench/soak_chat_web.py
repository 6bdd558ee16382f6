#!/usr/bin/python3
"""Soak benchmark of `nanochat chat-web`: starts the server on 127.0.0.1 (a free port) on a
checkpoint, then N clients hammer it for M minutes with a mix of requests, and prints what was
served, every error by kind, latencies, time to first token and the server's RSS over time.

    bench/soak_chat_web.py -g demo -i base --workers 2 --clients 8 --minutes 60
    bench/soak_chat_web.py --url http://127.0.0.1:8000 --clients 4 --minutes 5   # a running server

The mix (weights with --mix): `stream` (a streamed answer read to [DONE]), `whole` (a
non-streamed answer), `leave` (a streamed answer abandoned after its first event), `leave_whole`
(a non-streamed request whose client closes the socket at once), `bad` (malformed JSON, a wrong
role order, an unknown field type: a 4xx expected), `big` (a body over the server's
--max-body-bytes, with Content-Length and chunked: 413 expected), `stall` (a client that sends
half its headers and waits; the server must drop it), `health` (GET /health).
A valid request (stream, whole) succeeds with 200 or is refused busy with 429; anything else is
a failure. A bad or oversized one succeeds with its 4xx. Every request has a client deadline
(--timeout); one that passes it is a failure ("timeout"). The server's RSS (/proc/PID/status,
VmRSS) is sampled every --rss-every seconds; the summary gives its first, last, lowest and
highest values and the slope of a least-squares line through them (MB per hour).
Requests go to 127.0.0.1 only, and the run stops by itself after --minutes. Prints figures,
asserts nothing (its exit status is 1 only when a valid request failed beyond 429). Dev-time
only, Python standard library.
"""

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIX = "stream=30,whole=20,leave=10,leave_whole=5,bad=10,big=5,stall=5,health=15"
PROMPTS = ["Hello!", "What is the capital of France?", "Tell me a story about a cat.",
           "What is 12 * 7?", "Write a haiku about the sea.", "Why is the sky blue?"]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.count = {}      # (kind, outcome) -> n
        self.latency = {}    # kind -> [s]
        self.ttft = []       # s, streamed answers
        self.failures = []   # (t, kind, what), the first 50 kept
        self.tokens = 0

    def add(self, kind, outcome, latency=None, ok=True, what=""):
        with self.lock:
            self.count[(kind, outcome)] = self.count.get((kind, outcome), 0) + 1
            if latency is not None and ok:
                self.latency.setdefault(kind, []).append(latency)
            if not ok and len(self.failures) < 50:
                self.failures.append((time.time(), kind, f"{outcome}: {what}"[:300]))


def body_of(prompt, stream, max_tokens):
    return json.dumps({"messages": [{"role": "user", "content": prompt}], "stream": stream,
                       "max_tokens": max_tokens, "temperature": 0.8}).encode()


def post(host, port, body, timeout, headers=None):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", "/v1/chat/completions", body=body, headers=h)
    return c, c.getresponse()


def do_stream(a, st, leave=False):
    t0 = time.time()
    kind = "leave" if leave else "stream"
    try:
        c, r = post(a.host, a.port, body_of(random.choice(PROMPTS), True, a.max_tokens), a.timeout)
        if r.status != 200:
            r.read()
            c.close()
            st.add(kind, str(r.status), ok=r.status == 429, what=f"HTTP {r.status}")
            return
        first, done, n = None, False, 0
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            if first is None:
                first = time.time() - t0
                if leave:
                    c.close()  # the client leaves mid-answer
                    st.add(kind, "left", latency=first)
                    return
            if line == "data: [DONE]":
                done = True
                break
            payload = json.loads(line[5:])
            if "error" in payload:
                st.add(kind, "error event", ok=False, what=str(payload["error"]))
                c.close()
                return
            n += 1
        c.close()
        if not done:
            st.add(kind, "cut", ok=False, what="stream ended without [DONE]")
            return
        st.ttft.append(first)
        st.tokens += n
        st.add(kind, "200", latency=time.time() - t0)
    except (OSError, http.client.HTTPException, ValueError) as e:
        st.add(kind, "timeout" if isinstance(e, socket.timeout) else "exception", ok=False, what=repr(e))


def do_whole(a, st):
    t0 = time.time()
    try:
        c, r = post(a.host, a.port, body_of(random.choice(PROMPTS), False, a.max_tokens), a.timeout)
        data = r.read()
        c.close()
        if r.status == 200:
            usage = json.loads(data).get("usage", {})
            st.tokens += usage.get("completion_tokens", 0)
            st.add("whole", "200", latency=time.time() - t0)
        else:
            st.add("whole", str(r.status), ok=r.status == 429, what=data[:200].decode("utf-8", "replace"))
    except (OSError, http.client.HTTPException, ValueError) as e:
        st.add("whole", "timeout" if isinstance(e, socket.timeout) else "exception", ok=False, what=repr(e))


def do_leave_whole(a, st):
    try:
        s = socket.create_connection((a.host, a.port), timeout=a.timeout)
        b = body_of(random.choice(PROMPTS), False, a.max_tokens)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
        s.close()
        st.add("leave_whole", "left")
    except OSError as e:
        st.add("leave_whole", "exception", ok=False, what=repr(e))


def do_bad(a, st):
    bodies = [b"{not json", json.dumps({"messages": [{"role": "assistant", "content": "x"}]}).encode(),
              json.dumps({"messages": "hello"}).encode(),
              json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}).encode()]
    t0 = time.time()
    try:
        c, r = post(a.host, a.port, random.choice(bodies), a.timeout)
        r.read()
        c.close()
        ok = 400 <= r.status < 500 and r.status != 429
        st.add("bad", str(r.status), latency=time.time() - t0, ok=ok or r.status == 429, what=f"HTTP {r.status}")
    except (OSError, http.client.HTTPException) as e:
        st.add("bad", "exception", ok=False, what=repr(e))


def do_big(a, st):
    """A body over the limit: Content-Length (refused before it is read) or chunked (refused once
    the limit is passed). The client stops sending when the server answers or closes."""
    chunked = random.random() < 0.5
    size = a.max_body_bytes * 4
    t0 = time.time()
    try:
        s = socket.create_connection((a.host, a.port), timeout=a.timeout)
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Content-Length: %d\r\n\r\n" % size
        s.sendall(head)
        piece = b'{"messages":[{"role":"user","content":"' + b"a" * 65536
        sent = 0
        try:
            while sent < size:
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                sent += len(piece)
        except OSError:
            pass  # the server refused and closed while we sent: expected
        s.settimeout(a.timeout)
        reply = b""
        try:
            while b"\r\n" not in reply:
                d = s.recv(4096)
                if not d:
                    break
                reply += d
        except OSError:
            pass
        s.close()
        m = re.match(rb"HTTP/1\.[01] (\d+)", reply)
        status = m.group(1).decode() if m else "no status"
        kind = "big chunked" if chunked else "big length"
        st.add(kind, status, latency=time.time() - t0, ok=status == "413", what=f"{status} after {sent} bytes sent")
    except OSError as e:
        st.add("big", "exception", ok=False, what=repr(e))


def do_stall(a, st):
    """Half the headers, then silence: the server must drop the connection by itself."""
    t0 = time.time()
    try:
        s = socket.create_connection((a.host, a.port), timeout=a.stall_wait)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        try:
            d = s.recv(4096)
            m = re.match(rb"HTTP/1\.[01] (\d+)", d)
            outcome = "closed" if not d else (m.group(1).decode() if m else "answered")
        except socket.timeout:
            outcome = "still open"
        s.close()
        st.add("stall", outcome, latency=time.time() - t0, ok=outcome != "still open",
               what=f"open after {a.stall_wait:.0f} s")
    except OSError as e:
        st.add("stall", "exception", ok=False, what=repr(e))


def do_health(a, st):
    t0 = time.time()
    try:
        c = http.client.HTTPConnection(a.host, a.port, timeout=a.timeout)
        c.request("GET", "/health")
        r = c.getresponse()
        r.read()
        c.close()
        st.add("health", str(r.status), latency=time.time() - t0, ok=r.status == 200, what=f"HTTP {r.status}")
    except (OSError, http.client.HTTPException) as e:
        st.add("health", "timeout" if isinstance(e, socket.timeout) else "exception", ok=False, what=repr(e))


ACTIONS = {"stream": do_stream, "whole": do_whole, "leave": lambda a, st: do_stream(a, st, leave=True),
           "leave_whole": do_leave_whole, "bad": do_bad, "big": do_big, "stall": do_stall, "health": do_health}


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def start_server(a):
    binary = a.bin or os.path.join(ROOT, "build", "nanochat")
    cmd = [binary, "chat-web", "--host", "127.0.0.1", "--port", "0", "--workers", str(a.workers),
           "--queue", str(a.queue), "--max-body-bytes", str(a.max_body_bytes), "-i", a.source]
    if a.model_tag:
        cmd += ["-g", a.model_tag]
    cmd += a.server_args
    print("server:", " ".join(cmd), flush=True)
    log = open(a.server_log, "w")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.time() + 120
    for line in p.stdout:
        print("  " + line.rstrip(), flush=True)
        m = re.search(r"listening on http://[^:]+:(\d+)/", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, int(m.group(1))
        if time.time() > deadline:
            break
    p.kill()
    sys.exit(f"soak: the server did not start; its log is {a.server_log}")


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def report(a, st, rss, t_start, t_end):
    print(f"\nsoak: {a.clients} clients for {(t_end - t_start) / 60:.1f} min against {a.workers} worker(s), "
          f"queue {a.queue}; mix {a.mix}")
    kinds = sorted({k for k, _ in st.count})
    print("| request | outcomes | p50 s | p99 s |")
    print("|---|---|---:|---:|")
    for k in kinds:
        outs = ", ".join(f"{o} {n}" for (kk, o), n in sorted(st.count.items()) if kk == k)
        lat = st.latency.get(k, [])
        print(f"| {k} | {outs} | {percentile(lat, 0.5):.3f} | {percentile(lat, 0.99):.3f} |")
    print(f"time to first token (streamed answers): p50 {percentile(st.ttft, 0.5):.3f} s, "
          f"p99 {percentile(st.ttft, 0.99):.3f} s over {len(st.ttft)}; tokens streamed or answered {st.tokens}")
    valid_fail = sum(n for (k, o), n in st.count.items() if k in ("stream", "whole") and o not in ("200", "429"))
    other_fail = len([f for f in st.failures if f[1] not in ("stream", "whole")])
    served = sum(n for (k, o), n in st.count.items() if k in ("stream", "whole") and o == "200")
    busy = sum(n for (k, o), n in st.count.items() if k in ("stream", "whole") and o == "429")
    print(f"valid requests: {served} served, {busy} refused busy (429), {valid_fail} failed otherwise")
    print(f"other requests that did not get what they should: {other_fail}")
    for t, k, what in st.failures[:20]:
        print(f"  +{t - t_start:7.1f} s {k}: {what}")
    if rss:
        ts = [t - rss[0][0] for t, _ in rss]
        vs = [v for _, v in rss]
        slope = 0.0
        if len(rss) > 2 and statistics.pvariance(ts) > 0:
            mt, mv = statistics.fmean(ts), statistics.fmean(vs)
            slope = sum((t - mt) * (v - mv) for t, v in zip(ts, vs)) / sum((t - mt) ** 2 for t in ts) * 3600
        print(f"server RSS: first {vs[0]:.0f} MB, last {vs[-1]:.0f} MB, lowest {min(vs):.0f}, highest {max(vs):.0f}; "
              f"slope {slope:+.1f} MB/hour over {len(vs)} samples")
        late = [(t, v) for t, v in zip(ts, vs) if t >= a.settle_minutes * 60]
        if len(late) > 2:
            lt, lv = [t for t, _ in late], [v for _, v in late]
            mt, mv = statistics.fmean(lt), statistics.fmean(lv)
            den = sum((t - mt) ** 2 for t in lt)
            s2 = sum((t - mt) * (v - mv) for t, v in late) / den * 3600 if den > 0 else 0.0
            print(f"  after the first {a.settle_minutes:g} min (workers, caches and threads warmed up): "
                  f"{lv[0]:.0f} -> {lv[-1]:.0f} MB, slope {s2:+.1f} MB/hour")
        step = max(1, len(rss) // 12)
        print("  over time: " + ", ".join(f"{t / 60:.0f} min {v:.0f} MB" for t, v in list(zip(ts, vs))[::step]))
    return valid_fail


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=None, help="a running server (http://127.0.0.1:PORT) instead of starting one")
    ap.add_argument("-i", "--source", default="base")
    ap.add_argument("-g", "--model-tag", default=None)
    ap.add_argument("--bin", default=None, help="the nanochat binary (default: build/nanochat)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--queue", type=int, default=4)
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8: 4x two workers)")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-body-bytes", type=int, default=1 << 20, help="the server's limit (given to it)")
    ap.add_argument("--timeout", type=float, default=120.0, help="client deadline per request, s")
    ap.add_argument("--stall-wait", type=float, default=60.0, help="how long a stalled client waits to be dropped")
    ap.add_argument("--rss-every", type=float, default=10.0)
    ap.add_argument("--settle-minutes", type=float, default=5.0,
                    help="the RSS slope is also given from this minute on (default: %(default)s)")
    ap.add_argument("--mix", default=MIX)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--server-log", default="/tmp/soak_chat_web_server.log")
    ap.add_argument("server_args", nargs="*", help="more chat-web flags after --")
    a = ap.parse_args(argv)
    random.seed(a.seed)
    weights = {k: float(v) for k, v in (kv.split("=") for kv in a.mix.split(","))}
    unknown = set(weights) - set(ACTIONS)
    if unknown:
        sys.exit(f"soak: unknown --mix kinds {sorted(unknown)}; known: {sorted(ACTIONS)}")
    proc = None
    if a.url:
        m = re.match(r"http://(127\.\d+\.\d+\.\d+|localhost|\[::1\]):(\d+)", a.url)
        if not m:
            sys.exit("soak: --url must be a loopback address (http://127.0.0.1:PORT)")
        a.host, a.port = m.group(1).strip("[]"), int(m.group(2))
    else:
        proc, a.port = start_server(a)
        a.host = "127.0.0.1"
    st, rss = Stats(), []
    t_start = time.time()
    t_end = t_start + a.minutes * 60
    names, ws = zip(*weights.items())

    def client(i):
        rnd = random.Random(a.seed * 1000 + i)
        while time.time() < t_end:
            ACTIONS[rnd.choices(names, ws)[0]](a, st)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.clients)]
    for t in threads:
        t.start()
    while time.time() < t_end:
        if proc:
            v = rss_mb(proc.pid)
            if v is not None:
                rss.append((time.time(), v))
            if proc.poll() is not None:
                print(f"soak: the server exited with {proc.returncode}; its log is {a.server_log}")
                break
        time.sleep(min(a.rss_every, max(0.1, t_end - time.time())))
    for t in threads:
        t.join(timeout=a.timeout + a.stall_wait + 5)
    t_stop = time.time()
    bad = report(a, st, rss, t_start, t_stop)
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
