/*
 * The real-time chain over several GPUs of one node (loop.h, sw_rtc_multi_*), through NCCL, the
 * NVIDIA Collective Communications Library. Compiled only when CUDA and NCCL are both found
 * (SW_HAVE_NCCL); rtc_multi.c has the entry points of the other builds.
 *
 * One process, one thread drives N GPUs: one communicator per GPU from ncclCommInitAll, kept for
 * the plan's life, one stream per GPU (GPU 0's is the context's stream, on which the centroid plan
 * queues its kernel). Every NCCL call of a frame sits in one ncclGroupStart / ncclGroupEnd over
 * all GPUs, as NCCL requires of a thread that drives several devices. A frame:
 *   GPU 0:  frame copy -> centroid stage (sw_centroid_run, DEVICE path, as rtc_cuda.cu) -> slopes
 *   all:    ncclBroadcast(slopes, 2 ns floats, root 0)
 *   GPU i:  u_i = clip(keep u_i + g C_i s) over its rows row0_i .. row0_i + rows_i - 1 (the same
 *           cuBLAS sgemv call as rtc_cuda.cu, or its FP16 kernel through sw_rtc_gpu_gemv_half)
 *   all:    GPU i > 0 ncclSend(u_i) to 0, GPU 0 ncclRecv into ucat + row0_i (one group)
 *   GPU 0:  ucat -> pinned host commands
 * GPU 0's state u_0 is the first rows_0 floats of ucat itself (no copy).
 * Split by columns, each GPU centroids its own share and GPU i computes the partial commands
 * r_i = C[:, its slopes] s_i, which ncclReduce sums into GPU 0 for the update. The shares are
 * "parts" (rm_part): a centroid plan, its rows of a frame copied to its GPU, and where its x and
 * y blocks sit in its GPU's slopes and in the plan's slope vector (the columns of C). One frame
 * split by columns has a band of lenslet rows per GPU; several wavefront sensors
 * (sw_rtc_multi_create_wfs) have one part per sensor, its whole frame, sensor k on GPU k mod N;
 * the rows have one part, the whole frame on GPU 0. Every stage loops over parts or GPUs, so the
 * three run through the same code.
 *
 * Graphs. After one plain pass (which makes NCCL connect its peers: NCCL's documentation asks for
 * a point-to-point call before a captured one) the frame's work after the frame copy is captured
 * from GPU 0's stream into one CUDA graph: an event recorded on stream 0 forks the other streams
 * into the capture, and events recorded on them join them back before the commands' copy. One
 * graph over all the GPUs, launched by one cudaGraphLaunch: NCCL documents that one thread
 * launching one graph per GPU may deadlock (a cudaGraphLaunch that blocks before the others are
 * made). A capture or an instantiation that fails leaves the plan on plain launches.
 */
#ifdef SW_HAVE_NCCL

#include "core/core_internal.h"
#include "loop/loop_internal.h"
#include "core/cuda_util.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SW_CUDA_CTX   r->ctx
#define SW_CUDA_STAGE "rtc_multi"

#define RM_MAX_GPUS     SW_RTC_MULTI_MAX_GPUS
#define RM_MAX_PARTS    SW_RTC_MULTI_MAX_WFS /* >= RM_MAX_GPUS */
#define RM_BLAS_WS      ((size_t)4 << 20)
#define RM_MAX_ELEMENTS ((int64_t)1 << 31) /* as rtc.c: entries of the whole control matrix */
#define RM_FP16_MAX     65504.0

/* One centroid plan's share of the slopes, a "part": rows, the whole frame (on GPU 0); columns,
 * a band of whole lenslet rows of the frame (one per GPU). Its slopes are an x block and a y
 * block of m slopes each, side by side in its GPU's slope vector (at off and off + m), and at
 * cx and cy in the plan's slope vector, whose entries index the columns of C. */
typedef struct rm_part {
    int gpu;                 /* the GPU (index into gpu[]) that centroids it */
    int src;                 /* the frame it takes (index into the run's frames) */
    sw_centroid_plan *cent;  /* on its GPU's context */
    sw_image frame;          /* its buffer of the frame's rows py0 .. py0 + height - 1 */
    sw_centroid_result cres; /* device result: the slopes only, into its GPU's slopes + off */
    int32_t py0, height;     /* the frame rows it takes */
    int32_t lenslets;        /* its plan's nx ny */
    int32_t m;               /* its slopes per axis */
    int32_t off;             /* its x block in its GPU's slopes (the y block at off + m) */
    int32_t cx, cy;          /* its x and y blocks in the plan's slope vector */
    int32_t band0, nband;    /* columns: the band's first lenslet row and its rows */
} rm_part;

/* One GPU's share. */
typedef struct rm_gpu {
    int dev;
    cudaStream_t s;  /* GPU 0: the context's stream; columns: this GPU's context's */
    int own_stream;  /* rows, GPU i > 0: the plan's own stream */
    sw_context *ctx; /* the context of this GPU's centroid plans (GPU 0: the plan's; columns,
                        GPU i > 0: owned) */
    ncclComm_t comm;
    cublasHandle_t blas;
    void *blas_ws;
    int32_t p0, np; /* its parts, part[p0 .. p0 + np - 1] (rows: GPU 0 the only one) */
    int32_t cols,
        ldh;       /* the matrix's columns (rows: 2 ns; else 2 m over its parts), FP16 row length */
    float *slopes; /* ldh floats, zeros past cols (the FP16 kernel's vector loads) */
    float *W;      /* FP32: rows x cols row-major */
    __half *Wh;    /* FP16: rows x ldh, zero padded */
    float *u;      /* rows: its commands and the controller's state (GPU 0: ucat's first rows) */
    float *r;      /* columns: nact partial commands (GPU 0: the reduction's sum) */
    int32_t row0, rows; /* the matrix's rows (columns: all nact) */
    cudaEvent_t join;   /* capture: this stream joined back to GPU 0's */
    cudaEvent_t copied; /* columns: its frame rows copied (GPU 0 waits for them) */
    cudaEvent_t t0, t1; /* profile */
} rm_gpu;

/* The frames a run takes: their size and type. */
typedef struct rm_src {
    int32_t width, height;
    sw_pixel_type type;
} rm_src;

struct sw_rtc_multi {
    sw_context *ctx;
    int32_t ndev, ns, n2, nact;
    int fp16, split;
    int32_t nwfs;           /* sensors (sw_rtc_multi_create_wfs), 0: one frame */
    int32_t nsrc;           /* frames per run (nwfs, or 1) */
    int32_t npart;          /* parts made (part[0 .. npart - 1]) */
    float *ucat;            /* GPU 0: nact commands */
    float *commands;        /* pinned host, nact */
    float gain, keep, clip; /* the controller, as rtc_cuda.cu reads it from controller.c */
    int use_graph;
    cudaEvent_t fork;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    int64_t frames;
    double last_us;
    rm_gpu gpu[RM_MAX_GPUS];
    rm_part part[RM_MAX_PARTS];
    rm_src src[RM_MAX_PARTS];
};

/* ================================================================== checks */

/* An NCCL failure: SW_ECUDA with NCCL's text and, when it has one, its last message. */
static sw_status rm_nccl_fail(sw_context *ctx, const char *call, ncclResult_t e, ncclComm_t comm)
{
    const char *last = ncclGetLastError(comm);
    return sw_fail(ctx, SW_ECUDA, "rtc_multi: NCCL call %s failed: %s%s%s", call,
                   ncclGetErrorString(e), last && *last ? ": " : "", last ? last : "");
}

