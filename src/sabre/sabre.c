/*
 * D-SABRE (seed 002, Brunner et al. 2018, sections 2, 3 and 5.A; the API and the model are
 * sabre.h, the plan and the run semantics sabre_internal.h): the plan building (partitioning, the
 * local matrix Q, the piston-equalisation tables), the CPU run and the API around both. The GPU
 * run is sabre_cuda.cu; global SABRE, Fried and the lattice evaluation are sabre_global.c.
 *
 * Local problem (seed 002 Eq. 3-7). All k^2 windows have the same shape (w x w squares), so one
 * local problem serves every partition (section 5.A). The unknowns are the window's vertex values
 * but the anchor (local corner 0): the null-space basis N of A = [H; h] (Eq. 5) is the vertex
 * basis, so Dbar = D N (Eq. 6) has the rows of sabre.h's model on the vertex values: for each
 * lenslet the mean of its triangles' gradients (weighted 1 - lambda where the window covers its
 * square) and each triangle's gradient (lambda / 8), built from the triangles' gradients on their
 * three vertices (build_q). The normal matrix is banded when the vertices are interleaved row by
 * row (corner row J, then centre row J, ...), half-bandwidth up to 2 (2 w + 1) (a mean row reaches
 * two corner rows): one LAPACKE_dpbtrf, then the two triangular solves of dpbtrs (as level-3 BLAS
 * on the factor's blocks) for blocks of unit-slope right-hand sides (Dbar^T E) give Q, the map
 * from the
 * window's 2 (w+1)^2 slopes to its vertex values (Eq. 6 with Eq. 7's expansion folded in: for
 * d = 1, r = 0, N c is a copy). For windows up to 16 squares the seed's matrices D, H, h are
 * formed explicitly and LAPACKE_dgesvd confirms rank(A) = 3 J - (nv - 1) with A N = 0, i.e. that
 * N spans the null space of A and Eq. 6-7's projected solve is exactly this vertex solve.
 *
 * CPU run: sabre_internal.h steps 1-6; step 2 (Eq. 16, Y = Q X for all partitions at once) is
 * one OpenBLAS cblas_sgemm; steps 4 (H-PME, Eq. 10-11; D-PME, Eq. 8-9) in sw_sabre_pme_cpu. With a
 * projection (sw_sabre_set_projection, seed 002 Eq. 14-16) step 6' replaces step 6: one more
 * sgemm Z = P Y for all windows (sw_sabre_set_projection_partitions: an sgemv per window with its
 * own P), then each actuator from its owner partition's Z + K q1. The
 * extended array of Eq. 17 (extend_eq17) makes every lenslet corner a square centre, so that every
 * actuator is one of some window's w^2 local actuators.
 */
#include "sabre/sabre_internal.h"

#include "core/core_internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SB_MAX_DIM      4096
#define SB_MAX_OVERLAP  64
#define SB_MAX_VALUES   20000 /* sabre.h: a window with more local values is refused */
#define SB_CHECK_WINDOW 16    /* the LAPACK check of the null space runs for w <= this */
#define SB_RHS_BLOCK    256   /* right-hand sides per block solve */
#define SB_OMP_MIN                                                                                 \
    (1 << 20) /* run steps this large (entries) in parallel; smaller ones                          \
                 cost less than waking threads next to OpenBLAS's */

/* The plan as allocated here: the public/internal struct first, then the CPU run's scratch
 * (sabre_internal.h's struct has no room for it). */
typedef struct sabre_plan {
    struct sw_sabre pub;
    float *X;     /* ns x G gathered slopes                         */
    float *Y;     /* nl x G local values                            */
    float *vals;  /* the extended lattice's values when none given  */
    double *psum; /* npairs pair sums                               */
    double *K;    /* G offsets                                      */
    double *Kold; /* G: D-PME's previous iterate                    */
    float *F;     /* 2 npad: the fill iterations' padded slopes     */
    double *R;    /* G L^2: the robust passes' residual norms       */
    double *Rs;   /* G L^2: their copies for the median             */
    double *Pd;   /* npairs (m+1): robust PME's border differences  */
    float *Z;     /* w^2 x G: step 6's projected local commands (allocated with the first
                     projection, kept until the plan is destroyed) */
} sabre_plan;

/* ------------------------------------------------------------------ parameters */

void sw_sabre_params_default(sw_sabre_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->nx = p->ny = 0;
    p->pitch = 1.0;
    p->valid = NULL;
    p->partitions = 8;
    p->overlap = 1;
    p->pme = SW_SABRE_PME_HIERARCHICAL;
    p->dpme_iterations = 0;
    p->extend_eq17 = 0;
    p->triangle_weight = SW_SABRE_TRIANGLE_WEIGHT;
    p->robust_passes = 0;
    p->robust_threshold = SW_SABRE_ROBUST_THRESHOLD;
    p->robust_pme = 0;
    p->pme_band = 0;
}

const char *sw_sabre_pme_string(sw_sabre_pme p)
{
    switch (p) {
    case SW_SABRE_PME_HIERARCHICAL: return "hierarchical";
    case SW_SABRE_PME_DISTRIBUTED: return "distributed";
    case SW_SABRE_PME_NONE: return "none";
    }
    return "unknown";
}

sw_status sw_sabre_pme_parse(const char *text, sw_sabre_pme *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "sabre: NULL %s", !text ? "text" : "out");
    for (int i = 0; i <= (int)SW_SABRE_PME_NONE; i++) {
        if (strcasecmp(text, sw_sabre_pme_string((sw_sabre_pme)i)) == 0) {
            *out = (sw_sabre_pme)i;
            return SW_OK;
        }
    }
    return sw_fail(NULL, SW_EINVAL,
                   "sabre: unknown piston equalisation '%s' (hierarchical, distributed or none)",
                   text);
}

const char *sw_sabre_padding_string(sw_sabre_padding p)
{
    switch (p) {
    case SW_SABRE_PAD_ZERO: return "zero";
    case SW_SABRE_PAD_NEAREST: return "nearest";
    }
    return "unknown";
}

sw_status sw_sabre_padding_parse(const char *text, sw_sabre_padding *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "sabre: NULL %s", !text ? "text" : "out");
    for (int i = 0; i <= (int)SW_SABRE_PAD_NEAREST; i++) {
        if (strcasecmp(text, sw_sabre_padding_string((sw_sabre_padding)i)) == 0) {
            *out = (sw_sabre_padding)i;
            return SW_OK;
        }
    }
    return sw_fail(NULL, SW_EINVAL, "sabre: unknown padding '%s' (zero or nearest)", text);
}

/* ------------------------------------------------------------------ small helpers */

static int is_pow2(int32_t v)
{
    return v > 0 && (v & (v - 1)) == 0;
}

