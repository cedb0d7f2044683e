/*
 * Between sabre.c (API, plan building, CPU run), sabre_global.c (global SABRE, Fried, lattice
 * evaluation) and sabre_cuda.cu (GPU run). The tables here are built once on the host; the CPU run
 * and the GPU kernels read the same tables with the same arithmetic (see "Run semantics").
 *
 * Run semantics (both backends; k partitions per side, G = k^2, L = w + 1 corners per window
 * side, nl = L^2 + w^2 local values, ns = 2 L^2 local slopes):
 *   1. gather: X[r + ns i] (float, ns x G column-major) = slope of local corner r of partition i:
 *      r < L^2: x slope of lenslet gidx[i L^2 + r], r >= L^2: y slope of gidx[i L^2 + r - L^2];
 *      0 where gidx < 0 (padding or an invalid lenslet; with SW_SABRE_PAD_NEAREST gidx holds the
 *      nearest valid lenslet there instead).
 *   2. Y = Q X (float sgemm; Q nl x ns column-major, Y nl x G column-major).
 *   2b. fill iterations t = 1..fill_iterations: F[p] = sw_sabre_predict of padded corner p from
 *      its owner's Y, divided by the pitch (x at F[p], y at F[npad + p]); then every local corner
 *      with pidx >= 0 gets X rows = F (x and y); then step 2 again.
 *   2c. robust passes t = 1..robust_passes (sabre.c robust_partition): for every partition i and
 *      local corner r with rreal: mu = (float) (sw_sabre_predict(Y_i, r) / pitch) (x, y), the
 *      residual (double) slope - (double) mu and its length R[r]; m = the element of rank
 *      floor((n - 1) / 2) of R over the partition's n real corners; X rows of r = (float) (mu + f
 *      ((double) slope - mu)), f = tau / R[r] when R[r] > tau = kappa m, else 1; then step 2.
 *   3. pair sums: psum[p] = sum over j = 0..pstride-1 with pair_use[p pstride + j] of
 *      (double) Y[pair_vhi[..] + nl hi] - (double) Y[pair_vlo[..] + nl lo]  (double), or with
 *      robust_pme n times the element of rank floor((n - 1) / 2) of those differences; pair_n[p]
 *      = n, the number of such j (a constant of the plan).
 *   4. PME (sw_sabre_pme_cpu's definition) -> K[G] double offsets (0 for SW_SABRE_PME_NONE).
 *   5. assembly: value v of the extended lattice = (float) ((double) Y[local + nl owner] +
 *      K[owner]) (sw_sabre_locate_value).
 *   6. actuators: sw_sabre_locate at each lenslet corner on the assembled float values, summed in
 *      double (weights times values, k = 0, 1, 2 in order), rounded to float.
 *   6'. with a projection (sw_sabre_set_projection) instead of 6: Z = P Y (float sgemm, P
 *      w^2 x nl, Z w^2 x G column-major), and actuator (cx, cy) = (float) ((double) Z[ls + w^2 i]
 *      + K[i] * (double) q1[ls]), i the partition owning extended square (I, J) =
 *      (cx - 1 + offx, cy - 1 + offy) (sw_sabre_owner of I and J), ls = (J - ws[b]) w + (I - ws[a])
 *      its local square, q1[ls] = the row sums of P (summed in double, stored as float). With one
 *      matrix per partition (sw_sabre_set_projection_partitions) Z's column i = P_i Y_i (float
 *      sgemv each on the CPU, one strided-batched sgemm on the GPU) and q1[ls] is q1_i[ls], the
 *      row sums of P_i.
 */
#ifndef SW_SABRE_INTERNAL_H
#define SW_SABRE_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "spotwave/sabre.h"

/* (Parameters are never named I or J here: <complex.h>, which <lapacke.h> includes, defines I.) */

