/*
 * The GPU twin of D-SABRE's run (seed 002 section 5 and its Table 1; the run semantics, steps 1-6,
 * are those of sabre_internal.h). sabre.c builds the plan and Q on the host, runs on the CPU and is
 * the reference; this file uploads the plan at create and runs it on the context's stream.
 *
 * The kernels are one CUDA graph, captured at create (after one plain pass that also loads the
 * kernels):
 *   1. sb_gather: one thread per entry of X (ns x G): the slope of local corner r of partition i
 *      (zero or nearest padding, section 3.B.2), and for a non-finite slope of a valid lenslet an
 *      atomicMin of its index into the NaN flag;
 *   2. cublasSgemm Y = Q X: all local reconstructions in one product (Eq. 6 for every partition,
 *      stacked as Eq. 16; Eq. 7's expansion is folded into Q by sabre.c);
 *   2b. per fill iteration: sb_predict (the padded corners' slopes from Y), sb_fill (into X),
 *      cublasSgemm again;
 *   2c. per robust pass: sb_robust (one block per partition: model slopes, residuals, their
 *      median by ranking, the pseudo-observations into X), cublasSgemm again;
 *   3. sb_pair_sums: one warp per pair of neighbouring cores: the sum over the used shared border
 *      vertices of (hi - lo) in double (the addends of Eq. 8 and Eq. 10), or with robust_pme n
 *      times their median (done inside the PME block instead, it took 65 us: one SM for 2k(k-1)
 *      short sums);
 *   4. sb_pme: ONE block does all the piston equalisation: H-PME (Eq. 10-11, levels h = 1..p,
 *      two steps per level, __syncthreads between) or D-PME (Eq. 8-9, Jacobi iterations), its
 *      data in shared memory when it fits (the device's opt-in limit), with the arithmetic of
 *      sw_sabre_pme_cpu; PME NONE: K = 0;
 *   6'. with a projection (sw_sabre_set_projection, seed 002 Eq. 14-16): cublasSgemm Z = P Y,
 *      all windows' local commands in one product, after the last Y;
 *   5+6. sb_output: one thread per value of the extended lattice (sw_sabre_locate_value) and one
 *      per lenslet corner (sw_sabre_locate; with a projection step 6', the owner's Z + K q1); its
 *      thread 0 hands the NaN flag to mapped pinned host memory.
 * Setting or removing a projection captures the graph again (P, q1 and Z keep their device
 * addresses once made, so a new P of a plan that had one needs no new graph, unless it changes
 * between one shared matrix and one per partition: sw_sabre_set_projection_partitions, whose
 * step 6' is one cublasSgemmStridedBatched of G single-column products). The same work is
 * sw_sabre_gpu_enqueue for the real-time chain, which captures it into a graph of its own.
 * Before them a memset arms the NaN flag. The copy in and the copies out are queued on the stream
 * around the graph, then one wait. (A graph holding the copies too, re-pointed per call, measured
 * no faster: 49-66 us end to end at 100 x 100.)
 *
 * Double arithmetic that sw_sabre_pme_cpu also does (sabre.c is compiled with
 * -ffp-contract=off) is written with __dadd_rn / __dmul_rn so that nvcc cannot fuse it into
 * multiply-adds: given the same pair sums, the offsets are the CPU's to the last bit. The pair
 * sums are reduced in a tree (not the CPU's order) and the GEMM adds in cuBLAS's order, so GPU and
 * CPU results agree to float rounding, not bit for bit.
 */
#include "core/core_internal.h"
#include "sabre/sabre_internal.h"
#include "core/cuda_util.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "sabre"

/* Launch shapes and sizes. The cuBLAS workspace is the plan's own, so that the capture allocates
 * nothing; the flag's value SB_NO_NAN (a memset of 0x7f bytes) means every slope read was finite.
 */
#define SB_THREADS     256         /* element-wise kernels */
#define SB_PME_THREADS 1024        /* the PME block, at most */
#define SB_PME_SMEM    (200 << 10) /* the PME block's data in shared memory up to this */
#define SB_BLAS_WS     ((size_t)4 << 20)
#define SB_NO_NAN      0x7f7f7f7f

struct sb_gpu {
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;
    /* the plan's tables */
    float *Q;
    int32_t *gidx, *ws;
    int32_t *pair_lo, *pair_hi, *pair_vlo, *pair_vhi, *pair_n;
    uint8_t *pair_use, *pair_in;
    int32_t *level_base;
    uint8_t *hpme;
    int32_t *dpme_dist;
    /* per-run buffers */
    float *slopes, *X, *Y, *values, *act;
    int32_t *pad_part, *pad_local, *pidx; /* fill iterations' tables, and their slopes F */
    float *F;
    uint8_t *rreal; /* robust passes: the real local corners, and the residual lengths R */
    double *R;
    /* step 6' (sw_sabre_set_projection): P (w^2 x nl row-major), q1 (w^2), Z = P Y (w^2 x G);
     * with sw_sabre_set_projection_partitions G of P and of q1, stacked. Allocated with the first
     * projection and kept, so that their addresses stay fixed (made again only when a projection
     * needs more than they hold: P_cap, q1_cap floats); proj says what the graph does with them:
     * 0 nothing, 1 one shared P (sgemm), 2 one P per partition (strided-batched sgemm) */
    float *P, *q1, *Z;
    size_t P_cap, q1_cap;
    int proj;
    double *psum, *K, *scratch;
    int *flag;     /* device: lowest lenslet with a non-finite slope, or SB_NO_NAN */
    int *flag_h;   /* mapped pinned copy, written by sb_actuators */
    int *flag_map; /* its device address */
    int64_t nvalues;
    int32_t nact;
    size_t pme_smem; /* dynamic shared memory of sb_pme (0: K and scratch in global memory) */
    int pme_threads;
    sw_event_pair ev; /* around the graph */
    sw_graph graph;
};

/* Bytes of the H-PME schedule (2 per group over all levels; 0 unless H-PME runs). */
static int32_t sb_hpme_bytes(const sw_sabre *plan)
{
    if (plan->params.pme != SW_SABRE_PME_HIERARCHICAL || plan->p <= 0)
        return 0;
    int32_t n = 0;
    for (int32_t h = 1; h <= plan->p; h++)
        n += 2 * (plan->k >> h) * (plan->k >> h);
    return n;
}