static int32_t clamp_i32(int32_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Whether corner (X, Y) of the extended lattice is inside the pupil: its lenslet is real and
 * valid. */
static int corner_in_pupil(const sw_sabre *s, int32_t X, int32_t Y)
{
    int32_t ix = X - s->offx, iy = Y - s->offy;
    if (ix < 0 || iy < 0 || ix >= s->params.nx || iy >= s->params.ny)
        return 0;
    return !s->valid || s->valid[(size_t)iy * s->params.nx + ix] != 0;
}

/*
 * SW_SABRE_PAD_NEAREST: near[c] = the lenslet whose slopes extended corner c = Y (S + 1) + X
 * reads: itself when it is a valid lenslet, else the nearest valid one found by a breadth-first
 * search from all valid lenslets at once (8-neighbourhood; seeds in lenslet order, so ties go to
 * the lower index). Returns 0, or -1 when out of memory.
 */
static int nearest_valid(const sw_sabre *s, int32_t *near)
{
    const int32_t S1 = s->S + 1;
    const size_t nc = (size_t)S1 * S1;
    int32_t *queue = malloc(nc * sizeof *queue);
    if (!queue)
        return -1;
    size_t head = 0, tail = 0;
    for (size_t c = 0; c < nc; c++)
        near[c] = -1;
    for (int32_t iy = 0; iy < s->params.ny; iy++)
        for (int32_t ix = 0; ix < s->params.nx; ix++) {
            int32_t X = ix + s->offx, Y = iy + s->offy;
            if (corner_in_pupil(s, X, Y)) {
                near[(size_t)Y * S1 + X] = iy * s->params.nx + ix;
                queue[tail++] = Y * S1 + X;
            }
        }
    while (head < tail) {
        int32_t c = queue[head++], X = c % S1, Y = c / S1;
        for (int32_t dy = -1; dy <= 1; dy++)
            for (int32_t dx = -1; dx <= 1; dx++) {
                int32_t x = X + dx, y = Y + dy;
                if ((dx == 0 && dy == 0) || x < 0 || y < 0 || x >= S1 || y >= S1)
                    continue;
                size_t d = (size_t)y * S1 + x;
                if (near[d] < 0) {
                    near[d] = near[c];
                    queue[tail++] = (int32_t)d;
                }
            }
    }
    free(queue);
    return 0;
}

/*
 * The s partition pairs on the border between adjacent tiles t1 and t2 (t = tx + 2 ty) of group
 * (gx, gy) at an H-PME level with s x s partitions per tile, in order r = 0..s-1 along the
 * border. Returns 1 when t1 is the pairs' hi side (right of or above t2), else 0.
 */
static int tile_pairs(const sw_sabre *sp, int32_t s, int32_t gx, int32_t gy, int t1, int t2,
                      int32_t *ids)
{
    int32_t k = sp->k;
    if ((t1 ^ t2) == 1) { /* side by side: horizontal pairs (a, b)-(a+1, b) */
        int32_t ty = t1 >> 1, a = (2 * gx + 1) * s - 1;
        for (int32_t r = 0; r < s; r++)
            ids[r] = ((2 * gy + ty) * s + r) * (k - 1) + a;
        return (t1 & 1) == 1;
    }
    /* one above the other: vertical pairs (a, b)-(a, b+1) */
    int32_t tx = t1 & 1, b = (2 * gy + 1) * s - 1;
    for (int32_t r = 0; r < s; r++)
        ids[r] = k * (k - 1) + b * k + (2 * gx + tx) * s + r;
    return (t1 >> 1) == 1;
}

/* ------------------------------------------------------------------ piston equalisation */

/* Seed 002 Eq. 10: the offset that levels target tile t to master-side tile mside (adjacent)
 * across their shared border: the mean of all (master - target) border differences. */
static double level_offset(const sw_sabre *sp, const double *psum, const double *K, int32_t s,
                           int32_t gx, int32_t gy, int mside, int t, int32_t *ids)
{
    int m_is_hi = tile_pairs(sp, s, gx, gy, mside, t, ids);
    int any_in = 0; /* pairs wholly in the padding count only when the whole border is */
    for (int32_t r = 0; r < s; r++)
        any_in |= sp->pair_in[ids[r]];
    double num = 0.0, den = 0.0;
    for (int32_t r = 0; r < s; r++) {
        int32_t p = ids[r];
        if (any_in && !sp->pair_in[p])
            continue;
        double n = sp->pair_n[p];
        int32_t pm = m_is_hi ? sp->pair_hi[p] : sp->pair_lo[p];
        int32_t pt = m_is_hi ? sp->pair_lo[p] : sp->pair_hi[p];
        double o = m_is_hi ? 1.0 : -1.0;
        num += o * psum[p] + n * (K[pm] - K[pt]);
        den += n;
    }
    return den > 0 ? num / den : 0.0;
}

/* Seed 002 Eq. 11: adds off to every partition of tile t of group (gx, gy). */
static void tile_add(const sw_sabre *sp, double *K, int32_t s, int32_t gx, int32_t gy, int t,
                     double off)
{
    int32_t a0 = (2 * gx + (t & 1)) * s, b0 = (2 * gy + (t >> 1)) * s;
    for (int32_t b = b0; b < b0 + s; b++)
        for (int32_t a = a0; a < a0 + s; a++)
            K[b * sp->k + a] += off;
}

void sw_sabre_pme_cpu(const sw_sabre *plan, const double *psum, double *K)
{
    const sabre_plan *sp = (const sabre_plan *)plan;
    const int32_t k = plan->k, G = plan->G;
    for (int32_t i = 0; i < G; i++)
        K[i] = 0.0;
    if (plan->params.pme == SW_SABRE_PME_HIERARCHICAL) {
        int32_t ids_a[2048], ids_b[2048]; /* s <= k / 2 <= 2048 */
        for (int32_t h = 1; h <= plan->p; h++) {
            int32_t s = 1 << (h - 1), ng = k >> h;
            for (int32_t gy = 0; gy < ng; gy++) {
                for (int32_t gx = 0; gx < ng; gx++) {
                    const uint8_t *e = plan->hpme + 2 * (plan->level_base[h - 1] + gy * ng + gx);
                    int mt = e[0] & 3, via = e[1];
                    /* step A: the master's two edge neighbours, from the K before the step */
                    double o1 = level_offset(plan, psum, K, s, gx, gy, mt, mt ^ 1, ids_a);
                    double o2 = level_offset(plan, psum, K, s, gx, gy, mt, mt ^ 2, ids_b);
                    tile_add(plan, K, s, gx, gy, mt ^ 1, o1);
                    tile_add(plan, K, s, gx, gy, mt ^ 2, o2);
                    /* step B: the diagonal tile through `via` */
                    double o3 = level_offset(plan, psum, K, s, gx, gy, via, mt ^ 3, ids_a);
                    tile_add(plan, K, s, gx, gy, mt ^ 3, o3);
                }
            }
        }
    } else if (plan->params.pme == SW_SABRE_PME_DISTRIBUTED) {
        /* Seed 002 Eq. 8-9, Jacobi: every partition from the previous iterate. */
        double *Kold = sp->Kold;
        for (int32_t it = 0; it < plan->dpme_iters; it++) {
            memcpy(Kold, K, (size_t)G * sizeof *K);
            for (int32_t i = 0; i < G; i++) {
                int32_t a = i % k, b = i / k, di = plan->dpme_dist[i];
                double best = 0.0;
                int found = 0;
                for (int dir = 0; dir < 4; dir++) {
                    int32_t na = a + (dir == 0) - (dir == 1), nb = b + (dir == 2) - (dir == 3);
                    if (na < 0 || nb < 0 || na >= k || nb >= k)
                        continue;
                    int32_t j = nb * k + na;
                    if (plan->dpme_dist[j] != di - 1)
                        continue;
                    int32_t p;
                    double o; /* +1 when the neighbour is the pair's hi */
                    if (dir == 0)
                        p = b * (k - 1) + a, o = 1.0;
                    else if (dir == 1)
                        p = b * (k - 1) + na, o = -1.0;
                    else if (dir == 2)
                        p = k * (k - 1) + b * k + a, o = 1.0;
                    else
                        p = k * (k - 1) + nb * k + a, o = -1.0;
                    double n = plan->pair_n[p];
                    if (n <= 0)
                        continue;
                    double d = (o * psum[p] + n * (Kold[j] - Kold[i])) / n;
                    if (!found || d > best)
                        best = d, found = 1;
                }
                if (found)
                    K[i] = Kold[i] + best;
            }
        }
    }
}

/* ------------------------------------------------------------------ the local matrix Q */

/* Position of local value v (corner y L + x, or L^2 + centre y w + x) in the interleaved order
 * (corner row J, centre row J, corner row J + 1, ...). */
static int32_t interleaved(int64_t v, int32_t w)
{
    int32_t L = w + 1;
    if (v < (int64_t)L * L)
        return (int32_t)(v / L) * (L + w) + (int32_t)(v % L);
    int64_t c = v - (int64_t)L * L;
    return (int32_t)(c / w) * (L + w) + L + (int32_t)(c % w);
}

/*
 * The seed's matrices for one w x w window and the LAPACK check that the vertex basis N spans
 * the null space of A = [H; h] (Eq. 5). B-coefficient 3 t + j belongs to vertex idx[j] of
 * triangle t = 4 (J w + I) + q of square (I, J). H: for each vertex, its first coefficient minus
 * each other one (equal B-coefficients where triangles meet, r = 0); h: coefficient 0 (corner 0 of
 * triangle 0, the anchor). A row of A touches the coefficients of one vertex only, so after a
 * column permutation A is block diagonal; its singular values are those of its blocks, which are
 * found as the connected components of the row-column graph and given to LAPACKE_dgesvd one by one
 * (the same rank as one SVD of A, at O(J) cost). D (Eq. 4, a pair of rows per (triangle, data
 * corner)) is formed too and D N compared with the vertex rows used for the normal matrix.
 * *result = max |A N| + max |D N - Dbar| + |rank defect|; SW_EINTERNAL if it is not 0.
 */
static sw_status null_space_check(sw_context *ctx, int32_t w, double *result)
{
    const int32_t L = w + 1, ntri = 4 * w * w, nc = 3 * ntri;
    const int32_t nv = L * L + w * w;
    const int32_t rows = nc - nv + 1;                      /* H: nc - nv rows, h: one */
    int32_t *cvert = malloc((size_t)nc * sizeof *cvert);   /* vertex of each coefficient */
    double *ccx = malloc((size_t)nc * sizeof *ccx);        /* D's x row entry           */
    double *ccy = malloc((size_t)nc * sizeof *ccy);        /* D's y row entry           */
    int32_t *first = malloc((size_t)nv * sizeof *first);   /* first coefficient of v    */
    int32_t *ra = malloc((size_t)rows * sizeof *ra);       /* A's row: +1 at ra          */
    int32_t *rb = malloc((size_t)rows * sizeof *rb);       /*          -1 at rb (or -1)  */
    int32_t *parent = malloc((size_t)nc * sizeof *parent); /* union-find on columns     */
    int32_t *crow = malloc((size_t)rows * sizeof *crow);   /* rows sorted by component  */
    int32_t *ccol = malloc((size_t)nc * sizeof *ccol);     /* columns likewise          */
    int32_t *cnt = calloc((size_t)nc + 1, sizeof *cnt);
    int32_t *cnt2 = calloc((size_t)nc + 1, sizeof *cnt2);
    double *blk = malloc(64 * 64 * sizeof *blk), *sv = malloc(64 * sizeof *sv);
    sw_status st = SW_OK;
    if (!cvert || !ccx || !ccy || !first || !ra || !rb || !parent || !crow || !ccol || !cnt ||
        !cnt2 || !blk || !sv) {
        st = sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (null-space check)");
        goto done;
    }

    /* D (Eq. 4 for d = 1: the gradient of the linear B-form, i.e. of the barycentric
     * coordinates, from the triangle's vertex positions) and the coefficient-to-vertex map.
     * D N (the coefficients of a vertex summed; each vertex appears once per triangle) must be
     * Dbar, the vertex rows from sw_sabre_triangle that build the normal matrix. */
    double dn_err = 0.0;
    for (int32_t sqy = 0; sqy < w; sqy++) {
        for (int32_t sqx = 0; sqx < w; sqx++) {
            for (int q = 0; q < 4; q++) {
                int64_t idx[3];
                double cx[3], cy[3], px[3], py[3];
                sw_sabre_triangle(w, w, sqx, sqy, q, idx, cx, cy);
                int32_t t = 4 * (sqy * w + sqx) + q;
                for (int j = 0; j < 3; j++) {
                    int64_t v = idx[j], c = v - (int64_t)L * L;
                    px[j] = v < (int64_t)L * L ? (double)(v % L) : (double)(c % w) + 0.5;
                    py[j] = v < (int64_t)L * L ? (double)(v / L) : (double)(c / w) + 0.5;
                }
                for (int j = 0; j < 3; j++) {
                    /* grad b_j = perp(p_{j+2} - p_{j+1}) / cross(p_{j+2} - p_{j+1}, p_j - p_{j+1})
                     */
                    int j1 = (j + 1) % 3, j2 = (j + 2) % 3;
                    double ex = px[j2] - px[j1], ey = py[j2] - py[j1];
                    double den = ex * (py[j] - py[j1]) - ey * (px[j] - px[j1]);
                    cvert[3 * t + j] = (int32_t)idx[j];
                    ccx[3 * t + j] = -ey / den;
                    ccy[3 * t + j] = ex / den;
                }
                for (int j = 0; j < 3; j++) {
                    double dnx = 0.0, dny = 0.0;
                    for (int l = 0; l < 3; l++)
                        if (cvert[3 * t + l] == idx[j])
                            dnx += ccx[3 * t + l], dny += ccy[3 * t + l];
                    dn_err = fmax(dn_err, fmax(fabs(dnx - cx[j]), fabs(dny - cy[j])));
                }
            }
        }
    }

    /* H (Eq. 5): first coefficient of each vertex minus each later one; h: coefficient 0. */
    for (int32_t v = 0; v < nv; v++)
        first[v] = -1;
    int32_t nr = 0;
    for (int32_t c = 0; c < nc; c++) {
        int32_t v = cvert[c];
        if (first[v] < 0) {
            first[v] = c;
        } else if (nr < rows - 1) {
            ra[nr] = first[v];
            rb[nr] = c;
            nr++;
        } else {
            nr++; /* more rows than expected: counted, reported below */
        }
    }
    if (nr != rows - 1) {
        st = sw_fail(ctx, SW_EINTERNAL,
                     "sabre: the window has %d continuity constraints, expected %d (a bug)", nr,
                     rows - 1);
        goto done;
    }
    ra[nr] = 0; /* the anchor h = [1 0 ... 0] */
    rb[nr] = -1;
    nr++;

    /* A N: N has one column per vertex but the anchor (vertex 0), ones at its coefficients. */
    double an_err = 0.0;
    for (int32_t r = 0; r < nr; r++) {
        /* row r's entries land in the columns of N of their vertices */
        int32_t va = cvert[ra[r]], vb = rb[r] >= 0 ? cvert[rb[r]] : -1;
        double at_a = (va != 0 ? 1.0 : 0.0), at_b = 0.0;
        if (vb >= 0) {
            if (vb == va)
                at_a -= (va != 0 ? 1.0 : 0.0);
            else
                at_b = (vb != 0 ? -1.0 : 0.0);
        }
        an_err = fmax(an_err, fmax(fabs(at_a), fabs(at_b)));
    }

    /* The blocks of A: connected components of columns joined by a row. */
    for (int32_t c = 0; c < nc; c++)
        parent[c] = c;
    for (int32_t r = 0; r < nr; r++) {
        if (rb[r] < 0)
            continue;
        int32_t x = ra[r], y = rb[r];
        while (parent[x] != x)
            x = parent[x] = parent[parent[x]];
        while (parent[y] != y)
            y = parent[y] = parent[parent[y]];
        if (x != y)
            parent[x > y ? x : y] = x < y ? x : y;
    }
    for (int32_t c = 0; c < nc; c++) {
        int32_t x = c;
        while (parent[x] != x)
            x = parent[x];
        parent[c] = x;
    }
    /* sort columns and rows by component root (counting sort) */
    for (int32_t c = 0; c < nc; c++)
        cnt[parent[c] + 1]++;
    for (int32_t r = 0; r < nr; r++)
        cnt2[parent[ra[r]] + 1]++;
    for (int32_t c = 0; c < nc; c++)
        cnt[c + 1] += cnt[c], cnt2[c + 1] += cnt2[c];
    {
        int32_t *pos = malloc((size_t)nc * sizeof *pos), *pos2 = malloc((size_t)nc * sizeof *pos2);
        if (!pos || !pos2) {
            free(pos);
            free(pos2);
            st = sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (null-space check)");
            goto done;
        }
        memcpy(pos, cnt, (size_t)nc * sizeof *pos);
        memcpy(pos2, cnt2, (size_t)nc * sizeof *pos2);
        for (int32_t c = 0; c < nc; c++)
            ccol[pos[parent[c]]++] = c;
        for (int32_t r = 0; r < nr; r++)
            crow[pos2[parent[ra[r]]]++] = r;
        free(pos);
        free(pos2);
    }
    int64_t rank = 0;
    double smax = 0.0;
    /* two passes: the largest singular value first, then the count above the tolerance */
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t root = 0; root < nc; root++) {
            int32_t c0 = cnt[root], c1 = cnt[root + 1], r0 = cnt2[root], r1 = cnt2[root + 1];
            int32_t bc = c1 - c0, br = r1 - r0;
            if (bc == 0 || br == 0)
                continue;
            if (bc > 64 || br > 64) {
                st = sw_fail(ctx, SW_EINTERNAL,
                             "sabre: a block of the constraint matrix has %d x %d entries (a bug)",
                             br, bc);
                goto done;
            }
            memset(blk, 0, (size_t)br * bc * sizeof *blk);
            for (int32_t i = 0; i < br; i++) {
                int32_t r = crow[r0 + i];
                for (int32_t j = 0; j < bc; j++) {
                    if (ccol[c0 + j] == ra[r])
                        blk[(size_t)j * br + i] += 1.0;
                    if (ccol[c0 + j] == rb[r])
                        blk[(size_t)j * br + i] -= 1.0;
                }
            }
            double superb[64];
            lapack_int info = LAPACKE_dgesvd(LAPACK_COL_MAJOR, 'N', 'N', br, bc, blk, br, sv, NULL,
                                             1, NULL, 1, superb);
            if (info != 0) {
                st =
                    sw_fail(ctx, SW_EINTERNAL, "sabre: LAPACKE_dgesvd failed (info %d)", (int)info);
                goto done;
            }
            int32_t ns = br < bc ? br : bc;
            for (int32_t i = 0; i < ns; i++) {
                if (pass == 0)
                    smax = fmax(smax, sv[i]);
                else if (sv[i] > 1e-10 * smax)
                    rank++;
            }
        }
    }
    int64_t expect = (int64_t)nc - (nv - 1);
    double defect = (double)llabs(expect - rank);
    *result = an_err + dn_err + defect;
    if (*result != 0.0)
        st = sw_fail(ctx, SW_EINTERNAL,
                     "sabre: the vertex basis is not the null space of the constraints: max |A N| "
                     "%g, max |D N - Dbar| %g, rank %lld, expected %lld (a bug)",
                     an_err, dn_err, (long long)rank, (long long)expect);
