/*
 * Bitshuffle transposes and the bounded bitshuffle/LZ4 chunk decoder (bitshuffle.h).
 */
#include "io/bitshuffle.h"
#include "io/bitshuffle_model.h"

#include <lz4.h>
#include <stdio.h>
#ifdef SW_HAVE_OPENMP
#include <omp.h>
#endif
#include <stdlib.h>
#include <string.h>

size_t sw_bshuf_default_block(size_t elem_size)
{
    size_t b = SW_BSHUF_TARGET_SIZE / (elem_size ? elem_size : 1);
    b -= b % SW_BSHUF_BLOCK_MULT;
    return b < SW_BSHUF_MIN_BLOCK ? SW_BSHUF_MIN_BLOCK : b;
}

void sw_bshuf_trans_block(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size)
{
    const size_t row = n / 8; /* bytes per bit row */
    for (size_t g = 0; g < row; g++)
        for (size_t j = 0; j < elem_size; j++) {
            /* byte j of elements 8g .. 8g+7 as rows of a bit matrix */
            uint64_t x = 0;
            for (size_t r = 0; r < 8; r++)
                x |= (uint64_t)in[(8 * g + r) * elem_size + j] << (8 * r);
            x = sw_bm_transpose8(x); /* byte k: bit k of each of the 8 bytes */
            for (size_t k = 0; k < 8; k++)
                out[(8 * j + k) * row + g] = (uint8_t)(x >> (8 * k));
        }
}

void sw_bshuf_untrans_block(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size)
{
    const size_t row = n / 8;
    for (size_t g = 0; g < row; g++)
        for (size_t j = 0; j < elem_size; j++) {
            uint64_t x = 0;
            for (size_t k = 0; k < 8; k++)
                x |= (uint64_t)in[(8 * j + k) * row + g] << (8 * k);
            x = sw_bm_transpose8(x); /* byte r: the 8 bits of byte j of element 8g + r */
            for (size_t r = 0; r < 8; r++)
                out[(8 * g + r) * elem_size + j] = (uint8_t)(x >> (8 * r));
        }
}

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The block layout of a chunk: whole blocks of `block` elements, one shorter block of a
 * multiple of 8, a stored tail. */
typedef struct bshuf_plan {
    size_t elems, block, whole, last, tail_bytes;
} bshuf_plan;

static void make_plan(bshuf_plan *p, size_t size, size_t elem_size, size_t block)
{
    p->elems = size / elem_size;
    p->block = block;
    p->whole = p->elems / block;
    p->last = p->elems % block;
    p->last -= p->last % SW_BSHUF_BLOCK_MULT;
    p->tail_bytes = (p->elems % SW_BSHUF_BLOCK_MULT) * elem_size;
}

/* The first blocks' failure, block b of nblocks (0-based) that LZ4 would not decode to `bytes`:
 * the reason, as one thread decoding in order would have stopped with it. */
static void lz4_block_failure(const uint8_t *in, size_t off, uint32_t cs, size_t bytes,
                              uint8_t *scratch, size_t b, size_t nblocks, char *why,
                              size_t why_size)
{
    const int got =
        LZ4_decompress_safe((const char *)in + off, (char *)scratch, (int)cs, (int)bytes);
    if (got < 0)
        snprintf(why, why_size, "block %zu of %zu (%u bytes) is not valid LZ4 data", b + 1, nblocks,
                 cs);
    else
        snprintf(why, why_size, "block %zu of %zu decodes to %d bytes instead of %zu", b + 1,
                 nblocks, got, bytes);
}

int sw_bshuf_decode_lz4(const uint8_t *in, size_t in_size, uint8_t *out, size_t out_size,
                        size_t elem_size, char *why, size_t why_size)
{
    return sw_bshuf_decode_lz4_mt(in, in_size, out, out_size, elem_size, 1, why, why_size);
}

/* The checks of a chunk's 12-byte header (sw_bshuf_decode_lz4): *block receives the block
 * size in elements. 0, or -1 with the reason. */
