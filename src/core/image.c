/*
 * Images: allocation (host, pinned, device), views, copies, type conversion and statistics.
 * The CPU implementations here are the reference the CUDA twins in core_cuda.cu are tested
 * against (tests/gpu/test_gpu_image.c).
 */
#include "core/core_internal.h"
#include "spotwave/rng.h"
#ifdef SW_HAVE_CUDA
#include "core/core_cuda.h"
#endif

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef SW_HAVE_OPENMP
#include <omp.h>
#endif

#define SW_ROW_ALIGN 64

/* ------------------------------------------------------------------ descriptors */

static sw_status check_dims(sw_context *ctx, int64_t w, int64_t h, sw_pixel_type t)
{
    if (sw_pixel_size(t) == 0)
        return sw_fail(ctx, SW_EINVAL, "unknown pixel type code %d", (int)t);
    if (w <= 0 || h <= 0)
        return sw_fail(ctx, SW_EINVAL, "image size %lldx%lld: width and height must be positive",
                       (long long)w, (long long)h);
    if (w > SW_IMAGE_MAX_DIM || h > SW_IMAGE_MAX_DIM || w * h > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_ERANGE,
                       "image size %lldx%lld is too large (at most %d per side and %lld pixels)",
                       (long long)w, (long long)h, SW_IMAGE_MAX_DIM, SW_IMAGE_MAX_PIXELS);
    return SW_OK;
}

sw_status sw_image_check_output(sw_context *ctx, const char *who, const sw_image *out,
                                sw_pixel_type t, int32_t width, int32_t height, int device_ok)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "%s: the output image is NULL", who);
    sw_status st = sw_image_check(ctx, out);
    if (st != SW_OK)
        return st;
    if (out->type != t)
        return sw_fail(ctx, SW_EINVAL, "%s: the output image is %s; it must be %s", who,
                       sw_pixel_type_string(out->type), sw_pixel_type_string(t));
    if (out->width != width || out->height != height)
        return sw_fail(ctx, SW_EINVAL, "%s: the output image is %dx%d but the plan renders %dx%d",
                       who, (int)out->width, (int)out->height, (int)width, (int)height);
    if (out->memory == SW_MEM_DEVICE && !device_ok)
        return sw_fail(ctx, SW_ENODEV, "%s: device images need a CUDA context", who);
    return SW_OK;
}

sw_status sw_image_check(sw_context *ctx, const sw_image *img)
{
    if (!img)
        return sw_fail(ctx, SW_EINVAL, "image is NULL");
    sw_status st = check_dims(ctx, img->width, img->height, img->type);
    if (st != SW_OK)
        return st;
    if (!img->data)
        return sw_fail(ctx, SW_EINVAL, "image %dx%d has no pixel data (NULL pointer)", img->width,
                       img->height);
    if (img->memory != SW_MEM_HOST && img->memory != SW_MEM_PINNED && img->memory != SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "unknown image memory kind %d", (int)img->memory);
    size_t row = (size_t)img->width * sw_pixel_size(img->type);
    if (img->stride < row)
        return sw_fail(
            ctx, SW_EINVAL,
            "image row stride %zu bytes is smaller than a row (%d %s pixels = %zu bytes)",
            img->stride, img->width, sw_pixel_type_string(img->type), row);
    if (img->stride % sw_pixel_size(img->type) != 0)
        return sw_fail(ctx, SW_EINVAL,
                       "image row stride %zu is not a multiple of the %zu-byte pixel", img->stride,
                       sw_pixel_size(img->type));
    return SW_OK;
}

static int is_host(const sw_image *img)
{
    return img->memory == SW_MEM_HOST || img->memory == SW_MEM_PINNED;
}

sw_status sw_image_alloc(sw_context *ctx, int32_t width, int32_t height, sw_pixel_type type,
                         sw_image *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_image_alloc: out is NULL");
    memset(out, 0, sizeof *out);
    sw_status st = check_dims(ctx, width, height, type);
    if (st != SW_OK)
        return st;
    size_t row = (size_t)width * sw_pixel_size(type);
    size_t stride = (row + SW_ROW_ALIGN - 1) / SW_ROW_ALIGN * SW_ROW_ALIGN;
    size_t bytes;
    if (!sw_mul_ok(stride, (size_t)height, &bytes))
        return sw_fail(ctx, SW_ERANGE, "image %dx%d: size overflows", width, height);
    SW_TRY(sw_memory_check(ctx, 1, bytes, "a %dx%d %s image", width, height,
                           sw_pixel_type_string(type)));
    int pinned = ctx && ctx->backend == SW_BACKEND_CUDA;
    void *data = sw_host_alloc(ctx, bytes, pinned);
    if (!data)
        return sw_fail(ctx, SW_ENOMEM, "out of memory allocating a %dx%d %s image (%zu bytes)",
                       width, height, sw_pixel_type_string(type), bytes);
    out->width = width;
    out->height = height;
    out->stride = stride;
    out->type = type;
    out->memory = pinned ? SW_MEM_PINNED : SW_MEM_HOST;
    out->owned = 1;
    out->data = data;
    return SW_OK;
}