#ifdef __CUDACC__
#define SW_SABRE_HD __host__ __device__
#else
#define SW_SABRE_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct sw_sabre {
    sw_context *ctx;
    sw_sabre_params params; /* params.valid points at `valid` below (or NULL)                */
    uint8_t *valid;         /* copy of the mask, nx * ny, or NULL                            */
    int32_t n;              /* nx * ny                                                       */
    int32_t k, m, S, w, L;  /* partitions per side, core squares, S = k m, window, L = w + 1  */
    int32_t G, nl, ns;      /* k^2 partitions, local values, local slopes                    */
    int32_t offx, offy;     /* extended corner (I, J) = lenslet (I - offx, J - offy)         */
    int32_t *ws;            /* k: window start (squares) of partition column/row a           */
    float *Q;               /* nl x ns, column-major                                          */
    int32_t *gidx;          /* G * L^2: lenslet index of local corner r of partition i, -1    */

    /* Shared borders of neighbouring cores. Horizontal pair (a, b)-(a+1, b): id b (k-1) + a;
     * vertical pair (a, b)-(a, b+1): id k (k-1) + b k + a. lo = the first, hi = the second. */
    int32_t npairs;  /* 2 k (k - 1)                                                       */
    int32_t pstride; /* entries per pair: m + 1, or the band's (sabre.c pair_stride)        */
    int32_t *pair_lo, *pair_hi;   /* partition indices i = b k + a                             */
    int32_t *pair_vlo, *pair_vhi; /* npairs * pstride: local value index in lo / hi         */
    uint8_t *pair_use; /* npairs * pstride: 1 = used (inside the pupil, or all if none is)  */
    int32_t *pair_n;   /* npairs: the number used                                            */
    uint8_t *pair_in;  /* npairs: 1 when the border has a vertex inside the pupil             */

    /* H-PME schedule: levels h = 1..p (k = 2^p); level h has (k >> h)^2 groups, group
     * (gx, gy) at index gy (k >> h) + gx; tiles in a group t = tx + 2 ty (tx, ty in {0, 1});
     * hpme[2 (level_base[h-1] + group)] = master tile (bits 0-1) and, in bits 2, 3, 4, whether
     * the borders (master, master^1), (master, master^2), (via, master^3) have a pair with
     * vertices inside the pupil; [.. + 1] = via, the edge neighbour of the master through which
     * the diagonal tile (master ^ 3) is levelled. */
    int32_t p;           /* log2(k) for H-PME, else 0                                          */
    int32_t *level_base; /* p entries: index of level h's first group                         */
    uint8_t *hpme;

    /* D-PME: master partition, distance of each partition to it, iterations. */
    int32_t dpme_master, dpme_iters;
    int32_t *dpme_dist; /* G                                                                  */

    /* Fill iterations: the padded corners of the extended array (not a valid real lenslet), their
     * owner partitions and local corners, and for each partition's local corner its padded index
     * (or -1). */
    int32_t npad;
    int32_t *pad_part, *pad_local; /* npad: partition, local corner y L + x                     */
    int32_t *pidx;                 /* G * L^2                                                    */

    /* Robust passes: for each partition's local corner, 1 when it is a real, valid lenslet (the
     * corners whose residuals the pass looks at and whose slopes it may pull in); NULL without
     * robust passes. */
    uint8_t *rreal; /* G * L^2                                                                */

    /* Step 6' (sw_sabre_set_projection): P (w^2 x nl, row-major, as given) and q1 (w^2, its row
     * sums in double, stored as float); NULL when no projection is set. With
     * sw_sabre_set_projection_partitions proj_count = G matrices, partition i's at
     * proj + i w^2 nl and its row sums at q1 + i w^2; 1 for one shared matrix (0: none). */
    float *proj;
    float *q1;
    int32_t proj_count;

    sw_sabre_info info;
    double kernel_us;
    void *gpu; /* sabre_cuda.cu's state, NULL on CPU contexts                                 */
};

/* Partition column/row owning corner or centre coordinate X (0..S) of the extended lattice: the
 * core [a m, (a + 1) m) that contains it, the last one for X = S. */
