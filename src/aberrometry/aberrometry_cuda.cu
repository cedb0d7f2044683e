/*
 * The GPU twin of the aberrometry pipeline (aberrometry.h steps 1-6; seed 001 Sec. 3: pupil
 * tracking, PAPyCS with the dynamic mesh and the discarding stage, the Zernike fit, all on the
 * GPU). aberrometry.c's CPU pipeline (cpu_frame) is the reference; the arithmetic both share is
 * ab_model.h, and this file is compiled with -fmad=false, so the lenslet stages and the design
 * matrix are bit-identical to the CPU's; the solves differ (the fused kernel below against
 * OpenBLAS / LAPACKE), so the coefficients agree to rounding and so do the start positions of
 * the dynamic mesh.
 *
 * A frame on slot k is queued on the slot's stream with no host synchronisation
 * (sw_ab_gpu_enqueue), in this order:
 *   1. sw_pupil_gpu_enqueue: the frame's copy in and the pupil tracker's graph (pupil.h), which
 *      leaves the pupils and the lenslet mask in device memory;
 *   2. ab_select_kernel (one thread per lenslet): the eye of each lenslet, its stage
 *      (ab_model.h, aberrometry.h steps 2-3), per-eye counts, and the first search's start
 *      (the reference centroids) and active flags (stage 0; every used lenslet without the
 *      dynamic mesh);
 *   2'. ab_design_kernel (one warp per lenslet, on the slot's side stream, concurrently with the
 *      first search): the design matrix D of step 5 for every used lenslet, column-major with
 *      2 nl rows (x rows, then y rows), zero rows for the others;
 *   3. the dynamic mesh (seed Sec. 3.2.1), stage k = 0 .. S - 1: sw_search_run of the lenslets
 *      of stages 0 .. k; ab_fit_kernel (one block per eye) fits orders 1 .. of stage k to the
 *      spots found (more where they carry more: sw_ab_stage_terms, decided in the kernel from
 *      the count of spots kept; the launch and the prediction hold the most terms, the columns
 *      beyond the fit's multiply zeros); D_k c_k (cublasDgemv over every used lenslet: the seed's
 * "multiplication ... using CUBLAS"); ab_start_kernel: the next search's start, reference + D_k
 * c_k, and its active flags, for the eyes whose fits so far were solved;
 *   4. sw_search_run: the plan's algorithm from those starts (the reference centroids without
 *      the dynamic mesh), with discarding;
 *   5. ab_fit_kernel, final: the mesh check, the fit of orders 1 .. order to the kept spots, the
 *      residual and sw_ab_raw (failures in the order of aberrometry_internal.h, counts,
 *      coefficients) in device memory, then ONE cudaMemcpyAsync into the slot's pinned sw_ab_raw.
 * Every step runs for every frame whatever the data (the host decides nothing per frame): an eye
 * without a pupil, or whose earlier fit failed, makes its fit blocks return at once and its
 * lenslets inactive, and the final block reports the first failure, as the CPU decides it.
 *
 * Why one fused kernel per fit: the normal equations of a fit are tiny (27 unknowns for order 6,
 * at most 65), and the library route (cuBLAS dgemm and dgemv for D^T D and D^T s, cuSOLVER potrf
 * and potrs, a dgemv for the residual, plus the kernels around them: about ten launches) cost
 * ~80 us per fit on the H100 (the lead's measurement), nearly all of it launch latency and
 * library overheads, not arithmetic (a 27 x 27 Cholesky is ~7000 flops). One block per eye does
 * it all in shared memory: the selection of rows, D^T D and D^T s, the Cholesky factorisation,
 * the two triangular solves and the residual. The prediction D_k c_k stays with cuBLAS.
 *
 * Steps 2-5 are captured into one CUDA graph per slot on the slot's second frame (the first runs
 * with plain launches, which also loads cuBLAS's kernels) and replayed from then on; cuBLAS
 * works in the capture on a workspace of its own (cublasSetWorkspace). Should the capture fail
 * (a library call that cannot be captured), the slot logs a warning and keeps plain launches,
 * which queue the same work in the same order.
 *
 * Timing (sw_aberrometry_enable_timing): events before the copy in, after the pupil graph, after
 * the preliminary stages, after the final search and after the copy out (external event nodes in
 * the graph), read after the collect.
 */
#include "aberrometry/aberrometry_internal.h"
#include "pupil/pupil_internal.h"
#include "core/cuda_util.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   ctx
#define SW_CUDA_STAGE "aberrometry"

#define AB_THREADS      256 /* one-thread-per-lenslet kernels: threads per block            */
#define AB_DESIGN_WARPS 2   /* design kernel: lenslets (warps) per block                     */
#define AB_POINTS       24  /* design kernel: 6 Gauss-Legendre nodes x 4 square edges        */
#define AB_FIT_THREADS  256 /* fit kernel: threads of an eye's block                         */
#define AB_FIT_SMEM     (40 << 10) /* fit kernel: most dynamic shared memory, bytes          */
#define AB_BLAS_WS      ((size_t)4 << 20) /* cuBLAS workspace per slot (graph capture)      */