sw_status sw_image_alloc_device(sw_context *ctx, int32_t width, int32_t height, sw_pixel_type type,
                                sw_image *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_image_alloc_device: out is NULL");
    memset(out, 0, sizeof *out);
    if (!ctx || ctx->backend != SW_BACKEND_CUDA)
        return sw_fail(ctx, SW_ENODEV, "device images need a context on the CUDA backend");
    sw_status st = check_dims(ctx, width, height, type);
    if (st != SW_OK)
        return st;
    /* the pitch cudaMallocPitch picks is at most a few hundred bytes more per row */
    SW_TRY(sw_memory_check(ctx, (uint64_t)height, (uint64_t)width * sw_pixel_size(type) + 512,
                           "a %dx%d %s device image", width, height, sw_pixel_type_string(type)));
#ifdef SW_HAVE_CUDA
    out->width = width;
    out->height = height;
    out->type = type;
    st = sw_cuda_image_alloc(ctx, out);
    if (st != SW_OK)
        memset(out, 0, sizeof *out);
    return st;
#else
    return sw_fail(ctx, SW_EINTERNAL, "CUDA context in a build without CUDA");
#endif
}

void sw_image_free(sw_image *img)
{
    if (!img)
        return;
    if (img->owned && img->data) {
        switch (img->memory) {
        case SW_MEM_HOST: sw_host_free(img->data, 0); break;
        case SW_MEM_PINNED: sw_host_free(img->data, 1); break;
        case SW_MEM_DEVICE:
#ifdef SW_HAVE_CUDA
            sw_cuda_device_free(img->data);
#endif
            break;
        }
    }
    memset(img, 0, sizeof *img);
}

sw_status sw_image_wrap(void *data, int32_t width, int32_t height, size_t stride,
                        sw_pixel_type type, sw_memory memory, sw_image *out)
{
    if (!out)
        return sw_fail(NULL, SW_EINVAL, "sw_image_wrap: out is NULL");
    memset(out, 0, sizeof *out);
    sw_image img = {width, height, stride, type, memory, 0, data};
    if (stride == 0 && width > 0)
        img.stride = (size_t)width * sw_pixel_size(type);
    sw_status st = sw_image_check(NULL, &img);
    if (st != SW_OK)
        return st;
    *out = img;
    return SW_OK;
}

sw_status sw_image_roi(sw_context *ctx, const sw_image *src, int32_t x, int32_t y, int32_t w,
                       int32_t h, sw_image *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_image_roi: out is NULL");
    memset(out, 0, sizeof *out);
    sw_status st = sw_image_check(ctx, src);
    if (st != SW_OK)
        return st;
    if (x < 0 || y < 0 || w <= 0 || h <= 0 || (int64_t)x + w > src->width ||
        (int64_t)y + h > src->height)
        return sw_fail(ctx, SW_EINVAL,
                       "region %dx%d at (%d, %d) does not lie inside the %dx%d image", w, h, x, y,
                       src->width, src->height);
    *out = *src;
    out->width = w;
    out->height = h;
    out->owned = 0;
    out->data = (char *)src->data + (size_t)y * src->stride + (size_t)x * sw_pixel_size(src->type);
    return SW_OK;
}

int sw_image_equal(const sw_image *a, const sw_image *b)
{
    if (!a || !b || a->width != b->width || a->height != b->height || a->type != b->type)
        return 0;
    size_t row = (size_t)a->width * sw_pixel_size(a->type);
    for (int32_t y = 0; y < a->height; y++)
        if (memcmp(sw_image_row(a, y), sw_image_row(b, y), row) != 0)
            return 0;
    return 1;
}

