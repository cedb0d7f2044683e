/*
 * The find stage's API (find.h): parameters, the plan, one frame, and the spots made from the
 * component moments with DIALS's filters. The thresholds live in find_threshold.c (+ _cuda.cu),
 * the labelling in find_label.c (+ _cuda.cu), the GPU orchestration in find_cuda.cu and the
 * pipelined sequence in find_sequence.c.
 */
#include "find/find_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- parameters */

void sw_find_params_default(sw_find_params *p, int32_t width, int32_t height, sw_pixel_type t)
{
    memset(p, 0, sizeof(*p));
    p->width = width;
    p->height = height;
    p->type = t;
    p->algorithm = SW_FIND_DISPERSION_EXTENDED;
    p->kernel_x = 3;
    p->kernel_y = 3;
    p->sigma_background = 6.0;
    p->sigma_strong = 3.0;
    p->min_local = 2;
    p->global_threshold = 0.0;
    p->gain = 1.0;
    p->overload = 0.0;
    p->connectivity = 4;
    p->min_spot_size = 3;
    p->max_spot_size = 1000;
    p->max_separation = 2.0;
    p->max_strong_fraction = 0.25;
    p->window = SW_FIND_WINDOW_AUTO;
    p->max_components = 1 << 18;
    p->deblend = 0;
    p->deblend_levels = 32;
    p->deblend_contrast = 0.005;
}

const char *sw_find_algorithm_string(sw_find_algorithm a)
{
    switch (a) {
    case SW_FIND_DISPERSION: return "dispersion";
    case SW_FIND_DISPERSION_EXTENDED: return "dispersion_extended";
    }
    return "?";
}

sw_status sw_find_algorithm_parse(const char *text, sw_find_algorithm *out)
{
    if (text && out) {
        if (strcmp(text, "dispersion") == 0) {
            *out = SW_FIND_DISPERSION;
            return SW_OK;
        }
        if (strcmp(text, "dispersion_extended") == 0 || strcmp(text, "dispersion-extended") == 0) {
            *out = SW_FIND_DISPERSION_EXTENDED;
            return SW_OK;
        }
    }
    return sw_fail(NULL, SW_EINVAL,
                   "find: unknown algorithm \"%s\" (dispersion or dispersion_extended)",
                   text ? text : "(null)");
}

/* The type's default overload (find.h): the seed masks u16 values above 0xfffd. */
static double default_overload(sw_pixel_type t)
{
    switch (t) {
    case SW_PIX_U8: return 255.0;
    case SW_PIX_U16: return 65534.0;
    case SW_PIX_U32: return 4294967294.0;
    default: return INFINITY;
    }
}