done:
    free(cvert);
    free(ccx);
    free(ccy);
    free(first);
    free(ra);
    free(rb);
    free(parent);
    free(crow);
    free(ccol);
    free(cnt);
    free(cnt2);
    free(blk);
    free(sv);
    return st;
}

/*
 * Q (Eq. 6-7 and 16) for a w x w window: the normal matrix of the model (sabre.h) in band
 * storage, interleaved order, anchor (local corner 0, interleaved position 0) removed; banded
 * Cholesky; one solve per unit slope. Lattice units throughout, the pitch applied at the end.
 *
 * The model's normal matrix is a sum over the window's (L x L) corners v, each with its n_v
 * triangles t (sw_sabre_corner_triangles) and their mean row a_v (sw_sabre_mean_row):
 *     N = sum_v mw_v (a_vx a_vx^T + a_vy a_vy^T) + (lambda / 8) sum_t (g_tx g_tx^T + g_ty g_ty^T),
 * mw_v = sw_sabre_mean_weight, and the right-hand side of v's x slope is dw_v a_vx (of its y slope
 * dw_v a_vy), dw_v = sw_sabre_data_weight: the per-triangle rows' data sum to (lambda n_v / 8) a_v.
 * A row couples corners two apart (the mean row of (x, y) reads (x +- 1, y) and (x, y +- 1)):
 * half-bandwidth up to 2 (L + w), found from the rows themselves.
 */
static int32_t model_band(int32_t w)
{
    int32_t kd = 1;
    for (int32_t y = 0; y <= w; y++)
        for (int32_t x = 0; x <= w; x++) {
            int64_t vidx[9];
            double ax[9], ay[9];
            int nt;
            const int nv = sw_sabre_mean_row(w, w, x, y, vidx, ax, ay, &nt);
            int32_t lo = INT32_MAX, hi = -1;
            for (int j = 0; j < nv; j++) {
                int32_t u = interleaved(vidx[j], w) - 1;
                if (u < 0)
                    continue;
                lo = u < lo ? u : lo;
                hi = u > hi ? u : hi;
            }
            if (hi >= 0 && hi - lo > kd)
                kd = hi - lo;
        }
    return kd;
}

/* Adds c (a a^T) to the band (interleaved positions of the vertices, anchor skipped). */
static void band_outer(double *ab, int32_t ldab, int32_t w, const int64_t *vidx, const double *a,
                       int nv, double c)
{
    for (int j = 0; j < nv; j++) {
        const int32_t uj = interleaved(vidx[j], w) - 1;
        for (int l = 0; l < nv; l++) {
            const int32_t ul = interleaved(vidx[l], w) - 1;
            if (uj < 0 || ul < 0 || uj < ul)
                continue; /* the anchor, or the upper triangle */
            ab[(size_t)ul * ldab + (uj - ul)] += c * a[j] * a[l];
        }
    }
}

