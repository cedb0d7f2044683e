/*
 * Wavefront maps (zernike_fit.h, seed 001 section 3.4): the API, its checks, the basis maps and
 * the CPU maps; the GPU twin is zmap_cuda.cu, the layout of the maps zmap_internal.h.
 *
 * Seed 001 section 3.4: "the wavefront map of each Zernike polynomial is first calculated. These
 * calculations are done only once since the result can be reused. Afterwards, the map of each
 * polynomial is added, weighted by the value of its corresponding Zernike coefficient. The
 * modulo 1 of the value of each pixel is calculated and stored in the output image. Finally, the
 * values of the image are scaled to be between 0 and 255." The plan holds the maps Z_j
 * (sw_zernike_eval at the pixel centres, in double, stored as float or IEEE half: the seed's
 * optimisation 2), sw_zmap_run forms W = sum_j c_j Z_j summed in float, sw_zmap_wrap the
 * modulo-1 display.
 */
#include "core/core_internal.h"
#include "spotwave/io.h"
#include "zernike/zmap_internal.h"

#ifdef SW_HAVE_CUDA
#include "core/core_cuda.h"
#endif

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ IEEE half */

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* binary32: sign 1, exponent 8 (bias 127), fraction 23; binary16: 1, 5 (bias 15), 10. */
uint16_t sw_half_from_float(float f)
{
    const uint32_t x = float_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: a quiet NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (ax >= 0x47800000u) /* |f| >= 2^16 (and Inf): Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        /* |f| >= 2^-14, a normal half: rebias the exponent (127 - 15 = 112) and drop 13 bits of
         * fraction, rounding to nearest even; a carry runs into the exponent as it should
         * (65520 and above become Inf). */
        uint32_t h = (ax - (112u << 23)) >> 13;
        const uint32_t rest = ax & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    const uint32_t e = ax >> 23;
    if (e < 102u) /* |f| < 2^-25: below half the smallest subnormal, rounds to 0 */
        return sign;
    /* A subnormal half m 2^-24: m = mant 2^(e - 150) / 2^-24 = mant >> (126 - e), rounded to
     * nearest even (m may round up to 0x400, the smallest normal, which is the right code). */
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e; /* 14 .. 24 */
    uint32_t m = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (m & 1u)))
        m++;
    return (uint16_t)(sign | m);
}

