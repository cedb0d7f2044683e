/*
 * Frames for the tests of sw_find_sequence_chunks (tests/unit/test_find_chunks.c on the CPU,
 * tests/gpu/test_gpu_find_chunks.c on the GPU): Poisson scenes with spots, each frame stored as
 * NCH bitshuffle/LZ4 chunks of ROWS rows; a frame source that decodes them with the CPU decoder
 * and a chunk source that hands them out (both thread-safe), a frame whose chunk has an LZ4
 * offset of 0 (which liblz4 decodes as zeros) and a damaged chunk.
 */
#ifndef SW_TEST_FIND_CHUNKS_CASES_H
#define SW_TEST_FIND_CHUNKS_CASES_H

#include "bshuf_cases.h"
#include "find_testutil.h"
#include "io/bitshuffle.h"
#include "io/bitshuffle_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { W = 192, H = 160, ROWS = 16, NF = 9, NCH = H / ROWS };

/* The frames: their pixels, each one's stored chunks and table. */
typedef struct store {
    uint16_t px[NF][H][W];
    uint8_t *enc[NF];
    size_t enc_size[NF];
    sw_find_chunk ch[NF][NCH];
    int not_chunks[NF]; /* the chunk source says 0 for it */
} store;

static store *S;

/* Encodes frame k's rows as NCH chunks of ROWS rows. */
static inline void encode(int k)
{
    const size_t bytes = (size_t)ROWS * W * 2, cap = sw_bshuf_lz4_bound(bytes, 2, 0);
    free(S->enc[k]);
    S->enc[k] = malloc(cap * NCH);
    assert_non_null(S->enc[k]);
    size_t at = 0;
    for (int c = 0; c < NCH; c++) {
        size_t m = sw_bshuf_encode_lz4((const uint8_t *)&S->px[k][c * ROWS][0], bytes,
                                       S->enc[k] + at, cap * NCH - at, 2, 0);
        assert_true(m > 0);
        S->ch[k][c] = (sw_find_chunk){at, m, (uint64_t)c * bytes, bytes};
        at += m;
    }
    S->enc_size[k] = at;
}

/* The frames: Poisson scenes with spots. */
static inline void make_frames(void)
{
    S = calloc(1, sizeof *S);
    assert_non_null(S);
    trng r = trng_make(2024);
    double *v = malloc((size_t)W * H * sizeof(double));
    assert_non_null(v);
    for (int k = 0; k < NF; k++) {
        scene(W, H, 1.5, 25, &r, v);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                S->px[k][y][x] = (uint16_t)v[(size_t)y * W + x];
        encode(k);
    }
    free(v);
}

static inline void free_frames(void)
{
    for (int k = 0; k < NF; k++)
        free(S->enc[k]);
    free(S);
    S = NULL;
}

/* The frame source: frame index decoded by the CPU decoder from its chunks (as a reader would
 * give it). */
static inline sw_status read_frame(void *user, int64_t index, sw_image *dst)
{
    (void)user;
    const int k = (int)index;
    char why[256];
    for (int c = 0; c < NCH; c++) {
        uint8_t row[ROWS * W * 2];
        if (sw_bshuf_decode_lz4(S->enc[k] + S->ch[k][c].offset, S->ch[k][c].size, row, sizeof row,
                                2, why, sizeof why) != 0)
            return sw_error_set(NULL, SW_EFORMAT, "frame %d: %s", k, why);
        for (int y = 0; y < ROWS; y++)
            memcpy(sw_image_row(dst, c * ROWS + y), row + (size_t)y * W * 2, (size_t)W * 2);
    }
    return SW_OK;
}

/* The chunk source (thread-safe: it only reads the store). */
static inline sw_status read_chunks(void *user, int64_t index, void *buf, size_t cap,
                                    sw_find_chunk *chunks, int64_t max_chunks, int64_t *nchunks)
{
    (void)user;
    const int k = (int)index;
    *nchunks = 0;
    if (S->not_chunks[k])
        return SW_OK;
    if (S->enc_size[k] > cap || max_chunks < NCH)
        return sw_error_set(NULL, SW_EINVAL, "frame %d does not fit", k);
    memcpy(buf, S->enc[k], S->enc_size[k]);
    memcpy(chunks, S->ch[k], sizeof S->ch[k]);
    *nchunks = NCH;
    return SW_OK;
}

