/*
 * find: deblending of touching spots by multi-thresholding (find.h "Deblending"; Bertin &
 * Arnouts 1996, A&AS 117, 393, section 2.4), on the CPU, per connected component of one frame.
 *
 * Per component the work happens on its bounding box (bw x bh pixels, local index k = ly * bw +
 * lx): the component's pixels are those whose label is the component's root. The tree is walked
 * with an explicit stack of work items (a set of pixels and the level to start from); a set is
 * a list of local indices, kept in one pool that grows as the walk needs.
 *
 * Components are independent, and are deblended one after another (in component order, so the
 * output is the same on every machine); sharing them out over threads is left to do.
 */
#include "find/find_internal.h"
#include "find/find_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One child of a component: its footprint (branch) and what the pixel assignment needs. */
typedef struct db_child {
    int32_t first, count; /* its branch: pool[first .. first + count) (local indices) */
    double cut;           /* the level its branch was cut at (f units)               */
    double peak;          /* largest f in the branch                                  */
    double cx, cy;        /* f-weighted centroid of the branch (local coordinates)    */
    double ia, ib, ic;    /* inverse of S: d^T S^-1 d = ia dx^2 + 2 ib dx dy + ic dy^2 */
} db_child;

/* A work item of the tree walk. */
typedef struct db_item {
    int32_t first, count; /* its pixels in the pool */
    int32_t level;        /* first level to try     */
    double cut;           /* the level it was cut at */
} db_item;

/* A branch of one level: its pixels in the pool and its flux. */
typedef struct db_branch {
    int32_t start, count;
    double flux;
} db_branch;

/* Per-thread scratch, grown as needed. */
typedef struct db_work {
    size_t area_cap;   /* the per-pixel arrays hold this many                          */
    double *f;         /* f of the component's pixels (local index)                   */
    int32_t *stamp;    /* membership stamps                                           */
    int32_t *child_of; /* the child a pixel goes to, -1 none, -2 not in the component */
    int32_t stamp_gen;
    int32_t *pool; /* pixel lists */
    size_t pool_len, pool_cap;
    int too_big; /* the pool would pass 2^31 entries */
    db_item *items;
    size_t items_cap;
    db_child *kids;
    size_t kids_cap;
    db_branch *br;
    size_t br_cap;
    double *ring; /* background samples */
    size_t ring_cap;
    sw_find_acc *acc; /* the children's moments */
    size_t acc_cap;
} db_work;

static void work_free(db_work *w)
{
    free(w->f);
    free(w->stamp);
    free(w->child_of);
    free(w->pool);
    free(w->items);
    free(w->kids);
    free(w->br);
    free(w->ring);
    free(w->acc);
    memset(w, 0, sizeof(*w));
}

/* Grows *p (elements of `size` bytes) to hold at least n; 0 on failure. */
static int grow(void **p, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap)
        return 1;
    size_t c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (!q)
        return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* Room for n pixels in the per-pixel arrays; 0 on failure. */
static int area_reserve(db_work *w, size_t n)
{
    if (n <= w->area_cap)
        return 1;
    size_t c = w->area_cap ? w->area_cap : 256;
    while (c < n)
        c *= 2;
    double *f = realloc(w->f, c * sizeof(double));
    if (f)
        w->f = f;
    int32_t *st = realloc(w->stamp, c * sizeof(int32_t));
    if (st)
        w->stamp = st;
    int32_t *co = realloc(w->child_of, c * sizeof(int32_t));
    if (co)
        w->child_of = co;
    if (!f || !st || !co)
        return 0;
    w->area_cap = c;
    memset(w->stamp, 0, c * sizeof(int32_t));
    w->stamp_gen = 0;
    return 1;
}