static sw_status build_q(sw_context *ctx, int32_t w, double pitch, double lambda, float *Q)
{
    const int32_t L = w + 1, nl = L * L + w * w, ns = 2 * L * L;
    const int32_t n = nl - 1, kd = model_band(w), ldab = kd + 1;
    double *ab = calloc((size_t)ldab * n, sizeof *ab);
    if (!ab)
        return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (normal matrix, %d unknowns)", n);

    /* Dbar^T Dbar of the model: every corner's mean rows and its triangles' rows (above). */
    for (int32_t y = 0; y <= w; y++) {
        for (int32_t x = 0; x <= w; x++) {
            int64_t vidx[9];
            double ax[9], ay[9];
            int nt;
            const int nv = sw_sabre_mean_row(w, w, x, y, vidx, ax, ay, &nt);
            const double mw = sw_sabre_mean_weight(nt, lambda);
            band_outer(ab, ldab, w, vidx, ax, nv, mw);
            band_outer(ab, ldab, w, vidx, ay, nv, mw);
            int32_t sqi[8], sqj[8];
            int q[8];
            sw_sabre_corner_triangles(w, w, x, y, sqi, sqj, q);
            for (int t = 0; t < nt; t++) {
                int64_t idx[3];
                double cx[3], cy[3];
                sw_sabre_triangle(w, w, sqi[t], sqj[t], q[t], idx, cx, cy);
                band_outer(ab, ldab, w, idx, cx, 3, sw_sabre_tri_weight(nt, lambda));
                band_outer(ab, ldab, w, idx, cy, 3, sw_sabre_tri_weight(nt, lambda));
            }
        }
    }
    lapack_int info = LAPACKE_dpbtrf(LAPACK_COL_MAJOR, 'L', n, kd, ab, ldab);
    if (info != 0) {
        free(ab);
        return sw_fail(ctx, SW_EINTERNAL,
                       "sabre: LAPACKE_dpbtrf failed on the local normal matrix (info %d)",
                       (int)info);
    }

    /* The band factor as a block bidiagonal matrix of bs x bs blocks, bs = kd: diagonal blocks
     * Dk (lower triangular) and sub-diagonal blocks Ek (upper triangular), dense, so that the
     * two triangular solves of dpbtrs run as level-3 BLAS (dtrsm, dgemm) on many right-hand
     * sides at once (the same arithmetic as LAPACKE_dpbtrs, a few times faster for the large
     * windows). Rows past n are padding with a unit diagonal. */
    const int32_t bs = kd, nbk = (n + bs - 1) / bs, np = nbk * bs;
    const size_t bb = (size_t)bs * bs;
    double *Dk = calloc((size_t)nbk * bb, sizeof *Dk), *Ek = calloc((size_t)nbk * bb, sizeof *Ek);
    double *B = malloc((size_t)np * SB_RHS_BLOCK * sizeof *B);
    if (!Dk || !Ek || !B) {
        free(ab);
        free(Dk);
        free(Ek);
        free(B);
        return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (local solve, %d unknowns)", n);
    }
    for (int32_t blk = 0; blk < nbk; blk++) {
        for (int32_t jj = 0; jj < bs; jj++) {
            for (int32_t ii = 0; ii < bs; ii++) {
                int32_t i = blk * bs + ii, j = blk * bs + jj;
                double *d = Dk + blk * bb + (size_t)jj * bs + ii;
                if (i >= n)
                    *d = ii == jj ? 1.0 : 0.0;
                else if (ii >= jj)
                    *d = ab[(size_t)j * ldab + (i - j)];
                j -= bs; /* the block to the left: entries with i - j <= kd */
                if (blk > 0 && i < n && ii <= jj)
                    Ek[blk * bb + (size_t)jj * bs + ii] = ab[(size_t)j * ldab + (i - j)];
            }
        }
    }
    free(ab);

    /* Right-hand sides Dbar^T E: the x slope of local corner r (column r) is its mean row a_rx,
     * the y slope (column L^2 + r) a_ry. Blocks of SB_RHS_BLOCK columns. */
    for (int32_t c0 = 0; c0 < ns; c0 += SB_RHS_BLOCK) {
        const int32_t nc = ns - c0 < SB_RHS_BLOCK ? ns - c0 : SB_RHS_BLOCK;
        int32_t u0 = n; /* the first row any right-hand side of the block touches */
        memset(B, 0, (size_t)np * nc * sizeof *B);
        for (int32_t col = 0; col < nc; col++) {
            const int32_t cg = c0 + col, comp = cg >= L * L, r = comp ? cg - L * L : cg;
            int64_t vidx[9];
            double ax[9], ay[9];
            int nt;
            const int nv = sw_sabre_mean_row(w, w, r % L, r / L, vidx, ax, ay, &nt);
            const double cw = sw_sabre_data_weight(nt, lambda);
            for (int j = 0; j < nv; j++) {
                int32_t u = interleaved(vidx[j], w) - 1;
                if (u < 0)
                    continue;
                B[(size_t)col * np + u] += cw * (comp ? ay[j] : ax[j]);
                u0 = u < u0 ? u : u0;
            }
        }
        /* L y = b, from the first block with a non-zero (the rows above stay zero) */
        for (int32_t blk = u0 / bs; blk < nbk; blk++) {
            double *Bb = B + (size_t)blk * bs;
            if (blk > u0 / bs)
                cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, bs, nc, bs, -1.0,
                            Ek + blk * bb, bs, Bb - bs, np, 1.0, Bb, np);
            cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, bs, nc,
                        1.0, Dk + blk * bb, bs, Bb, np);
        }
        /* L^T x = y */
        for (int32_t blk = nbk - 1; blk >= 0; blk--) {
            double *Bb = B + (size_t)blk * bs;
            if (blk < nbk - 1)
                cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, bs, nc, bs, -1.0,
                            Ek + (blk + 1) * bb, bs, Bb + bs, np, 1.0, Bb, np);
            cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasTrans, CblasNonUnit, bs, nc, 1.0,
                        Dk + blk * bb, bs, Bb, np);
        }
        for (int32_t c = 0; c < nc; c++) {
            float *qc = Q + (size_t)(c0 + c) * nl;
            const double *bc = B + (size_t)c * np;
            qc[0] = 0.0f; /* the anchor */
            for (int32_t v = 1; v < nl; v++)
                qc[v] = (float)(pitch * bc[interleaved(v, w) - 1]);
        }
    }
    free(Dk);
    free(Ek);
    free(B);
    return SW_OK;
}

/* ------------------------------------------------------------------ create / destroy */

void sw_sabre_destroy(sw_sabre *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    sw_sabre_gpu_destroy(plan);
#endif
    sabre_plan *sp = (sabre_plan *)plan;
    free(plan->valid);
    free(plan->ws);
    free(plan->Q);
    free(plan->gidx);
    free(plan->pair_lo);
    free(plan->pair_hi);
    free(plan->pair_vlo);
    free(plan->pair_vhi);
    free(plan->pair_use);
    free(plan->pair_n);
    free(plan->pair_in);
    free(plan->level_base);
    free(plan->hpme);
    free(plan->dpme_dist);
    free(plan->pad_part);
    free(plan->pad_local);
    free(plan->pidx);
    free(plan->rreal);
    free(sp->R);
    free(sp->Rs);
    free(sp->Pd);
    free(plan->proj);
    free(plan->q1);
    free(sp->Z);
    free(sp->F);
    free(sp->X);
    free(sp->Y);
    free(sp->vals);
    free(sp->psum);
    free(sp->K);
    free(sp->Kold);
    free(sp);
}

static sw_status check_params(sw_context *ctx, const sw_sabre_params *p)
{
    if (p->nx < 2 || p->nx > SB_MAX_DIM || p->ny < 2 || p->ny > SB_MAX_DIM)
        return sw_fail(ctx, SW_EINVAL, "sabre: the lenslet array %d x %d is outside 2..%d per side",
                       p->nx, p->ny, SB_MAX_DIM);
    if (!isfinite(p->pitch) || !(p->pitch > 0))
        return sw_fail(ctx, SW_EINVAL, "sabre: pitch %g is not a finite positive number", p->pitch);
    int32_t maxd = p->nx > p->ny ? p->nx : p->ny;
    if (p->partitions < 1 || p->partitions > maxd - 1)
        return sw_fail(ctx, SW_EINVAL,
                       "sabre: %d partitions per side is outside 1..%d (max(nx, ny) - 1: a "
                       "partition needs at least one square)",
                       p->partitions, maxd - 1);
    if (p->pme != SW_SABRE_PME_HIERARCHICAL && p->pme != SW_SABRE_PME_DISTRIBUTED &&
        p->pme != SW_SABRE_PME_NONE)
        return sw_fail(ctx, SW_EINVAL, "sabre: unknown piston equalisation %d", (int)p->pme);
    if (p->padding != SW_SABRE_PAD_ZERO && p->padding != SW_SABRE_PAD_NEAREST)
        return sw_fail(ctx, SW_EINVAL, "sabre: unknown padding %d", (int)p->padding);
    if (p->fill_iterations < 0 || p->fill_iterations > 16)
        return sw_fail(ctx, SW_EINVAL, "sabre: fill_iterations %d is not in 0..16",
                       (int)p->fill_iterations);
    if (p->extend_eq17 != 0 && p->extend_eq17 != 1)
        return sw_fail(ctx, SW_EINVAL, "sabre: extend_eq17 %d is not 0 or 1", (int)p->extend_eq17);
    if (!(p->triangle_weight >= SW_SABRE_TRIANGLE_WEIGHT_MIN && p->triangle_weight <= 1.0))
        return sw_fail(ctx, SW_EINVAL,
                       "sabre: triangle_weight %g is not in %g..1 (the per-triangle rows keep the "
                       "lenslet-mean model's checkerboard modes determined)",
                       p->triangle_weight, SW_SABRE_TRIANGLE_WEIGHT_MIN);
    if (p->robust_passes < 0 || p->robust_passes > SW_SABRE_ROBUST_MAX_PASSES)
        return sw_fail(ctx, SW_EINVAL, "sabre: robust_passes %d is not in 0..%d",
                       (int)p->robust_passes, SW_SABRE_ROBUST_MAX_PASSES);
    if (!(p->robust_threshold >= 1.0 && p->robust_threshold <= 1e3))
        return sw_fail(ctx, SW_EINVAL, "sabre: robust_threshold %g is not in 1..1000",
                       p->robust_threshold);
    if (p->pme_band != 0 && p->pme_band != 1)
        return sw_fail(ctx, SW_EINVAL, "sabre: pme_band %d is not 0 or 1", (int)p->pme_band);
    if (p->robust_pme != 0 && p->robust_pme != 1)
        return sw_fail(ctx, SW_EINVAL, "sabre: robust_pme %d is not 0 or 1", (int)p->robust_pme);
    if (p->pme == SW_SABRE_PME_HIERARCHICAL && !is_pow2(p->partitions))
        return sw_fail(ctx, SW_EINVAL,
                       "sabre: H-PME needs a power of two of partitions per side, not %d (use "
                       "distributed PME, or 2^p partitions)",
                       p->partitions);
    if (p->overlap < 0 || p->overlap > SB_MAX_OVERLAP)
        return sw_fail(ctx, SW_EINVAL, "sabre: overlap %d is outside 0..%d", p->overlap,
                       SB_MAX_OVERLAP);
    if (p->dpme_iterations < 0)
        return sw_fail(ctx, SW_EINVAL, "sabre: D-PME iterations %d is negative",
                       p->dpme_iterations);
    if (p->valid) {
        size_t n = (size_t)p->nx * p->ny, any = 0;
        for (size_t l = 0; l < n && !any; l++)
            any = p->valid[l] != 0;
        if (!any)
            return sw_fail(ctx, SW_EINVAL, "sabre: the validity mask has no valid lenslet");
    }
    return SW_OK;
}