static int lz4_header(const uint8_t *in, size_t in_size, size_t out_size, size_t elem_size,
                      size_t *block_out, char *why, size_t why_size)
{
    why[0] = '\0';
    if (elem_size == 0 || out_size % elem_size != 0) {
        snprintf(why, why_size, "%zu bytes are not whole %zu-byte elements", out_size, elem_size);
        return -1;
    }
    if (in_size < SW_BSHUF_HEADER) {
        snprintf(why, why_size, "%zu bytes: shorter than bitshuffle's %d-byte header", in_size,
                 SW_BSHUF_HEADER);
        return -1;
    }
    const uint64_t total = be64(in);
    const uint32_t block_bytes = sw_bm_be32(in + 8);
    if (total != (uint64_t)out_size) {
        snprintf(why, why_size,
                 "the bitshuffle header says %llu bytes but the chunk holds %zu (%zu-byte "
                 "elements)",
                 (unsigned long long)total, out_size, elem_size);
        return -1;
    }
    /* As the filter reads it: the byte count divided by the element size, rounded down, and 0
     * meaning the default. */
    size_t block = block_bytes / elem_size;
    if (block == 0)
        block = sw_bshuf_default_block(elem_size);
    if (block % SW_BSHUF_BLOCK_MULT != 0) {
        snprintf(why, why_size,
                 "the bitshuffle header's block size %u bytes is not a multiple of 8 %zu-byte "
                 "elements",
                 block_bytes, elem_size);
        return -1;
    }
    *block_out = block;
    return 0;
}

int sw_bshuf_decode_lz4_mt(const uint8_t *in, size_t in_size, uint8_t *out, size_t out_size,
                           size_t elem_size, int threads, char *why, size_t why_size)
{
    why[0] = '\0';
    size_t block;
    if (lz4_header(in, in_size, out_size, elem_size, &block, why, why_size) < 0)
        return -1;
    bshuf_plan p;
    make_plan(&p, out_size, elem_size, block);
    const size_t nblocks = p.whole + (p.last ? 1 : 0);
    /*
     * Two passes, so that the blocks can be decoded on several threads with the same result as
     * one thread decoding them in order. First the byte counts, in order, each checked against
     * what is left of the chunk before it is used (this pass reads 4 bytes a block and decodes
     * nothing); it stops at the first count that does not fit (block `scanned`, with its reason
     * in `scan_why`). Then blocks 0 .. scanned-1 are decoded, each into its own place in out;
     * the reason given is the first failing block's, or else the count's: what the single-pass
     * decoder that stops at the first problem said.
     */
    size_t *off = malloc((nblocks ? nblocks : 1) * sizeof *off);
    if (!off) {
        snprintf(why, why_size, "out of memory");
        return -2;
    }
    char scan_why[256] = "";
    size_t pos = SW_BSHUF_HEADER, scanned = 0;
    for (; scanned < nblocks; scanned++) {
        const size_t b = scanned, n = b < p.whole ? p.block : p.last, bytes = n * elem_size;
        if (in_size - pos < 4) {
            snprintf(scan_why, sizeof scan_why,
                     "truncated: block %zu of %zu has no byte count (at byte %zu)", b + 1, nblocks,
                     pos);
            break;
        }
        const uint32_t cs = sw_bm_be32(in + pos);
        if ((size_t)cs > in_size - pos - 4 || cs > (uint32_t)LZ4_MAX_INPUT_SIZE) {
            snprintf(scan_why, sizeof scan_why,
                     "block %zu of %zu claims %u compressed bytes but %zu remain in the chunk",
                     b + 1, nblocks, cs, in_size - pos - 4);
            break;
        }
        if (bytes > (size_t)LZ4_MAX_INPUT_SIZE) {
            snprintf(scan_why, sizeof scan_why,
                     "block %zu of %zu: %zu bytes is beyond LZ4's block size", b + 1, nblocks,
                     bytes);
            break;
        }
        off[b] = pos + 4;
        pos += 4 + (size_t)cs;
    }
    /* one scratch block per thread (no larger than the chunk: a huge block size is one short
     * block) */
    const size_t scratch_bytes = (p.whole ? p.block : p.last) * elem_size;
    int nt = threads > 1 ? threads : 1;
    if ((size_t)nt > scanned)
        nt = scanned > 1 ? (int)scanned : 1;
    uint8_t *scratch = malloc(scratch_bytes ? scratch_bytes * (size_t)nt : 1);
    if (!scratch) {
        free(off);
        snprintf(why, why_size, "out of memory");
        return -2;
    }
    size_t bad = scanned; /* the first block that did not decode (scanned: none) */
    const size_t stride = p.block * elem_size;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#ifdef SW_HAVE_OPENMP
        uint8_t *mine = scratch + (size_t)omp_get_thread_num() * scratch_bytes;
#else
        uint8_t *mine = scratch;
#endif
        size_t my_bad = scanned;
#pragma omp for schedule(static)
        for (size_t b = 0; b < scanned; b++) {
            const size_t n = b < p.whole ? p.block : p.last, bytes = n * elem_size;
            const size_t cs = (b + 1 < scanned ? off[b + 1] - 4 : pos) - off[b];
            const int got =
                LZ4_decompress_safe((const char *)in + off[b], (char *)mine, (int)cs, (int)bytes);
            if (got != (int)bytes) {
                if (b < my_bad)
                    my_bad = b;
                continue;
            }
            sw_bshuf_untrans_block(mine, out + b * stride, n, elem_size);
        }
#pragma omp critical(sw_bshuf_first_bad)
        if (my_bad < bad)
            bad = my_bad;
    }
    int rc = 0;
    if (bad < scanned) {
        const size_t n = bad < p.whole ? p.block : p.last;
        const size_t cs = (bad + 1 < scanned ? off[bad + 1] - 4 : pos) - off[bad];
        lz4_block_failure(in, off[bad], (uint32_t)cs, n * elem_size, scratch, bad, nblocks, why,
                          why_size);
        rc = -1;
    } else if (scanned < nblocks) {
        snprintf(why, why_size, "%s", scan_why);
        rc = -1;
    }
    free(scratch);
    free(off);
    if (rc != 0)
        return rc;
    const size_t done = p.whole * stride + p.last * elem_size;
    if (in_size - pos < p.tail_bytes) {
        snprintf(why, why_size, "truncated: the last %zu bytes of the chunk are missing",
                 p.tail_bytes);
        return -1;
    }
    memcpy(out + done, in + pos, p.tail_bytes);
    pos += p.tail_bytes;
    if (pos != in_size) {
        snprintf(why, why_size, "%zu stray bytes after the last block", in_size - pos);
        return -1;
    }
    return 0;
}

