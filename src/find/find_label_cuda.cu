/*
 * find: connected components, component moments and 3-D links on the GPU, the twin of
 * find_label.c (find_internal.h has the contracts; the labels and the component tables are the
 * same as the CPU's, the sums to within rounding).
 *
 * Labelling (seed 003 keeps kernel_filter's output "for later use in connected component
 * labelling"): union-find with atomics after Playne & Hawick (2018), "A new algorithm for
 * parallel connected-component labelling on GPUs", in three kernels:
 *   init      every strong pixel points at one already-visited strong neighbour, chosen by the
 *             decision tree of find_label.c (4: up, else left; 8: up-left, else up, else left,
 *             else up-right), or at itself; so every parent has a smaller index than its child;
 *   merge     the pixels where the tree needs a second link (4: up and left strong, up-left not;
 *             8: up-right strong, up not, and up-left or left strong) join the two sets: find
 *             both roots, then atomicMin on the larger root's parent, repeated until the roots
 *             agree. Links only ever go to smaller indices, so a set's root is its smallest
 *             linear index, as on the CPU;
 *   compress  every pixel's label becomes its root (pointer jumping); the same kernel flags the
 *             roots (label == own index).
 * Components: an exclusive prefix sum of the root flags (CUB DeviceScan, in place) gives every
 * root its id in root order; a kernel sets up the table entry of each root, then every thread
 * sums a run of LAB_SEG pixels of one row locally and flushes each run of one component with
 * atomics: double atomicAdd for the sums, atomicMin / atomicMax for the bounding box, and for the
 * peak a 64-bit atomicMax of (value << 32 | (0xffffffff - index)), so that equal values go to the
 * smallest index (the first in raster order). A last kernel unpacks the peaks. The count and then
 * the table are copied to the host.
 * Links: every pixel labelled in both frames whose left and upper neighbours do not give the same
 * pair writes (prev root << 32 | cur root) through an atomic counter (find_label.c says why this
 * keeps every pair and at most ceil(width / 2) a row), then CUB radix sort (double-buffered
 * between the two key buffers) and unique.
 * Every device buffer and the CUB temporary storage are allocated in init; the calls allocate
 * nothing and queue everything on the given stream.
 */
#include "find/find_internal.h"
#include "find/find_model.h"
#include "core/cuda_util.h"

#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <limits.h>
#include <new>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "find: labelling"

#define LAB_BX  32 /* 2-D per-pixel kernels: block 32 x 8 */
#define LAB_BY  8
#define LAB_SEG 8  /* pixels of one row summed by one thread in the moments kernel */
#define LAB_MX  64 /* moments kernel: block 64 x 4 */
#define LAB_MY  4