double sw_image_get(const sw_image *img, int32_t x, int32_t y)
{
    const void *row = sw_image_row(img, y);
    switch (img->type) {
    case SW_PIX_U8: return ((const uint8_t *)row)[x];
    case SW_PIX_U16: return ((const uint16_t *)row)[x];
    case SW_PIX_U32: return ((const uint32_t *)row)[x];
    case SW_PIX_F32: return ((const float *)row)[x];
    }
    return NAN;
}

static sw_status check_same_size(sw_context *ctx, const sw_image *a, const sw_image *b,
                                 const char *what)
{
    if (a->width != b->width || a->height != b->height)
        return sw_fail(ctx, SW_EINVAL, "%s: source is %dx%d but destination is %dx%d", what,
                       a->width, a->height, b->width, b->height);
    return SW_OK;
}

/* The bytes an image spans: [first, last). */
static void image_span(const sw_image *img, uintptr_t *first, uintptr_t *last)
{
    *first = (uintptr_t)img->data;
    *last = *first + img->stride * (size_t)(img->height - 1) +
            (size_t)img->width * sw_pixel_size(img->type);
}

static int images_overlap(const sw_image *a, const sw_image *b)
{
    uintptr_t a0, a1, b0, b1;
    image_span(a, &a0, &a1);
    image_span(b, &b0, &b1);
    return a->memory == b->memory ? a0 < b1 && b0 < a1 : 0;
}

sw_status sw_image_copy(sw_context *ctx, const sw_image *src, sw_image *dst)
{
    sw_status st;
    if ((st = sw_image_check(ctx, src)) != SW_OK || (st = sw_image_check(ctx, dst)) != SW_OK)
        return st;
    if ((st = check_same_size(ctx, src, dst, "image copy")) != SW_OK)
        return st;
    if (src->type != dst->type)
        return sw_fail(ctx, SW_EINVAL, "image copy: types differ (%s to %s); use sw_image_convert",
                       sw_pixel_type_string(src->type), sw_pixel_type_string(dst->type));
    int overlap = images_overlap(src, dst);
    if (overlap && (src->stride != dst->stride || !is_host(src)))
        return sw_fail(ctx, SW_EINVAL,
                       "image copy: source and destination overlap (allowed only for host "
                       "images with equal strides)");
    if (is_host(src) && is_host(dst)) {
        /* Overlapping views of one image: walk the rows away from the destination, so that no
         * source row is overwritten before it is read (memmove handles overlap within a row). */
        size_t row = (size_t)src->width * sw_pixel_size(src->type);
        if (overlap && (uintptr_t)dst->data > (uintptr_t)src->data) {
            for (int32_t y = src->height - 1; y >= 0; y--)
                memmove(sw_image_row(dst, y), sw_image_row(src, y), row);
        } else {
            for (int32_t y = 0; y < src->height; y++)
                memmove(sw_image_row(dst, y), sw_image_row(src, y), row);
        }
        return SW_OK;
    }
#ifdef SW_HAVE_CUDA
    if (ctx && ctx->backend == SW_BACKEND_CUDA)
        return sw_cuda_image_copy(ctx, src, dst);
#endif
    return sw_fail(ctx, SW_ENODEV, "image copy involving device memory needs a CUDA context");
}

/* ------------------------------------------------------------------ conversion (CPU) */

void sw_load_row(const void *row, sw_pixel_type t, int32_t n, double *out)
{
    switch (t) {
    case SW_PIX_U8:
        for (int32_t i = 0; i < n; i++)
            out[i] = ((const uint8_t *)row)[i];
        break;
    case SW_PIX_U16:
        for (int32_t i = 0; i < n; i++)
            out[i] = ((const uint16_t *)row)[i];
        break;
    case SW_PIX_U32:
        for (int32_t i = 0; i < n; i++)
            out[i] = ((const uint32_t *)row)[i];
        break;
    case SW_PIX_F32:
        for (int32_t i = 0; i < n; i++)
            out[i] = ((const float *)row)[i];
        break;
    }
}

/* v * scale + offset. The product and the sum are rounded separately (the library is built with
 * -ffp-contract=off, and the GPU twin uses __dmul_rn/__dadd_rn) so both give the same bits. */
static inline double scaled(double v, double scale, double offset)
{
    return v * scale + offset;
}

