/*
 * find: connected components of the strong pixels, their moments and the 3-D links between
 * consecutive frames, on the CPU (find_internal.h; the GPU twin is find_label_cuda.cu).
 *
 * Labelling: the connected component labelling that seed 003's kernel_filter output is kept "for
 * later use in" (the seed leaves it out; DIALS labels with a union-find as well), here a union-find
 * in three phases so that OpenMP can share the work without changing the answer:
 *   1. The frame is cut into strips of LAB_STRIP rows (a constant: the result, including the
 *      rounding of the sums, never depends on the number of threads). Each strip is labelled on
 *      its own by a raster scan that links every strong pixel to its already-visited strong
 *      neighbours (left, up; for 8-connectivity also up-left and up-right): the pixel copies one
 *      neighbour's parent, and the other neighbours are joined by union by smaller index with
 *      path halving, so the root of a set is its smallest linear index. A second raster pass
 *      points every pixel at its root (its parent always has a smaller index, hence is resolved
 *      already). These "local roots" get an entry in the parent array P. (The scans skip
 *      background 8 bytes of the strong mask at a time.)
 *   2. Serially, the pairs of strong pixels that touch across a strip border are joined in P
 *      (union by smaller index again, so the root of every set of local components is the
 *      component's smallest linear index). Every local component that takes part in such a join
 *      is "crossing" and gets a slot for partial moments.
 *   3. In parallel per strip, every pixel's label becomes its component's root (find in P, which
 *      is only read now), component ids are given in order of increasing root (a prefix over the
 *      strips of the number of roots in each), and the moments are summed in raster order: a
 *      component that lies inside one strip straight into its table entry, a crossing one into
 *      the partial slot of its part in that strip. The partials are then added into the table in
 *      slot order (fixed by phase 2). So every sum is taken in one fixed order.
 *
 * Union steps use the decision tree of Wu, Otoo & Suzuki (2009): of the visited neighbours that
 * are adjacent to each other, one link suffices (they were joined when the later one was visited):
 *   4-connectivity: parent = up, else left; join up and left only when up-left is not strong;
 *   8-connectivity: parent = up-left, else up, else left (pairwise adjacent); join up-right only
 *                   when up is not strong (otherwise up-right was joined to up, its left).
 *
 * Moments (find_internal.h sw_find_comp): I = sw_fm_value (find_model.h), dx = x - root_x,
 * dy = y - root_y; sums of I, I dx, I dy, (I dx) dx, (I dy) dy in double.
 *
 * Links: every pixel labelled in both frames gives the pair (prev root, cur root). A pixel whose
 * left or upper neighbour gives the same pair is skipped: the pixel with the smallest index of
 * each distinct pair has no such neighbour (both have smaller indices), so every pair is kept at
 * least once, and each row yields at most one pair per run of pixels labelled in both frames
 * (horizontal neighbours share both roots): at most ceil(width / 2) per row. The candidates are
 * sorted and made unique.
 */
#include "find/find_internal.h"
#include "find/find_model.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Rows per strip (phase 1). A constant so that results do not depend on the thread count. */
#define LAB_STRIP 64

/* The partial moments of one crossing local component (one strip's part of a component). */
typedef struct lab_part {
    int32_t root; /* the component's root (set in phase 3)                       */
    int32_t id;   /* the component's table index, when root is this part's own root */
    double s, sx, sy, sxx, syy;
    int64_t npix;
    int32_t x0, x1, y0, y1;
    uint32_t peak;
    int32_t peak_idx; /* linear index of the first pixel with the peak value (raster order) */
} lab_part;

typedef struct lab_cpu {
    int32_t strip_rows, nstrips;
    int32_t *parent; /* npix: P (phase 2), meaningful at local roots                       */
    int32_t *slot;   /* npix: at local roots, -1 not crossing / table id after phase 3 (>= 0),
                        <= -2 crossing, partial slot -(slot + 2)                              */
    uint64_t *keys;  /* the links' candidates: the same memory as parent and slot (npix x 8 B) */
    int64_t *roots;  /* per strip: roots of components in it (phase 1, 2), then first id    */
    int64_t *nkeys;  /* per strip: link candidates                                         */
    lab_part *part;  /* partial slots                                                      */
    int64_t part_cap;
} lab_cpu;

static int lab_threads(const sw_find_plan *plan)
{
    int t = sw_context_threads(plan->ctx);
    return t > 0 ? t : 1;
}

