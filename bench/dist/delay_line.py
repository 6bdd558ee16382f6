#!/usr/bin/env python3
"""A slow link between two network namespaces, in user space: for kernels without tc netem.

Opens two TUN devices, moves one into each namespace (10.83.0.1/24 in the first, 10.83.0.2/24 in
the second) and forwards every IP packet from one to the other after its serialisation time at
--rate (bits/s, each direction its own queue) and --delay-ms (one way; RTT = 2 x delay). A packet
that would wait longer than --queue-ms behind the others is dropped (drop-tail), as a router's
queue would. Runs until killed; prints one line when the link is up.

usage: delay_line.py NS_A NS_B --rate 20e6 --delay-ms 20 [--queue-ms 200]
Needs root, /dev/net/tun (CONFIG_TUN) and iproute2. A development-time tool for the benchmarks.
"""
import argparse
import fcntl
import heapq
import os
import select
import struct
import subprocess
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def sh(*args):
    subprocess.run(args, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ns_a")
    ap.add_argument("ns_b")
    ap.add_argument("--rate", type=float, required=True, help="bits per second, each direction")
    ap.add_argument("--delay-ms", type=float, required=True, help="one-way delay")
    ap.add_argument("--queue-ms", type=float, default=200.0, help="longest wait in the queue before a drop")
    ap.add_argument("--tag", default="dl", help="device name prefix")
    a = ap.parse_args()
    names = (a.tag + "a", a.tag + "b")
    fds = [open_tun(n) for n in names]
    for ns, name, addr in ((a.ns_a, names[0], "10.83.0.1/24"), (a.ns_b, names[1], "10.83.0.2/24")):
        sh("ip", "link", "set", name, "netns", ns)
        sh("ip", "-n", ns, "addr", "add", addr, "dev", name)
        sh("ip", "-n", ns, "link", "set", name, "up")
    print(f"link up: {a.rate / 1e6:g} Mbit/s, {2 * a.delay_ms:g} ms RTT, between {a.ns_a} and {a.ns_b}", flush=True)
    free_at = [0.0, 0.0]  # per direction: when the wire is free again
    pending = []  # (deliver time, sequence, destination fd, packet)
    seq = 0
    delay = a.delay_ms / 1e3
    while True:
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, _, dst, pkt = heapq.heappop(pending)
            try:
                os.write(dst, pkt)
            except OSError:
                pass  # the device's queue is full: dropped, as a real link would
        timeout = max(0.0, pending[0][0] - now) if pending else 1.0
        ready, _, _ = select.select(fds, [], [], timeout)
        now = time.monotonic()
        for src in ready:
            d = fds.index(src)
            while True:
                try:
                    pkt = os.read(src, 65536)
                except BlockingIOError:
                    break
                start = max(now, free_at[d])
                if start - now > a.queue_ms / 1e3:
                    continue  # drop-tail
                free_at[d] = start + len(pkt) * 8 / a.rate
                heapq.heappush(pending, (free_at[d] + delay, seq, fds[1 - d], pkt))
                seq += 1


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