/* Whether centre (X, Y) of the extended lattice (square (X, Y)'s centre) is inside the pupil: its
 * four corners are. */
static int centre_in_pupil(const sw_sabre *s, int32_t X, int32_t Y)
{
    return corner_in_pupil(s, X, Y) && corner_in_pupil(s, X + 1, Y) &&
           corner_in_pupil(s, X, Y + 1) && corner_in_pupil(s, X + 1, Y + 1);
}

/* Entries per pair: the m + 1 corners of the shared core border, or with pme_band the band of
 * OL squares on either side of it, (2 OL + 1)(m + 1) corners and 2 OL m centres. */
static int32_t pair_stride(const sw_sabre_params *p, int32_t m)
{
    return p->pme_band ? (2 * p->overlap + 1) * (m + 1) + 2 * p->overlap * m : m + 1;
}

/* The pair tables (sabre_internal.h) and, per pair, the number of border vertices inside the
 * pupil (before the fallback to all vertices), for the H-PME schedule. A pair's vertices: the
 * m + 1 corners on the line between the two cores (Brunner et al. Eq. 8, 10); with pme_band also
 * the corners and centres within OL squares of that line, along the cores' common extent, that
 * both windows hold (the windows' overlap: more vertices for each offset). */
static void build_pairs(sw_sabre *s, int32_t *inpupil)
{
    const int32_t k = s->k, m = s->m, L = s->L, w = s->w, ps = s->pstride;
    const int32_t band = s->params.pme_band ? s->params.overlap : 0;
    for (int32_t p = 0; p < s->npairs; p++) {
        int horizontal = p < k * (k - 1);
        int32_t a, b, X0, Y0;
        if (horizontal) { /* (a, b)-(a+1, b): the line X = (a+1) m */
            a = p % (k - 1), b = p / (k - 1);
            s->pair_lo[p] = b * k + a;
            s->pair_hi[p] = b * k + a + 1;
            X0 = (a + 1) * m, Y0 = b * m;
        } else { /* (a, b)-(a, b+1): the line Y = (b+1) m */
            int32_t q = p - k * (k - 1);
            a = q % k, b = q / k;
            s->pair_lo[p] = b * k + a;
            s->pair_hi[p] = (b + 1) * k + a;
            X0 = a * m, Y0 = (b + 1) * m;
        }
        const int32_t lo = s->pair_lo[p], hi = s->pair_hi[p];
        const int32_t alo = lo % k, blo = lo / k, ahi = hi % k, bhi = hi / k;
        const size_t e0 = (size_t)p * ps;
        int32_t cnt = 0, n_in = 0;
        /* across the line: offsets -band..band (corners), -band..band-1 (centres); along it: the
         * cores' common extent, corners 0..m, centres 0..m-1 */
        for (int c = 0; c < 2; c++) {
            const int32_t alen = c ? m : m + 1, olo = -band, ohi = c ? band - 1 : band;
            for (int32_t o = olo; o <= ohi; o++) {
                for (int32_t j = 0; j < alen; j++) {
                    const int32_t X = horizontal ? X0 + o : X0 + j;
                    const int32_t Y = horizontal ? Y0 + j : Y0 + o;
                    const int32_t xl = X - s->ws[alo], yl = Y - s->ws[blo];
                    const int32_t xh = X - s->ws[ahi], yh = Y - s->ws[bhi];
                    const int32_t lim = c ? w - 1 : w; /* a window's last corner / centre */
                    if (xl < 0 || yl < 0 || xh < 0 || yh < 0 || xl > lim || yl > lim || xh > lim ||
                        yh > lim)
                        continue; /* not in both windows */
                    const size_t e = e0 + (size_t)cnt++;
                    s->pair_vlo[e] = c ? L * L + yl * w + xl : yl * L + xl;
                    s->pair_vhi[e] = c ? L * L + yh * w + xh : yh * L + xh;
                    s->pair_use[e] =
                        (uint8_t)(c ? centre_in_pupil(s, X, Y) : corner_in_pupil(s, X, Y));
                    n_in += s->pair_use[e];
                }
            }
        }
        for (int32_t j = cnt; j < ps; j++) { /* unused entries */
            s->pair_vlo[e0 + j] = s->pair_vhi[e0 + j] = 0;
            s->pair_use[e0 + j] = 0;
        }
        inpupil[p] = n_in;
        if (n_in == 0)
            for (int32_t j = 0; j < cnt; j++)
                s->pair_use[e0 + j] = 1;
        s->pair_n[p] = n_in > 0 ? n_in : cnt;
        s->pair_in[p] = (uint8_t)(n_in > 0);
    }
}

/* The H-PME schedule: per level and group, the master tile (most in-pupil core vertices, ties
 * the lowest index) and the edge neighbour through which the diagonal tile is levelled (the one
 * sharing more in-pupil border vertices with it, ties master ^ 1). */
static sw_status build_hpme(sw_sabre *s, const int32_t *inpupil)
{
    const int32_t k = s->k, G = s->G;
    int64_t *core = calloc((size_t)G, sizeof *core);
    int32_t *ids = malloc((size_t)(k > 1 ? k : 1) * sizeof *ids);
    if (!core || !ids) {
        free(core);
        free(ids);
        return sw_fail(s->ctx, SW_ENOMEM, "sabre: out of memory (H-PME schedule)");
    }
    /* the vertices of each partition's core squares (corners on its borders included, so that
     * a square pupil gives every partition the same count) */
    const int32_t m = s->m;
    for (int32_t i = 0; i < G; i++) {
        int32_t X0 = (i % k) * m, Y0 = (i / k) * m;
        for (int32_t Y = Y0; Y <= Y0 + m; Y++)
            for (int32_t X = X0; X <= X0 + m; X++)
                core[i] += corner_in_pupil(s, X, Y);
        for (int32_t Y = Y0; Y < Y0 + m; Y++)
            for (int32_t X = X0; X < X0 + m; X++)
                core[i] += corner_in_pupil(s, X, Y) && corner_in_pupil(s, X + 1, Y) &&
                           corner_in_pupil(s, X, Y + 1) && corner_in_pupil(s, X + 1, Y + 1);
    }
    int32_t base = 0;
    for (int32_t h = 1; h <= s->p; h++) {
        int32_t sz = 1 << (h - 1), ng = k >> h;
        s->level_base[h - 1] = base;
        for (int32_t gy = 0; gy < ng; gy++) {
            for (int32_t gx = 0; gx < ng; gx++) {
                int64_t tc[4] = {0, 0, 0, 0};
                for (int t = 0; t < 4; t++) {
                    int32_t a0 = (2 * gx + (t & 1)) * sz, b0 = (2 * gy + (t >> 1)) * sz;
                    for (int32_t b = b0; b < b0 + sz; b++)
                        for (int32_t a = a0; a < a0 + sz; a++)
                            tc[t] += core[b * k + a];
                }
                int mt = 0;
                for (int t = 1; t < 4; t++)
                    if (tc[t] > tc[mt])
                        mt = t;
                int diag = mt ^ 3;
                int64_t n1 = 0, n2 = 0;
                tile_pairs(s, sz, gx, gy, diag, mt ^ 1, ids);
                for (int32_t r = 0; r < sz; r++)
                    n1 += inpupil[ids[r]];
                tile_pairs(s, sz, gx, gy, diag, mt ^ 2, ids);
                for (int32_t r = 0; r < sz; r++)
                    n2 += inpupil[ids[r]];
                uint8_t *e = s->hpme + 2 * (base + gy * ng + gx);
                const int via = n2 > n1 ? mt ^ 2 : mt ^ 1;
                /* bits 2, 3, 4: whether the borders (mt, mt^1), (mt, mt^2), (via, mt^3) have a
                 * pair with vertices inside the pupil (level_offset's rule, precomputed so that
                 * the GPU need not look) */
                int any[3] = {0, 0, 0};
                const int bt[3][2] = {{mt, mt ^ 1}, {mt, mt ^ 2}, {via, mt ^ 3}};
                for (int bi = 0; bi < 3; bi++) {
                    tile_pairs(s, sz, gx, gy, bt[bi][0], bt[bi][1], ids);
                    for (int32_t r = 0; r < sz; r++)
                        any[bi] |= inpupil[ids[r]] > 0;
                }
                e[0] = (uint8_t)(mt | any[0] << 2 | any[1] << 3 | any[2] << 4);
                e[1] = (uint8_t)via;
            }
        }
        base += ng * ng;
    }
    free(core);
    free(ids);
    return SW_OK;
}