static sw_status check_params(sw_context *ctx, const sw_find_params *p)
{
    if (p->width <= 0 || p->height <= 0 || p->width > SW_IMAGE_MAX_DIM ||
        p->height > SW_IMAGE_MAX_DIM || (int64_t)p->width * p->height > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL, "find: frame size %d x %d is not valid", p->width,
                       p->height);
    if (p->type != SW_PIX_U8 && p->type != SW_PIX_U16 && p->type != SW_PIX_U32 &&
        p->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "find: pixel type %d is not supported", (int)p->type);
    if (p->algorithm != SW_FIND_DISPERSION && p->algorithm != SW_FIND_DISPERSION_EXTENDED)
        return sw_fail(ctx, SW_EINVAL, "find: unknown algorithm %d", (int)p->algorithm);
    if (p->kernel_x < 1 || p->kernel_y < 1 || p->kernel_x > SW_FIND_MAX_KERNEL ||
        p->kernel_y > SW_FIND_MAX_KERNEL)
        return sw_fail(ctx, SW_EINVAL, "find: kernel half-sizes %d x %d must be 1 .. %d",
                       p->kernel_x, p->kernel_y, SW_FIND_MAX_KERNEL);
    if (!(p->sigma_background >= 0.0) || !isfinite(p->sigma_background) ||
        !(p->sigma_strong >= 0.0) || !isfinite(p->sigma_strong))
        return sw_fail(ctx, SW_EINVAL,
                       "find: sigma_background %g and sigma_strong %g must be "
                       "finite and >= 0",
                       p->sigma_background, p->sigma_strong);
    int64_t window = (int64_t)(2 * p->kernel_x + 1) * (2 * p->kernel_y + 1);
    if (p->min_local > 0 && (p->min_local < 2 || p->min_local > window))
        return sw_fail(ctx, SW_EINVAL,
                       "find: min_local %d must be 2 .. %lld (the window) or <= 0 (the whole "
                       "window)",
                       p->min_local, (long long)window);
    if (!(p->global_threshold >= 0.0) || !isfinite(p->global_threshold))
        return sw_fail(ctx, SW_EINVAL, "find: global threshold %g must be finite and >= 0",
                       p->global_threshold);
    if (!p->gain_map && (!(p->gain > 0.0) || !isfinite(p->gain)))
        return sw_fail(ctx, SW_EINVAL, "find: gain %g must be finite and > 0", p->gain);
    if (isnan(p->overload) || p->overload < 0.0)
        return sw_fail(ctx, SW_EINVAL, "find: overload %g must be >= 0 (0 = the type's default)",
                       p->overload);
    if (p->connectivity != 4 && p->connectivity != 8)
        return sw_fail(ctx, SW_EINVAL, "find: connectivity %d must be 4 or 8", p->connectivity);
    if (p->min_spot_size < 0)
        return sw_fail(ctx, SW_EINVAL, "find: min_spot_size %lld must be >= 0",
                       (long long)p->min_spot_size);
    if (p->max_spot_size > 0 && p->max_spot_size < p->min_spot_size)
        return sw_fail(ctx, SW_EINVAL, "find: max_spot_size %lld is below min_spot_size %lld",
                       (long long)p->max_spot_size, (long long)p->min_spot_size);
    if (isnan(p->max_separation) || isnan(p->max_strong_fraction))
        return sw_fail(ctx, SW_EINVAL,
                       "find: max_separation and max_strong_fraction must not "
                       "be NaN");
    if (p->window != SW_FIND_WINDOW_AUTO && p->window != SW_FIND_WINDOW_BRUTE &&
        p->window != SW_FIND_WINDOW_TILED)
        return sw_fail(ctx, SW_EINVAL, "find: unknown window implementation %d", (int)p->window);
    if (p->max_components < 1)
        return sw_fail(ctx, SW_EINVAL, "find: max_components %d must be >= 1", p->max_components);
    if (p->deblend != 0 && p->deblend != 1)
        return sw_fail(ctx, SW_EINVAL, "find: deblend %d must be 0 or 1", (int)p->deblend);
    if (p->deblend_levels < 1 || p->deblend_levels > SW_FIND_MAX_DEBLEND_LEVELS)
        return sw_fail(ctx, SW_EINVAL, "find: deblend_levels %d must be 1 .. %d",
                       (int)p->deblend_levels, SW_FIND_MAX_DEBLEND_LEVELS);
    if (!(p->deblend_contrast >= 0.0 && p->deblend_contrast <= 1.0))
        return sw_fail(ctx, SW_EINVAL, "find: deblend_contrast %g must be 0 .. 1",
                       p->deblend_contrast);
    return SW_OK;
}

/* ---------------------------------------------------------------- the plan */

void sw_find_destroy(sw_find_plan *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        sw_find_gpu_destroy(plan);
    if (plan->thr_gpu)
        sw_find_threshold_gpu_free(plan);
    if (plan->lab_gpu)
        sw_find_label_gpu_free(plan);
#endif
    if (plan->thr_cpu)
        sw_find_threshold_cpu_free(plan);
    if (plan->lab_cpu)
        sw_find_label_cpu_free(plan);
    free(plan->mask);
    free(plan->gain_map);
    free(plan->strong);
    free(plan->labels);
    sw_host_free(plan->comps, plan->comps_pinned);
    sw_image_free(&plan->seq_host[0]);
    sw_image_free(&plan->seq_host[1]);
    for (int i = 0; i < SW_FIND_SEQ_SLOTS; ++i) {
        sw_image_free(&plan->seq_raw[i]);
        sw_image_free(&plan->seq_dec[i]);
        sw_host_free(plan->seq_table[i], plan->seq_pinned);
    }
    free(plan);
}

