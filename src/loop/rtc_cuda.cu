/*
 * The real-time chain on the GPU (loop.h, sw_rtc_*; rtc.c validates, builds the host side and
 * runs the CPU twin). Everything from the frame in the plan's device buffer to the commands in
 * pinned host memory is one CUDA graph, captured at create after one plain pass (which loads the
 * kernels and cuBLAS's):
 *   1. the centroid stage's kernel (DEVICE path on the plan's frame buffer, device result with
 *      the slopes only, no timing: sw_centroid_run queues it and does not synchronise);
 *   2. the reconstruction and the controller, folded where they can be:
 *        MVM, integrator / leaky:  u = g C s + keep u        (one GEMV: cublasSgemv with
 *            alpha = g, beta = keep, or the FP16 kernel whose epilogue is sw_loop_update), then a
 *            clip kernel when clip > 0 (FP32; the FP16 epilogue clips itself);
 *        MVM, PI (seed 000 section 6): e = M s with M = B^T C precomputed at create (one GEMV),
 *            the PI kernel (sw_loop_pi per mode), u = B v (GEMV), then the clip;
 *        SABRE: a scatter of the centroid slopes (times slope_scale) into the D-SABRE plan's
 *            slope buffer, the D-SABRE kernels (sw_sabre_gpu_enqueue: seed 002 Eq. 6-11, 16, and
 *            with LOCAL the distributed projection, Eq. 14-16), then
 *              GLOBAL: the projection P (Eq. 13) is the matrix of the GEMV above, on the values;
 *              CORNERS / LOCAL: r = the plan's actuators, the unseen modes filtered out of r
 *              (rt_filter: partial sums, then r' fused with the update when not PI), then the
 * update kernel (sw_loop_update per actuator) or, for PI, e = B^T r, the PI kernel, u = B v; a
 * matrix reconstructor has the filter folded in by rtc.c; PI with a clip: the integrals moved back
 * by the clip's change (anti-windup);
 *   3. the commands' copy into the plan's pinned commands buffer.
 * A run copies the frame into the device buffer (cudaMemcpy2DAsync, host or device source) and
 * launches the graph. With telemetry it then records an event and queues the slopes' copy into
 * the pinned staging buffer behind it, and waits on the event only: the commands are back, and
 * the slopes' copy finishes while the host copies the commands to the caller (rtc.c then waits
 * for the stream before it writes the telemetry slot). Without telemetry the run waits for the
 * stream.
 * The controller's state (u, the PI integrals) lives on the device.
 */
#include "core/core_internal.h"
#include "loop/loop_internal.h"
#include "sabre/sabre_internal.h"
#include "core/cuda_util.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   r->ctx
#define SW_CUDA_STAGE "rtc"

#define RT_THREADS    256               /* element-wise kernels */
#define RT_GEMV_WARPS 8                 /* warps (rows) per block of the FP16 GEMV */
#define RT_BLAS_WS    ((size_t)4 << 20) /* the handle's own workspace: the capture allocates none */
#define RT_MAX_FILTER 32                /* unseen modes filtered on the GPU (CORNERS / LOCAL) */

struct rtc_gpu {
    cudaStream_t s;
    cublasHandle_t blas;
    void *blas_ws;
    sw_image frame;          /* the plan's device frame buffer                                 */
    sw_centroid_result cres; /* device result: the slopes only, into `slopes`                  */
    float *slopes;           /* 2 ns, padded with zeros to ldh (the FP16 GEMV's vector loads)  */
    /* the matrix stage: y = W x, W wrows x cols row-major (MVM: C or B^T C; GLOBAL: P or B^T P) */
    int matrix;     /* 1: MVM or GLOBAL */
    int half;       /* W stored as __half (MVM with fp16) */
    const float *x; /* its input: the slopes, or the D-SABRE plan's values */
    int32_t wrows, cols, ldh;
    float *W;   /* FP32 */
    __half *Wh; /* FP16, rows of ldh halves (a multiple of 8), zero padded */
    /* the controller */
    sw_controller_kind kind;
    float gain, keep, clip;
    int32_t nmodes;
    float *B; /* PI: nact x nmodes column-major, NULL: the identity */
    float *kp, *ki, *integ, *e, *v;
    float *d; /* PI with a basis and a clip: nact, the clip's change u_clip - u          */
    float *u; /* nact: the commands u_{k-1} / u_k */
    /* the unseen-mode filter (CORNERS / LOCAL; a matrix reconstructor has it folded in) */
    int32_t nfilter;
    float *Z;      /* nact x nfilter column-major */
    float *rf;     /* nact: the filtered r (PI) */
    double *zpart; /* blocks x nfilter partial sums of Z^T r */
    /* SABRE */
    int32_t *slope_l; /* ns: lenslet of slope k */
    cudaEvent_t ev_cmd;
    sw_graph graph;
};

