/*
 * Position refinement (refine.h): parameters, the plan, the CPU path (one spot per OpenMP
 * iteration, refine_spot.h with one worker), the MESH background map, CCD mode, and the hook
 * that lets a find plan refine every frame's spots.
 */
#include "find/refine_internal.h"
#include "find/find_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* refine_spot.h with one worker: the loops run over every pixel, the sums are the values. */
static inline int32_t sw_rs_slot_one(int ok, int32_t *n)
{
    const int32_t slot = *n;
    *n += ok != 0;
    return slot;
}
#define SW_RS_FN          static inline
#define SW_RS_LANE        0
#define SW_RS_LANES       1
#define SW_RS_SUM(p, n)   ((void)(p), (void)(n))
#define SW_RS_MAX(p)      ((void)(p))
#define SW_RS_UMIN(p)     ((void)(p))
#define SW_RS_UMAX(p)     ((void)(p))
#define SW_RS_USUM(p)     ((void)(p))
#define SW_RS_USCAN(p)    (*(p) = 0u)
#define SW_RS_UINC(p)     (++*(p))
#define SW_RS_SLOT(ok, n) sw_rs_slot_one((ok), (n))
#define SW_RS_ADD(p, v)   (*(p) += (v))
#define SW_RS_SYNC()      ((void)0)
#include "find/refine_spot.h"

/* ---------------------------------------------------------------- parameters */

void sw_refine_params_default(sw_refine_params *p, int32_t width, int32_t height, sw_pixel_type t)
{
    memset(p, 0, sizeof(*p));
    p->width = width;
    p->height = height;
    p->type = t;
    p->method = SW_REFINE_GAUSS;
    p->background = SW_BACKGROUND_NONE;
    p->gain = 1.0;
    p->read_noise = 0.0;
    p->bias = 0.0;
    p->radius = 0;
    p->mesh_size = 64;
    p->mesh_filter = 3;
    p->clip_sigma = 3.0;
    p->max_iter = 50;
}

const char *sw_refine_method_string(sw_refine_method m)
{
    switch (m) {
    case SW_REFINE_NONE: return "none";
    case SW_REFINE_XWIN: return "xwin";
    case SW_REFINE_GAUSS: return "gauss";
    case SW_REFINE_MOFFAT: return "moffat";
    }
    return "?";
}

sw_status sw_refine_method_parse(const char *text, sw_refine_method *out)
{
    static const sw_refine_method all[] = {SW_REFINE_NONE, SW_REFINE_XWIN, SW_REFINE_GAUSS,
                                           SW_REFINE_MOFFAT};
    for (size_t i = 0; text && out && i < sizeof(all) / sizeof(all[0]); ++i)
        if (strcmp(text, sw_refine_method_string(all[i])) == 0) {
            *out = all[i];
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL, "refine: unknown method \"%s\" (none, xwin, gauss or moffat)",
                   text ? text : "(null)");
}

const char *sw_refine_background_string(sw_refine_background b)
{
    switch (b) {
    case SW_BACKGROUND_NONE: return "none";
    case SW_BACKGROUND_ANNULUS: return "annulus";
    case SW_BACKGROUND_MESH: return "mesh";
    }
    return "?";
}

sw_status sw_refine_background_parse(const char *text, sw_refine_background *out)
{
    static const sw_refine_background all[] = {SW_BACKGROUND_NONE, SW_BACKGROUND_ANNULUS,
                                               SW_BACKGROUND_MESH};
    for (size_t i = 0; text && out && i < sizeof(all) / sizeof(all[0]); ++i)
        if (strcmp(text, sw_refine_background_string(all[i])) == 0) {
            *out = all[i];
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL, "refine: unknown background \"%s\" (none, annulus or mesh)",
                   text ? text : "(null)");
}