#define SW_NCCL(call, comm)                                                                        \
    do {                                                                                           \
        const ncclResult_t e_ = (call);                                                            \
        if (e_ != ncclSuccess)                                                                     \
            return rm_nccl_fail(r->ctx, #call, e_, (comm));                                        \
    } while (0)

static double rm_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

/* ================================================================== the frame's stages */

/* The frames into the parts' buffers (host, pinned or device memory; cudaMemcpyDefault: unified
 * addressing tells the direction): each part's rows of its frame on its GPU's stream (rows: the
 * whole frame to GPU 0), and with a graph GPU 0's stream waits for the other GPUs' copies
 * (`wait`). */
static sw_status rm_copy_frames(sw_rtc_multi *r, const sw_image *const *frames, int wait)
{
    for (int i = r->ndev - 1; i >= 0;
         i--) { /* GPU 0's last: its stream then waits for the others */
        rm_gpu *g = &r->gpu[i];
        if (g->np == 0)
            continue;
        SW_CU(cudaSetDevice(g->dev));
        for (int32_t j = g->p0; j < g->p0 + g->np; j++) {
            const rm_part *q = &r->part[j];
            const sw_image *f = frames[q->src];
            const size_t row = (size_t)f->width * sw_pixel_size(f->type);
            const char *src = (const char *)f->data + (size_t)q->py0 * f->stride;
            SW_CU(cudaMemcpy2DAsync(q->frame.data, q->frame.stride, src, f->stride, row,
                                    (size_t)q->height, cudaMemcpyDefault, g->s));
        }
        if (i > 0 && wait)
            SW_CU(cudaEventRecord(g->copied, g->s));
    }
    if (wait)
        for (int i = 1; i < r->ndev; i++)
            if (r->gpu[i].np > 0)
                SW_CU(cudaStreamWaitEvent(r->gpu[0].s, r->gpu[i].copied, 0));
    return SW_OK;
}

/* The centroid stage, part by part (sw_centroid_run queues its kernel on the plan's context's
 * stream, which is its GPU's stream here). A failure on another GPU's context is reported on the
 * plan's. */
static sw_status rm_centroid(sw_rtc_multi *r)
{
    for (int32_t j = 0; j < r->npart; j++) {
        rm_part *q = &r->part[j];
        const rm_gpu *g = &r->gpu[q->gpu];
        SW_CU(cudaSetDevice(g->dev));
        const sw_status st = sw_centroid_run(q->cent, &q->frame, &q->cres);
        if (st != SW_OK)
            return g->ctx == r->ctx ? st
                                    : sw_error_set(r->ctx, st, "rtc_multi: GPU %d: %s", g->dev,
                                                   sw_context_error(g->ctx));
    }
    return SW_OK;
}

/* Rows: the slopes from GPU 0 to all, one ncclBroadcast per communicator in one group (the group
 * is always ended, also after a failed call inside it). */
static sw_status rm_bcast(sw_rtc_multi *r)
{
    if (r->ndev < 2 || r->split == SW_RTC_MULTI_COLUMNS)
        return SW_OK;
    SW_NCCL(ncclGroupStart(), NULL);
    ncclResult_t e = ncclSuccess;
    int bad = 0;
    for (int i = 0; i < r->ndev && e == ncclSuccess; i++) {
        rm_gpu *g = &r->gpu[i];
        e = ncclBroadcast(g->slopes, g->slopes, (size_t)r->n2, ncclFloat, 0, g->comm, g->s);
        bad = i;
    }
    const ncclResult_t e2 = ncclGroupEnd();
    if (e != ncclSuccess)
        return rm_nccl_fail(r->ctx, "ncclBroadcast (slopes)", e, r->gpu[bad].comm);
    if (e2 != ncclSuccess)
        return rm_nccl_fail(r->ctx, "ncclGroupEnd (slopes' broadcast)", e2, r->gpu[0].comm);
    return SW_OK;
}

/* GPU i's matrix product. Rows: its commands u_i = clip(keep u_i + g C_i s), as rtc_cuda.cu's
 * rt_matrix with the update. Columns: its partial commands r_i = C[:, band i] s_i. */
static sw_status rm_mvm(sw_rtc_multi *r, int i)
{
    rm_gpu *g = &r->gpu[i];
    SW_CU(cudaSetDevice(g->dev));
    const int rows = r->split == SW_RTC_MULTI_ROWS;
    float *y = rows ? g->u : g->r;
    if (r->fp16) {
        SW_CU((cudaError_t)sw_rtc_gpu_gemv_half(g->Wh, g->rows, g->ldh, g->slopes, y, rows, r->gain,
                                                r->keep, r->clip, g->s));
        return SW_OK;
    }
    /* W row-major rows x cols = column-major cols x rows: y = alpha W^T_cm s + beta y */
    const float one = 1.0f, zero = 0.0f;
    SW_CUBLAS(cublasSgemv(g->blas, CUBLAS_OP_T, g->cols, g->rows, rows ? &r->gain : &one, g->W,
                          g->cols, g->slopes, 1, rows ? &r->keep : &zero, y, 1));
    if (rows && r->clip > 0.0f)
        SW_CU((cudaError_t)sw_rtc_gpu_clip(g->u, g->rows, r->clip, g->s));
    return SW_OK;
}

/* Rows: the command slices to GPU 0, ncclSend on GPU i, ncclRecv on GPU 0 into ucat + row0_i,
 * one group (a gather made of point-to-point calls). Columns: the partial commands summed into
 * GPU 0's r (ncclReduce, one group), then the controller's update there. */
static sw_status rm_gather(sw_rtc_multi *r)
{
    rm_gpu *g0 = &r->gpu[0];
    const int cols = r->split == SW_RTC_MULTI_COLUMNS;
    if (r->ndev > 1) {
        SW_NCCL(ncclGroupStart(), NULL);
        ncclResult_t e = ncclSuccess;
        int bad = 0;
        const char *what = cols ? "ncclReduce (partial commands)" : "ncclSend (commands)";
        if (cols) {
            for (int i = 0; i < r->ndev && e == ncclSuccess; i++) {
                rm_gpu *g = &r->gpu[i];
                bad = i;
                e = ncclReduce(g->r, g->r, (size_t)r->nact, ncclFloat, ncclSum, 0, g->comm, g->s);
            }
        } else {
            for (int i = 1; i < r->ndev && e == ncclSuccess; i++) {
                rm_gpu *g = &r->gpu[i];
                bad = i;
                what = "ncclSend (commands)";
                e = ncclSend(g->u, (size_t)g->rows, ncclFloat, 0, g->comm, g->s);
                if (e == ncclSuccess) {
                    what = "ncclRecv (commands)";
                    bad = 0;
                    e = ncclRecv(r->ucat + g->row0, (size_t)g->rows, ncclFloat, i, g0->comm, g0->s);
                }
            }
        }
        const ncclResult_t e2 = ncclGroupEnd();
        if (e != ncclSuccess)
            return rm_nccl_fail(r->ctx, what, e, r->gpu[bad].comm);
        if (e2 != ncclSuccess)
            return rm_nccl_fail(r->ctx,
                                cols ? "ncclGroupEnd (the commands' reduction)"
                                     : "ncclGroupEnd (the commands' gather)",
                                e2, g0->comm);
    }
    if (cols) {
        SW_CU(cudaSetDevice(g0->dev));
        SW_CU((cudaError_t)sw_rtc_gpu_update(r->ucat, g0->r, r->nact, r->gain, r->keep, r->clip,
                                             g0->s));
    }
    return SW_OK;
}

static sw_status rm_copy_commands(sw_rtc_multi *r)
{
    SW_CU(cudaSetDevice(r->gpu[0].dev));
    SW_CU(cudaMemcpyAsync(r->commands, r->ucat, (size_t)r->nact * sizeof(float),
                          cudaMemcpyDeviceToHost, r->gpu[0].s));
    return SW_OK;
}

/* Everything after the frame's copy, in order (the graph's body). */
static sw_status rm_enqueue(sw_rtc_multi *r)
{
    SW_TRY(rm_centroid(r));
    SW_TRY(rm_bcast(r));
    for (int i = 0; i < r->ndev; i++)
        SW_TRY(rm_mvm(r, i));
    SW_TRY(rm_gather(r));
    return rm_copy_commands(r);
}

static sw_status rm_sync_all(sw_rtc_multi *r)
{
    for (int i = 0; i < r->ndev; i++) {
        SW_CU(cudaSetDevice(r->gpu[i].dev));
        SW_CU(cudaStreamSynchronize(r->gpu[i].s));
    }
    SW_CU(cudaSetDevice(r->gpu[0].dev));
    return SW_OK;
}

/* The controller's state to 0: the commands (ucat; rows: each GPU's slice). */
static sw_status rm_zero_state(sw_rtc_multi *r)
{
    for (int i = 0; i < r->ndev; i++) {
        rm_gpu *g = &r->gpu[i];
        SW_CU(cudaSetDevice(g->dev));
        if (i == 0)
            SW_CU(cudaMemsetAsync(r->ucat, 0, (size_t)r->nact * sizeof(float), g->s));
        else if (r->split == SW_RTC_MULTI_ROWS)
            SW_CU(cudaMemsetAsync(g->u, 0, (size_t)g->rows * sizeof(float), g->s));
    }
    SW_TRY(rm_sync_all(r));
    memset(r->commands, 0, (size_t)r->nact * sizeof(float));
    return SW_OK;
}

/* One graph over all GPUs: fork the other streams from GPU 0's, the body, join them back. The
 * joins are queued whatever failed before them, so that the capture can end. */
static sw_status rm_capture(sw_rtc_multi *r)
{
    rm_gpu *g0 = &r->gpu[0];
    SW_CU(cudaSetDevice(g0->dev));
    SW_CU(cudaStreamBeginCapture(g0->s, cudaStreamCaptureModeThreadLocal));
    cudaError_t ce = cudaEventRecord(r->fork, g0->s);
    for (int i = 1; i < r->ndev && ce == cudaSuccess; i++) {
        ce = cudaSetDevice(r->gpu[i].dev);
        if (ce == cudaSuccess)
            ce = cudaStreamWaitEvent(r->gpu[i].s, r->fork, 0);
    }
    sw_status st =
        ce == cudaSuccess
            ? rm_enqueue(r)
            : sw_cuda_fail_call(r->ctx, SW_CUDA_STAGE, "forking the streams into the capture", ce);
    for (int i = 1; i < r->ndev; i++) {
        rm_gpu *g = &r->gpu[i];
        cudaSetDevice(g->dev);
        const cudaError_t e1 = cudaEventRecord(g->join, g->s);
        cudaSetDevice(g0->dev);
        const cudaError_t e2 = cudaStreamWaitEvent(g0->s, g->join, 0);
        if (ce == cudaSuccess)
            ce = e1 != cudaSuccess ? e1 : e2;
    }
    cudaSetDevice(g0->dev);
    cudaGraph_t graph = NULL;
    const cudaError_t ee = cudaStreamEndCapture(g0->s, &graph);
    if (st == SW_OK && (ce != cudaSuccess || ee != cudaSuccess))
        st = sw_fail(r->ctx, SW_ECUDA, "rtc_multi: capturing the graph over %d GPUs failed: %s",
                     (int)r->ndev, cudaGetErrorString(ce != cudaSuccess ? ce : ee));
    if (st == SW_OK) {
        const cudaError_t ei = cudaGraphInstantiate(&r->exec, graph, 0);
        if (ei != cudaSuccess) {
            r->exec = NULL;
            st = sw_fail(r->ctx, SW_ECUDA,
                         "rtc_multi: instantiating the graph over %d GPUs failed: %s", (int)r->ndev,
                         cudaGetErrorString(ei));
        }
    }
    if (st == SW_OK) {
        r->graph = graph;
        const cudaError_t eu = cudaGraphUpload(r->exec, g0->s);
        if (eu != cudaSuccess) {
            st = sw_fail(r->ctx, SW_ECUDA, "rtc_multi: uploading the graph failed: %s",
                         cudaGetErrorString(eu));
            cudaGraphExecDestroy(r->exec);
            cudaGraphDestroy(r->graph);
            r->exec = NULL;
            r->graph = NULL;
        }
    } else if (graph) {
        cudaGraphDestroy(graph);
    }
    for (int i = 0; i < r->ndev; i++) { /* clear the sticky-free errors the failure left */
        cudaSetDevice(r->gpu[i].dev);
        cudaGetLastError();
    }
    cudaSetDevice(g0->dev);
    return st;
}

/* ================================================================== create / destroy */

extern "C" int sw_nccl_version(void)
{
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

extern "C" void sw_rtc_multi_destroy(sw_rtc_multi *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->ndev; i++) { /* nothing may still run */
        cudaSetDevice(r->gpu[i].dev);
        if (r->gpu[i].s)
            cudaStreamSynchronize(r->gpu[i].s);
    }
    if (r->ndev > 0)
        cudaSetDevice(r->gpu[0].dev);
    const int had_graph = r->exec || r->graph;
    if (r->exec)
        cudaGraphExecDestroy(r->exec);
    if (r->graph)
        cudaGraphDestroy(r->graph);
    if (had_graph) /* NCCL's resources held by the graph are released through CUDA user objects,
                      whose destructors may run after the calls above */
        for (int i = 0; i < r->ndev; i++) {
            cudaSetDevice(r->gpu[i].dev);
            cudaDeviceSynchronize();
        }
    /* the communicators: finalized together (one thread drives them all: a group), then freed */
    if (r->ndev > 1 && r->gpu[0].comm) {
        ncclGroupStart();
        for (int i = 0; i < r->ndev; i++)
            if (r->gpu[i].comm)
                ncclCommFinalize(r->gpu[i].comm);
        ncclGroupEnd();
    }
    for (int32_t j = 0; j < r->npart; j++) { /* before their GPUs' contexts */
        rm_part *q = &r->part[j];
        cudaSetDevice(r->gpu[q->gpu].dev);
        sw_centroid_destroy(q->cent);
        sw_image_free(&q->frame);
    }
    for (int i = 0; i < r->ndev; i++) {
        rm_gpu *g = &r->gpu[i];
        cudaSetDevice(g->dev);
        if (g->comm)
            ncclCommDestroy(g->comm);
        if (g->blas)
            cublasDestroy(g->blas);
        SW_CUDA_FREE(g->blas_ws, g->slopes, g->W, g->Wh, g->r, i > 0 ? g->u : NULL);
        if (g->join)
            cudaEventDestroy(g->join);
        if (g->copied)
            cudaEventDestroy(g->copied);
        if (g->t0)
            cudaEventDestroy(g->t0);
        if (g->t1)
            cudaEventDestroy(g->t1);
        if (g->own_stream && g->s)
            cudaStreamDestroy(g->s);
        if (g->ctx && g->ctx != r->ctx)
            sw_context_destroy(g->ctx); /* the columns' own contexts (and their streams) */
        cudaGetLastError();
    }
    if (r->ndev > 0)
        cudaSetDevice(r->gpu[0].dev);
    if (r->fork)
        cudaEventDestroy(r->fork);
    if (r->ucat)
        cudaFree(r->ucat);
    if (r->commands)
        sw_host_free(r->commands, 1);
    cudaGetLastError();
    cudaSetDevice(r->ctx->device);
    free(r);
}

/* The devices: given (checked) or the context's and the next ordinals. */
static sw_status rm_devices(sw_context *ctx, const sw_rtc_multi_params *m, int *devs)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return sw_fail(ctx, SW_ECUDA, "rtc_multi: cudaGetDeviceCount failed: %s",
                       cudaGetErrorString(e));
    if (m->ndevices > count)
        return sw_fail(ctx, SW_EINVAL, "rtc_multi: %d GPUs asked for, %d visible", m->ndevices,
                       count);
    for (int i = 0; i < m->ndevices; i++) {
        devs[i] = m->devices ? m->devices[i] : (ctx->device + i) % count;
        if (devs[i] < 0 || devs[i] >= count)
            return sw_fail(ctx, SW_EINVAL, "rtc_multi: device %d is not one of the %d visible",
                           devs[i], count);
        for (int k = 0; k < i; k++)
            if (devs[k] == devs[i])
                return sw_fail(ctx, SW_EINVAL, "rtc_multi: device %d is listed twice", devs[i]);
    }
    if (devs[0] != ctx->device)
        return sw_fail(ctx, SW_EINVAL,
                       "rtc_multi: devices[0] = %d must be the context's device (%d), which "
                       "centroids the frame and drives the mirror",
                       devs[0], ctx->device);
    return SW_OK;
}