/* ================================================================== kernels */

/* Step 1: X[r + ns i] = the slope of local corner r of partition i (x for r < L^2, else y), 0 for
 * padding and invalid lenslets; a non-finite slope of a valid lenslet leaves its index in flag
 * (the lowest of them, by atomicMin). */
__global__ void sb_gather(const float *__restrict__ slopes, const int32_t *__restrict__ gidx,
                          int32_t n, int32_t L2, int32_t ns, int64_t total, float *__restrict__ X,
                          int *__restrict__ flag)
{
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total)
        return;
    int32_t i = (int32_t)(e / ns), r = (int32_t)(e - (int64_t)i * ns);
    int32_t y = r >= L2;
    int32_t l = gidx[(int64_t)i * L2 + (y ? r - L2 : r)];
    float s = 0.0f;
    if (l >= 0) {
        s = slopes[l + (y ? n : 0)];
        if (!isfinite(s))
            atomicMin(flag, l);
    }
    X[e] = s;
}

/* Step 3: psum[p] = sum over the used border vertices j of pair p (pstride entries) of (double)
 * Y[hi] - (double) Y[lo]; one warp per pair, lanes over j, a shuffle reduction. With robust_pme:
 * n times the lower median of those differences (the element of rank floor((n - 1) / 2), ties
 * broken by the entry's index), found by each lane ranking its own entries against all the pair's:
 * exactly one lane holds it and writes it. */