namespace
{

struct lab_gpu {
    int32_t *cid;                /* root flags, then ids (in-place scan); also link keys A  */
    unsigned long long *keys_b;  /* link keys B (lcap)                                      */
    sw_find_comp *comps;         /* the component table (dcap)                              */
    unsigned long long *peak;    /* packed peaks (dcap)                                     */
    unsigned long long *count;   /* [0] components, [1] link candidates, [2] links          */
    unsigned long long *h_count; /* pinned host copy of count                               */
    void *temp;                  /* CUB temporary storage                                   */
    size_t temp_bytes;
    int64_t lcap; /* link candidates the key buffers hold: height * ceil(width / 2) */
    int64_t dcap; /* table entries: p.max_components                                */
};

lab_gpu *lab_of(sw_find_plan *plan)
{
    return static_cast<lab_gpu *>(plan->lab_gpu);
}

/* ---------------------------------------------------------------- labelling kernels */

/* Root of a: follows parents (read past L1, which other SMs' atomics do not update). */
__device__ __forceinline__ int32_t lab_find(const int32_t *L, int32_t a)
{
    int32_t p = __ldcg(L + a);
    while (p != a) {
        a = p;
        p = __ldcg(L + a);
    }
    return a;
}

/* Joins the sets of a and b (Playne & Hawick 2018): the larger root is pointed at the smaller one
 * with atomicMin; when another thread moved that root first, start again from what it holds. */
__device__ void lab_union(int32_t *L, int32_t a, int32_t b)
{
    for (;;) {
        a = lab_find(L, a);
        b = lab_find(L, b);
        if (a == b)
            return;
        if (a < b) {
            const int32_t old = atomicMin(L + b, a);
            if (old == b)
                return;
            b = old;
        } else {
            const int32_t old = atomicMin(L + a, b);
            if (old == a)
                return;
            a = old;
        }
    }
}

/* The visited neighbours of (x, y) that are strong: bits UL, U, UR, L. */
enum { NB_UL = 1, NB_U = 2, NB_UR = 4, NB_L = 8 };

__device__ __forceinline__ int lab_neighbours(const uint8_t *strong, int32_t x, int32_t y,
                                              int32_t w, int32_t i)
{
    int m = 0;
    if (x > 0 && strong[i - 1])
        m |= NB_L;
    if (y > 0) {
        if (strong[i - w])
            m |= NB_U;
        if (x > 0 && strong[i - w - 1])
            m |= NB_UL;
        if (x + 1 < w && strong[i - w + 1])
            m |= NB_UR;
    }
    return m;
}

__global__ void lab_init_kernel(const uint8_t *strong, int32_t *L, int32_t w, int32_t h, int conn8)
{
    const int32_t x = blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const int32_t i = y * w + x;
    if (!strong[i]) {
        L[i] = -1;
        return;
    }
    const int m = lab_neighbours(strong, x, y, w, i);
    int32_t p = i;
    if (conn8) {
        if (m & NB_UL)
            p = i - w - 1;
        else if (m & NB_U)
            p = i - w;
        else if (m & NB_L)
            p = i - 1;
        else if (m & NB_UR)
            p = i - w + 1;
    } else {
        if (m & NB_U)
            p = i - w;
        else if (m & NB_L)
            p = i - 1;
    }
    L[i] = p;
}

__global__ void lab_merge_kernel(const uint8_t *strong, int32_t *L, int32_t w, int32_t h, int conn8)
{
    const int32_t x = blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const int32_t i = y * w + x;
    if (!strong[i] || y == 0)
        return;
    const int m = lab_neighbours(strong, x, y, w, i);
    if (conn8) {
        if ((m & NB_UR) && !(m & NB_U) && (m & (NB_UL | NB_L)))
            lab_union(L, (m & NB_UL) ? i - w - 1 : i - 1, i - w + 1);
    } else {
        if ((m & NB_U) && (m & NB_L) && !(m & NB_UL))
            lab_union(L, i - w, i - 1);
    }
}

/* Every label becomes its root; flag[i] = 1 for the roots, 0 otherwise. Each thread writes only
 * its own pixel's label, moving it up the tree as it walks (pointer jumping: a thread that reads
 * a label another thread has moved already skips that part of the path, so long chains, e.g. a
 * full frame's, shrink about geometrically instead of being walked pixel by pixel). */
__global__ void lab_compress_kernel(int32_t *L, int32_t *flag, int32_t n)
{
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int32_t p = L[i];
        if (p < 0) {
            flag[i] = 0;
            continue;
        }
        int32_t pp = __ldcg(L + p);
        while (pp != p) {
            __stcg(L + i, pp);
            p = pp;
            pp = __ldcg(L + p);
        }
        flag[i] = p == i;
    }
}

/* ---------------------------------------------------------------- component kernels */

/* The table entry of every root (id = the exclusive prefix of the root flags); the number of
 * components into count[0]. */
__global__ void lab_roots_kernel(const int32_t *L, const int32_t *cid, sw_find_comp *comps,
                                 unsigned long long *peak, unsigned long long *count, int32_t n,
                                 int64_t dcap)
{
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int is_root = L[i] == i;
        if (i == n - 1)
            count[0] = (unsigned long long)cid[i] + (unsigned long long)is_root;
        if (!is_root)
            continue;
        const int32_t k = cid[i];
        if (k >= dcap)
            continue;
        sw_find_comp *c = &comps[k];
        c->root = i;
        c->sum_i = c->sum_ix = c->sum_iy = c->sum_ixx = c->sum_iyy = 0.0;
        c->npix = 0;
        c->x0 = c->y0 = INT_MAX;
        c->x1 = c->y1 = INT_MIN;
        c->peak = 0;
        c->peak_x = c->peak_y = -1;
        peak[k] = 0;
    }
}

