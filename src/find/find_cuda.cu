/*
 * The GPU orchestration of the find stage (find_internal.h, "GPU orchestration"): the device
 * frame slots the pipeline uploads into on a copy stream of its own, the strong mask and the two
 * label slots (this frame's and the previous one's, for 3-D links), and one frame's threshold ->
 * labels -> component table on the context's stream. The kernels are in find_threshold_cuda.cu
 * and find_label_cuda.cu.
 */
#include "find/find_internal.h"
#include "core/cuda_util.h"
#include "io/bitshuffle.h"

#include <cuda_runtime.h>

#include <new>

namespace
{

struct find_gpu {
    sw_image frame[2];            /* device frame slots (pitched)                       */
    uint8_t *strong;              /* npix                                               */
    int32_t *labels[2];           /* npix each                                          */
    unsigned long long *counts;   /* [valid, strong] on the device                      */
    unsigned long long *h_counts; /* pinned host copy                                   */
    cudaStream_t copy;            /* uploads                                            */
    cudaEvent_t uploaded[2];      /* recorded after each slot's upload                  */
    int32_t *h_labels;            /* deblending: a host copy of a label slot (npix)     */
    void *h_frame;                /* deblending: a host copy of a frame (tight rows)    */
    /* stored bitshuffle/LZ4 chunks (sw_find_gpu_upload_chunks), per slot, grown on demand */
    uint8_t *comp[2];
    size_t comp_cap[2];
    sw_bshuf_block *table[2];
    size_t table_cap[2];
    uint32_t *err;    /* [2] on the device: the first failing block of each slot's decoding */
    uint32_t *h_err;  /* [2] pinned                                                        */
    uint8_t *scratch; /* a frame, for blocks beyond SW_BSHUF_GPU_SMEM bytes (rare)       */
};

find_gpu *gpu_of(sw_find_plan *plan)
{
    return static_cast<find_gpu *>(plan->gpu);
}

cudaStream_t stream_of(const sw_find_plan *plan)
{
    return static_cast<cudaStream_t>(plan->ctx->stream);
}

} // namespace

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "find"

void sw_find_gpu_destroy(sw_find_plan *plan)
{
    find_gpu *g = gpu_of(plan);
    if (!g)
        return;
    if (g->copy)
        cudaStreamSynchronize(g->copy);
    cudaStreamSynchronize(stream_of(plan));
    for (int i = 0; i < 2; ++i) {
        cudaFree(g->frame[i].data);
        cudaFree(g->labels[i]);
        if (g->uploaded[i])
            cudaEventDestroy(g->uploaded[i]);
    }
    for (int i = 0; i < 2; ++i) {
        cudaFree(g->comp[i]);
        cudaFree(g->table[i]);
    }
    cudaFree(g->err);
    cudaFreeHost(g->h_err);
    cudaFree(g->scratch);
    cudaFree(g->strong);
    cudaFree(g->counts);
    cudaFreeHost(g->h_counts);
    free(g->h_labels);
    free(g->h_frame);
    if (g->copy)
        cudaStreamDestroy(g->copy);
    delete g;
    plan->gpu = nullptr;
}

sw_status sw_find_gpu_create(sw_find_plan *plan)
{
    find_gpu *g = new (std::nothrow) find_gpu();
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory");
    plan->gpu = g;
    size_t n = (size_t)plan->npix;
    size_t row = (size_t)plan->width * sw_pixel_size(plan->p.type);
    for (int i = 0; i < 2; ++i) {
        /* Tight rows (not pitched): an upload from the pipeline's tight pinned buffers is one
         * contiguous copy. The kernels read any stride. */
        SW_CU(cudaMalloc(&g->frame[i].data, row * (size_t)plan->height));
        g->frame[i].width = plan->width;
        g->frame[i].height = plan->height;
        g->frame[i].stride = row;
        g->frame[i].type = plan->p.type;
        g->frame[i].memory = SW_MEM_DEVICE;
        g->frame[i].owned = 0;
        SW_CU(cudaMalloc(&g->labels[i], n * sizeof(int32_t)));
        SW_CU(cudaEventCreateWithFlags(&g->uploaded[i], cudaEventDisableTiming));
    }
    SW_CU(cudaMalloc(&g->strong, n));
    SW_CU(cudaMalloc(&g->counts, 2 * sizeof(unsigned long long)));
    SW_CU(cudaHostAlloc(&g->h_counts, 2 * sizeof(unsigned long long), cudaHostAllocDefault));
    SW_CU(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking));
    return SW_OK;
}