__global__ void sb_pair_sums(const float *__restrict__ Y, int32_t nl, int32_t npairs, int32_t m1,
                             const int32_t *__restrict__ lo, const int32_t *__restrict__ hi,
                             const int32_t *__restrict__ vlo, const int32_t *__restrict__ vhi,
                             const uint8_t *__restrict__ use, int robust, double *__restrict__ psum)
{
    int32_t p = (int32_t)(((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (p >= npairs)
        return; /* p is the same for the whole warp */
    const float *ylo = Y + (int64_t)nl * lo[p], *yhi = Y + (int64_t)nl * hi[p];
    const int64_t e0 = (int64_t)p * m1;
    if (robust) {
        int32_t cnt = 0;
        for (int32_t j = 0; j < m1; j++)
            cnt += use[e0 + j] != 0;
        if (cnt == 0) {
            if (lane == 0)
                psum[p] = 0.0;
            return;
        }
        const int32_t want = (cnt - 1) / 2;
        for (int32_t j = lane; j < m1; j += 32) {
            if (!use[e0 + j])
                continue;
            const double dj = (double)yhi[vhi[e0 + j]] - (double)ylo[vlo[e0 + j]];
            int32_t rank = 0;
            for (int32_t t = 0; t < m1; t++) {
                if (!use[e0 + t] || t == j)
                    continue;
                const double dt = (double)yhi[vhi[e0 + t]] - (double)ylo[vlo[e0 + t]];
                rank += dt < dj || (dt == dj && t < j);
            }
            if (rank == want)
                psum[p] = __dmul_rn((double)cnt, dj);
        }
        return;
    }
    double s = 0.0;
    for (int32_t j = lane; j < m1; j += 32) {
        int64_t q = e0 + j;
        if (use[q])
            s += (double)yhi[vhi[q]] - (double)ylo[vlo[q]];
    }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0)
        psum[p] = s;
}

struct sb_pme_args {
    int32_t pme; /* sw_sabre_pme */
    int32_t k, G, p, npairs, iters;
    const double *psum;
    const int32_t *pair_lo, *pair_hi, *pair_n;
    const uint8_t *pair_in;
    const int32_t *level_base;
    const uint8_t *hpme;
    int32_t nhpme; /* bytes of hpme */
    const int32_t *dist;
    double *K;       /* output, G */
    double *scratch; /* G, used when the shared memory is not */
    int shared;      /* K, scratch and the pair sums in dynamic shared memory */
};

/* One H-PME levelling (Eq. 10): the offset of target tile T to master-side tile M (tiles t = tx
 * + 2 ty of group g at level h, edge neighbours) over the s = 2^(h-1) partition pairs across their
 * border, in order r = 0..s-1: num += o psum + n (K[M side] - K[T side]), den += n. */
__device__ static double sb_level_offset(const sb_pme_args &a, const double *K, const double *ps,
                                         const int32_t *pn, const uint8_t *pin, int any_in,
                                         int32_t h, int32_t g, int T, int M)
{
    const int32_t k = a.k, s = 1 << (h - 1), ng = k >> h;
    const int32_t gx = g & (ng - 1), gy = g >> (a.p - h); /* k = 2^p: shifts, not divisions */
    double num = 0.0, den = 0.0;
    int m_hi;              /* M is the pairs' hi side */
    int32_t pid0, d;       /* pair of r = 0 and the id step along the border */
    int32_t lo0, dlo, dhi; /* lo partition of r = 0, its step along the border, hi - lo */
    if ((T ^ M) & 1) {     /* left and right tiles: horizontal pairs (a, b)-(a+1, b) */
        int32_t ac = 2 * gx * s + s - 1, b0 = (2 * gy + (M >> 1)) * s;
        m_hi = M & 1;
        pid0 = b0 * (k - 1) + ac;
        d = k - 1;
        lo0 = b0 * k + ac, dlo = k, dhi = 1;
    } else { /* bottom and top tiles: vertical pairs (a, b)-(a, b+1) */
        int32_t bc = 2 * gy * s + s - 1, a0 = (2 * gx + (M & 1)) * s;
        m_hi = M >> 1;
        pid0 = k * (k - 1) + bc * k + a0;
        d = 1;
        lo0 = bc * k + a0, dlo = 1, dhi = k;
    }
    /* the pairs' partitions follow from the pair ids (sabre_internal.h's numbering), so the loop
     * reads only the block's shared copies: at the top levels one thread walks up to k/2 pairs */
    /* any_in (from the schedule): pairs wholly in the padding count only when the whole border
     * is */
    for (int32_t r = 0; r < s; r++) {
        int32_t pid = pid0 + r * d;
        if (any_in && !pin[pid])
            continue;
        int32_t n = pn[pid];
        int32_t lo = lo0 + r * dlo, hi = lo + dhi;
        double km = K[m_hi ? hi : lo], kt = K[m_hi ? lo : hi];
        double po = m_hi ? ps[pid] : -ps[pid];
        num = __dadd_rn(num, __dadd_rn(po, __dmul_rn((double)n, km - kt)));
        den = __dadd_rn(den, (double)n);
    }
    return den > 0.0 ? num / den : 0.0;
}

/* Step 4: the offsets K[G] (sw_sabre_pme_cpu's definition), all in one block. */
__global__ void __launch_bounds__(SB_PME_THREADS) sb_pme(sb_pme_args a)
{
    extern __shared__ double sh[];
    const int32_t G = a.G, k = a.k, tid = threadIdx.x, nt = blockDim.x;
    double *K, *tmp;
    const double *ps;
    const int32_t *pn, *dist;
    const uint8_t *hpme, *pin;
    if (a.shared) {
        /* shared: K[G], tmp[G], psum[np] (double), pair_n[np], dist[G] (int32), hpme bytes */
        K = sh;
        tmp = sh + G;
        double *p2 = sh + 2 * G;
        int32_t *n2 = (int32_t *)(p2 + a.npairs), *d2 = n2 + a.npairs;
        uint8_t *h2 = (uint8_t *)(d2 + G), *i2 = h2 + a.nhpme;
        for (int32_t j = tid; j < a.npairs; j += nt) {
            p2[j] = a.psum[j];
            n2[j] = a.pair_n[j];
        }
        if (a.dist != NULL) /* D-PME only */
            for (int32_t j = tid; j < G; j += nt)
                d2[j] = a.dist[j];
        for (int32_t j = tid; j < a.nhpme; j += nt)
            h2[j] = a.hpme[j];
        for (int32_t j = tid; j < a.npairs; j += nt)
            i2[j] = a.pair_in[j];
        ps = p2, pn = n2, dist = d2, hpme = h2, pin = i2;
    } else {
        K = a.K;
        tmp = a.scratch;
        ps = a.psum, pn = a.pair_n, dist = a.dist, hpme = a.hpme, pin = a.pair_in;
    }
    for (int32_t i = tid; i < G; i += nt)
        K[i] = 0.0;
    __syncthreads();

    if (a.pme == SW_SABRE_PME_HIERARCHICAL) {
        /* Eq. 10-11: levels h = 1..p; groups of 2 x 2 tiles of 2^(h-1) x 2^(h-1) partitions */
        for (int32_t h = 1; h <= a.p; h++) {
            const int32_t ng = k >> h, ngr = ng * ng, base = a.level_base[h - 1];
            /* step A: the master's two edge neighbours, both from the K before the step */
            for (int32_t j = tid; j < 2 * ngr; j += nt) {
                int32_t g = j >> 1;
                const int e0 = hpme[2 * (base + g)], M = e0 & 3;
                tmp[j] = sb_level_offset(a, K, ps, pn, pin, (e0 >> (2 + (j & 1))) & 1, h, g,
                                         M ^ (1 << (j & 1)), M);
            }
            __syncthreads();
            for (int32_t i = tid; i < G; i += nt) {
                int32_t ia = i & (k - 1), ib = i >> a.p, g = ((ib >> h) << (a.p - h)) + (ia >> h);
                int t = ((ia >> (h - 1)) & 1) | (((ib >> (h - 1)) & 1) << 1);
                int M = hpme[2 * (base + g)] & 3;
                if (t == (M ^ 1))
                    K[i] = __dadd_rn(K[i], tmp[2 * g]);
                else if (t == (M ^ 2))
                    K[i] = __dadd_rn(K[i], tmp[2 * g + 1]);
            }
            __syncthreads();
            /* step B: the diagonal tile through `via` */
            for (int32_t g = tid; g < ngr; g += nt) {
                const int e0 = hpme[2 * (base + g)], M = e0 & 3, via = hpme[2 * (base + g) + 1];
                tmp[g] = sb_level_offset(a, K, ps, pn, pin, (e0 >> 4) & 1, h, g, M ^ 3, via);
            }
            __syncthreads();
            for (int32_t i = tid; i < G; i += nt) {
                int32_t ia = i & (k - 1), ib = i >> a.p, g = ((ib >> h) << (a.p - h)) + (ia >> h);
                int t = ((ia >> (h - 1)) & 1) | (((ib >> (h - 1)) & 1) << 1);
                if (t == ((hpme[2 * (base + g)] & 3) ^ 3))
                    K[i] = __dadd_rn(K[i], tmp[g]);
            }
            __syncthreads();
        }
    } else if (a.pme == SW_SABRE_PME_DISTRIBUTED) {
        /* Eq. 8-9: Jacobi iterations; each partition adds the largest mean difference to its
         * upstream neighbours (one step closer to the master). The neighbours a partition uses
         * do not change between iterations: when every thread has one partition (G <= threads)
         * they are found once, in sw_sabre_pme_cpu's order (right, left, above, below), and
         * each iteration only reads K. */
        double *cur = K, *nxt = tmp;
        if (G <= nt) {
            int32_t up_nb[4], up_pid[4], cnt = 0;
            double up_n[4], up_o[4];
            if (tid < G) {
                const int32_t i = tid, ia = i % k, ib = i / k, d = dist[i];
                const int32_t nb[4] = {i + 1, i - 1, i + k, i - k};
                const int32_t pid[4] = {ib * (k - 1) + ia, ib * (k - 1) + ia - 1,
                                        k * (k - 1) + ib * k + ia, k * (k - 1) + (ib - 1) * k + ia};
                const int ok[4] = {ia<k - 1, ia> 0, ib<k - 1, ib> 0};
                for (int q = 0; q < 4; q++) {
                    if (!ok[q] || dist[nb[q]] != d - 1 || pn[pid[q]] <= 0)
                        continue;
                    up_nb[cnt] = nb[q];
                    up_pid[cnt] = pid[q];
                    up_n[cnt] = (double)pn[pid[q]];
                    up_o[cnt] = (q & 1) ? -1.0 : 1.0; /* o = +1: the neighbour is the pair's hi */
                    cnt++;
                }
            }
            for (int32_t it = 0; it < a.iters; it++) {
                if (tid < G) {
                    double best = 0.0;
                    for (int q = 0; q < cnt; q++) {
                        double po = up_o[q] > 0 ? ps[up_pid[q]] : -ps[up_pid[q]];
                        double c =
                            __dadd_rn(po, __dmul_rn(up_n[q], cur[up_nb[q]] - cur[tid])) / up_n[q];
                        if (q == 0 || c > best)
                            best = c;
                    }
                    nxt[tid] = cnt ? __dadd_rn(cur[tid], best) : cur[tid];
                }
                __syncthreads();
                double *t = cur;
                cur = nxt;
                nxt = t;
            }
        } else {
            for (int32_t it = 0; it < a.iters; it++) {
                for (int32_t i = tid; i < G; i += nt) {
                    const int32_t ia = i % k, ib = i / k, d = dist[i];
                    const int32_t nb[4] = {i + 1, i - 1, i + k, i - k};
                    const int32_t pid[4] = {ib * (k - 1) + ia, ib * (k - 1) + ia - 1,
                                            k * (k - 1) + ib * k + ia,
                                            k * (k - 1) + (ib - 1) * k + ia};
                    const int ok[4] = {ia<k - 1, ia> 0, ib<k - 1, ib> 0};
                    double best = 0.0;
                    int have = 0;
                    for (int q = 0; q < 4; q++) {
                        if (!ok[q] || dist[nb[q]] != d - 1 || pn[pid[q]] <= 0)
                            continue;
                        double n = (double)pn[pid[q]];
                        double po = (q & 1) ? -ps[pid[q]] : ps[pid[q]];
                        double c = __dadd_rn(po, __dmul_rn(n, cur[nb[q]] - cur[i])) / n;
                        if (!have || c > best)
                            best = c;
                        have = 1;
                    }
                    nxt[i] = have ? __dadd_rn(cur[i], best) : cur[i];
                }
                __syncthreads();
                double *t = cur;
                cur = nxt;
                nxt = t;
            }
        }
        K = cur;
    }
    if (K != a.K)
        for (int32_t i = tid; i < G; i += nt)
            a.K[i] = K[i];
}

/* Step 5's value v of the extended lattice: (float) ((double) Y[local + nl owner] + K[owner]). */
__device__ static float sb_value(const float *__restrict__ Y, const double *__restrict__ K,
                                 const int32_t *__restrict__ ws, int32_t S, int32_t m, int32_t k,
                                 int32_t w, int32_t nl, int64_t v)
{
    int32_t part, local;
    sw_sabre_locate_value(v, S, m, k, w, ws, &part, &local);
    return (float)__dadd_rn((double)Y[local + (int64_t)nl * part], K[part]);
}

/* Steps 5 and 6 in one kernel: threads [0, nvalues) write the assembled values; the next nact
 * threads the spline at lenslet corner (cx, cy) (lenslet position (cx - 1/2, cy - 1/2), lattice
 * position + (offx, offy)): the located triangle's weights times its three vertices' values
 * (each computed as step 5 does, so the same floats), summed in double in order j = 0, 1, 2,
 * rounded to float. With a projection (Z non-NULL) step 6' instead (seed 002 Eq. 14-16): the
 * command of corner (cx, cy), the centre of extended square (I, J) = (cx - 1 + offx, cy - 1 +
 * offy), is (float) ((double) Z[ls + w^2 i] + K[i] q1[ls + q1_stride i]) of the partition i
 * owning the square, ls its local square (q1_stride: 0 for one shared P, w^2 for one per
 * partition). Thread 0 also hands the NaN flag (final since sb_gather) to mapped pinned
 * host memory: no copy of its own. */
__global__ void sb_output(const float *__restrict__ Y, const double *__restrict__ K,
                          const int32_t *__restrict__ ws, int32_t S, int32_t m, int32_t k,
                          int32_t w, int32_t nl, int64_t nvalues, float *__restrict__ values,
                          int32_t nx, int32_t ny, int32_t offx, int32_t offy,
                          float *__restrict__ act, const float *__restrict__ Z,
                          const float *__restrict__ q1, int32_t q1_stride, const int *flag,
                          int *flag_host)
{
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t == 0)
        *flag_host = *flag;
    if (t < nvalues) {
        values[t] = sb_value(Y, K, ws, S, m, k, w, nl, t);
        return;
    }
    const int64_t c = t - nvalues;
    if (c >= (int64_t)(nx + 1) * (ny + 1))
        return;
    const int32_t cx = (int32_t)(c % (nx + 1)), cy = (int32_t)(c / (nx + 1));
    if (Z) {
        const int32_t sqx = cx - 1 + offx, sqy = cy - 1 + offy;
        const int32_t a = sw_sabre_owner(sqx, m, k), b = sw_sabre_owner(sqy, m, k);
        const int32_t i = b * k + a, ls = (sqy - ws[b]) * w + (sqx - ws[a]);
        act[c] = (float)__dadd_rn((double)Z[ls + (int64_t)w * w * i],
                                  __dmul_rn(K[i], (double)q1[ls + (int64_t)q1_stride * i]));
        return;
    }
    int64_t idx[3];
    double wgt[3];
    sw_sabre_locate(S, S, (double)cx - 0.5 + offx, (double)cy - 0.5 + offy, idx, wgt);
    double acc = 0.0;
    for (int j = 0; j < 3; j++)
        acc = __dadd_rn(acc, __dmul_rn(wgt[j], (double)sb_value(Y, K, ws, S, m, k, w, nl, idx[j])));
    act[c] = (float)acc;
}

/* Step 2b (fill iterations): F[q] = the model's slope at padded corner q from its owner's local
 * values (sw_sabre_predict) over the pitch; one thread per padded corner. */
__global__ void sb_predict(const float *__restrict__ Y, int32_t nl, int32_t w, int32_t L,
                           int32_t npad, const int32_t *__restrict__ part,
                           const int32_t *__restrict__ local, double inv_pitch,
                           float *__restrict__ F)
{
    int32_t q = (int32_t)((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (q >= npad)
        return;
    const int32_t lc = local[q];
    double gx, gy;
    sw_sabre_predict(Y + (int64_t)nl * part[q], w, lc % L, lc / L, &gx, &gy);
    F[q] = (float)(gx * inv_pitch);
    F[npad + q] = (float)(gy * inv_pitch);
}

/* Step 2b: the padded local corners' rows of X from F; one thread per local corner. */
__global__ void sb_fill(const int32_t *__restrict__ pidx, int32_t L2, int32_t ns, int64_t total,
                        int32_t npad, const float *__restrict__ F, float *__restrict__ X)
{
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total)
        return;
    const int32_t q = pidx[e];
    if (q < 0)
        return;
    const int64_t i = e / L2, r = e - i * L2;
    X[i * ns + r] = F[q];
    X[i * ns + L2 + r] = F[npad + q];
}

/* Step 2c (robust passes): one block per partition i, threads over its local corners (the
 * arithmetic of sabre.c's robust_partition): at each real corner r, mu = (float) (sw_sabre_predict
 * / pitch) into X, the residual's length into R; m = the lower median of the lengths over the real
 * corners (each thread ranks its own corners against all, ties broken by index, so exactly one
 * corner has rank floor((n - 1) / 2)); then X's rows of r = (float) (mu + r min(1, kappa m / |r|)).
 */
__global__ void sb_robust(const float *__restrict__ slopes, const int32_t *__restrict__ gidx,
                          const uint8_t *__restrict__ real, const float *__restrict__ Y, int32_t n,
                          int32_t nl, int32_t ns, int32_t w, int32_t L, double inv_pitch,
                          double kappa, double *__restrict__ R, float *__restrict__ X)
{
    const int32_t i = blockIdx.x, L2 = L * L;
    const float *y = Y + (int64_t)nl * i;
    float *xi = X + (int64_t)ns * i;
    const int32_t *gi = gidx + (int64_t)i * L2;
    const uint8_t *re = real + (int64_t)i * L2;
    double *Ri = R + (int64_t)i * L2;
    __shared__ int cnt;
    __shared__ double med;
    if (threadIdx.x == 0) {
        cnt = 0;
        med = 0.0;
    }
    __syncthreads();
    for (int32_t r = threadIdx.x; r < L2; r += blockDim.x) {
        if (!re[r])
            continue;
        double gx, gy;
        sw_sabre_predict(y, w, r % L, r / L, &gx, &gy);
        const float mx = (float)__dmul_rn(gx, inv_pitch), my = (float)__dmul_rn(gy, inv_pitch);
        xi[r] = mx;
        xi[L2 + r] = my;
        const double rx = (double)slopes[gi[r]] - (double)mx;
        const double ry = (double)slopes[n + gi[r]] - (double)my;
        Ri[r] = __dsqrt_rn(__dadd_rn(__dmul_rn(rx, rx), __dmul_rn(ry, ry)));
        atomicAdd(&cnt, 1);
    }
    __syncthreads();
    if (cnt == 0)
        return;
    const int32_t want = (cnt - 1) / 2;
    for (int32_t r = threadIdx.x; r < L2; r += blockDim.x) {
        if (!re[r])
            continue;
        const double a = Ri[r];
        int32_t rank = 0;
        for (int32_t t = 0; t < L2; t++)
            if (re[t] && t != r)
                rank += Ri[t] < a || (Ri[t] == a && t < r);
        if (rank == want)
            med = a;
    }
    __syncthreads();
    const double tau = __dmul_rn(kappa, med);
    for (int32_t r = threadIdx.x; r < L2; r += blockDim.x) {
        if (!re[r])
            continue;
        const double mx = xi[r], my = xi[L2 + r], rr = Ri[r];
        const double f = rr > tau ? tau / rr : 1.0;
        xi[r] = (float)__dadd_rn(mx, __dmul_rn(f, (double)slopes[gi[r]] - mx));
        xi[L2 + r] = (float)__dadd_rn(my, __dmul_rn(f, (double)slopes[n + gi[r]] - my));
    }
}

/* ================================================================== the frame's work */

static unsigned sb_blocks(int64_t n, int threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

/* Steps 0-6 (6' with a projection) on the plan's stream, in order (captured into the graph);
 * capturable: kernels, cuBLAS on the plan's own workspace and memsets only. */
static sw_status sb_enqueue(sw_sabre *plan)
{
    sb_gpu *g = (sb_gpu *)plan->gpu;
    cudaStream_t s = g->stream;
    const int32_t L2 = plan->L * plan->L;
    const int64_t nx_ = (int64_t)plan->ns * plan->G;

    SW_CU(cudaMemsetAsync(g->flag, 0x7f, sizeof(int), s)); /* SB_NO_NAN */
    sb_gather<<<sb_blocks(nx_, SB_THREADS), SB_THREADS, 0, s>>>(g->slopes, g->gidx, plan->n, L2,
                                                                plan->ns, nx_, g->X, g->flag);
    SW_CU(cudaGetLastError());

    const float one = 1.0f, zero = 0.0f;
    SW_CUBLAS(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, plan->nl, plan->G, plan->ns, &one,
                          g->Q, plan->nl, g->X, plan->ns, &zero, g->Y, plan->nl));
    /* 2b: fill iterations (predict the padded slopes, refill X, solve again) */
    for (int32_t t = 0; t < plan->params.fill_iterations && plan->npad > 0; t++) {
        sb_predict<<<sb_blocks(plan->npad, SB_THREADS), SB_THREADS, 0, s>>>(
            g->Y, plan->nl, plan->w, plan->L, plan->npad, g->pad_part, g->pad_local,
            1.0 / plan->params.pitch, g->F);
        SW_CU(cudaGetLastError());
        const int64_t nc = (int64_t)plan->G * L2;
        sb_fill<<<sb_blocks(nc, SB_THREADS), SB_THREADS, 0, s>>>(g->pidx, L2, plan->ns, nc,
                                                                 plan->npad, g->F, g->X);
        SW_CU(cudaGetLastError());
        SW_CUBLAS(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, plan->nl, plan->G, plan->ns, &one,
                              g->Q, plan->nl, g->X, plan->ns, &zero, g->Y, plan->nl));
    }
    /* 2c: robust passes (pseudo-observations of the real lenslets, solve again) */
    for (int32_t t = 0; t < plan->params.robust_passes; t++) {
        const int32_t bt = L2 >= SB_THREADS ? SB_THREADS : (L2 + 31) / 32 * 32;
        sb_robust<<<plan->G, bt, 0, s>>>(g->slopes, g->gidx, g->rreal, g->Y, plan->n, plan->nl,
                                         plan->ns, plan->w, plan->L, 1.0 / plan->params.pitch,
                                         plan->params.robust_threshold, g->R, g->X);
        SW_CU(cudaGetLastError());
        SW_CUBLAS(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, plan->nl, plan->G, plan->ns, &one,
                              g->Q, plan->nl, g->X, plan->ns, &zero, g->Y, plan->nl));
    }
    /* 6': all windows' local commands Z = P Y (Eq. 16), P row-major w^2 x nl = column-major
     * nl x w^2, used transposed */
    const int32_t w2 = plan->w * plan->w;
    if (g->proj == 1)
        SW_CUBLAS(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, w2, plan->G, plan->nl, &one, g->P,
                              plan->nl, g->Y, plan->nl, &zero, g->Z, w2));
    else if (g->proj == 2) /* one P per partition (sw_sabre_set_projection_partitions): Z_i =
                              P_i Y_i, a batch of G products of one column each */
        SW_CUBLAS(cublasSgemmStridedBatched(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, w2, 1, plan->nl,
                                            &one, g->P, plan->nl, (long long)w2 * plan->nl, g->Y,
                                            plan->nl, (long long)plan->nl, &zero, g->Z, w2,
                                            (long long)w2, plan->G));

    const sw_sabre_pme pme = plan->params.pme;
    const int equalise = pme == SW_SABRE_PME_HIERARCHICAL  ? plan->p > 0
                         : pme == SW_SABRE_PME_DISTRIBUTED ? plan->dpme_iters > 0
                                                           : 0;
    if (plan->npairs > 0 && equalise) {
        sb_pair_sums<<<sb_blocks((int64_t)plan->npairs * 32, SB_THREADS), SB_THREADS, 0, s>>>(
            g->Y, plan->nl, plan->npairs, plan->pstride, g->pair_lo, g->pair_hi, g->pair_vlo,
            g->pair_vhi, g->pair_use, plan->params.robust_pme, g->psum);
        SW_CU(cudaGetLastError());
        sb_pme_args a;
        memset(&a, 0, sizeof a);
        a.pme = (int32_t)pme;
        a.k = plan->k;
        a.G = plan->G;
        a.p = plan->p;
        a.npairs = plan->npairs;
        a.iters = plan->dpme_iters;
        a.psum = g->psum;
        a.pair_lo = g->pair_lo;
        a.pair_hi = g->pair_hi;
        a.pair_n = g->pair_n;
        a.pair_in = g->pair_in;
        a.level_base = g->level_base;
        a.hpme = g->hpme;
        a.nhpme = sb_hpme_bytes(plan);
        a.dist = g->dpme_dist;
        a.K = g->K;
        a.scratch = g->scratch;
        a.shared = g->pme_smem > 0;
        sb_pme<<<1, g->pme_threads, g->pme_smem, s>>>(a);
        SW_CU(cudaGetLastError());
    } else {
        SW_CU(cudaMemsetAsync(g->K, 0, (size_t)plan->G * sizeof(double), s));
    }

    sb_output<<<sb_blocks(g->nvalues + g->nact, SB_THREADS), SB_THREADS, 0, s>>>(
        g->Y, g->K, g->ws, plan->S, plan->m, plan->k, plan->w, plan->nl, g->nvalues, g->values,
        plan->params.nx, plan->params.ny, plan->offx, plan->offy, g->act, g->proj ? g->Z : NULL,
        g->proj ? g->q1 : NULL, g->proj == 2 ? w2 : 0, g->flag, g->flag_map);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* Captures sb_enqueue into the plan's graph (core/cuda_util.h: the capture is always ended, so
 * that the stream is usable again whatever failed inside). */