float sw_half_to_float(uint16_t h)
{
    const uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    const uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
    if (e == 0x1fu) /* Inf, NaN (payload kept) */
        return bits_float(sign | 0x7f800000u | (m << 13));
    if (e == 0u) { /* zero or subnormal: m 2^-24, exact in float */
        const float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* ------------------------------------------------------------------ the pixel grid */

int sw_zmap_inside(int32_t size, double obscuration, int32_t i, int32_t k)
{
    const double s = (double)size;
    const double x = (double)(2 * (int64_t)i + 1) / s - 1.0;
    const double y = (double)(2 * (int64_t)k + 1) / s - 1.0;
    const double xx = x * x, yy = y * y;
    const double r2 = xx + yy; /* no contraction: -ffp-contract=off */
    return r2 <= 1.0 && r2 >= obscuration * obscuration;
}

/* ------------------------------------------------------------------ parameters and plans */

void sw_zmap_params_default(sw_zmap_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->size = 256;
    p->max_order = 6;
    p->obscuration = 0.0;
    p->half = 0;
}

static sw_status check_params(sw_context *ctx, const sw_zmap_params *p)
{
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "sw_zmap_create: params is NULL");
    if (p->size < 1 || p->size > SW_ZMAP_MAX_SIZE)
        return sw_fail(ctx, SW_EINVAL, "wavefront map: size %d is outside 1 .. %d", (int)p->size,
                       SW_ZMAP_MAX_SIZE);
    if (p->max_order < 0 || p->max_order > SW_ZMAP_MAX_ORDER)
        return sw_fail(ctx, SW_EINVAL, "wavefront map: radial order %d is outside 0 .. %d",
                       (int)p->max_order, SW_ZMAP_MAX_ORDER);
    if (!(p->obscuration >= 0.0 && p->obscuration < 1.0))
        return sw_fail(ctx, SW_EINVAL,
                       "wavefront map: obscuration %g is outside [0, 1) (a fraction of the pupil "
                       "radius)",
                       p->obscuration);
    if (p->half != 0 && p->half != 1)
        return sw_fail(ctx, SW_EINVAL, "wavefront map: half is %d, expected 0 (float) or 1 (half)",
                       p->half);
    return SW_OK;
}

/* The stored spans of the rows (zmap_internal.h). */
static sw_status make_rows(sw_zmap_plan *pl)
{
    const int32_t n = pl->p.size;
    pl->row_a = malloc((size_t)n * sizeof *pl->row_a);
    pl->row_len = malloc((size_t)n * sizeof *pl->row_len);
    pl->row_off = malloc((size_t)n * sizeof *pl->row_off);
    if (!pl->row_a || !pl->row_len || !pl->row_off)
        return sw_fail(pl->ctx, SW_ENOMEM, "wavefront map: out of memory for %d rows", (int)n);
    int64_t off = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t first = -1, last = -1;
        for (int32_t i = 0; i < n; i++)
            if (sw_zmap_inside(n, pl->p.obscuration, i, k)) {
                if (first < 0)
                    first = i;
                last = i;
            }
        if (first < 0) {
            pl->row_a[k] = 0;
            pl->row_len[k] = 0;
        } else {
            const int32_t a = first - first % SW_ZMAP_VEC;
            const int32_t b = (last + SW_ZMAP_VEC) - (last + SW_ZMAP_VEC) % SW_ZMAP_VEC;
            pl->row_a[k] = a;
            pl->row_len[k] = b - a;
        }
        pl->row_off[k] = (int32_t)off;
        off += pl->row_len[k];
    }
    pl->npix = off < SW_ZMAP_VEC ? SW_ZMAP_VEC : off; /* never an empty allocation */
    return SW_OK;
}

/* Map j at the stored pixels into dst (float or half as the plan says): Z_j at the pixel
 * centres inside the pupil, NaN at the others. */
static void fill_basis(const sw_zmap_plan *pl, int32_t j, void *dst)
{
    int n, m;
    sw_zernike_osa_nm(j, &n, &m);
    const int32_t size = pl->p.size;
    const double s = (double)size;
    const int half = pl->p.half;
#pragma omp parallel for schedule(dynamic, 4) num_threads(pl->threads)
    for (int32_t k = 0; k < size; k++) {
        const double y = (double)(2 * (int64_t)k + 1) / s - 1.0;
        for (int32_t q = 0; q < pl->row_len[k]; q++) {
            const int32_t i = pl->row_a[k] + q;
            float v = NAN;
            if (i < size && sw_zmap_inside(size, pl->p.obscuration, i, k)) {
                const double x = (double)(2 * (int64_t)i + 1) / s - 1.0;
                v = (float)sw_zernike_eval(n, m, x, y);
            }
            const int64_t at = (int64_t)pl->row_off[k] + q;
            if (half)
                ((uint16_t *)dst)[at] = sw_half_from_float(v);
            else
                ((float *)dst)[at] = v;
        }
    }
}

void sw_zmap_destroy(sw_zmap_plan *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    if (plan->cuda)
        sw_zmap_cuda_free(plan);
#endif
    free(plan->row_a);
    free(plan->row_len);
    free(plan->row_off);
    free(plan->basis);
    free(plan->lut);
    free(plan->acc);
    free(plan);
}