static sw_status check_params(sw_context *ctx, const sw_refine_params *p)
{
    if (p->width <= 0 || p->height <= 0 || p->width > SW_IMAGE_MAX_DIM ||
        p->height > SW_IMAGE_MAX_DIM || (int64_t)p->width * p->height > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL, "refine: frame size %d x %d is not valid", p->width,
                       p->height);
    if (p->type != SW_PIX_U8 && p->type != SW_PIX_U16 && p->type != SW_PIX_U32 &&
        p->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "refine: pixel type %d is not supported", (int)p->type);
    if (p->method != SW_REFINE_NONE && p->method != SW_REFINE_XWIN &&
        p->method != SW_REFINE_GAUSS && p->method != SW_REFINE_MOFFAT)
        return sw_fail(ctx, SW_EINVAL, "refine: unknown method %d", (int)p->method);
    if (p->background != SW_BACKGROUND_NONE && p->background != SW_BACKGROUND_ANNULUS &&
        p->background != SW_BACKGROUND_MESH)
        return sw_fail(ctx, SW_EINVAL, "refine: unknown background %d", (int)p->background);
    if (!(p->gain > 0.0) || !isfinite(p->gain))
        return sw_fail(ctx, SW_EINVAL, "refine: gain %g e-/ADU must be finite and > 0", p->gain);
    if (!(p->read_noise >= 0.0) || !isfinite(p->read_noise))
        return sw_fail(ctx, SW_EINVAL, "refine: read noise %g e- must be finite and >= 0",
                       p->read_noise);
    if (!isfinite(p->bias))
        return sw_fail(ctx, SW_EINVAL, "refine: bias %g ADU must be finite", p->bias);
    if (p->radius != 0 && (p->radius < 2 || p->radius > SW_REFINE_MAX_RADIUS))
        return sw_fail(ctx, SW_EINVAL, "refine: stamp radius %d must be 0 (automatic) or 2 .. %d",
                       p->radius, SW_REFINE_MAX_RADIUS);
    if (p->annulus_in < 0 || p->annulus_out < 0 ||
        (p->annulus_out > 0 && p->annulus_out <= p->annulus_in) || p->annulus_out > 1000)
        return sw_fail(ctx, SW_EINVAL,
                       "refine: annulus radii %d .. %d must be 0 (automatic) or 0 <= in < out "
                       "<= 1000",
                       p->annulus_in, p->annulus_out);
    if (p->mesh_size < 4 || p->mesh_size > 4096)
        return sw_fail(ctx, SW_EINVAL, "refine: mesh box %d px must be 4 .. 4096", p->mesh_size);
    if (p->mesh_filter < 1 || p->mesh_filter > 15 || p->mesh_filter % 2 == 0)
        return sw_fail(ctx, SW_EINVAL, "refine: mesh filter %d must be odd, 1 .. 15",
                       p->mesh_filter);
    if (!(p->clip_sigma >= 1.0) || !isfinite(p->clip_sigma))
        return sw_fail(ctx, SW_EINVAL, "refine: clip sigma %g must be finite and >= 1",
                       p->clip_sigma);
    if (p->max_iter < 1 || p->max_iter > 1000)
        return sw_fail(ctx, SW_EINVAL, "refine: max_iter %d must be 1 .. 1000", p->max_iter);
    if (isnan(p->overload) || p->overload < 0.0)
        return sw_fail(ctx, SW_EINVAL, "refine: overload %g must be >= 0 (0 = none)", p->overload);
    return SW_OK;
}

/* ---------------------------------------------------------------- the plan */

void sw_refine_destroy(sw_refine_plan *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        sw_refine_gpu_destroy(plan);
#endif
    free(plan->mask);
    free(plan->mesh);
    free(plan->frame_host);
    sw_host_free(plan->seeds, plan->pinned);
    sw_host_free(plan->results, plan->pinned);
    sw_host_free(plan->packed, plan->pinned);
    free(plan);
}

sw_status sw_refine_create(sw_context *ctx, const sw_refine_params *p, sw_refine_plan **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "refine: out is NULL");
    *out = NULL;
    if (!ctx || !p)
        return sw_fail(ctx, SW_EINVAL, "refine: context or parameters are NULL");
    SW_TRY(check_params(ctx, p));
    sw_refine_plan *plan = calloc(1, sizeof(*plan));
    if (!plan)
        return sw_fail(ctx, SW_ENOMEM, "refine: out of memory");
    plan->ctx = ctx;
    plan->p = *p;
    plan->overload = p->overload > 0.0 ? p->overload : INFINITY;
    plan->beta = SW_REFINE_MOFFAT_BETA;
    size_t n = (size_t)p->width * (size_t)p->height;
    if (p->mask) {
        plan->mask = malloc(n);
        if (!plan->mask)
            goto nomem;
        for (size_t i = 0; i < n; ++i)
            plan->mask[i] = p->mask[i] != 0;
    }
    plan->p.mask = plan->mask;
    plan->mesh_nx = (p->width + p->mesh_size - 1) / p->mesh_size;
    plan->mesh_ny = (p->height + p->mesh_size - 1) / p->mesh_size;
    if (p->background == SW_BACKGROUND_MESH) {
        plan->mesh = malloc((size_t)plan->mesh_nx * (size_t)plan->mesh_ny * sizeof(float));
        if (!plan->mesh)
            goto nomem;
    }
    plan->pinned = sw_context_backend(ctx) == SW_BACKEND_CUDA;