sw_status sw_find_create(sw_context *ctx, const sw_find_params *p, sw_find_plan **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "find: out is NULL");
    *out = NULL;
    if (!ctx || !p)
        return sw_fail(ctx, SW_EINVAL, "find: context or parameters are NULL");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;

    /* The per-pixel working set, host or device (mask, gain, threshold tables, labels: < 48
     * bytes a pixel), and the component list, before anything is made. */
    SW_TRY(sw_memory_check(ctx, (uint64_t)p->width * (uint64_t)p->height, 48,
                           "find: the working buffers of a %dx%d frame", (int)p->width,
                           (int)p->height));
    SW_TRY(sw_memory_check(ctx, (uint64_t)(p->max_components > 0 ? p->max_components : 0),
                           sizeof(sw_spot) + 16, "find: a list of %lld components",
                           (long long)p->max_components));
    sw_find_plan *plan = calloc(1, sizeof(*plan));
    if (!plan)
        return sw_fail(ctx, SW_ENOMEM, "find: out of memory");
    plan->ctx = ctx;
    plan->seq_failed = -1;
    plan->p = *p;
    plan->width = p->width;
    plan->height = p->height;
    plan->npix = (int64_t)p->width * p->height;
    int64_t window = (int64_t)(2 * p->kernel_x + 1) * (2 * p->kernel_y + 1);
    plan->min_count = p->min_local <= 0 ? (int32_t)window : p->min_local;
    plan->overload = p->overload > 0.0 ? p->overload : default_overload(p->type);
    plan->uniform_gain = p->gain_map == NULL;
    size_t n = (size_t)plan->npix;

    if (p->mask) {
        plan->mask = malloc(n);
        if (!plan->mask)
            goto nomem;
        for (size_t i = 0; i < n; ++i)
            plan->mask[i] = p->mask[i] != 0;
    }
    if (p->gain_map) {
        plan->gain_map = malloc(n * sizeof(float));
        if (!plan->gain_map)
            goto nomem;
        for (size_t i = 0; i < n; ++i) {
            float g = p->gain_map[i];
            if (!(g > 0.0f) || !isfinite(g)) {
                sw_find_destroy(plan);
                return sw_fail(ctx, SW_EINVAL,
                               "find: gain map value %g at pixel (%lld, %lld) must be finite and "
                               "> 0",
                               (double)g, (long long)(i % (size_t)p->width),
                               (long long)(i / (size_t)p->width));
            }
            plan->gain_map[i] = g;
        }
    }
    plan->p.mask = plan->mask;
    plan->p.gain_map = plan->gain_map;
    /* Pinned on CUDA: the component table comes back from the GPU every frame. */
    plan->comps_pinned = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    plan->comps =
        sw_host_alloc(ctx, (size_t)p->max_components * sizeof(sw_find_comp), plan->comps_pinned);
    if (!plan->comps)
        goto nomem;

    if (sw_context_backend(ctx) == SW_BACKEND_CPU) {
        plan->strong = malloc(n);
        plan->labels = malloc(2 * n * sizeof(int32_t));
        if (!plan->strong || !plan->labels)
            goto nomem;
        if ((st = sw_find_threshold_cpu_init(plan)) != SW_OK ||
            (st = sw_find_label_cpu_init(plan)) != SW_OK) {
            sw_find_destroy(plan);
            return st;
        }
    } else {
#ifdef SW_HAVE_CUDA
        plan->window = p->window == SW_FIND_WINDOW_AUTO ? SW_FIND_WINDOW_TILED : p->window;
        if ((st = sw_find_threshold_gpu_init(plan)) != SW_OK ||
            (st = sw_find_label_gpu_init(plan)) != SW_OK ||
            (st = sw_find_gpu_create(plan)) != SW_OK) {
            sw_find_destroy(plan);
            return st;
        }
#else
        sw_find_destroy(plan);
        return sw_fail(ctx, SW_EINTERNAL, "find: CUDA context in a build without CUDA");
#endif
    }
    *out = plan;
    return SW_OK;

nomem:
    sw_find_destroy(plan);
    return sw_fail(ctx, SW_ENOMEM, "find: out of memory for a %d x %d frame", p->width, p->height);
}

/* ---------------------------------------------------------------- spots */

