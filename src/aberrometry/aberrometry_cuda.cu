/*
 * The GPU twin of the aberrometry pipeline (aberrometry.h steps 1-6; seed 001 Sec. 3: pupil
 * tracking, PAPyCS with the dynamic mesh and the discarding stage, the Zernike fit, all on the
 * GPU). aberrometry.c's CPU pipeline (cpu_frame) is the reference; the arithmetic both share is
 * ab_model.h, and this file is compiled with -fmad=false, so the lenslet classes and the design
 * matrix are bit-identical to the CPU's; the solves differ (cuBLAS / cuSOLVER against OpenBLAS /
 * LAPACKE), so the coefficients agree to rounding and so do the second search's start positions.
 *
 * A frame on slot k is queued on the slot's stream with no host synchronisation
 * (sw_ab_gpu_enqueue), in this order:
 *   1. sw_pupil_gpu_enqueue: the frame's one copy in and the pupil tracker's graph (pupil.h),
 *      which leaves the pupils and the lenslet mask in device memory;
 *   2. ab_select_kernel (one thread per lenslet): the eye of each lenslet, its class (used /
 *      central, ab_model.h steps 2 and 3a), the first search's active flags, per-eye counts;
 *   2'. ab_design_kernel (one warp per lenslet, on the slot's side stream, concurrently with the
 *      first search): the design matrix D of step 5 for every used lenslet, column-major with
 *      2 nl rows (x rows, then y rows), zero rows for the others;
 *   3. sw_search_run(search1): PAPYCS of the central lenslets from the reference centroids (the
 *      static central mesh, seed Sec. 3.2.1);
 *   4. the preliminary fit per eye (step 3b): ab_rows_kernel masks D and the slopes to the central
 *      spots found, then D^T D (cublasDgemm), D^T s (cublasDgemv), Cholesky (cusolverDnDpotrf,
 *      cusolverDnDpotrs);
 *   5. the dynamic mesh (step 3c, seed Sec. 3.2.1 "the multiplication ... using CUBLAS"): D_p c_p
 *      (cublasDgemv over every used lenslet) and ab_start_kernel: start = reference + D_p c_p for
 *      the eyes whose preliminary fit was solved, inactive otherwise;
 *   6. sw_search_run(search2): the plan's algorithm from those starts, with discarding;
 *   7. the final fit per eye (step 5) likewise over orders 1 .. order with the kept spots, the
 *      residual D c (cublasDgemv), and ab_finish_kernel: sw_ab_raw (failures in the order of
 *      aberrometry_internal.h, counts, coefficients, residual RMS) in device memory, then ONE
 *      cudaMemcpyAsync into the slot's pinned sw_ab_raw (the small copy out).
 *   Without the dynamic mesh (prelim_order 0, or CoM / Reichenbach) steps 3-5 are left out and
 *   the select kernel sets the one search's start (the reference centroids) and active flags.
 * Every step runs for every frame whatever the data (the host decides nothing per frame): a
 * frame without a pupil or without spots gives zero rows, zero normal matrices (potrf info > 0),
 * and the finish kernel reports the first failure that applies, decided from the counts and the
 * potrf infos exactly as the CPU decides it.
 *
 * Steps 2-7 are captured into one CUDA graph per slot on the slot's second frame (the first runs
 * with plain launches, which also loads the libraries' kernels) and replayed from then on; cuBLAS
 * works in the capture on a workspace of its own (cublasSetWorkspace). Should the capture fail
 * (a library call that cannot be captured), the slot logs a warning and keeps plain launches,
 * which queue the same work in the same order.
 *
 * Timing (sw_aberrometry_enable_timing): events before the copy in, after the pupil graph, after
 * the preliminary fit, after the second search and after the copy out (external event nodes in
 * the graph), read after the collect.
 */
#include "aberrometry/aberrometry_internal.h"
#include "pupil/pupil_internal.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define AB_CU(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return sw_fail(ctx, e_ == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,            \
                           "aberrometry: CUDA call %s failed: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