#ifdef SW_HAVE_CUDA
    if (plan->pinned) {
        sw_status st = sw_refine_gpu_create(plan);
        if (st != SW_OK) {
            sw_refine_destroy(plan);
            return st;
        }
    }
#endif
    *out = plan;
    return SW_OK;
nomem:
    sw_refine_destroy(plan);
    return sw_fail(ctx, SW_ENOMEM, "refine: out of memory for a %d x %d frame", p->width,
                   p->height);
}

sw_status sw_refine_set_moffat_beta(sw_refine_plan *plan, double beta)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "refine: plan is NULL");
    if (!(beta > 1.0) || !(beta <= 100.0))
        return sw_fail(plan->ctx, SW_EINVAL, "refine: Moffat beta %g must be > 1 and <= 100", beta);
    plan->beta = beta;
    return SW_OK;
}

/* Room for n seeds and results on the host (and the device: refine_cuda.cu grows its own). */
static sw_status reserve(sw_refine_plan *plan, int64_t n)
{
    if (n <= plan->capacity)
        return SW_OK;
    int64_t cap = plan->capacity ? plan->capacity : 1024;
    while (cap < n)
        cap *= 2;
    sw_refine_seed *s = sw_host_alloc(plan->ctx, (size_t)cap * sizeof(*s), plan->pinned);
    sw_refine_result *r = sw_host_alloc(plan->ctx, (size_t)cap * sizeof(*r), plan->pinned);
    /* the GPU's packed write-back (refine_internal.h) */
    sw_refine_packed *k =
        plan->pinned ? sw_host_alloc(plan->ctx, (size_t)cap * sizeof(*k), plan->pinned) : NULL;
    if (!s || !r || (plan->pinned && !k)) {
        sw_host_free(s, plan->pinned);
        sw_host_free(r, plan->pinned);
        sw_host_free(k, plan->pinned);
        return sw_fail(plan->ctx, SW_ENOMEM, "refine: out of memory for %lld spots",
                       (long long)cap);
    }
    sw_host_free(plan->seeds, plan->pinned);
    sw_host_free(plan->results, plan->pinned);
    sw_host_free(plan->packed, plan->pinned);
    plan->seeds = s;
    plan->results = r;
    plan->packed = k;
    plan->capacity = cap;
    return SW_OK;
}

/* ---------------------------------------------------------------- the MESH */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0 .. n) (sorts v): the lower middle value for even n. */
static double median_sorting(double *v, int64_t n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[(n - 1) / 2];
}

/*
 * Sigma clipping about the median (refine.h, MESH): keeps the values within clip sd of the
 * median until none is dropped (at most 10 passes). v is reordered; *kept receives how many
 * remain at the front. mean, median and sd of the kept values. 0 when fewer than 3 are given.
 */
static int clip_stats(double *v, int64_t n, double clip, int64_t *kept, double *mean,
                      double *median, double *sd)
{
    if (n < 3)
        return 0;
    for (int pass = 0; pass < 10; ++pass) {
        double s = 0.0, s2 = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            s += v[i];
            s2 += v[i] * v[i];
        }
        *mean = s / (double)n;
        double var = s2 / (double)n - *mean * *mean;
        *sd = var > 0.0 ? sqrt(var) : 0.0;
        *median = median_sorting(v, n);
        const double lo = *median - clip * *sd, hi = *median + clip * *sd;
        int64_t m = 0;
        for (int64_t i = 0; i < n; ++i)
            if (v[i] >= lo && v[i] <= hi)
                v[m++] = v[i];
        if (m == n || m < 3)
            break;
        n = m;
    }
    *kept = n;
    return 1;
}

