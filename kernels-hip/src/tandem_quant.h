// ggml's quantized block layouts, byte for byte (ggml 0.26.0; the Rust mirrors with const-asserted
// sizes are in graph/src/blocks.rs). Half-precision fields are kept as their u16 bits and read
// with tandem_f16_to_f32, so the structs have the same size and alignment under every compiler.
#pragma once
#include "tandem_hip.h"

#define TANDEM_QK4_0 32
#define TANDEM_QK8_0 32
#define TANDEM_QK_K 256

struct tandem_block_q4_0 {
    u16 d;
    u8 qs[16];
};
struct tandem_block_q4_1 {
    u16 d;
    u16 m;
    u8 qs[16];
};
struct tandem_block_q5_0 {
    u16 d;
    u8 qh[4];
    u8 qs[16];
};
struct tandem_block_q5_1 {
    u16 d;
    u16 m;
    u8 qh[4];
    u8 qs[16];
};
struct tandem_block_q8_0 {
    u16 d;
    i8 qs[32];
};
struct tandem_block_q8_1 {
    u16 d;
    u16 s;
    i8 qs[32];
};
struct tandem_block_q2_K {
    u8 scales[16];
    u8 qs[64];
    u16 d;
    u16 dmin;
};
struct tandem_block_q3_K {
    u8 hmask[32];
    u8 qs[64];
    u8 scales[12];
    u16 d;
};
struct tandem_block_q4_K {
    u16 d;
    u16 dmin;
    u8 scales[12];
    u8 qs[128];
};
struct tandem_block_q5_K {
    u16 d;
    u16 dmin;
    u8 scales[12];
    u8 qh[32];
    u8 qs[128];
};
struct tandem_block_q6_K {
    u8 ql[128];
    u8 qh[64];
    i8 scales[16];
    u16 d;
};
struct tandem_block_q8_K {
    float d;
    i8 qs[256];
    i16 bsums[16];
};
struct tandem_block_iq4_nl {
    u16 d;
    u8 qs[16];
};

static_assert(sizeof(tandem_block_q4_0) == 18, "q4_0 block");
static_assert(sizeof(tandem_block_q4_1) == 20, "q4_1 block");
static_assert(sizeof(tandem_block_q5_0) == 22, "q5_0 block");
static_assert(sizeof(tandem_block_q5_1) == 24, "q5_1 block");
static_assert(sizeof(tandem_block_q8_0) == 34, "q8_0 block");
static_assert(sizeof(tandem_block_q8_1) == 36, "q8_1 block");
static_assert(sizeof(tandem_block_q2_K) == 84, "q2_K block");
static_assert(sizeof(tandem_block_q3_K) == 110, "q3_K block");
static_assert(sizeof(tandem_block_q4_K) == 144, "q4_K block");
static_assert(sizeof(tandem_block_q5_K) == 176, "q5_K block");
static_assert(sizeof(tandem_block_q6_K) == 210, "q6_K block");
static_assert(sizeof(tandem_block_q8_K) == 292, "q8_K block");
static_assert(sizeof(tandem_block_iq4_nl) == 18, "iq4_nl block");