sw_status sw_find_gpu_upload(sw_find_plan *plan, const sw_image *host, int slot)
{
    find_gpu *g = gpu_of(plan);
    const sw_image *d = &g->frame[slot];
    size_t row = (size_t)plan->width * sw_pixel_size(plan->p.type);
    SW_CU(cudaMemcpy2DAsync(d->data, d->stride, host->data, host->stride, row, (size_t)plan->height,
                            cudaMemcpyHostToDevice, g->copy));
    SW_CU(cudaEventRecord(g->uploaded[slot], g->copy));
    return SW_OK;
}

sw_status sw_find_gpu_upload_wait(sw_find_plan *plan, int slot)
{
    SW_CU(cudaEventSynchronize(gpu_of(plan)->uploaded[slot]));
    return SW_OK;
}

/* Makes *p hold at least need bytes of device memory (its contents are not kept). */
static cudaError_t grow_device(void **p, size_t *cap, size_t need)
{
    if (*p && *cap >= need)
        return cudaSuccess;
    cudaFree(*p);
    *p = nullptr;
    *cap = 0;
    cudaError_t e = cudaMalloc(p, need ? need : 1);
    if (e == cudaSuccess)
        *cap = need;
    return e;
}

sw_status sw_find_gpu_upload_chunks(sw_find_plan *plan, const void *comp, size_t bytes,
                                    const void *table, uint32_t nblocks, size_t big, int slot)
{
    find_gpu *g = gpu_of(plan);
    const size_t frame = (size_t)plan->width * sw_pixel_size(plan->p.type) * (size_t)plan->height;
    SW_CU(grow_device(reinterpret_cast<void **>(&g->comp[slot]), &g->comp_cap[slot], bytes));
    size_t tcap = g->table_cap[slot] * sizeof(sw_bshuf_block);
    SW_CU(grow_device(reinterpret_cast<void **>(&g->table[slot]), &tcap,
                      (size_t)nblocks * sizeof(sw_bshuf_block)));
    g->table_cap[slot] = tcap / sizeof(sw_bshuf_block);
    if (!g->err) {
        SW_CU(cudaMalloc(&g->err, 2 * sizeof(uint32_t)));
        SW_CU(cudaHostAlloc(&g->h_err, 2 * sizeof(uint32_t), cudaHostAllocDefault));
    }
    if (big > SW_BSHUF_GPU_SMEM && !g->scratch)
        SW_CU(cudaMalloc(&g->scratch, frame));
    /* as a plain upload: the copy stream, after the slot's previous frame is done with (the
     * pipeline processes a slot's frame before it queues the next one into it) */
    SW_CU(cudaMemcpyAsync(g->comp[slot], comp, bytes, cudaMemcpyHostToDevice, g->copy));
    SW_CU(cudaMemcpyAsync(g->table[slot], table, (size_t)nblocks * sizeof(sw_bshuf_block),
                          cudaMemcpyHostToDevice, g->copy));
    SW_CU(cudaMemsetAsync(g->err + slot, 0xFF, sizeof(uint32_t), g->copy));
    SW_CU((cudaError_t)sw_bshuf_decode_lz4_gpu(g->comp[slot], g->table[slot], nblocks,
                                               static_cast<uint8_t *>(g->frame[slot].data),
                                               g->scratch, g->err + slot, g->copy));
    SW_CU(cudaMemcpyAsync(g->h_err + slot, g->err + slot, sizeof(uint32_t), cudaMemcpyDeviceToHost,
                          g->copy));
    SW_CU(cudaEventRecord(g->uploaded[slot], g->copy));
    return SW_OK;
}