struct lab_acc {
    double s, sx, sy, sxx, syy;
    unsigned long long npix, peak;
    int32_t x0, x1;
};

__device__ __forceinline__ void lab_flush(const lab_acc &a, int32_t root, int32_t y,
                                          const int32_t *cid, sw_find_comp *comps,
                                          unsigned long long *peak, int64_t dcap)
{
    const int32_t k = cid[root];
    if (k >= dcap)
        return;
    sw_find_comp *c = &comps[k];
    atomicAdd(&c->sum_i, a.s);
    atomicAdd(&c->sum_ix, a.sx);
    atomicAdd(&c->sum_iy, a.sy);
    atomicAdd(&c->sum_ixx, a.sxx);
    atomicAdd(&c->sum_iyy, a.syy);
    atomicAdd(reinterpret_cast<unsigned long long *>(&c->npix), a.npix);
    atomicMin(&c->x0, a.x0);
    atomicMax(&c->x1, a.x1);
    atomicMin(&c->y0, y);
    atomicMax(&c->y1, y + 1);
    atomicMax(&peak[k], a.peak);
}

/* Thread (tx, y) sums pixels [tx * LAB_SEG, tx * LAB_SEG + LAB_SEG) of row y, one flush per run
 * of one component. I, dx, dy and the products as find_label.c forms them. */
__global__ void lab_moments_kernel(const char *img, size_t stride, sw_pixel_type type,
                                   double overload, const int32_t *L, const int32_t *cid,
                                   sw_find_comp *comps, unsigned long long *peak, int32_t w,
                                   int32_t h, int64_t dcap)
{
    const int32_t tx = blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t y = blockIdx.y * blockDim.y + threadIdx.y;
    const int32_t xa = tx * LAB_SEG;
    if (xa >= w || y >= h)
        return;
    const int32_t xb = xa + LAB_SEG < w ? xa + LAB_SEG : w;
    const char *row = img + (size_t)y * stride;
    const int32_t base = y * w;
    int32_t cur = -1, rx = 0, ry = 0;
    lab_acc a;
    a.s = a.sx = a.sy = a.sxx = a.syy = 0.0;
    a.npix = a.peak = 0;
    a.x0 = a.x1 = 0;
    for (int32_t x = xa; x < xb; ++x) {
        const int32_t i = base + x;
        const int32_t r = L[i];
        if (r < 0)
            continue;
        if (r != cur) {
            if (cur >= 0)
                lab_flush(a, cur, y, cid, comps, peak, dcap);
            cur = r;
            rx = r % w;
            ry = r / w;
            a.s = a.sx = a.sy = a.sxx = a.syy = 0.0;
            a.npix = a.peak = 0;
            a.x0 = x;
        }
        int valid;
        const uint32_t v = sw_fm_value(row, x, type, overload, &valid);
        const double I = (double)v, dx = (double)(x - rx), dy = (double)(y - ry);
        const double ix = __dmul_rn(I, dx), iy = __dmul_rn(I, dy);
        a.s = __dadd_rn(a.s, I);
        a.sx = __dadd_rn(a.sx, ix);
        a.sy = __dadd_rn(a.sy, iy);
        a.sxx = __dadd_rn(a.sxx, __dmul_rn(ix, dx));
        a.syy = __dadd_rn(a.syy, __dmul_rn(iy, dy));
        a.npix++;
        a.x1 = x + 1;
        const unsigned long long pk =
            (unsigned long long)v << 32 | (unsigned long long)(0xffffffffu - (uint32_t)i);
        if (pk > a.peak)
            a.peak = pk;
    }
    if (cur >= 0)
        lab_flush(a, cur, y, cid, comps, peak, dcap);
}

/* The peaks of components [0, min(count[0], dcap)) unpacked into the table. */
__global__ void lab_peaks_kernel(sw_find_comp *comps, const unsigned long long *peak,
                                 const unsigned long long *count, int64_t dcap, int32_t w)
{
    const unsigned long long m =
        count[0] < (unsigned long long)dcap ? count[0] : (unsigned long long)dcap;
    for (unsigned long long k = blockIdx.x * blockDim.x + threadIdx.x; k < m;
         k += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned long long p = peak[k];
        const uint32_t idx = 0xffffffffu - (uint32_t)(p & 0xffffffffull);
        comps[k].peak = (uint32_t)(p >> 32);
        comps[k].peak_x = (int32_t)(idx % (uint32_t)w);
        comps[k].peak_y = (int32_t)(idx / (uint32_t)w);
    }
}