static inline SW_SABRE_HD int32_t sw_sabre_owner(int32_t X, int32_t m, int32_t k)
{
    int32_t a = X / m;
    return a < k ? a : k - 1;
}

/*
 * Where value v (0 .. (S+1)^2 + S^2 - 1) of the extended lattice comes from: the owning partition
 * i and the local value index in its window (corner (x, y): y L + x; centre (x, y): L^2 + y w + x).
 */
static inline SW_SABRE_HD void sw_sabre_locate_value(int64_t v, int32_t S, int32_t m, int32_t k,
                                                     int32_t w, const int32_t *ws, int32_t *part,
                                                     int32_t *local)
{
    int32_t L = w + 1;
    int64_t ncorner = (int64_t)(S + 1) * (S + 1);
    int32_t X, Y, a, b;
    if (v < ncorner) {
        X = (int32_t)(v % (S + 1));
        Y = (int32_t)(v / (S + 1));
        a = sw_sabre_owner(X, m, k);
        b = sw_sabre_owner(Y, m, k);
        *local = (Y - ws[b]) * L + (X - ws[a]);
    } else {
        int64_t c = v - ncorner;
        X = (int32_t)(c % S);
        Y = (int32_t)(c / S);
        a = sw_sabre_owner(X, m, k);
        b = sw_sabre_owner(Y, m, k);
        *local = L * L + (Y - ws[b]) * w + (X - ws[a]);
    }
    *part = b * k + a;
}

/*
 * Triangle q (0 bottom, 1 right, 2 top, 3 left) of square (I, J) = (si, sj) of a lattice with sx x
 * sy squares: idx[0], idx[1] its two corner vertices (the data vertices: bottom (I,J),(I+1,J);
 * right (I+1,J),(I+1,J+1); top (I+1,J+1),(I,J+1); left (I,J+1),(I,J)), idx[2] the centre; its
 * gradient in lattice units is gx = sum cx[j] s[idx[j]], gy = sum cy[j] s[idx[j]].
 */
static inline SW_SABRE_HD void sw_sabre_triangle(int32_t sx, int32_t sy, int32_t si, int32_t sj,
                                                 int q, int64_t idx[3], double cx[3], double cy[3])
{
    int64_t a = (int64_t)sj * (sx + 1) + si; /* (si, sj)       */
    int64_t b = a + 1;                       /* (si+1, sj)     */
    int64_t d = b + (sx + 1);                /* (si+1, sj+1)   */
    int64_t e = a + (sx + 1);                /* (si, sj+1)     */
    int64_t c = (int64_t)(sx + 1) * (sy + 1) + (int64_t)sj * sx + si;
    idx[2] = c;
    switch (q) {
    case 0: /* bottom: s = a (1-u-v) + b (u-v) + c 2v */
        idx[0] = a, idx[1] = b;
        cx[0] = -1, cx[1] = 1, cx[2] = 0;
        cy[0] = -1, cy[1] = -1, cy[2] = 2;
        break;
    case 1: /* right: s = b (u-v) + d (u+v-1) + c (2-2u) */
        idx[0] = b, idx[1] = d;
        cx[0] = 1, cx[1] = 1, cx[2] = -2;
        cy[0] = -1, cy[1] = 1, cy[2] = 0;
        break;
    case 2: /* top: s = d (u+v-1) + e (v-u) + c (2-2v) */
        idx[0] = d, idx[1] = e;
        cx[0] = 1, cx[1] = -1, cx[2] = 0;
        cy[0] = 1, cy[1] = 1, cy[2] = -2;
        break;
    default: /* left: s = e (v-u) + a (1-u-v) + c 2u */
        idx[0] = e, idx[1] = a;
        cx[0] = -1, cx[1] = -1, cx[2] = 2;
        cy[0] = 1, cy[1] = -1, cy[2] = 0;
        break;
    }
}

