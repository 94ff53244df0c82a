// Back-to-back harness for the q4_0 units GEMV (docs/performance.md, thirty-sixth record).
//
// Compiles kernels-hip/src/gemv.hip and copy.hip with NVRTC exactly as tandem's JIT does (sm_90,
// C++17, the two headers), then times 64 GEMV nodes of its own back to back, each a dependent
// launch of `tandem_gemv_<type>_u1` over a weight copy of its own (so the 50 MB L2 does not hold
// them), and the read probe over the same bytes; once queued launch by launch on a stream (as
// tandem queues a graph today) and once captured into a CUDA graph and replayed. Every timed run
// goes behind 1 GiB of device-to-device copies, so the host's queueing is not timed. Prints
// device µs per node, medians of 20 runs after 5 untimed ones.
//
// A variant patches the kernel source before it compiles, to see what a part of the kernel costs
// (their results are not checked, and `nostore` writes none):
//   base        the kernel as it is
//   nowait      the held sums written without waiting for the kernel ahead (no griddepcontrol.wait)
//   nostore     the wait, no stores
//   storefirst  the held sums stored before the wait
// The base variant's first node is checked against a host reference (NMSE <= 5e-4) after the
// stream run and after the graph run; any failure exits non-zero.
//
// Build and run on a machine with an NVIDIA sm_90 GPU and the CUDA toolkit, from the repo root:
//   nvcc -O2 -std=c++17 scripts/chain-harness.cpp -lcuda -lnvrtc -o chain-harness
//   ./chain-harness VARIANT ROWS:BLOCKS...     e.g. ./chain-harness base 1024:32 2048:64
// BLOCKS is the grid tandem's launcher gives the case (matmul_launch.rs, `units_one_per_unit`:
// 1024 rows 32, 2048 rows 64, 3072 rows 96, 4096 rows 128; 14336 rows 264, two per SM).
#include <cuda.h>
#include <nvrtc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static void fail(const std::string& what) {
    fprintf(stderr, "chain-harness: %s\n", what.c_str());
    exit(1);
}
#define CK(x)                                                                          \
    do {                                                                               \
        CUresult e_ = (x);                                                             \
        if (e_ != CUDA_SUCCESS) {                                                      \
            const char* m_ = "?";                                                      \
            cuGetErrorString(e_, &m_);                                                 \
            fail(std::string(#x) + ": " + m_ + " (line " + std::to_string(__LINE__) + ")"); \
        }                                                                              \
    } while (0)

static std::string read_file(const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    if (!f || s.str().empty()) fail("cannot read " + p + " (run from the repository root)");
    return s.str();
}
static void patch(std::string& s, const std::string& a, const std::string& b) {
    const size_t i = s.find(a);
    if (i == std::string::npos || s.find(a, i + 1) != std::string::npos)
        fail("the kernel source no longer has the text this variant patches:\n" + a);
    s.replace(i, a.size(), b);
}
static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Mirrors tandem_mm_shape (gemv.hip).
struct Shape {
    long long k, m, n, ne12, ne13, r2, r3, nb01, nb02, nb03, nb10, nb11, nb12, nb13, nb1, nb2, nb3, flags;
};

static CUmodule build(const std::string& src, const char* name, const std::string& hip, const std::string& quant) {
    const char* hs[2] = {hip.c_str(), quant.c_str()};
    const char* hn[2] = {"tandem_hip.h", "tandem_quant.h"};
    nvrtcProgram p;
    if (nvrtcCreateProgram(&p, src.c_str(), name, 2, hs, hn) != NVRTC_SUCCESS) fail("nvrtcCreateProgram");
    const char* opts[] = {"--gpu-architecture=sm_90", "-std=c++17"};
    const nvrtcResult r = nvrtcCompileProgram(p, 2, opts);
    size_t ls = 0;
    nvrtcGetProgramLogSize(p, &ls);
    std::string log(ls, '\0');
    nvrtcGetProgramLog(p, &log[0]);
    if (r != NVRTC_SUCCESS) fail(std::string(name) + " failed to compile:\n" + log);
    size_t n = 0;
    nvrtcGetCUBINSize(p, &n);
    std::vector<char> cubin(n);
    nvrtcGetCUBIN(p, cubin.data());
    nvrtcDestroyProgram(&p);
    CUmodule m;
    CK(cuModuleLoadData(&m, cubin.data()));
    return m;
}

int main(int argc, char** argv) {
    if (argc < 3) fail("usage: chain-harness base|nowait|nostore|storefirst ROWS:BLOCKS...");
    const std::string var = argv[1];
    std::vector<std::pair<long, int>> cases;
    for (int a = 2; a < argc; ++a) {
        long rows = 0;
        int grid = 0;
        if (sscanf(argv[a], "%ld:%d", &rows, &grid) != 2 || rows <= 0 || grid <= 0)
            fail(std::string("not ROWS:BLOCKS (both positive): ") + argv[a]);
        cases.emplace_back(rows, grid);
    }
    const std::string dir = "kernels-hip/src/";
    const std::string hip = read_file(dir + "tandem_hip.h"), quant = read_file(dir + "tandem_quant.h");
    std::string g = read_file(dir + "gemv.hip");
    const std::string cp = read_file(dir + "copy.hip");
    const std::string stores =
        "#pragma unroll\n        for (int h = 0; h < HELD; ++h) {\n"
        "            if (h < upto && sg == 0 && row_of(h) < m) *(float*)(out + row_of(h) * 4) = held[h];\n        }";
    const std::string wait = "        tandem_grid_wait();\n        waited = true;\n";
    if (var == "nowait") {
        patch(g, wait + stores, "        waited = true;\n" + stores);
    } else if (var == "nostore") {
        patch(g, wait + stores, wait);
    } else if (var == "storefirst") {
        patch(g, wait + stores, stores + "\n" + wait);
    } else if (var != "base") {
        fail("unknown variant " + var);
    }

    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUmodule mg = build(g, "gemv.hip", hip, quant), mc = build(cp, "copy.hip", hip, quant);
    CUfunction fg, fp;
    CK(cuModuleGetFunction(&fg, mg, "tandem_gemv_q4_0_u1"));
    CK(cuModuleGetFunction(&fp, mc, "tandem_read_probe"));

    const int nodes = 64, threads = 256, waves = threads / 32;
    const long k = 4096;
    // Two stage slots of 32 segments of 144 bytes per wave, then the q8_1 column (gemv_act_bytes).
    const int smem = waves * 2 * 32 * 144 + (int)(k + k / 32 * 8);
    CK(cuFuncSetAttribute(fg, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
    for (const auto& [m, blocks] : cases) {
        const long row_bytes = k / 32 * 18, wbytes = row_bytes * m;
        const long wstride = (wbytes + 4095) / 4096 * 4096, dstride = (m * 4 + 4095) / 4096 * 4096;

        // Weights: q4_0 blocks of scale 1/16 and random nibbles; columns of random values in [-1, 1).
        std::vector<unsigned char> w0(wbytes);
        unsigned long long rng = 0x9e3779b97f4a7c15ull;
        const auto next = [&] {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            return (unsigned)(rng >> 33);
        };
        for (long b = 0; b < wbytes / 18; ++b) {
            w0[b * 18] = 0x00;
            w0[b * 18 + 1] = 0x2c;  // f16 0.0625
            for (int j = 0; j < 16; ++j) w0[b * 18 + 2 + j] = (unsigned char)next();
        }
        std::vector<float> x0(k * nodes);
        for (auto& v : x0) v = (float)((int)(next() % 2048) - 1024) / 1024.0f;
        const size_t runway_bytes = 256u << 20;
        CUdeviceptr w, col, dst, ra, rb, scratch;
        CK(cuMemAlloc(&w, wstride * nodes));
        for (int i = 0; i < nodes; ++i) CK(cuMemcpyHtoD(w + wstride * i, w0.data(), wbytes));
        CK(cuMemAlloc(&col, k * 4 * nodes));
        CK(cuMemcpyHtoD(col, x0.data(), k * 4 * nodes));
        CK(cuMemAlloc(&dst, dstride * nodes));
        CK(cuMemAlloc(&ra, runway_bytes));
        CK(cuMemAlloc(&rb, runway_bytes));
        CK(cuMemAlloc(&scratch, 64));
        CUstream s;
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CUevent e0, e1;
        CK(cuEventCreate(&e0, 0));
        CK(cuEventCreate(&e1, 0));

        CUlaunchAttribute dependent[1];
        dependent[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        dependent[0].value.programmaticStreamSerializationAllowed = 1;
        const auto launch = [&](CUfunction f, unsigned grid, unsigned shared, void** args) {
            CUlaunchConfig c = {};
            c.gridDimX = grid;
            c.gridDimY = c.gridDimZ = 1;
            c.blockDimX = threads;
            c.blockDimY = c.blockDimZ = 1;
            c.sharedMemBytes = shared;
            c.hStream = s;
            c.attrs = dependent;
            c.numAttrs = 1;
            CK(cuLaunchKernelEx(&c, f, args, nullptr));
        };
        const auto gemv_chain = [&] {
            for (int i = 0; i < nodes; ++i) {
                CUdeviceptr wi = w + wstride * i, ci = col + k * 4 * i, di = dst + dstride * i;
                // One column in place before the kernel starts (TANDEM_MM_ACT_EARLY), as in the chain
                // of `tandem perf-ops`.
                Shape sh = {k, m, 1, 1, 1, 1, 1, row_bytes, wbytes, wbytes, 4, k * 4, k * 4, k * 4, m * 4, m * 4, m * 4, 1};
                void* args[] = {&wi, &ci, &di, &sh};
                launch(fg, blocks, smem, args);
            }
        };
        long long n16 = wbytes / 16;
        unsigned never = 0x9e3779b9u;
        const auto probe_chain = [&] {
            for (int i = 0; i < nodes; ++i) {
                CUdeviceptr wi = w + wstride * i;
                void* args[] = {&wi, &n16, &never, &scratch};
                launch(fp, (unsigned)((n16 + 1023) / 1024), 0, args);
            }
        };
        const auto timed = [&](const auto& queue) {
            std::vector<float> per;
            for (int r = 0; r < 25; ++r) {
                for (int q = 0; q < 4; ++q) CK(cuMemcpyDtoDAsync(rb, ra, runway_bytes, s));
                CK(cuEventRecord(e0, s));
                queue();
                CK(cuEventRecord(e1, s));
                CK(cuStreamSynchronize(s));
                float ms = 0;
                CK(cuEventElapsedTime(&ms, e0, e1));
                if (r >= 5) per.push_back(ms * 1e3f / nodes);
            }
            return median(per);
        };
        const auto graph_of = [&](const auto& queue) {
            CUgraph gr;
            CUgraphExec ge;
            CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
            queue();
            CK(cuStreamEndCapture(s, &gr));
            CK(cuGraphInstantiate(&ge, gr, 0));
            CK(cuGraphDestroy(gr));
            return ge;
        };
        // NMSE of node 0's rows against the host's sums (f32 activations, exact weights).
        const auto check = [&](const char* how) {
            if (var != "base") return;
            std::vector<float> y(m);
            CK(cuMemcpyDtoH(y.data(), dst, m * 4));
            double err = 0, ref = 0;
            for (long r = 0; r < m; ++r) {
                double acc = 0;
                for (long b = 0; b < k / 32; ++b) {
                    const unsigned char* q = &w0[r * row_bytes + b * 18 + 2];
                    for (int j = 0; j < 16; ++j) {
                        acc += 0.0625 * ((q[j] & 15) - 8) * x0[b * 32 + j];
                        acc += 0.0625 * ((q[j] >> 4) - 8) * x0[b * 32 + j + 16];
                    }
                }
                err += (y[r] - acc) * (y[r] - acc);
                ref += acc * acc;
            }
            const double nmse = err / std::max(ref, 1e-30);
            if (!(nmse <= 5e-4)) fail(std::string(how) + ": node 0 does not match the host (NMSE " + std::to_string(nmse) + ")");
            printf("  %s: node 0 matches the host, NMSE %.2e\n", how, nmse);
        };

        CK(cuMemsetD8(dst, 0xff, dstride * nodes));
        const float stream_gemv = timed(gemv_chain);
        check("stream");
        const float stream_probe = timed(probe_chain);
        CUgraphExec gg = graph_of(gemv_chain), gp = graph_of(probe_chain);
        CK(cuMemsetD8(dst, 0xff, dstride * nodes));
        const float graph_gemv = timed([&] { CK(cuGraphLaunch(gg, s)); });
        check("graph");
        const float graph_probe = timed([&] { CK(cuGraphLaunch(gp, s)); });
        const double mb = (double)wbytes;  // bytes per µs / 1e6 = TB/s
        printf("q4_0 %ld x %ld, %d blocks, %s: stream gemv %.3f probe %.3f | graph gemv %.3f probe %.3f us/node "
               "(gemv %.2f / %.2f TB/s)\n",
               m, k, blocks, var.c_str(), stream_gemv, stream_probe, graph_gemv, graph_probe, mb / stream_gemv / 1e6,
               mb / graph_gemv / 1e6);
        CK(cuGraphExecDestroy(gg));
        CK(cuGraphExecDestroy(gp));
        CK(cuStreamDestroy(s));
        CK(cuEventDestroy(e0));
        CK(cuEventDestroy(e1));
        for (CUdeviceptr p : {w, col, dst, ra, rb, scratch}) CK(cuMemFree(p));
    }
    return 0;
}