sw_status sw_find_label_cpu_init(sw_find_plan *plan)
{
    const int64_t n = plan->npix;
    if (n <= 0 || n > SW_IMAGE_MAX_PIXELS)
        return sw_fail(plan->ctx, SW_EINVAL, "find: %lld pixels cannot be labelled", (long long)n);
    lab_cpu *L = calloc(1, sizeof(*L));
    if (!L)
        return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory for labelling");
    plan->lab_cpu = L;
    L->strip_rows = LAB_STRIP;
    L->nstrips = (plan->height + LAB_STRIP - 1) / LAB_STRIP;
    /* parent and slot side by side, so that the links can use the block as npix 64-bit keys
     * (candidates <= height * ceil(width / 2) <= npix) */
    L->parent = malloc((size_t)n * 2 * sizeof(int32_t));
    L->roots = calloc((size_t)L->nstrips, sizeof(int64_t));
    L->nkeys = calloc((size_t)L->nstrips, sizeof(int64_t));
    /* crossing local components: at most ceil(width / 2) per side of each border (a row holds at
     * most that many runs of strong pixels, and a run lies in one local component) */
    L->part_cap = (int64_t)(L->nstrips - 1) * 2 * (((int64_t)plan->width + 1) / 2);
    L->part = malloc((size_t)(L->part_cap > 0 ? L->part_cap : 1) * sizeof(lab_part));
    if (!L->parent || !L->roots || !L->nkeys || !L->part) {
        sw_find_label_cpu_free(plan);
        return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory for labelling (%lld pixels)",
                       (long long)n);
    }
    L->slot = L->parent + n;
    L->keys = (uint64_t *)(void *)L->parent;
    return SW_OK;
}

void sw_find_label_cpu_free(sw_find_plan *plan)
{
    lab_cpu *L = plan->lab_cpu;
    if (!L)
        return;
    free(L->parent);
    free(L->roots);
    free(L->nkeys);
    free(L->part);
    free(L);
    plan->lab_cpu = NULL;
}

/* ---------------------------------------------------------------- union-find */

/* Root of a with path halving (every node's parent has a smaller index than the node). */
static inline int32_t uf_find(int32_t *p, int32_t a)
{
    while (p[a] != a) {
        p[a] = p[p[a]];
        a = p[a];
    }
    return a;
}

/* Root of a without writing (phase 3 reads P from many threads). */
static inline int32_t uf_find_ro(const int32_t *p, int32_t a)
{
    while (p[a] != a)
        a = p[a];
    return a;
}

/* Joins the sets of a and b; the smaller root becomes the root. Returns the root that stopped
 * being one, or -1 when a and b were in the same set already. */
static inline int32_t uf_union(int32_t *p, int32_t a, int32_t b)
{
    a = uf_find(p, a);
    b = uf_find(p, b);
    if (a == b)
        return -1;
    if (a < b) {
        p[b] = a;
        return b;
    }
    p[a] = b;
    return a;
}

/* ---------------------------------------------------------------- phase 1 */
/* The first strong pixel of row s in [x, w), or w: zero bytes are skipped 8 at a time (most of
 * a frame is background). */
static inline int32_t next_strong(const uint8_t *s, int32_t x, int32_t w)
{
    while (x + 8 <= w) {
        uint64_t v;
        memcpy(&v, s + x, sizeof(v));
        if (v)
            break;
        x += 8;
    }
    while (x < w && !s[x])
        ++x;
    return x;
}

/* Labels rows [y0, y1) on their own: labels[i] = the local root (smallest index of the pixel's
 * component within the strip), -1 for pixels that are not strong. Local roots get P[r] = r and
 * slot[r] = -1. Returns the number of local roots. */
