/*
 * The parts of the GPU bitshuffle/LZ4 decoder that run here too (bitshuffle.h, "decoding on the
 * GPU"): the LZ4 block decoder the GPU's warps run (bitshuffle_model.h) against liblz4 on valid,
 * hand-made and damaged blocks (same decision, same bytes; offset 0 the one allowed difference),
 * and the frame's table of blocks against sw_bshuf_decode_lz4: decoding by the table (on this
 * thread) gives the CPU decoder's frame, and a chunk the walk refuses is one the CPU refuses. The
 * decoder as the GPU runs it, 32 lanes each copying every 32nd byte of each run with a sync
 * between the sequences, is emulated by 32 threads and a barrier: the same bytes and decisions.
 */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */

#include "testutil.h"

#include <pthread.h>

/* A warp emulated by 32 threads: the shared decoder's syncs become a barrier (in the threads of
 * warp_decode only; a no-op elsewhere in this file). */
static _Thread_local pthread_barrier_t *tl_barrier;
static void warp_sync(void)
{
    if (tl_barrier)
        pthread_barrier_wait(tl_barrier);
}
#define SW_BM_SYNC() warp_sync()

#include "bshuf_cases.h"
#include "io/bitshuffle.h"
#include "io/bitshuffle_model.h"

#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* liblz4's verdict on a block: 1 when it decodes to exactly n bytes (into out), 0 when not, and
 * 2 when it "decodes" but to bytes that depend on what out held before (an offset of 0). */
static int lz4_verdict(const uint8_t *in, size_t m, uint8_t *out, size_t n)
{
    uint8_t *b = malloc(n ? n : 1);
    assert_non_null(b);
    memset(out, 0x00, n);
    memset(b, 0xFF, n);
    const int ga = LZ4_decompress_safe((const char *)in, (char *)out, (int)m, (int)n);
    const int gb = LZ4_decompress_safe((const char *)in, (char *)b, (int)m, (int)n);
    int v = ga == (int)n && gb == (int)n;
    if (v && memcmp(out, b, n) != 0)
        v = 2;
    free(b);
    return v;
}

/* Whether the sequences of an LZ4 block (in, m bytes) have an offset of 0 before they leave
 * the block: liblz4 (1.9) decodes such a match as zeros, the shared decoder refuses it. */
static int has_offset0(const uint8_t *in, size_t m)
{
    size_t ip = 0;
    while (ip < m) {
        const unsigned token = in[ip++];
        size_t lit = token >> 4;
        if (lit == 15)
            for (unsigned s = 255; s == 255 && ip < m; lit += s)
                s = in[ip++];
        if (lit > m - ip || m - ip - lit < 2)
            return 0;
        ip += lit;
        if ((in[ip] | in[ip + 1] << 8) == 0)
            return 1;
        ip += 2;
        if ((token & 15) == 15)
            for (unsigned s = 255; s == 255 && ip < m;)
                s = in[ip++];
    }
    return 0;
}

/* The shared decoder's verdict and liblz4's agree on block in (m bytes, n decoded), and so do
 * the bytes when both accept. */
static void same_as_liblz4(const uint8_t *in, size_t m, size_t n, const char *what)
{
    uint8_t *a = malloc(n ? n : 1), *b = malloc(n ? n : 1);
    assert_non_null(a);
    assert_non_null(b);
    int lz = lz4_verdict(in, m, b, n);
    const int ours = sw_bshuf_lz4_block_decode(in, (uint32_t)m, a, (uint32_t)n) == 0;
    if (lz == 1 && !ours && has_offset0(in, m))
        lz = 2; /* liblz4 writes zeros for it */
    if (lz == 2) {
        if (ours)
            fail_msg("%s: accepted a block whose output depends on the buffer (offset 0)", what);
    } else if (ours != lz) {
        fail_msg("%s: the shared LZ4 decoder says %s but liblz4 says %s (%zu bytes to %zu)", what,
                 ours ? "valid" : "invalid", lz ? "valid" : "invalid", m, n);
    } else if (ours && memcmp(a, b, n) != 0) {
        fail_msg("%s: both accept but the bytes differ", what);
    }
    free(a);
    free(b);
}

typedef struct lane_job {
    const uint8_t *in;
    uint32_t m, n, lane;
    uint8_t *out;
    pthread_barrier_t *barrier;
    int ok;
} lane_job;