static inline size_t largest(void)
{
    size_t m = 0;
    for (int k = 0; k < NF; k++)
        m = S->enc_size[k] > m ? S->enc_size[k] : m;
    return m + 64;
}

/* Frame k's chunk c replaced by one whose first LZ4 block (blocks of 32 elements) is the
 * hand-made block with an offset of 0: the frame's pixels become what the CPU decoder makes of
 * it. */
static inline void offset_zero(int k, int c)
{
    const size_t bytes = (size_t)ROWS * W * 2;
    uint8_t *raw = malloc(bytes), *lz = malloc(64),
            *chunk = malloc(sw_bshuf_lz4_bound(bytes, 2, 32));
    assert_non_null(raw);
    assert_non_null(lz);
    assert_non_null(chunk);
    memcpy(raw, &S->px[k][c * ROWS][0], bytes);
    /* a chunk of blocks of 32 elements (64 bytes): every block encoded, then block 0 replaced by
     * the hand-made one (8 literals, 44 bytes at offset 0, 12 literals) */
    size_t m = sw_bshuf_encode_lz4(raw, bytes, chunk, sw_bshuf_lz4_bound(bytes, 2, 32), 2, 32);
    assert_true(m > 0);
    const size_t old = sw_bm_be32(chunk + 12), hand = bc_hand_block(lz, 0, 25, 12);
    uint8_t *rebuilt = malloc(m - old + hand);
    assert_non_null(rebuilt);
    memcpy(rebuilt, chunk, 12);
    bc_put_be(rebuilt + 12, hand, 4);
    memcpy(rebuilt + 16, lz, hand);
    memcpy(rebuilt + 16 + hand, chunk + 16 + old, m - 16 - old);
    const size_t nm = m - old + hand;
    /* the CPU decoder takes it (liblz4 decodes offset 0 as zeros): its pixels become the frame's */
    char why[256];
    assert_int_equal(sw_bshuf_decode_lz4(rebuilt, nm, raw, bytes, 2, why, sizeof why), 0);
    memcpy(&S->px[k][c * ROWS][0], raw, bytes);
    encode(k);
    /* splice the hand-made chunk in place of chunk c */
    uint8_t *enc = malloc(S->enc_size[k] + nm);
    assert_non_null(enc);
    size_t at = 0;
    for (int j = 0; j < NCH; j++) {
        const uint8_t *from = j == c ? rebuilt : S->enc[k] + S->ch[k][j].offset;
        const size_t n = j == c ? nm : S->ch[k][j].size;
        memcpy(enc + at, from, n);
        S->ch[k][j].offset = at;
        S->ch[k][j].size = n;
        at += n;
    }
    free(S->enc[k]);
    S->enc[k] = enc;
    S->enc_size[k] = at;
    free(raw);
    free(lz);
    free(chunk);
    free(rebuilt);
}

/* Damages frame k's chunk c (bytes 20 .. 59 flipped): the CPU decoder's reason in why, or "" when
 * the chunk still decodes. */
static inline void damage(int k, int c, char *why, size_t why_size)
{
    for (uint64_t i = 20; i < 60 && i < S->ch[k][c].size; i++)
        S->enc[k][S->ch[k][c].offset + i] ^= 0x5A;
    uint8_t *row = malloc((size_t)ROWS * W * 2);
    assert_non_null(row);
    if (sw_bshuf_decode_lz4(S->enc[k] + S->ch[k][c].offset, S->ch[k][c].size, row,
                            (size_t)ROWS * W * 2, 2, why, why_size) == 0)
        why[0] = '\0';
    free(row);
}

/* Spots and statistics of sw_find_sequence on cpu (a CPU context) and of
 * sw_find_sequence_chunks on gpu (a CUDA context, or a CPU one) with the chunk source: equal;
 * want_gpu_frames frames decoded on the GPU. */
