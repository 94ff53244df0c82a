#!/usr/bin/env python3
"""The torch peer of `tandem perf-ops -d TANDEM0`: times torch.mv (cuBLAS GEMV) and torch.matmul
on f16 weights, and a device-to-device copy, with CUDA events, and prints one JSON document that
`tandem perf-report --torch` reads.

Weights are rotated through copies spanning at least 512 MB (ten times the H200's 50 MB L2), as
perf-ops does; a 256 MiB copy before each timed call keeps the GPU busy while the host queues the
call and flushes the cache. Bytes count the weights, the activation and the output once. Each case
is also timed back to back (`chain_us_median`): the copies' calls in turn queued between two
events, repeated up to at least 48 calls (the copies span 512 MB, so the reads of one copy stay
far more than the L2 apart), the time over the number of calls (`chain_calls`), as perf-ops'
back-to-back figure is.

usage: python3 scripts/torch-peer.py [--reps N] > torch.json
"""

import argparse
import json
import statistics
import sys

import torch

ROTATION_BYTES = 512 << 20
# Copies of a weight at most (MAX_COPIES of tools/src/perf.rs).
MAX_COPIES = 128
# Calls of a back-to-back stretch at least (CHAIN_MIN_NODES of tools/src/perf.rs).
CHAIN_MIN_CALLS = 48
RUNWAY_BYTES = 256 << 20
COPY_BYTES = 1 << 30


def timed(fn, reps, warmup, runway, calls=0):
    """Device microseconds of `fn(i)` per call: (median, min). With `calls`, each timed stretch
    queues `fn(0) .. fn(calls - 1)` back to back between its two events (as a decode step's layers
    run) and counts its time over `calls`; without, it times one call, `fn(rep)`."""
    src, dst = runway
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    us = []
    for rep in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        dst.copy_(src)
        start.record()
        for i in range(calls) if calls else [rep]:
            fn(i)
        end.record()
        end.synchronize()
        us.append(start.elapsed_time(end) * 1e3 / max(calls, 1))
    return statistics.median(us), min(us)


def copy_rate(reps):
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    torch.cuda.synchronize()
    us = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        us.append(start.elapsed_time(end) * 1e3)
    med = statistics.median(us)
    return {"bytes": 2 * COPY_BYTES, "us_median": med, "gbps": 2 * COPY_BYTES / (med * 1e-6) / 1e9}


def matmul_case(m, k, n, reps, runway):
    """f16 weight [m, k] times f16 activations [k] (torch.mv) or [k, n] (torch.matmul)."""
    w_bytes = m * k * 2
    copies = max(1, min(MAX_COPIES, -(-ROTATION_BYTES // w_bytes)))
    ws = [torch.empty(m, k, dtype=torch.float16, device="cuda").uniform_(-1, 1) for _ in range(copies)]
    if n == 1:
        x = torch.empty(k, dtype=torch.float16, device="cuda").uniform_(-1, 1)
        out = torch.empty(m, dtype=torch.float16, device="cuda")
        fn = lambda i: torch.mv(ws[i % copies], x, out=out)
        name = f"torch.mv(f16,m={m},k={k})"
    else:
        x = torch.empty(k, n, dtype=torch.float16, device="cuda").uniform_(-1, 1)
        out = torch.empty(m, n, dtype=torch.float16, device="cuda")
        fn = lambda i: torch.matmul(ws[i % copies], x, out=out)
        name = f"torch.matmul(f16,m={m},k={k},n={n})"
    med, lo = timed(fn, reps, max(5, copies), runway)
    # The copies together span ROTATION_BYTES (or MAX_COPIES of them), so repeating them keeps each
    # copy's reads apart by more than the cache holds.
    calls = -(-CHAIN_MIN_CALLS // copies) * copies
    chain, _ = timed(fn, reps, 0, runway, calls=calls)
    nbytes = w_bytes + k * n * 2 + m * n * 2
    flops = 2.0 * m * k * n
    del ws
    return {
        "name": name,
        "dtype": "f16",
        "m": m,
        "k": k,
        "n": n,
        "us_median": med,
        "us_min": lo,
        "bytes": nbytes,
        "gbps": nbytes / (med * 1e-6) / 1e9,
        "tflops": flops / (med * 1e-6) / 1e12,
        "copies": copies,
        "chain_us_median": chain,
        "chain_calls": calls,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch-peer: no CUDA device", file=sys.stderr)
        return 1
    runway = (
        torch.empty(RUNWAY_BYTES, dtype=torch.uint8, device="cuda").random_(0, 255),
        torch.empty(RUNWAY_BYTES, dtype=torch.uint8, device="cuda"),
    )
    cases = []
    for m, k in [(14336, 4096), (4096, 14336), (1024, 4096), (2048, 4096), (3072, 4096), (4096, 4096)]:
        cases.append(matmul_case(m, k, 1, args.reps, runway))
        print(f"torch-peer: {cases[-1]['name']}: {cases[-1]['us_median']:.1f} us", file=sys.stderr)
    cases.append(matmul_case(14336, 4096, 512, args.reps, runway))
    print(f"torch-peer: {cases[-1]['name']}: {cases[-1]['us_median']:.1f} us", file=sys.stderr)
    report = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "copy": copy_rate(10),
        "cases": cases,
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