static void *lane_main(void *arg)
{
    lane_job *j = arg;
    tl_barrier = j->barrier;
    j->ok = sw_bm_lz4_block(j->in, j->m, j->out, j->n, j->lane, 32);
    return NULL;
}

/* The block decoded by an emulated warp (32 threads, a barrier for each sync): the verdict (every
 * lane must agree) and the bytes in out. */
static int warp_decode(const uint8_t *in, uint32_t m, uint8_t *out, uint32_t n)
{
    pthread_barrier_t b;
    assert_int_equal(pthread_barrier_init(&b, NULL, 32), 0);
    pthread_t th[32];
    lane_job jobs[32];
    for (uint32_t l = 0; l < 32; l++) {
        jobs[l] = (lane_job){in, m, n, l, out, &b, -1};
        assert_int_equal(pthread_create(&th[l], NULL, lane_main, &jobs[l]), 0);
    }
    for (int l = 0; l < 32; l++)
        pthread_join(th[l], NULL);
    pthread_barrier_destroy(&b);
    for (int l = 1; l < 32; l++)
        assert_int_equal(jobs[l].ok, jobs[0].ok);
    return jobs[0].ok;
}

/* 32 lanes decode what one lane decodes, valid blocks (overlapping matches of offsets 1..16,
 * long matches, literals) and damaged ones alike. */
static void warp_lanes_like_one(void **state)
{
    (void)state;
    const size_t sizes[] = {13, 64, 1000, 8192};
    uint64_t s = 4242;
    for (size_t si = 0; si < 4; si++)
        for (int kind = 0; kind < BC_KINDS; kind++)
            for (int period = 1; period <= (kind == BC_PERIOD ? 16 : 1); period++) {
                const size_t n = sizes[si];
                uint8_t *raw = malloc(n), *lz = malloc((size_t)LZ4_compressBound((int)n)),
                        *a = malloc(n), *b = malloc(n);
                assert_non_null(raw);
                assert_non_null(lz);
                assert_non_null(a);
                assert_non_null(b);
                bc_fill(raw, n, 2, kind, period, si * 7 + (size_t)period);
                const int m = LZ4_compress_default((const char *)raw, (char *)lz, (int)n,
                                                   LZ4_compressBound((int)n));
                assert_true(m > 0);
                for (int t = 0; t < 4; t++) {
                    if (t > 0) /* damaged copies */
                        lz[bc_rng(&s) % (uint64_t)m] ^= (uint8_t)(1u << bc_rng(&s) % 8);
                    memset(a, 0, n);
                    memset(b, 0, n);
                    const int one = sw_bm_lz4_block(lz, (uint32_t)m, a, (uint32_t)n, 0, 1);
                    const int warp = warp_decode(lz, (uint32_t)m, b, (uint32_t)n);
                    if (one != warp)
                        fail_msg("size %zu kind %d period %d try %d: one lane says %d, 32 lanes %d",
                                 n, kind, period, t, one, warp);
                    if (one && memcmp(a, b, n) != 0)
                        fail_msg("size %zu kind %d period %d try %d: 32 lanes decode other bytes",
                                 n, kind, period, t);
                    if (t == 0) {
                        assert_true(one);
                        assert_memory_equal(a, raw, n);
                    }
                }
                free(raw);
                free(lz);
                free(a);
                free(b);
            }
}

/* Valid blocks of every kind and size, compressed by liblz4 (fast and default), decode to the
 * same bytes; then damaged copies (bytes changed, cut, the expected size changed) get liblz4's
 * decision. */