/* The 6-node Gauss-Legendre rule of ab_model.h's sw_ab_mean_grad (the same digits). */
__device__ const double ab_gl_u[6] = {-0.9324695142031520278123016, -0.6612093864662645136613996,
                                      -0.2386191860831969086305017, 0.2386191860831969086305017,
                                      0.6612093864662645136613996,  0.9324695142031520278123016};
__device__ const double ab_gl_w[6] = {0.1713244923791703450402961, 0.3607615730481386075698335,
                                      0.4679139345726910473898703, 0.4679139345726910473898703,
                                      0.3607615730481386075698335, 0.1713244923791703450402961};

/* What the kernels leave per frame (zeroed by one memset at the start of steps 2-5). */
struct ab_counts {
    int lenslets[2];  /* used lenslets per eye (step 2)                              */
    int central[2];   /* of which in stage 0 (step 3a)                               */
    int fail[2];      /* the first failure of the eye's preliminary fits (0: none)   */
    int prelim_ok[2]; /* 1 when stage 0's fit was solved (bp valid)                  */
};

/* Everything the kernels read, by value. */
struct ab_dev {
    sw_sh_geometry g; /* valid = NULL */
    int32_t nl, n_eyes, J, Jp, S;
    int32_t order, slopes;          /* order; mesh_slopes_per_term              */
    int32_t Js[SW_AB_MAX_STAGES];   /* stage k's scheduled terms                */
    double frac[SW_AB_MAX_STAGES];  /* stage k's circle / R                     */
    double fit_radius, mesh_tol;    /* fit_radius_px; the mesh check, pixels    */
    double raise_tol;               /* mesh_raise_residual_px                   */
    double out_sigma, out_min;      /* outlier_sigma, outlier_min_px            */
    const uint8_t *mask;            /* the tracker's lenslet mask (device)      */
    const sw_pupil_ellipse *pupils; /* the tracker's pupils (device)            */
    double *refx, *refy;            /* reference centroids, nl each              */
    uint8_t *stage, *eye;           /* SW_AB_UNUSED or the stage; 0 / 1 / 2      */
    uint8_t *act, *st;              /* the next search's active flags; the last
                                       search's statuses                        */
    double *x, *y;                  /* the last search's centroids               */
    double *sx, *sy;                /* the next (at the end: the final) search's
                                       start                                    */
    double *D;                      /* 2 nl x (J - 1), column-major              */
    double *pred[2];                /* per eye: D_k c_k, 2 nl                    */
    double *bk[2], *bp[2];          /* per eye: the last stage's solution; stage 0's */
    ab_counts *cnt;
    sw_ab_raw *raw;
};