void sw_find_acc_from_comp(const sw_find_plan *plan, const sw_find_comp *c, int64_t z,
                           sw_find_acc *a)
{
    double rx = (double)(c->root % plan->width), ry = (double)(c->root / plan->width);
    double zz = (double)z;
    /* Moments about the root moved to the origin: sum I x = sum I dx + rx sum I, and
     * sum I x^2 = sum I dx^2 + 2 rx sum I dx + rx^2 sum I. */
    a->s = c->sum_i;
    a->sx = c->sum_ix + rx * c->sum_i;
    a->sy = c->sum_iy + ry * c->sum_i;
    a->sz = zz * c->sum_i;
    a->sxx = c->sum_ixx + 2.0 * rx * c->sum_ix + rx * rx * c->sum_i;
    a->syy = c->sum_iyy + 2.0 * ry * c->sum_iy + ry * ry * c->sum_i;
    a->szz = zz * zz * c->sum_i;
    a->npix = c->npix;
    a->x0 = c->x0;
    a->x1 = c->x1;
    a->y0 = c->y0;
    a->y1 = c->y1;
    a->z0 = z;
    a->z1 = z + 1;
    a->peak = c->peak;
    a->peak_x = c->peak_x;
    a->peak_y = c->peak_y;
    a->peak_z = z;
    a->first_z = z;
    a->first_root = c->root;
}

/* Whether peak (v, z, y, x) of a comes before that of b: larger value, then earlier frame, then
 * raster order (find.h: the first among equals). */
static int peak_before(const sw_find_acc *a, const sw_find_acc *b)
{
    if (a->peak != b->peak)
        return a->peak > b->peak;
    if (a->peak_z != b->peak_z)
        return a->peak_z < b->peak_z;
    if (a->peak_y != b->peak_y)
        return a->peak_y < b->peak_y;
    return a->peak_x < b->peak_x;
}

void sw_find_acc_merge(sw_find_acc *a, const sw_find_acc *b)
{
    a->s += b->s;
    a->sx += b->sx;
    a->sy += b->sy;
    a->sz += b->sz;
    a->sxx += b->sxx;
    a->syy += b->syy;
    a->szz += b->szz;
    a->npix += b->npix;
    if (b->x0 < a->x0)
        a->x0 = b->x0;
    if (b->x1 > a->x1)
        a->x1 = b->x1;
    if (b->y0 < a->y0)
        a->y0 = b->y0;
    if (b->y1 > a->y1)
        a->y1 = b->y1;
    if (b->z0 < a->z0)
        a->z0 = b->z0;
    if (b->z1 > a->z1)
        a->z1 = b->z1;
    if (peak_before(b, a)) {
        a->peak = b->peak;
        a->peak_x = b->peak_x;
        a->peak_y = b->peak_y;
        a->peak_z = b->peak_z;
    }
    if (b->first_z < a->first_z || (b->first_z == a->first_z && b->first_root < a->first_root)) {
        a->first_z = b->first_z;
        a->first_root = b->first_root;
    }
}

/* The intensity-weighted mean of a coordinate and the Poisson variance of that mean (find.h):
 * (spread + 1/12) / sum I, the spread clamped at 0 against rounding. */
static void mean_var(double s, double sx, double sxx, double *mean, double *var)
{
    double m = sx / s;
    double spread = sxx / s - m * m;
    if (spread < 0.0)
        spread = 0.0;
    *mean = m;
    *var = (spread + 1.0 / 12.0) / s;
}

void sw_find_acc_to_spot(const sw_find_acc *a, int three_d, sw_spot *out)
{
    memset(out, 0, sizeof(*out));
    mean_var(a->s, a->sx, a->sxx, &out->x, &out->x_var);
    mean_var(a->s, a->sy, a->syy, &out->y, &out->y_var);
    if (!three_d) { /* a 2-D spot: its frame, exactly */
        out->z = (double)a->z0;
        out->z_var = 0.0;
    } else {
        mean_var(a->s, a->sz, a->szz, &out->z, &out->z_var);
    }
    out->intensity = a->s;
    out->npix = a->npix;
    out->x0 = a->x0;
    out->x1 = a->x1;
    out->y0 = a->y0;
    out->y1 = a->y1;
    out->z0 = a->z0;
    out->z1 = a->z1;
    out->peak_x = a->peak_x;
    out->peak_y = a->peak_y;
    out->peak_z = a->peak_z;
    out->peak = (double)a->peak;
}

void sw_find_comp_to_spot(const sw_find_plan *plan, const sw_find_comp *c, int64_t z, sw_spot *out)
{
    sw_find_acc a;
    sw_find_acc_from_comp(plan, c, z, &a);
    sw_find_acc_to_spot(&a, 0, out);
}