static sw_status sb_capture(sw_sabre *plan)
{
    sb_gpu *g = (sb_gpu *)plan->gpu;
    SW_TRY(sw_graph_begin(plan->ctx, SW_CUDA_STAGE, g->stream));
    const sw_status st = sb_enqueue(plan);
    return sw_graph_end(&g->graph, plan->ctx, SW_CUDA_STAGE, "run", g->stream, st, 1);
}

/* ================================================================== the API */

extern "C" void sw_sabre_gpu_destroy(sw_sabre *plan)
{
    sb_gpu *g = (sb_gpu *)plan->gpu;
    if (!g)
        return;
    cudaSetDevice(plan->ctx->device);
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    sw_graph_destroy(&g->graph);
    if (g->blas)
        cublasDestroy(g->blas);
    SW_CUDA_FREE(g->blas_ws, g->Q, g->gidx, g->ws, g->pair_lo, g->pair_hi, g->pair_vlo, g->pair_vhi,
                 g->pair_n, g->pair_use, g->hpme, g->level_base, g->dpme_dist, g->slopes, g->X,
                 g->Y, g->values, g->act, g->psum, g->K, g->scratch, g->flag, g->pad_part,
                 g->pad_local, g->pidx, g->F, g->pair_in, g->P, g->q1, g->Z, g->rreal, g->R);
    if (g->flag_h)
        cudaFreeHost(g->flag_h);
    sw_event_pair_destroy(&g->ev);
    free(g);
    plan->gpu = NULL;
}