/* The control matrix the GPUs get: the caller's, or a copy with the unseen-mode filter folded in
 * (rtc.c's W <- W - Z (Z^T W)); checked finite, and within FP16's range when asked. *copy is
 * the allocation to free (NULL when the caller's is used). */
static sw_status rm_matrix(sw_rtc_multi *r, const sw_rtc_params *p, const float **C, float **copy)
{
    const int64_t n = (int64_t)r->nact * r->n2;
    *copy = NULL;
    *C = p->cm;
    if (n > RM_MAX_ELEMENTS)
        return sw_fail(r->ctx, SW_EINVAL, "rtc_multi: the control matrix (%d x %d) is too large",
                       r->nact, r->n2);
    const int32_t nf = p->controller.nfilter;
    if (nf > 0) {
        const float *z = p->controller.filter;
        for (int64_t i = 0; i < (int64_t)r->nact * nf; i++)
            if (!isfinite(z[i]))
                return sw_fail(r->ctx, SW_EINVAL,
                               "rtc_multi: the controller's filter is not "
                               "finite");
        float *w = (float *)malloc((size_t)n * sizeof(float));
        if (!w)
            return sw_fail(r->ctx, SW_ENOMEM, "rtc_multi: out of memory (control matrix)");
        memcpy(w, p->cm, (size_t)n * sizeof(float));
        *copy = w;
        if (sw_loop_fold_filter(z, nf, r->nact, r->n2, w) != 0)
            return sw_fail(r->ctx, SW_ENOMEM, "rtc_multi: out of memory (filter)");
        *C = w;
    }
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double v = fabs((double)(*C)[i]);
        if (!(v <= 3.4e38)) /* NaN or infinite */
            return sw_fail(r->ctx, SW_EINVAL,
                           "rtc_multi: the control matrix (nact x 2 ns = %d x %d) has a "
                           "non-finite entry",
                           r->nact, r->n2);
        worst = v > worst ? v : worst;
    }
    if (r->fp16 && worst > RM_FP16_MAX)
        return sw_fail(r->ctx, SW_EINVAL,
                       "rtc_multi: the control matrix has entries up to %g, beyond FP16's 65504: "
                       "scale it (and the gain) or use fp16 = 0",
                       worst);
    return SW_OK;
}