/* ---------------------------------------------------------------- link kernels */

__global__ void lab_links_kernel(const int32_t *prev, const int32_t *cur, unsigned long long *keys,
                                 unsigned long long *count, int32_t w, int32_t h, int64_t lcap)
{
    const int32_t x = blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const int32_t i = y * w + x;
    const int32_t a = prev[i], b = cur[i];
    if (a < 0 || b < 0)
        return;
    if (x > 0 && prev[i - 1] == a && cur[i - 1] == b)
        return;
    if (y > 0 && prev[i - w] == a && cur[i - w] == b)
        return;
    const unsigned long long k = atomicAdd(count, 1ull);
    if (k < (unsigned long long)lcap)
        keys[k] = (unsigned long long)(uint32_t)a << 32 | (uint32_t)b;
}

/* Keys [0, *count) into (prev, cur) int32 pairs, in place. */
__global__ void lab_split_kernel(unsigned long long *keys, const unsigned long long *count)
{
    const unsigned long long m = *count;
    for (unsigned long long k = blockIdx.x * blockDim.x + threadIdx.x; k < m;
         k += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned long long key = keys[k];
        reinterpret_cast<int2 *>(keys)[k] =
            make_int2((int32_t)(key >> 32), (int32_t)(uint32_t)(key & 0xffffffffull));
    }
}

dim3 grid2(int32_t nx, int32_t ny, dim3 block)
{
    return dim3((unsigned)((nx + (int32_t)block.x - 1) / (int32_t)block.x),
                (unsigned)((ny + (int32_t)block.y - 1) / (int32_t)block.y));
}

/* A 1-D grid-stride launch: enough blocks of 256 to fill the device a few times over. */
unsigned grid1(const sw_find_plan *plan, int64_t n)
{
    int64_t b = (n + 255) / 256;
    int64_t most = 8 * (int64_t)(plan->ctx->multiprocessors > 0 ? plan->ctx->multiprocessors : 32);
    if (b > most)
        b = most;
    return (unsigned)(b > 0 ? b : 1);
}

/* The CUB temporary storage the three device-wide steps need for n pixels / m link keys. */
cudaError_t temp_needed(int32_t n, int64_t m, unsigned long long *ka, unsigned long long *kb,
                        unsigned long long *cnt, int32_t *cid, size_t *bytes)
{
    size_t scan = 0, sort = 0, uniq = 0;
    cudaError_t e = cub::DeviceScan::ExclusiveSum(nullptr, scan, cid, cid, n);
    if (e != cudaSuccess)
        return e;
    if (m > 0) {
        cub::DoubleBuffer<unsigned long long> db(ka, kb);
        e = cub::DeviceRadixSort::SortKeys(nullptr, sort, db, (int64_t)m, 0, 63);
        if (e != cudaSuccess)
            return e;
        e = cub::DeviceSelect::Unique(nullptr, uniq, kb, ka, cnt, (int64_t)m);
        if (e != cudaSuccess)
            return e;
    }
    size_t b = scan > sort ? scan : sort;
    *bytes = b > uniq ? b : uniq;
    return cudaSuccess;
}

} // namespace

/* ---------------------------------------------------------------- the API */

extern "C" void sw_find_label_gpu_free(sw_find_plan *plan)
{
    lab_gpu *g = lab_of(plan);
    if (!g)
        return;
    cudaFree(g->cid);
    cudaFree(g->keys_b);
    cudaFree(g->comps);
    cudaFree(g->peak);
    cudaFree(g->count);
    cudaFreeHost(g->h_count);
    cudaFree(g->temp);
    delete g;
    plan->lab_gpu = nullptr;
}