sw_status sw_sabre_create(sw_context *ctx, const sw_sabre_params *p, sw_sabre **out)
{
    if (out)
        *out = NULL;
    if (!p || !out)
        return sw_fail(ctx, SW_EINVAL, "sabre: NULL %s", !p ? "params" : "out");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;

    /* Partitioning (seed 002 section 5.A, sabre.h). */
    const int32_t k = p->partitions, maxd = p->nx > p->ny ? p->nx : p->ny;
    /* the smallest m with k m + 1 >= max(nx, ny), or with extend_eq17 seed 002 Eq. 17's, the
     * smallest m with k m > max(nx, ny) */
    const int32_t m = p->extend_eq17 ? maxd / k + 1 : (maxd - 1 + k - 1) / k;
    const int32_t S = k * m;
    const int32_t w = m + 2 * p->overlap < S ? m + 2 * p->overlap : S;
    const int32_t L = w + 1;
    const int64_t nl64 = (int64_t)L * L + (int64_t)w * w;
    if (nl64 > SB_MAX_VALUES)
        return sw_fail(ctx, SW_EINVAL,
                       "sabre: a window of %d x %d squares has %lld values, more than %d: use "
                       "more partitions (%d per side now) or less overlap",
                       w, w, (long long)nl64, SB_MAX_VALUES, k);
    const int32_t nl = (int32_t)nl64, ns = 2 * L * L, G = k * k;
    const int64_t nvals = (int64_t)(S + 1) * (S + 1) + (int64_t)S * S;
    if ((int64_t)ns * G > INT32_MAX || (int64_t)nl * G > INT32_MAX)
        return sw_fail(ctx, SW_ENOMEM,
                       "sabre: %d partitions of %d local slopes are more than the 2^31 entries "
                       "a run can index: use fewer partitions or less overlap",
                       G, ns);

    /* The plan's arrays grow with the partitions' local slopes and values and the global
     * lattice: about 16 bytes for each (measured 1.3 GB RSS at 4096 x 4096 lenslets, k = 64,
     * where this gives 1.7 GB), checked before any is made. */
    SW_TRY(sw_memory_check(ctx, (uint64_t)G * (uint64_t)(ns + nl) + (uint64_t)nvals, 16,
                           "sabre: a plan of %d x %d lenslets in %d x %d partitions", (int)p->nx,
                           (int)p->ny, (int)k, (int)k));
    sabre_plan *sp = calloc(1, sizeof *sp);
    if (!sp)
        return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory");
    sw_sabre *s = &sp->pub;
    s->ctx = ctx;
    s->params = *p;
    s->params.valid = NULL;
    s->n = p->nx * p->ny;
    s->k = k, s->m = m, s->S = S, s->w = w, s->L = L;
    s->G = G, s->nl = nl, s->ns = ns;
    s->offx = (S + 1 - p->nx) / 2;
    s->offy = (S + 1 - p->ny) / 2;
    s->npairs = 2 * k * (k - 1);
    s->p = 0;
    if (p->pme == SW_SABRE_PME_HIERARCHICAL)
        while ((1 << s->p) < k)
            s->p++;
    s->kernel_us = -1.0;
    s->pstride = pair_stride(p, m);
    const size_t np = (size_t)s->npairs, pe = np * (size_t)s->pstride;
    int32_t *inpupil = malloc((np > 0 ? np : 1) * sizeof *inpupil);
    s->ws = malloc((size_t)k * sizeof *s->ws);
    s->Q = malloc((size_t)nl * ns * sizeof *s->Q);
    s->gidx = malloc((size_t)G * L * L * sizeof *s->gidx);
    s->pair_lo = malloc((np > 0 ? np : 1) * sizeof *s->pair_lo);
    s->pair_hi = malloc((np > 0 ? np : 1) * sizeof *s->pair_hi);
    s->pair_vlo = malloc((pe > 0 ? pe : 1) * sizeof *s->pair_vlo);
    s->pair_vhi = malloc((pe > 0 ? pe : 1) * sizeof *s->pair_vhi);
    s->pair_use = malloc((pe > 0 ? pe : 1) * sizeof *s->pair_use);
    s->pair_n = malloc((np > 0 ? np : 1) * sizeof *s->pair_n);
    s->pair_in = malloc(np > 0 ? np : 1);
    s->level_base = malloc((size_t)(s->p > 0 ? s->p : 1) * sizeof *s->level_base);
    s->hpme = calloc((size_t)2 * (G > 1 ? G : 1), 1); /* sum over levels of groups < G */
    s->dpme_dist = malloc((size_t)G * sizeof *s->dpme_dist);
    sp->X = malloc((size_t)ns * G * sizeof *sp->X);
    sp->Y = malloc((size_t)nl * G * sizeof *sp->Y);
    sp->vals = malloc((size_t)nvals * sizeof *sp->vals);
    sp->psum = malloc((np > 0 ? np : 1) * sizeof *sp->psum);
    sp->K = malloc((size_t)G * sizeof *sp->K);
    sp->Kold = malloc((size_t)G * sizeof *sp->Kold);
    if (p->valid) {
        s->valid = malloc((size_t)s->n);
        if (s->valid) {
            memcpy(s->valid, p->valid, (size_t)s->n);
            s->params.valid = s->valid;
        }
    }
    if (!inpupil || !s->ws || !s->Q || !s->gidx || !s->pair_lo || !s->pair_hi || !s->pair_vlo ||
        !s->pair_vhi || !s->pair_use || !s->pair_n || !s->pair_in || !s->level_base || !s->hpme ||
        !s->dpme_dist || !sp->X || !sp->Y || !sp->vals || !sp->psum || !sp->K || !sp->Kold ||
        (p->valid && !s->valid)) {
        free(inpupil);
        sw_sabre_destroy(s);
        return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (local matrix %d x %d, %d partitions)",
                       nl, ns, G);
    }

    /* Windows: OL squares around each core, shifted inwards at the edges (sabre.h). */
    for (int32_t a = 0; a < k; a++)
        s->ws[a] = clamp_i32(a * m - p->overlap, 0, S - w);

    /* Gather table: local corner r = y L + x of partition i = b k + a; padding reads nothing
     * (zero) or the nearest valid lenslet. */
    int32_t *near = NULL;
    if (p->padding == SW_SABRE_PAD_NEAREST) {
        near = malloc((size_t)(S + 1) * (S + 1) * sizeof *near);
        if (!near || nearest_valid(s, near) != 0) {
            free(near);
            free(inpupil);
            sw_sabre_destroy(s);
            return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (padding table)");
        }
    }
    for (int32_t i = 0; i < G; i++) {
        int32_t a = i % k, b = i / k;
        for (int32_t y = 0; y < L; y++) {
            for (int32_t x = 0; x < L; x++) {
                int32_t X = s->ws[a] + x, Y = s->ws[b] + y;
                int32_t ix = X - s->offx, iy = Y - s->offy;
                int32_t g = -1;
                if (corner_in_pupil(s, X, Y))
                    g = iy * p->nx + ix;
                else if (near)
                    g = near[(size_t)Y * (S + 1) + X];
                s->gidx[(size_t)i * L * L + (size_t)y * L + x] = g;
            }
        }
    }
    free(near);

    /* Fill iterations: the padded corners, their owners and local corners (sabre_internal.h). */
    if (p->fill_iterations > 0) {
        const int32_t S1 = S + 1;
        int32_t *padid = malloc((size_t)S1 * S1 * sizeof *padid);
        s->pidx = malloc((size_t)G * L * L * sizeof *s->pidx);
        if (!padid || !s->pidx) {
            free(padid);
            free(inpupil);
            sw_sabre_destroy(s);
            return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (fill tables)");
        }
        s->npad = 0;
        for (int32_t Y = 0; Y < S1; Y++)
            for (int32_t X = 0; X < S1; X++)
                padid[Y * S1 + X] = corner_in_pupil(s, X, Y) ? -1 : s->npad++;
        const size_t np1 = s->npad > 0 ? (size_t)s->npad : 1;
        s->pad_part = malloc(np1 * sizeof *s->pad_part);
        s->pad_local = malloc(np1 * sizeof *s->pad_local);
        sp->F = calloc(2 * np1, sizeof *sp->F);
        if (!s->pad_part || !s->pad_local || !sp->F) {
            free(padid);
            free(inpupil);
            sw_sabre_destroy(s);
            return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (fill tables)");
        }
        for (int32_t Y = 0; Y < S1; Y++)
            for (int32_t X = 0; X < S1; X++) {
                int32_t q = padid[Y * S1 + X];
                if (q < 0)
                    continue;
                int32_t a = sw_sabre_owner(X, m, k), b = sw_sabre_owner(Y, m, k);
                s->pad_part[q] = b * k + a;
                s->pad_local[q] = (Y - s->ws[b]) * L + (X - s->ws[a]);
            }
        for (int32_t i = 0; i < G; i++) {
            int32_t a = i % k, b = i / k;
            for (int32_t y = 0; y < L; y++)
                for (int32_t x = 0; x < L; x++)
                    s->pidx[(size_t)i * L * L + (size_t)y * L + x] =
                        padid[(s->ws[b] + y) * S1 + s->ws[a] + x];
        }
        free(padid);
    }

    /* Robust passes: the real, valid lenslets among each partition's local corners, and the
     * residuals' scratch. */
    if (p->robust_passes > 0) {
        const size_t nloc = (size_t)G * L * L;
        s->rreal = malloc(nloc);
        sp->R = malloc(nloc * sizeof *sp->R);
        sp->Rs = malloc(nloc * sizeof *sp->Rs);
        if (!s->rreal || !sp->R || !sp->Rs) {
            free(inpupil);
            sw_sabre_destroy(s);
            return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (robust tables)");
        }
        for (int32_t i = 0; i < G; i++) {
            int32_t a = i % k, b = i / k;
            for (int32_t y = 0; y < L; y++)
                for (int32_t x = 0; x < L; x++)
                    s->rreal[(size_t)i * L * L + (size_t)y * L + x] =
                        (uint8_t)corner_in_pupil(s, s->ws[a] + x, s->ws[b] + y);
        }
    }

    if (p->robust_pme && pe > 0) {
        sp->Pd = malloc(pe * sizeof *sp->Pd);
        if (!sp->Pd) {
            free(inpupil);
            sw_sabre_destroy(s);
            return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (robust PME)");
        }
    }

    /* Borders between cores and the H-PME schedule. */
    build_pairs(s, inpupil);
    if (p->pme == SW_SABRE_PME_HIERARCHICAL) {
        st = build_hpme(s, inpupil);
        if (st != SW_OK) {
            free(inpupil);
            sw_sabre_destroy(s);
            return st;
        }
    }
    free(inpupil);

    /* D-PME (seed 002 section 2.B): master (k/2, k/2), Manhattan distances, L_D iterations. */
    {
        int32_t ma = k / 2, dmax = 0;
        int32_t mb = ma;
        s->dpme_master = mb * k + ma;
        for (int32_t i = 0; i < G; i++) {
            int32_t a = i % k, b = i / k;
            s->dpme_dist[i] = abs(a - ma) + abs(b - mb);
            if (s->dpme_dist[i] > dmax)
                dmax = s->dpme_dist[i];
        }
        s->dpme_iters = p->dpme_iterations > 0 ? p->dpme_iterations : dmax;
    }

    /* The local matrix, and the check of Eq. 5-7 on small windows. */
    double check = -1.0;
    if (w <= SB_CHECK_WINDOW) {
        st = null_space_check(ctx, w, &check);
        if (st != SW_OK) {
            sw_sabre_destroy(s);
            return st;
        }
    }
    st = build_q(ctx, w, p->pitch, p->triangle_weight, s->Q);
    if (st != SW_OK) {
        sw_sabre_destroy(s);
        return st;
    }

    sw_sabre_info *info = &s->info;
    info->k = k;
    info->m = m;
    info->window = w;
    info->extended = S + 1;
    info->local_values = nl;
    info->local_slopes = ns;
    info->dpme_iterations = s->dpme_iters;
    info->lattice.sx = info->lattice.sy = S;
    info->lattice.offx = s->offx;
    info->lattice.offy = s->offy;
    info->null_check = check;