#define AB_BLAS(call)                                                                              \
    do {                                                                                           \
        cublasStatus_t e_ = (call);                                                                \
        if (e_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return sw_fail(ctx, e_ == CUBLAS_STATUS_ALLOC_FAILED ? SW_ENOMEM : SW_ECUDA,           \
                           "aberrometry: cuBLAS call %s failed (%d)", #call, (int)e_);             \
    } while (0)

#define AB_SOLVER(call)                                                                            \
    do {                                                                                           \
        cusolverStatus_t e_ = (call);                                                              \
        if (e_ != CUSOLVER_STATUS_SUCCESS)                                                         \
            return sw_fail(ctx, e_ == CUSOLVER_STATUS_ALLOC_FAILED ? SW_ENOMEM : SW_ECUDA,         \
                           "aberrometry: cuSOLVER call %s failed (%d)", #call, (int)e_);           \
    } while (0)

#define AB_TRY(expr)                                                                               \
    do {                                                                                           \
        sw_status st_ = (expr);                                                                    \
        if (st_ != SW_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

#define AB_THREADS      256 /* one-thread-per-lenslet kernels: threads per block            */
#define AB_DESIGN_WARPS 2   /* design kernel: lenslets (warps) per block                     */
#define AB_POINTS       24  /* design kernel: 6 Gauss-Legendre nodes x 4 square edges        */
#define AB_BLAS_WS      ((size_t)4 << 20) /* cuBLAS workspace per slot (graph capture)      */

/* The 6-node Gauss-Legendre rule of ab_model.h's sw_ab_mean_grad (the same digits). */
__device__ const double ab_gl_u[6] = {-0.9324695142031520278123016, -0.6612093864662645136613996,
                                      -0.2386191860831969086305017, 0.2386191860831969086305017,
                                      0.6612093864662645136613996,  0.9324695142031520278123016};
__device__ const double ab_gl_w[6] = {0.1713244923791703450402961, 0.3607615730481386075698335,
                                      0.4679139345726910473898703, 0.4679139345726910473898703,
                                      0.3607615730481386075698335, 0.1713244923791703450402961};

/* What the kernels count per frame (zeroed by one memset at the start of steps 2-7), and the
 * cuSOLVER infos. */
struct ab_counts {
    int lenslets[2];      /* used lenslets per eye (step 2)                           */
    int central[2];       /* of which central (step 3a)                               */
    int central_found[2]; /* central with the first search's status OK (step 3b rows) */
    int kept[2];          /* final search: status OK (step 5 rows)                    */
    int discarded[2][3];  /* final search: SW_SPOT_EMPTY, SPACING, ISOLATED           */
    int info_p[2];        /* potrf of the preliminary fit                             */
    int info_f[2];        /* potrf of the final fit                                   */
    int info_ps[2];       /* potrs of the preliminary fit                             */
    int info_fs[2];       /* potrs of the final fit                                   */
};

/* Everything the kernels read, by value. */
struct ab_dev {
    sw_sh_geometry g; /* valid = NULL */
    int32_t nl, n_eyes, J, Jp, dynamic;
    double fit_radius, central_fraction;
    const uint8_t *mask;            /* the tracker's lenslet mask (device)   */
    const sw_pupil_ellipse *pupils; /* the tracker's pupils (device)         */
    double *refx, *refy;            /* reference centroids, nl each           */
    uint8_t *cls, *eye;             /* SW_AB_LENSLET_*, 0 / 1 / 2, nl each    */
    uint8_t *act1, *act2;           /* the searches' active flags             */
    uint8_t *st1, *st;              /* the searches' statuses                 */
    double *x1, *y1, *x, *y;        /* the searches' centroids                */
    double *sx, *sy;                /* the final search's start               */
    double *D;                      /* 2 nl x (J - 1), column-major           */
    double *A[2], *s[2];            /* per eye: a fit's masked rows and slopes */
    double *r[2], *pred[2];         /* per eye: D c (residual), D_p c_p       */
    double *bp[2], *bf[2];          /* per eye: preliminary / final solutions */
    ab_counts *cnt;
    sw_ab_raw *raw;
};

/* A slot's device state (slot->gpu). */
struct ab_gpu {
    cudaStream_t stream, side; /* the slot's stream; the side stream of the design kernel  */
    cudaEvent_t fork, join;    /* side stream: after the select kernel / after the design  */
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    void *blas_ws;
    double *work; /* potrf workspace */
    int lwork;
    double *G[2];     /* per eye: the normal matrix (m x m), factorised in place */
    ab_dev d;         /* the device buffers (owned: freed here)                  */
    sw_image frame;   /* the pupil plan's tight device copy of the frame, as an image */
    sw_ab_raw *h_raw; /* pinned: the copy out                                */
    cudaEvent_t ev[SW_AB_STAGES + 1];
    int timed;         /* the last frame recorded ev                          */
    cudaGraph_t graph; /* steps 2-7 */
    cudaGraphExec_t exec;
    int graph_timing; /* the captured graph records ev[2..4]                 */
    int no_graph;     /* a capture failed: plain launches from then on       */
    int64_t runs;
};

/* ================================================================== kernels */

/* Adds a block's counts (shared, n of them) to the frame's (global). */
__device__ __forceinline__ void ab_flush_counts(const int *part, int *const *dst, int n)
{
    __syncthreads();
    if ((int)threadIdx.x < n && part[threadIdx.x] != 0)
        atomicAdd(dst[threadIdx.x], part[threadIdx.x]);
}

/* Steps 1-3a per lenslet (ab_model.h, as cpu_frame): the eye from the tracker's mask (value
 * e + 1, pupil e found), the class from the eye's analysis circle; central only with the dynamic
 * mesh. The first search's active flags (central); without the dynamic mesh the one search's
 * start (reference centroids of the used lenslets, NaN elsewhere) and active flags. */
__global__ void __launch_bounds__(AB_THREADS) ab_select_kernel(ab_dev d)
{
    __shared__ int part[4]; /* lenslets[2], central[2] */
    if (threadIdx.x < 4)
        part[threadIdx.x] = 0;
    __syncthreads();
    const int32_t l = (int32_t)(blockIdx.x * AB_THREADS + threadIdx.x);
    if (l < d.nl) {
        int cls = SW_AB_LENSLET_UNUSED, eye = 0;
        const uint8_t m = d.mask[l];
        if (m >= 1 && (int)m <= d.n_eyes && d.pupils[m - 1].valid) {
            double cx, cy, r;
            sw_ab_circle(&d.pupils[m - 1], d.fit_radius, &cx, &cy, &r);
            cls = sw_ab_lenslet_class(&d.g, l % d.g.nx, l / d.g.nx, m, d.refx[l], d.refy[l], cx, cy,
                                      r, d.central_fraction);
            if (cls != SW_AB_LENSLET_UNUSED) {
                if (!d.dynamic)
                    cls = SW_AB_LENSLET_USED; /* no central mesh */
                eye = m;
                atomicAdd(&part[m - 1], 1);
                if (cls == SW_AB_LENSLET_CENTRAL)
                    atomicAdd(&part[2 + m - 1], 1);
            }
        }
        d.cls[l] = (uint8_t)cls;
        d.eye[l] = (uint8_t)eye;
        d.act1[l] = cls == SW_AB_LENSLET_CENTRAL;
        if (!d.dynamic) {
            d.act2[l] = eye != 0;
            d.sx[l] = eye ? d.refx[l] : NAN;
            d.sy[l] = eye ? d.refy[l] : NAN;
        }
    }
    int *dst[4] = {&d.cnt->lenslets[0], &d.cnt->lenslets[1], &d.cnt->central[0],
                   &d.cnt->central[1]};
    ab_flush_counts(part, dst, 4);
}

/*
 * Step 5's model (ab_model.h sw_ab_design_rows, seed Sec. 3.3): one warp per lenslet. The 24
 * points of sw_ab_mean_grad (6 Gauss-Legendre nodes on each of the square's 4 edges) are spread
 * over lanes 0-23, each evaluating all J terms there (sw_ab_zernike_all) into shared memory;
 * then each lane finishes its columns j with the same sums in the same order as sw_ab_mean_grad
 * (node 0 first), the division by 2 h and the row scale, so the rows are bit-identical to the
 * CPU's. Unused lenslets get zero rows.
 */
__global__ void __launch_bounds__(32 * AB_DESIGN_WARPS) ab_design_kernel(ab_dev d)
{
    __shared__ double z[AB_DESIGN_WARPS][AB_POINTS][SW_AB_MAX_TERMS];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int32_t l = (int32_t)blockIdx.x * AB_DESIGN_WARPS + warp;
    if (l >= d.nl)
        return; /* the whole warp */
    const int32_t J = d.J, nl = d.nl;
    const size_t ld = 2 * (size_t)nl;
    const int e = d.eye[l];
    if (e == 0) {
        for (int32_t j = lane; j < J - 1; j += 32) {
            d.D[(size_t)j * ld + l] = 0.0;
            d.D[(size_t)j * ld + nl + l] = 0.0;
        }
        return;
    }
    double cx, cy, R, xr, yr;
    sw_ab_circle(&d.pupils[e - 1], d.fit_radius, &cx, &cy, &R);
    sw_ab_ref_pos(&d.g, l % d.g.nx, l / d.g.nx, &xr, &yr);
    const double X = (xr - cx) / R, Y = (yr - cy) / R, h = d.g.pitch_px / R;
    const double half = 0.5 * h;
    if (lane < AB_POINTS) {
        const int i = lane >> 2, edge = lane & 3;
        const double along = ab_gl_u[i] * half;
        double px, py;
        if (edge == 0) { /* d/dX: the right edge ... */
            px = X + half;
            py = Y + along;
        } else if (edge == 1) { /* ... minus the left edge */
            px = X - half;
            py = Y + along;
        } else if (edge == 2) { /* d/dY: the top edge ... */
            px = X + along;
            py = Y + half;
        } else { /* ... minus the bottom edge */
            px = X + along;
            py = Y - half;
        }
        sw_ab_zernike_all(J, px, py, z[warp][lane]);
    }
    __syncwarp();
    const double den = 2.0 * h, scale = sw_ab_row_scale(&d.g, R);
    for (int32_t j = 1 + lane; j < J; j += 32) {
        double gx = 0.0, gy = 0.0;
        for (int i = 0; i < 6; i++) {
            gx += ab_gl_w[i] * (z[warp][4 * i][j] - z[warp][4 * i + 1][j]);
            gy += ab_gl_w[i] * (z[warp][4 * i + 2][j] - z[warp][4 * i + 3][j]);
        }
        gx = gx / den;
        gy = gy / den;
        d.D[(size_t)(j - 1) * ld + l] = scale * gx;
        d.D[(size_t)(j - 1) * ld + nl + l] = scale * gy;
    }
}

/*
 * A fit's rows for eye blockIdx.y (step 3b when FINAL is 0, step 5 when 1): the first m columns
 * of D and the slopes s = centroid - reference (pixels) for the lenslets in the fit (3b: the
 * eye's central lenslets that the first search found; 5: the eye's lenslets that the final
 * search kept), zero rows for the others, so that D^T D and D^T s are the CPU's sums over the
 * selected rows. Counts the rows (and the final search's discarded spots) per eye.
 */
template <int FINAL>
__global__ void __launch_bounds__(AB_THREADS) ab_rows_kernel(ab_dev d, int32_t m)
{
    __shared__ int part[4]; /* 3b: central_found; 5: kept, discarded[3] */
    if (threadIdx.x < 4)
        part[threadIdx.x] = 0;
    __syncthreads();
    const int e = (int)blockIdx.y;
    const int32_t l = (int32_t)(blockIdx.x * AB_THREADS + threadIdx.x), nl = d.nl;
    if (l < nl) {
        const size_t ld = 2 * (size_t)nl;
        double *A = d.A[e], *s = d.s[e];
        int sel = 0;
        if (d.eye[l] == e + 1) {
            if (FINAL) {
                const uint8_t st = d.st[l];
                sel = st == SW_SPOT_OK;
                if (sel)
                    atomicAdd(&part[0], 1);
                else if (st == SW_SPOT_EMPTY)
                    atomicAdd(&part[1], 1);
                else if (st == SW_SPOT_SPACING)
                    atomicAdd(&part[2], 1);
                else if (st == SW_SPOT_ISOLATED)
                    atomicAdd(&part[3], 1);
            } else {
                sel = d.cls[l] == SW_AB_LENSLET_CENTRAL && d.st1[l] == SW_SPOT_OK;
                if (sel)
                    atomicAdd(&part[0], 1);
            }
        }
        const double *cxs = FINAL ? d.x : d.x1, *cys = FINAL ? d.y : d.y1;
        s[l] = sel ? cxs[l] - d.refx[l] : 0.0;
        s[nl + l] = sel ? cys[l] - d.refy[l] : 0.0;
        for (int32_t j = 0; j < m; j++) {
            const size_t c = (size_t)j * ld;
            A[c + l] = sel ? d.D[c + l] : 0.0;
            A[c + nl + l] = sel ? d.D[c + nl + l] : 0.0;
        }
    }
    if (FINAL) {
        int *dst[4] = {&d.cnt->kept[e], &d.cnt->discarded[e][0], &d.cnt->discarded[e][1],
                       &d.cnt->discarded[e][2]};
        ab_flush_counts(part, dst, 4);
    } else {
        int *dst[1] = {&d.cnt->central_found[e]};
        ab_flush_counts(part, dst, 1);
    }
}

/* 1 when eye e's preliminary fit was solved: enough central slopes and a positive definite
 * normal matrix (the CPU's order of tests). */
__device__ __forceinline__ int ab_prelim_ok(const ab_dev &d, int e)
{
    return 2 * d.cnt->central_found[e] >= d.Jp - 1 && d.cnt->info_p[e] == 0;
}

/* Step 3c: the dynamic mesh. Lenslets of an eye whose preliminary fit was solved start at
 * reference + D_p c_p (the same expression as the CPU's); the others are not searched again. */
__global__ void __launch_bounds__(AB_THREADS) ab_start_kernel(ab_dev d)
{
    const int32_t l = (int32_t)(blockIdx.x * AB_THREADS + threadIdx.x), nl = d.nl;
    if (l >= nl)
        return;
    const int e = (int)d.eye[l] - 1;
    const int ok = e >= 0 && ab_prelim_ok(d, e);
    d.act2[l] = (uint8_t)ok;
    d.sx[l] = ok ? d.refx[l] + d.pred[e][l] : NAN;
    d.sy[l] = ok ? d.refy[l] + d.pred[e][nl + l] : NAN;
}

/*
 * The raw result of eye blockIdx.x (aberrometry_internal.h): the first failure in the order
 * NO_PUPIL, FEW_CENTRAL, SINGULAR (preliminary), FEW_SPOTS, SINGULAR (final), the counts, the
 * circle, the coefficients (piston 0; zeros where a fit was not solved) and the residual RMS of
 * D c - s over the kept slopes (the masked rows add 0 - 0).
 */
__global__ void __launch_bounds__(AB_THREADS) ab_finish_kernel(ab_dev d)
{
    __shared__ double part[AB_THREADS];
    const int e = (int)blockIdx.x, t = (int)threadIdx.x;
    const size_t rows = 2 * (size_t)d.nl;
    const double *r = d.r[e], *s = d.s[e];
    double ss = 0.0;
    for (size_t k = (size_t)t; k < rows; k += AB_THREADS) {
        const double v = r[k] - s[k];
        ss += v * v;
    }
    part[t] = ss;
    __syncthreads();
    for (int w = AB_THREADS / 2; w > 0; w >>= 1) {
        if (t < w)
            part[t] += part[t + w];
        __syncthreads();
    }

    const ab_counts *c = d.cnt;
    const sw_pupil_ellipse *pe = &d.pupils[e];
    int failure = SW_AB_OK, prelim_ok = 0;
    if (!pe->valid) {
        failure = SW_AB_NO_PUPIL;
    } else if (d.dynamic && 2 * c->central_found[e] < d.Jp - 1) {
        failure = SW_AB_FEW_CENTRAL;
    } else if (d.dynamic && c->info_p[e] != 0) {
        failure = SW_AB_SINGULAR;
    } else {
        prelim_ok = d.dynamic;
        if (2 * c->kept[e] < d.J - 1)
            failure = SW_AB_FEW_SPOTS;
        else if (c->info_f[e] != 0)
            failure = SW_AB_SINGULAR;
    }
    sw_ab_raw_eye *o = &d.raw->eye[e];
    for (int j = t; j < SW_AB_MAX_TERMS; j += AB_THREADS) {
        o->coef[j] = failure == SW_AB_OK && j >= 1 && j < d.J ? d.bf[e][j - 1] : 0.0;
        o->prelim[j] = prelim_ok && j >= 1 && j < d.Jp ? d.bp[e][j - 1] : 0.0;
    }
    if (t == 0) {
        o->failure = failure;
        o->lenslets = c->lenslets[e];
        o->central = c->central[e];
        o->kept = c->kept[e];
        o->found = c->kept[e] + c->discarded[e][0] + c->discarded[e][1] + c->discarded[e][2];
        for (int k = 0; k < 3; k++)
            o->discarded[k] = c->discarded[e][k];
        o->prelim_ok = prelim_ok;
        if (pe->valid) {
            sw_ab_circle(pe, d.fit_radius, &o->cx, &o->cy, &o->radius);
        } else {
            o->cx = o->cy = o->radius = 0.0;
        }
        o->residual = failure == SW_AB_OK ? sqrt(part[0] / (2.0 * (double)c->kept[e])) : 0.0;
    }
}

/* ================================================================== the frame */

static ab_gpu *gpu_of(const sw_aberrometry_plan *plan, int slot)
{
    return (ab_gpu *)plan->slot[slot].gpu;
}

static unsigned ab_blocks(int64_t n, int per)
{
    return (unsigned)((n + per - 1) / per);
}

/* One least-squares solve of step 5 for eye e on the rows ab_rows_kernel left in A[e], s[e]
 * (m columns): G = A^T A, b = A^T s, G = L L^T (potrf; *info > 0 when G is not positive
 * definite), b = G^-1 b (potrs). */
static sw_status ab_solve(sw_context *ctx, ab_gpu *g, int e, int32_t m, double *b, int *info,
                          int *info_s)
{
    const double one = 1.0, zero = 0.0;
    const int ld = 2 * g->d.nl;
    AB_BLAS(cublasDgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, m, ld, &one, g->d.A[e], ld, g->d.A[e],
                        ld, &zero, g->G[e], m));
    AB_BLAS(
        cublasDgemv(g->blas, CUBLAS_OP_T, ld, m, &one, g->d.A[e], ld, g->d.s[e], 1, &zero, b, 1));
    AB_SOLVER(cusolverDnDpotrf(g->solver, CUBLAS_FILL_MODE_LOWER, m, g->G[e], m, g->work, g->lwork,
                               info));
    AB_SOLVER(cusolverDnDpotrs(g->solver, CUBLAS_FILL_MODE_LOWER, m, 1, g->G[e], m, b, m, info_s));
    return SW_OK;
}

/* Records a timing event: an external event node under capture, a plain record otherwise. */
static cudaError_t ab_mark(cudaEvent_t ev, cudaStream_t s, int capturing)
{
    return capturing ? cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal)
                     : cudaEventRecord(ev, s);
}

/* Steps 2-7 on the slot's stream: plain launches, or (capturing 1) their capture into the slot's
 * graph. timing: record ev[2..4]. */
static sw_status ab_body(sw_aberrometry_plan *plan, int slot, int timing, int capturing)
{
    sw_ab_slot *sl = &plan->slot[slot];
    sw_context *ctx = sl->ctx;
    ab_gpu *g = gpu_of(plan, slot);
    const ab_dev &d = g->d;
    cudaStream_t s = g->stream;
    const int32_t nl = d.nl, ld = 2 * nl, n_eyes = d.n_eyes;
    const double one = 1.0, zero = 0.0;
    const unsigned per_lenslet = ab_blocks(nl, AB_THREADS);

    /* 2: the lenslets' eyes and classes; 2': the design rows, beside the first search */
    AB_CU(cudaMemsetAsync(d.cnt, 0, sizeof(ab_counts), s));
    ab_select_kernel<<<per_lenslet, AB_THREADS, 0, s>>>(d);
    AB_CU(cudaGetLastError());
    AB_CU(cudaEventRecord(g->fork, s));
    AB_CU(cudaStreamWaitEvent(g->side, g->fork, 0));
    ab_design_kernel<<<ab_blocks(nl, AB_DESIGN_WARPS), 32 * AB_DESIGN_WARPS, 0, g->side>>>(d);
    AB_CU(cudaGetLastError());
    AB_CU(cudaEventRecord(g->join, g->side));

    if (plan->dynamic) {
        /* 3: the static central mesh from the reference centroids */
        AB_TRY(sw_search_run(sl->search1, &g->frame, d.refx, d.refy, d.act1, SW_MEM_DEVICE, d.x1,
                             d.y1, NULL, d.st1));
        AB_CU(cudaStreamWaitEvent(s, g->join, 0));
        /* 4: the preliminary fit per eye */
        const int32_t mp = plan->Jp - 1;
        ab_rows_kernel<0><<<dim3(per_lenslet, (unsigned)n_eyes), AB_THREADS, 0, s>>>(d, mp);
        AB_CU(cudaGetLastError());
        for (int e = 0; e < n_eyes; e++)
            AB_TRY(ab_solve(ctx, g, e, mp, d.bp[e], &d.cnt->info_p[e], &d.cnt->info_ps[e]));
        /* 5: the dynamic mesh: D_p c_p over every used lenslet, plus the reference */
        for (int e = 0; e < n_eyes; e++)
            AB_BLAS(cublasDgemv(g->blas, CUBLAS_OP_N, ld, mp, &one, d.D, ld, d.bp[e], 1, &zero,
                                d.pred[e], 1));
        ab_start_kernel<<<per_lenslet, AB_THREADS, 0, s>>>(d);
        AB_CU(cudaGetLastError());
    } else {
        AB_CU(cudaStreamWaitEvent(s, g->join, 0));
    }
    if (timing)
        AB_CU(ab_mark(g->ev[2], s, capturing));

    /* 6: the search of every used lenslet (with discarding as the plan says) */
    AB_TRY(sw_search_run(sl->search2, &g->frame, d.sx, d.sy, d.act2, SW_MEM_DEVICE, d.x, d.y, NULL,
                         d.st));
    if (timing)
        AB_CU(ab_mark(g->ev[3], s, capturing));

    /* 7: the final fit per eye, its residual, the raw result and its copy out */
    const int32_t m = plan->J - 1;
    ab_rows_kernel<1><<<dim3(per_lenslet, (unsigned)n_eyes), AB_THREADS, 0, s>>>(d, m);
    AB_CU(cudaGetLastError());
    for (int e = 0; e < n_eyes; e++) {
        AB_TRY(ab_solve(ctx, g, e, m, d.bf[e], &d.cnt->info_f[e], &d.cnt->info_fs[e]));
        AB_BLAS(cublasDgemv(g->blas, CUBLAS_OP_N, ld, m, &one, d.A[e], ld, d.bf[e], 1, &zero,
                            d.r[e], 1));
    }
    ab_finish_kernel<<<(unsigned)n_eyes, AB_THREADS, 0, s>>>(d);
    AB_CU(cudaGetLastError());
    AB_CU(cudaMemcpyAsync(g->h_raw, d.raw, sizeof(sw_ab_raw), cudaMemcpyDeviceToHost, s));
    if (timing)
        AB_CU(ab_mark(g->ev[4], s, capturing));
    return SW_OK;
}

static void ab_drop_graph(ab_gpu *g)
{
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    if (g->graph)
        cudaGraphDestroy(g->graph);
    g->exec = NULL;
    g->graph = NULL;
}

/* Captures ab_body into the slot's graph (the capture is always ended, so that the stream is
 * usable again whatever failed inside). */
static sw_status ab_capture(sw_aberrometry_plan *plan, int slot, int timing)
{
    sw_context *ctx = plan->slot[slot].ctx;
    ab_gpu *g = gpu_of(plan, slot);
    AB_CU(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal));
    const sw_status st = ab_body(plan, slot, timing, 1);
    cudaGraph_t graph = NULL;
    const cudaError_t e = cudaStreamEndCapture(g->stream, &graph);
    if (st != SW_OK || e != cudaSuccess) {
        if (graph)
            cudaGraphDestroy(graph);
        cudaGetLastError();
        if (st != SW_OK)
            return st;
        return sw_fail(ctx, SW_ECUDA, "aberrometry: capturing the frame's graph failed: %s",
                       cudaGetErrorString(e));
    }
    const cudaError_t ei = cudaGraphInstantiate(&g->exec, graph, 0);
    if (ei != cudaSuccess) {
        cudaGraphDestroy(graph);
        g->exec = NULL;
        cudaGetLastError();
        return sw_fail(ctx, SW_ECUDA, "aberrometry: instantiating the frame's graph failed: %s",
                       cudaGetErrorString(ei));
    }
    g->graph = graph;
    g->graph_timing = timing;
    return SW_OK;
}

/* ================================================================== the API */

extern "C" void sw_ab_gpu_free(sw_aberrometry_plan *plan, int slot)
{
    ab_gpu *g = gpu_of(plan, slot);
    if (!g)
        return;
    sw_context *ctx = plan->slot[slot].ctx;
    cudaSetDevice(ctx->device);
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    if (g->side)
        cudaStreamSynchronize(g->side);
    ab_drop_graph(g);
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->solver)
        cusolverDnDestroy(g->solver);
    ab_dev *d = &g->d;
    void *dev[] = {d->refx,    d->refy,    d->cls,   d->eye,   d->act1,   d->act2,  d->st1,
                   d->st,      d->x1,      d->y1,    d->x,     d->y,      d->sx,    d->sy,
                   d->D,       d->A[0],    d->A[1],  d->s[0],  d->s[1],   d->r[0],  d->r[1],
                   d->pred[0], d->pred[1], d->bp[0], d->bp[1], d->bf[0],  d->bf[1], d->cnt,
                   d->raw,     g->G[0],    g->G[1],  g->work,  g->blas_ws};
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
        if (dev[k])
            cudaFree(dev[k]);
    if (g->h_raw)
        cudaFreeHost(g->h_raw);
    for (int k = 0; k <= SW_AB_STAGES; k++)
        if (g->ev[k])
            cudaEventDestroy(g->ev[k]);
    if (g->fork)
        cudaEventDestroy(g->fork);
    if (g->join)
        cudaEventDestroy(g->join);
    if (g->side)
        cudaStreamDestroy(g->side);
    free(g);
    plan->slot[slot].gpu = NULL;
}

/* cudaMalloc of n elements (at least one), zeroed on the stream. */
template <typename V> static sw_status ab_alloc(sw_context *ctx, cudaStream_t s, V **dst, size_t n)
{
    const size_t bytes = (n ? n : 1) * sizeof(V);
    AB_CU(cudaMalloc((void **)dst, bytes));
    AB_CU(cudaMemsetAsync(*dst, 0, bytes, s));
    return SW_OK;
}

extern "C" sw_status sw_ab_gpu_init(sw_aberrometry_plan *plan, int slot)
{
    sw_ab_slot *sl = &plan->slot[slot];
    sw_context *ctx = sl->ctx;
    ab_gpu *g = (ab_gpu *)calloc(1, sizeof *g);
    if (!g)
        return sw_fail(ctx, SW_ENOMEM, "aberrometry: out of memory");
    sl->gpu = g;
    AB_CU(cudaSetDevice(ctx->device));
    cudaStream_t s = (cudaStream_t)sw_context_stream(ctx);
    g->stream = s;
    AB_CU(cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking));
    AB_CU(cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming));
    AB_CU(cudaEventCreateWithFlags(&g->join, cudaEventDisableTiming));
    for (int k = 0; k <= SW_AB_STAGES; k++)
        AB_CU(cudaEventCreate(&g->ev[k]));

    const sw_aberrometry_params *p = &plan->p;
    ab_dev *d = &g->d;
    d->g = p->geometry;
    d->g.valid = NULL;
    d->nl = plan->nl;
    d->n_eyes = p->n_eyes;
    d->J = plan->J;
    d->Jp = plan->Jp;
    d->dynamic = plan->dynamic;
    d->fit_radius = p->fit_radius_px;
    d->central_fraction = p->central_fraction;
    d->mask = sw_pupil_gpu_lenslet_mask(sl->pupil);
    d->pupils = sw_pupil_gpu_pupils(sl->pupil);
    if (!d->mask || !d->pupils)
        return sw_fail(ctx, SW_EINTERNAL, "aberrometry: the pupil plan has no device lenslet mask");

    const size_t nl = (size_t)plan->nl, rows = 2 * nl, m = (size_t)(plan->J - 1);
    AB_TRY(ab_alloc(ctx, s, &d->refx, nl));
    AB_TRY(ab_alloc(ctx, s, &d->refy, nl));
    AB_TRY(ab_alloc(ctx, s, &d->cls, nl));
    AB_TRY(ab_alloc(ctx, s, &d->eye, nl));
    AB_TRY(ab_alloc(ctx, s, &d->act1, nl));
    AB_TRY(ab_alloc(ctx, s, &d->act2, nl));
    AB_TRY(ab_alloc(ctx, s, &d->st1, nl));
    AB_TRY(ab_alloc(ctx, s, &d->st, nl));
    AB_TRY(ab_alloc(ctx, s, &d->x1, nl));
    AB_TRY(ab_alloc(ctx, s, &d->y1, nl));
    AB_TRY(ab_alloc(ctx, s, &d->x, nl));
    AB_TRY(ab_alloc(ctx, s, &d->y, nl));
    AB_TRY(ab_alloc(ctx, s, &d->sx, nl));
    AB_TRY(ab_alloc(ctx, s, &d->sy, nl));
    AB_TRY(ab_alloc(ctx, s, &d->D, rows * m));
    for (int e = 0; e < p->n_eyes; e++) {
        AB_TRY(ab_alloc(ctx, s, &d->A[e], rows * m));
        AB_TRY(ab_alloc(ctx, s, &d->s[e], rows));
        AB_TRY(ab_alloc(ctx, s, &d->r[e], rows));
        AB_TRY(ab_alloc(ctx, s, &d->pred[e], rows));
        AB_TRY(ab_alloc(ctx, s, &d->bp[e], m));
        AB_TRY(ab_alloc(ctx, s, &d->bf[e], m));
        AB_TRY(ab_alloc(ctx, s, &g->G[e], m * m));
    }
    AB_TRY(ab_alloc(ctx, s, &d->cnt, (size_t)1));
    AB_TRY(ab_alloc(ctx, s, &d->raw, (size_t)1));
    AB_CU(cudaMemcpyAsync(d->refx, plan->ref_x, nl * sizeof(double), cudaMemcpyHostToDevice, s));
    AB_CU(cudaMemcpyAsync(d->refy, plan->ref_y, nl * sizeof(double), cudaMemcpyHostToDevice, s));
    AB_CU(cudaHostAlloc((void **)&g->h_raw, sizeof(sw_ab_raw), cudaHostAllocDefault));
    memset(g->h_raw, 0, sizeof(sw_ab_raw));

    /* The libraries, bound to the slot's stream; cuBLAS with its own workspace (needed to run
     * inside a graph capture; cublasSetStream resets it, so it comes after). */
    AB_BLAS(cublasCreate(&g->blas));
    AB_BLAS(cublasSetStream(g->blas, s));
    AB_CU(cudaMalloc(&g->blas_ws, AB_BLAS_WS));
    AB_BLAS(cublasSetWorkspace(g->blas, g->blas_ws, AB_BLAS_WS));
    AB_SOLVER(cusolverDnCreate(&g->solver));
    AB_SOLVER(cusolverDnSetStream(g->solver, s));
    int lwork = 0;
    AB_SOLVER(cusolverDnDpotrf_bufferSize(g->solver, CUBLAS_FILL_MODE_LOWER, (int)m, g->G[0],
                                          (int)m, &lwork));
    g->lwork = lwork > 0 ? lwork : 1;
    AB_TRY(ab_alloc(ctx, s, &g->work, (size_t)g->lwork));

    /* The searches' frame: the pupil plan's tight device copy (pupil_internal.h). */
    g->frame.width = p->width;
    g->frame.height = p->height;
    g->frame.stride = (size_t)p->width * sw_pixel_size(p->type);
    g->frame.type = p->type;
    g->frame.memory = SW_MEM_DEVICE;
    g->frame.owned = 0;
    g->frame.data = (void *)sw_pupil_gpu_frame(sl->pupil);
    AB_CU(cudaStreamSynchronize(s)); /* plan->ref_x is the host's, it may change */
    return SW_OK;
}