/*
 * The triangles of a lattice with sx x sy squares that have corner (x, y) as a data corner: those
 * of the (up to) four squares around it, two per square (square (x, y): bottom and left; (x-1, y):
 * bottom and right; (x-1, y-1): right and top; (x, y-1): top and left), each covering one eighth
 * of the lenslet square centred on the corner. sq[j] = the square's index J sx + I, q[j] the
 * triangle (0 bottom .. 3 left); returns their number n_v (8 inside, 4 on an edge, 2 at a corner
 * of the lattice).
 */
static inline SW_SABRE_HD int sw_sabre_corner_triangles(int32_t sx, int32_t sy, int32_t x,
                                                        int32_t y, int32_t sqi[8], int32_t sqj[8],
                                                        int q[8])
{
    int n = 0;
    for (int s = 0; s < 4; s++) { /* squares (x, y), (x-1, y), (x-1, y-1), (x, y-1) */
        int32_t si = x - (s == 1 || s == 2), sj = y - (s >= 2);
        if (si < 0 || sj < 0 || si >= sx || sj >= sy)
            continue;
        sqi[n] = sqi[n + 1] = si;
        sqj[n] = sqj[n + 1] = sj;
        q[n] = s > 0 ? s - 1 : 0; /* bottom, bottom, right, top */
        q[n + 1] = s > 0 ? s : 3; /* left, right, top, left */
        n += 2;
    }
    return n;
}

/*
 * The lenslet-mean row of corner (x, y) (sabre.h's measurement model): the mean of the gradients
 * of its n_v triangles (sw_sabre_corner_triangles), as coefficients on at most 9 vertices:
 * mean gradient = (sum_j ax[j] s[vidx[j]], sum_j ay[j] s[vidx[j]]) in lattice units. *nt = n_v;
 * returns the number of vertices (coefficients that cancel, as the corner's own inside the
 * lattice, are kept as zeros). Host code (plan building).
 */
static inline int sw_sabre_mean_row(int32_t sx, int32_t sy, int32_t x, int32_t y, int64_t vidx[9],
                                    double ax[9], double ay[9], int *nt)
{
    int32_t sqi[8], sqj[8];
    int q[8], nv = 0;
    const int n = sw_sabre_corner_triangles(sx, sy, x, y, sqi, sqj, q);
    for (int t = 0; t < n; t++) {
        int64_t idx[3];
        double cx[3], cy[3];
        sw_sabre_triangle(sx, sy, sqi[t], sqj[t], q[t], idx, cx, cy);
        for (int j = 0; j < 3; j++) {
            int f = 0;
            while (f < nv && vidx[f] != idx[j])
                f++;
            if (f == nv) {
                vidx[nv] = idx[j];
                ax[nv] = ay[nv] = 0.0;
                nv++;
            }
            ax[f] += cx[j];
            ay[f] += cy[j];
        }
    }
    for (int f = 0; f < nv; f++) {
        ax[f] /= n;
        ay[f] /= n;
    }
    *nt = n;
    return nv;
}

/* The weights of the model (sabre.h) for a lenslet with n_v triangles: its mean rows' (1 - lambda
 * when the triangulation covers its square, n_v = 8, else 0), each of its triangles' rows'
 * (lambda / 8), and the factor of a_v in its slope's right-hand side (the mean rows' weight plus
 * the triangles' lambda n_v / 8). */
static inline double sw_sabre_mean_weight(int nt, double lambda)
{
    return nt == 8 ? 1.0 - lambda : 0.0;
}

static inline double sw_sabre_tri_weight(int nt, double lambda)
{
    (void)nt;
    return lambda / 8.0;
}

static inline double sw_sabre_data_weight(int nt, double lambda)
{
    return sw_sabre_mean_weight(nt, lambda) + sw_sabre_tri_weight(nt, lambda) * nt;
}

/*
 * The triangle used to evaluate the spline at lattice position (x, y) (lattice units: corner
 * (I, J) at (I, J)) and the weights of its three vertices: value = sum w[j] s[idx[j]].
 * Square (I, J) = the clamped floor of (x, y); with (fx, fy) = the offset from its centre:
 * bottom if -fy >= |fx|, else top if fy >= |fx|, else right if fx > 0, else left. Points
 * outside the lattice get that triangle's plane extended.
 */