sw_status sw_refine_mesh_compute(sw_refine_plan *plan, const sw_image *frame)
{
    const sw_refine_params *p = &plan->p;
    const int32_t box = p->mesh_size, nx = plan->mesh_nx, ny = plan->mesh_ny;
    const int64_t ncell = (int64_t)nx * ny;
    float *raw = malloc((size_t)ncell * sizeof(float));
    uint8_t *ok = malloc((size_t)ncell);
    if (!raw || !ok) {
        free(raw);
        free(ok);
        return sw_fail(plan->ctx, SW_ENOMEM, "refine: out of memory for the background mesh");
    }
    sw_rm_frame f;
    memset(&f, 0, sizeof(f));
    f.data = frame->data;
    f.stride = frame->stride;
    f.type = frame->type;
    f.width = frame->width;
    f.height = frame->height;
    f.mask = plan->mask;
    f.overload = plan->overload;
    int failed = 0;
#pragma omp parallel num_threads(sw_context_threads(plan->ctx))
    {
        double *buf = malloc((size_t)box * (size_t)box * sizeof(double));
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic)
        for (int64_t c = 0; c < ncell; ++c) {
            ok[c] = 0;
            raw[c] = 0.0f;
            if (!buf)
                continue;
            const int32_t cx = (int32_t)(c % nx), cy = (int32_t)(c / nx);
            const int32_t x0 = cx * box, y0 = cy * box;
            const int32_t x1 = x0 + box < f.width ? x0 + box : f.width;
            const int32_t y1 = y0 + box < f.height ? y0 + box : f.height;
            int64_t n = 0;
            for (int32_t y = y0; y < y1; ++y)
                for (int32_t x = x0; x < x1; ++x) {
                    double v;
                    if (sw_rm_raw(&f, x, y, &v))
                        buf[n++] = v - p->bias;
                }
            /* a box with under half its pixels valid says nothing (SExtractor: BACK_FRACTION) */
            if (2 * n < (int64_t)(x1 - x0) * (y1 - y0))
                continue;
            int64_t kept;
            double mean, med, sd;
            if (!clip_stats(buf, n, p->clip_sigma, &kept, &mean, &med, &sd))
                continue;
            double level = (sd > 0.0 && (mean - med) / sd >= 0.3) ? med : 2.5 * med - 1.5 * mean;
            raw[c] = (float)level;
            ok[c] = 1;
        }
        free(buf);
    }
    if (failed) {
        free(raw);
        free(ok);
        return sw_fail(plan->ctx, SW_ENOMEM, "refine: out of memory for the background mesh");
    }
    /* boxes without a level take the mean of those with one */
    double s = 0.0;
    int64_t m = 0;
    for (int64_t c = 0; c < ncell; ++c)
        if (ok[c]) {
            s += raw[c];
            m++;
        }
    if (m == 0) {
        free(raw);
        free(ok);
        return sw_fail(plan->ctx, SW_ERANGE,
                       "refine: no background box of %d px has enough valid pixels", box);
    }
    for (int64_t c = 0; c < ncell; ++c)
        if (!ok[c])
            raw[c] = (float)(s / (double)m);
    /* the median filter over mesh_filter^2 boxes; near the mesh's edges the window shrinks to
     * stay centred on its box (a sloping sky keeps its slope up to the edge) */
    const int32_t h = p->mesh_filter / 2;
    double win[15 * 15];
    for (int32_t cy = 0; cy < ny; ++cy)
        for (int32_t cx = 0; cx < nx; ++cx) {
            int32_t hx = h, hy = h;
            hx = hx < cx ? hx : cx;
            hx = hx < nx - 1 - cx ? hx : nx - 1 - cx;
            hy = hy < cy ? hy : cy;
            hy = hy < ny - 1 - cy ? hy : ny - 1 - cy;
            int64_t n = 0;
            for (int32_t j = cy - hy; j <= cy + hy; ++j)
                for (int32_t i = cx - hx; i <= cx + hx; ++i)
                    win[n++] = raw[(int64_t)j * nx + i];
            plan->mesh[(int64_t)cy * nx + cx] = (float)median_sorting(win, n);
        }
    free(raw);
    free(ok);
    return SW_OK;
}

sw_status sw_refine_background_map(sw_refine_plan *plan, const sw_image *frame, sw_image *out)
{
    if (!plan || !frame || !out)
        return sw_fail(plan ? plan->ctx : NULL, SW_EINVAL, "refine: NULL argument");
    SW_TRY(sw_image_check(plan->ctx, frame));
    if (frame->width != plan->p.width || frame->height != plan->p.height ||
        frame->type != plan->p.type || frame->memory == SW_MEM_DEVICE)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "refine: the background map needs a host frame of the plan's size and "
                       "type");
    float *keep = plan->mesh;
    if (!keep) {
        plan->mesh = malloc((size_t)plan->mesh_nx * (size_t)plan->mesh_ny * sizeof(float));
        if (!plan->mesh)
            return sw_fail(plan->ctx, SW_ENOMEM, "refine: out of memory for the mesh");
    }
    sw_status st = sw_refine_mesh_compute(plan, frame);
    if (st == SW_OK)
        st = sw_image_alloc(plan->ctx, frame->width, frame->height, SW_PIX_F32, out);
    if (st == SW_OK) {
        sw_rm_frame f;
        memset(&f, 0, sizeof(f));
        f.mesh = plan->mesh;
        f.mesh_nx = plan->mesh_nx;
        f.mesh_ny = plan->mesh_ny;
        f.mesh_box = plan->p.mesh_size;
        for (int32_t y = 0; y < frame->height; ++y) {
            float *row = sw_image_row(out, y);
            for (int32_t x = 0; x < frame->width; ++x)
                row[x] = (float)sw_rm_mesh_at(&f, x, y);
        }
    }
    if (!keep) {
        free(plan->mesh);
        plan->mesh = NULL;
    }
    return st;
}