/* A fresh membership stamp (a value no pixel of the stamp array holds yet). */
static int32_t new_stamp(db_work *w)
{
    if (w->stamp_gen == INT32_MAX) {
        memset(w->stamp, 0, w->area_cap * sizeof(int32_t));
        w->stamp_gen = 0;
    }
    return ++w->stamp_gen;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The value find reads at (x, y), or -1 when the pixel is not valid (mask, overload). */
static double px_value(const sw_find_plan *plan, const sw_image *frame, int32_t x, int32_t y)
{
    int valid;
    const uint32_t v = sw_fm_value(sw_image_row(frame, y), x, plan->p.type, plan->overload, &valid);
    if (!valid || (plan->mask && !plan->mask[(size_t)y * plan->width + x]))
        return -1.0;
    return (double)v;
}

/*
 * The branches of the pixel set pool[first .. first + count) above level t (8-connected, only
 * pixels of the set): each appended to the pool as a list; *nb of them in w->br. The pool may
 * move. 0 on out-of-memory.
 */
static int branches(db_work *w, int32_t first, int32_t count, double t, int32_t bw, int32_t bh,
                    int32_t *nb)
{
    const int32_t in = new_stamp(w);
    int32_t m = 0;
    for (int32_t q = 0; q < count; ++q) {
        const int32_t k = w->pool[first + q];
        if (w->f[k] > t) {
            w->stamp[k] = in;
            ++m;
        }
    }
    *nb = 0;
    if (m == 0)
        return 1;
    /* the pool grows by a level's pixels at each level of one component: its positions are
     * int32 (a flat blob of millions of pixels over a thousand levels would pass 2^31) */
    if (w->pool_len + (size_t)m > (size_t)INT32_MAX) {
        w->too_big = 1;
        return 0;
    }
    if (!grow((void **)&w->pool, &w->pool_cap, w->pool_len + (size_t)m, sizeof(int32_t)))
        return 0;
    const int32_t done = new_stamp(w);
    for (int32_t q = 0; q < count; ++q) {
        const int32_t seed = w->pool[first + q];
        if (w->stamp[seed] != in)
            continue;
        /* a new branch: breadth-first fill into the pool's end */
        const size_t start = w->pool_len;
        double flux = 0.0;
        w->stamp[seed] = done;
        w->pool[w->pool_len++] = seed;
        for (size_t h = start; h < w->pool_len; ++h) {
            const int32_t k = w->pool[h];
            flux += w->f[k];
            const int32_t lx = k % bw, ly = k / bw;
            for (int32_t dy = -1; dy <= 1; ++dy) {
                const int32_t ny = ly + dy;
                if (ny < 0 || ny >= bh)
                    continue;
                for (int32_t dx = -1; dx <= 1; ++dx) {
                    const int32_t nx = lx + dx;
                    if ((dx == 0 && dy == 0) || nx < 0 || nx >= bw)
                        continue;
                    const int32_t n = ny * bw + nx;
                    if (w->stamp[n] == in) {
                        w->stamp[n] = done;
                        w->pool[w->pool_len++] = n;
                    }
                }
            }
        }
        if (!grow((void **)&w->br, &w->br_cap, (size_t)*nb + 1, sizeof(db_branch)))
            return 0;
        w->br[*nb].start = (int32_t)start;
        w->br[*nb].count = (int32_t)(w->pool_len - start);
        w->br[*nb].flux = flux;
        ++*nb;
    }
    return 1;
}

/* The median of the valid pixels that are not strong within 2 px of the component's box. */
static int local_background(const sw_find_plan *plan, const sw_image *frame, const int32_t *labels,
                            const sw_find_comp *c, db_work *w, double *b)
{
    const int32_t x0 = c->x0 - 2 > 0 ? c->x0 - 2 : 0, y0 = c->y0 - 2 > 0 ? c->y0 - 2 : 0;
    const int32_t x1 = c->x1 + 2 < plan->width ? c->x1 + 2 : plan->width;
    const int32_t y1 = c->y1 + 2 < plan->height ? c->y1 + 2 : plan->height;
    if (!grow((void **)&w->ring, &w->ring_cap, (size_t)(x1 - x0) * (size_t)(y1 - y0),
              sizeof(double)))
        return 0;
    size_t n = 0;
    for (int32_t y = y0; y < y1; ++y)
        for (int32_t x = x0; x < x1; ++x) {
            if (labels[(size_t)y * plan->width + x] >= 0)
                continue;
            const double v = px_value(plan, frame, x, y);
            if (v >= 0.0)
                w->ring[n++] = v;
        }
    *b = 0.0;
    if (n > 0) {
        qsort(w->ring, n, sizeof(double), cmp_double);
        *b = (n % 2) ? w->ring[n / 2] : 0.5 * (w->ring[n / 2 - 1] + w->ring[n / 2]);
    }
    return 1;
}

/* Adds a child for the pixel list of item `it`. */
static int add_child(db_work *w, const db_item *it, int32_t *nkids)
{
    if (!grow((void **)&w->kids, &w->kids_cap, (size_t)*nkids + 1, sizeof(db_child)))
        return 0;
    db_child *k = &w->kids[(*nkids)++];
    memset(k, 0, sizeof(*k));
    k->first = it->first;
    k->count = it->count;
    k->cut = it->cut;
    return 1;
}

/* The Gaussian model of a child (find.h): peak, centroid and the inverse of S. */
static void child_model(db_work *w, db_child *k, int32_t bw)
{
    double s = 0.0, sx = 0.0, sy = 0.0, peak = 0.0;
    for (int32_t q = 0; q < k->count; ++q) {
        const int32_t p = w->pool[k->first + q];
        const double f = w->f[p], x = (double)(p % bw), y = (double)(p / bw);
        s += f;
        sx += f * x;
        sy += f * y;
        if (f > peak)
            peak = f;
    }
    k->peak = peak;
    k->cx = sx / s;
    k->cy = sy / s;
    double mxx = 0.0, mxy = 0.0, myy = 0.0;
    for (int32_t q = 0; q < k->count; ++q) {
        const int32_t p = w->pool[k->first + q];
        const double f = w->f[p], dx = (double)(p % bw) - k->cx, dy = (double)(p / bw) - k->cy;
        mxx += f * dx * dx;
        mxy += f * dx * dy;
        myy += f * dy * dy;
    }
    mxx = mxx / s + 1.0 / 12.0;
    myy = myy / s + 1.0 / 12.0;
    mxy = mxy / s;
    double det = mxx * myy - mxy * mxy;
    if (!(det > 1e-12)) { /* a line of pixels: keep the diagonal */
        mxy = 0.0;
        det = mxx * myy;
    }
    /* the size of a Gaussian with the child's peak that falls to the cut level at the edge of a
     * footprint of this area: area = 2 pi s2 ln(P / cut) */
    double ln = k->cut > 0.0 ? log(peak / k->cut) : 0.0;
    if (!(ln > 0.05))
        ln = 0.05;
    const double s2 = (double)k->count / (2.0 * 3.14159265358979323846 * ln);
    const double scale = s2 / sqrt(det); /* S = scale M, det S = s2^2 */
    const double sxx = scale * mxx, sxy = scale * mxy, syy = scale * myy;
    const double ds = sxx * syy - sxy * sxy;
    k->ia = syy / ds;
    k->ib = -sxy / ds;
    k->ic = sxx / ds;
}

/*
 * One component: its children's moments into w->acc[0 .. *nkids) in order of their first pixel;
 * *nkids = 1 when it does not split (w->acc is then not filled). 0 on out-of-memory.
 */
static int deblend_comp(const sw_find_plan *plan, const sw_image *frame, const int32_t *labels,
                        const sw_find_comp *c, int64_t z, db_work *w, int32_t *nkids)
{
    *nkids = 1;
    const int32_t bw = c->x1 - c->x0, bh = c->y1 - c->y0;
    const int32_t W = plan->width;
    const int32_t root = (int32_t)c->root;
    if (c->npix < 2)
        return 1;
    if (!area_reserve(w, (size_t)bw * (size_t)bh) ||
        !grow((void **)&w->pool, &w->pool_cap, (size_t)c->npix, sizeof(int32_t)))
        return 0;
    double b;
    if (!local_background(plan, frame, labels, c, w, &b))
        return 0;
    /* the component's pixels and their f */
    w->pool_len = 0;
    double tp = -INFINITY, tmin = INFINITY, F = 0.0;
    for (int32_t ly = 0; ly < bh; ++ly)
        for (int32_t lx = 0; lx < bw; ++lx) {
            const int32_t k = ly * bw + lx;
            const int32_t x = c->x0 + lx, y = c->y0 + ly;
            if (labels[(size_t)y * W + x] != root) {
                w->child_of[k] = -2;
                continue;
            }
            w->child_of[k] = -1;
            const double f = px_value(plan, frame, x, y) - b;
            w->f[k] = f;
            w->pool[w->pool_len++] = k;
            if (f > tp)
                tp = f;
            if (f < tmin)
                tmin = f;
            if (f > 0.0)
                F += f;
        }
    const int32_t n = (int32_t)w->pool_len;
    if (!(tp > 0.0) || !(F > 0.0))
        return 1;
    const double t0 = tmin > tp * 1e-4 ? tmin : tp * 1e-4;
    const int32_t N = plan->p.deblend_levels;
    if (!(tp > t0) || N < 2)
        return 1;
    const double lr = log(tp / t0), need = plan->p.deblend_contrast * F;

    /* the tree walk */
    size_t nitems = 0;
    if (!grow((void **)&w->items, &w->items_cap, 1, sizeof(db_item)))
        return 0;
    w->items[nitems++] = (db_item){0, n, 1, t0};
    int32_t nk = 0;
    while (nitems > 0) {
        const db_item it = w->items[--nitems];
        int32_t cur_first = it.first, cur_count = it.count, split = 0;
        for (int32_t i = it.level; i < N && !split; ++i) {
            const double t = t0 * exp(lr * (double)i / (double)N);
            int32_t nb;
            if (!branches(w, cur_first, cur_count, t, bw, bh, &nb))
                return 0;
            int32_t q = 0, last = -1;
            for (int32_t j = 0; j < nb; ++j)
                if (w->br[j].flux > need) {
                    ++q;
                    last = j;
                }
            if (q == 0)
                break;
            if (q == 1) { /* only one branch counts: go on up inside it */
                cur_first = w->br[last].start;
                cur_count = w->br[last].count;
                continue;
            }
            if (!grow((void **)&w->items, &w->items_cap, nitems + (size_t)q, sizeof(db_item)))
                return 0;
            /* pushed in reverse so that they are walked in branch order */
            for (int32_t j = nb - 1; j >= 0; --j)
                if (w->br[j].flux > need)
                    w->items[nitems++] = (db_item){w->br[j].start, w->br[j].count, i + 1, t};
            split = 1;
        }
        if (!split && !add_child(w, &it, &nk))
            return 0;
    }
    if (nk < 2)
        return 1;

    /* the children's footprints and models, then every other pixel to the likeliest child */
    for (int32_t j = 0; j < nk; ++j) {
        db_child *k = &w->kids[j];
        child_model(w, k, bw);
        for (int32_t q = 0; q < k->count; ++q)
            w->child_of[w->pool[k->first + q]] = j;
    }
    for (int32_t q = 0; q < n; ++q) {
        const int32_t p = w->pool[q];
        if (w->child_of[p] != -1)
            continue;
        const double x = (double)(p % bw), y = (double)(p / bw);
        int32_t best = 0;
        double best_l = -INFINITY;
        for (int32_t j = 0; j < nk; ++j) {
            const db_child *k = &w->kids[j];
            const double dx = x - k->cx, dy = y - k->cy;
            const double l =
                log(k->peak) - 0.5 * (k->ia * dx * dx + 2.0 * k->ib * dx * dy + k->ic * dy * dy);
            if (l > best_l) {
                best_l = l;
                best = j;
            }
        }
        w->child_of[p] = best;
    }
    /* the children's moments from the values find reads, pixels in raster order */
    if (!grow((void **)&w->acc, &w->acc_cap, (size_t)nk, sizeof(sw_find_acc)))
        return 0;
    for (int32_t j = 0; j < nk; ++j) {
        sw_find_acc *a = &w->acc[j];
        memset(a, 0, sizeof(*a));
        a->x0 = a->y0 = INT32_MAX;
        a->x1 = a->y1 = INT32_MIN;
        a->first_root = -1;
        a->z0 = z;
        a->z1 = z + 1;
        a->peak_z = z;
        a->first_z = z;
    }
    for (int32_t ly = 0; ly < bh; ++ly)
        for (int32_t lx = 0; lx < bw; ++lx) {
            const int32_t j = w->child_of[ly * bw + lx];
            if (j < 0)
                continue;
            const int32_t x = c->x0 + lx, y = c->y0 + ly;
            int valid;
            const uint32_t v =
                sw_fm_value(sw_image_row(frame, y), x, plan->p.type, plan->overload, &valid);
            sw_find_acc *a = &w->acc[j];
            const double I = (double)v, X = (double)x, Y = (double)y;
            a->s += I;
            a->sx += I * X;
            a->sy += I * Y;
            a->sxx += I * X * X;
            a->syy += I * Y * Y;
            a->sz += I * (double)z;
            a->szz += I * (double)z * (double)z;
            if (a->npix == 0 || v > a->peak) {
                a->peak = v;
                a->peak_x = x;
                a->peak_y = y;
            }
            a->npix++;
            if (x < a->x0)
                a->x0 = x;
            if (x + 1 > a->x1)
                a->x1 = x + 1;
            if (y < a->y0)
                a->y0 = y;
            a->y1 = y + 1;
            if (a->first_root < 0)
                a->first_root = (int64_t)y * W + x;
        }
    /* in order of the first pixel (insertion sort: few children) */
    for (int32_t j = 1; j < nk; ++j) {
        sw_find_acc t = w->acc[j];
        int32_t i = j - 1;
        while (i >= 0 && w->acc[i].first_root > t.first_root) {
            w->acc[i + 1] = w->acc[i];
            --i;
        }
        w->acc[i + 1] = t;
    }
    *nkids = nk;
    return 1;
}

sw_status sw_find_deblend_emit(sw_find_plan *plan, const sw_image *frame, const int32_t *labels,
                               const sw_find_comp *comps, int64_t ncomp, int64_t frame_index,
                               sw_spot_list *spots, sw_find_stats *stats)
{
    sw_find_stats local = {0};
    const int64_t count0 = spots ? spots->count : 0;
    db_work w;
    memset(&w, 0, sizeof(w));
    sw_status st = SW_OK;
    for (int64_t i = 0; i < ncomp && st == SW_OK; ++i) {
        int32_t nk = 1;
        if (!deblend_comp(plan, frame, labels, &comps[i], frame_index, &w, &nk)) {
            st = w.too_big ? sw_fail(plan->ctx, SW_ERANGE,
                                     "find: deblending spot %lld of frame %lld needs more than "
                                     "2^31 pixel entries (fewer --deblend-levels)",
                                     (long long)i, (long long)frame_index)
                           : sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory while deblending");
            break;
        }
        if (nk < 2) {
            sw_spot s;
            sw_find_comp_to_spot(plan, &comps[i], frame_index, &s);
            if (!sw_find_spot_filter(plan, &s, &local))
                continue;
            local.spots++;
            if (spots)
                st = sw_find_spot_append(plan->ctx, spots, &s);
            continue;
        }
        local.blends++;
        local.children += nk;
        int64_t parent = 0;
        for (int32_t j = 0; j < nk && st == SW_OK; ++j) {
            sw_spot s;
            sw_find_acc_to_spot(&w.acc[j], 0, &s);
            if (!sw_find_spot_filter(plan, &s, &local))
                continue;
            local.spots++;
            if (!spots)
                continue;
            if (parent == 0)
                parent = spots->count + 1;
            s.parent = parent;
            st = sw_find_spot_append(plan->ctx, spots, &s);
        }
    }
    work_free(&w);
    if (st != SW_OK) {
        if (spots)
            spots->count = count0;
        return st;
    }
    local.components = ncomp;
    sw_find_stats_add(stats, &local);
    return SW_OK;
}
