/*
 * The GPU twin of bitshuffle.c: a frame's bitshuffle/LZ4 blocks decoded on the GPU
 * (bitshuffle.h, "decoding on the GPU"). Methods: the LZ4 raw block format (Collet Y., "LZ4 Block
 * Format Description", lz4_Block_format.md of the LZ4 project) and the bit transpose of Masui K.
 * et al. (2015), "A compression scheme for radio data in high performance computing", Astronomy
 * and Computing 12, 181-190 (section 3).
 *
 * One warp per block of the table: its lanes parse the LZ4 sequences together (each the same
 * bytes) and copy each run of literals or match bytes in parallel into the warp's 8 KiB of
 * shared memory (bitshuffle_model.h, the function the CPU tests hold to liblz4), then
 * un-transpose the block from there straight into the frame (lane g: elements 8g .. 8g + 7, all
 * their bytes, one store of 8 * elem_size bytes where aligned). Stored tails are copied. Reads
 * stay inside each block's in_off .. in_off + in_size and writes inside its decoded bytes (the
 * host's walk checked both against the buffers).
 */
#include "io/bitshuffle.h"
#include "io/bitshuffle_model.h"

#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

namespace
{

constexpr int kWarps = 4; /* warps (blocks of the table) per thread block: 32 KiB of shared */

/* Bytes b0..b3 as a little-endian word. */
__device__ inline uint32_t word4(uint32_t b0, uint32_t b1, uint32_t b2, uint32_t b3)
{
    return b0 | b1 << 8 | b2 << 16 | b3 << 24;
}

/* 16 bytes w[0..4) to o: one vector store when o is 16-byte aligned, words or bytes otherwise. */
__device__ inline void store16(uint8_t *o, const uint32_t w[4])
{
    const uintptr_t a = reinterpret_cast<uintptr_t>(o);
    if ((a & 15) == 0) {
        *reinterpret_cast<uint4 *>(o) = make_uint4(w[0], w[1], w[2], w[3]);
    } else if ((a & 3) == 0) {
        for (int i = 0; i < 4; i++)
            reinterpret_cast<uint32_t *>(o)[i] = w[i];
    } else {
        for (int i = 0; i < 16; i++)
            o[i] = (uint8_t)(w[i / 4] >> (8 * (i % 4)));
    }
}

/* Gathers byte j's 8 bit rows of group g (8 elements) from the transposed block t (rows of
 * `row` bytes) and transposes them: byte r of the result is byte j of element 8g + r. */
__device__ inline uint64_t group_bytes(const uint8_t *t, uint32_t row, uint32_t g, uint32_t j)
{
    uint64_t x = 0;
    for (int k = 0; k < 8; k++)
        x |= (uint64_t)t[(8 * j + k) * row + g] << (8 * k);
    return sw_bm_transpose8(x);
}

/*
 * The inverse bit transpose of one block of n elements (sw_bshuf_untrans_block): t, the decoded
 * (transposed) block, to dst, the block's place in the frame; lane g of 32 takes groups g,
 * g + 32, ... Two- and four-byte elements (the detectors') are written 16 bytes at a time.
 */
__device__ void untrans_block(const uint8_t *t, uint8_t *dst, uint32_t n, uint32_t es,
                              uint32_t lane)
{
    const uint32_t row = n / 8;
    for (uint32_t g = lane; g < row; g += 32) {
        uint8_t *o = dst + (size_t)g * 8 * es;
        if (es == 2) {
            const uint64_t lo = group_bytes(t, row, g, 0), hi = group_bytes(t, row, g, 1);
            uint32_t w[4];
            for (int i = 0; i < 4; i++) /* elements 2i and 2i + 1 */
                w[i] = word4((uint32_t)(lo >> (16 * i)) & 0xff, (uint32_t)(hi >> (16 * i)) & 0xff,
                             (uint32_t)(lo >> (16 * i + 8)) & 0xff,
                             (uint32_t)(hi >> (16 * i + 8)) & 0xff);
            store16(o, w);
        } else if (es == 4) {
            uint64_t x[4];
            for (uint32_t j = 0; j < 4; j++)
                x[j] = group_bytes(t, row, g, j);
            uint32_t w[8];
            for (int r = 0; r < 8; r++) /* element r */
                w[r] =
                    word4((uint32_t)(x[0] >> (8 * r)) & 0xff, (uint32_t)(x[1] >> (8 * r)) & 0xff,
                          (uint32_t)(x[2] >> (8 * r)) & 0xff, (uint32_t)(x[3] >> (8 * r)) & 0xff);
            store16(o, w);
            store16(o + 16, w + 4);
        } else {
            for (uint32_t j = 0; j < es; j++) {
                const uint64_t x = group_bytes(t, row, g, j);
                for (uint32_t r = 0; r < 8; r++)
                    o[r * es + j] = (uint8_t)(x >> (8 * r));
            }
        }
    }
}

/* Warp w of thread block B decodes table entry B * kWarps + w. */
__global__ void __launch_bounds__(kWarps * 32)
    decode_blocks(const uint8_t *__restrict__ in, const sw_bshuf_block *__restrict__ blocks,
                  uint32_t nblocks, uint8_t *__restrict__ out, uint8_t *scratch, uint32_t *err)
{
    __shared__ __align__(16) uint8_t smem[kWarps][SW_BSHUF_GPU_SMEM];
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t b = blockIdx.x * kWarps + warp;
    if (b >= nblocks)
        return; /* (the whole warp) */
    const sw_bshuf_block blk = blocks[b];
    if (blk.n == 0) { /* a stored tail */
        for (uint32_t i = lane; i < blk.in_size; i += 32)
            out[blk.out_off + i] = in[blk.in_off + i];
        return;
    }
    const uint32_t bytes = blk.n * blk.elem_size; /* (the walk kept it within LZ4's limit) */
    uint8_t *buf = bytes <= SW_BSHUF_GPU_SMEM ? smem[warp]
                   : scratch                  ? scratch + blk.out_off
                                              : nullptr;
    if (!buf || !sw_bm_lz4_block(in + blk.in_off, blk.in_size, buf, bytes, lane, 32)) {
        if (lane == 0)
            atomicMin(err, b);
        return;
    }
    __syncwarp();
    untrans_block(buf, out + blk.out_off, blk.n, blk.elem_size, lane);
}

} // namespace