/* ---------------------------------------------------------------- runs */

static void frame_model(const sw_refine_plan *plan, const sw_image *frame, sw_rm_frame *f)
{
    memset(f, 0, sizeof(*f));
    f->data = frame->data;
    f->stride = frame->stride;
    f->type = frame->type;
    f->width = frame->width;
    f->height = frame->height;
    f->mask = plan->mask;
    f->overload = plan->overload;
    sw_rm_frame_detector(f, plan->p.bias, plan->p.gain, plan->p.read_noise);
    if (plan->p.background == SW_BACKGROUND_MESH) {
        f->mesh = plan->mesh;
        f->mesh_nx = plan->mesh_nx;
        f->mesh_ny = plan->mesh_ny;
        f->mesh_box = plan->p.mesh_size;
    }
}

static void config_of(const sw_refine_plan *plan, sw_rs_config *c)
{
    c->method = plan->p.method;
    c->background = plan->p.background;
    c->annulus_in = plan->p.annulus_in;
    c->annulus_out = plan->p.annulus_out;
    c->max_iter = plan->p.max_iter;
    c->clip_sigma = plan->p.clip_sigma;
    c->beta = plan->beta;
}

/* A host copy of a device frame (tight rows) for the MESH, in plan->frame_host. */
static sw_status frame_to_host(sw_refine_plan *plan, const sw_image *frame, sw_image *host)
{
    size_t row = (size_t)frame->width * sw_pixel_size(frame->type);
    if (!plan->frame_host) {
        plan->frame_host = malloc(row * (size_t)frame->height);
        if (!plan->frame_host)
            return sw_fail(plan->ctx, SW_ENOMEM, "refine: out of memory for a frame copy");
    }
    SW_TRY(sw_image_wrap(plan->frame_host, frame->width, frame->height, row, frame->type,
                         SW_MEM_HOST, host));
    return sw_image_copy(plan->ctx, frame, host);
}

/* A spot of a blend: its parent and its index, sorted by parent (then index). */
typedef struct blend_member {
    int64_t parent, index;
} blend_member;

static int cmp_member(const void *a, const void *b)
{
    const blend_member *u = a, *v = b;
    if (u->parent != v->parent)
        return (u->parent > v->parent) - (u->parent < v->parent);
    return (u->index > v->index) - (u->index < v->index);
}

/* A child that keeps its input position and variance (refine.h, SW_REFINE_BLEND). */
static void keep_child(sw_refine_result *r, const sw_spot *s)
{
    r->x = s->x;
    r->y = s->y;
    r->x_var = s->x_var;
    r->y_var = s->y_var;
    r->flags = (r->flags & ~SW_REFINE_JOINT) | SW_REFINE_BLEND;
}

/*
 * The children of blends (spots sharing a non-zero parent; refine.h, "Blends") after the
 * per-spot pass: GAUSS and MOFFAT fit each blend jointly on the CPU (a device frame is copied to
 * the host first); XWIN, blends beyond the limits and failed fits keep the input positions.
 */