static void CUDART_CB rm_sleep(void *ms)
{
    const long v = (long)(intptr_t)ms;
    struct timespec ts = {(time_t)(v / 1000), (v % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A test's probe of the uploads' order (SPOTWAVE_RTC_MULTI_POISON_MS = N, 1..1000; otherwise
 * nothing): before a share's copy, the GPU's stream waits N ms (a host function) and then fills
 * the destination with NaNs (every byte 0xFF). A copy queued on that stream after them overwrites
 * them; one that is not ordered after them lands first and is overwritten, and the commands come
 * out NaN, every time rather than under load. */
static cudaError_t rm_poison(cudaStream_t s, void *dst, size_t bytes)
{
    const char *env = getenv("SPOTWAVE_RTC_MULTI_POISON_MS");
    const long ms = env ? strtol(env, NULL, 10) : 0;
    if (ms < 1 || ms > 1000)
        return cudaSuccess;
    const cudaError_t e = cudaLaunchHostFunc(s, rm_sleep, (void *)(intptr_t)ms);
    return e != cudaSuccess ? e : cudaMemsetAsync(dst, 0xFF, bytes, s);
}

/* GPU i's share of C on the device, rows x cols row-major from the host block src (FP32, or FP16
 * rows of ldh through a float staging buffer). The copy is queued on the GPU's stream, which
 * converts and multiplies it: a cudaMemcpy (the legacy default stream) from pageable memory may
 * return before its DMA has landed (CUDA runtime API, "API synchronization behavior"), and the
 * plan's non-blocking streams do not wait for the legacy stream, so the conversion read a partly
 * copied matrix when other processes slowed the GPU (test_gpu_loop_rtc_multi, once, under ctest
 * -j 8). Waited for before returning: the caller frees src. */
static sw_status rm_upload(sw_rtc_multi *r, int i, const float *src)
{
    rm_gpu *g = &r->gpu[i];
    const size_t n = (size_t)g->rows * g->cols;
    if (!r->fp16) {
        SW_CU(sw_cuda_alloc(&g->W, n));
        SW_CU(rm_poison(g->s, g->W, n * sizeof(float)));
        SW_CU(cudaMemcpyAsync(g->W, src, n * sizeof(float), cudaMemcpyHostToDevice, g->s));
        SW_CU(cudaStreamSynchronize(g->s));
        return SW_OK;
    }
    float *tmp = NULL;
    SW_CU(sw_cuda_alloc(&g->Wh, (size_t)g->rows * g->ldh));
    SW_CU(sw_cuda_alloc(&tmp, n));
    cudaError_t e = rm_poison(g->s, tmp, n * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(tmp, src, n * sizeof(float), cudaMemcpyHostToDevice, g->s);
    if (e == cudaSuccess)
        e = (cudaError_t)sw_rtc_gpu_to_half(tmp, g->rows, g->cols, g->ldh, g->Wh, g->s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->s);
    cudaFree(tmp);
    SW_CU(e);
    return SW_OK;
}

/* GPU i's matrix: rows, its rows of C (a view); otherwise the columns of its parts' slopes, part
 * after part its x block's then its y block's, gathered into a host block (freed here). */
static sw_status rm_matrix_share(sw_rtc_multi *r, int i, const float *C)
{
    rm_gpu *g = &r->gpu[i];
    if (r->split == SW_RTC_MULTI_ROWS)
        return rm_upload(r, i, C + (int64_t)g->row0 * r->n2);
    float *b = (float *)malloc((size_t)r->nact * g->cols * sizeof(float));
    if (!b)
        return sw_fail(r->ctx, SW_ENOMEM, "rtc_multi: out of memory (a GPU's columns)");
    for (int32_t a = 0; a < r->nact; a++) {
        const float *row = C + (int64_t)a * r->n2;
        float *dst = b + (int64_t)a * g->cols;
        for (int32_t j = g->p0; j < g->p0 + g->np; j++) {
            const rm_part *q = &r->part[j];
            memcpy(dst + q->off, row + q->cx, (size_t)q->m * sizeof(float));
            memcpy(dst + q->off + q->m, row + q->cy, (size_t)q->m * sizeof(float));
        }
    }
    const sw_status st = rm_upload(r, i, b);
    free(b);
    return st;
}

/* Columns: the bands of whole lenslet rows, about ns / N valid lenslets each (each at least
 * one), part i on GPU i, and every part's centroid parameters re-based on its band (bp[i]). */
static sw_status rm_bands(sw_rtc_multi *r, const sw_centroid_params *cp, sw_centroid_params *bp)
{
    const sw_sh_geometry *g = &cp->geometry;
    const int32_t nx = g->nx, ny = g->ny;
    int32_t a = 0, k = 0;
    for (int i = 0; i < r->ndev; i++) {
        rm_part *P = &r->part[i];
        const int64_t target = (int64_t)(i + 1) * r->ns / r->ndev;
        int32_t b = a, cnt = k;
        while (b < ny && (i == r->ndev - 1 || cnt < target || cnt == k)) {
            for (int32_t ix = 0; ix < nx; ix++)
                cnt += g->valid ? g->valid[(int64_t)b * nx + ix] != 0 : 1;
            b++;
        }
        if (cnt == k)
            return sw_fail(r->ctx, SW_EINVAL,
                           "rtc_multi: the %d lenslet rows with valid lenslets cannot be split "
                           "into %d bands of whole rows (split by columns); use fewer GPUs or "
                           "the rows",
                           (int)ny, r->ndev);
        /* the band's frame rows and its geometry, re-based on row py0 */
        int32_t xb, xe, yb, ye, yb2, ye2;
        sw_sh_region(g, 0, a, &xb, &xe, &yb, &ye);
        P->py0 = yb;
        sw_sh_region(g, 0, b - 1, &xb, &xe, &yb, &ye);
        P->height = ye - P->py0;
        sw_centroid_params *q = &bp[i];
        *q = *cp;
        q->geometry.y0 = g->y0 + g->pitch_px * a - P->py0;
        q->geometry.ny = b - a;
        q->geometry.valid = g->valid ? g->valid + (int64_t)a * nx : NULL;
        q->height = P->height;
        const size_t off = (size_t)P->py0 * cp->width;
        q->dark = cp->dark ? cp->dark + off : NULL;
        q->flat = cp->flat ? cp->flat + off : NULL;
        q->corr_reference = cp->corr_reference ? cp->corr_reference + off : NULL;
        for (int32_t iy = a; iy < b; iy++) { /* the same pixel regions, shifted by py0 */
            sw_sh_region(g, 0, iy, &xb, &xe, &yb, &ye);
            sw_sh_region(&q->geometry, 0, iy - a, &xb, &xe, &yb2, &ye2);
            if (yb2 != yb - P->py0 || ye2 != ye - P->py0)
                return sw_fail(r->ctx, SW_EUNSUPPORTED,
                               "rtc_multi: lenslet row %d's pixel rows move when the frame is cut "
                               "at row %d (y0 %g, pitch %g): this geometry cannot be split by "
                               "columns; use the rows",
                               (int)iy, (int)P->py0, g->y0, g->pitch_px);
        }
        P->gpu = i;
        P->src = 0;
        P->lenslets = nx * (b - a);
        P->m = cnt - k;
        P->cx = k;
        P->cy = r->ns + k;
        P->band0 = a;
        P->nband = b - a;
        r->gpu[i].p0 = i;
        r->gpu[i].np = 1;
        a = b;
        k = cnt;
    }
    return SW_OK;
}

/* GPU i's context for its centroid plans: GPU 0's is the plan's; another GPU's its own (made
 * once), whose stream becomes the GPU's. */
static sw_status rm_gpu_context(sw_rtc_multi *r, int i)
{
    rm_gpu *G = &r->gpu[i];
    if (G->ctx)
        return SW_OK;
    if (i == 0) {
        G->ctx = r->ctx;
    } else {
        sw_context_params pp;
        sw_context_params_default(&pp);
        pp.backend = SW_BACKEND_CUDA;
        pp.device = G->dev;
        pp.threads = r->ctx->threads;
        pp.log = r->ctx->log;
        pp.log_user = r->ctx->log_user;
        pp.log_level = r->ctx->log_level;
        const sw_status st = sw_context_create(&pp, &G->ctx);
        if (st != SW_OK)
            return sw_error_set(r->ctx, st, "rtc_multi: a context on GPU %d: %s", G->dev,
                                sw_context_error(NULL));
    }
    SW_CU(cudaSetDevice(G->dev));
    G->s = (cudaStream_t)G->ctx->stream;
    return SW_OK;
}

/* Part j's centroid plan (one frame, DEVICE path, as rtc.c makes sw_rtc's) on its GPU's context,
 * from c; `what` names the part in a failure. */
static sw_status rm_part_plan(sw_rtc_multi *r, int32_t j, const sw_centroid_params *c,
                              const char *what)
{
    rm_part *q = &r->part[j];
    const rm_gpu *G = &r->gpu[q->gpu];
    sw_centroid_params cq = *c;
    cq.max_frames = 1;
    cq.path = SW_CENTROID_DEVICE;
    SW_CU(cudaSetDevice(G->dev));
    const sw_status st = sw_centroid_create(G->ctx, &cq, &q->cent);
    if (st != SW_OK) /* sw_error_set formats a copy: the message may be ctx's own */
        return sw_error_set(r->ctx, st, "rtc_multi: GPU %d's %s: %s", G->dev, what,
                            sw_context_error(G->ctx));
    return SW_OK;
}

/* Columns: GPU i's context and its band's centroid plan; the band's slopes checked against the
 * whole plan's lenslets. */
static sw_status rm_band_plan(sw_rtc_multi *r, int i, const sw_centroid_params *q,
                              const sw_centroid_plan *full)
{
    rm_part *P = &r->part[i];
    SW_TRY(rm_gpu_context(r, i));
    r->npart = i + 1;
    SW_TRY(rm_part_plan(r, i, q, "band"));
    const int dev = r->gpu[i].dev;
    if (sw_centroid_plan_slopes(P->cent) != P->m)
        return sw_fail(r->ctx, SW_EINTERNAL, "rtc_multi: GPU %d's band has %d slopes, not %d", dev,
                       (int)sw_centroid_plan_slopes(P->cent), (int)P->m);
    /* the mask's order: band slope k is the whole plan's slope cx + k, of the same lenslet */
    const int32_t shift = P->band0 * q->geometry.nx;
    for (int32_t k = 0; k < P->m; k++) {
        const int32_t lb = sw_centroid_plan_slope_lenslet(P->cent, k);
        const int32_t lf = sw_centroid_plan_slope_lenslet(full, P->cx + k);
        if (lf != lb + shift)
            return sw_fail(r->ctx, SW_EINTERNAL,
                           "rtc_multi: GPU %d's band's slope %d (lenslet %d) is not the whole "
                           "plan's slope %d (lenslet %d)",
                           dev, (int)k, (int)(lb + shift), (int)(P->cx + k), (int)lf);
    }
    return SW_OK;
}

/* The parts of one frame (sw_rtc_multi_create): rows, the whole frame's plan on GPU 0; columns,
 * one band of lenslet rows per GPU. The whole frame's plan gives ns (and the columns' reference
 * of the slopes' order). */
static sw_status rm_frame_parts(sw_rtc_multi *r, const sw_centroid_params *c)
{
    sw_centroid_params cp = *c;
    cp.max_frames = 1;
    cp.path = SW_CENTROID_DEVICE;
    r->nsrc = 1;
    r->src[0].width = cp.width;
    r->src[0].height = cp.height;
    r->src[0].type = cp.type;
    sw_centroid_plan *full = NULL;
    SW_TRY(sw_centroid_create(r->ctx, &cp, &full));
    r->ns = sw_centroid_plan_slopes(full);
    if (r->ns < 1) {
        sw_centroid_destroy(full);
        return sw_fail(r->ctx, SW_EINVAL, "rtc_multi: the geometry's mask has no valid lenslet");
    }
    if (r->split == SW_RTC_MULTI_ROWS) {
        rm_part *q = &r->part[0];
        r->npart = 1;
        q->cent = full;
        q->gpu = 0;
        q->src = 0;
        q->py0 = 0;
        q->height = cp.height;
        q->lenslets = cp.geometry.nx * cp.geometry.ny;
        q->m = r->ns;
        q->cx = 0;
        q->cy = r->ns;
        r->gpu[0].p0 = 0;
        r->gpu[0].np = 1;
        r->gpu[0].ctx = r->ctx;
        return SW_OK;
    }
    sw_centroid_params bp[RM_MAX_GPUS];
    sw_status st = rm_bands(r, &cp, bp);
    for (int i = 0; i < r->ndev && st == SW_OK; i++)
        st = rm_band_plan(r, i, &bp[i], full);
    sw_centroid_destroy(full);
    return st;
}

/* Several sensors (sw_rtc_multi_create_wfs): sensor k is a part of GPU k mod N, the plan of its
 * whole frame on that GPU's context; the slope vector holds the sensors' slopes in turn, each its
 * x block then its y block. */
static sw_status rm_wfs_parts(sw_rtc_multi *r, const sw_centroid_params *wfs)
{
    int32_t nsk[RM_MAX_PARTS];
    r->nsrc = r->nwfs;
    for (int i = 0, j = 0; i < r->ndev; i++) {
        rm_gpu *G = &r->gpu[i];
        SW_TRY(rm_gpu_context(r, i));
        G->p0 = j;
        for (int32_t k = i; k < r->nwfs; k += r->ndev, j++) {
            rm_part *q = &r->part[j];
            const sw_centroid_params *c = &wfs[k];
            q->gpu = i;
            q->src = k;
            G->np++;
            r->npart = j + 1;
            char what[32];
            snprintf(what, sizeof what, "sensor %d", (int)k);
            SW_TRY(rm_part_plan(r, j, c, what));
            q->m = sw_centroid_plan_slopes(q->cent);
            if (q->m < 1)
                return sw_fail(r->ctx, SW_EINVAL,
                               "rtc_multi: sensor %d's mask has no valid lenslet", (int)k);
            q->py0 = 0;
            q->height = c->height;
            q->lenslets = c->geometry.nx * c->geometry.ny;
            r->src[k].width = c->width;
            r->src[k].height = c->height;
            r->src[k].type = c->type;
            nsk[k] = q->m;
        }
    }
    int32_t start[RM_MAX_PARTS];
    int64_t total = 0; /* slopes per axis before sensor k */
    for (int32_t k = 0; k < r->nwfs; k++) {
        start[k] = (int32_t)(2 * total);
        total += nsk[k];
        if (2 * total > RM_MAX_ELEMENTS / 2)
            return sw_fail(r->ctx, SW_EINVAL, "rtc_multi: the sensors have too many slopes");
    }
    r->ns = (int32_t)total;
    for (int32_t j = 0; j < r->npart; j++) {
        rm_part *q = &r->part[j];
        q->cx = start[q->src];
        q->cy = q->cx + q->m;
    }
    return SW_OK;
}

static sw_status rm_build(sw_rtc_multi *r, const sw_rtc_params *p, const sw_centroid_params *wfs,
                          const sw_rtc_multi_params *m, const int *devs)
{
    sw_context *ctx = r->ctx;
    SW_CU(cudaSetDevice(devs[0]));
    for (int i = 0; i < r->ndev; i++)
        r->gpu[i].dev = devs[i];

    /* the centroid plans and the slope vector */
    SW_TRY(wfs ? rm_wfs_parts(r, wfs) : rm_frame_parts(r, &p->centroid));
    r->n2 = 2 * r->ns;

    /* the controller: checked by controller.c, read as rtc_cuda.cu reads it */
    sw_controller_params cpar = p->controller;
    cpar.nfilter = 0; /* folded into C below */
    cpar.filter = NULL;
    sw_controller *c = NULL;
    SW_TRY(sw_controller_create(ctx, &cpar, &c));
    r->gain = (float)c->p.gain;
    r->keep = c->p.kind == SW_CTRL_LEAKY ? (float)(1.0 - c->p.leak) : 1.0f;
    r->clip = c->p.clip > 0.0 ? (float)c->p.clip : 0.0f;
    sw_controller_destroy(c);

    const float *C = NULL;
    float *copy = NULL;
    sw_status st = rm_matrix(r, p, &C, &copy);
    if (st != SW_OK) {
        free(copy);
        return st;
    }

    /* the shares: rows, rows_i = nact / N (the first nact % N GPUs one more) of all 2 ns columns;
     * columns, all nact rows of its parts' 2 m columns each */
    const int32_t base = r->nact / r->ndev, extra = r->nact % r->ndev;
    for (int i = 0, row = 0; i < r->ndev; i++) {
        rm_gpu *g = &r->gpu[i];
        if (r->split == SW_RTC_MULTI_ROWS) {
            g->row0 = row;
            g->rows = base + (i < extra ? 1 : 0);
            g->cols = r->n2;
        } else {
            g->row0 = 0;
            g->rows = r->nact;
            g->cols = 0;
            for (int32_t j = g->p0; j < g->p0 + g->np; j++) {
                r->part[j].off = g->cols;
                g->cols += 2 * r->part[j].m;
            }
        }
        g->ldh = (g->cols + 7) / 8 * 8;
        row += g->rows;
    }

    r->commands = (float *)sw_host_alloc(ctx, (size_t)r->nact * sizeof(float), 1);
    if (!r->commands) {
        free(copy);
        return sw_fail(ctx, SW_ENOMEM, "rtc_multi: out of memory (pinned commands)");
    }

    /* the communicators, one per GPU, for the plan's life */
    if (r->ndev > 1) {
        ncclComm_t comms[RM_MAX_GPUS];
        memset(comms, 0, sizeof comms);
        const ncclResult_t e = ncclCommInitAll(comms, r->ndev, devs);
        if (e != ncclSuccess) {
            free(copy);
            return rm_nccl_fail(ctx, "ncclCommInitAll", e, NULL);
        }
        for (int i = 0; i < r->ndev; i++)
            r->gpu[i].comm = comms[i];
    }

    /* each GPU's stream, cuBLAS handle, buffers and share of C */
    for (int i = 0; i < r->ndev && st == SW_OK; i++) {
        rm_gpu *g = &r->gpu[i];
        cudaError_t e = cudaSetDevice(g->dev);
        if (e == cudaSuccess && !g->s) {
            if (i == 0) {
                g->s = (cudaStream_t)ctx->stream;
            } else {
                e = cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking);
                g->own_stream = e == cudaSuccess;
            }
        }
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&g->join, cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&g->copied, cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreate(&g->t0);
        if (e == cudaSuccess)
            e = cudaEventCreate(&g->t1);
        if (e == cudaSuccess)
            e = sw_cuda_alloc(&g->slopes, (size_t)g->ldh);
        if (e == cudaSuccess)
            e = cudaMemsetAsync(g->slopes, 0, (size_t)g->ldh * sizeof(float), g->s);
        if (e == cudaSuccess && i == 0)
            e = sw_cuda_alloc(&r->ucat, (size_t)r->nact);
        if (e == cudaSuccess && r->split == SW_RTC_MULTI_ROWS)
            e = i == 0 ? (g->u = r->ucat, cudaSuccess) : sw_cuda_alloc(&g->u, (size_t)g->rows);
        if (e == cudaSuccess && r->split == SW_RTC_MULTI_COLUMNS)
            e = sw_cuda_alloc(&g->r, (size_t)r->nact);
        if (e != cudaSuccess)
            st = sw_cuda_fail_call(ctx, SW_CUDA_STAGE, "buffers of a GPU", e);
        if (st == SW_OK && !r->fp16)
            st = sw_cublas_create(ctx, SW_CUDA_STAGE, g->s, RM_BLAS_WS, &g->blas, &g->blas_ws);
        if (st == SW_OK)
            st = rm_matrix_share(r, i, C);
        /* its parts' frame buffers (their rows) and the centroid stage's device results */
        for (int32_t j = g->p0; j < g->p0 + g->np && st == SW_OK; j++) {
            rm_part *q = &r->part[j];
            const rm_src *f = &r->src[q->src];
            st = sw_image_alloc_device(g->ctx, f->width, q->height, f->type, &q->frame);
            if (st != SW_OK && g->ctx != ctx)
                st = sw_error_set(ctx, st, "rtc_multi: GPU %d: %s", g->dev,
                                  sw_context_error(g->ctx));
            if (st != SW_OK)
                break;
            q->cres.frames = 1;
            q->cres.lenslets = q->lenslets;
            q->cres.nslopes = q->m;
            q->cres.memory = SW_MEM_DEVICE;
            q->cres.slopes = g->slopes + q->off;
            const cudaError_t em =
                cudaMemsetAsync(q->frame.data, 0, q->frame.stride * (size_t)q->height, g->s);
            if (em != cudaSuccess)
                st = sw_cuda_fail_call(ctx, SW_CUDA_STAGE, "clearing a frame buffer", em);
        }
    }
    free(copy);
    if (st != SW_OK)
        return st;
    SW_CU(cudaSetDevice(devs[0]));
    SW_CU(cudaEventCreateWithFlags(&r->fork, cudaEventDisableTiming));

    /* one plain pass (loads the kernels, connects NCCL's peers), the state to 0, the graph */
    SW_TRY(rm_enqueue(r));
    SW_TRY(rm_sync_all(r));
    SW_TRY(rm_zero_state(r));
    if (m->graph) {
        st = rm_capture(r);
        if (st == SW_OK) {
            SW_TRY(rm_sync_all(r));
            r->use_graph = 1;
        } else {
            sw_log(ctx, SW_LOG_WARN, "%s; the chain runs with plain launches",
                   sw_context_error(ctx));
            r->use_graph = 0;
            SW_TRY(rm_sync_all(r));
        }
    }
    return SW_OK;
}

/* Both create calls: the host's checks (rtc_multi.c), the backend and the devices, the plan.
 * wfs NULL: one frame (p->centroid). */
static sw_status rm_create(sw_context *ctx, const sw_rtc_params *p, int several,
                           const sw_centroid_params *wfs, int32_t nwfs,
                           const sw_rtc_multi_params *m, sw_rtc_multi **out)
{
    sw_rtc_multi_params mp;
    SW_TRY(sw_rtc_multi_check(ctx, p, several, wfs, nwfs, m, out, &mp));
    if (sw_context_backend(ctx) != SW_BACKEND_CUDA)
        return sw_fail(ctx, SW_EINVAL, "rtc_multi: needs a context on the CUDA backend");
    int devs[RM_MAX_GPUS];
    SW_TRY(rm_devices(ctx, &mp, devs));
    sw_rtc_multi *r = (sw_rtc_multi *)calloc(1, sizeof *r);
    if (!r)
        return sw_fail(ctx, SW_ENOMEM, "rtc_multi: out of memory");
    r->ctx = ctx;
    r->ndev = mp.ndevices;
    r->nact = p->nact;
    r->fp16 = p->fp16;
    r->split = several ? SW_RTC_MULTI_COLUMNS : mp.split; /* the sensors: columns by sensor */
    r->nwfs = several ? nwfs : 0;
    r->last_us = -1.0;
    for (int i = 0; i < r->ndev; i++)
        r->gpu[i].dev = devs[i];
    const sw_status st = rm_build(r, p, several ? wfs : NULL, &mp, devs);
    cudaSetDevice(ctx->device);
    if (st != SW_OK) {
        sw_rtc_multi_destroy(r);
        return st;
    }
    *out = r;
    return SW_OK;
}

extern "C" sw_status sw_rtc_multi_create(sw_context *ctx, const sw_rtc_params *p,
                                         const sw_rtc_multi_params *m, sw_rtc_multi **out)
{
    return rm_create(ctx, p, 0, NULL, 0, m, out);
}

extern "C" sw_status sw_rtc_multi_create_wfs(sw_context *ctx, const sw_rtc_params *p,
                                             const sw_centroid_params *wfs, int32_t nwfs,
                                             const sw_rtc_multi_params *m, sw_rtc_multi **out)
{
    return rm_create(ctx, p, 1, wfs, nwfs, m, out);
}

/* ================================================================== runs */

/* The frames of a run: one per source (rm_src), each of its source's size and type, in host,
 * pinned or device memory. `fn` names the caller in the messages. */
static sw_status rm_check_frames(sw_rtc_multi *r, const sw_image *const *frames, const char *fn)
{
    sw_context *ctx = r->ctx;
    if (!frames)
        return sw_fail(ctx, SW_EINVAL, "%s: NULL frames", fn);
    for (int32_t k = 0; k < r->nsrc; k++) {
        const sw_image *f = frames[k];
        const rm_src *c = &r->src[k];
        if (!f)
            return r->nsrc == 1 ? sw_fail(ctx, SW_EINVAL, "%s: NULL frame", fn)
                                : sw_fail(ctx, SW_EINVAL, "%s: sensor %d's frame is NULL", fn, k);
        SW_TRY(sw_image_check(ctx, f));
        if (f->width != c->width || f->height != c->height || f->type != c->type) {
            if (r->nsrc == 1)
                return sw_fail(ctx, SW_EINVAL,
                               "rtc_multi: the frame is %d x %d %s; the plan takes one %d x %d "
                               "%s frame",
                               f->width, f->height, sw_pixel_type_string(f->type), c->width,
                               c->height, sw_pixel_type_string(c->type));
            return sw_fail(ctx, SW_EINVAL,
                           "rtc_multi: sensor %d's frame is %d x %d %s; the plan takes %d x %d %s "
                           "from it",
                           k, f->width, f->height, sw_pixel_type_string(f->type), c->width,
                           c->height, sw_pixel_type_string(c->type));
        }
        if (f->memory != SW_MEM_HOST && f->memory != SW_MEM_PINNED && f->memory != SW_MEM_DEVICE)
            return sw_fail(ctx, SW_EINVAL, "rtc_multi: unknown frame memory kind %d",
                           (int)f->memory);
    }
    return SW_OK;
}

/* One run over the plan's frames (checked): the copies, the graph or the plain launches, the
 * commands and the slopes (each part's x and y blocks into their places) out. */
static sw_status rm_run(sw_rtc_multi *r, const sw_image *const *frames, float *commands,
                        float *slopes)
{
    const double t0 = rm_now_us();
    rm_gpu *g0 = &r->gpu[0];
    SW_TRY(rm_copy_frames(r, frames, r->use_graph));
    SW_CU(cudaSetDevice(g0->dev));
    if (r->use_graph)
        SW_CU(cudaGraphLaunch(r->exec, g0->s));
    else
        SW_TRY(rm_enqueue(r));
    SW_CU(cudaSetDevice(g0->dev));
    SW_CU(cudaStreamSynchronize(g0->s));
    r->frames++;
    if (commands)
        memcpy(commands, r->commands, (size_t)r->nact * sizeof(float));
    for (int32_t j = 0; slopes && j < r->npart; j++) {
        const rm_part *q = &r->part[j];
        const float *d = r->gpu[q->gpu].slopes + q->off;
        SW_CU(cudaSetDevice(r->gpu[q->gpu].dev));
        SW_CU(cudaMemcpy(slopes + q->cx, d, (size_t)q->m * sizeof(float), cudaMemcpyDeviceToHost));
        SW_CU(cudaMemcpy(slopes + q->cy, d + q->m, (size_t)q->m * sizeof(float),
                         cudaMemcpyDeviceToHost));
    }
    SW_CU(cudaSetDevice(g0->dev));
    r->last_us = rm_now_us() - t0;
    return SW_OK;
}

extern "C" sw_status sw_rtc_multi_run(sw_rtc_multi *r, const sw_image *frame, float *commands,
                                      float *slopes)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_multi_run: NULL plan");
    if (r->nsrc != 1)
        return sw_fail(r->ctx, SW_EINVAL,
                       "sw_rtc_multi_run: the plan takes %d sensors' frames: "
                       "sw_rtc_multi_run_wfs",
                       (int)r->nsrc);
    const sw_image *const frames[1] = {frame};
    SW_TRY(rm_check_frames(r, frames, "sw_rtc_multi_run"));
    return rm_run(r, frames, commands, slopes);
}

extern "C" sw_status sw_rtc_multi_run_wfs(sw_rtc_multi *r, const sw_image *const frames[],
                                          float *commands, float *slopes)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_multi_run_wfs: NULL plan");
    SW_TRY(rm_check_frames(r, frames, "sw_rtc_multi_run_wfs"));
    return rm_run(r, frames, commands, slopes);
}

extern "C" sw_status sw_rtc_multi_reset(sw_rtc_multi *r)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_multi_reset: NULL plan");
    const sw_status st = rm_zero_state(r);
    cudaSetDevice(r->ctx->device);
    return st;
}

