/*
 * Bitshuffle and bitshuffle/LZ4 chunks as the HDF5 filter 32008 stores them (the Eiger
 * detectors' compression), decoded with every size checked. Method: Masui K. et al. (2015),
 * "A compression scheme for radio data in high performance computing", Astronomy and Computing
 * 12, 181-190 (section 3: the bit transpose within blocks, then LZ4 per block).
 *
 * The transform of one block of n elements (n a multiple of 8) of s bytes each: bit k of byte j
 * of element i (bytes in memory order) goes to bit (i % 8) of byte (8 j + k) * (n / 8) + i / 8.
 * That is, the block becomes 8 s rows of n bits, row 8 j + k holding bit k of byte j of every
 * element in turn, least significant bit first in each byte.
 *
 * A chunk of N bytes (N / s elements) is cut into blocks of B elements (B a multiple of 8: the
 * filter's block size, or 8192 / s rounded down to a multiple of 8 and at least 128 when the
 * filter says 0); the elements after the last whole block form one more block of the largest
 * multiple of 8 that fits, and the last (N / s) % 8 elements are stored as they are.
 * Uncompressed (the filter's cd_values[4] = 0) the chunk is these blocks one after another.
 * With LZ4 (cd_values[4] = 2) it is a 12-byte header, N as a big-endian u64 and B * s as a
 * big-endian u32 (read back divided by s, rounded down, 0 meaning the default, as the filter
 * does), then per block a big-endian u32 byte count and that many bytes of one LZ4 block
 * (liblz4's raw block format) that decodes to the block's bytes, then the stored tail.
 *
 * The transposes are plain loops over byte arrays with no allocation, written so that a CUDA
 * twin can share them (one thread per 8 elements and byte); the decoders allocate one scratch
 * block per thread and the list of the blocks' offsets. Nothing here reads or writes outside the
 * sizes it is given: every count in the data is checked against what is left before it is used.
 */
#ifndef SW_IO_BITSHUFFLE_H
#define SW_IO_BITSHUFFLE_H

#include <stddef.h>
#include <stdint.h>

#define SW_BSHUF_HEADER      12   /* bytes of the LZ4 variant's chunk header */
#define SW_BSHUF_BLOCK_MULT  8    /* block sizes are multiples of this many elements */
#define SW_BSHUF_TARGET_SIZE 8192 /* bytes a default block aims at */
#define SW_BSHUF_MIN_BLOCK   128  /* elements in a default block, at least */

/* The block size (elements) the filter uses when its parameter is 0. */
size_t sw_bshuf_default_block(size_t elem_size);

/* One block of n elements (n % 8 == 0) of elem_size bytes: in (n * elem_size bytes) to out. */
void sw_bshuf_trans_block(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size);
/* The inverse: a transposed block back to elements. */
void sw_bshuf_untrans_block(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size);

/*
 * Decodes one chunk of the LZ4 variant: in (in_size bytes, as stored) to out (out_size bytes,
 * the chunk's size from its dataset's chunk shape and element size). 0 when the header names
 * exactly out_size bytes and a valid block size, every block's count fits in what is left,
 * every block decodes to exactly its size and nothing is left over; otherwise -1 with the
 * reason in why (never NULL; why_size > 0), and out partly written. -2: out of memory.
 */
int sw_bshuf_decode_lz4(const uint8_t *in, size_t in_size, uint8_t *out, size_t out_size,
                        size_t elem_size, char *why, size_t why_size);

/*
 * The same on up to `threads` threads (OpenMP; <= 1: this thread alone): the block counts are
 * read and checked in order first, then the blocks decoded in parallel, each into its own part
 * of out. The result, the return value and the reason are those of sw_bshuf_decode_lz4 for every
 * input (the first block, in order, that fails gives the reason); only how much of out is
 * written before a failure differs.
 */
int sw_bshuf_decode_lz4_mt(const uint8_t *in, size_t in_size, uint8_t *out, size_t out_size,
                           size_t elem_size, int threads, char *why, size_t why_size);

/* Decodes a chunk of the uncompressed variant (block size block, 0 = default): in_size must be
 * out_size. Same results as sw_bshuf_decode_lz4. */
int sw_bshuf_decode_plain(const uint8_t *in, size_t in_size, uint8_t *out, size_t out_size,
                          size_t elem_size, size_t block, char *why, size_t why_size);

/* The most bytes sw_bshuf_encode_lz4 writes for size bytes. */
size_t sw_bshuf_lz4_bound(size_t size, size_t elem_size, size_t block);

/* Encodes size bytes (whole elements) as the LZ4 variant with block size block (0 = default)
 * into out (out_cap >= sw_bshuf_lz4_bound): the number of bytes written, or 0 on failure (a
 * block size that is not a multiple of 8, out of memory, too small an out). For tests, seeds and
 * writers that do not have the filter plugin. */
size_t sw_bshuf_encode_lz4(const uint8_t *in, size_t size, uint8_t *out, size_t out_cap,
                           size_t elem_size, size_t block);

#endif /* SW_IO_BITSHUFFLE_H */