uint32_t sw_find_gpu_decode_error(sw_find_plan *plan, int slot)
{
    const find_gpu *g = gpu_of(plan);
    return g->h_err ? g->h_err[slot] : UINT32_MAX;
}

sw_status sw_find_gpu_process(sw_find_plan *plan, const sw_image *frame, int slot, int label_slot,
                              int64_t frame_index, int64_t *ncomp, int64_t *valid, int64_t *strong,
                              sw_image *strong_host)
{
    find_gpu *g = gpu_of(plan);
    cudaStream_t s = stream_of(plan);
    if (!frame) {
        frame = &g->frame[slot];
        SW_CU(cudaStreamWaitEvent(s, g->uploaded[slot], 0));
    }
    SW_CU(cudaMemsetAsync(g->counts, 0, 2 * sizeof(unsigned long long), s));
    sw_status st = sw_find_threshold_gpu(plan, frame, g->strong, plan->window, g->counts, s);
    if (st != SW_OK)
        return st;
    SW_CU(cudaMemcpyAsync(g->h_counts, g->counts, 2 * sizeof(unsigned long long),
                          cudaMemcpyDeviceToHost, s));
    if (strong_host)
        SW_CU(cudaMemcpy2DAsync(strong_host->data, strong_host->stride, g->strong,
                                (size_t)plan->width, (size_t)plan->width, (size_t)plan->height,
                                cudaMemcpyDeviceToHost, s));
    SW_CU(cudaStreamSynchronize(s));
    *valid = (int64_t)g->h_counts[0];
    *strong = (int64_t)g->h_counts[1];
    st = sw_find_check_strong_fraction(plan, frame_index, *valid, *strong);
    if (st != SW_OK)
        return st;
    return sw_find_label_gpu(plan, g->strong, frame, g->labels[label_slot], plan->comps,
                             plan->p.max_components, ncomp, s);
}

sw_status sw_find_gpu_links(sw_find_plan *plan, int prev, int cur, int32_t *pairs, int64_t capacity,
                            int64_t *npairs)
{
    find_gpu *g = gpu_of(plan);
    return sw_find_links_gpu(plan, g->labels[prev], g->labels[cur], pairs, capacity, npairs,
                             stream_of(plan));
}

const sw_image *sw_find_gpu_frame(sw_find_plan *plan, int slot)
{
    return &gpu_of(plan)->frame[slot];
}

sw_status sw_find_gpu_deblend_emit(sw_find_plan *plan, const sw_image *frame, int slot,
                                   int label_slot, int64_t ncomp, int64_t frame_index,
                                   sw_spot_list *spots, sw_find_stats *stats)
{
    find_gpu *g = gpu_of(plan);
    cudaStream_t s = stream_of(plan);
    if (!frame)
        frame = &g->frame[slot];
    const size_t n = (size_t)plan->npix;
    const size_t row = (size_t)plan->width * sw_pixel_size(plan->p.type);
    if (!g->h_labels) {
        g->h_labels = static_cast<int32_t *>(malloc(n * sizeof(int32_t)));
        if (!g->h_labels)
            return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory for the labels' copy");
    }
    if (!g->h_frame) {
        g->h_frame = malloc(row * (size_t)plan->height);
        if (!g->h_frame)
            return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory for the frame's copy");
    }
    /* deblending runs on the CPU after the GPU labels: labels and frame come back */
    SW_CU(cudaMemcpyAsync(g->h_labels, g->labels[label_slot], n * sizeof(int32_t),
                          cudaMemcpyDeviceToHost, s));
    SW_CU(cudaMemcpy2DAsync(g->h_frame, row, frame->data, frame->stride, row, (size_t)plan->height,
                            cudaMemcpyDeviceToHost, s));
    SW_CU(cudaStreamSynchronize(s));
    sw_image host;
    sw_status st =
        sw_image_wrap(g->h_frame, plan->width, plan->height, row, plan->p.type, SW_MEM_HOST, &host);
    if (st != SW_OK)
        return st;
    return sw_find_deblend_emit(plan, &host, g->h_labels, plan->comps, ncomp, frame_index, spots,
                                stats);
}