int sw_bshuf_lz4_walk(const uint8_t *in, size_t in_size, size_t out_size, size_t elem_size,
                      uint64_t in_base, uint64_t out_base, uint32_t chunk, sw_bshuf_block *blocks,
                      size_t cap, size_t *n)
{
    char why[256];
    size_t block;
    if (lz4_header(in, in_size, out_size, elem_size, &block, why, sizeof why) < 0)
        return -1;
    if (in_base + in_size > UINT32_MAX || out_base + out_size > UINT32_MAX ||
        elem_size > UINT32_MAX)
        return -3;
    bshuf_plan p;
    make_plan(&p, out_size, elem_size, block);
    const size_t nblocks = p.whole + (p.last ? 1 : 0);
    if (nblocks + 1 > cap - *n)
        return -3;
    /* the checks of sw_bshuf_decode_lz4_mt's count pass, then of its tail, in the same order */
    size_t pos = SW_BSHUF_HEADER, done = 0, k = *n;
    for (size_t b = 0; b < nblocks; b++) {
        const size_t e = b < p.whole ? p.block : p.last, bytes = e * elem_size;
        if (in_size - pos < 4)
            return -1;
        const uint32_t cs = sw_bm_be32(in + pos);
        if ((size_t)cs > in_size - pos - 4 || cs > (uint32_t)LZ4_MAX_INPUT_SIZE ||
            bytes > (size_t)LZ4_MAX_INPUT_SIZE)
            return -1;
        blocks[k++] = (sw_bshuf_block){(uint32_t)(in_base + pos + 4), cs,
                                       (uint32_t)(out_base + done),   (uint32_t)e,
                                       (uint32_t)elem_size,           chunk};
        pos += 4 + (size_t)cs;
        done += bytes;
    }
    if (in_size - pos != p.tail_bytes) /* truncated tail or stray bytes */
        return -1;
    if (p.tail_bytes)
        blocks[k++] = (sw_bshuf_block){(uint32_t)(in_base + pos),   (uint32_t)p.tail_bytes,
                                       (uint32_t)(out_base + done), 0,
                                       (uint32_t)elem_size,         chunk};
    *n = k;
    return 0;
}