static inline SW_SABRE_HD void sw_sabre_locate(int32_t sx, int32_t sy, double x, double y,
                                               int64_t idx[3], double wgt[3])
{
    double fxl = floor(x), fyl = floor(y);
    int32_t si = fxl < 0 ? 0 : (fxl > sx - 1 ? sx - 1 : (int32_t)fxl);
    int32_t sj = fyl < 0 ? 0 : (fyl > sy - 1 ? sy - 1 : (int32_t)fyl);
    double u = x - si, v = y - sj; /* position in the square, (0.5, 0.5) its centre */
    double fx = u - 0.5, fy = v - 0.5, ax = fabs(fx);
    double cx[3], cy[3];
    int q = (-fy >= ax) ? 0 : (fy >= ax) ? 2 : (fx > 0) ? 1 : 3;
    sw_sabre_triangle(sx, sy, si, sj, q, idx, cx, cy);
    switch (q) {
    case 0: wgt[0] = 1 - u - v, wgt[1] = u - v, wgt[2] = 2 * v; break;
    case 1: wgt[0] = u - v, wgt[1] = u + v - 1, wgt[2] = 2 - 2 * u; break;
    case 2: wgt[0] = u + v - 1, wgt[1] = v - u, wgt[2] = 2 - 2 * v; break;
    default: wgt[0] = v - u, wgt[1] = 1 - u - v, wgt[2] = 2 * u; break;
    }
}

/* Step 2b's prediction: the model's slope (lattice units: divide by the pitch) at local corner
 * (lx, ly) of a window of w squares, from that window's values y: the mean over the window's
 * triangles that have the corner as a data vertex of their gradient (each summed in double in
 * order j = 0, 1, 2). */
static inline SW_SABRE_HD void sw_sabre_predict(const float *y, int32_t w, int32_t lx, int32_t ly,
                                                double *gx, double *gy)
{
    const int64_t me = (int64_t)ly * (w + 1) + lx;
    double sx = 0.0, sy = 0.0;
    int cnt = 0;
    for (int32_t qy = ly - 1; qy <= ly; qy++)
        for (int32_t qx = lx - 1; qx <= lx; qx++) {
            if (qx < 0 || qy < 0 || qx >= w || qy >= w)
                continue;
            for (int q = 0; q < 4; q++) {
                int64_t idx[3];
                double cx[3], cy[3];
                sw_sabre_triangle(w, w, qx, qy, q, idx, cx, cy);
                if (idx[0] != me && idx[1] != me)
                    continue;
                double tx = 0.0, ty = 0.0;
                for (int j = 0; j < 3; j++) {
                    tx += cx[j] * (double)y[idx[j]];
                    ty += cy[j] * (double)y[idx[j]];
                }
                sx += tx;
                sy += ty;
                cnt++;
            }
        }
    *gx = cnt ? sx / cnt : 0.0;
    *gy = cnt ? sy / cnt : 0.0;
}

/* Step 4: the offsets K[G] from the pair sums (double), as both backends define them:
 *   H-PME: for h = 1..p, s = 2^(h-1): for every group, step A (the master's two edge
 *   neighbours, both from the K before the step), then step B (the diagonal through `via`).
 *   Levelling target tile T to master-side tile M across their shared tile border: over the s
 *   partition pairs r = 0..s-1 in order, num += o psum[p] + n_p (K[M side] - K[T side]),
 *   den += n_p (o = +1 when the M-side partition is the pair's hi, -1 when lo), skipping the
 *   pairs with pair_in = 0 when any pair of that border has pair_in = 1 (the fallback to all
 *   vertices is per tile border, not per pair); the offset num / den (0 if den = 0) is added to
 *   K of every partition of T.
 *   D-PME: dpme_iters Jacobi iterations: for every partition i with upstream neighbours (dist
 *   smaller by one) whose pair has n > 0, K'[i] = K[i] + max over them of
 *   (o psum + n (K[nb] - K[i])) / n (o = +1 when nb is the pair's hi); others keep K. */