extern "C" sw_status sw_sabre_gpu_create(sw_sabre *plan)
{
    sb_gpu *g = (sb_gpu *)calloc(1, sizeof(sb_gpu));
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "sabre: out of memory");
    plan->gpu = g; /* sw_sabre_gpu_destroy frees what is made below, also after a failure */
    SW_CU(cudaSetDevice(plan->ctx->device));
    g->stream = (cudaStream_t)plan->ctx->stream;
    cudaStream_t s = g->stream;

    const int32_t G = plan->G, m1 = plan->pstride, np = plan->npairs;
    const size_t L2 = (size_t)plan->L * plan->L;
    g->nvalues = sw_sabre_lattice_values(&plan->info.lattice);
    g->nact = (plan->params.nx + 1) * (plan->params.ny + 1);

    /* the plan's tables */
    SW_CU(sw_cuda_upload(&g->Q, plan->Q, (size_t)plan->nl * plan->ns, s));
    SW_CU(sw_cuda_upload(&g->gidx, plan->gidx, (size_t)G * L2, s));
    SW_CU(sw_cuda_upload(&g->ws, plan->ws, (size_t)plan->k, s));
    SW_CU(sw_cuda_upload(&g->pair_lo, plan->pair_lo, (size_t)np, s));
    SW_CU(sw_cuda_upload(&g->pair_hi, plan->pair_hi, (size_t)np, s));
    SW_CU(sw_cuda_upload(&g->pair_n, plan->pair_n, (size_t)np, s));
    SW_CU(sw_cuda_upload(&g->pair_in, plan->pair_in, (size_t)np, s));
    SW_CU(sw_cuda_upload(&g->pair_vlo, plan->pair_vlo, (size_t)np * m1, s));
    SW_CU(sw_cuda_upload(&g->pair_vhi, plan->pair_vhi, (size_t)np * m1, s));
    SW_CU(sw_cuda_upload(&g->pair_use, plan->pair_use, (size_t)np * m1, s));
    size_t ngroups = 0; /* H-PME groups over all levels */
    for (int32_t h = 1; h <= plan->p; h++)
        ngroups += (size_t)(plan->k >> h) * (size_t)(plan->k >> h);
    const int hier = plan->params.pme == SW_SABRE_PME_HIERARCHICAL && plan->p > 0;
    const int dist = plan->params.pme == SW_SABRE_PME_DISTRIBUTED;
    SW_CU(sw_cuda_upload(&g->level_base, hier ? plan->level_base : NULL, (size_t)plan->p, s));
    SW_CU(sw_cuda_upload(&g->hpme, hier ? plan->hpme : NULL, 2 * ngroups, s));
    SW_CU(sw_cuda_upload(&g->dpme_dist, dist ? plan->dpme_dist : NULL, (size_t)G, s));
    if (plan->params.fill_iterations > 0) {
        SW_CU(sw_cuda_upload(&g->pad_part, plan->pad_part, (size_t)plan->npad, s));
        SW_CU(sw_cuda_upload(&g->pad_local, plan->pad_local, (size_t)plan->npad, s));
        SW_CU(sw_cuda_upload(&g->pidx, plan->pidx, (size_t)G * plan->L * plan->L, s));
        SW_CU(sw_cuda_alloc(&g->F, (size_t)2 * plan->npad));
    }

    if (plan->params.robust_passes > 0) {
        SW_CU(sw_cuda_upload(&g->rreal, plan->rreal, (size_t)G * L2, s));
        SW_CU(sw_cuda_alloc(&g->R, (size_t)G * L2));
    }

    /* the run's buffers */
    SW_CU(sw_cuda_alloc(&g->slopes, (size_t)2 * plan->n));
    SW_CU(sw_cuda_alloc(&g->X, (size_t)plan->ns * G));
    SW_CU(sw_cuda_alloc(&g->Y, (size_t)plan->nl * G));
    SW_CU(sw_cuda_alloc(&g->psum, (size_t)np));
    SW_CU(sw_cuda_alloc(&g->K, (size_t)G));
    SW_CU(sw_cuda_alloc(&g->scratch, (size_t)G));
    SW_CU(sw_cuda_alloc(&g->values, (size_t)g->nvalues));
    SW_CU(sw_cuda_alloc(&g->act, (size_t)g->nact));
    SW_CU(sw_cuda_alloc(&g->flag, 1));
    SW_CU(cudaMemsetAsync(g->flag, 0x7f, sizeof(int), s)); /* SB_NO_NAN */
    SW_CU(cudaHostAlloc((void **)&g->flag_h, sizeof(int), cudaHostAllocMapped));
    SW_CU(cudaHostGetDevicePointer((void **)&g->flag_map, g->flag_h, 0));
    SW_TRY(sw_event_pair_create(SW_CUDA_CTX, SW_CUDA_STAGE, &g->ev));
    const size_t smem = ((size_t)2 * G + (size_t)np) * sizeof(double) +
                        ((size_t)np + (size_t)G) * sizeof(int32_t) + (size_t)sb_hpme_bytes(plan) +
                        (size_t)np;
    int optin = 0; /* the device's opt-in limit per block (99 KB on many GPUs, 227 KB on H100) */
    SW_CU(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, plan->ctx->device));
    g->pme_smem = smem <= SB_PME_SMEM && smem <= (size_t)optin ? smem : 0;
    if (g->pme_smem > (48 << 10))
        SW_CU(cudaFuncSetAttribute(sb_pme, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)g->pme_smem));
    g->pme_threads = G >= SB_PME_THREADS ? SB_PME_THREADS : (G + 31) / 32 * 32;

    /* cuBLAS on the context's stream, with a workspace of its own (cublasSetStream resets the
     * workspace, so it comes after) so that the capture allocates nothing */
    SW_TRY(sw_cublas_create(plan->ctx, SW_CUDA_STAGE, s, SB_BLAS_WS, &g->blas, &g->blas_ws));

    /* one plain pass on zero slopes (loads the kernels and cuBLAS's), then the graph */
    SW_CU(cudaMemsetAsync(g->slopes, 0, (size_t)2 * plan->n * sizeof(float), s));
    SW_TRY(sb_enqueue(plan));
    SW_CU(cudaStreamSynchronize(s));
    SW_TRY(sb_capture(plan));
    return SW_OK;
}

