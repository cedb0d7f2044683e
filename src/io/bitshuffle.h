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

#include "spotwave/find.h" /* sw_find_chunk */

#ifdef __cplusplus
extern "C" {
#endif

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

/* ---------------------------------------------------------------- decoding on the GPU
 *
 * A frame's chunks are decoded in two steps. On the host, sw_bshuf_frame_walk reads each chunk's
 * header and block counts (4 bytes a block: nothing is decoded) into a table of blocks, every
 * count checked as sw_bshuf_decode_lz4 checks it. On the GPU (bitshuffle_cuda.cu), one warp
 * decodes each LZ4 block (bitshuffle_model.h, the same function as the CPU test's) into shared
 * memory and un-transposes it from there into the frame; stored tails are copied. A block that
 * does not decode sets an error word to the smallest failing block index (deterministic: the
 * first block, in order, that fails), which the host turns into the CPU decoder's reason for
 * that chunk (sw_bshuf_frame_reason).
 */

/* One entry of the table: a block of one chunk (32-bit offsets: a frame's stored and decoded
 * bytes are under 4 GiB). */
typedef struct sw_bshuf_block {
    uint32_t in_off;    /* its LZ4 bytes (or the stored tail) in the frame's stored bytes    */
    uint32_t in_size;   /* ... how many                                                     */
    uint32_t out_off;   /* its decoded bytes in the frame                                   */
    uint32_t n;         /* elements (a multiple of 8); 0: a stored tail of in_size bytes     */
    uint32_t elem_size; /* bytes per element                                               */
    uint32_t chunk;     /* the chunk it belongs to (index in the frame's chunk list)        */
} sw_bshuf_block;

/* Bytes of a block decoded in the GPU's shared memory; larger blocks (block sizes above 8 KiB,
 * never the filter's default) are decoded into a scratch frame in device memory first. */
#define SW_BSHUF_GPU_SMEM 8192

/*
 * Appends the blocks of one chunk (in, in_size stored bytes, out_size decoded) to
 * blocks[*n .. cap): in_base and out_base are where the chunk lies in the frame's stored and
 * decoded bytes. The checks are sw_bshuf_decode_lz4's that need no decoding (header, every count
 * against what is left, the stored tail, no stray bytes), in its order. 0; -1 when the chunk
 * fails one (sw_bshuf_decode_lz4 then gives the reason); -3 when cap is too small or an offset
 * passes 4 GiB.
 */
int sw_bshuf_lz4_walk(const uint8_t *in, size_t in_size, size_t out_size, size_t elem_size,
                      uint64_t in_base, uint64_t out_base, uint32_t chunk, sw_bshuf_block *blocks,
                      size_t cap, size_t *n);

/*
 * The table of a whole frame: chunks[0..nchunks) of the frame's stored bytes (in, in_size) and
 * their places in the decoded frame (out_size bytes), each checked to lie inside both, walked in
 * order. *n blocks, *big: the largest decoded block's bytes. 0; -1 when chunk *bad fails a
 * check (sw_bshuf_frame_reason says why); -3 when the table would pass cap entries or an offset
 * 4 GiB.
 */
int sw_bshuf_frame_walk(const uint8_t *in, size_t in_size, const sw_find_chunk *chunks,
                        size_t nchunks, size_t elem_size, size_t out_size, sw_bshuf_block *blocks,
                        size_t cap, size_t *n, size_t *big, size_t *bad);

/* The entries a frame's table can need at most: every block of 8 elements, and a tail each. */
size_t sw_bshuf_frame_table_max(size_t out_size, size_t elem_size, size_t nchunks);

/*
 * Why a frame's chunks do not decode: the first chunk, in order, that sw_bshuf_decode_lz4
 * refuses, and its reason ("chunk 3 of 8: ..."), in why. 0 when one does; 1 when every chunk
 * decodes on the CPU (then the GPU refused what liblz4 accepts: an LZ4 offset of 0); -2 out of
 * memory.
 */
int sw_bshuf_frame_reason(const uint8_t *in, size_t in_size, const sw_find_chunk *chunks,
                          size_t nchunks, size_t elem_size, size_t out_size, char *why,
                          size_t why_size);

/* One LZ4 block by the shared decoder (bitshuffle_model.h) on this thread: 0 when it decodes to
 * exactly out_size bytes, -1 otherwise. For the tests that hold it to liblz4. */
int sw_bshuf_lz4_block_decode(const uint8_t *in, uint32_t in_size, uint8_t *out, uint32_t out_size);

#ifdef SW_HAVE_CUDA
/*
 * Queues on `stream` (a cudaStream_t) the decoding of blocks[0..nblocks) (a device copy of a
 * frame's table) from d_in (the frame's stored bytes, device) into d_out (the decoded frame,
 * device). d_scratch: device memory as large as the frame when a block exceeds
 * SW_BSHUF_GPU_SMEM bytes, else NULL (such a block then fails). *d_err (device, set to
 * UINT32_MAX beforehand) receives the smallest index of a block that does not decode; nothing
 * outside a block's own bytes is read or written. 0, or the CUDA error (cudaError_t).
 */
int sw_bshuf_decode_lz4_gpu(const uint8_t *d_in, const sw_bshuf_block *d_blocks, uint32_t nblocks,
                            uint8_t *d_out, uint8_t *d_scratch, uint32_t *d_err, void *stream);

/*
 * A whole frame host to host through the GPU (for tests and the benchmark): the table walked
 * here, the stored bytes copied, decoded by sw_bshuf_decode_lz4_gpu, copied back into out
 * (out_size bytes). 0; -1 a chunk does not decode (why: sw_bshuf_frame_reason's); -2 a CUDA
 * error or out of memory (why says which). *kernel_ms, when not NULL, receives the decoding
 * kernel's time.
 */
int sw_bshuf_decode_frame_gpu(const uint8_t *in, size_t in_size, const sw_find_chunk *chunks,
                              size_t nchunks, size_t elem_size, uint8_t *out, size_t out_size,
                              float *kernel_ms, char *why, size_t why_size);
#endif

#ifdef __cplusplus
}
#endif

#endif /* SW_IO_BITSHUFFLE_H */