/* ================================================================== kernels */

static unsigned rt_blocks(int64_t n, int threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

/* y = W x with W in half precision (row-major, rows of ldh halves), accumulated in float: one warp
 * per row, 16-byte loads of 8 halves (W is read once per run: evict-first), x (padded to ldh,
 * zeros past the real columns) through the read-only cache, a shuffle reduction. UPDATE: the
 * epilogue is the controller's update, y = sw_loop_update(y, W x, gain, keep, clip). */
template <int UPDATE>
__global__ void __launch_bounds__(RT_GEMV_WARPS * 32)
    rt_gemv_half(const __half *__restrict__ W, int32_t rows, int32_t ldh,
                 const float *__restrict__ x, float *__restrict__ y, float gain, float keep,
                 float clip)
{
    const int32_t row = (int32_t)(((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows)
        return; /* the same for the whole warp */
    const uint4 *w = (const uint4 *)(W + (int64_t)row * ldh);
    const float4 *xv = (const float4 *)x;
    const int32_t nv = ldh >> 3;
    float acc = 0.0f;
#pragma unroll 4
    for (int32_t j = lane; j < nv; j += 32) {
        const uint4 q = __ldcs(w + j);
        const float4 a = __ldg(xv + 2 * j), b = __ldg(xv + 2 * j + 1);
        const float2 h0 = __half22float2(*(const __half2 *)&q.x);
        const float2 h1 = __half22float2(*(const __half2 *)&q.y);
        const float2 h2 = __half22float2(*(const __half2 *)&q.z);
        const float2 h3 = __half22float2(*(const __half2 *)&q.w);
        acc = fmaf(h0.x, a.x, acc);
        acc = fmaf(h0.y, a.y, acc);
        acc = fmaf(h1.x, a.z, acc);
        acc = fmaf(h1.y, a.w, acc);
        acc = fmaf(h2.x, b.x, acc);
        acc = fmaf(h2.y, b.y, acc);
        acc = fmaf(h3.x, b.z, acc);
        acc = fmaf(h3.y, b.w, acc);
    }
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0)
        y[row] = UPDATE ? sw_loop_update(y[row], acc, gain, keep, clip) : acc;
}

/* Float rows x cols (row-major) to half rows of ldh, zero padded (at create). */
__global__ void rt_to_half(const float *__restrict__ src, int32_t rows, int32_t cols, int32_t ldh,
                           __half *__restrict__ dst)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)rows * ldh)
        return;
    const int64_t i = t / ldh, j = t - i * ldh;
    dst[t] = __float2half_rn(j < cols ? src[i * cols + j] : 0.0f);
}

/* The centroid slopes (mask order, x block then y block) into D-SABRE's 2 n array, times the
 * slope scale (lenslets outside the mask stay 0 from create). */