void sw_sabre_pme_cpu(const sw_sabre *plan, const double *psum, double *K);

/* The element of rank floor((n - 1) / 2) of a[0..n-1] (the lower median; a is reordered), n >= 1:
 * the robust passes' scale (sabre_global.c). */
double sw_sabre_lower_median(double *a, int64_t n);

/* Shared by global SABRE, its degree-d variant (sabre_spline.c) and Fried (sabre_global.c):
 * band storage of a symmetric positive definite normal matrix (lower, LAPACK 'L', column j at
 * ab[j (kd + 1)]), refused over 4 GiB; its Cholesky factor (SW_EINVAL naming `why` for a zero or
 * tiny pivot: singular); a solve in place. The create checks (out, ctx, sizes 2..4096, pitch), the
 * NaN slope check and the mask copy (returns the number of valid lenslets). */
sw_status sw_sabre_band_alloc(sw_context *ctx, const char *who, int32_t n, int32_t kd, double **ab);
sw_status sw_sabre_band_factor(sw_context *ctx, const char *who, const char *why, double *ab,
                               int32_t n, int32_t kd);
sw_status sw_sabre_band_solve(sw_context *ctx, const char *who, int32_t n, int32_t kd,
                              const double *ab, double *rhs);
sw_status sw_sabre_check_create(sw_context *ctx, const char *who, int have_out, int32_t nx,
                                int32_t ny, double pitch);
sw_status sw_sabre_check_slopes(sw_context *ctx, const char *who, int32_t nx, int32_t ny,
                                const uint8_t *valid, const float *slopes);
int64_t sw_sabre_copy_mask(const uint8_t *valid, int64_t nlens, uint8_t *out);

/* GPU side (sabre_cuda.cu). create: upload Q and the tables, cuBLAS handle on the context's
 * stream, device buffers; destroy: frees it (NULL gpu ignored); run: the run semantics above. */
sw_status sw_sabre_gpu_create(sw_sabre *plan);
void sw_sabre_gpu_destroy(sw_sabre *plan);
sw_status sw_sabre_gpu_run(sw_sabre *plan, const float *slopes, sw_memory memory, float *values,
                           float *actuators);
/* The projection's GPU copy (P and q1) after sw_sabre_set_projection or
 * sw_sabre_set_projection_partitions (NULL P: removed); captures the run's graph again when a
 * projection is set or removed, or changes between one shared matrix and one per partition (its
 * device buffers are made once and kept, so a new P of the same kind on a plan that has one only
 * replaces their contents; they are made again when a projection needs more). A graph of the
 * real-time chain that captured sw_sabre_gpu_enqueue must likewise be captured again after a
 * projection is set, removed or changes kind, not after it is replaced by one of its kind. */
sw_status sw_sabre_gpu_set_projection(sw_sabre *plan);

/* For the real-time chain (src/loop/rtc_cuda.cu), which captures a D-SABRE run inside its own
 * graph: the plan's device buffers of the slopes (2 n floats, x then y), the extended lattice's
 * values and the actuators ((nx + 1)(ny + 1), the projected commands when a projection is set);
 * sw_sabre_gpu_enqueue queues one run's kernels (steps 1-6 / 6') on the context's stream, reading
 * that slope buffer: no copies, no synchronisation, no allocation (capturable). The NaN flag is
 * written as in a run, but only sw_sabre_run reports it. */
float *sw_sabre_gpu_slopes(sw_sabre *plan);
float *sw_sabre_gpu_values(sw_sabre *plan);
float *sw_sabre_gpu_actuators(sw_sabre *plan);
sw_status sw_sabre_gpu_enqueue(sw_sabre *plan);

#ifdef __cplusplus
}
#endif

#endif /* SW_SABRE_INTERNAL_H */