extern "C" const float *sw_rtc_multi_commands(const sw_rtc_multi *r)
{
    return r ? r->commands : NULL;
}

extern "C" double sw_rtc_multi_last_us(const sw_rtc_multi *r)
{
    return r ? r->last_us : -1.0;
}

extern "C" int32_t sw_rtc_multi_slopes(const sw_rtc_multi *r)
{
    return r ? r->ns : 0;
}

extern "C" int sw_rtc_multi_graph(const sw_rtc_multi *r)
{
    return r ? r->use_graph : -1;
}

extern "C" int32_t sw_rtc_multi_devices(const sw_rtc_multi *r)
{
    return r ? r->ndev : 0;
}

extern "C" sw_status sw_rtc_multi_device(const sw_rtc_multi *r, int32_t i, int32_t *ordinal,
                                         int32_t *row0, int32_t *rows)
{
    if (!r || i < 0 || i >= r->ndev)
        return sw_fail(r ? r->ctx : NULL, SW_EINVAL, "sw_rtc_multi_device: GPU %d of %d", (int)i,
                       r ? (int)r->ndev : 0);
    if (ordinal)
        *ordinal = r->gpu[i].dev;
    if (row0)
        *row0 = r->gpu[i].row0;
    if (rows)
        *rows = r->gpu[i].rows;
    return SW_OK;
}