/* A slot's device state (slot->gpu). */
struct ab_gpu {
    cudaStream_t stream, side; /* the slot's stream; the side stream of the design kernel  */
    cudaEvent_t fork, join;    /* side stream: after the select kernel / after the design  */
    cublasHandle_t blas;
    void *blas_ws;
    ab_dev d;         /* the device buffers (owned: freed here)                  */
    sw_image frame;   /* the pupil plan's tight device copy of the frame, as an image */
    sw_ab_raw *h_raw; /* pinned: the copy out                                */
    cudaEvent_t ev[SW_AB_STAGES + 1];
    int timed;        /* the last frame recorded ev                          */
    sw_graph graph;   /* steps 2-5 */
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

/* Steps 1-3 per lenslet (ab_model.h, as cpu_frame): the eye from the tracker's mask (value
 * e + 1, pupil e found), the stage from the eye's analysis circle; the first search's start
 * (reference centroids of the used lenslets, NaN elsewhere) and active flags (stage 0: the
 * static central mesh; without the dynamic mesh, S = 0, every used lenslet is stage 0). */
__global__ void __launch_bounds__(AB_THREADS) ab_select_kernel(ab_dev d)
{
    __shared__ int part[4]; /* lenslets[2], central[2] */
    if (threadIdx.x < 4)
        part[threadIdx.x] = 0;
    __syncthreads();
    const int32_t l = (int32_t)(blockIdx.x * AB_THREADS + threadIdx.x);
    if (l < d.nl) {
        int stage = SW_AB_UNUSED, eye = 0;
        const uint8_t m = d.mask[l];
        if (m >= 1 && (int)m <= d.n_eyes && d.pupils[m - 1].valid) {
            double cx, cy, r;
            sw_ab_circle(&d.pupils[m - 1], d.fit_radius, &cx, &cy, &r);
            stage = sw_ab_lenslet_stage(&d.g, l % d.g.nx, l / d.g.nx, m, d.refx[l], d.refy[l], cx,
                                        cy, r, d.frac, d.S);
            if (stage != SW_AB_UNUSED) {
                eye = m;
                atomicAdd(&part[m - 1], 1);
                if (d.S > 0 && stage == 0)
                    atomicAdd(&part[2 + m - 1], 1);
            }
        }
        d.stage[l] = (uint8_t)stage;
        d.eye[l] = (uint8_t)eye;
        d.act[l] = eye != 0 && stage == 0;
        d.sx[l] = eye ? d.refx[l] : NAN;
        d.sy[l] = eye ? d.refy[l] : NAN;
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

/* Dynamic shared memory of ab_fit_kernel for m unknowns and chunks of `chunk` lenslets: G
 * (packed lower triangle), b, a chunk's rows (2 chunk x m, column-major) and slopes. */
static size_t ab_fit_smem(int32_t m, int32_t chunk)
{
    const size_t mm = (size_t)m;
    return (mm * (mm + 1) / 2 + mm + (2 * (size_t)chunk + 1) * (mm + 1)) * sizeof(double);
}

/* The largest chunk (64, 32, 16 or 8 lenslets) whose shared memory fits AB_FIT_SMEM. */
static int32_t ab_fit_chunk(int32_t m)
{
    int32_t c = 64;
    while (c > 8 && ab_fit_smem(m, c) > AB_FIT_SMEM)
        c /= 2;
    return c;
}

/* |D_l c - s_l|^2: lenslet l's squared residual (x and y, pixels) under the fit c (m terms) */
__device__ __forceinline__ double ab_residual2(const ab_dev &d, const double *c, int m, int32_t l)
{
    const size_t ld = 2 * (size_t)d.nl;
    double px = 0.0, py = 0.0;
    for (int j = 0; j < m; j++) {
        px += d.D[(size_t)j * ld + (size_t)l] * c[j];
        py += d.D[(size_t)j * ld + (size_t)d.nl + (size_t)l] * c[j];
    }
    const double vx = px - (d.x[l] - d.refx[l]), vy = py - (d.y[l] - d.refy[l]);
    return vx * vx + vy * vy;
}

/* L^T c = y in place in b[0 .. m) (y in, c out), L the packed lower factor in G (row i at
 * i (i + 1) / 2): back substitution by the whole block (every thread calls it). */
__device__ void ab_back_solve(const double *G, double *b, int m, int t)
{
    for (int j = m - 1; j >= 0; j--) {
        if (t == 0)
            b[j] /= G[j * (j + 1) / 2 + j];
        __syncthreads();
        for (int i = t; i < j; i += AB_FIT_THREADS)
            b[i] -= G[j * (j + 1) / 2 + i] * b[j];
        __syncthreads();
    }
}

/* The sum of every thread's v over the block (red: AB_FIT_THREADS shared doubles; a fixed tree, so
 * the same order every run); every thread gets it. The caller syncs before red is reused. */
__device__ double ab_block_sum(double *red, double v, int t)
{
    red[t] = v;
    __syncthreads();
    for (int w = AB_FIT_THREADS / 2; w > 0; w >>= 1) {
        if (t < w)
            red[t] += red[t + w];
        __syncthreads();
    }
    return red[0];
}

/* Packed lower-triangle index o = i (i + 1) / 2 + j, j <= i, back to (i, j). */
__device__ __forceinline__ void ab_tri(int o, int *i, int *j)
{
    int r = (int)((sqrtf(8.0f * (float)o + 1.0f) - 1.0f) * 0.5f);
    while (r * (r + 1) / 2 > o)
        r--;
    while ((r + 1) * (r + 2) / 2 <= o)
        r++;
    *i = r;
    *j = o - r * (r + 1) / 2;
}

/*
 * One least-squares fit of step 3b (FINAL 0: stage k, sw_ab_stage_terms terms) or step 5 (FINAL 1:
 * orders 1 .. order) for eye blockIdx.x, all in one block (see the top for why):
 *   rows: the eye's lenslets that take part (3b: stages 0 .. k found by the stage's search; 5:
 *     kept by the final search and, with the dynamic mesh, by the mesh check, whose failures
 *     become SW_SPOT_SPACING here, as on the CPU), compacted in lenslet order tile by tile (a
 *     ballot scan) and staged `chunk` lenslets at a time in shared memory (x rows, then y rows:
 *     neighbouring threads read neighbouring lenslets of a column of D);
 *   G = D^T D (packed lower triangle) and b = D^T s, s = centroid - reference: each of the
 *     m (m + 1) / 2 + m sums belongs to one thread, which adds a chunk's rows in a fixed order
 *     (four partial sums, for the pipelines) and the chunks in lenslet order: the same result
 *     every run;
 *   G = L L^T (right-looking Cholesky; a pivot that is not > 0, as LAPACK's dpotrf, is SINGULAR),
 *     L y = b, L^T c = y;
 *   3b: c into bk[e] (and bp[e] for stage 0), or the failure (FEW_CENTRAL, SINGULAR) into
 *     cnt->fail[e]; 5: the residual RMS of D c - s over the rows and the eye's sw_ab_raw.
 * An eye without a pupil, or whose earlier fit failed, does no fit (and, final, reports it).
 */
template <int FINAL>
__global__ void __launch_bounds__(AB_FIT_THREADS) ab_fit_kernel(ab_dev d, int32_t k, int32_t chunk)
{
    extern __shared__ double ab_sh[];
    __shared__ int32_t list[AB_FIT_THREADS];
    __shared__ int wsum[AB_FIT_THREADS / 32];
    __shared__ int disc[3]; /* final: SW_SPOT_EMPTY, SPACING, ISOLATED */
    __shared__ int bad;
    __shared__ double red[AB_FIT_THREADS];
    __shared__ double ysave[SW_AB_MAX_TERMS]; /* 3b: L y = b's first Jk - 1 entries (see below) */
    const int e = (int)blockIdx.x, t = (int)threadIdx.x, lane = t & 31, warp = t >> 5;
    const int32_t nl = d.nl;
    const size_t ld = 2 * (size_t)nl;

    int fail = d.pupils[e].valid ? d.cnt->fail[e] : SW_AB_NO_PUPIL; /* the same in the block */
    if (!FINAL && fail != SW_AB_OK)
        return;
    /* the unknowns: final, J - 1; 3b, the stage's terms for the spots it kept
     * (sw_ab_stage_terms, as the CPU), counted first (the launch holds the most terms) */
    int32_t m = d.J - 1;
    if (!FINAL) {
        int32_t kept = 0;
        for (int32_t base = 0; base < nl; base += AB_FIT_THREADS) {
            const int32_t l = base + t;
            kept += __syncthreads_count(l < nl && d.eye[l] == e + 1 && d.stage[l] <= k &&
                                        d.st[l] == SW_SPOT_OK);
        }
        m = sw_ab_stage_terms(d.Js[k], d.order, kept, d.slopes) - 1;
    }
    const int P = m * (m + 1) / 2;
    /* R's column stride: one more than the rows, so that the threads of a warp, each reading
     * row r of its own column, hit different banks (a stride of 2 chunk doubles, a multiple of
     * 32 words, put them all in one bank: 32-way conflicts, measured 150 us per fit) */
    const int RS = 2 * chunk + 1;
    double *G = ab_sh, *b = G + P, *R = b + m, *s = R + (size_t)RS * m;
    if (t < 3)
        disc[t] = 0;
    int32_t n = 0, n_kept = 0, outliers = 0; /* the same in every thread */
    double rho = 0.0;                        /* final: the residual RMS */
    /* final: pass 1, 2, ... after outlier rejections (each refits from the rows, as the CPU) */
    for (int pass = 0;; pass++) {
        for (int o = t; o < P + m; o += AB_FIT_THREADS)
            ab_sh[o] = 0.0;
        if (t == 0)
            bad = 0;
        __syncthreads();

        /* the rows: D^T D and D^T s */
        n = 0; /* lenslets in the fit */
        if (fail == SW_AB_OK) {
            for (int32_t base = 0; base < nl; base += AB_FIT_THREADS) {
                const int32_t l = base + t;
                int sel = 0;
                if (l < nl && d.eye[l] == e + 1) {
                    if (FINAL) {
                        uint8_t st = d.st[l];
                        if (pass == 0 && st == SW_SPOT_OK && d.mesh_tol > 0.0 &&
                            sw_ab_off_mesh(d.x[l], d.y[l], d.sx[l], d.sy[l], d.mesh_tol)) {
                            st = SW_SPOT_SPACING;
                            d.st[l] = st;
                        }
                        sel = st == SW_SPOT_OK;
                        if (pass == 0 && st >= SW_SPOT_EMPTY && st <= SW_SPOT_ISOLATED)
                            atomicAdd(&disc[st - SW_SPOT_EMPTY], 1); /* counted once */
                    } else {
                        sel = d.stage[l] <= k && d.st[l] == SW_SPOT_OK;
                    }
                }
                const unsigned ballot = __ballot_sync(0xffffffffu, sel);
                if (lane == 0)
                    wsum[warp] = __popc(ballot);
                __syncthreads();
                int off = 0, tot = 0;
                for (int q = 0; q < AB_FIT_THREADS / 32; q++) {
                    off += q < warp ? wsum[q] : 0;
                    tot += wsum[q];
                }
                if (sel)
                    list[off + __popc(ballot & ((1u << lane) - 1u))] = l;
                __syncthreads();
                for (int c0 = 0; c0 < tot; c0 += chunk) {
                    const int nc = min(chunk, tot - c0), rows = 2 * nc;
                    for (int q = t; q < rows * m; q += AB_FIT_THREADS) {
                        const int j = q / rows, r = q - j * rows;
                        const int y = r >= nc;
                        const int32_t ll = list[c0 + r - (y ? nc : 0)];
                        R[j * RS + r] = d.D[(size_t)j * ld + (y ? (size_t)nl : 0) + (size_t)ll];
                    }
                    for (int r = t; r < rows; r += AB_FIT_THREADS) {
                        const int y = r >= nc;
                        const int32_t ll = list[c0 + r - (y ? nc : 0)];
                        s[r] = y ? d.y[ll] - d.refy[ll] : d.x[ll] - d.refx[ll];
                    }
                    __syncthreads();
                    for (int o = t; o < P + m; o += AB_FIT_THREADS) {
                        int i, j;
                        if (o < P)
                            ab_tri(o, &i, &j);
                        else
                            i = o - P;
                        const double *u = R + (size_t)i * RS, *v = o < P ? R + (size_t)j * RS : s;
                        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
                        int r = 0;
                        for (; r + 4 <= rows; r += 4) {
                            a0 += u[r] * v[r];
                            a1 += u[r + 1] * v[r + 1];
                            a2 += u[r + 2] * v[r + 2];
                            a3 += u[r + 3] * v[r + 3];
                        }
                        for (; r < rows; r++)
                            a0 += u[r] * v[r];
                        ab_sh[o] += (a0 + a1) + (a2 + a3);
                    }
                    __syncthreads();
                }
                n += tot;
            }
            if (pass == 0)
                n_kept = n;
            if (2 * n < m)
                fail = FINAL ? SW_AB_FEW_SPOTS : SW_AB_FEW_CENTRAL;
        }

        /* G = L L^T in place, then L y = b, L^T c = y (b holds c) */
        if (fail == SW_AB_OK) {
            for (int j = 0; j < m; j++) {
                const int jj = j * (j + 1) / 2 + j;
                if (t == 0) {
                    const double p = G[jj];
                    if (!(p > 0.0))
                        bad = 1;
                    else
                        G[jj] = sqrt(p);
                }
                __syncthreads();
                if (bad)
                    break;
                const double ljj = G[jj];
                for (int i = j + 1 + t; i < m; i += AB_FIT_THREADS)
                    G[i * (i + 1) / 2 + j] /= ljj;
                __syncthreads();
                const int rest = m - j - 1;
                for (int o = t; o < rest * (rest + 1) / 2; o += AB_FIT_THREADS) {
                    int a, c;
                    ab_tri(o, &a, &c);
                    const int i = j + 1 + a, q = j + 1 + c;
                    G[i * (i + 1) / 2 + q] -= G[i * (i + 1) / 2 + j] * G[q * (q + 1) / 2 + j];
                }
                __syncthreads();
            }
            if (bad)
                fail = SW_AB_SINGULAR;
        }
        /* 3b, a raised fit: the stage's own order's fit is the leading block of the same system
         * (its Cholesky factor the leading block of L, its y the first entries of L y = b) */
        const int m_own = FINAL ? m : min(m, (int)d.Js[k] - 1);
        if (fail == SW_AB_OK) {
            for (int j = 0; j < m; j++) {
                if (t == 0)
                    b[j] /= G[j * (j + 1) / 2 + j];
                __syncthreads();
                for (int i = j + 1 + t; i < m; i += AB_FIT_THREADS)
                    b[i] -= G[i * (i + 1) / 2 + j] * b[j];
                __syncthreads();
            }
            for (int j = t; j < m_own && m_own < m; j += AB_FIT_THREADS)
                ysave[j] = b[j];
            __syncthreads();
            ab_back_solve(G, b, m, t);
        }

        if (!FINAL) { /* step 3b's solution for the prediction, or the eye's failure */
            if (fail != SW_AB_OK) {
                if (t == 0)
                    d.cnt->fail[e] = fail;
                return;
            }
            /* a raised fit's residual RMS over its slopes (fixed-order block sum, as the final
             * fit's): above raise_tol, the stage's own order instead (sw_ab_raise_rejected, as the
             * CPU): L^T c = y on the leading m_own block */
            if (m_own < m) {
                double ss = 0.0;
                for (int32_t l = t; l < nl; l += AB_FIT_THREADS) {
                    if (d.eye[l] != e + 1 || d.stage[l] > k || d.st[l] != SW_SPOT_OK)
                        continue;
                    ss += ab_residual2(d, b, m, l);
                }
                const double res = sqrt(ab_block_sum(red, ss, t) / (2.0 * (double)n));
                if (sw_ab_raise_rejected(m + 1, m_own + 1, res, d.raise_tol)) {
                    __syncthreads(); /* every thread has read red[0] and b */
                    for (int j = t; j < m; j += AB_FIT_THREADS)
                        b[j] = j < m_own ? ysave[j] : 0.0;
                    __syncthreads();
                    ab_back_solve(G, b, m_own, t);
                    m = m_own;
                }
            }
            /* zeros up to the prediction's columns (the most terms a stage may take) */
            const int32_t mmax = sw_ab_stage_terms_max(d.Js[k], d.J, d.slopes) - 1;
            for (int j = t; j < mmax; j += AB_FIT_THREADS) {
                const double v = j < m ? b[j] : 0.0;
                d.bk[e][j] = v;
                if (k == 0)
                    d.bp[e][j] = v;
            }
            if (t == 0 && k == 0)
                d.cnt->prelim_ok[e] = 1;
            return;
        }

        /* final: the residual RMS of D c - s over the rows (fixed-order block sum), and the spot of
         * the largest residual (the lowest lenslet on a tie) */
        double ss = 0.0, w2 = -1.0;
        int32_t lw = -1;
        if (fail == SW_AB_OK) {
            for (int32_t l = t; l < nl; l += AB_FIT_THREADS) {
                if (d.eye[l] != e + 1 || d.st[l] != SW_SPOT_OK)
                    continue;
                const double v2 = ab_residual2(d, b, m, l);
                ss += v2;
                if (v2 > w2) { /* l rises within a thread: the first of equals is the lowest */
                    w2 = v2;
                    lw = l;
                }
            }
        }
        const double ss_all = ab_block_sum(red, ss, t);
        rho = fail == SW_AB_OK && n > 0 ? sqrt(ss_all / (2.0 * (double)n)) : 0.0;
        /* outlier rejection (aberrometry.h step 5, sw_ab_outlier as the CPU): the worst spot
         * rejected, and the fit solved again without it */
        if (fail != SW_AB_OK || !(d.out_sigma > 0.0) || outliers >= SW_AB_MAX_OUTLIERS ||
            2 * (n - 1) < m)
            break;
        __syncthreads(); /* every thread has read red[0]; list is free after the rows */
        red[t] = w2;
        list[t] = lw;
        __syncthreads();
        for (int w = AB_FIT_THREADS / 2; w > 0; w >>= 1) {
            if (t < w) {
                const double o2 = red[t + w];
                const int32_t ol = list[t + w];
                if (o2 > red[t] || (o2 == red[t] && ol >= 0 && (list[t] < 0 || ol < list[t]))) {
                    red[t] = o2;
                    list[t] = ol;
                }
            }
            __syncthreads();
        }
        if (list[0] < 0 || !sw_ab_outlier(red[0], rho, d.out_sigma, d.out_min))
            break;
        if (t == 0)
            d.st[list[0]] = SW_SPOT_OUTLIER;
        outliers++;
        __syncthreads(); /* the status seen by the whole block before the rows are read again */
    }                    /* pass */

    /* the eye's raw result (aberrometry_internal.h) */
    sw_ab_raw_eye *o = &d.raw->eye[e];
    const ab_counts *c = d.cnt;
    const int prelim_ok = d.pupils[e].valid && c->prelim_ok[e];
    for (int j = t; j < SW_AB_MAX_TERMS; j += AB_FIT_THREADS) {
        o->coef[j] = fail == SW_AB_OK && j >= 1 && j < d.J ? b[j - 1] : 0.0;
        o->prelim[j] = prelim_ok && j >= 1 && j < d.Jp ? d.bp[e][j - 1] : 0.0;
    }
    if (t == 0) {
        o->failure = fail;
        o->lenslets = c->lenslets[e];
        o->central = c->central[e];
        o->kept = n_kept;
        o->found = n_kept + disc[0] + disc[1] + disc[2];
        for (int q = 0; q < 3; q++)
            o->discarded[q] = disc[q];
        o->outliers = outliers;
        o->prelim_ok = prelim_ok;
        if (d.pupils[e].valid) {
            sw_ab_circle(&d.pupils[e], d.fit_radius, &o->cx, &o->cy, &o->radius);
        } else {
            o->cx = o->cy = o->radius = 0.0;
        }
        o->residual = fail == SW_AB_OK ? rho : 0.0;
    }
}

/* Step 3c after stage k's fit: the next search's start, reference + D_k c_k (the same
 * expression as the CPU's), for the lenslets of the eyes whose fits so far were solved, and its
 * active flags: stages 0 .. k + 1, or every used lenslet when the next search is the final one.
 * The others are not searched again (NaN start, inactive). */
__global__ void __launch_bounds__(AB_THREADS) ab_start_kernel(ab_dev d, int32_t k)
{
    const int32_t l = (int32_t)(blockIdx.x * AB_THREADS + threadIdx.x), nl = d.nl;
    if (l >= nl)
        return;
    const int e = (int)d.eye[l] - 1;
    const int ok = e >= 0 && d.cnt->fail[e] == SW_AB_OK;
    d.act[l] = (uint8_t)(ok && (k + 1 >= d.S || (int32_t)d.stage[l] <= k + 1));
    d.sx[l] = ok ? d.refx[l] + d.pred[e][l] : NAN;
    d.sy[l] = ok ? d.refy[l] + d.pred[e][nl + l] : NAN;
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

/* Records a timing event: an external event node under capture, a plain record otherwise. */
static cudaError_t ab_mark(cudaEvent_t ev, cudaStream_t s, int capturing)
{
    return capturing ? cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal)
                     : cudaEventRecord(ev, s);
}

/* Steps 2-5 on the slot's stream: plain launches, or (capturing 1) their capture into the slot's
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

    /* 2: the lenslets' eyes and stages; 2': the design rows, beside the first search */
    SW_CU(cudaMemsetAsync(d.cnt, 0, sizeof(ab_counts), s));
    ab_select_kernel<<<per_lenslet, AB_THREADS, 0, s>>>(d);
    SW_CU(cudaGetLastError());
    SW_CU(cudaEventRecord(g->fork, s));
    SW_CU(cudaStreamWaitEvent(g->side, g->fork, 0));
    ab_design_kernel<<<ab_blocks(nl, AB_DESIGN_WARPS), 32 * AB_DESIGN_WARPS, 0, g->side>>>(d);
    SW_CU(cudaGetLastError());
    SW_CU(cudaEventRecord(g->join, g->side));

    /* 3: the stages of the dynamic mesh */
    for (int32_t k = 0; k < d.S; k++) {
        SW_TRY(sw_search_run(sl->search, &g->frame, d.sx, d.sy, d.act, SW_MEM_DEVICE, d.x, d.y,
                             NULL, d.st));
        if (k == 0)
            SW_CU(cudaStreamWaitEvent(s, g->join, 0));
        /* the launch and the prediction hold the most terms the stage may fit */
        const int32_t mk = sw_ab_stage_terms_max(d.Js[k], d.J, d.slopes) - 1;
        const int32_t ck = ab_fit_chunk(mk);
        ab_fit_kernel<0><<<(unsigned)n_eyes, AB_FIT_THREADS, ab_fit_smem(mk, ck), s>>>(d, k, ck);
        SW_CU(cudaGetLastError());
        for (int e = 0; e < n_eyes; e++)
            SW_CUBLAS(cublasDgemv(g->blas, CUBLAS_OP_N, ld, mk, &one, d.D, ld, d.bk[e], 1, &zero,
                                  d.pred[e], 1));
        ab_start_kernel<<<per_lenslet, AB_THREADS, 0, s>>>(d, k);
        SW_CU(cudaGetLastError());
    }
    if (d.S == 0)
        SW_CU(cudaStreamWaitEvent(s, g->join, 0));
    if (timing)
        SW_CU(ab_mark(g->ev[2], s, capturing));

    /* 4: the search of every used lenslet (with discarding as the plan says) */
    SW_TRY(sw_search_run(sl->search, &g->frame, d.sx, d.sy, d.act, SW_MEM_DEVICE, d.x, d.y, NULL,
                         d.st));
    if (timing)
        SW_CU(ab_mark(g->ev[3], s, capturing));

    /* 5: the mesh check and the final fit per eye, the raw result and its copy out */
    const int32_t m = plan->J - 1, c = ab_fit_chunk(m);
    ab_fit_kernel<1><<<(unsigned)n_eyes, AB_FIT_THREADS, ab_fit_smem(m, c), s>>>(d, 0, c);
    SW_CU(cudaGetLastError());
    SW_CU(cudaMemcpyAsync(g->h_raw, d.raw, sizeof(sw_ab_raw), cudaMemcpyDeviceToHost, s));
    if (timing)
        SW_CU(ab_mark(g->ev[4], s, capturing));
    return SW_OK;
}

/* Captures ab_body into the slot's graph (core/cuda_util.h: the capture is always ended, so
 * that the stream is usable again whatever failed inside). */
static sw_status ab_capture(sw_aberrometry_plan *plan, int slot, int timing)
{
    sw_context *ctx = plan->slot[slot].ctx;
    ab_gpu *g = gpu_of(plan, slot);
    SW_TRY(sw_graph_begin(ctx, SW_CUDA_STAGE, g->stream));
    const sw_status st = ab_body(plan, slot, timing, 1);
    SW_TRY(sw_graph_end(&g->graph, ctx, SW_CUDA_STAGE, "frame", g->stream, st, 0));
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
    sw_graph_destroy(&g->graph);
    if (g->blas)
        cublasDestroy(g->blas);
    ab_dev *d = &g->d;
    SW_CUDA_FREE(d->refx, d->refy, d->stage, d->eye, d->act, d->st, d->x, d->y, d->sx, d->sy, d->D,
                 d->pred[0], d->pred[1], d->bk[0], d->bk[1], d->bp[0], d->bp[1], d->cnt, d->raw,
                 g->blas_ws);
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
    SW_CU(cudaMalloc((void **)dst, bytes));
    SW_CU(cudaMemsetAsync(*dst, 0, bytes, s));
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
    SW_CU(cudaSetDevice(ctx->device));
    cudaStream_t s = (cudaStream_t)sw_context_stream(ctx);
    g->stream = s;
    SW_CU(cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking));
    SW_CU(cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming));
    SW_CU(cudaEventCreateWithFlags(&g->join, cudaEventDisableTiming));
    for (int k = 0; k <= SW_AB_STAGES; k++)
        SW_CU(cudaEventCreate(&g->ev[k]));