static size_t store_row(const double *in, sw_pixel_type t, int32_t n, double scale, double offset,
                        void *row)
{
    size_t clipped = 0;
    double maxv = t == SW_PIX_U8 ? 255.0 : t == SW_PIX_U16 ? 65535.0 : 4294967295.0;
    if (t == SW_PIX_F32) {
        for (int32_t i = 0; i < n; i++)
            ((float *)row)[i] = (float)scaled(in[i], scale, offset);
        return 0;
    }
    for (int32_t i = 0; i < n; i++) {
        double v = rint(scaled(in[i], scale, offset)); /* nearest, ties to even */
        if (v < 0.0) {
            v = 0.0;
            clipped++;
        } else if (v > maxv) {
            v = maxv;
            clipped++;
        }
        switch (t) {
        case SW_PIX_U8: ((uint8_t *)row)[i] = (uint8_t)v; break;
        case SW_PIX_U16: ((uint16_t *)row)[i] = (uint16_t)v; break;
        default: ((uint32_t *)row)[i] = (uint32_t)v; break;
        }
    }
    return clipped;
}

static int64_t count_nonfinite_cpu(sw_context *ctx, const sw_image *img)
{
    if (img->type != SW_PIX_F32)
        return 0;
    int64_t bad = 0;
#pragma omp parallel for num_threads(sw_context_threads(ctx)) reduction(+ : bad) schedule(static)
    for (int32_t y = 0; y < img->height; y++) {
        const float *row = sw_image_row(img, y);
        for (int32_t x = 0; x < img->width; x++)
            bad += !isfinite(row[x]);
    }
    return bad;
}

/* One row buffer of `width` doubles per thread, allocated before a parallel region so that a
 * failure is reported before any pixel is touched. */
static double *row_buffers(int32_t width, int threads)
{
    size_t n;
    if (!sw_mul_ok((size_t)width * sizeof(double), (size_t)threads, &n))
        return NULL;
    return malloc(n);
}

static sw_status convert_cpu(sw_context *ctx, const sw_image *src, sw_image *dst, double scale,
                             double offset, size_t *clipped)
{
    const int threads = sw_context_threads(ctx);
    double *bufs = row_buffers(src->width, threads);
    if (!bufs)
        return sw_fail(ctx, SW_ENOMEM, "out of memory converting an image");
    size_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        double *buf = bufs + (size_t)sw_omp_thread() * (size_t)src->width;
#pragma omp for schedule(static)
        for (int32_t y = 0; y < src->height; y++) {
            sw_load_row(sw_image_row(src, y), src->type, src->width, buf);
            total += store_row(buf, dst->type, src->width, scale, offset, sw_image_row(dst, y));
        }
    }
    free(bufs);
    if (clipped)
        *clipped = total;
    return SW_OK;
}

/* A host image staged through the device for the CUDA backend: the context's two staging
 * buffers (kept between calls) hold the source and the result. */
#ifdef SW_HAVE_CUDA
static sw_status convert_staged(sw_context *ctx, const sw_image *src, sw_image *dst, double scale,
                                double offset, size_t *clipped)
{
    sw_image dsrc, ddst;
    sw_status st = sw_cuda_staging_image(ctx, 0, src->width, src->height, src->type, &dsrc);
    if (st == SW_OK)
        st = sw_cuda_staging_image(ctx, 1, dst->width, dst->height, dst->type, &ddst);
    if (st == SW_OK)
        st = sw_image_copy(ctx, src, &dsrc);
    if (st == SW_OK)
        st = sw_image_convert(ctx, &dsrc, &ddst, scale, offset, clipped);
    if (st == SW_OK)
        st = sw_image_copy(ctx, &ddst, dst);
    return st;
}
#endif