extern "C" sw_status sw_find_label_gpu_init(sw_find_plan *plan)
{
    const int64_t n = plan->npix;
    if (n <= 0 || n > SW_IMAGE_MAX_PIXELS)
        return sw_fail(plan->ctx, SW_EINVAL, "find: %lld pixels cannot be labelled", (long long)n);
    lab_gpu *g = new (std::nothrow) lab_gpu();
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory for labelling");
    plan->lab_gpu = g;
    g->lcap = (int64_t)plan->height * (((int64_t)plan->width + 1) / 2);
    g->dcap = plan->p.max_components;
    size_t cid_bytes = (size_t)n * sizeof(int32_t);
    if ((size_t)g->lcap * sizeof(unsigned long long) > cid_bytes)
        cid_bytes = (size_t)g->lcap * sizeof(unsigned long long);
    SW_CU(cudaMalloc(&g->cid, cid_bytes));
    SW_CU(cudaMalloc(&g->keys_b, (size_t)g->lcap * sizeof(unsigned long long)));
    SW_CU(cudaMalloc(&g->comps, (size_t)g->dcap * sizeof(sw_find_comp)));
    SW_CU(cudaMalloc(&g->peak, (size_t)g->dcap * sizeof(unsigned long long)));
    SW_CU(cudaMalloc(&g->count, 4 * sizeof(unsigned long long)));
    SW_CU(cudaHostAlloc(&g->h_count, 4 * sizeof(unsigned long long), cudaHostAllocDefault));
    SW_CU(temp_needed((int32_t)n, g->lcap, reinterpret_cast<unsigned long long *>(g->cid),
                      g->keys_b, g->count, g->cid, &g->temp_bytes));
    SW_CU(cudaMalloc(&g->temp, g->temp_bytes > 0 ? g->temp_bytes : 1));
    return SW_OK;
}

extern "C" sw_status sw_find_label_gpu(sw_find_plan *plan, const uint8_t *d_strong,
                                       const sw_image *frame, int32_t *d_labels,
                                       sw_find_comp *comps, int64_t capacity, int64_t *ncomp,
                                       void *stream)
{
    lab_gpu *g = plan ? lab_of(plan) : nullptr;
    if (!g || !d_strong || !frame || !d_labels || !ncomp || (capacity > 0 && !comps))
        return sw_fail(plan ? plan->ctx : nullptr, SW_EINVAL, "find: labelling: NULL argument");
    if (frame->width != plan->width || frame->height != plan->height ||
        frame->type != plan->p.type || frame->memory != SW_MEM_DEVICE || !frame->data)
        return sw_fail(plan->ctx, SW_EINVAL, "find: labelling needs a device %s frame of %d x %d",
                       sw_pixel_type_string(plan->p.type), plan->width, plan->height);
    *ncomp = 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int32_t w = plan->width, h = plan->height, n = (int32_t)plan->npix;
    const int conn8 = plan->p.connectivity == 8;
    const dim3 b2(LAB_BX, LAB_BY), g2 = grid2(w, h, b2);

    lab_init_kernel<<<g2, b2, 0, s>>>(d_strong, d_labels, w, h, conn8);
    SW_CU(cudaGetLastError());
    lab_merge_kernel<<<g2, b2, 0, s>>>(d_strong, d_labels, w, h, conn8);
    SW_CU(cudaGetLastError());
    lab_compress_kernel<<<grid1(plan, n), 256, 0, s>>>(d_labels, g->cid, n);
    SW_CU(cudaGetLastError());
    size_t bytes = g->temp_bytes;
    SW_CU(cub::DeviceScan::ExclusiveSum(g->temp, bytes, g->cid, g->cid, n, s));
    lab_roots_kernel<<<grid1(plan, n), 256, 0, s>>>(d_labels, g->cid, g->comps, g->peak, g->count,
                                                    n, g->dcap);
    SW_CU(cudaGetLastError());
    const dim3 bm(LAB_MX, LAB_MY), gm = grid2((w + LAB_SEG - 1) / LAB_SEG, h, bm);
    lab_moments_kernel<<<gm, bm, 0, s>>>(static_cast<const char *>(frame->data), frame->stride,
                                         plan->p.type, plan->overload, d_labels, g->cid, g->comps,
                                         g->peak, w, h, g->dcap);
    SW_CU(cudaGetLastError());
    lab_peaks_kernel<<<grid1(plan, g->dcap), 256, 0, s>>>(g->comps, g->peak, g->count, g->dcap, w);
    SW_CU(cudaGetLastError());
    SW_CU(cudaMemcpyAsync(g->h_count, g->count, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                          s));
    SW_CU(cudaStreamSynchronize(s));
    const int64_t m = (int64_t)g->h_count[0];
    if (m > capacity || m > g->dcap)
        return sw_fail(plan->ctx, SW_ERANGE,
                       "find: the frame has %lld connected components, more than the %lld the "
                       "component table holds (raise max_components, or check the threshold "
                       "parameters)",
                       (long long)m, (long long)(capacity < g->dcap ? capacity : g->dcap));
    if (m > 0) {
        SW_CU(cudaMemcpyAsync(comps, g->comps, (size_t)m * sizeof(sw_find_comp),
                              cudaMemcpyDeviceToHost, s));
        SW_CU(cudaStreamSynchronize(s));
    }
    *ncomp = m;
    return SW_OK;
}