extern "C" sw_status sw_sabre_gpu_run(sw_sabre *plan, const float *slopes, sw_memory memory,
                                      float *values, float *actuators)
{
    sb_gpu *g = (sb_gpu *)plan->gpu;
    cudaStream_t s = g->stream;
    plan->kernel_us = -1.0;
    SW_CU(cudaSetDevice(plan->ctx->device));

    /* copies on the stream around the graph (device arrays device-to-device, so that the
     * graph's own buffers stay fixed) */
    const int dev = memory == SW_MEM_DEVICE;
    const cudaMemcpyKind in = dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    const cudaMemcpyKind out = dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
    if (!g->graph.exec)
        return sw_fail(plan->ctx, SW_ECUDA,
                       "sabre: the plan has no graph (rebuilding it after a projection failed)");
    SW_CU(cudaMemcpyAsync(g->slopes, slopes, (size_t)2 * plan->n * sizeof(float), in, s));
    SW_CU(cudaEventRecord(g->ev.t0, s));
    SW_CU(cudaGraphLaunch(g->graph.exec, s));
    SW_CU(cudaEventRecord(g->ev.t1, s));
    if (values)
        SW_CU(cudaMemcpyAsync(values, g->values, (size_t)g->nvalues * sizeof(float), out, s));
    if (actuators)
        SW_CU(cudaMemcpyAsync(actuators, g->act, (size_t)g->nact * sizeof(float), out, s));
    SW_CU(cudaStreamSynchronize(s));

    const double us = sw_event_pair_us(&g->ev);
    if (us >= 0.0)
        plan->kernel_us = us;
    const int l = *g->flag_h;
    if (l != SB_NO_NAN) { /* the CPU's message: the lowest such lenslet, its x slope first */
        float xy[2];
        SW_CU(cudaMemcpyAsync(&xy[0], g->slopes + l, sizeof(float), cudaMemcpyDeviceToHost, s));
        SW_CU(cudaMemcpyAsync(&xy[1], g->slopes + plan->n + l, sizeof(float),
                              cudaMemcpyDeviceToHost, s));
        SW_CU(cudaStreamSynchronize(s));
        const int bad = isfinite(xy[0]) ? 1 : 0;
        const int32_t nx = plan->params.nx;
        return sw_fail(plan->ctx, SW_ERANGE,
                       "sabre: the %s slope of valid lenslet (%d, %d) (index %d) is %s",
                       bad ? "y" : "x", l % nx, l / nx, l, isnan(xy[bad]) ? "NaN" : "infinite");
    }
    return SW_OK;
}