    const sw_aberrometry_params *p = &plan->p;
    ab_dev *d = &g->d;
    d->g = p->geometry;
    d->g.valid = NULL;
    d->nl = plan->nl;
    d->n_eyes = p->n_eyes;
    d->J = plan->J;
    d->Jp = plan->Jp;
    d->S = plan->n_stages;
    d->order = p->order;
    d->slopes = p->mesh_slopes_per_term;
    d->raise_tol = p->mesh_raise_residual_px;
    d->out_sigma = p->outlier_sigma;
    d->out_min = p->outlier_min_px;
    for (int k = 0; k < SW_AB_MAX_STAGES; k++) {
        d->Js[k] = plan->Js[k];
        d->frac[k] = plan->frac[k];
    }
    d->fit_radius = p->fit_radius_px;
    d->mesh_tol = plan->mesh_tol_px;
    d->mask = sw_pupil_gpu_lenslet_mask(sl->pupil);
    d->pupils = sw_pupil_gpu_pupils(sl->pupil);
    if (!d->mask || !d->pupils)
        return sw_fail(ctx, SW_EINTERNAL, "aberrometry: the pupil plan has no device lenslet mask");

    const size_t nl = (size_t)plan->nl, rows = 2 * nl, m = (size_t)(plan->J - 1);
    SW_TRY(ab_alloc(ctx, s, &d->refx, nl));
    SW_TRY(ab_alloc(ctx, s, &d->refy, nl));
    SW_TRY(ab_alloc(ctx, s, &d->stage, nl));
    SW_TRY(ab_alloc(ctx, s, &d->eye, nl));
    SW_TRY(ab_alloc(ctx, s, &d->act, nl));
    SW_TRY(ab_alloc(ctx, s, &d->st, nl));
    SW_TRY(ab_alloc(ctx, s, &d->x, nl));
    SW_TRY(ab_alloc(ctx, s, &d->y, nl));
    SW_TRY(ab_alloc(ctx, s, &d->sx, nl));
    SW_TRY(ab_alloc(ctx, s, &d->sy, nl));
    SW_TRY(ab_alloc(ctx, s, &d->D, rows * m));
    for (int e = 0; e < p->n_eyes; e++) {
        SW_TRY(ab_alloc(ctx, s, &d->pred[e], rows));
        SW_TRY(ab_alloc(ctx, s, &d->bk[e], m));
        SW_TRY(ab_alloc(ctx, s, &d->bp[e], m));
    }
    SW_TRY(ab_alloc(ctx, s, &d->cnt, (size_t)1));
    SW_TRY(ab_alloc(ctx, s, &d->raw, (size_t)1));
    SW_CU(cudaMemcpyAsync(d->refx, plan->ref_x, nl * sizeof(double), cudaMemcpyHostToDevice, s));
    SW_CU(cudaMemcpyAsync(d->refy, plan->ref_y, nl * sizeof(double), cudaMemcpyHostToDevice, s));
    SW_CU(cudaHostAlloc((void **)&g->h_raw, sizeof(sw_ab_raw), cudaHostAllocDefault));
    memset(g->h_raw, 0, sizeof(sw_ab_raw));

