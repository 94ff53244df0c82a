#!/usr/bin/env python3
"""Per-token GPU timelines from a kernel trace (scripts/kernel_trace.c's lines:
`start_ns end_ns graph_id name`).

Kernels are split into bursts wherever the GPU idles longer than --gap microseconds (a decode
step's kernels run back to back; the host's work between two llama_decode calls leaves such a
gap), and by backend (tandem's kernels are named tandem_*). The bursts of one backend with the
most common kernel count are taken as its decode steps; for them it prints, per step (medians):
the time from one step's first kernel to the next step's (wall), the span of the step's kernels,
the time the GPU ran at least one kernel (busy), and a table by kernel name and one by position
in the step (each kernel's time and the idle gap before it).

    kernel_trace.py TRACE [--gap US] [--positions] [--json OUT]
"""
import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 3)
            if len(parts) != 4:
                continue
            rows.append((int(parts[0]), int(parts[1]), int(parts[2]), parts[3]))
    rows.sort()
    return rows


def backend(name):
    return "tandem" if name.startswith("tandem_") else "other"


def bursts(rows, gap_ns):
    out, cur, last_end = [], [], None
    for r in rows:
        if cur and (r[0] - last_end > gap_ns or backend(r[3]) != backend(cur[0][3])):
            out.append(cur)
            cur, last_end = [], None
        cur.append(r)
        last_end = r[1] if last_end is None else max(last_end, r[1])
    if cur:
        out.append(cur)
    return out


def busy_ns(b):
    total, start, end = 0, None, None
    for s, e, _, _ in b:
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    return total + (end - start if end is not None else 0)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize(steps, nexts):
    walls = [n[0][0] - b[0][0] for b, n in zip(steps, nexts) if n is not None]
    spans = [max(r[1] for r in b) - b[0][0] for b in steps]
    busys = [busy_ns(b) for b in steps]
    by_name = defaultdict(lambda: [[], []])
    for b in steps:
        per = defaultdict(lambda: [0, 0])
        for s, e, _, name in b:
            per[name][0] += e - s
            per[name][1] += 1
        for name, (t, n) in per.items():
            by_name[name][0].append(t)
            by_name[name][1].append(n)
    n = len(steps[0])
    pos = []
    for i in range(n):
        durs = [b[i][1] - b[i][0] for b in steps]
        gaps = [b[i][0] - max(r[1] for r in b[:i]) if i else 0 for b in steps]
        pos.append({"i": i, "name": steps[0][i][3], "us": med(durs) / 1e3, "gap_us": med(gaps) / 1e3})
    return {
        "steps": len(steps),
        "kernels": n,
        "wall_us": med(walls) / 1e3,
        "span_us": med(spans) / 1e3,
        "busy_us": med(busys) / 1e3,
        "busy_of_wall": med(busys) / med(walls) if walls else float("nan"),
        "by_name": sorted(
            ({"name": k, "us": med(v[0]) / 1e3, "n": med(v[1])} for k, v in by_name.items()),
            key=lambda d: -d["us"],
        ),
        "positions": pos,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--gap", type=float, default=30.0, help="idle microseconds that end a burst")
    ap.add_argument("--positions", action="store_true", help="print the by-position table too")
    ap.add_argument("--json", help="write the summaries here")
    a = ap.parse_args()
    if not a.gap > 0:
        sys.exit(f"kernel_trace.py: --gap {a.gap}: the idle microseconds that end a burst must be above 0")
    try:
        rows = load(a.trace)
    except (OSError, ValueError) as e:
        sys.exit(f"kernel_trace.py: cannot read the trace {a.trace}: {e}")
    if not rows:
        sys.exit(f"kernel_trace.py: no kernel records in {a.trace}")
    bs = bursts(rows, int(a.gap * 1e3))
    result = {}
    for be in ("tandem", "other"):
        idx = [i for i, b in enumerate(bs) if backend(b[0][3]) == be]
        if not idx:
            continue
        count, _ = Counter(len(bs[i]) for i in idx).most_common(1)[0]
        picked = [i for i in idx if len(bs[i]) == count]
        steps = [bs[i] for i in picked]
        nexts = [bs[i + 1] if i + 1 < len(bs) and backend(bs[i + 1][0][3]) == be else None for i in picked]
        s = summarize(steps, nexts)
        result[be] = s
        print(
            f"{be}: {s['steps']} steps of {s['kernels']} kernels: wall {s['wall_us']:.1f} us, "
            f"span {s['span_us']:.1f}, busy {s['busy_us']:.1f} ({100 * s['busy_of_wall']:.1f} % of wall)"
        )
        print("      us/step    n  us each  kernel")
        for d in s["by_name"]:
            print(f"   {d['us']:10.1f} {d['n']:4.0f} {d['us'] / max(d['n'], 1):8.2f}  {d['name'][:110]}")
        if a.positions:
            print("     i       us   gap_us  kernel")
            for p in s["positions"]:
                print(f"  {p['i']:4d} {p['us']:8.2f} {p['gap_us']:8.2f}  {p['name'][:110]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    if not result:
        sys.exit("kernel_trace.py: no bursts")


if __name__ == "__main__":
    main()