static sw_status sb_set_projection(sw_sabre *plan, sb_gpu *g)
{
    cudaStream_t s = g->stream;
    SW_CU(cudaSetDevice(plan->ctx->device));
    SW_CU(cudaStreamSynchronize(s)); /* nothing may still read the old P, q1 or graph */
    const size_t w2 = (size_t)plan->w * plan->w;
    const size_t count = plan->proj ? (size_t)plan->proj_count : 0;
    int moved = 0; /* a buffer made again: the graph must capture its new address */
    if (plan->proj) {
        /* made once (the addresses stay fixed for graphs that captured them), again only when a
         * projection needs more: one matrix per partition after a shared one */
        if (w2 * plan->nl * count > g->P_cap) {
            SW_CUDA_FREE(g->P);
            g->P = NULL;
            g->P_cap = 0;
            SW_CU(sw_cuda_alloc(&g->P, w2 * plan->nl * count));
            g->P_cap = w2 * plan->nl * count;
            moved = 1;
        }
        if (w2 * count > g->q1_cap) {
            SW_CUDA_FREE(g->q1);
            g->q1 = NULL;
            g->q1_cap = 0;
            SW_CU(sw_cuda_alloc(&g->q1, w2 * count));
            g->q1_cap = w2 * count;
            moved = 1;
        }
        if (!g->Z)
            SW_CU(sw_cuda_alloc(&g->Z, w2 * plan->G));
        SW_CU(cudaMemcpyAsync(g->P, plan->proj, w2 * plan->nl * count * sizeof(float),
                              cudaMemcpyHostToDevice, s));
        SW_CU(cudaMemcpyAsync(g->q1, plan->q1, w2 * count * sizeof(float), cudaMemcpyHostToDevice,
                              s));
        SW_CU(cudaStreamSynchronize(s)); /* the host copies are pageable */
    }
    const int proj = !plan->proj ? 0 : (count > 1 ? 2 : 1);
    if (proj == g->proj && !moved && g->graph.exec)
        return SW_OK; /* same graph: it reads the new P and q1 from the same buffers */
    /* the graph gains, loses or changes step 6's product, or its buffers moved: capture it
     * again */
    g->proj = proj;
    sw_graph_destroy(&g->graph);
    return sb_capture(plan);
}

