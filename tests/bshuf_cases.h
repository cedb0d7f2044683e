/*
 * Frames of bitshuffle/LZ4 chunks for the tests of the table walk and the GPU decoder
 * (tests/unit/test_io_bitshuffle_blocks.c, tests/gpu/test_gpu_bitshuffle.c): generated data of
 * several kinds, cut into chunks and encoded with sw_bshuf_encode_lz4, and hand-made LZ4 blocks
 * whose every field is known (to damage one field at a time).
 */
#ifndef SW_TEST_BSHUF_CASES_H
#define SW_TEST_BSHUF_CASES_H

#include "io/bitshuffle.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
    BC_ZEROS,   /* all zero: long matches (length extensions)             */
    BC_RANDOM,  /* random bytes: incompressible, literals only           */
    BC_POISSON, /* low counts, some spots: a detector frame              */
    BC_PERIOD,  /* a pattern of `period` bytes repeated: overlapping      */
    BC_SPARSE,  /* zeros with rare values: long matches between literals  */
    BC_KINDS
};

static inline uint64_t bc_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* n bytes of kind into p (elements of es bytes where the kind has values). */
static inline void bc_fill(uint8_t *p, size_t n, size_t es, int kind, int period, uint64_t seed)
{
    uint64_t s = seed * 2654435761u + 88172645463325252ull;
    switch (kind) {
    case BC_ZEROS: memset(p, 0, n); break;
    case BC_RANDOM:
        for (size_t i = 0; i < n; i++)
            p[i] = (uint8_t)(bc_rng(&s) >> 24);
        break;
    case BC_PERIOD: {
        uint8_t pat[16];
        for (int i = 0; i < 16; i++)
            pat[i] = (uint8_t)(bc_rng(&s) >> 24);
        for (size_t i = 0; i < n; i++)
            p[i] = pat[i % (size_t)period];
        break;
    }
    case BC_SPARSE:
        memset(p, 0, n);
        for (size_t i = 0; i < n; i++)
            if (bc_rng(&s) % 997 == 0)
                p[i] = (uint8_t)(bc_rng(&s) >> 24);
        break;
    default: /* BC_POISSON: about 0.7 counts a pixel, spots of hundreds every ~5000 values */
        memset(p, 0, n);
        for (size_t i = 0; i + es <= n; i += es) {
            uint64_t r = bc_rng(&s), v = 0;
            while ((r & 3) == 0 && v < 12) { /* geometric, mean ~0.33 per step */
                v++;
                r >>= 2;
            }
            if (bc_rng(&s) % 5000 == 0)
                v = 100 + bc_rng(&s) % 4000;
            for (size_t b = 0; b < es && b < 8; b++)
                p[i + b] = (uint8_t)(v >> (8 * b));
        }
    }
}

/* A frame of nchunks chunks: chunk k holds elems[k] elements of es bytes. Fills *raw (the
 * decoded frame, *raw_size bytes), *enc (the stored chunks one after another, *enc_size bytes)
 * and chunks[] (allocated). 0, or -1 when the encoder fails. */
static inline int bc_frame(size_t es, size_t block, const size_t *elems, size_t nchunks, int kind,
                           int period, uint64_t seed, uint8_t **raw, size_t *raw_size,
                           uint8_t **enc, size_t *enc_size, sw_find_chunk **chunks)
{
    size_t total = 0, cap = 0;
    *raw_size = *enc_size = 0;
    for (size_t k = 0; k < nchunks; k++) {
        total += elems[k] * es;
        cap += sw_bshuf_lz4_bound(elems[k] * es, es, block);
    }
    *raw = malloc(total ? total : 1);
    *enc = malloc(cap ? cap : 1);
    *chunks = calloc(nchunks ? nchunks : 1, sizeof **chunks);
    if (!*raw || !*enc || !*chunks)
        return -1;
    bc_fill(*raw, total, es, kind, period, seed);
    size_t at = 0, out = 0;
    for (size_t k = 0; k < nchunks; k++) {
        const size_t bytes = elems[k] * es;
        size_t m = sw_bshuf_encode_lz4(*raw + out, bytes, *enc + at, cap - at, es, block);
        if (m == 0)
            return -1;
        (*chunks)[k] = (sw_find_chunk){at, m, out, bytes};
        at += m;
        out += bytes;
    }
    *raw_size = total;
    *enc_size = at;
    return 0;
}

static inline void bc_put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

/*
 * A hand-made LZ4 block of 64 bytes (es 1, one block of 64 elements): 8 literals, a match of
 * `offset` and 44 bytes (token nibble 15, extension `ext`: 25 for a valid block), 12 last
 * literals (their count `last`: 12 for a valid block). Returns the LZ4 bytes in lz (25 of them).
 * The chunk (header, count, block) in chunk (37 bytes + extra): returns its size.
 */
static inline size_t bc_hand_block(uint8_t *lz, unsigned offset, unsigned ext, unsigned last)
{
    size_t n = 0;
    lz[n++] = (uint8_t)(8 << 4 | 15);
    for (int i = 0; i < 8; i++)
        lz[n++] = (uint8_t)(0x41 + i);
    lz[n++] = (uint8_t)(offset & 0xff);
    lz[n++] = (uint8_t)(offset >> 8);
    lz[n++] = (uint8_t)ext;
    lz[n++] = (uint8_t)((last > 14 ? 15 : last) << 4);
    if (last > 14)
        lz[n++] = (uint8_t)(last - 15);
    for (int i = 0; i < 12; i++)
        lz[n++] = (uint8_t)(0x61 + i);
    return n;
}

/* lz (m bytes) as the only block of a chunk of 64 one-byte elements: returns the chunk's size. */
static inline size_t bc_hand_chunk(uint8_t *chunk, const uint8_t *lz, size_t m)
{
    bc_put_be(chunk, 64, 8);
    bc_put_be(chunk + 8, 64, 4);
    bc_put_be(chunk + 12, m, 4);
    memcpy(chunk + 16, lz, m);
    return 16 + m;
}

#endif /* SW_TEST_BSHUF_CASES_H */