#ifdef SW_HAVE_CUDA
    if (ctx && sw_context_backend(ctx) == SW_BACKEND_CUDA) {
        st = sw_sabre_gpu_create(s);
        if (st != SW_OK) {
            sw_sabre_destroy(s);
            return st;
        }
    }
#endif
    sw_log(ctx, SW_LOG_DEBUG,
           "sabre: %d x %d lenslets, %d x %d partitions of %d squares (window %d, %d values, %d "
           "slopes), %s PME",
           p->nx, p->ny, k, k, m, w, nl, ns, sw_sabre_pme_string(p->pme));
    *out = s;
    return SW_OK;
}

void sw_sabre_get_info(const sw_sabre *plan, sw_sabre_info *out)
{
    if (!out)
        return;
    if (!plan) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = plan->info;
}

double sw_sabre_kernel_us(const sw_sabre *plan)
{
    return plan ? plan->kernel_us : -1.0;
}

const float *sw_sabre_local_matrix(const sw_sabre *plan)
{
    return plan ? plan->Q : NULL;
}

/* ------------------------------------------------------------------ run */

/*
 * Step 2c for partition i (sabre_internal.h): at each real local corner r the model's slope
 * mu = (float) (sw_sabre_predict / pitch), the residual r = (double) sigma - (double) mu and its
 * length; m = the lower median of the lengths over the window's real corners; then X's rows of r
 * = (float) (mu + r min(1, kappa m / |r|)).
 */
static void robust_partition(sabre_plan *sp, const float *slopes, int32_t i)
{
    const sw_sabre *s = &sp->pub;
    const int32_t L = s->L, L2 = L * L, n = s->n;
    const float *y = sp->Y + (size_t)s->nl * i;
    float *xi = sp->X + (size_t)s->ns * i;
    const int32_t *gi = s->gidx + (size_t)i * L2;
    const uint8_t *real = s->rreal + (size_t)i * L2;
    double *R = sp->R + (size_t)i * L2, *Rs = sp->Rs + (size_t)i * L2;
    const double inv = 1.0 / s->params.pitch;
    int64_t cnt = 0;
    for (int32_t r = 0; r < L2; r++) {
        if (!real[r])
            continue;
        double gx, gy;
        sw_sabre_predict(y, s->w, r % L, r / L, &gx, &gy);
        xi[r] = (float)(gx * inv); /* mu, for now */
        xi[L2 + r] = (float)(gy * inv);
        const double rx = (double)slopes[gi[r]] - (double)xi[r];
        const double ry = (double)slopes[n + gi[r]] - (double)xi[L2 + r];
        R[r] = sqrt(rx * rx + ry * ry);
        Rs[cnt++] = R[r];
    }
    if (cnt == 0)
        return;
    const double tau = s->params.robust_threshold * sw_sabre_lower_median(Rs, cnt);
    for (int32_t r = 0; r < L2; r++) {
        if (!real[r])
            continue;
        const double mx = xi[r], my = xi[L2 + r];
        const double f = R[r] > tau ? tau / R[r] : 1.0;
        xi[r] = (float)(mx + f * ((double)slopes[gi[r]] - mx));
        xi[L2 + r] = (float)(my + f * ((double)slopes[n + gi[r]] - my));
    }
}

static sw_status run_cpu(sabre_plan *sp, const float *slopes, float *values, float *actuators)
{
    sw_sabre *s = &sp->pub;
    const int32_t nx = s->params.nx, ny = s->params.ny, n = s->n;
    const int32_t k = s->k, m = s->m, S = s->S, w = s->w, L = s->L;
    const int32_t G = s->G, nl = s->nl, ns = s->ns, L2 = L * L;
    const int threads = s->ctx && sw_context_threads(s->ctx) > 0 ? sw_context_threads(s->ctx) : 1;

    /* NaN / Inf on a valid lenslet: refused, naming it. */
    for (int32_t l = 0; l < n; l++) {
        if (s->valid && !s->valid[l])
            continue;
        if (!isfinite(slopes[l]) || !isfinite(slopes[n + l]))
            return sw_fail(
                s->ctx, SW_ERANGE, "sabre: the %s slope of valid lenslet (%d, %d) (index %d) is %s",
                isfinite(slopes[l]) ? "y" : "x", l % nx, l / nx, l,
                isnan(isfinite(slopes[l]) ? slopes[n + l] : slopes[l]) ? "NaN" : "infinite");
    }

    /* 1. gather */
    float *X = sp->X;
#pragma omp parallel for schedule(static) num_threads(threads) if ((int64_t)G * ns > SB_OMP_MIN)
    for (int32_t i = 0; i < G; i++) {
        const int32_t *gi = s->gidx + (size_t)i * L2;
        float *xi = X + (size_t)i * ns;
        for (int32_t r = 0; r < L2; r++) {
            int32_t g = gi[r];
            xi[r] = g >= 0 ? slopes[g] : 0.0f;
            xi[L2 + r] = g >= 0 ? slopes[n + g] : 0.0f;
        }
    }

    /* 2. all local solves at once (Eq. 16) */
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, nl, G, ns, 1.0f, s->Q, nl, X, ns, 0.0f,
                sp->Y, nl);

    /* 2b. fill iterations: the padded corners' slopes from the last solve, then solve again */
    for (int32_t t = 0; t < s->params.fill_iterations && s->npad > 0; t++) {
        const int32_t np = s->npad;
        const double inv = 1.0 / s->params.pitch;
        float *F = sp->F;
#pragma omp parallel for schedule(static) num_threads(threads) if (np > SB_OMP_MIN)
        for (int32_t q = 0; q < np; q++) {
            int32_t lc = s->pad_local[q];
            double gx, gy;
            sw_sabre_predict(sp->Y + (size_t)nl * s->pad_part[q], w, lc % L, lc / L, &gx, &gy);
            F[q] = (float)(gx * inv);
            F[np + q] = (float)(gy * inv);
        }
#pragma omp parallel for schedule(static) num_threads(threads) if ((int64_t)G * ns > SB_OMP_MIN)
        for (int32_t i = 0; i < G; i++) {
            const int32_t *pi = s->pidx + (size_t)i * L2;
            float *xi = X + (size_t)i * ns;
            for (int32_t r = 0; r < L2; r++)
                if (pi[r] >= 0) {
                    xi[r] = F[pi[r]];
                    xi[L2 + r] = F[np + pi[r]];
                }
        }
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, nl, G, ns, 1.0f, s->Q, nl, X, ns,
                    0.0f, sp->Y, nl);
    }
    /* 2c. robust passes: Huber pseudo-observations of the real lenslets from the last solve,
     * every partition on its own (sabre.h), then solve again */
    for (int32_t t = 0; t < s->params.robust_passes; t++) {
#pragma omp parallel for schedule(static) num_threads(threads) if ((int64_t)G * ns > SB_OMP_MIN)
        for (int32_t i = 0; i < G; i++)
            robust_partition(sp, slopes, i);
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, nl, G, ns, 1.0f, s->Q, nl, X, ns,
                    0.0f, sp->Y, nl);
    }
    const float *Y = sp->Y;

    /* 3. border sums */
