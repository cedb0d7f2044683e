/*
 * The per-block parts of the bitshuffle/LZ4 decoder (bitshuffle.h), written once for the CPU
 * (bitshuffle.c, and the tests that hold this LZ4 decoder to liblz4's) and the GPU
 * (bitshuffle_cuda.cu), so that both decide every block with the same checks in the same order.
 *
 * LZ4 blocks: the raw block format of Collet Y., "LZ4 Block Format Description"
 * (lz4_Block_format.md of the LZ4 project): sequences of a token (high nibble: literal count,
 * low nibble: match length - 4; 15 meaning more bytes follow, each added, until one is not 255),
 * the literals, a 2-byte little-endian offset back into what was decoded, and the match copied
 * from there (offset < length: a repeating pattern). The block ends with a sequence of literals
 * only. The end-of-block rules are liblz4's LZ4_decompress_safe's, so that a block is accepted
 * here exactly when liblz4 decodes it to its full size: a sequence whose literals end within 12
 * bytes of the output's end (MFLIMIT) or within 8 bytes of the input's end must be the last and
 * end exactly at the input's end; a match must end at least 5 bytes (LASTLITERALS) before the
 * output's end; an offset must point into what this block has decoded (liblz4 has no dictionary
 * here). Offset 0 is refused here (invalid in the format; liblz4 1.9 decodes such a match as
 * zeros), the only case where this decoder is stricter than liblz4 (test_io_bitshuffle_blocks).
 *
 * The bit transpose: Masui K. et al. (2015), "A compression scheme for radio data in high
 * performance computing", Astronomy and Computing 12, 181-190 (section 3); the layout is given
 * in bitshuffle.h.
 */
#ifndef SW_IO_BITSHUFFLE_MODEL_H
#define SW_IO_BITSHUFFLE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define SW_BM_FN __host__ __device__ static inline
#else
#define SW_BM_FN static inline
#endif

/* Between the sequences of a block decoded by several lanes: what one lane wrote is read by
 * another in the next sequence (a warp on the GPU; nothing for one thread). */
#if defined(__CUDA_ARCH__)
#define SW_BM_SYNC() __syncwarp()
#elif !defined(SW_BM_SYNC) /* (a test may emulate a warp with threads and a barrier) */
#define SW_BM_SYNC() ((void)0)
#endif

#define SW_BM_MFLIMIT      12 /* liblz4: the last match starts at least this far from the end */
#define SW_BM_LASTLITERALS 5  /* liblz4: the last 5 bytes of a block are literals             */

/* Transposes the 8 x 8 bit matrix held in x, byte r being row r and bit c of it column c:
 * afterwards byte c holds, in bit r, what was bit c of byte r (three swap rounds of 1, 2 and
 * 4-bit blocks). */
SW_BM_FN uint64_t sw_bm_transpose8(uint64_t x)
{
    uint64_t t;
    t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
    x ^= t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
    x ^= t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
    x ^= t ^ (t << 28);
    return x;
}

/* The big-endian u32 at p (bitshuffle's per-block byte counts). */
SW_BM_FN uint32_t sw_bm_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads an LZ4 length extension at in[*ip ...) (bytes added while they are 255) onto *len;
 * 0 when it runs past in_size or past `most` (no valid length is larger), -1 otherwise. */
SW_BM_FN int sw_bm_lz4_more(const uint8_t *in, uint32_t in_size, uint32_t *ip, uint32_t *len,
                            uint32_t most)
{
    uint32_t s;
    do {
        if (*ip >= in_size)
            return 0;
        s = in[(*ip)++];
        *len += s;
        if (*len > most)
            return 0;
    } while (s == 255);
    return -1;
}

/*
 * Decodes one raw LZ4 block (in, in_size bytes) into exactly out_size bytes of out: 1 when it
 * decodes to exactly out_size bytes under the rules above, 0 otherwise (out partly written).
 * Reads in[0 .. in_size) and writes out[0 .. out_size) only. Lane `lane` of `lanes` copies
 * bytes lane, lane + lanes, ... of each run; every lane parses the same sequences (the GPU calls
 * it with a warp, lanes = 32; the CPU with lane 0 of 1).
 */
SW_BM_FN int sw_bm_lz4_block(const uint8_t *in, uint32_t in_size, uint8_t *out, uint32_t out_size,
                             uint32_t lane, uint32_t lanes)
{
    uint32_t ip = 0, op = 0;
    for (;;) {
        if (ip >= in_size)
            return 0;
        const uint32_t token = in[ip++];
        uint32_t lit = token >> 4;
        if (lit == 15 && !sw_bm_lz4_more(in, in_size, &ip, &lit, out_size))
            return 0;
        if (lit > in_size - ip || lit > out_size - op)
            return 0;
        /* liblz4's end of block: literals ending within MFLIMIT of the output's end or within
         * 8 bytes of the input's end (no room for an offset and a last sequence) are the last
         * sequence, which must end exactly at the input's end */
        const int last = (uint64_t)op + lit + SW_BM_MFLIMIT > out_size ||
                         (uint64_t)ip + lit + 2 + 1 + SW_BM_LASTLITERALS > in_size;
        if (last && ip + lit != in_size)
            return 0;
        for (uint32_t i = lane; i < lit; i += lanes)
            out[op + i] = in[ip + i];
        ip += lit;
        op += lit;
        if (last)
            return op == out_size;
        /* (room for the offset: ip + 8 <= in_size above) */
        const uint32_t offset = (uint32_t)in[ip] | (uint32_t)in[ip + 1] << 8;
        ip += 2;
        if (offset == 0 || offset > op)
            return 0;
        uint32_t len = token & 15;
        if (len == 15 && !sw_bm_lz4_more(in, in_size, &ip, &len, out_size))
            return 0;
        len += 4;
        if (len > out_size - op || out_size - op - len < SW_BM_LASTLITERALS)
            return 0;
        SW_BM_SYNC(); /* the match may read what other lanes just wrote */
        /* out[op + i] = out[op + i - offset], overlapping or not: the pattern of the last
         * `offset` bytes repeated, so each byte is read from before op */
        const uint32_t from = op - offset;
        if (offset >= len)
            for (uint32_t i = lane; i < len; i += lanes)
                out[op + i] = out[from + i];
        else
            for (uint32_t i = lane; i < len; i += lanes)
                out[op + i] = out[from + i % offset];
        op += len;
        SW_BM_SYNC();
    }
}

#endif /* SW_IO_BITSHUFFLE_MODEL_H */
