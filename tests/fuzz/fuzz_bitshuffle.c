/*
 * libFuzzer target: the bitshuffle/LZ4 chunk decoder on its own (src/io/bitshuffle.c), the part
 * of the HDF5 reader that sees the most attacker-controlled bytes. Input: 1 byte (bits 0-1 the
 * element size 1/2/4/8, bits 2-7 a block size / 8 for the uncompressed variant), 2 bytes the
 * chunk size in elements, then the stored chunk. Invariants: 0 or -1 with a
 * reason; nothing written beyond the chunk (sentinel); 0 only for input whose header names the
 * chunk's size; three decoding threads give the one-thread status, reason and bytes; the
 * uncompressed variant likewise. The GPU decoder's host walk and its LZ4 blocks (decoded here by
 * the same shared function, bitshuffle_model.h) refuse what the CPU decoder refuses and decode
 * the rest to its bytes, an LZ4 offset of 0 (liblz4: zeros) the one thing only they refuse.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/bitshuffle.h"
#include "io/bitshuffle_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The chunk through the GPU decoder's path on this thread (the table walk, then each block by the
 * shared LZ4 decoder and un-transposed): 0 decoded into out, -1 refused. */
static int by_table(const uint8_t *data, size_t size, uint8_t *out, size_t out_size, size_t es)
{
    const sw_find_chunk c = {0, size, 0, out_size};
    const size_t cap = sw_bshuf_frame_table_max(out_size, es, 1);
    sw_bshuf_block *t = malloc((cap ? cap : 1) * sizeof *t);
    if (!t)
        abort();
    size_t n = 0, big = 0, bad = 0;
    int rc = sw_bshuf_frame_walk(data, size, &c, 1, es, out_size, t, cap, &n, &big, &bad);
    if (rc == -3)
        abort(); /* the table's size is the most a chunk can need */
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (t[i].n == 0) {
            memcpy(out + t[i].out_off, data + t[i].in_off, t[i].in_size);
            continue;
        }
        const size_t bytes = (size_t)t[i].n * t[i].elem_size;
        uint8_t *tmp = malloc(bytes);
        if (!tmp)
            abort();
        if (sw_bm_lz4_block(data + t[i].in_off, t[i].in_size, tmp, (uint32_t)bytes, 0, 1))
            sw_bshuf_untrans_block(tmp, out + t[i].out_off, t[i].n, t[i].elem_size);
        else
            rc = -1;
        free(tmp);
    }
    free(t);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    static const size_t sizes[4] = {1, 2, 4, 8};
    const size_t es = sizes[data[0] & 3], block = (size_t)(data[0] >> 2) * 8;
    const size_t n = ((size_t)data[1] | (size_t)data[2] << 8) % 20000;
    const size_t out_size = n * es;
    data += 3;
    size -= 3;
    uint8_t *out = malloc(out_size + 32);
    if (!out)
        abort();
    memset(out + out_size, 0x5C, 32);
    char why[256];
    int rc = sw_bshuf_decode_lz4(data, size, out, out_size, es, why, sizeof why);
    if (rc != 0 && rc != -1 && rc != -2)
        abort();
    if (rc != 0 && why[0] == '\0')
        abort();
    /* three threads: the same status, the same reason, the same bytes */
    uint8_t *out3 = malloc(out_size + 32);
    if (!out3)
        abort();
    memset(out3 + out_size, 0x5C, 32);
    char why3[256];
    int rc3 = sw_bshuf_decode_lz4_mt(data, size, out3, out_size, es, 3, why3, sizeof why3);
    if (rc3 != rc || (rc != 0 && strcmp(why, why3) != 0) ||
        (rc == 0 && memcmp(out, out3, out_size) != 0))
        abort();
    for (int i = 0; i < 32; i++)
        if (out3[out_size + i] != 0x5C)
            abort();
    free(out3);
    if (rc == 0) {
        uint64_t total = 0;
        for (int i = 0; i < 8; i++)
            total = total << 8 | data[i];
        if (total != out_size)
            abort();
        /* what decoded encodes again and decodes to the same bytes */
        size_t cap = sw_bshuf_lz4_bound(out_size, es, 0);
        uint8_t *enc = malloc(cap ? cap : 1), *back = malloc(out_size + 1);
        if (!enc || !back)
            abort();
        size_t m = sw_bshuf_encode_lz4(out, out_size, enc, cap, es, 0);
        if (m == 0 || sw_bshuf_decode_lz4(enc, m, back, out_size, es, why, sizeof why) != 0 ||
            memcmp(back, out, out_size) != 0)
            abort();
        free(enc);
        free(back);
    }
    /* the GPU decoder's path: refuses what the CPU refuses, else the same bytes or a refusal of
     * what the CPU decodes (an LZ4 offset of 0 only: test_io_bitshuffle_blocks checks that) */
    if (rc != -2) {
        uint8_t *tb = malloc(out_size + 32);
        if (!tb)
            abort();
        memset(tb + out_size, 0x5C, 32);
        const int rt = by_table(data, size, tb, out_size, es);
        if (rc != 0 && rt == 0)
            abort();
        if (rc == 0 && rt == 0 && memcmp(tb, out, out_size) != 0)
            abort();
        if (rc == 0 && rt != 0) {
            const sw_find_chunk c = {0, size, 0, out_size};
            if (sw_bshuf_frame_reason(data, size, &c, 1, es, out_size, why, sizeof why) != 1)
                abort();
        }
        for (int i = 0; i < 32; i++)
            if (tb[out_size + i] != 0x5C)
                abort();
        free(tb);
    }
    rc = sw_bshuf_decode_plain(data, size, out, out_size, es, block, why, sizeof why);
    if ((rc == 0) != (size == out_size))
        abort();
    for (int i = 0; i < 32; i++)
        if (out[out_size + i] != 0x5C)
            abort();
    free(out);
    return 0;
}