sw_status sw_image_convert(sw_context *ctx, const sw_image *src, sw_image *dst, double scale,
                           double offset, size_t *clipped)
{
    sw_status st;
    if ((st = sw_image_check(ctx, src)) != SW_OK || (st = sw_image_check(ctx, dst)) != SW_OK)
        return st;
    if ((st = check_same_size(ctx, src, dst, "image conversion")) != SW_OK)
        return st;
    if (!isfinite(scale) || !isfinite(offset))
        return sw_fail(ctx, SW_EINVAL, "conversion scale %g and offset %g must be finite", scale,
                       offset);
    if (is_host(src) != is_host(dst))
        return sw_fail(ctx, SW_EINVAL,
                       "image conversion: source and destination must both be host or both be "
                       "device memory (copy first with sw_image_copy)");
    if (images_overlap(src, dst) && (src->data != dst->data || src->stride != dst->stride ||
                                     sw_pixel_size(src->type) != sw_pixel_size(dst->type)))
        return sw_fail(ctx, SW_EINVAL,
                       "image conversion: source and destination overlap (in place is allowed "
                       "only over the same pixels, with equal strides and pixel sizes)");

    int to_int = dst->type != SW_PIX_F32;
    int on_gpu = ctx && ctx->backend == SW_BACKEND_CUDA;
    if (!is_host(src) && !on_gpu)
        return sw_fail(ctx, SW_ENODEV, "device images need a context on the CUDA backend");

#ifdef SW_HAVE_CUDA
    if (on_gpu && is_host(src))
        return convert_staged(ctx, src, dst, scale, offset, clipped);
    if (on_gpu) {
        if (to_int && src->type == SW_PIX_F32) {
            int64_t bad = 0;
            if ((st = sw_cuda_count_nonfinite(ctx, src, &bad)) != SW_OK)
                return st;
            if (bad)
                return sw_fail(ctx, SW_ERANGE,
                               "image conversion to %s: %lld pixels are NaN or infinite",
                               sw_pixel_type_string(dst->type), (long long)bad);
        }
        return sw_cuda_convert(ctx, src, dst, scale, offset, clipped);
    }
#endif
    if (to_int) {
        int64_t bad = count_nonfinite_cpu(ctx, src);
        if (bad)
            return sw_fail(ctx, SW_ERANGE,
                           "image conversion to %s: %lld pixels are NaN or infinite",
                           sw_pixel_type_string(dst->type), (long long)bad);
    }
    return convert_cpu(ctx, src, dst, scale, offset, clipped);
}

/* ------------------------------------------------------------------ statistics (CPU) */

/*
 * Partial statistics of a set of finite values: count, mean and M2 = sum (x - mean)^2, combined
 * with Chan, Golub & LeVeque's pairwise update so that large offsets do not cancel. Each partial
 * first accumulates sums of (x - shift) with shift = its first value (cheap and stable).
 */
typedef struct stats_acc {
    int64_t n, n_nan, n_inf;
    double min, max, mean, m2;
} stats_acc;

static void acc_init(stats_acc *a)
{
    a->n = a->n_nan = a->n_inf = 0;
    a->min = INFINITY;
    a->max = -INFINITY;
    a->mean = a->m2 = 0.0;
}

static void acc_merge(stats_acc *a, const stats_acc *b)
{
    a->n_nan += b->n_nan;
    a->n_inf += b->n_inf;
    if (b->n == 0)
        return;
    if (b->min < a->min)
        a->min = b->min;
    if (b->max > a->max)
        a->max = b->max;
    if (a->n == 0) {
        a->n = b->n;
        a->mean = b->mean;
        a->m2 = b->m2;
        return;
    }
    double n = (double)(a->n + b->n);
    double delta = b->mean - a->mean;
    a->mean += delta * ((double)b->n / n);
    a->m2 += b->m2 + delta * delta * ((double)a->n * (double)b->n / n);
    a->n += b->n;
}

/* Accumulates one row into a partial (shifted sums, then converted to mean/M2). */
static void acc_row(stats_acc *a, const sw_image *img, int32_t y, double *buf)
{
    sw_load_row(sw_image_row(img, y), img->type, img->width, buf);
    stats_acc r;
    acc_init(&r);
    double shift = 0.0, s = 0.0, ss = 0.0;
    int have_shift = 0;
    for (int32_t x = 0; x < img->width; x++) {
        double v = buf[x];
        if (isnan(v)) {
            r.n_nan++;
            continue;
        }
        if (isinf(v)) {
            r.n_inf++;
            continue;
        }
        if (!have_shift) {
            shift = v;
            have_shift = 1;
        }
        double d = v - shift;
        s += d;
        ss += d * d;
        r.n++;
        if (v < r.min)
            r.min = v;
        if (v > r.max)
            r.max = v;
    }
    if (r.n) {
        r.mean = shift + s / (double)r.n;
        r.m2 = ss - s * s / (double)r.n;
        if (r.m2 < 0.0)
            r.m2 = 0.0;
    }
    acc_merge(a, &r);
}

static void acc_finish(const stats_acc *a, sw_image_stats *out)
{
    out->n_finite = a->n;
    out->n_nan = a->n_nan;
    out->n_inf = a->n_inf;
    if (a->n == 0) {
        out->min = out->max = out->mean = out->stddev = NAN;
        out->sum = 0.0;
        return;
    }
    out->min = a->min;
    out->max = a->max;
    out->mean = a->mean;
    out->sum = a->mean * (double)a->n;
    out->stddev = sqrt(a->m2 / (double)a->n);
}