static void lz4_blocks_match_liblz4(void **state)
{
    (void)state;
    const size_t sizes[] = {8, 13, 16, 64, 100, 1000, 4096, 8192, 20000};
    uint64_t s = 12345;
    int checked = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int kind = 0; kind < BC_KINDS; kind++)
            for (int period = 1; period <= (kind == BC_PERIOD ? 16 : 1); period++)
                for (int accel = 1; accel <= 17; accel += 16) {
                    const size_t n = sizes[si];
                    uint8_t *raw = malloc(n), *lz = malloc((size_t)LZ4_compressBound((int)n)),
                            *bad = malloc((size_t)LZ4_compressBound((int)n) + 8);
                    assert_non_null(raw);
                    assert_non_null(lz);
                    assert_non_null(bad);
                    bc_fill(raw, n, 2, kind, period, si * 31 + (size_t)kind);
                    const int m = LZ4_compress_fast((const char *)raw, (char *)lz, (int)n,
                                                    LZ4_compressBound((int)n), accel);
                    assert_true(m > 0);
                    uint8_t *out = malloc(n);
                    assert_non_null(out);
                    assert_int_equal(sw_bshuf_lz4_block_decode(lz, (uint32_t)m, out, (uint32_t)n),
                                     0);
                    assert_memory_equal(out, raw, n);
                    same_as_liblz4(lz, (size_t)m, n, "valid");
                    /* the wrong expected size: one byte less or more */
                    same_as_liblz4(lz, (size_t)m, n - 1, "size - 1");
                    same_as_liblz4(lz, (size_t)m, n + 1, "size + 1");
                    for (int t = 0; t < 60; t++) {
                        memcpy(bad, lz, (size_t)m);
                        size_t mm = (size_t)m;
                        const uint64_t r = bc_rng(&s);
                        if (t % 6 == 5)
                            mm = (size_t)(r % (uint64_t)m); /* cut */
                        else
                            for (int f = 0; f <= t % 3; f++)
                                bad[bc_rng(&s) % (uint64_t)m] = (uint8_t)(bc_rng(&s) >> 24);
                        char what[64];
                        snprintf(what, sizeof what, "damaged %zu/%d/%d", n, kind, t);
                        same_as_liblz4(bad, mm, n, what);
                        checked++;
                    }
                    free(raw);
                    free(lz);
                    free(bad);
                    free(out);
                }
    assert_true(checked > 1000);
}

/* The hand-made block: overlapping matches of offsets 1..8 decode as liblz4 does (the pattern
 * of the last `offset` bytes repeated); offset 0, an offset before the block's start, a match
 * or last literals past the block's end, and too few last literals are refused. */
static void hand_made_blocks(void **state)
{
    (void)state;
    uint8_t lz[64], out[64];
    for (unsigned off = 1; off <= 8; off++) {
        size_t m = bc_hand_block(lz, off, 25, 12);
        assert_int_equal(m, 25);
        assert_int_equal(sw_bshuf_lz4_block_decode(lz, (uint32_t)m, out, 64), 0);
        for (int i = 8; i < 52; i++)
            assert_int_equal(out[i], out[i - (int)off]);
        assert_int_equal(out[52], 0x61);
        same_as_liblz4(lz, m, 64, "hand-made");
    }
    const struct {
        unsigned off, ext, last;
        const char *what;
    } bad[] = {{0, 25, 12, "offset 0"},
               {9, 25, 12, "offset before the block's start"},
               {300, 25, 12, "offset far before the start"},
               {4, 26, 12, "match 1 byte too long"},
               {4, 200, 12, "match far past the block"},
               {4, 25, 13, "last literals past the block"},
               {4, 25, 11, "one last literal short"},
               {4, 33, 4, "match into the last 5 bytes"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t m = bc_hand_block(lz, bad[i].off, bad[i].ext, bad[i].last);
        if (sw_bshuf_lz4_block_decode(lz, (uint32_t)m, out, 64) == 0)
            fail_msg("hand-made block with %s accepted", bad[i].what);
        if (bad[i].off != 0)
            same_as_liblz4(lz, m, 64, bad[i].what);
    }
    /* cut anywhere: refused */
    size_t m = bc_hand_block(lz, 3, 25, 12);
    for (size_t k = 0; k < m; k++)
        assert_int_equal(sw_bshuf_lz4_block_decode(lz, (uint32_t)k, out, 64), -1);
}

/* Decodes a frame by its table, as the GPU does, on this thread. 0, or -1 with the failing
 * entry in *failed (when not NULL). */
static int decode_by_table_at(const uint8_t *enc, const sw_bshuf_block *t, size_t n, uint8_t *out,
                              size_t *failed)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i].n == 0) {
            memcpy(out + t[i].out_off, enc + t[i].in_off, t[i].in_size);
            continue;
        }
        const size_t bytes = (size_t)t[i].n * t[i].elem_size;
        uint8_t *tmp = malloc(bytes);
        assert_non_null(tmp);
        int ok = sw_bm_lz4_block(enc + t[i].in_off, t[i].in_size, tmp, (uint32_t)bytes, 0, 1);
        if (ok)
            sw_bshuf_untrans_block(tmp, out + t[i].out_off, t[i].n, t[i].elem_size);
        free(tmp);
        if (!ok) {
            if (failed)
                *failed = i;
            return -1;
        }
    }
    return 0;
}