static inline void chunks_compare(sw_context *cpu, sw_context *gpu, int three_d, int readers,
                                  int64_t want_gpu_frames)
{
    sw_find_params p;
    sw_find_params_default(&p, W, H, SW_PIX_U16);
    sw_find_plan *pc = NULL, *pg = NULL;
    assert_int_equal(sw_find_create(cpu, &p, &pc), SW_OK);
    assert_int_equal(sw_find_create(gpu, &p, &pg), SW_OK);
    sw_find_source src = {read_frame, NULL, NULL, NULL};
    sw_find_chunk_source cs = {read_chunks, largest(), NCH, readers, NULL};
    sw_spot_list a = {0}, b = {0};
    sw_find_stats sa = {0}, sb = {0};
    assert_int_equal(sw_find_sequence(pc, 0, NF, &src, three_d, &a, &sa), SW_OK);
    int64_t ng = 0;
    sw_status st = sw_find_sequence_chunks(pg, 0, NF, &src, &cs, three_d, &b, &sb, &ng);
    if (st != SW_OK)
        fail_msg("sw_find_sequence_chunks: %s", sw_context_error(gpu));
    assert_true(a.count > 0);
    if (a.count != b.count)
        fail_msg("3d %d readers %d: %lld spots on the CPU, %lld with GPU decoding", three_d,
                 readers, (long long)a.count, (long long)b.count);
    assert_memory_equal(a.spots, b.spots, (size_t)a.count * sizeof(sw_spot));
    assert_int_equal(sa.frames, sb.frames);
    assert_int_equal(sa.valid_pixels, sb.valid_pixels);
    assert_int_equal(sa.strong_pixels, sb.strong_pixels);
    assert_int_equal(sa.components, sb.components);
    assert_int_equal(sa.spots, sb.spots);
    assert_int_equal(ng, want_gpu_frames);
    /* a second run on the same plan (its buffers kept) gives the same */
    sw_spot_list c = {0};
    ng = 0;
    assert_int_equal(sw_find_sequence_chunks(pg, 0, NF, &src, &cs, three_d, &c, NULL, &ng), SW_OK);
    assert_int_equal(c.count, a.count);
    assert_memory_equal(a.spots, c.spots, (size_t)a.count * sizeof(sw_spot));
    sw_spot_list_free(&a);
    sw_spot_list_free(&b);
    sw_spot_list_free(&c);
    sw_find_destroy(pc);
    sw_find_destroy(pg);
}

/* A damaged chunk in frame 6, run on ctx (a CUDA or a CPU context): SW_EFORMAT naming frame 6
 * and the CPU decoder's reason; the spot list keeps what it held. */
static inline void chunks_damaged(sw_context *ctx)
{
    make_frames();
    const int k = 6, c = 2;
    char cpu_why[256];
    damage(k, c, cpu_why, sizeof cpu_why);
    if (!cpu_why[0]) {
        print_message("SKIP: the damage left the chunk valid\n");
        free_frames();
        return;
    }
    sw_find_params p;
    sw_find_params_default(&p, W, H, SW_PIX_U16);
    sw_find_plan *pg = NULL;
    assert_int_equal(sw_find_create(ctx, &p, &pg), SW_OK);
    sw_find_source src = {read_frame, NULL, NULL, NULL};
    sw_find_chunk_source cs = {read_chunks, largest(), NCH, 3, NULL};
    sw_spot_list b = {1, 1, calloc(1, sizeof(sw_spot))}; /* one spot from before */
    assert_non_null(b.spots);
    const sw_status st = sw_find_sequence_chunks(pg, 0, NF, &src, &cs, 0, &b, NULL, NULL);
    assert_int_equal(st, SW_EFORMAT);
    const char *msg = sw_context_error(ctx);
    if (!strstr(msg, "frame 6") || !strstr(msg, cpu_why))
        fail_msg("the message \"%s\" does not name frame 6 and the CPU's reason \"%s\"", msg,
                 cpu_why);
    assert_int_equal(b.count, 1);
    sw_spot_list_free(&b);
    sw_find_destroy(pg);
    free_frames();
}

#endif /* SW_TEST_FIND_CHUNKS_CASES_H */
