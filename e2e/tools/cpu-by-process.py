#!/usr/bin/env python3
"""CPU seconds per process over a window, to see who holds the machine during a bench.

    e2e/tools/cpu-by-process.py sample OUT.jsonl      # every 0.5 s until killed
    e2e/tools/cpu-by-process.py report OUT.jsonl NAME SECONDS

`report` opens the window when the newest process called NAME (e.g. hearth-discovery,
which hearth-bench starts afresh for each phase) first uses CPU, and sums user+system
seconds per process name over the next SECONDS (and the half second before). kube-apiserver and etcd are told apart
by their port flag. Processes that start or exit inside the window are counted for the
part they were seen. Used for bench-results/2026-11-25/size/APISERVER.md.
"""
import collections
import json
import os
import sys
import time


def name_of(pid):
    stat = open(f"/proc/{pid}/stat").read()
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    argv = open(f"/proc/{pid}/cmdline").read().split("\0")
    name = os.path.basename(argv[0]) if argv[0] else comm
    if name in ("etcd", "kube-apiserver"):
        port = next((a for a in argv if a.startswith(("--secure-port", "--listen-client-urls"))), "")
        name = f"{name} {port}"
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sample(path):
    with open(path, "w") as out:
        while True:
            snap = {}
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    snap[pid] = name_of(pid)
                except (OSError, ValueError):
                    pass
            out.write(json.dumps({"t": time.time(), "s": snap}) + "\n")
            out.flush()
            time.sleep(0.5)


def report(path, anchor, seconds):
    rows = [json.loads(line) for line in open(path)]
    seen = [(r["t"], pid) for r in rows for pid, (n, _) in r["s"].items() if n == anchor]
    if not seen:
        sys.exit(f"no process called {anchor} in {path}")
    pid = seen[-1][1]
    series = [(r["t"], r["s"][pid][1]) for r in rows if pid in r["s"]]
    start = next((t for t, c in series if c > series[0][1] + 0.02), series[0][0])
    w0, w1 = start - 0.5, start + seconds
    first, last, names = {}, {}, {}
    for r in rows:
        for p, (n, c) in r["s"].items():
            names[p] = n
            if r["t"] <= w0:
                first[p] = c
            if r["t"] <= w1:
                last[p] = c
    total = collections.Counter()
    for p, c in last.items():
        total[names[p]] += c - first.get(p, 0.0) if p in first else c
    print(f"| process | CPU s in {w1 - w0:.1f} s |\n|---|---|")
    for n, c in total.most_common(12):
        if c >= 0.05:
            print(f"| {n} | {c:.2f} |")
    print(f"| all | {sum(total.values()):.2f} of {os.cpu_count() * (w1 - w0):.1f} available |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["sample"] and len(sys.argv) == 3:
        sample(sys.argv[2])
    elif sys.argv[1:2] == ["report"] and len(sys.argv) == 5:
        report(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        sys.exit(__doc__)