sw_status sw_zmap_create(sw_context *ctx, const sw_zmap_params *p, sw_zmap_plan **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_zmap_create: out is NULL");
    *out = NULL;
    if (!ctx)
        return sw_fail(ctx, SW_EINVAL, "sw_zmap_create: ctx is NULL");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;
    sw_zmap_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return sw_fail(ctx, SW_ENOMEM, "wavefront map: out of memory for the plan");
    pl->ctx = ctx;
    pl->p = *p;
    pl->terms = sw_zernike_count(p->max_order);
    pl->cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    pl->threads = sw_context_threads(ctx) > 0 ? sw_context_threads(ctx) : 1;
    st = make_rows(pl);
    if (st != SW_OK)
        goto fail;
    const size_t elem = p->half ? sizeof(uint16_t) : sizeof(float);
    size_t bytes;
    if (!sw_mul_ok((size_t)pl->npix, elem, &bytes) ||
        !sw_mul_ok(bytes, (size_t)pl->terms, &bytes)) {
        st = sw_fail(ctx, SW_ENOMEM, "wavefront map: the basis maps do not fit in memory");
        goto fail;
    }
    if (pl->cuda) {
#ifdef SW_HAVE_CUDA
        /* The maps are computed on the host, a few at a time, and uploaded (so that the host
         * never holds all of them). */
        st = sw_zmap_cuda_alloc(pl);
        if (st != SW_OK)
            goto fail;
        void *tmp = malloc((size_t)pl->npix * elem);
        if (!tmp) {
            st = sw_fail(ctx, SW_ENOMEM, "wavefront map: out of host memory for a basis map");
            goto fail;
        }
        for (int32_t j = 0; j < pl->terms && st == SW_OK; j++) {
            fill_basis(pl, j, tmp);
            st = sw_zmap_cuda_upload(pl, j, 1, tmp);
        }
        free(tmp);
        if (st != SW_OK)
            goto fail;
#else
        st = sw_fail(ctx, SW_EINTERNAL, "wavefront map: CUDA context in a build without CUDA");
        goto fail;
#endif
    } else {
        pl->basis = malloc(bytes);
        size_t acc_n;
        if (!sw_mul_ok((size_t)pl->threads, (size_t)p->size + SW_ZMAP_VEC, &acc_n))
            acc_n = 0;
        pl->acc = acc_n ? malloc(acc_n * sizeof *pl->acc) : NULL;
        if (p->half)
            pl->lut = malloc(65536 * sizeof *pl->lut);
        if (!pl->basis || !pl->acc || (p->half && !pl->lut)) {
            st = sw_fail(ctx, SW_ENOMEM,
                         "wavefront map: out of memory for %d basis maps of %lld pixels (%.1f MB)",
                         (int)pl->terms, (long long)pl->npix, (double)bytes / 1e6);
            goto fail;
        }
        if (p->half)
            for (uint32_t h = 0; h < 65536u; h++)
                pl->lut[h] = sw_half_to_float((uint16_t)h);
        for (int32_t j = 0; j < pl->terms; j++)
            fill_basis(pl, j, (char *)pl->basis + (size_t)j * (size_t)pl->npix * elem);
    }
    *out = pl;
    return SW_OK;
fail:
    sw_zmap_destroy(pl);
    return st;
}

/* ------------------------------------------------------------------ run */

/* The checks of sw_zmap_run (and of the direct method): SW_OK or SW_EINVAL. */
static sw_status check_run(sw_zmap_plan *plan, const double *coef, int32_t count,
                           const sw_image *out)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_zmap_run: plan is NULL");
    sw_context *ctx = plan->ctx;
    if (count < 0 || count > plan->terms)
        return sw_fail(ctx, SW_EINVAL,
                       "wavefront map: %d coefficients given, the plan has %d terms (order %d)",
                       (int)count, (int)plan->terms, (int)plan->p.max_order);
    if (count > 0 && !coef)
        return sw_fail(ctx, SW_EINVAL, "wavefront map: coef is NULL");
    for (int32_t j = 0; j < count; j++)
        if (!isfinite(coef[j]) || fabs(coef[j]) > 1e30)
            return sw_fail(ctx, SW_EINVAL, "wavefront map: coefficient j = %d is %g", (int)j,
                           coef[j]);
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "wavefront map: out is NULL");
    sw_status st = sw_image_check(ctx, out);
    if (st != SW_OK)
        return st;
    if (out->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "wavefront map: the output is %s, expected f32",
                       sw_pixel_type_string(out->type));
    if (out->width != plan->p.size || out->height != plan->p.size)
        return sw_fail(ctx, SW_EINVAL, "wavefront map: the output is %dx%d, the plan's map %dx%d",
                       (int)out->width, (int)out->height, (int)plan->p.size, (int)plan->p.size);
    if (out->memory == SW_MEM_DEVICE && !plan->cuda)
        return sw_fail(ctx, SW_EINVAL,
                       "wavefront map: the output is in device memory but the plan is on the CPU");
    return SW_OK;
}