extern "C" int32_t sw_rtc_multi_nwfs(const sw_rtc_multi *r)
{
    return r ? r->nsrc : 0;
}

extern "C" sw_status sw_rtc_multi_wfs(const sw_rtc_multi *r, int32_t k, int32_t *gpu,
                                      int32_t *slope0, int32_t *nslopes)
{
    if (!r || k < 0 || k >= r->nsrc)
        return sw_fail(r ? r->ctx : NULL, SW_EINVAL, "sw_rtc_multi_wfs: sensor %d of %d", (int)k,
                       r ? (int)r->nsrc : 0);
    if (r->nwfs == 0) { /* one frame: GPU 0's (rows) or every GPU's band (columns) */
        if (gpu)
            *gpu = r->split == SW_RTC_MULTI_ROWS ? 0 : -1;
        if (slope0)
            *slope0 = 0;
        if (nslopes)
            *nslopes = r->ns;
        return SW_OK;
    }
    for (int32_t j = 0; j < r->npart; j++) {
        const rm_part *q = &r->part[j];
        if (q->src != k)
            continue;
        if (gpu)
            *gpu = q->gpu;
        if (slope0)
            *slope0 = q->cx;
        if (nslopes)
            *nslopes = q->m;
        return SW_OK;
    }
    return sw_fail(r->ctx, SW_EINTERNAL, "sw_rtc_multi_wfs: sensor %d has no part", (int)k);
}