__global__ void rt_scatter(const float *__restrict__ s, const int32_t *__restrict__ lens,
                           int32_t ns, int32_t n, float scale, float *__restrict__ dst)
{
    const int32_t k = (int32_t)((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (k >= ns)
        return;
    const int32_t l = lens[k];
    dst[l] = s[k] * scale;
    dst[n + l] = s[ns + k] * scale;
}

/* Integrator / leaky update of every command from r (seed 000 section 6's regulator). */
__global__ void rt_update(float *__restrict__ u, const float *__restrict__ r, int32_t n, float gain,
                          float keep, float clip)
{
    const int32_t i = (int32_t)((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n)
        u[i] = sw_loop_update(u[i], r[i], gain, keep, clip);
}

/* The stroke clip alone (u = 1 u + 0, then clipped, as sw_loop_update does). */
__global__ void rt_clip(float *__restrict__ u, int32_t n, float clip)
{
    const int32_t i = (int32_t)((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n)
        u[i] = sw_loop_update(u[i], 0.0f, 0.0f, 1.0f, clip);
}

/* PI per mode (seed 000 section 6): I += e, v = kp e + ki I. direct (the identity basis): the
 * commands are v, clipped, and a clipped command moves its integral back (anti-windup by
 * back-calculation, controller.c: I += (u_clip - v) / ki); else v goes to `out` for u = B v. */
__global__ void rt_pi(const float *__restrict__ e, const float *__restrict__ kp,
                      const float *__restrict__ ki, float *__restrict__ integ, int32_t nmodes,
                      int direct, float clip, float *__restrict__ out)
{
    const int32_t j = (int32_t)((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= nmodes)
        return;
    float acc = integ[j];
    const float v = sw_loop_pi(e[j], kp[j], ki[j], &acc);
    if (!direct) {
        integ[j] = acc;
        out[j] = v;
        return;
    }
    const float u = sw_loop_update(0.0f, v, 1.0f, 0.0f, clip);
    if (u != v && ki[j] != 0.0f)
        acc += (u - v) / ki[j];
    integ[j] = acc;
    out[j] = u;
}

/* The clip of u = B v with its change kept for the back-calculation: d = u_clip - u. */
__global__ void rt_clip_delta(float *__restrict__ u, float *__restrict__ d, int32_t n, float clip)
{
    const int32_t i = (int32_t)((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n)
        return;
    const float v = u[i], c = sw_loop_update(0.0f, v, 1.0f, 0.0f, clip);
    d[i] = c - v;
    u[i] = c;
}

/* Anti-windup by back-calculation (controller.c): I_j += (B^T d)_j / ki_j, for ki_j != 0. */
__global__ void rt_backcalc(const float *__restrict__ bd, const float *__restrict__ ki,
                            float *__restrict__ integ, int32_t nmodes)
{
    const int32_t j = (int32_t)((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (j < nmodes && ki[j] != 0.0f)
        integ[j] += bd[j] / ki[j];
}

/* The unseen modes filtered out of r (loop.h: r' = r - Z (Z^T r), controller.c's sw_loop_filter),
 * in two kernels over many blocks (one block alone is latency-bound: 8 us at 80 x 80, measured):
 * rt_filter_dots: block b's partial sums of Z_j^T r over its RT_THREADS commands, in double, into
 * partial[b nf + j]; rt_filter_apply: every block sums the partials into t (nb x nf adds, in
 * block order: deterministic), then r' per command; u != NULL: the integrator / leaky update at
 * once, u = update(u, r'); else r' goes to out (for PI). */
__global__ void __launch_bounds__(RT_THREADS)
    rt_filter_dots(const float *__restrict__ z, int32_t nact, int32_t nf,
                   const float *__restrict__ r, double *__restrict__ partial)
{
    __shared__ double part[RT_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t a = (int32_t)((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    const double ra = a < nact ? (double)r[a] : 0.0;
    for (int32_t j = 0; j < nf; j++) {
        double acc = a < nact ? (double)z[(int64_t)j * nact + a] * ra : 0.0;
        for (int off = 16; off > 0; off >>= 1)
            acc += __shfl_down_sync(0xffffffffu, acc, off);
        if (lane == 0)
            part[warp] = acc;
        __syncthreads();
        if (warp == 0) {
            double v = lane < RT_THREADS / 32 ? part[lane] : 0.0;
            for (int off = 16; off > 0; off >>= 1)
                v += __shfl_down_sync(0xffffffffu, v, off);
            if (lane == 0)
                partial[(int64_t)blockIdx.x * nf + j] = v;
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(RT_THREADS)
    rt_filter_apply(const float *__restrict__ z, int32_t nact, int32_t nf,
                    const double *__restrict__ partial, int32_t nb, const float *__restrict__ r,
                    float *__restrict__ out, float *__restrict__ u, float gain, float keep,
                    float clip)
{
    __shared__ double t[RT_MAX_FILTER];
    if ((int32_t)threadIdx.x < nf) {
        double v = 0.0;
        for (int32_t b = 0; b < nb; b++)
            v += partial[(int64_t)b * nf + threadIdx.x];
        t[threadIdx.x] = v;
    }
    __syncthreads();
    const int32_t a = (int32_t)((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (a >= nact)
        return;
    double v = r[a];
    for (int32_t j = 0; j < nf; j++)
        v -= t[j] * (double)z[(int64_t)j * nact + a];
    if (u)
        u[a] = sw_loop_update(u[a], (float)v, gain, keep, clip);
    else
        out[a] = (float)v;
}

/* The filter's two kernels on r (act): into u with the update (update = 1), or into out. */
static sw_status rt_filter(sw_rtc *r, const float *act, float *out, int update)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    const unsigned nb = rt_blocks(r->nact, RT_THREADS);
    rt_filter_dots<<<nb, RT_THREADS, 0, g->s>>>(g->Z, r->nact, g->nfilter, act, g->zpart);
    SW_CU(cudaGetLastError());
    rt_filter_apply<<<nb, RT_THREADS, 0, g->s>>>(g->Z, r->nact, g->nfilter, g->zpart, (int32_t)nb,
                                                 act, out, update ? g->u : NULL, g->gain, g->keep,
                                                 g->clip);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* ================================================================== the frame's work */

/* y = alpha W x + beta y with the plan's matrix (FP32: cuBLAS on the column-major view; FP16:
 * only alpha = 1, beta = 0 (plain) or the controller's update (update = 1)). */
static sw_status rt_matrix(sw_rtc *r, float *y, int update)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    if (g->half) {
        const unsigned blocks = rt_blocks(g->wrows, RT_GEMV_WARPS);
        if (update)
            rt_gemv_half<1><<<blocks, RT_GEMV_WARPS * 32, 0, g->s>>>(g->Wh, g->wrows, g->ldh, g->x,
                                                                     y, g->gain, g->keep, g->clip);
        else
            rt_gemv_half<0><<<blocks, RT_GEMV_WARPS * 32, 0, g->s>>>(g->Wh, g->wrows, g->ldh, g->x,
                                                                     y, 0.0f, 0.0f, 0.0f);
        SW_CU(cudaGetLastError());
        return SW_OK;
    }
    /* W row-major wrows x cols = column-major cols x wrows: y = op(W^T_cm) x, lda = cols */
    const float one = 1.0f, zero = 0.0f;
    SW_CUBLAS(cublasSgemv(g->blas, CUBLAS_OP_T, g->cols, g->wrows, update ? &g->gain : &one, g->W,
                          g->cols, g->x, 1, update ? &g->keep : &zero, y, 1));
    if (update && g->clip > 0.0f) {
        rt_clip<<<rt_blocks(g->wrows, RT_THREADS), RT_THREADS, 0, g->s>>>(y, g->wrows, g->clip);
        SW_CU(cudaGetLastError());
    }
    return SW_OK;
}

/* PI from e (nmodes, device): the integrals, then u = B v and the clip. */
static sw_status rt_pi_tail(sw_rtc *r, const float *e)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    const int direct = g->B == NULL;
    rt_pi<<<rt_blocks(g->nmodes, RT_THREADS), RT_THREADS, 0, g->s>>>(
        e, g->kp, g->ki, g->integ, g->nmodes, direct, g->clip, direct ? g->u : g->v);
    SW_CU(cudaGetLastError());
    if (direct)
        return SW_OK;
    const float one = 1.0f, zero = 0.0f;
    SW_CUBLAS(cublasSgemv(g->blas, CUBLAS_OP_N, r->nact, g->nmodes, &one, g->B, r->nact, g->v, 1,
                          &zero, g->u, 1));
    if (g->clip > 0.0f) {
        /* the clip, then the back-calculation: I += B^T (u_clip - u) / ki (e is free now) */
        rt_clip_delta<<<rt_blocks(r->nact, RT_THREADS), RT_THREADS, 0, g->s>>>(g->u, g->d, r->nact,
                                                                               g->clip);
        SW_CU(cudaGetLastError());
        SW_CUBLAS(cublasSgemv(g->blas, CUBLAS_OP_T, r->nact, g->nmodes, &one, g->B, r->nact, g->d,
                              1, &zero, g->e, 1));
        rt_backcalc<<<rt_blocks(g->nmodes, RT_THREADS), RT_THREADS, 0, g->s>>>(g->e, g->ki,
                                                                               g->integ, g->nmodes);
        SW_CU(cudaGetLastError());
    }
    return SW_OK;
}

/* Stages 1-3 on the stream, in order (captured into the graph). */
static sw_status rt_enqueue(sw_rtc *r)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    SW_TRY(sw_centroid_run(r->cent, &g->frame, &g->cres));

    const float *act = NULL; /* CORNERS / LOCAL: the D-SABRE plan's actuators */
    if (r->p.recon == SW_RTC_SABRE) {
        rt_scatter<<<rt_blocks(r->ns, RT_THREADS), RT_THREADS, 0, g->s>>>(
            g->slopes, g->slope_l, r->ns, r->nx * r->ny, (float)r->p.slope_scale,
            sw_sabre_gpu_slopes(r->sabre));
        SW_CU(cudaGetLastError());
        SW_TRY(sw_sabre_gpu_enqueue(r->sabre));
        if (!g->matrix)
            act = sw_sabre_gpu_actuators(r->sabre);
    }

    if (g->kind != SW_CTRL_PI) {
        if (g->matrix) {
            SW_TRY(rt_matrix(r, g->u, 1)); /* u = g W x + keep u (clipped) */
        } else if (g->nfilter > 0) {
            SW_TRY(rt_filter(r, act, NULL, 1)); /* the unseen modes out of r, and the update */
        } else {
            rt_update<<<rt_blocks(r->nact, RT_THREADS), RT_THREADS, 0, g->s>>>(
                g->u, act, r->nact, g->gain, g->keep, g->clip);
            SW_CU(cudaGetLastError());
        }
    } else if (g->matrix) {
        SW_TRY(rt_matrix(r, g->e, 0)); /* e = (B^T C) s or (B^T P) c */
        SW_TRY(rt_pi_tail(r, g->e));
    } else {
        if (g->nfilter > 0) { /* the unseen modes out of r, into rf */
            SW_TRY(rt_filter(r, act, g->rf, 0));
            act = g->rf;
        }
        if (g->B) {
            const float one = 1.0f, zero = 0.0f; /* e = B^T r */
            SW_CUBLAS(cublasSgemv(g->blas, CUBLAS_OP_T, r->nact, g->nmodes, &one, g->B, r->nact,
                                  act, 1, &zero, g->e, 1));
            SW_TRY(rt_pi_tail(r, g->e));
        } else {
            SW_TRY(rt_pi_tail(r, act)); /* the identity basis: e = r */
        }
    }

    SW_CU(cudaMemcpyAsync(r->commands, g->u, (size_t)r->nact * sizeof(float),
                          cudaMemcpyDeviceToHost, g->s));
    return SW_OK;
}

/* Captures rt_enqueue into the plan's graph (core/cuda_util.h: the capture is always ended, so
 * that the stream is usable again whatever failed inside). */
static sw_status rt_capture(sw_rtc *r)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    SW_TRY(sw_graph_begin(r->ctx, SW_CUDA_STAGE, g->s));
    const sw_status st = rt_enqueue(r);
    return sw_graph_end(&g->graph, r->ctx, SW_CUDA_STAGE, "chain", g->s, st, 1);
}

/* ================================================================== create / destroy */

/* The state to 0: u and the PI integrals. */
static sw_status rt_zero_state(sw_rtc *r)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    SW_CU(cudaMemsetAsync(g->u, 0, (size_t)r->nact * sizeof(float), g->s));
    if (g->integ)
        SW_CU(cudaMemsetAsync(g->integ, 0, (size_t)g->nmodes * sizeof(float), g->s));
    return SW_OK;
}

/* The matrix stage's W (rows x cols row-major host float A, B the PI basis or NULL): uploads A,
 * forms B^T A for PI on the device (cublasSgemm), converts to half when asked. */
static sw_status rt_make_matrix(sw_rtc *r, const float *A, int32_t cols, int half)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    const int32_t nact = r->nact;
    float *dA = NULL, *dM = NULL;
    g->matrix = 1;
    g->half = half;
    g->cols = cols;
    const cudaError_t eu = sw_cuda_upload(&dA, A, (size_t)nact * cols, g->s);
    if (eu != cudaSuccess) { /* the allocation may have succeeded before the copy failed */
        if (dA)
            cudaFree(dA);
        SW_CU(eu);
    }
    float *W = dA;
    g->wrows = nact;
    if (g->kind == SW_CTRL_PI && g->B) {
        /* M = B^T A: column-major cols x nmodes = A^T_cm (cols x nact) B (nact x nmodes), which
         * is the row-major nmodes x cols matrix of e = M x */
        const cudaError_t ea = sw_cuda_alloc(&dM, (size_t)g->nmodes * cols);
        if (ea != cudaSuccess) {
            cudaFree(dA);
            SW_CU(ea);
        }
        const float one = 1.0f, zero = 0.0f;
        const cublasStatus_t eb = cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, cols, g->nmodes,
                                              nact, &one, dA, cols, g->B, nact, &zero, dM, cols);
        if (eb != CUBLAS_STATUS_SUCCESS) {
            cudaFree(dA);
            cudaFree(dM);
            SW_CUBLAS(eb);
        }
        W = dM;
        g->wrows = g->nmodes;
    }
    if (!half) {
        g->W = W;
        if (W != dA) {
            const cudaError_t es = cudaStreamSynchronize(g->s); /* the product has read dA */
            cudaFree(dA);
            SW_CU(es);
        }
        return SW_OK;
    }
    g->ldh = (cols + 7) / 8 * 8;
    const int64_t n = (int64_t)g->wrows * g->ldh;
    cudaError_t e = sw_cuda_alloc(&g->Wh, (size_t)n);
    if (e == cudaSuccess) {
        rt_to_half<<<rt_blocks(n, RT_THREADS), RT_THREADS, 0, g->s>>>(W, g->wrows, cols, g->ldh,
                                                                      g->Wh);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->s);
    cudaFree(dA);
    if (dM)
        cudaFree(dM);
    SW_CU(e);
    return SW_OK;
}

extern "C" sw_status sw_rtc_gpu_set_gains(sw_rtc *r, const float *scale)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    const sw_controller *c = r->ctrl;
    if (!g->kp || !g->ki)
        return SW_OK;
    SW_CU(cudaSetDevice(r->ctx->device));
    /* the integrals: down, times scale (bumpless, as controller.c), up; off the real-time path */
    float *integ = (float *)malloc((size_t)g->nmodes * sizeof(float));
    if (!integ)
        return sw_fail(r->ctx, SW_ENOMEM, "rtc: out of memory");
    cudaError_t e = cudaMemcpyAsync(integ, g->integ, (size_t)g->nmodes * sizeof(float),
                                    cudaMemcpyDeviceToHost, g->s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->s);
    if (e == cudaSuccess) {
        for (int32_t j = 0; j < g->nmodes; j++)
            integ[j] *= scale[j];
        e = cudaMemcpyAsync(g->integ, integ, (size_t)g->nmodes * sizeof(float),
                            cudaMemcpyHostToDevice, g->s);
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->s);
    free(integ);
    SW_CU(e);
    SW_CU(cudaMemcpyAsync(g->kp, c->kp, (size_t)g->nmodes * sizeof(float), cudaMemcpyHostToDevice,
                          g->s));
    SW_CU(cudaMemcpyAsync(g->ki, c->ki, (size_t)g->nmodes * sizeof(float), cudaMemcpyHostToDevice,
                          g->s));
    SW_CU(cudaStreamSynchronize(g->s));
    return SW_OK;
}

extern "C" void sw_rtc_gpu_destroy(sw_rtc *r)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    if (!g)
        return;
    cudaSetDevice(r->ctx->device);
    if (g->s)
        cudaStreamSynchronize(g->s);
    sw_graph_destroy(&g->graph);
    if (g->blas)
        cublasDestroy(g->blas);
    SW_CUDA_FREE(g->blas_ws, g->slopes, g->W, g->Wh, g->B, g->kp, g->ki, g->integ, g->e, g->v, g->u,
                 g->slope_l, g->d, g->Z, g->rf, g->zpart);
    sw_image_free(&g->frame);
    if (g->ev_cmd)
        cudaEventDestroy(g->ev_cmd);
    cudaGetLastError();
    free(g);
    r->gpu_state = NULL;
}

extern "C" sw_status sw_rtc_gpu_create(sw_rtc *r)
{
    rtc_gpu *g = (rtc_gpu *)calloc(1, sizeof(rtc_gpu));
    if (!g)
        return sw_fail(r->ctx, SW_ENOMEM, "rtc: out of memory");
    r->gpu_state = g; /* sw_rtc_gpu_destroy frees what is made below, also after a failure */
    SW_CU(cudaSetDevice(r->ctx->device));
    g->s = (cudaStream_t)r->ctx->stream;
    cudaStream_t s = g->s;
    const sw_rtc_params *p = &r->p;
    const sw_controller *c = r->ctrl;

    /* the frame buffer and the centroid stage's device result (slopes only) */
    SW_TRY(sw_image_alloc_device(r->ctx, p->centroid.width, p->centroid.height, p->centroid.type,
                                 &g->frame));
    const int32_t n2 = 2 * r->ns, xpad = (n2 + 7) / 8 * 8;
    SW_CU(sw_cuda_alloc(&g->slopes, (size_t)xpad));
    SW_CU(cudaMemsetAsync(g->slopes, 0, (size_t)xpad * sizeof(float), s));
    g->cres.frames = 1;
    g->cres.lenslets = r->nx * r->ny;
    g->cres.nslopes = r->ns;
    g->cres.memory = SW_MEM_DEVICE;
    g->cres.slopes = g->slopes;

    /* the controller's parameters (as controller.c reads them), its copies and its state */
    g->kind = c->p.kind;
    g->gain = (float)c->p.gain;
    g->keep = c->p.kind == SW_CTRL_LEAKY ? (float)(1.0 - c->p.leak) : 1.0f;
    g->clip = c->p.clip > 0.0 ? (float)c->p.clip : 0.0f;
    SW_CU(sw_cuda_alloc(&g->u, (size_t)r->nact));
    if (g->kind == SW_CTRL_PI) {
        g->nmodes = c->nmodes;
        if (c->modes)
            SW_CU(sw_cuda_upload(&g->B, (const float *)c->modes, (size_t)r->nact * g->nmodes, s));
        SW_CU(sw_cuda_upload(&g->kp, (const float *)c->kp, (size_t)g->nmodes, s));
        SW_CU(sw_cuda_upload(&g->ki, (const float *)c->ki, (size_t)g->nmodes, s));
        SW_CU(sw_cuda_alloc(&g->integ, (size_t)g->nmodes));
        SW_CU(sw_cuda_alloc(&g->e, (size_t)g->nmodes));
        SW_CU(sw_cuda_alloc(&g->v, (size_t)g->nmodes));
        if (c->modes && g->clip > 0.0f)
            SW_CU(sw_cuda_alloc(&g->d, (size_t)r->nact));
    }
    /* the unseen-mode filter of a CORNERS / LOCAL chain (rtc.c folded it into a matrix) */
    if (c->p.nfilter > 0) {
        if (c->p.nfilter > RT_MAX_FILTER)
            return sw_fail(r->ctx, SW_EUNSUPPORTED,
                           "rtc: the GPU chain filters up to %d unseen modes per frame (%d given)",
                           RT_MAX_FILTER, (int)c->p.nfilter);
        g->nfilter = c->p.nfilter;
        SW_CU(sw_cuda_upload(&g->Z, (const float *)c->filter, (size_t)r->nact * g->nfilter, s));
        SW_CU(sw_cuda_alloc(&g->rf, (size_t)r->nact));
        SW_CU(sw_cuda_alloc(&g->zpart, (size_t)rt_blocks(r->nact, RT_THREADS) * g->nfilter));
    }

    /* cuBLAS on the context's stream with a workspace of its own (after cublasSetStream, which
     * resets it), so that the capture allocates nothing */
    SW_TRY(sw_cublas_create(r->ctx, SW_CUDA_STAGE, s, RT_BLAS_WS, &g->blas, &g->blas_ws));

    /* the reconstructor */
    if (p->recon == SW_RTC_MVM) {
        g->x = g->slopes;
        SW_TRY(rt_make_matrix(r, r->cm, n2, p->fp16 ? 1 : 0));
    } else {
        SW_CU(sw_cuda_upload(&g->slope_l, (const int32_t *)r->slope_l, (size_t)r->ns, s));
        /* lenslets outside the mask: 0 for good (the scatter writes only the mask's) */
        SW_CU(cudaMemsetAsync(sw_sabre_gpu_slopes(r->sabre), 0,
                              (size_t)2 * r->nx * r->ny * sizeof(float), s));
        if (p->projection == SW_RTC_PROJ_GLOBAL) {
            g->x = sw_sabre_gpu_values(r->sabre);
            SW_TRY(rt_make_matrix(r, r->proj, (int32_t)r->nvalues, 0));
        }
    }
    SW_CU(cudaEventCreateWithFlags(&g->ev_cmd, cudaEventDisableTiming));

    /* one plain pass (loads the kernels and cuBLAS's), the state back to 0, then the graph */
    SW_TRY(rt_enqueue(r));
    SW_CU(cudaStreamSynchronize(s));
    SW_TRY(rt_zero_state(r));
    SW_CU(cudaStreamSynchronize(s));
    memset(r->commands, 0, (size_t)r->nact * sizeof(float));
    memset(r->slopes, 0, (size_t)n2 * sizeof(float));
    SW_TRY(rt_capture(r));
    SW_CU(cudaStreamSynchronize(s));
    return SW_OK;
}

/* ================================================================== runs */

extern "C" sw_status sw_rtc_gpu_run(sw_rtc *r, const sw_image *frame)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    SW_CU(cudaSetDevice(r->ctx->device));
    const size_t row = (size_t)frame->width * sw_pixel_size(frame->type);
    const cudaMemcpyKind kind =
        frame->memory == SW_MEM_DEVICE ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    SW_CU(cudaMemcpy2DAsync(g->frame.data, g->frame.stride, frame->data, frame->stride, row,
                            (size_t)frame->height, kind, g->s));
    SW_CU(cudaGraphLaunch(g->graph.exec, g->s));
    /* the commands' copy is the graph's last node. With telemetry, an event after the graph and
     * the slopes' copy behind it: the run waits for the event only (the commands are in
     * r->commands), and rtc.c waits for the stream (sw_rtc_gpu_finish) before it writes the
     * telemetry slot. (Recorded outside the graph: an event record captured with
     * cudaEventRecordExternal is refused in the plain pass before the capture.) */
    if (r->tslots > 0) {
        SW_CU(cudaEventRecord(g->ev_cmd, g->s));
        SW_CU(cudaMemcpyAsync(r->slopes, g->slopes, (size_t)2 * r->ns * sizeof(float),
                              cudaMemcpyDeviceToHost, g->s));
        SW_CU(cudaEventSynchronize(g->ev_cmd));
    } else {
        SW_CU(cudaStreamSynchronize(g->s));
    }
    return SW_OK;
}

extern "C" sw_status sw_rtc_gpu_finish(sw_rtc *r)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    SW_CU(cudaStreamSynchronize(g->s));
    return SW_OK;
}

extern "C" sw_status sw_rtc_gpu_reset(sw_rtc *r)
{
    SW_CU(cudaSetDevice(r->ctx->device));
    return rt_zero_state(r);
}

extern "C" sw_status sw_rtc_gpu_slopes(sw_rtc *r, float *host)
{
    rtc_gpu *g = (rtc_gpu *)r->gpu_state;
    SW_CU(cudaMemcpyAsync(host, g->slopes, (size_t)2 * r->ns * sizeof(float),
                          cudaMemcpyDeviceToHost, g->s));
    SW_CU(cudaStreamSynchronize(g->s));
    return SW_OK;
}

/* ================================================================== for the multi-GPU chain */

/* rtc_multi_cuda.cu runs these very kernels on each GPU's rows, so that a command is computed by
 * the same code as here (loop_internal.h). */
extern "C" int sw_rtc_gpu_gemv_half(const void *Wh, int32_t rows, int32_t ldh, const float *x,
                                    float *y, int update, float gain, float keep, float clip,
                                    void *stream)
{
    if (rows < 1)
        return (int)cudaSuccess;
    const unsigned blocks = rt_blocks(rows, RT_GEMV_WARPS);
    if (update)
        rt_gemv_half<1><<<blocks, RT_GEMV_WARPS * 32, 0, (cudaStream_t)stream>>>(
            (const __half *)Wh, rows, ldh, x, y, gain, keep, clip);
    else
        rt_gemv_half<0><<<blocks, RT_GEMV_WARPS * 32, 0, (cudaStream_t)stream>>>(
            (const __half *)Wh, rows, ldh, x, y, 0.0f, 0.0f, 0.0f);
    return (int)cudaGetLastError();
}

extern "C" int sw_rtc_gpu_update(float *u, const float *r, int32_t n, float gain, float keep,
                                 float clip, void *stream)
{
    if (n < 1)
        return (int)cudaSuccess;
    rt_update<<<rt_blocks(n, RT_THREADS), RT_THREADS, 0, (cudaStream_t)stream>>>(u, r, n, gain,
                                                                                 keep, clip);
    return (int)cudaGetLastError();
}

extern "C" int sw_rtc_gpu_clip(float *u, int32_t n, float clip, void *stream)
{
    if (n < 1)
        return (int)cudaSuccess;
    rt_clip<<<rt_blocks(n, RT_THREADS), RT_THREADS, 0, (cudaStream_t)stream>>>(u, n, clip);
    return (int)cudaGetLastError();
}

extern "C" int sw_rtc_gpu_to_half(const float *src, int32_t rows, int32_t cols, int32_t ldh,
                                  void *dst, void *stream)
{
    const int64_t n = (int64_t)rows * ldh;
    if (n < 1)
        return (int)cudaSuccess;
    rt_to_half<<<rt_blocks(n, RT_THREADS), RT_THREADS, 0, (cudaStream_t)stream>>>(
        src, rows, cols, ldh, (__half *)dst);
    return (int)cudaGetLastError();
}