extern "C" sw_status sw_ab_gpu_enqueue(sw_aberrometry_plan *plan, int slot, const sw_image *frame)
{
    sw_ab_slot *sl = &plan->slot[slot];
    sw_context *ctx = sl->ctx;
    ab_gpu *g = gpu_of(plan, slot);
    const int timing = plan->timing != 0;
    AB_CU(cudaSetDevice(ctx->device));

    /* 1: the frame's copy in and the pupil tracker's graph */
    if (timing)
        AB_CU(cudaEventRecord(g->ev[0], g->stream));
    AB_TRY(sw_pupil_gpu_enqueue(sl->pupil, frame));
    if (timing)
        AB_CU(cudaEventRecord(g->ev[1], g->stream));

    /* 2-7: the slot's graph from its second frame on (captured again when timing was switched) */
    if (g->exec && g->graph_timing != timing)
        ab_drop_graph(g);
    if (!g->exec && !g->no_graph && g->runs > 0) {
        if (ab_capture(plan, slot, timing) != SW_OK) {
            g->no_graph = 1;
            sw_log(ctx, SW_LOG_WARN,
                   "aberrometry: stream %d runs without a CUDA graph (plain launches): %s", slot,
                   sw_context_error(ctx));
        } else {
            sw_log(ctx, SW_LOG_DEBUG, "aberrometry: stream %d: steps 2-7 captured in a graph",
                   slot);
        }
    }
    g->timed = 0;
    if (g->exec)
        AB_CU(cudaGraphLaunch(g->exec, g->stream));
    else
        AB_TRY(ab_body(plan, slot, timing, 0));
    g->timed = timing;
    g->runs++;
    return SW_OK;
}