/* One row of the map from the row's accumulators (NaN outside the stored span). */
static void write_row(const sw_zmap_plan *pl, int32_t k, const float *acc, float *o)
{
    const int32_t size = pl->p.size, a = pl->row_a[k], len = pl->row_len[k];
    const int32_t b = a + len < size ? a + len : size;
    if (len == 0) {
        for (int32_t i = 0; i < size; i++)
            o[i] = NAN;
        return;
    }
    for (int32_t i = 0; i < a; i++)
        o[i] = NAN;
    for (int32_t i = a; i < b; i++)
        o[i] = acc[i - a];
    for (int32_t i = b; i < size; i++)
        o[i] = NAN;
}

/* W = sum_{j < nterms} c_j Z_j on the CPU, row by row: each row's stored span accumulated in
 * float over the maps (contiguous loops the compiler vectorises), then written out. */
static void run_cpu(sw_zmap_plan *pl, const float *c, int32_t nterms, sw_image *out)
{
    const int32_t size = pl->p.size;
    const size_t npix = (size_t)pl->npix;
#pragma omp parallel for schedule(dynamic, 8) num_threads(pl->threads)
    for (int32_t k = 0; k < size; k++) {
        float *restrict acc = pl->acc + (size_t)sw_omp_thread() * ((size_t)size + SW_ZMAP_VEC);
        const int32_t len = pl->row_len[k];
        const size_t off = (size_t)pl->row_off[k];
        for (int32_t q = 0; q < len; q++)
            acc[q] = 0.0f;
        if (pl->p.half) {
            const float *restrict lut = pl->lut;
            for (int32_t j = 0; j < nterms; j++) {
                const uint16_t *restrict b = (const uint16_t *)pl->basis + (size_t)j * npix + off;
                const float cj = c[j];
                for (int32_t q = 0; q < len; q++)
                    acc[q] += cj * lut[b[q]];
            }
        } else {
            for (int32_t j = 0; j < nterms; j++) {
                const float *restrict b = (const float *)pl->basis + (size_t)j * npix + off;
                const float cj = c[j];
                for (int32_t q = 0; q < len; q++)
                    acc[q] += cj * b[q];
            }
        }
        write_row(pl, k, acc, sw_image_row(out, k));
    }
}

sw_status sw_zmap_run(sw_zmap_plan *plan, const double *coef, int32_t count, sw_image *out)
{
    sw_status st = check_run(plan, coef, count, out);
    if (st != SW_OK)
        return st;
    /* At least map 0 is summed (with a zero coefficient when none is given): it carries the NaN
     * of the pixels outside the pupil. */
    float c[SW_ZMAP_MAX_TERMS];
    const int32_t nterms = count > 0 ? count : 1;
    for (int32_t j = 0; j < nterms; j++)
        c[j] = j < count ? (float)coef[j] : 0.0f;
    if (!plan->cuda) {
        run_cpu(plan, c, nterms, out);
        return SW_OK;
    }
#ifdef SW_HAVE_CUDA
    if (out->memory == SW_MEM_DEVICE)
        return sw_zmap_cuda_run(plan, c, nterms, out);
    sw_image stage;
    st = sw_cuda_staging_image(plan->ctx, 0, out->width, out->height, SW_PIX_F32, &stage);
    if (st == SW_OK)
        st = sw_zmap_cuda_run(plan, c, nterms, &stage);
    if (st == SW_OK)
        st = sw_image_copy(plan->ctx, &stage, out);
    return st;
#else
    return sw_fail(plan->ctx, SW_EINTERNAL, "wavefront map: CUDA plan in a build without CUDA");
#endif
}

/* ------------------------------------------------------------------ the direct method */