static sw_status refine_blends(sw_refine_plan *plan, const sw_image *frame, const sw_spot *spots,
                               int64_t n)
{
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i)
        m += spots[i].parent != 0;
    if (m < 2)
        return SW_OK;
    blend_member *mem = malloc((size_t)m * sizeof(*mem));
    int64_t *idx = malloc((size_t)m * sizeof(*idx));
    int64_t *start = malloc((size_t)(m + 1) * sizeof(*start));
    if (!mem || !idx || !start) {
        free(mem);
        free(idx);
        free(start);
        return sw_fail(plan->ctx, SW_ENOMEM, "refine: out of memory for %lld blended spots",
                       (long long)m);
    }
    for (int64_t i = 0, k = 0; i < n; ++i)
        if (spots[i].parent != 0)
            mem[k++] = (blend_member){spots[i].parent, i};
    qsort(mem, (size_t)m, sizeof(*mem), cmp_member);
    /* the blends of two or more children: start[g] .. start[g + 1] in idx */
    int64_t ng = 0, k = 0;
    for (int64_t a = 0; a < m;) {
        int64_t b = a;
        while (b < m && mem[b].parent == mem[a].parent)
            ++b;
        if (b - a >= 2) {
            start[ng++] = k;
            for (int64_t q = a; q < b; ++q)
                idx[k++] = mem[q].index;
        }
        a = b;
    }
    start[ng] = k;
    free(mem);
    sw_status st = SW_OK;
    const int fit = plan->p.method == SW_REFINE_GAUSS || plan->p.method == SW_REFINE_MOFFAT;
    sw_image host = *frame;
    if (fit && ng > 0 && frame->memory == SW_MEM_DEVICE)
        st = frame_to_host(plan, frame, &host);
    if (st == SW_OK && ng > 0) {
        sw_rm_frame f;
        sw_rs_config c;
        frame_model(plan, &host, &f);
        config_of(plan, &c);
        sw_refine_result *res = plan->results;
        const sw_refine_seed *seeds = plan->seeds;
        int nomem = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(sw_context_threads(plan->ctx))
        for (int64_t g = 0; g < ng; ++g) {
            const int64_t *gi = idx + start[g];
            const int32_t gk = (int32_t)(start[g + 1] - start[g]);
            int ok = -1;
            /* every child's seed inside the frame, as sw_rs_refine asks of a lone spot (a NaN or
             * far-off seed would overflow the stamp's integer corners) */
            for (int32_t q = 0; ok && q < gk; ++q) {
                const sw_refine_seed *sd = &seeds[gi[q]];
                if (!(sd->x >= -0.5 && sd->x < (double)f.width - 0.5 && sd->y >= -0.5 &&
                      sd->y < (double)f.height - 0.5))
                    ok = 0;
            }
            if (ok && fit && gk <= SW_REFINE_MAX_CHILDREN) {
                double level = 0.0;
                int32_t x0, x1, y0, y1;
                ok = sw_refine_joint_box(&f, seeds, gi, gk, &x0, &x1, &y0, &y1) ? 1 : 0;
                if (ok == 1 && c.background == SW_BACKGROUND_ANNULUS) {
                    /* one annulus about the union box, as a stamp's: R + 2 .. R + 8 */
                    const int32_t r = ((x1 - x0) > (y1 - y0) ? (x1 - x0) : (y1 - y0)) / 2;
                    const int32_t rin = c.annulus_in > 0 ? c.annulus_in : r + 2;
                    const int32_t rout = c.annulus_out > 0 ? c.annulus_out : r + 8;
                    sw_rs_scratch sc;
                    ok = sw_rs_annulus(&f, (x0 + x1 - 1) / 2, (y0 + y1 - 1) / 2, rin, rout,
                                       c.clip_sigma, &sc, &level);
                }
                if (ok == 1)
                    ok = sw_refine_joint_fit(&f, c.method, c.beta, c.max_iter, level, seeds, gi, gk,
                                             res);
            }
            if (ok == -2) {
#pragma omp atomic write
                nomem = 1;
            }
            if (ok != 1)
                for (int32_t q = 0; q < gk; ++q)
                    keep_child(&res[gi[q]], &spots[gi[q]]);
        }
        if (nomem)
            st = sw_fail(plan->ctx, SW_ENOMEM, "refine: out of memory for a blend's joint fit");
    }
    free(idx);
    free(start);
    return st;
}