static int decode_by_table(const uint8_t *enc, const sw_bshuf_block *t, size_t n, uint8_t *out)
{
    return decode_by_table_at(enc, t, n, out, NULL);
}

/* Every element size, block size (default, small odd multiples of 8, larger than the GPU's
 * shared memory), tails, data kind and chunk count: the table tiles the frame exactly and
 * decoding by it gives the CPU decoder's frame. */
static void table_decodes_like_cpu(void **state)
{
    (void)state;
    const size_t ess[] = {1, 2, 4};
    const size_t blocks[] = {0, 8, 24, 8 * 127, 8192};
    const size_t elems[][4] = {{4096, 0, 0, 0},
                               {1001, 0, 0, 0},
                               {7, 0, 0, 0},
                               {2048, 2048, 2048, 2048},
                               {5000, 333, 9, 4096}};
    const size_t nch[] = {1, 1, 1, 4, 4};
    for (size_t ei = 0; ei < 3; ei++)
        for (size_t bi = 0; bi < 5; bi++)
            for (size_t ci = 0; ci < 5; ci++)
                for (int kind = 0; kind < BC_KINDS; kind++) {
                    const size_t es = ess[ei];
                    uint8_t *raw, *enc;
                    size_t raw_size, enc_size;
                    sw_find_chunk *ch;
                    assert_int_equal(bc_frame(es, blocks[bi], elems[ci], nch[ci], kind,
                                              1 + (int)(ci * 3 % 16), ei * 7 + bi, &raw, &raw_size,
                                              &enc, &enc_size, &ch),
                                     0);
                    const size_t cap = sw_bshuf_frame_table_max(raw_size, es, nch[ci]);
                    sw_bshuf_block *t = malloc(cap * sizeof *t);
                    assert_non_null(t);
                    size_t n, big, bad;
                    assert_int_equal(sw_bshuf_frame_walk(enc, enc_size, ch, nch[ci], es, raw_size,
                                                         t, cap, &n, &big, &bad),
                                     0);
                    /* the entries tile the decoded frame in order */
                    size_t at = 0;
                    for (size_t i = 0; i < n; i++) {
                        assert_int_equal(t[i].out_off, at);
                        at += t[i].n ? (size_t)t[i].n * es : t[i].in_size;
                        assert_true(t[i].n % 8 == 0);
                    }
                    assert_int_equal(at, raw_size);
                    uint8_t *out = malloc(raw_size ? raw_size : 1);
                    assert_non_null(out);
                    memset(out, 0xA5, raw_size);
                    assert_int_equal(decode_by_table(enc, t, n, out), 0);
                    assert_memory_equal(out, raw, raw_size);
                    free(raw);
                    free(enc);
                    free(ch);
                    free(t);
                    free(out);
                }
}

/* Damaged chunks: whenever the walk refuses a chunk, the CPU decoder refuses it too, and the
 * reason is the CPU decoder's; whenever the walk passes, the CPU decoder's verdict is the
 * table's (the blocks decode or not alike). */