    /* cuBLAS (the predictions D_k c_k), bound to the slot's stream, with its own workspace
     * (needed to run inside a graph capture; cublasSetStream resets it, so it comes after). */
    SW_TRY(sw_cublas_create(ctx, SW_CUDA_STAGE, s, AB_BLAS_WS, &g->blas, &g->blas_ws));

    /* The searches' frame: the pupil plan's tight device copy (pupil_internal.h). */
    g->frame.width = p->width;
    g->frame.height = p->height;
    g->frame.stride = (size_t)p->width * sw_pixel_size(p->type);
    g->frame.type = p->type;
    g->frame.memory = SW_MEM_DEVICE;
    g->frame.owned = 0;
    g->frame.data = (void *)sw_pupil_gpu_frame(sl->pupil);
    SW_CU(cudaStreamSynchronize(s)); /* plan->ref_x is the host's, it may change */
    return SW_OK;
}

extern "C" sw_status sw_ab_gpu_enqueue(sw_aberrometry_plan *plan, int slot, const sw_image *frame)
{
    sw_ab_slot *sl = &plan->slot[slot];
    sw_context *ctx = sl->ctx;
    ab_gpu *g = gpu_of(plan, slot);
    const int timing = plan->timing != 0;
    SW_CU(cudaSetDevice(ctx->device));

    /* 1: the frame's copy in and the pupil tracker's graph */
    if (timing)
        SW_CU(cudaEventRecord(g->ev[0], g->stream));
    SW_TRY(sw_pupil_gpu_enqueue(sl->pupil, frame));
    if (timing)
        SW_CU(cudaEventRecord(g->ev[1], g->stream));

    /* 2-5: the slot's graph from its second frame on (captured again when timing was switched) */
    if (g->graph.exec && g->graph_timing != timing)
        sw_graph_destroy(&g->graph);
    if (!g->graph.exec && !g->no_graph && g->runs > 0) {
        if (ab_capture(plan, slot, timing) != SW_OK) {
            g->no_graph = 1;
            sw_log(ctx, SW_LOG_WARN,
                   "aberrometry: stream %d runs without a CUDA graph (plain launches): %s", slot,
                   sw_context_error(ctx));
        } else {
            sw_log(ctx, SW_LOG_DEBUG, "aberrometry: stream %d: steps 2-5 captured in a graph",
                   slot);
        }
    }
    g->timed = 0;
    if (g->graph.exec)
        SW_CU(cudaGraphLaunch(g->graph.exec, g->stream));
    else
        SW_TRY(ab_body(plan, slot, timing, 0));
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
    SW_CU(cudaSetDevice(ctx->device));
    SW_CU(cudaStreamSynchronize(g->stream));
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
    SW_CU(cudaSetDevice(ctx->device));
    if (x)
        SW_CU(cudaMemcpyAsync(x, d.x, nd, cudaMemcpyDeviceToHost, s));
    if (y)
        SW_CU(cudaMemcpyAsync(y, d.y, nd, cudaMemcpyDeviceToHost, s));
    if (status)
        SW_CU(cudaMemcpyAsync(status, d.st, nb, cudaMemcpyDeviceToHost, s));
    if (eye)
        SW_CU(cudaMemcpyAsync(eye, d.eye, nb, cudaMemcpyDeviceToHost, s));
    if (x0)
        SW_CU(cudaMemcpyAsync(x0, d.sx, nd, cudaMemcpyDeviceToHost, s));
    if (y0)
        SW_CU(cudaMemcpyAsync(y0, d.sy, nd, cudaMemcpyDeviceToHost, s));
    SW_CU(cudaStreamSynchronize(s));
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