int sw_find_spot_filter(const sw_find_plan *plan, const sw_spot *s, sw_find_stats *stats)
{
    const sw_find_params *p = &plan->p;
    if (s->npix < p->min_spot_size) {
        if (stats)
            stats->rejected_small++;
        return 0;
    }
    if (p->max_spot_size > 0 && s->npix > p->max_spot_size) {
        if (stats)
            stats->rejected_large++;
        return 0;
    }
    if (p->max_separation > 0.0) {
        double dx = (double)s->peak_x - s->x, dy = (double)s->peak_y - s->y;
        double dz = (double)s->peak_z - s->z;
        if (sqrt(dx * dx + dy * dy + dz * dz) > p->max_separation) {
            if (stats)
                stats->rejected_separation++;
            return 0;
        }
    }
    return 1;
}

sw_status sw_find_spot_append(sw_context *ctx, sw_spot_list *l, const sw_spot *s)
{
    if (l->count == l->capacity) {
        int64_t cap = l->capacity ? 2 * l->capacity : 256;
        sw_spot *grown = realloc(l->spots, (size_t)cap * sizeof(sw_spot));
        if (!grown)
            return sw_fail(ctx, SW_ENOMEM, "find: out of memory for %lld spots", (long long)cap);
        l->spots = grown;
        l->capacity = cap;
    }
    l->spots[l->count++] = *s;
    return SW_OK;
}

void sw_spot_list_free(sw_spot_list *l)
{
    if (!l)
        return;
    free(l->spots);
    memset(l, 0, sizeof(*l));
}

void sw_find_stats_add(sw_find_stats *dst, const sw_find_stats *src)
{
    if (!dst)
        return;
    dst->frames += src->frames;
    dst->valid_pixels += src->valid_pixels;
    dst->strong_pixels += src->strong_pixels;
    dst->components += src->components;
    dst->spots += src->spots;
    dst->rejected_small += src->rejected_small;
    dst->rejected_large += src->rejected_large;
    dst->rejected_separation += src->rejected_separation;
    dst->blends += src->blends;
    dst->children += src->children;
}

sw_status sw_find_check_strong_fraction(const sw_find_plan *plan, int64_t frame_index,
                                        int64_t valid, int64_t strong)
{
    double f = plan->p.max_strong_fraction;
    if (f > 0.0 && valid > 0 && (double)strong > f * (double)valid)
        return sw_fail(plan->ctx, SW_ERANGE,
                       "find: frame %lld has %lld strong pixels of %lld valid (%.1f%%, more than "
                       "the %.1f%% max_strong_fraction allows): not a spot pattern (a wrong mask, "
                       "gain or overload?)",
                       (long long)frame_index, (long long)strong, (long long)valid,
                       100.0 * (double)strong / (double)valid, 100.0 * f);
    return SW_OK;
}

/* Turns a frame's component table into spots (2-D), appending the ones that pass the filters.
 * Nothing is appended on failure. */
sw_status sw_find_emit_frame(sw_find_plan *plan, const sw_find_comp *comps, int64_t ncomp,
                             int64_t frame_index, sw_spot_list *spots, sw_find_stats *stats)
{
    sw_find_stats local = {0};
    int64_t count0 = spots ? spots->count : 0;
    for (int64_t i = 0; i < ncomp; ++i) {
        sw_spot s;
        sw_find_comp_to_spot(plan, &comps[i], frame_index, &s);
        if (!sw_find_spot_filter(plan, &s, &local))
            continue;
        local.spots++;
        if (spots) {
            sw_status st = sw_find_spot_append(plan->ctx, spots, &s);
            if (st != SW_OK) {
                spots->count = count0;
                return st;
            }
        }
    }
    local.components = ncomp;
    sw_find_stats_add(stats, &local);
    return SW_OK;
}

/* ---------------------------------------------------------------- one frame */

sw_status sw_find_check_frame(const sw_find_plan *plan, const sw_image *frame)
{
    sw_status st = sw_image_check(plan->ctx, frame);
    if (st != SW_OK)
        return st;
    if (frame->width != plan->width || frame->height != plan->height || frame->type != plan->p.type)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "find: frame is %d x %d %s, the plan was made for %d x %d %s", frame->width,
                       frame->height, sw_pixel_type_string(frame->type), plan->width, plan->height,
                       sw_pixel_type_string(plan->p.type));
    if (frame->memory == SW_MEM_DEVICE && sw_context_backend(plan->ctx) != SW_BACKEND_CUDA)
        return sw_fail(plan->ctx, SW_EINVAL, "find: a device frame on a CPU context");
    return SW_OK;
}