static void walk_refuses_like_cpu(void **state)
{
    (void)state;
    const size_t elems[] = {3000, 4096, 77};
    uint8_t *raw, *enc;
    size_t raw_size, enc_size;
    sw_find_chunk *ch;
    assert_int_equal(
        bc_frame(2, 0, elems, 3, BC_POISSON, 1, 9, &raw, &raw_size, &enc, &enc_size, &ch), 0);
    const size_t cap = sw_bshuf_frame_table_max(raw_size, 2, 3);
    sw_bshuf_block *t = malloc(cap * sizeof *t);
    uint8_t *bad = malloc(enc_size + 64), *out = malloc(raw_size), *cpu = malloc(raw_size);
    assert_non_null(t);
    assert_non_null(bad);
    assert_non_null(out);
    assert_non_null(cpu);
    uint64_t s = 77;
    int refused_by_walk = 0, refused_by_lz4 = 0, offset0 = 0;
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(bad, enc, enc_size);
        sw_find_chunk c[3];
        memcpy(c, ch, sizeof c);
        const size_t k = bc_rng(&s) % 3;
        const uint64_t r = bc_rng(&s);
        switch (trial % 6) {
        case 0: c[k].size -= 1 + r % (c[k].size - 1); break; /* truncated */
        case 1: c[k].size += 1 + r % 8; break;               /* stray bytes (the next chunk's) */
        case 2: bc_put_be(bad + c[k].offset + 12, r % 70000, 4); break; /* first count */
        case 3: bc_put_be(bad + c[k].offset, r % 20000, 8); break;      /* header: total */
        case 4: bc_put_be(bad + c[k].offset + 8, r % 40, 4); break;     /* header: block bytes */
        default: bad[c[k].offset + r % c[k].size] ^= (uint8_t)(1u << (r >> 32) % 8); break;
        }
        if (c[k].offset + c[k].size > enc_size)
            c[k].size = enc_size - c[k].offset;
        size_t n, big, where;
        const int w =
            sw_bshuf_frame_walk(bad, enc_size, c, 3, 2, raw_size, t, cap, &n, &big, &where);
        /* the CPU decoder chunk by chunk, in order, as the reader decodes a frame */
        int cpu_rc = 0;
        char why[256] = "";
        for (size_t j = 0; j < 3 && cpu_rc == 0; j++)
            cpu_rc = sw_bshuf_decode_lz4(bad + c[j].offset, c[j].size, cpu + c[j].out_offset,
                                         c[j].out_size, 2, why, sizeof why);
        if (w == -1) {
            refused_by_walk++;
            if (cpu_rc == 0)
                fail_msg("trial %d: the walk refuses chunk %zu but the CPU decodes the frame",
                         trial, where + 1);
        } else {
            assert_int_equal(w, 0);
            size_t failed = 0;
            const int tb = decode_by_table_at(bad, t, n, out, &failed);
            if (tb != 0 && cpu_rc == 0) {
                /* allowed only where liblz4's output depends on its buffer: an offset of 0 */
                const size_t bytes = (size_t)t[failed].n * t[failed].elem_size;
                uint8_t *tmp = malloc(bytes);
                assert_non_null(tmp);
                const int v = lz4_verdict(bad + t[failed].in_off, t[failed].in_size, tmp, bytes);
                free(tmp);
                if (v == 0 || !has_offset0(bad + t[failed].in_off, t[failed].in_size))
                    fail_msg("trial %d: the table refuses block %zu, which liblz4 decodes", trial,
                             failed);
                offset0++;
                continue;
            }
            if (tb != (cpu_rc == 0 ? 0 : -1))
                fail_msg("trial %d: by the table %d, the CPU %d (%s)", trial, tb, cpu_rc, why);
            if (tb == 0)
                assert_memory_equal(out, cpu, raw_size);
            else
                refused_by_lz4++;
        }
        if (cpu_rc != 0) {
            char r2[512];
            const int fr = sw_bshuf_frame_reason(bad, enc_size, c, 3, 2, raw_size, r2, sizeof r2);
            assert_int_equal(fr, 0);
            if (!strstr(r2, why))
                fail_msg("trial %d: the reason \"%s\" does not quote the CPU's \"%s\"", trial, r2,
                         why);
        }
    }
    assert_true(refused_by_walk > 100);
    assert_true(refused_by_lz4 > 10);
    assert_true(offset0 < 30);
    /* chunks that lie outside the frame's buffers */
    sw_find_chunk c[3];
    memcpy(c, ch, sizeof c);
    c[2].out_offset = raw_size - 1;
    size_t n, big, where;
    assert_int_equal(
        sw_bshuf_frame_walk(enc, enc_size, c, 3, 2, raw_size, t, cap, &n, &big, &where), -1);
    assert_int_equal(where, 2);
    memcpy(c, ch, sizeof c);
    c[1].offset = enc_size;
    assert_int_equal(
        sw_bshuf_frame_walk(enc, enc_size, c, 3, 2, raw_size, t, cap, &n, &big, &where), -1);
    /* too small a table: -3, not a read or write past it */
    assert_int_equal(sw_bshuf_frame_walk(enc, enc_size, ch, 3, 2, raw_size, t, 3, &n, &big, &where),
                     -3);
    free(raw);
    free(enc);
    free(ch);
    free(t);
    free(bad);
    free(out);
    free(cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lz4_blocks_match_liblz4), cmocka_unit_test(hand_made_blocks),
        cmocka_unit_test(warp_lanes_like_one),     cmocka_unit_test(table_decodes_like_cpu),
        cmocka_unit_test(walk_refuses_like_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
