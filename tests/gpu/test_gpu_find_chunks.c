/*
 * sw_find_sequence_chunks (find_sequence.c) on the GPU: frames given as stored bitshuffle/LZ4
 * chunks (several per frame, read by several reader threads from memory) give exactly the spots
 * and statistics of sw_find_sequence on the CPU over the same frames decoded by the CPU decoder,
 * in 2-D and 3-D, with frames the chunk source does not give (read decoded instead) mixed in, and
 * a frame whose LZ4 block has an offset of 0 (liblz4 decodes it as zeros, the GPU refuses it:
 * decoded on the CPU, same frame). A damaged frame fails the run with SW_EFORMAT naming the frame
 * and the CPU decoder's reason, and leaves the spot list as it was. Skips (77) without a GPU.
 */
#include "find_testutil.h"
#include "testutil.h"

#ifndef SW_HAVE_CUDA
int main(void)
{
    return 77; /* built without CUDA: nothing to compare */
}
#else

#include "bshuf_cases.h"
#include "io/bitshuffle.h"
#include "io/bitshuffle_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { W = 192, H = 160, ROWS = 16, NF = 9, NCH = H / ROWS };

static sw_context *gpu, *cpu;

/* The frames: their pixels, each one's stored chunks and table. */
typedef struct store {
    uint16_t px[NF][H][W];
    uint8_t *enc[NF];
    size_t enc_size[NF];
    sw_find_chunk ch[NF][NCH];
    int not_chunks[NF]; /* the chunk source says 0 for it */
} store;

static store *S;

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

/* Encodes frame k's rows as NCH chunks of ROWS rows. */
static void encode(int k)
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
static void make_frames(void)
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

static void free_frames(void)
{
    for (int k = 0; k < NF; k++)
        free(S->enc[k]);
    free(S);
    S = NULL;
}

/* The frame source: frame index decoded by the CPU decoder from its chunks (as a reader would
 * give it). */
static sw_status read_frame(void *user, int64_t index, sw_image *dst)
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
static sw_status read_chunks(void *user, int64_t index, void *buf, size_t cap,
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

static size_t largest(void)
{
    size_t m = 0;
    for (int k = 0; k < NF; k++)
        m = S->enc_size[k] > m ? S->enc_size[k] : m;
    return m + 64;
}

/* Spots and statistics of the CPU (sw_find_sequence) and of the GPU with the chunk source. */
static void compare(int three_d, int readers, int64_t want_gpu_frames)
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

static void same_spots(void **state)
{
    (void)state;
    make_frames();
    for (int readers = 1; readers <= 6; readers += 5) {
        compare(0, readers, NF);
        compare(1, readers, NF);
    }
    compare(0, 0, NF); /* the default: 4 readers */
    /* frames 2 and 5 read decoded (the chunk source gives them not) */
    S->not_chunks[2] = S->not_chunks[5] = 1;
    compare(0, 3, NF - 2);
    compare(1, 3, NF - 2);
    S->not_chunks[2] = S->not_chunks[5] = 0;
    free_frames();
}

/* Frame 4's chunk 3 as a hand-made block of 32 elements with an LZ4 offset of 0 (liblz4: zeros):
 * the GPU refuses it, the frame is decoded on the CPU, the spots are the CPU's. */
static void offset_zero_frame(void **state)
{
    (void)state;
    make_frames();
    const int k = 4, c = 3;
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
    compare(0, 2, NF - 1);
    free(raw);
    free(lz);
    free(chunk);
    free(rebuilt);
    free_frames();
}

/* A damaged chunk in frame 6: SW_EFORMAT naming frame 6 and the CPU decoder's reason; the spot
 * list keeps what it held. */
static void damaged_frame(void **state)
{
    (void)state;
    make_frames();
    const int k = 6, c = 2;
    for (uint64_t i = 20; i < 60 && i < S->ch[k][c].size; i++)
        S->enc[k][S->ch[k][c].offset + i] ^= 0x5A;
    char cpu_why[256];
    uint8_t row[ROWS * W * 2];
    if (sw_bshuf_decode_lz4(S->enc[k] + S->ch[k][c].offset, S->ch[k][c].size, row, sizeof row, 2,
                            cpu_why, sizeof cpu_why) == 0) {
        print_message("SKIP: the damage left the chunk valid\n");
        free_frames();
        return;
    }
    sw_find_params p;
    sw_find_params_default(&p, W, H, SW_PIX_U16);
    sw_find_plan *pg = NULL;
    assert_int_equal(sw_find_create(gpu, &p, &pg), SW_OK);
    sw_find_source src = {read_frame, NULL, NULL, NULL};
    sw_find_chunk_source cs = {read_chunks, largest(), NCH, 3, NULL};
    sw_spot_list b = {1, 1, calloc(1, sizeof(sw_spot))}; /* one spot from before */
    assert_non_null(b.spots);
    const sw_status st = sw_find_sequence_chunks(pg, 0, NF, &src, &cs, 0, &b, NULL, NULL);
    assert_int_equal(st, SW_EFORMAT);
    const char *msg = sw_context_error(gpu);
    if (!strstr(msg, "frame 6") || !strstr(msg, cpu_why))
        fail_msg("the message \"%s\" does not name frame 6 and the CPU's reason \"%s\"", msg,
                 cpu_why);
    assert_int_equal(b.count, 1);
    sw_spot_list_free(&b);
    sw_find_destroy(pg);
    free_frames();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_spots),
        cmocka_unit_test(offset_zero_frame),
        cmocka_unit_test(damaged_frame),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#endif
