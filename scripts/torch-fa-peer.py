#!/usr/bin/env python3
"""The torch peer of `tandem perf-ops -d TANDEM0 -o FLASH_ATTN_EXT`: times
F.scaled_dot_product_attention (f16 q/k/v, GQA) on the perf cases' shapes with CUDA events and
prints one JSON document.

K/V are rotated through copies spanning at least 512 MiB, as perf-ops does, so the L2 does not
flatter; a 256 MiB copy before each timed call keeps the GPU busy while the host queues it.

usage: python3 scripts/torch-fa-peer.py [--reps N] > torch-fa.json
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

ROTATION_BYTES = 512 << 20
RUNWAY_BYTES = 256 << 20

# (head size, kv rows, queries, q heads, kv heads): the FLASH_ATTN_EXT cases of
# tools/src/cases/perf.rs.
CASES = [
    (128, 4096, 1, 32, 8),
    (128, 1024, 16, 32, 8),
    (128, 16384, 1, 32, 8),
    (256, 20000, 1, 32, 2),
    (256, 20000, 512, 32, 2),
    (128, 4608, 512, 32, 8),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    dev = torch.device("cuda")
    src = torch.empty(RUNWAY_BYTES, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
    for d, n_kv, n_q, h, h_kv in CASES:
        kv_bytes = 2 * n_kv * h_kv * d * 2
        copies = max(1, -(-ROTATION_BYTES // kv_bytes))
        q = torch.randn(1, h, n_q, d, device=dev, dtype=torch.float16)
        ks = [torch.randn(1, h_kv, n_kv, d, device=dev, dtype=torch.float16) for _ in range(copies)]
        vs = [torch.randn(1, h_kv, n_kv, d, device=dev, dtype=torch.float16) for _ in range(copies)]

        def run(i):
            return F.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies], enable_gqa=True)

        for i in range(5):
            run(i)
        torch.cuda.synchronize()
        us = []
        for rep in range(args.reps):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            dst.copy_(src)
            a.record()
            run(rep)
            b.record()
            b.synchronize()
            us.append(a.elapsed_time(b) * 1000.0)
        name = f"FLASH_ATTN_EXT(kv=f16,d={d},n_kv={n_kv},n_q={n_q},heads={h}/{h_kv})"
        case = {"name": name, "us_median": statistics.median(us), "us_min": min(us), "copies": copies}
        out["cases"].append(case)
        print(f"{name:70s} {case['us_median']:10.1f} us", flush=True, file=__import__("sys").stderr)
        del ks, vs
        torch.cuda.empty_cache()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