/* The polynomials A_k, B_k of zmap_internal.h: for Z_n^m = N P(t) Re/Im(w^k), k = |m|,
 * P(t) = sum_{s=0}^{b} c_s t^(b-s), b = (n - k) / 2, c_0 = binomial(n, b),
 * c_{s+1} = -c_s (a - s)(b - s) / ((s + 1)(n - s)), a = (n + k) / 2 (zernike_basis.c). */
static void make_poly(const double *coef, int32_t count, sw_zmap_poly *poly)
{
    memset(poly, 0, sizeof *poly);
    int nmax = 0, mlast = 0;
    if (count > 0)
        sw_zernike_osa_nm(count - 1, &nmax, &mlast);
    poly->kmax = nmax;
    for (int k = 0; k <= nmax; k++)
        poly->deg[k] = (nmax - k) / 2;
    for (int32_t j = 0; j < count; j++) {
        int n, m;
        sw_zernike_osa_nm(j, &n, &m);
        const int k = abs(m), a = (n + k) / 2, b = (n - k) / 2;
        const double norm = m == 0 ? sqrt((double)(n + 1)) : sqrt(2.0 * (double)(n + 1));
        double cs = 1.0;
        for (int i = 1; i <= b; i++)
            cs = cs * (double)(a + i) / (double)i;
        for (int s = 0; s <= b; s++) {
            if (m >= 0)
                poly->a[k][b - s] += coef[j] * norm * cs;
            else
                poly->b[k][b - s] += coef[j] * norm * cs;
            if (s < b)
                cs = -cs * (double)(a - s) * (double)(b - s) / ((double)(s + 1) * (double)(n - s));
        }
    }
}

static void direct_cpu(const sw_zmap_plan *pl, const sw_zmap_poly *poly, sw_image *out)
{
    const int32_t size = pl->p.size;
    const double s = (double)size;
#pragma omp parallel for schedule(dynamic, 8) num_threads(pl->threads)
    for (int32_t k = 0; k < size; k++) {
        float *o = sw_image_row(out, k);
        const double y = (double)(2 * (int64_t)k + 1) / s - 1.0;
        for (int32_t i = 0; i < size; i++) {
            if (!sw_zmap_inside(size, pl->p.obscuration, i, k)) {
                o[i] = NAN;
                continue;
            }
            const double x = (double)(2 * (int64_t)i + 1) / s - 1.0;
            const double t = x * x + y * y;
            double cw = 1.0, sw = 0.0, w = 0.0;
            for (int kk = 0; kk <= poly->kmax; kk++) {
                if (kk > 0) { /* (cw + i sw) (x + i y) */
                    const double c2 = cw * x - sw * y;
                    sw = cw * y + sw * x;
                    cw = c2;
                }
                double pa = poly->a[kk][poly->deg[kk]], pb = poly->b[kk][poly->deg[kk]];
                for (int p = poly->deg[kk] - 1; p >= 0; p--) {
                    pa = pa * t + poly->a[kk][p];
                    pb = pb * t + poly->b[kk][p];
                }
                w += pa * cw + pb * sw;
            }
            o[i] = (float)w;
        }
    }
}

sw_status sw_zmap_run_direct(sw_zmap_plan *plan, const double *coef, int32_t count, sw_image *out)
{
    sw_status st = check_run(plan, coef, count, out);
    if (st != SW_OK)
        return st;
    sw_zmap_poly poly;
    make_poly(coef, count, &poly);
    if (!plan->cuda) {
        direct_cpu(plan, &poly, out);
        return SW_OK;
    }
#ifdef SW_HAVE_CUDA
    if (out->memory == SW_MEM_DEVICE)
        return sw_zmap_cuda_direct(plan, &poly, out);
    sw_image stage;
    st = sw_cuda_staging_image(plan->ctx, 0, out->width, out->height, SW_PIX_F32, &stage);
    if (st == SW_OK)
        st = sw_zmap_cuda_direct(plan, &poly, &stage);
    if (st == SW_OK)
        st = sw_image_copy(plan->ctx, &stage, out);
    return st;
#else
    return sw_fail(plan->ctx, SW_EINTERNAL, "wavefront map: CUDA plan in a build without CUDA");
#endif
}