#pragma omp parallel for schedule(static)                                                          \
    num_threads(threads) if ((int64_t)s->npairs * s->pstride > SB_OMP_MIN)
    for (int32_t p = 0; p < s->npairs; p++) {
        const size_t e0 = (size_t)p * s->pstride;
        const float *ylo = Y + (size_t)nl * s->pair_lo[p], *yhi = Y + (size_t)nl * s->pair_hi[p];
        double acc = 0.0;
        if (s->params.robust_pme) { /* n times the lower median of the differences */
            double *d = sp->Pd + e0;
            int64_t cnt = 0;
            for (int32_t j = 0; j < s->pstride; j++)
                if (s->pair_use[e0 + j])
                    d[cnt++] = (double)yhi[s->pair_vhi[e0 + j]] - (double)ylo[s->pair_vlo[e0 + j]];
            acc = cnt ? (double)cnt * sw_sabre_lower_median(d, cnt) : 0.0;
        } else {
            for (int32_t j = 0; j < s->pstride; j++)
                if (s->pair_use[e0 + j])
                    acc += (double)yhi[s->pair_vhi[e0 + j]] - (double)ylo[s->pair_vlo[e0 + j]];
        }
        sp->psum[p] = acc;
    }

    /* 4. piston equalisation */
    sw_sabre_pme_cpu(s, sp->psum, sp->K);

    /* 5. assembly */
    float *vals = values ? values : sp->vals;
    const int64_t nvals = (int64_t)(S + 1) * (S + 1) + (int64_t)S * S;
    const double *K = sp->K;
#pragma omp parallel for schedule(static) num_threads(threads) if (nvals > SB_OMP_MIN)
    for (int64_t v = 0; v < nvals; v++) {
        int32_t part, local;
        sw_sabre_locate_value(v, S, m, k, w, s->ws, &part, &local);
        vals[v] = (float)((double)Y[(size_t)part * nl + local] + K[part]);
    }

    /* 6'. the distributed DM projection (seed 002 Eq. 14-16): all windows' local commands in one
     * product Z = P Y (or, with a matrix per partition, Z_i = P_i Y_i), then the command at
     * lenslet corner (cx, cy), the centre of extended square (I, J) = (cx - 1 + offx, cy - 1 +
     * offy), from the partition whose core owns that square: Z + K q1 (its offset through the
     * projection, q1 = P 1 of that partition's P) */
    if (actuators && s->proj) {
        const int32_t w2 = w * w, ncx = nx + 1, ncy = ny + 1;
        const float *Z = sp->Z;
        /* P is w^2 x nl row-major: column-major nl x w^2, used transposed */
        const int32_t per = s->proj_count > 1; /* one matrix per partition */
        if (per) {
#pragma omp parallel for schedule(static)                                                          \
    num_threads(threads) if ((int64_t)G * w2 * nl > SB_OMP_MIN)
            for (int32_t i = 0; i < G; i++)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, w2, nl, 1.0f,
                            s->proj + (size_t)i * w2 * nl, nl, Y + (size_t)i * nl, 1, 0.0f,
                            sp->Z + (size_t)i * w2, 1);
        } else {
            cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, w2, G, nl, 1.0f, s->proj, nl, Y,
                        nl, 0.0f, sp->Z, w2);
        }
#pragma omp parallel for schedule(static)                                                          \
    num_threads(threads) if ((int64_t)ncx * ncy > SB_OMP_MIN / 8)
        for (int32_t cy = 0; cy < ncy; cy++) {
            const int32_t Jy = cy - 1 + s->offy, b = sw_sabre_owner(Jy, m, k);
            for (int32_t cx = 0; cx < ncx; cx++) {
                const int32_t Ix = cx - 1 + s->offx, a = sw_sabre_owner(Ix, m, k);
                const int32_t i = b * k + a, ls = (Jy - s->ws[b]) * w + (Ix - s->ws[a]);
                const float q = s->q1[(per ? (size_t)i * w2 : 0) + ls];
                actuators[(size_t)cy * ncx + cx] =
                    (float)((double)Z[(size_t)i * w2 + ls] + K[i] * (double)q);
            }
        }
    }

    /* 6. the spline at the lenslet corners (the Fried actuator positions) */
    if (actuators && !s->proj) {
        const int32_t ncx = nx + 1, ncy = ny + 1;
#pragma omp parallel for schedule(static)                                                          \
    num_threads(threads) if ((int64_t)ncx * ncy > SB_OMP_MIN / 8)
        for (int32_t cy = 0; cy < ncy; cy++) {
            for (int32_t cx = 0; cx < ncx; cx++) {
                int64_t idx[3];
                double wgt[3];
                sw_sabre_locate(S, S, cx - 0.5 + s->offx, cy - 0.5 + s->offy, idx, wgt);
                double acc = 0.0;
                for (int j = 0; j < 3; j++)
                    acc += wgt[j] * (double)vals[idx[j]];
                actuators[(size_t)cy * ncx + cx] = (float)acc;
            }
        }
    }
    s->kernel_us = -1.0;
    return SW_OK;
}

sw_status sw_sabre_run(sw_sabre *plan, const float *slopes, sw_memory memory, float *values,
                       float *actuators)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sabre: NULL plan");
    sw_context *ctx = plan->ctx;
    if (!slopes)
        return sw_fail(ctx, SW_EINVAL, "sabre: NULL slopes");
    if (!values && !actuators)
        return sw_fail(ctx, SW_EINVAL, "sabre: neither values nor actuators asked for");
    if (memory != SW_MEM_HOST && memory != SW_MEM_PINNED && memory != SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "sabre: unknown memory kind %d", (int)memory);
#ifdef SW_HAVE_CUDA
    if (ctx && sw_context_backend(ctx) == SW_BACKEND_CUDA)
        return sw_sabre_gpu_run(plan, slopes, memory, values, actuators);
#endif
    if (memory == SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL,
                       "sabre: device memory given to a plan on the CPU backend (use host or "
                       "pinned memory)");
    return run_cpu((sabre_plan *)plan, slopes, values, actuators);
}

/* Sets count projection matrices (1: one for every window; G: one per partition) or, for
 * P = NULL, removes the projection. */
static sw_status set_projection(sw_sabre *plan, const float *P, int32_t count, int32_t rows,
                                int32_t cols)
{
    sabre_plan *sp = (sabre_plan *)plan;
    sw_context *ctx = plan->ctx;
    if (!P) { /* removed: the run's actuators are the spline at the corners again */
        if (!plan->proj)
            return SW_OK;
        free(plan->proj);
        free(plan->q1);
        plan->proj = NULL;
        plan->q1 = NULL;
        plan->proj_count = 0;
#ifdef SW_HAVE_CUDA
        if (plan->gpu)
            return sw_sabre_gpu_set_projection(plan);
#endif
        return SW_OK;
    }
    if (!plan->params.extend_eq17)
        return sw_fail(ctx, SW_EINVAL,
                       "sabre: a projection needs a plan made with extend_eq17 = 1 (every lenslet "
                       "corner a square centre of the extended lattice)");
    const int32_t w2 = plan->w * plan->w, nl = plan->nl;
    if (rows != w2 || cols != nl)
        return sw_fail(ctx, SW_EINVAL,
                       "sabre: the projection is %d x %d, the plan's window needs %d x %d (w^2 "
                       "actuators x local values, w = %d)",
                       rows, cols, w2, nl, plan->w);
    const size_t ne = (size_t)w2 * nl, total = ne * (size_t)count;
    for (size_t e = 0; e < total; e++)
        if (!isfinite(P[e])) {
            const size_t r = e % ne;
            if (count > 1)
                return sw_fail(ctx, SW_EINVAL,
                               "sabre: entry (%d, %d) of partition %d's projection is not finite",
                               (int)(r / nl), (int)(r % nl), (int)(e / ne));
            return sw_fail(ctx, SW_EINVAL, "sabre: projection entry (%d, %d) is not finite",
                           (int)(r / nl), (int)(r % nl));
        }
    float *pc = malloc(total * sizeof *pc);
    float *q1 = malloc((size_t)w2 * count * sizeof *q1);
    if (!sp->Z)
        sp->Z = malloc((size_t)w2 * plan->G * sizeof *sp->Z);
    if (!pc || !q1 || !sp->Z) {
        free(pc);
        free(q1);
        return sw_fail(ctx, SW_ENOMEM, "sabre: out of memory (projection %d x %d, %d of them)", w2,
                       nl, (int)count);
    }
    memcpy(pc, P, total * sizeof *pc);
    /* q1 = P 1: the row sums (Eq. 16's offset term), summed in double */
    for (int64_t r = 0; r < (int64_t)w2 * count; r++) {
        double acc = 0.0;
        for (int32_t c = 0; c < nl; c++)
            acc += (double)pc[(size_t)r * nl + c];
        q1[r] = (float)acc;
    }
    free(plan->proj);
    free(plan->q1);
    plan->proj = pc;
    plan->q1 = q1;
    plan->proj_count = count;
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        return sw_sabre_gpu_set_projection(plan);
#endif
    return SW_OK;
}

sw_status sw_sabre_set_projection(sw_sabre *plan, const float *P, int32_t rows, int32_t cols)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sabre: NULL plan");
    return set_projection(plan, P, 1, rows, cols);
}

sw_status sw_sabre_set_projection_partitions(sw_sabre *plan, const float *P, int32_t partitions,
                                             int32_t rows, int32_t cols)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sabre: NULL plan");
    if (P && partitions != plan->G)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "sabre: %d projection matrices given, the plan has %d partitions (k^2, k = "
                       "%d)",
                       (int)partitions, (int)plan->G, (int)plan->k);
    return set_projection(plan, P, plan->G, rows, cols);
}