static sw_status check_strong_image(const sw_find_plan *plan, const sw_image *strong)
{
    if (!strong)
        return SW_OK;
    sw_status st = sw_image_check(plan->ctx, strong);
    if (st != SW_OK)
        return st;
    if (strong->width != plan->width || strong->height != plan->height ||
        strong->type != SW_PIX_U8 || strong->memory == SW_MEM_DEVICE)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "find: the strong mask must be a host u8 image of %d x %d", plan->width,
                       plan->height);
    return SW_OK;
}

/* The CPU path of one frame: threshold, labels (into label slot `slot`), components. */
sw_status sw_find_frame_cpu(sw_find_plan *plan, const sw_image *frame, int64_t frame_index,
                            int slot, int64_t *ncomp, int64_t *valid, int64_t *strong)
{
    sw_status st = sw_find_threshold_cpu(plan, frame, plan->strong, valid);
    if (st != SW_OK)
        return st;
    int64_t n = 0;
    const int64_t npix = plan->npix;
    const uint8_t *strong_px = plan->strong;
#pragma omp parallel for schedule(static) reduction(+ : n) num_threads(sw_context_threads(plan->ctx))
    for (int64_t i = 0; i < npix; ++i)
        n += strong_px[i];
    *strong = n;
    st = sw_find_check_strong_fraction(plan, frame_index, *valid, n);
    if (st != SW_OK)
        return st;
    return sw_find_label_cpu(plan, plan->strong, frame, plan->labels + (size_t)slot * plan->npix,
                             plan->comps, plan->p.max_components, ncomp);
}

sw_status sw_find_run(sw_find_plan *plan, const sw_image *frame, int64_t frame_index,
                      sw_spot_list *spots, sw_image *strong, sw_find_stats *stats)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "find: plan is NULL");
    if (!frame)
        return sw_fail(plan->ctx, SW_EINVAL, "find: frame is NULL");
    sw_status st = sw_find_check_frame(plan, frame);
    if (st == SW_OK)
        st = check_strong_image(plan, strong);
    if (st != SW_OK)
        return st;

    int64_t ncomp = 0, valid = 0, nstrong = 0;
    if (sw_context_backend(plan->ctx) == SW_BACKEND_CPU) {
        st = sw_find_frame_cpu(plan, frame, frame_index, 0, &ncomp, &valid, &nstrong);
        if (st == SW_OK && strong)
            for (int32_t y = 0; y < plan->height; ++y)
                memcpy(sw_image_row(strong, y), plan->strong + (size_t)y * plan->width,
                       (size_t)plan->width);
    } else {
#ifdef SW_HAVE_CUDA
        int slot = 0;
        if (frame->memory != SW_MEM_DEVICE) {
            st = sw_find_gpu_upload(plan, frame, 0);
            frame = NULL;
        }
        if (st == SW_OK)
            st = sw_find_gpu_process(plan, frame, slot, 0, frame_index, &ncomp, &valid, &nstrong,
                                     strong);
#else
        st = sw_fail(plan->ctx, SW_EINTERNAL, "find: CUDA context in a build without CUDA");
#endif
    }
    if (st != SW_OK)
        return st;
    const int64_t count0 = spots ? spots->count : 0;
    sw_find_stats local = {0};
    if (plan->p.deblend && sw_context_backend(plan->ctx) == SW_BACKEND_CPU)
        st = sw_find_deblend_emit(plan, frame, plan->labels, plan->comps, ncomp, frame_index, spots,
                                  &local);
#ifdef SW_HAVE_CUDA
    else if (plan->p.deblend)
        st = sw_find_gpu_deblend_emit(plan, frame, 0, 0, ncomp, frame_index, spots, &local);
#endif
    else
        st = sw_find_emit_frame(plan, plan->comps, ncomp, frame_index, spots, &local);
    if (st == SW_OK && plan->refine && spots) {
#ifdef SW_HAVE_CUDA
        const sw_image *on = frame ? frame : sw_find_gpu_frame(plan, 0);
#else
        const sw_image *on = frame;
#endif
        st = sw_find_refine_frame(plan, on, spots, count0);
        if (st != SW_OK)
            spots->count = count0;
    }
    if (st != SW_OK)
        return st;
    sw_find_stats_add(stats, &local);
    if (stats) {
        stats->frames++;
        stats->valid_pixels += valid;
        stats->strong_pixels += nstrong;
    }
    return SW_OK;
}
