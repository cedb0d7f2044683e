/*
 * bitshuffle/LZ4 decoded on the GPU (bitshuffle_cuda.cu) against the CPU decoder
 * (sw_bshuf_decode_lz4): frames of one and many chunks, element sizes 1, 2 and 4, the default
 * block size, odd multiples of 8 and blocks larger than the GPU's shared memory, tails (element
 * counts not a multiple of 8, a short last block), zeros, random (incompressible), detector-like
 * counts, repeating patterns of 1..16 bytes (overlapping matches of every offset), sparse values
 * (long matches). Every decoded byte must equal the CPU's. Damaged frames (truncated chunks,
 * counts past the end, a wrong header, changed bytes, LZ4 offsets of 0 and before the block,
 * lengths past the block) must be refused with the CPU decoder's reason for the first bad chunk.
 * Run under compute-sanitizer memcheck, nothing may be read or written out of bounds.
 * Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#ifndef SW_HAVE_CUDA
int main(void)
{
    return 77; /* built without CUDA: nothing to compare */
}
#else

#include "bshuf_cases.h"
#include "io/bitshuffle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sw_context *gpu;

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(gpu);
    return 0;
}

/* The CPU decoder on a frame's chunks, in order: 0, or -1 with its reason. */
static int cpu_frame(const uint8_t *enc, const sw_find_chunk *c, size_t n, size_t es, uint8_t *out,
                     char *why, size_t why_size)
{
    for (size_t k = 0; k < n; k++)
        if (sw_bshuf_decode_lz4(enc + c[k].offset, c[k].size, out + c[k].out_offset, c[k].out_size,
                                es, why, why_size) != 0)
            return -1;
    return 0;
}

/* Decodes one generated frame on the GPU and compares it with the data and the CPU's decoding. */
static void one_frame(size_t es, size_t block, const size_t *elems, size_t nchunks, int kind,
                      int period, uint64_t seed)
{
    uint8_t *raw, *enc;
    size_t raw_size, enc_size;
    sw_find_chunk *ch;
    assert_int_equal(bc_frame(es, block, elems, nchunks, kind, period, seed, &raw, &raw_size, &enc,
                              &enc_size, &ch),
                     0);
    uint8_t *out = malloc(raw_size ? raw_size : 1), *cpu = malloc(raw_size ? raw_size : 1);
    assert_non_null(out);
    assert_non_null(cpu);
    char why[512];
    assert_int_equal(cpu_frame(enc, ch, nchunks, es, cpu, why, sizeof why), 0);
    const int rc = sw_bshuf_decode_frame_gpu(enc, enc_size, ch, nchunks, es, out, raw_size, NULL,
                                             why, sizeof why);
    if (rc != 0)
        fail_msg("es %zu block %zu chunks %zu kind %d period %d: the GPU refused a valid frame "
                 "(%d: %s)",
                 es, block, nchunks, kind, period, rc, why);
    for (size_t i = 0; i < raw_size; i++)
        if (out[i] != cpu[i] || out[i] != raw[i])
            fail_msg("es %zu block %zu chunks %zu kind %d period %d: byte %zu of %zu is %u on the "
                     "GPU, %u on the CPU, %u in the data",
                     es, block, nchunks, kind, period, i, raw_size, out[i], cpu[i], raw[i]);
    free(raw);
    free(enc);
    free(ch);
    free(out);
    free(cpu);
}

/* Every element size, block size, tail and data kind, one chunk and many. */
static void same_as_cpu(void **state)
{
    (void)state;
    const size_t ess[] = {1, 2, 4};
    /* default, odd multiples of 8 (the last ones above the 8 KiB of shared memory a warp has for
     * 2- and 4-byte elements) */
    const size_t blocks[] = {0, 8, 24, 8 * 127, 8 * 513, 8 * 1025};
    const size_t elems[][5] = {
        {8192, 0, 0, 0, 0}, {4096 * 3 + 1000, 0, 0, 0, 0},  {13, 0, 0, 0, 0},
        {5, 0, 0, 0, 0},    {2048, 2048, 2048, 2048, 2048}, {70000, 333, 9, 4096, 1}};
    const size_t nch[] = {1, 1, 1, 1, 5, 5};
    for (size_t ei = 0; ei < 3; ei++)
        for (size_t bi = 0; bi < 6; bi++)
            for (size_t ci = 0; ci < 6; ci++)
                for (int kind = 0; kind < BC_KINDS; kind++)
                    one_frame(ess[ei], blocks[bi], elems[ci], nch[ci], kind,
                              1 + (int)((ei + bi + ci) % 16), ei * 100 + bi * 10 + ci);
    /* overlapping matches of every offset 1..16 */
    const size_t one[] = {4096};
    for (int period = 1; period <= 16; period++)
        for (size_t ei = 0; ei < 3; ei++)
            one_frame(ess[ei], 0, one, 1, BC_PERIOD, period, (uint64_t)period);
}

/* An Eiger-like frame: 1024 x 1024 u16 in 16 chunks of 64 rows, and in one chunk. */
static void many_chunks(void **state)
{
    (void)state;
    size_t rows[16];
    for (int i = 0; i < 16; i++)
        rows[i] = 64 * 1024;
    one_frame(2, 0, rows, 16, BC_POISSON, 1, 5);
    const size_t whole[] = {1024 * 1024};
    one_frame(2, 0, whole, 1, BC_POISSON, 1, 6);
    one_frame(4, 0, whole, 1, BC_POISSON, 1, 7);
}