sw_status sw_refine_run(sw_refine_plan *plan, const sw_image *frame, sw_spot *spots, int64_t n,
                        sw_refine_result *results)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "refine: plan is NULL");
    sw_context *ctx = plan->ctx;
    if (!frame || (n > 0 && !spots) || n < 0)
        return sw_fail(ctx, SW_EINVAL, "refine: frame or spots are NULL, or n < 0");
    SW_TRY(sw_image_check(ctx, frame));
    if (frame->width != plan->p.width || frame->height != plan->p.height ||
        frame->type != plan->p.type)
        return sw_fail(ctx, SW_EINVAL,
                       "refine: frame is %d x %d %s, the plan was made for %d x %d %s",
                       frame->width, frame->height, sw_pixel_type_string(frame->type),
                       plan->p.width, plan->p.height, sw_pixel_type_string(plan->p.type));
    const int device = frame->memory == SW_MEM_DEVICE;
    if (device && sw_context_backend(ctx) != SW_BACKEND_CUDA)
        return sw_fail(ctx, SW_EINVAL, "refine: a device frame on a CPU context");
    if (n == 0 || plan->p.method == SW_REFINE_NONE) {
        for (int64_t i = 0; results && i < n; ++i) {
            memset(&results[i], 0, sizeof(results[i]));
            results[i].x = spots[i].x;
            results[i].y = spots[i].y;
            results[i].x_var = spots[i].x_var;
            results[i].y_var = spots[i].y_var;
            results[i].flux = spots[i].intensity;
        }
        return SW_OK;
    }
    SW_TRY(reserve(plan, n));
    for (int64_t i = 0; i < n; ++i) {
        const sw_spot *s = &spots[i];
        plan->seeds[i].x = s->x;
        plan->seeds[i].y = s->y;
        plan->seeds[i].radius =
            plan->p.radius > 0 ? plan->p.radius : sw_rm_auto_radius(s->x1 - s->x0, s->y1 - s->y0);
        plan->seeds[i].pad = 0;
    }
    if (plan->p.background == SW_BACKGROUND_MESH) {
        if (device) {
            sw_image host;
            SW_TRY(frame_to_host(plan, frame, &host));
            SW_TRY(sw_refine_mesh_compute(plan, &host));
        } else {
            SW_TRY(sw_refine_mesh_compute(plan, frame));
        }
    }
    int64_t children = 0; /* spots of blends: their joint fits need every spot's result */
    for (int64_t i = 0; i < n; ++i)
        children += spots[i].parent != 0;
#ifdef SW_HAVE_CUDA
    if (device && children < 2) {
        /* one packed download for the spots; the details only when asked for */
        SW_TRY(sw_refine_gpu_run(plan, frame, n, results != NULL));
        const sw_refine_packed *pk = plan->packed;
        for (int64_t i = 0; i < n; ++i)
            if (!(pk[i].flags & SW_REFINE_FAILED)) {
                spots[i].x = pk[i].x;
                spots[i].y = pk[i].y;
                spots[i].x_var = pk[i].x_var;
                spots[i].y_var = pk[i].y_var;
            }
        if (results) {
            memcpy(results, plan->results, (size_t)n * sizeof(*results));
            for (int64_t i = 0; i < n; ++i)
                if (results[i].flags & SW_REFINE_FAILED) {
                    /* a failed spot reports the position and variance it keeps */
                    results[i].x_var = spots[i].x_var;
                    results[i].y_var = spots[i].y_var;
                }
        }
        return SW_OK;
    }
    if (device) /* with blends: every result, then the joint fits on the host as below */
        SW_TRY(sw_refine_gpu_run(plan, frame, n, 1));
#endif
    if (!device) {
        sw_rm_frame f;
        sw_rs_config c;
        frame_model(plan, frame, &f);
        config_of(plan, &c);
        const sw_refine_seed *seeds = plan->seeds;
        sw_refine_result *res = plan->results;
#pragma omp parallel for schedule(dynamic, 16) num_threads(sw_context_threads(ctx))
        for (int64_t i = 0; i < n; ++i) {
            sw_rs_scratch sc;
            sw_rs_refine(&f, &c, &seeds[i], &sc, &res[i]);
        }
    }
    SW_TRY(refine_blends(plan, frame, spots, n));
    for (int64_t i = 0; i < n; ++i) {
        const sw_refine_result *r = &plan->results[i];
        if (!(r->flags & SW_REFINE_FAILED)) {
            spots[i].x = r->x;
            spots[i].y = r->y;
            spots[i].x_var = r->x_var;
            spots[i].y_var = r->y_var;
        } else if (results) {
            /* a failed spot reports the position and variance it keeps */
            plan->results[i].x_var = spots[i].x_var;
            plan->results[i].y_var = spots[i].y_var;
        }
    }
    if (results)
        memcpy(results, plan->results, (size_t)n * sizeof(*results));
    return SW_OK;
}

/* ---------------------------------------------------------------- CCD mode */