size_t sw_bshuf_frame_table_max(size_t out_size, size_t elem_size, size_t nchunks)
{
    return out_size / (SW_BSHUF_BLOCK_MULT * (elem_size ? elem_size : 1)) + 2 * nchunks;
}

/* Chunk k's stored and decoded bytes lie inside the frame's. */
static int chunk_inside(const sw_find_chunk *c, size_t in_size, size_t out_size)
{
    return c->offset <= in_size && c->size <= in_size - c->offset && c->out_offset <= out_size &&
           c->out_size <= out_size - c->out_offset;
}

int sw_bshuf_frame_walk(const uint8_t *in, size_t in_size, const sw_find_chunk *chunks,
                        size_t nchunks, size_t elem_size, size_t out_size, sw_bshuf_block *blocks,
                        size_t cap, size_t *n, size_t *big, size_t *bad)
{
    *n = 0;
    *big = 0;
    *bad = 0;
    if (nchunks > UINT32_MAX)
        return -3;
    for (size_t k = 0; k < nchunks; k++) {
        const sw_find_chunk *c = &chunks[k];
        const size_t first = *n;
        *bad = k;
        if (!chunk_inside(c, in_size, out_size))
            return -1;
        int rc = sw_bshuf_lz4_walk(in + c->offset, (size_t)c->size, (size_t)c->out_size, elem_size,
                                   c->offset, c->out_offset, (uint32_t)k, blocks, cap, n);
        if (rc != 0)
            return rc;
        for (size_t b = first; b < *n; b++)
            if (blocks[b].n && (size_t)blocks[b].n * elem_size > *big)
                *big = (size_t)blocks[b].n * elem_size;
    }
    return 0;
}

int sw_bshuf_frame_reason(const uint8_t *in, size_t in_size, const sw_find_chunk *chunks,
                          size_t nchunks, size_t elem_size, size_t out_size, char *why,
                          size_t why_size)
{
    why[0] = '\0';
    size_t most = 0;
    for (size_t k = 0; k < nchunks; k++)
        if (chunk_inside(&chunks[k], in_size, out_size) && chunks[k].out_size > most)
            most = (size_t)chunks[k].out_size;
    uint8_t *tmp = malloc(most ? most : 1);
    if (!tmp) {
        snprintf(why, why_size, "out of memory");
        return -2;
    }
    int rc = 1;
    for (size_t k = 0; k < nchunks && rc == 1; k++) {
        const sw_find_chunk *c = &chunks[k];
        char r[256];
        if (!chunk_inside(c, in_size, out_size)) {
            snprintf(why, why_size,
                     "chunk %zu of %zu: %llu stored bytes at %llu, decoding to %llu bytes at %llu, "
                     "lie outside the frame's %zu stored and %zu decoded bytes",
                     k + 1, nchunks, (unsigned long long)c->size, (unsigned long long)c->offset,
                     (unsigned long long)c->out_size, (unsigned long long)c->out_offset, in_size,
                     out_size);
            rc = 0;
        } else {
            int d = sw_bshuf_decode_lz4(in + c->offset, (size_t)c->size, tmp, (size_t)c->out_size,
                                        elem_size, r, sizeof r);
            if (d == -2)
                rc = -2;
            if (d != 0)
                snprintf(why, why_size, "chunk %zu of %zu: %s", k + 1, nchunks,
                         d == -2 ? "out of memory" : r);
            if (d == -1)
                rc = 0;
        }
    }
    free(tmp);
    if (rc == 1)
        snprintf(why, why_size,
                 "an LZ4 block that the GPU decoder refuses (an offset of 0, invalid in the LZ4 "
                 "block format) but liblz4 accepts");
    return rc;
}