extern "C" sw_status sw_find_links_gpu(sw_find_plan *plan, const int32_t *d_labels_prev,
                                       const int32_t *d_labels_cur, int32_t *pairs,
                                       int64_t capacity, int64_t *npairs, void *stream)
{
    lab_gpu *g = plan ? lab_of(plan) : nullptr;
    if (!g || !d_labels_prev || !d_labels_cur || !npairs || (capacity > 0 && !pairs))
        return sw_fail(plan ? plan->ctx : nullptr, SW_EINVAL, "find: links: NULL argument");
    *npairs = 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int32_t w = plan->width, h = plan->height;
    unsigned long long *ka = reinterpret_cast<unsigned long long *>(g->cid), *kb = g->keys_b;

    SW_CU(cudaMemsetAsync(g->count + 1, 0, 2 * sizeof(unsigned long long), s));
    const dim3 b2(LAB_BX, LAB_BY), g2 = grid2(w, h, b2);
    lab_links_kernel<<<g2, b2, 0, s>>>(d_labels_prev, d_labels_cur, ka, g->count + 1, w, h,
                                       g->lcap);
    SW_CU(cudaGetLastError());
    SW_CU(cudaMemcpyAsync(g->h_count + 1, g->count + 1, sizeof(unsigned long long),
                          cudaMemcpyDeviceToHost, s));
    SW_CU(cudaStreamSynchronize(s));
    const int64_t m = (int64_t)g->h_count[1];
    if (m > g->lcap)
        return sw_fail(plan->ctx, SW_EINTERNAL,
                       "find: links: %lld candidates, more than the bound %lld (a bug)",
                       (long long)m, (long long)g->lcap);
    if (m == 0)
        return SW_OK;
    size_t need = 0;
    SW_CU(temp_needed((int32_t)plan->npix, m, ka, kb, g->count + 2, g->cid, &need));
    if (need > g->temp_bytes)
        return sw_fail(plan->ctx, SW_EINTERNAL,
                       "find: links: CUB needs %zu bytes of temporary storage, %zu were sized at "
                       "create (a bug)",
                       need, g->temp_bytes);
    size_t bytes = g->temp_bytes;
    /* keys < 2^63 (both roots < 2^31): bits [0, 63); the double-buffer form needs no room for a
     * copy of the keys in the temporary storage */
    cub::DoubleBuffer<unsigned long long> db(ka, kb);
    SW_CU(cub::DeviceRadixSort::SortKeys(g->temp, bytes, db, (int64_t)m, 0, 63, s));
    unsigned long long *sorted = db.Current(), *out = db.Alternate();
    bytes = g->temp_bytes;
    SW_CU(cub::DeviceSelect::Unique(g->temp, bytes, sorted, out, g->count + 2, m, s));
    lab_split_kernel<<<grid1(plan, m), 256, 0, s>>>(out, g->count + 2);
    SW_CU(cudaGetLastError());
    SW_CU(cudaMemcpyAsync(g->h_count + 2, g->count + 2, sizeof(unsigned long long),
                          cudaMemcpyDeviceToHost, s));
    SW_CU(cudaStreamSynchronize(s));
    const int64_t u = (int64_t)g->h_count[2];
    if (u > capacity)
        return sw_fail(plan->ctx, SW_ERANGE,
                       "find: %lld links between consecutive frames, more than the %lld the link "
                       "table holds (raise max_components)",
                       (long long)u, (long long)capacity);
    SW_CU(cudaMemcpyAsync(pairs, out, (size_t)u * 2 * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    SW_CU(cudaStreamSynchronize(s));
    *npairs = u;
    return SW_OK;
}