/* ------------------------------------------------------------------ display */

/* The seed's display value of one pixel: round(frac(W / wavelength) * 255), 0 outside the
 * pupil (non-finite W). Each operation rounded once in double (the GPU does the same). */
static uint8_t wrap_value(float w, double wavelength_um)
{
    if (!isfinite(w))
        return 0;
    const double q = (double)w / wavelength_um;
    const double f = q - floor(q); /* in [0, 1] (1 only by rounding of a tiny negative q) */
    double v = nearbyint(f * 255.0);
    return (uint8_t)(v > 255.0 ? 255.0 : v);
}

sw_status sw_zmap_wrap(sw_context *ctx, const sw_image *map, double wavelength_um, sw_image *out)
{
    if (!map || !out)
        return sw_fail(ctx, SW_EINVAL, "sw_zmap_wrap: %s is NULL", map ? "out" : "map");
    sw_status st = sw_image_check(ctx, map);
    if (st == SW_OK)
        st = sw_image_check(ctx, out);
    if (st != SW_OK)
        return st;
    if (!(isfinite(wavelength_um) && wavelength_um > 0.0))
        return sw_fail(ctx, SW_EINVAL, "sw_zmap_wrap: the wavelength %g um is not positive",
                       wavelength_um);
    if (map->type != SW_PIX_F32 || out->type != SW_PIX_U8)
        return sw_fail(ctx, SW_EINVAL,
                       "sw_zmap_wrap: expected an f32 map and a u8 output, got %s "
                       "and %s",
                       sw_pixel_type_string(map->type), sw_pixel_type_string(out->type));
    if (map->width != out->width || map->height != out->height)
        return sw_fail(ctx, SW_EINVAL, "sw_zmap_wrap: the map is %dx%d, the output %dx%d",
                       (int)map->width, (int)map->height, (int)out->width, (int)out->height);
    const int dmap = map->memory == SW_MEM_DEVICE, dout = out->memory == SW_MEM_DEVICE;
    if (dmap != dout)
        return sw_fail(ctx, SW_EINVAL,
                       "sw_zmap_wrap: the map and the output must both be on the host or both on "
                       "the device");
    if (dmap) {
        if (!ctx || sw_context_backend(ctx) != SW_BACKEND_CUDA)
            return sw_fail(ctx, SW_EINVAL,
                           "sw_zmap_wrap: device images need a context on the CUDA backend");
#ifdef SW_HAVE_CUDA
        return sw_zmap_cuda_wrap(ctx, map, wavelength_um, out);
#endif
    }
    const int threads = ctx && sw_context_threads(ctx) > 0 ? sw_context_threads(ctx) : 1;
    (void)threads;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int32_t k = 0; k < map->height; k++) {
        const float *w = sw_image_row(map, k);
        uint8_t *o = sw_image_row(out, k);
        for (int32_t i = 0; i < map->width; i++)
            o[i] = wrap_value(w[i], wavelength_um);
    }
    return SW_OK;
}

sw_status sw_zmap_write_png(sw_context *ctx, const char *path, const sw_image *map)
{
    if (!map)
        return sw_fail(ctx, SW_EINVAL, "sw_zmap_write_png: map is NULL");
    sw_status st = sw_image_check(ctx, map);
    if (st != SW_OK)
        return st;
    if (map->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "sw_zmap_write_png: the map is %s, expected f32",
                       sw_pixel_type_string(map->type));
    sw_png_options o;
    sw_png_options_default(&o);
    o.colormap = SW_CMAP_DIVERGING; /* automatic range: -max|W| .. max|W|, 0 white */
    o.scale_bar = 1;
    o.label = "um";
    o.nan_transparent = 1;
    if (map->memory != SW_MEM_DEVICE)
        return sw_png_write(ctx, path, map, &o);
    sw_image host;
    st = sw_image_alloc(ctx, map->width, map->height, SW_PIX_F32, &host);
    if (st != SW_OK)
        return st;
    st = sw_image_copy(ctx, map, &host);
    if (st == SW_OK)
        st = sw_png_write(ctx, path, &host, &o);
    sw_image_free(&host);
    return st;
}