static int64_t label_strip(const uint8_t *strong, int32_t *labels, int32_t *P, int32_t *slot,
                           int32_t w, int32_t y0, int32_t y1, int conn8)
{
    for (int32_t y = y0; y < y1; ++y) {
        const int32_t row = (int32_t)((int64_t)y * w);
        const int up_ok = y > y0;
        memset(labels + row, 0xff, (size_t)w * sizeof(int32_t)); /* -1 */
        for (int32_t x = next_strong(strong + row, 0, w); x < w;
             x = next_strong(strong + row, x + 1, w)) {
            const int32_t i = row + x;
            const int l = x > 0 && strong[i - 1];
            const int u = up_ok && strong[i - w];
            const int ul = up_ok && x > 0 && strong[i - w - 1];
            /* the pixel takes the label (parent) of one visited neighbour: an ancestor of that
             * neighbour, so its index is smaller than i and chains stay short */
            int32_t n = -1;
            if (conn8) {
                const int ur = up_ok && x + 1 < w && strong[i - w + 1];
                if (ul)
                    n = i - w - 1;
                else if (u)
                    n = i - w;
                else if (l)
                    n = i - 1;
                if (ur && !u) {
                    if (n < 0)
                        n = i - w + 1;
                    else
                        uf_union(labels, n, i - w + 1);
                }
            } else {
                if (u)
                    n = i - w;
                else if (l)
                    n = i - 1;
                if (u && l && !ul)
                    uf_union(labels, i - w, i - 1);
            }
            labels[i] = n < 0 ? i : labels[n];
        }
    }
    /* every parent has a smaller index: one raster pass resolves all labels */
    int64_t nroots = 0;
    for (int32_t y = y0; y < y1; ++y) {
        const int32_t row = (int32_t)((int64_t)y * w);
        for (int32_t x = next_strong(strong + row, 0, w); x < w;
             x = next_strong(strong + row, x + 1, w)) {
            const int32_t i = row + x, p = labels[i];
            if (p == i) {
                P[i] = i;
                slot[i] = -1;
                ++nroots;
            } else {
                labels[i] = labels[p];
            }
        }
    }
    return nroots;
}

/* ---------------------------------------------------------------- phase 3 */

static inline void part_empty(lab_part *q)
{
    q->s = q->sx = q->sy = q->sxx = q->syy = 0.0;
    q->npix = 0;
    q->x0 = q->y0 = INT32_MAX;
    q->x1 = q->y1 = INT32_MIN;
    q->peak = 0;
    q->peak_idx = -1;
}

static inline void comp_empty(sw_find_comp *c, int32_t root)
{
    memset(c, 0, sizeof(*c));
    c->root = root;
    c->x0 = c->y0 = INT32_MAX;
    c->x1 = c->y1 = INT32_MIN;
    c->peak_x = c->peak_y = -1;
}

/* Phase 3 for rows [y0, y1): final labels, ids from `id`, moments. */
static void finish_strip(const sw_find_plan *plan, const uint8_t *strong, const sw_image *frame,
                         int32_t *labels, const int32_t *P, int32_t *slot, lab_part *part,
                         sw_find_comp *comps, int64_t id, int32_t y0, int32_t y1)
{
    const int32_t w = plan->width;
    const sw_pixel_type t = plan->p.type;
    const double overload = plan->overload;
    int32_t last = -1, rx = 0, ry = 0;
    for (int32_t y = y0; y < y1; ++y) {
        const void *row = sw_image_row(frame, y);
        const int32_t base = (int32_t)((int64_t)y * w);
        for (int32_t x = next_strong(strong + base, 0, w); x < w;
             x = next_strong(strong + base, x + 1, w)) {
            const int32_t i = base + x;
            const int32_t r = labels[i];
            if (r == i) { /* the first pixel of its local component */
                if (slot[r] == -1) {
                    slot[r] = (int32_t)id;
                    comp_empty(&comps[id], r);
                    ++id;
                } else {
                    lab_part *q = &part[-slot[r] - 2];
                    part_empty(q);
                    q->root = uf_find_ro(P, r);
                    q->id = -1;
                    if (q->root == r) {
                        q->id = (int32_t)id;
                        comp_empty(&comps[id], r);
                        ++id;
                    }
                }
            }
            const int32_t sl = slot[r];
            int valid;
            const uint32_t v = sw_fm_value(row, x, t, overload, &valid);
            if (sl >= 0) {
                sw_find_comp *c = &comps[sl];
                if (r != last) {
                    last = r;
                    rx = r % w;
                    ry = r / w;
                }
                const double I = (double)v, dx = (double)(x - rx), dy = (double)(y - ry);
                const double ix = I * dx, iy = I * dy;
                c->sum_i += I;
                c->sum_ix += ix;
                c->sum_iy += iy;
                c->sum_ixx += ix * dx;
                c->sum_iyy += iy * dy;
                c->npix++;
                if (x < c->x0)
                    c->x0 = x;
                if (x + 1 > c->x1)
                    c->x1 = x + 1;
                if (y < c->y0)
                    c->y0 = y;
                c->y1 = y + 1; /* raster order: y never decreases */
                if (v > c->peak || c->peak_x < 0) {
                    c->peak = v;
                    c->peak_x = x;
                    c->peak_y = y;
                }
            } else {
                lab_part *q = &part[-sl - 2];
                const int32_t g = q->root;
                if (g != last) {
                    last = g;
                    rx = g % w;
                    ry = g / w;
                }
                const double I = (double)v, dx = (double)(x - rx), dy = (double)(y - ry);
                const double ix = I * dx, iy = I * dy;
                q->s += I;
                q->sx += ix;
                q->sy += iy;
                q->sxx += ix * dx;
                q->syy += iy * dy;
                q->npix++;
                if (x < q->x0)
                    q->x0 = x;
                if (x + 1 > q->x1)
                    q->x1 = x + 1;
                if (y < q->y0)
                    q->y0 = y;
                q->y1 = y + 1;
                if (v > q->peak || q->peak_idx < 0) {
                    q->peak = v;
                    q->peak_idx = i;
                }
                labels[i] = g;
            }
        }
    }
}