extern "C" int sw_bshuf_decode_lz4_gpu(const uint8_t *d_in, const sw_bshuf_block *d_blocks,
                                       uint32_t nblocks, uint8_t *d_out, uint8_t *d_scratch,
                                       uint32_t *d_err, void *stream)
{
    if (nblocks == 0)
        return 0;
    const uint32_t grid = (nblocks + kWarps - 1) / kWarps;
    decode_blocks<<<grid, kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
        d_in, d_blocks, nblocks, d_out, d_scratch, d_err);
    return (int)cudaGetLastError();
}

namespace
{

/* The device buffers of sw_bshuf_decode_frame_gpu. */
struct frame_bufs {
    uint8_t *in = nullptr, *out = nullptr, *scratch = nullptr;
    sw_bshuf_block *blocks = nullptr;
    uint32_t *err = nullptr;
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    ~frame_bufs()
    {
        cudaFree(in);
        cudaFree(out);
        cudaFree(scratch);
        cudaFree(blocks);
        cudaFree(err);
        if (t0)
            cudaEventDestroy(t0);
        if (t1)
            cudaEventDestroy(t1);
    }
};

} // namespace

#define FRAME_CU(call)                                                                             \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                                   \
            snprintf(why, why_size, "CUDA call %s failed: %s", #call, cudaGetErrorString(e_));     \
            free(table);                                                                           \
            return -2;                                                                             \
        }                                                                                          \
    } while (0)

extern "C" int sw_bshuf_decode_frame_gpu(const uint8_t *in, size_t in_size,
                                         const sw_find_chunk *chunks, size_t nchunks,
                                         size_t elem_size, uint8_t *out, size_t out_size,
                                         float *kernel_ms, char *why, size_t why_size)
{
    why[0] = '\0';
    const size_t cap = sw_bshuf_frame_table_max(out_size, elem_size, nchunks);
    sw_bshuf_block *table = static_cast<sw_bshuf_block *>(malloc((cap ? cap : 1) * sizeof *table));
    if (!table) {
        snprintf(why, why_size, "out of memory");
        return -2;
    }
    size_t n = 0, big = 0, bad = 0;
    const int rc = sw_bshuf_frame_walk(in, in_size, chunks, nchunks, elem_size, out_size, table,
                                       cap, &n, &big, &bad);
    if (rc == -3) {
        snprintf(why, why_size, "the frame passes 4 GiB (stored or decoded)");
        free(table);
        return -2;
    }
    if (rc != 0) {
        free(table);
        return sw_bshuf_frame_reason(in, in_size, chunks, nchunks, elem_size, out_size, why,
                                     why_size) == -2
                   ? -2
                   : -1;
    }
    frame_bufs d;
    FRAME_CU(cudaMalloc(&d.in, in_size ? in_size : 1));
    FRAME_CU(cudaMalloc(&d.out, out_size ? out_size : 1));
    FRAME_CU(cudaMalloc(&d.blocks, (n ? n : 1) * sizeof *table));
    FRAME_CU(cudaMalloc(&d.err, sizeof(uint32_t)));
    if (big > SW_BSHUF_GPU_SMEM)
        FRAME_CU(cudaMalloc(&d.scratch, out_size));
    FRAME_CU(cudaEventCreate(&d.t0));
    FRAME_CU(cudaEventCreate(&d.t1));
    FRAME_CU(cudaMemcpy(d.in, in, in_size, cudaMemcpyHostToDevice));
    FRAME_CU(cudaMemcpy(d.blocks, table, n * sizeof *table, cudaMemcpyHostToDevice));
    /* bytes no block covers (none for a valid frame of whole chunks) stay 0xA5, so that a test
     * sees any that the decoder failed to write */
    FRAME_CU(cudaMemset(d.out, 0xA5, out_size));
    FRAME_CU(cudaMemset(d.err, 0xFF, sizeof(uint32_t)));
    FRAME_CU(cudaEventRecord(d.t0, 0));
    FRAME_CU((cudaError_t)sw_bshuf_decode_lz4_gpu(d.in, d.blocks, (uint32_t)n, d.out, d.scratch,
                                                  d.err, 0));
    FRAME_CU(cudaEventRecord(d.t1, 0));
    uint32_t err = 0;
    FRAME_CU(cudaMemcpy(&err, d.err, sizeof err, cudaMemcpyDeviceToHost));
    FRAME_CU(cudaMemcpy(out, d.out, out_size, cudaMemcpyDeviceToHost));
    if (kernel_ms)
        FRAME_CU(cudaEventElapsedTime(kernel_ms, d.t0, d.t1));
    int result = 0;
    if (err != UINT32_MAX) {
        result = err < n ? -1 : -2;
        if (err >= n)
            snprintf(why, why_size, "the GPU decoder reported block %u of %zu", err, n);
        else if (sw_bshuf_frame_reason(in, in_size, chunks, nchunks, elem_size, out_size, why,
                                       why_size) == -2)
            result = -2;
    }
    free(table);
    return result;
}
