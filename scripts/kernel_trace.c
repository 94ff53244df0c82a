// A kernel timeline of any CUDA program, device graphs included: preloaded (LD_PRELOAD), it
// asks CUPTI for a record of every kernel the GPU ran (start and end on the GPU's clock, name,
// device graph) and writes them, one line each, to the file KERNEL_TRACE names (default
// kernel-trace.txt) when the program ends:
//
//   start_ns end_ns graph_id name
//
// scripts/kernel_trace.py turns that into per-token timelines. Build (CUPTI's headers and
// library from CUDA or the nvidia-cuda-cupti wheel):
//
//   gcc -O2 -shared -fPIC -o libkernel_trace.so scripts/kernel_trace.c -I$CUPTI/include
//       -L$CUPTI/lib -l:libcupti.so.13 -Wl,-rpath,'$ORIGIN'  (one line)
//
// Kernel records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) leave kernels free to overlap, as they
// run untraced; a device graph's kernels are recorded one by one.
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

#define TRACE_BUFFER_BYTES (16u << 20)

static FILE* trace_out;
static unsigned long long trace_dropped;

static void CUPTIAPI trace_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = aligned_alloc(8, TRACE_BUFFER_BYTES);
    *size = *buffer ? TRACE_BUFFER_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI trace_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                                            size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity* record = NULL;
    while (trace_out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const CUpti_ActivityKernel10* k = (const CUpti_ActivityKernel10*)record;
        fprintf(trace_out, "%llu %llu %u %s\n", (unsigned long long)k->start, (unsigned long long)k->end,
                k->graphId, k->name ? k->name : "?");
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) trace_dropped += dropped;
    free(buffer);
}

__attribute__((constructor)) static void trace_start(void) {
    const char* path = getenv("KERNEL_TRACE");
    trace_out = fopen(path && *path ? path : "kernel-trace.txt", "w");
    if (!trace_out) {
        fprintf(stderr, "kernel_trace: cannot write %s\n", path && *path ? path : "kernel-trace.txt");
        return;
    }
    if (cuptiActivityRegisterCallbacks(trace_buffer_requested, trace_buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: CUPTI refused kernel records\n");
        fclose(trace_out);
        trace_out = NULL;
    }
}

__attribute__((destructor)) static void trace_stop(void) {
    if (!trace_out) return;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    fclose(trace_out);
    trace_out = NULL;
    if (trace_dropped) fprintf(stderr, "kernel_trace: %llu records dropped\n", trace_dropped);
}