/* ================================================================== the stages one by one */

static int rm_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One stage once, timed on every GPU it involves (all: 1; GPU 0 only: 0); the slowest GPU's
 * microseconds into *us. */
static sw_status rm_time_stage(sw_rtc_multi *r, int stage, const sw_image *const *frames,
                               double *us)
{
    const int all = stage == SW_RTC_MULTI_T_BCAST || stage == SW_RTC_MULTI_T_MVM ||
                    stage == SW_RTC_MULTI_T_GATHER ||
                    (stage == SW_RTC_MULTI_T_CENTROID && r->split == SW_RTC_MULTI_COLUMNS);
    const int n = all ? r->ndev : 1;
    SW_TRY(rm_sync_all(r));
    for (int i = 0; i < n; i++) {
        SW_CU(cudaSetDevice(r->gpu[i].dev));
        SW_CU(cudaEventRecord(r->gpu[i].t0, r->gpu[i].s));
    }
    SW_CU(cudaSetDevice(r->gpu[0].dev));
    switch (stage) {
    case SW_RTC_MULTI_T_CENTROID:
        SW_TRY(rm_copy_frames(r, frames, 0));
        SW_TRY(rm_centroid(r));
        break;
    case SW_RTC_MULTI_T_BCAST: SW_TRY(rm_bcast(r)); break;
    case SW_RTC_MULTI_T_MVM:
        for (int i = 0; i < r->ndev; i++)
            SW_TRY(rm_mvm(r, i));
        break;
    case SW_RTC_MULTI_T_GATHER: SW_TRY(rm_gather(r)); break;
    default: SW_TRY(rm_copy_commands(r)); break;
    }
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        SW_CU(cudaSetDevice(r->gpu[i].dev));
        SW_CU(cudaEventRecord(r->gpu[i].t1, r->gpu[i].s));
    }
    for (int i = 0; i < n; i++) {
        SW_CU(cudaSetDevice(r->gpu[i].dev));
        SW_CU(cudaEventSynchronize(r->gpu[i].t1));
        float ms = 0.0f;
        SW_CU(cudaEventElapsedTime(&ms, r->gpu[i].t0, r->gpu[i].t1));
        worst = 1e3 * ms > worst ? 1e3 * ms : worst;
    }
    SW_CU(cudaSetDevice(r->gpu[0].dev));
    *us = worst;
    return SW_OK;
}