/* Damaged frames: refused (-1) with the reason the CPU decoder gives for the first bad chunk;
 * valid ones still decode to the CPU's bytes. */
static void damaged_frames(void **state)
{
    (void)state;
    const size_t elems[] = {3000, 4096, 77};
    uint8_t *raw, *enc;
    size_t raw_size, enc_size;
    sw_find_chunk *ch;
    assert_int_equal(
        bc_frame(2, 0, elems, 3, BC_POISSON, 1, 9, &raw, &raw_size, &enc, &enc_size, &ch), 0);
    uint8_t *bad = malloc(enc_size), *out = malloc(raw_size), *cpu = malloc(raw_size);
    assert_non_null(bad);
    assert_non_null(out);
    assert_non_null(cpu);
    uint64_t s = 5;
    int refused = 0;
    for (int trial = 0; trial < 600; trial++) {
        memcpy(bad, enc, enc_size);
        sw_find_chunk c[3];
        memcpy(c, ch, sizeof c);
        const size_t k = bc_rng(&s) % 3;
        const uint64_t r = bc_rng(&s);
        switch (trial % 6) {
        case 0: c[k].size -= 1 + r % (c[k].size - 1); break;
        case 1: c[k].size += 1 + r % 8; break;
        case 2: bc_put_be(bad + c[k].offset + 12, r % 70000, 4); break;
        case 3: bc_put_be(bad + c[k].offset, r % 20000, 8); break;
        case 4: bc_put_be(bad + c[k].offset + 8, r % 40, 4); break;
        default:
            for (int f = 0; f < 3; f++)
                bad[c[k].offset + bc_rng(&s) % c[k].size] ^= (uint8_t)(1u << (r >> (8 * f)) % 8);
        }
        if (c[k].offset + c[k].size > enc_size)
            c[k].size = enc_size - c[k].offset;
        char wc[512] = "", wg[512] = "";
        const int rc_cpu = cpu_frame(bad, c, 3, 2, cpu, wc, sizeof wc);
        const int rc_gpu =
            sw_bshuf_decode_frame_gpu(bad, enc_size, c, 3, 2, out, raw_size, NULL, wg, sizeof wg);
        if (rc_gpu == -2)
            fail_msg("trial %d: CUDA failed: %s", trial, wg);
        if (rc_cpu == 0 && rc_gpu == 0) {
            assert_memory_equal(out, cpu, raw_size);
        } else if (rc_cpu != 0) {
            refused++;
            if (rc_gpu != -1)
                fail_msg("trial %d: the CPU refuses the frame (%s) but the GPU decodes it", trial,
                         wc);
            if (!strstr(wg, wc))
                fail_msg("trial %d: the GPU's reason \"%s\" is not the CPU's \"%s\"", trial, wg,
                         wc);
        } else if (!strstr(wg, "offset of 0")) {
            fail_msg("trial %d: the GPU refuses a frame the CPU decodes (%s)", trial, wg);
        }
    }
    assert_true(refused > 200);
    free(raw);
    free(enc);
    free(ch);
    free(bad);
    free(out);
    free(cpu);
}

/* Hand-made blocks: offsets 1..8 (overlapping) decode; offset 0, an offset before the block,
 * lengths past the block are refused. */
static void hand_made(void **state)
{
    (void)state;
    uint8_t lz[64], chunk[128], out[64], cpu[64];
    const struct {
        unsigned off, ext, last;
        int valid;
    } cases[] = {{1, 25, 12, 1}, {2, 25, 12, 1}, {5, 25, 12, 1},   {8, 25, 12, 1},
                 {0, 25, 12, 0}, {9, 25, 12, 0}, {4, 200, 12, 0},  {4, 25, 13, 0},
                 {4, 25, 11, 0}, {4, 33, 4, 0},  {300, 25, 12, 0}, {4, 26, 12, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const size_t m = bc_hand_block(lz, cases[i].off, cases[i].ext, cases[i].last);
        const size_t cs = bc_hand_chunk(chunk, lz, m);
        const sw_find_chunk c = {0, cs, 0, 64};
        char why[512];
        const int rc =
            sw_bshuf_decode_frame_gpu(chunk, cs, &c, 1, 1, out, 64, NULL, why, sizeof why);
        if (cases[i].valid) {
            if (rc != 0)
                fail_msg("hand-made block %zu (offset %u) refused: %s", i, cases[i].off, why);
            assert_int_equal(sw_bshuf_decode_lz4(chunk, cs, cpu, 64, 1, why, sizeof why), 0);
            assert_memory_equal(out, cpu, 64);
        } else if (rc != -1) {
            fail_msg("hand-made block %zu (offset %u, extension %u, last %u) not refused: %d", i,
                     cases[i].off, cases[i].ext, cases[i].last, rc);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_as_cpu),
        cmocka_unit_test(many_chunks),
        cmocka_unit_test(damaged_frames),
        cmocka_unit_test(hand_made),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#endif