sw_status sw_image_stats_compute(sw_context *ctx, const sw_image *img, sw_image_stats *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_image_stats_compute: out is NULL");
    sw_status st = sw_image_check(ctx, img);
    if (st != SW_OK)
        return st;
    int on_gpu = ctx && ctx->backend == SW_BACKEND_CUDA;
#ifdef SW_HAVE_CUDA
    if (on_gpu && !is_host(img))
        return sw_cuda_stats(ctx, img, out);
    if (on_gpu) {
        sw_image d;
        st = sw_cuda_staging_image(ctx, 0, img->width, img->height, img->type, &d);
        if (st == SW_OK)
            st = sw_image_copy(ctx, img, &d);
        if (st == SW_OK)
            st = sw_cuda_stats(ctx, &d, out);
        return st;
    }
#endif
    if (!is_host(img) && !on_gpu)
        return sw_fail(ctx, SW_ENODEV, "device images need a context on the CUDA backend");

    const int threads = sw_context_threads(ctx);
    double *bufs = row_buffers(img->width, threads);
    if (!bufs)
        return sw_fail(ctx, SW_ENOMEM, "out of memory computing image statistics");
    stats_acc *part = malloc((size_t)threads * sizeof *part);
    if (!part) {
        free(bufs);
        return sw_fail(ctx, SW_ENOMEM, "out of memory computing image statistics");
    }
    for (int t = 0; t < threads; t++)
        acc_init(&part[t]);
#pragma omp parallel num_threads(threads)
    {
        stats_acc *mine = &part[sw_omp_thread()];
        double *buf = bufs + (size_t)sw_omp_thread() * (size_t)img->width;
#pragma omp for schedule(static)
        for (int32_t y = 0; y < img->height; y++)
            acc_row(mine, img, y, buf);
    }
    /* merged in thread order, so a given thread count always gives the same bits */
    stats_acc total;
    acc_init(&total);
    for (int t = 0; t < threads; t++)
        acc_merge(&total, &part[t]);
    free(part);
    free(bufs);
    acc_finish(&total, out);
    return SW_OK;
}

/* ------------------------------------------------------------------ random fill (CPU) */

/* The value of one pixel; shared formula with the kernel in core_cuda.cu. */
static inline float random_value(uint64_t seed, uint64_t stream, uint64_t index,
                                 sw_random_dist dist, double a, double b)
{
    sw_rng4 r = sw_rng_draw(seed, stream, index);
    if (dist == SW_RANDOM_UNIFORM) {
        float v = (float)(a + (b - a) * sw_rng_u01(r.v[0], r.v[1]));
        /* rounding to float can reach b itself: step down to keep the interval half-open */
        return (double)v >= b ? nextafterf(v, -INFINITY) : v;
    }
    double z0, z1;
    sw_rng_normal2(r, &z0, &z1);
    return (float)(a + b * z0);
}

sw_status sw_image_fill_random(sw_context *ctx, sw_image *img, uint64_t seed, uint64_t stream,
                               sw_random_dist dist, double a, double b)
{
    sw_status st = sw_image_check(ctx, img);
    if (st != SW_OK)
        return st;
    if (img->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "random fill needs an f32 image, not %s",
                       sw_pixel_type_string(img->type));
    if (dist != SW_RANDOM_UNIFORM && dist != SW_RANDOM_NORMAL)
        return sw_fail(ctx, SW_EINVAL, "unknown random distribution %d", (int)dist);
    if (!isfinite(a) || !isfinite(b) || (dist == SW_RANDOM_NORMAL && b < 0.0) ||
        (dist == SW_RANDOM_UNIFORM && !(a < b)))
        return sw_fail(ctx, SW_EINVAL, "random fill parameters %g, %g are not valid", a, b);
    int on_gpu = ctx && ctx->backend == SW_BACKEND_CUDA;
#ifdef SW_HAVE_CUDA
    if (on_gpu && !is_host(img))
        return sw_cuda_fill_random(ctx, img, seed, stream, (int)dist, a, b);
#endif
    if (!is_host(img) && !on_gpu)
        return sw_fail(ctx, SW_ENODEV, "device images need a context on the CUDA backend");
#pragma omp parallel for num_threads(sw_context_threads(ctx)) schedule(static)
    for (int32_t y = 0; y < img->height; y++) {
        float *row = sw_image_row(img, y);
        for (int32_t x = 0; x < img->width; x++)
            row[x] = random_value(seed, stream, (uint64_t)y * (uint64_t)img->width + (uint64_t)x,
                                  dist, a, b);
    }
    return SW_OK;
}