extern "C" sw_status sw_ab_gpu_collect(sw_aberrometry_plan *plan, int slot, sw_pupil_result *pr,
                                       sw_ab_raw *raw)
{
    sw_ab_slot *sl = &plan->slot[slot];
    sw_context *ctx = sl->ctx;
    ab_gpu *g = gpu_of(plan, slot);
    AB_CU(cudaSetDevice(ctx->device));
    AB_CU(cudaStreamSynchronize(g->stream));
    sw_pupil_gpu_collect(sl->pupil, pr);
    *raw = *g->h_raw;
    return SW_OK;
}

extern "C" sw_status sw_ab_gpu_spots(sw_aberrometry_plan *plan, int slot, double *x, double *y,
                                     uint8_t *status, uint8_t *eye, double *x0, double *y0)
{
    sw_context *ctx = plan->slot[slot].ctx;
    ab_gpu *g = gpu_of(plan, slot);
    const ab_dev &d = g->d;
    cudaStream_t s = g->stream;
    const size_t nd = (size_t)d.nl * sizeof(double), nb = (size_t)d.nl;
    AB_CU(cudaSetDevice(ctx->device));
    if (x)
        AB_CU(cudaMemcpyAsync(x, d.x, nd, cudaMemcpyDeviceToHost, s));
    if (y)
        AB_CU(cudaMemcpyAsync(y, d.y, nd, cudaMemcpyDeviceToHost, s));
    if (status)
        AB_CU(cudaMemcpyAsync(status, d.st, nb, cudaMemcpyDeviceToHost, s));
    if (eye)
        AB_CU(cudaMemcpyAsync(eye, d.eye, nb, cudaMemcpyDeviceToHost, s));
    if (x0)
        AB_CU(cudaMemcpyAsync(x0, d.sx, nd, cudaMemcpyDeviceToHost, s));
    if (y0)
        AB_CU(cudaMemcpyAsync(y0, d.sy, nd, cudaMemcpyDeviceToHost, s));
    AB_CU(cudaStreamSynchronize(s));
    return SW_OK;
}

extern "C" void sw_ab_gpu_stage_us(const sw_aberrometry_plan *plan, int slot, double *us)
{
    const ab_gpu *g = gpu_of(plan, slot);
    for (int k = 0; k < SW_AB_STAGES; k++) {
        us[k] = -1.0;
        float ms = 0.0f;
        if (g && g->timed && cudaEventElapsedTime(&ms, g->ev[k], g->ev[k + 1]) == cudaSuccess)
            us[k] = 1000.0 * (double)ms;
        else
            cudaGetLastError();
    }
}