/* The stages' medians over reps runs each (frames checked). */
static sw_status rm_profile(sw_rtc_multi *r, const sw_image *const *frames, int reps,
                            double us[SW_RTC_MULTI_T_STAGES])
{
    double *t = (double *)malloc((size_t)reps * sizeof(double));
    if (!t)
        return sw_fail(r->ctx, SW_ENOMEM, "rtc_multi: out of memory");
    sw_status st = SW_OK;
    for (int stage = 0; stage < SW_RTC_MULTI_T_STAGES && st == SW_OK; stage++) {
        for (int k = 0; k < reps && st == SW_OK; k++)
            st = rm_time_stage(r, stage, frames, &t[k]);
        if (st == SW_OK) {
            qsort(t, (size_t)reps, sizeof(double), rm_cmp_double);
            us[stage] = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        }
    }
    free(t);
    cudaSetDevice(r->ctx->device);
    return st;
}

extern "C" sw_status sw_rtc_multi_profile(sw_rtc_multi *r, const sw_image *frame, int reps,
                                          double us[SW_RTC_MULTI_T_STAGES])
{
    if (!r || !us)
        return sw_fail(r ? r->ctx : NULL, SW_EINVAL, "sw_rtc_multi_profile: NULL plan or output");
    if (r->nsrc != 1)
        return sw_fail(r->ctx, SW_EINVAL,
                       "sw_rtc_multi_profile: the plan takes %d sensors' frames: "
                       "sw_rtc_multi_profile_wfs",
                       (int)r->nsrc);
    const sw_image *const frames[1] = {frame};
    SW_TRY(rm_check_frames(r, frames, "sw_rtc_multi_profile"));
    if (reps < 1 || reps > 1000000)
        return sw_fail(r->ctx, SW_EINVAL, "sw_rtc_multi_profile: reps = %d; 1..1000000", reps);
    return rm_profile(r, frames, reps, us);
}

extern "C" sw_status sw_rtc_multi_profile_wfs(sw_rtc_multi *r, const sw_image *const frames[],
                                              int reps, double us[SW_RTC_MULTI_T_STAGES])
{
    if (!r || !us)
        return sw_fail(r ? r->ctx : NULL, SW_EINVAL,
                       "sw_rtc_multi_profile_wfs: NULL plan or output");
    SW_TRY(rm_check_frames(r, frames, "sw_rtc_multi_profile_wfs"));
    if (reps < 1 || reps > 1000000)
        return sw_fail(r->ctx, SW_EINVAL, "sw_rtc_multi_profile_wfs: reps = %d; 1..1000000", reps);
    return rm_profile(r, frames, reps, us);
}

#endif /* SW_HAVE_NCCL */