int sw_bshuf_lz4_block_decode(const uint8_t *in, uint32_t in_size, uint8_t *out, uint32_t out_size)
{
    return sw_bm_lz4_block(in, in_size, out, out_size, 0, 1) ? 0 : -1;
}

int sw_bshuf_decode_plain(const uint8_t *in, size_t in_size, uint8_t *out, size_t out_size,
                          size_t elem_size, size_t block, char *why, size_t why_size)
{
    why[0] = '\0';
    if (elem_size == 0 || out_size % elem_size != 0) {
        snprintf(why, why_size, "%zu bytes are not whole %zu-byte elements", out_size, elem_size);
        return -1;
    }
    if (in_size != out_size) {
        snprintf(why, why_size, "%zu bytes stored for a chunk of %zu (bitshuffle, no compression)",
                 in_size, out_size);
        return -1;
    }
    if (block == 0)
        block = sw_bshuf_default_block(elem_size);
    if (block % SW_BSHUF_BLOCK_MULT != 0) {
        snprintf(why, why_size, "block size %zu is not a multiple of 8", block);
        return -1;
    }
    bshuf_plan p;
    make_plan(&p, out_size, elem_size, block);
    size_t done = 0;
    for (size_t b = 0; b < p.whole; b++, done += p.block * elem_size)
        sw_bshuf_untrans_block(in + done, out + done, p.block, elem_size);
    if (p.last) {
        sw_bshuf_untrans_block(in + done, out + done, p.last, elem_size);
        done += p.last * elem_size;
    }
    memcpy(out + done, in + done, p.tail_bytes);
    return 0;
}

size_t sw_bshuf_lz4_bound(size_t size, size_t elem_size, size_t block)
{
    if (elem_size == 0)
        return 0;
    if (block == 0)
        block = sw_bshuf_default_block(elem_size);
    bshuf_plan p;
    make_plan(&p, size, elem_size, block);
    size_t b = SW_BSHUF_HEADER + p.tail_bytes;
    b += p.whole * (4 + (size_t)LZ4_compressBound((int)(p.block * elem_size)));
    if (p.last)
        b += 4 + (size_t)LZ4_compressBound((int)(p.last * elem_size));
    return b;
}

size_t sw_bshuf_encode_lz4(const uint8_t *in, size_t size, uint8_t *out, size_t out_cap,
                           size_t elem_size, size_t block)
{
    if (elem_size == 0 || size % elem_size != 0)
        return 0;
    if (block == 0)
        block = sw_bshuf_default_block(elem_size);
    if (block % SW_BSHUF_BLOCK_MULT != 0 || block * elem_size > (size_t)LZ4_MAX_INPUT_SIZE ||
        block * elem_size > UINT32_MAX)
        return 0;
    if (out_cap < sw_bshuf_lz4_bound(size, elem_size, block))
        return 0;
    bshuf_plan p;
    make_plan(&p, size, elem_size, block);
    uint8_t *scratch = malloc((p.whole ? p.block : p.last ? p.last : 1) * elem_size);
    if (!scratch)
        return 0;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)size >> (56 - 8 * i));
    put_be32(out + 8, (uint32_t)(block * elem_size));
    size_t pos = SW_BSHUF_HEADER, done = 0;
    const size_t nblocks = p.whole + (p.last ? 1 : 0);
    for (size_t b = 0; b < nblocks; b++) {
        const size_t n = b < p.whole ? p.block : p.last;
        const size_t bytes = n * elem_size;
        sw_bshuf_trans_block(in + done, scratch, n, elem_size);
        int cap = LZ4_compressBound((int)bytes);
        int cs =
            LZ4_compress_default((const char *)scratch, (char *)out + pos + 4, (int)bytes, cap);
        if (cs <= 0) {
            free(scratch);
            return 0;
        }
        put_be32(out + pos, (uint32_t)cs);
        pos += 4 + (size_t)cs;
        done += bytes;
    }
    free(scratch);
    memcpy(out + pos, in + done, p.tail_bytes);
    return pos + p.tail_bytes;
}