/* Adds a partial into its component's entry (phase 3, serial, in slot order). */
static void merge_part(sw_find_comp *c, const lab_part *q, int32_t w)
{
    c->sum_i += q->s;
    c->sum_ix += q->sx;
    c->sum_iy += q->sy;
    c->sum_ixx += q->sxx;
    c->sum_iyy += q->syy;
    const int first = c->npix == 0;
    c->npix += q->npix;
    if (q->x0 < c->x0)
        c->x0 = q->x0;
    if (q->x1 > c->x1)
        c->x1 = q->x1;
    if (q->y0 < c->y0)
        c->y0 = q->y0;
    if (q->y1 > c->y1)
        c->y1 = q->y1;
    const int64_t cur = (int64_t)c->peak_y * w + c->peak_x;
    if (first || q->peak > c->peak || (q->peak == c->peak && q->peak_idx < cur)) {
        c->peak = q->peak;
        c->peak_x = q->peak_idx % w;
        c->peak_y = q->peak_idx / w;
    }
}

sw_status sw_find_label_cpu(sw_find_plan *plan, const uint8_t *strong, const sw_image *frame,
                            int32_t *labels, sw_find_comp *comps, int64_t capacity, int64_t *ncomp)
{
    lab_cpu *L = plan ? plan->lab_cpu : NULL;
    if (!L || !strong || !frame || !labels || !ncomp || (capacity > 0 && !comps))
        return sw_fail(plan ? plan->ctx : NULL, SW_EINVAL, "find: labelling: NULL argument");
    if (frame->width != plan->width || frame->height != plan->height ||
        frame->type != plan->p.type || frame->memory == SW_MEM_DEVICE || !frame->data)
        return sw_fail(plan->ctx, SW_EINVAL, "find: labelling needs a host %s frame of %d x %d",
                       sw_pixel_type_string(plan->p.type), plan->width, plan->height);
    *ncomp = 0;
    const int32_t w = plan->width, h = plan->height, S = L->strip_rows, ns = L->nstrips;
    const int conn8 = plan->p.connectivity == 8;
    int32_t *P = L->parent, *slot = L->slot;
    const int nt = lab_threads(plan);

    /* phase 1: strips on their own */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int32_t s = 0; s < ns; ++s) {
        const int32_t y0 = s * S, y1 = y0 + S < h ? y0 + S : h;
        L->roots[s] = label_strip(strong, labels, P, slot, w, y0, y1, conn8);
    }

    /* phase 2: joins across strip borders (serial; union by smaller index in P) */
    int64_t nparts = 0;
    for (int32_t s = 1; s < ns; ++s) {
        const int32_t y = s * S;
        const int64_t row = (int64_t)y * w;
        for (int32_t x = 0; x < w; ++x) {
            const int32_t i = (int32_t)(row + x);
            const int32_t ra = labels[i];
            if (ra < 0)
                continue;
            for (int32_t dxn = conn8 ? -1 : 0; dxn <= (conn8 ? 1 : 0); ++dxn) {
                const int32_t xn = x + dxn;
                if (xn < 0 || xn >= w)
                    continue;
                const int32_t rb = labels[i - w + dxn];
                if (rb < 0)
                    continue;
                /* both local components cross: give each a partial slot once */
                const int32_t mark[2] = {ra, rb};
                for (int k = 0; k < 2; ++k) {
                    if (slot[mark[k]] == -1) {
                        if (nparts >= L->part_cap)
                            return sw_fail(plan->ctx, SW_EINTERNAL,
                                           "find: labelling: more crossing components than the "
                                           "bound %lld (a bug)",
                                           (long long)L->part_cap);
                        slot[mark[k]] = (int32_t)(-(nparts + 2));
                        ++nparts;
                    }
                }
                const int32_t gone = uf_union(P, ra, rb);
                if (gone >= 0)
                    L->roots[gone / w / S]--;
            }
        }
    }

    /* ids: components in root order, strip by strip */
    int64_t total = 0;
    for (int32_t s = 0; s < ns; ++s) {
        const int64_t c = L->roots[s];
        L->roots[s] = total;
        total += c;
    }
    if (total > capacity) {
        /* leave meaningful labels all the same */
        const int64_t n = plan->npix;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t i = 0; i < n; ++i)
            if (labels[i] >= 0)
                labels[i] = uf_find_ro(P, labels[i]);
        return sw_fail(plan->ctx, SW_ERANGE,
                       "find: the frame has %lld connected components, more than the %lld the "
                       "component table holds (raise max_components, or check the threshold "
                       "parameters)",
                       (long long)total, (long long)capacity);
    }

    /* phase 3: final labels and moments, strips in parallel */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int32_t s = 0; s < ns; ++s) {
        const int32_t y0 = s * S, y1 = y0 + S < h ? y0 + S : h;
        finish_strip(plan, strong, frame, labels, P, slot, L->part, comps, L->roots[s], y0, y1);
    }
    /* the partials of crossing components, in slot order */
    for (int64_t k = 0; k < nparts; ++k) {
        const lab_part *q = &L->part[k];
        const int32_t g = q->root;
        const int32_t id = L->part[-slot[g] - 2].id;
        merge_part(&comps[id], q, w);
    }
    *ncomp = total;
    return SW_OK;
}