sw_status sw_ccd_estimate_frame(sw_context *ctx, const sw_image *frame, const uint8_t *mask,
                                double bias, double read_noise, sw_ccd_estimate *out)
{
    if (!frame || !out)
        return sw_fail(ctx, SW_EINVAL, "ccd: frame or out is NULL");
    SW_TRY(sw_image_check(ctx, frame));
    if (frame->memory == SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "ccd: the frame must be in host memory");
    if (!isfinite(bias) || !(read_noise >= 0.0) || !isfinite(read_noise))
        return sw_fail(ctx, SW_EINVAL, "ccd: bias %g must be finite and read noise %g >= 0", bias,
                       read_noise);
    memset(out, 0, sizeof(*out));
    const int64_t npix = (int64_t)frame->width * frame->height;
    /* at most ~4 M pixels: every k-th row */
    const int32_t step = npix > (4 << 20) ? (int32_t)((npix + (4 << 20) - 1) / (4 << 20)) : 1;
    double *v = malloc((size_t)npix / (size_t)step * sizeof(double) + 64 * sizeof(double) +
                       (size_t)frame->width * sizeof(double));
    double *row = malloc((size_t)frame->width * sizeof(double));
    if (!v || !row) {
        free(v);
        free(row);
        return sw_fail(ctx, SW_ENOMEM, "ccd: out of memory");
    }
    int64_t n = 0;
    for (int32_t y = 0; y < frame->height; y += step) {
        sw_load_row(sw_image_row(frame, y), frame->type, frame->width, row);
        for (int32_t x = 0; x < frame->width; ++x)
            if (isfinite(row[x]) && (!mask || mask[(size_t)y * frame->width + x]))
                v[n++] = row[x];
    }
    free(row);
    int64_t kept = 0;
    double mean = 0.0, med = 0.0, sd = 0.0;
    int ok = clip_stats(v, n, 3.0, &kept, &mean, &med, &sd);
    free(v);
    if (!ok || kept < 100)
        return sw_fail(ctx, SW_ERANGE, "ccd: too few background pixels (%lld) to estimate a gain",
                       (long long)kept);
    const double var = sd * sd, above = mean - bias;
    if (!(above > 0.0) || !(var > 0.0))
        return sw_fail(ctx, SW_ERANGE,
                       "ccd: the background (mean %g ADU, variance %g ADU^2) is not above the "
                       "bias %g: no gain from it",
                       mean, var, bias);
    out->mean = mean;
    out->variance = var;
    out->npix = kept;
    out->dispersion_gain = var / mean;
    /* var g^2 - above g - r^2 = 0 */
    out->gain = (above + sqrt(above * above + 4.0 * var * read_noise * read_noise)) / (2.0 * var);
    return SW_OK;
}

/* ---------------------------------------------------------------- lists and the find hook */

void sw_refine_list_free(sw_refine_list *l)
{
    if (!l)
        return;
    free(l->items);
    memset(l, 0, sizeof(*l));
}

sw_status sw_find_set_refine(sw_find_plan *find, sw_refine_plan *refine, sw_refine_list *results)
{
    if (!find)
        return sw_fail(NULL, SW_EINVAL, "find: plan is NULL");
    if (refine) {
        if (refine->ctx != find->ctx)
            return sw_fail(find->ctx, SW_EINVAL,
                           "find: the refinement plan was made on another context");
        if (refine->p.width != find->width || refine->p.height != find->height ||
            refine->p.type != find->p.type)
            return sw_fail(find->ctx, SW_EINVAL,
                           "find: the refinement plan is for %d x %d %s frames, the find plan "
                           "for %d x %d %s",
                           refine->p.width, refine->p.height, sw_pixel_type_string(refine->p.type),
                           find->width, find->height, sw_pixel_type_string(find->p.type));
    }
    find->refine = refine;
    find->refine_results = refine ? results : NULL;
    return SW_OK;
}

sw_status sw_find_refine_frame(sw_find_plan *plan, const sw_image *frame, sw_spot_list *spots,
                               int64_t first)
{
    if (!plan->refine || !spots)
        return SW_OK;
    const int64_t n = spots->count - first;
    sw_refine_list *l = plan->refine_results;
    if (l && l->count + n > l->capacity) {
        int64_t cap = l->capacity ? l->capacity : 256;
        while (cap < l->count + n)
            cap *= 2;
        sw_refine_result *grown = realloc(l->items, (size_t)cap * sizeof(*grown));
        if (!grown)
            return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory for %lld refinements",
                           (long long)cap);
        l->items = grown;
        l->capacity = cap;
    }
    /* children of a blend are fitted jointly or kept by the run (refine.h, "Blends") */
    sw_refine_result *res = l ? l->items + l->count : NULL;
    SW_TRY(sw_refine_run(plan->refine, frame, spots->spots + first, n, res));
    if (l)
        l->count += n;
    return SW_OK;
}