extern "C" sw_status sw_sabre_gpu_set_projection(sw_sabre *plan)
{
    sb_gpu *g = (sb_gpu *)plan->gpu;
    if (!g)
        return sw_fail(plan->ctx, SW_EINVAL, "sabre: the plan is not on a CUDA context");
    const sw_status st = sb_set_projection(plan, g);
    if (st != SW_OK) { /* the host already holds the new P: no graph, so later runs fail loudly
                          instead of returning the old projection's commands */
        sw_graph_destroy(&g->graph);
    }
    return st;
}

extern "C" float *sw_sabre_gpu_slopes(sw_sabre *plan)
{
    return plan && plan->gpu ? ((sb_gpu *)plan->gpu)->slopes : NULL;
}

extern "C" float *sw_sabre_gpu_values(sw_sabre *plan)
{
    return plan && plan->gpu ? ((sb_gpu *)plan->gpu)->values : NULL;
}

extern "C" float *sw_sabre_gpu_actuators(sw_sabre *plan)
{
    return plan && plan->gpu ? ((sb_gpu *)plan->gpu)->act : NULL;
}

/* One run's kernels on the context's stream for the real-time chain (sabre_internal.h): the
 * graph's own work, queued (or captured by the caller) without copies, waits or allocation. The
 * caller has the context's device current. */
extern "C" sw_status sw_sabre_gpu_enqueue(sw_sabre *plan)
{
    if (!plan || !plan->gpu)
        return sw_fail(plan ? plan->ctx : NULL, SW_EINVAL,
                       "sabre: sw_sabre_gpu_enqueue needs a plan on a CUDA context");
    return sb_enqueue(plan);
}