/* ---------------------------------------------------------------- links */

static int key_cmp(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

sw_status sw_find_links_cpu(sw_find_plan *plan, const int32_t *labels_prev,
                            const int32_t *labels_cur, int32_t *pairs, int64_t capacity,
                            int64_t *npairs)
{
    lab_cpu *L = plan ? plan->lab_cpu : NULL;
    if (!L || !labels_prev || !labels_cur || !npairs || (capacity > 0 && !pairs))
        return sw_fail(plan ? plan->ctx : NULL, SW_EINVAL, "find: links: NULL argument");
    *npairs = 0;
    const int32_t w = plan->width, h = plan->height, S = L->strip_rows, ns = L->nstrips;
    const int64_t per_row = ((int64_t)w + 1) / 2;
    uint64_t *keys = L->keys;

    /* candidates, each strip into its own region (at most per_row a row) */
#pragma omp parallel for schedule(dynamic, 1) num_threads(lab_threads(plan))
    for (int32_t s = 0; s < ns; ++s) {
        const int32_t y0 = s * S, y1 = y0 + S < h ? y0 + S : h;
        uint64_t *out = keys + (int64_t)y0 * per_row;
        int64_t m = 0;
        for (int32_t y = y0; y < y1; ++y) {
            const int64_t row = (int64_t)y * w;
            for (int32_t x = 0; x < w; ++x) {
                const int64_t i = row + x;
                const int32_t a = labels_prev[i], b = labels_cur[i];
                if (a < 0 || b < 0)
                    continue;
                if (x > 0 && labels_prev[i - 1] == a && labels_cur[i - 1] == b)
                    continue;
                if (y > 0 && labels_prev[i - w] == a && labels_cur[i - w] == b)
                    continue;
                out[m++] = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
            }
        }
        L->nkeys[s] = m;
    }
    int64_t m = 0;
    for (int32_t s = 0; s < ns; ++s) {
        const int64_t from = (int64_t)s * S * per_row;
        if (from != m && L->nkeys[s] > 0)
            memmove(keys + m, keys + from, (size_t)L->nkeys[s] * sizeof(uint64_t));
        m += L->nkeys[s];
    }
    if (m > 1)
        qsort(keys, (size_t)m, sizeof(uint64_t), key_cmp);
    int64_t u = 0;
    for (int64_t k = 0; k < m; ++k)
        if (u == 0 || keys[k] != keys[u - 1])
            keys[u++] = keys[k];
    if (u > capacity)
        return sw_fail(plan->ctx, SW_ERANGE,
                       "find: %lld links between consecutive frames, more than the %lld the link "
                       "table holds (raise max_components)",
                       (long long)u, (long long)capacity);
    for (int64_t k = 0; k < u; ++k) {
        pairs[2 * k] = (int32_t)(keys[k] >> 32);
        pairs[2 * k + 1] = (int32_t)(uint32_t)keys[k];
    }
    *npairs = u;
    return SW_OK;
}
