#!/usr/bin/env python3
"""Checks `tandem perf-ops`' read probe against other ways of reading the same bytes once on the GPU
(cupy, NVRTC): the probe (256 threads, four 16-byte streaming loads per thread, one pass), the
same with 8 or 16 loads per thread, persistent grids of 2, 4 or 8 blocks per SM looping with 4, 8
or 16 loads in flight, and cupy's own sum. Same method as perf-ops: buffers rotated through at
least 512 MiB, a 256 MiB device copy queued before each timed launch, events around the launch,
median of 50. Prints one JSON line per size: (median, min) µs per variant and the best.

usage: python3 scripts/read-floor.py > read-floor.jsonl
"""
import json
import math
import statistics

import cupy as cp

SRC = r'''
extern "C" __global__ void __launch_bounds__(256)
oneshot(const uint4* src, long long n16, unsigned never, unsigned* out) {
    const long long base = (long long)blockIdx.x * (256 * U) + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long i = base + u * 256;
        if (i < n16) asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(src + i));
        else v[u] = make_uint4(0,0,0,0);
    }
    unsigned x = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) x += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    if (x == never) out[0] = x;
}
extern "C" __global__ void __launch_bounds__(256)
persist(const uint4* src, long long n16, unsigned never, unsigned* out) {
    unsigned x = 0;
    const long long stride = (long long)gridDim.x * 256 * U;
    for (long long base = (long long)blockIdx.x * (256 * U) + threadIdx.x; base < n16; base += stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long i = base + u * 256;
            if (i < n16) asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(src + i));
            else v[u] = make_uint4(0,0,0,0);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) x += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (x == never) out[0] = x;
}
'''
mods = {u: cp.RawModule(code=SRC, options=('-std=c++17', f'-DU={u}', '-arch=sm_90')) for u in (4, 8, 16)}
sms = cp.cuda.Device().attributes['MultiProcessorCount']
runway_src = cp.zeros(256 << 20, dtype=cp.uint8); runway_dst = cp.zeros_like(runway_src)
scratch = cp.zeros(4, dtype=cp.uint32)
def timed(launch, bufs, reps=50, warm=5):
    for i in range(warm): launch(bufs[i % len(bufs)])
    cp.cuda.Device().synchronize()
    us = []
    for i in range(reps):
        s = cp.cuda.Event(); e = cp.cuda.Event()
        runway_dst[...] = runway_src
        s.record(); launch(bufs[(i + warm) % len(bufs)]); e.record(); e.synchronize()
        us.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
    return statistics.median(us), min(us)
res = []
for name, nbytes in [('mmid8x768x2048q4_0', 7077888), ('q4_0 1024x4096', 2359296), ('q4_0 14336x4096', 33030144), ('q8_0 14336x4096', 62390272), ('f16 14336x4096', 117440512)]:
    n16 = nbytes // 16
    nb = max(2, math.ceil((512 << 20) / nbytes))
    bufs = [cp.random.randint(0, 2**31, size=nbytes // 4, dtype=cp.int32) for _ in range(nb)]
    row = {'case': name, 'bytes': nbytes}
    for u, m in mods.items():
        k = m.get_function('oneshot')
        g = (n16 + 256 * u - 1) // (256 * u)
        row[f'oneshot_u{u}'] = timed(lambda b: k((g,), (256,), (b, cp.int64(n16), cp.uint32(0x9e3779b9), scratch)), bufs)
        kp = m.get_function('persist')
        for per in (2, 4, 8):
            gp = min(sms * per, g)
            row[f'persist_u{u}_b{per}'] = timed(lambda b: kp((gp,), (256,), (b, cp.int64(n16), cp.uint32(0x9e3779b9), scratch)), bufs)
    row['cupy_sum_int32'] = timed(lambda b: b.sum(), bufs)
    best = min((v[0], k) for k, v in row.items() if isinstance(v, tuple))
    row['best'] = best
    print(json.dumps(row), flush=True)
    res.append(row)
    del bufs
