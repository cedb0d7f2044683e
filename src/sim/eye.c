/*
 * Synthetic eyes (sim_eye.h): the ocular population of seed 001 Sec. 4.1 (a multivariate normal
 * of the Thibos et al. 2002 statistics standing in for Castejon-Mochon et al. 2002), refraction
 * in power-vector form added to the second order (Thibos, Wheeler & Horner 1997, see the header),
 * the RMS scaling of Sec. 4.3 (RMS = sqrt(sum c_j^2), orthonormal Zernikes), and binocular HS
 * images with the artefacts of Sec. 1, 2.1 and 3.1: retinal glow behind each pupil (Fig. 2),
 * corneal reflections (Fig. 1d), brightness maps, tear-film break-up and white noise (Sec. 4.1).
 */
#include "core/core_internal.h"
#include "spotwave/sim_eye.h"
#include "spotwave/io.h"
#include "spotwave/rng.h"
#include "spotwave/zernike.h"
#include "spotwave/zernike_fit.h"

#include <errno.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

const double sw_ocular_pupils_mm[SW_OCULAR_PUPILS_COUNT] = {3.0, 4.5, 6.0, 7.5};

/* Largest covariance file read (the 7.5 mm one is 68 kB). */
#define MAX_FILE_BYTES (16u << 20)

/* Radial order of OSA index j. */
static int order_of(int32_t j)
{
    int n = 0;
    while ((n + 1) * (n + 2) / 2 <= j)
        n++;
    return n;
}

/* ------------------------------------------------------------------ data folder */

sw_status sw_ocular_default_dir(sw_context *ctx, char *buf, size_t size)
{
    if (!buf || size == 0)
        return sw_fail(ctx, SW_EINVAL, "sw_ocular_default_dir: NULL or empty buffer");
    char base[4096];
    sw_status st = sw_data_dir(ctx, base, sizeof base);
    if (st != SW_OK)
        return st;
    int n = snprintf(buf, size, "%s/ocular", base);
    if (n < 0 || (size_t)n >= size)
        return sw_fail(ctx, SW_EINVAL, "ocular data folder '%s/ocular' is too long", base);
    return SW_OK;
}

/* ------------------------------------------------------------------ population */

void sw_ocular_population_free(sw_ocular_population *p)
{
    if (!p)
        return;
    free(p->mean_um);
    free(p->sd_um);
    free(p->cov_um2);
    free(p->chol);
    memset(p, 0, sizeof *p);
}

/* Reads a whole file into a NUL-terminated buffer. */
static sw_status read_text(sw_context *ctx, const char *path, char **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sw_fail(ctx, SW_EIO, "%s: cannot open (%s)", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= MAX_FILE_BYTES) {
                free(buf);
                fclose(f);
                return sw_fail(ctx, SW_EFORMAT, "%s: larger than %u bytes: not a covariance file",
                               path, MAX_FILE_BYTES);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return sw_fail(ctx, SW_EIO, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    return SW_OK;
}

/* Parses the covariance file: '#' comment lines and blank lines skipped, then count rows of
 * count comma-separated numbers. */
static sw_status parse_cov(sw_context *ctx, const char *path, char *text, int32_t count,
                           double *cov)
{
    int32_t row = 0;
    long lineno = 0;
    char *line = text;
    while (line && *line) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (*p == '#' || *p == '\0') {
            line = next;
            continue;
        }
        if (row >= count)
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: line %ld: more than %d rows (the stats file has %d terms)", path,
                           lineno, count, count);
        for (int32_t k = 0; k < count; k++) {
            char *end = NULL;
            errno = 0;
            double v = strtod(p, &end);
            if (end == p || errno == ERANGE || !isfinite(v))
                return sw_fail(ctx, SW_EFORMAT, "%s: line %ld: value %d is not a finite number",
                               path, lineno, k + 1);
            cov[(size_t)row * (size_t)count + (size_t)k] = v;
            p = end;
            while (*p == ' ' || *p == '\t')
                p++;
            if (k < count - 1) {
                if (*p != ',')
                    return sw_fail(ctx, SW_EFORMAT,
                                   "%s: line %ld: %d values where %d were expected (one per term "
                                   "of the stats file)",
                                   path, lineno, k + 1, count);
                p++;
            }
        }
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (*p != '\0')
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: line %ld: more than %d values (one per term of the stats file)",
                           path, lineno, count);
        row++;
        line = next;
    }
    if (row != count)
        return sw_fail(ctx, SW_EFORMAT, "%s: %d rows where %d were expected", path, row, count);
    return SW_OK;
}

/* Reads the stats file into mean/sd (allocated here), setting *count. */
static sw_status load_stats(sw_context *ctx, const char *path, sw_ocular_population *out)
{
    sw_table t;
    memset(&t, 0, sizeof t);
    sw_status st = sw_csv_read(ctx, path, &t);
    if (st != SW_OK)
        return st;
    const char *names[5] = {"j", "n", "m", "mean_um", "sd_um"};
    int32_t col[5];
    for (int i = 0; i < 5; i++) {
        col[i] = sw_table_column(&t, names[i]);
        if (col[i] < 0) {
            sw_table_free(&t);
            return sw_fail(ctx, SW_EFORMAT, "%s: no column '%s' (expected j,n,m,mean_um,sd_um)",
                           path, names[i]);
        }
    }
    const int32_t max_terms = (int32_t)sw_zernike_count(SW_ZERNIKE_MAX_ORDER);
    if (t.nrows < 1 || t.nrows > max_terms) {
        sw_table_free(&t);
        return sw_fail(ctx, SW_EFORMAT, "%s: %lld terms; expected 1 to %d", path,
                       (long long)t.nrows, max_terms);
    }
    const int32_t count = (int32_t)t.nrows;
    out->mean_um = calloc((size_t)count, sizeof(double));
    out->sd_um = calloc((size_t)count, sizeof(double));
    if (!out->mean_um || !out->sd_um) {
        sw_table_free(&t);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    }
    for (int32_t r = 0; r < count; r++) {
        const double j = t.cols[col[0]][r], n = t.cols[col[1]][r], m = t.cols[col[2]][r];
        const double mean = t.cols[col[3]][r], sd = t.cols[col[4]][r];
        int jn = -1, jm = 0;
        if (j != (double)r) {
            sw_table_free(&t);
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: data row %d has j = %g; the rows must run j = 0, 1, 2, ... in "
                           "order",
                           path, r + 1, j);
        }
        if (sw_zernike_osa_nm(r, &jn, &jm) != SW_OK || n != (double)jn || m != (double)jm) {
            sw_table_free(&t);
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: data row %d: (n, m) = (%g, %g) is not OSA index j = %d (%d, %d)",
                           path, r + 1, n, m, r, jn, jm);
        }
        if (!isfinite(mean) || !isfinite(sd) || sd < 0.0) {
            sw_table_free(&t);
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: data row %d: mean %g, sd %g (finite, sd >= 0 expected)", path,
                           r + 1, mean, sd);
        }
        out->mean_um[r] = mean;
        out->sd_um[r] = sd;
    }
    sw_table_free(&t);
    out->count = count;
    return SW_OK;
}

sw_status sw_ocular_population_load(sw_context *ctx, const char *dir, double pupil_mm,
                                    sw_ocular_population *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_ocular_population_load: out is NULL");
    memset(out, 0, sizeof *out);
    int k = -1;
    for (int i = 0; i < SW_OCULAR_PUPILS_COUNT; i++)
        if (fabs(pupil_mm - sw_ocular_pupils_mm[i]) <= 1e-6)
            k = i;
    if (k < 0)
        return sw_fail(ctx, SW_EINVAL,
                       "ocular population: no statistics for a %g mm pupil (available: 3.0, 4.5, "
                       "6.0, 7.5 mm; smaller pupils are reached by rescaling)",
                       pupil_mm);
    char defdir[4096];
    if (!dir) {
        sw_status st = sw_ocular_default_dir(ctx, defdir, sizeof defdir);
        if (st != SW_OK)
            return st;
        dir = defdir;
    }
    char stats[4200], covp[4200];
    int n1 = snprintf(stats, sizeof stats, "%s/thibos2002_pupil%.1fmm_stats.csv", dir,
                      sw_ocular_pupils_mm[k]);
    int n2 = snprintf(covp, sizeof covp, "%s/thibos2002_pupil%.1fmm_cov.csv", dir,
                      sw_ocular_pupils_mm[k]);
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof stats || (size_t)n2 >= sizeof covp)
        return sw_fail(ctx, SW_EINVAL, "ocular population: folder name '%s' is too long", dir);

    sw_ocular_population p;
    memset(&p, 0, sizeof p);
    p.pupil_mm = sw_ocular_pupils_mm[k];
    sw_status st = load_stats(ctx, stats, &p);
    if (st != SW_OK) {
        sw_ocular_population_free(&p);
        return st;
    }
    const size_t n = (size_t)p.count;
    p.cov_um2 = calloc(n * n, sizeof(double));
    p.chol = calloc(n * n, sizeof(double));
    if (!p.cov_um2 || !p.chol) {
        sw_ocular_population_free(&p);
        return sw_fail(ctx, SW_ENOMEM, "ocular population: out of memory");
    }
    char *text = NULL;
    st = read_text(ctx, covp, &text);
    if (st == SW_OK)
        st = parse_cov(ctx, covp, text, p.count, p.cov_um2);
    free(text);
    if (st != SW_OK) {
        sw_ocular_population_free(&p);
        return st;
    }
    /* Symmetric, and consistent with the stats file's standard deviations. */
    for (size_t i = 0; i < n; i++) {
        const double cii = p.cov_um2[i * n + i];
        if (!(cii > 0.0)) {
            sw_ocular_population_free(&p);
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: variance of term j = %zu is %g: not positive definite", covp, i,
                           cii);
        }
        const double sd = sqrt(cii);
        if (fabs(sd - p.sd_um[i]) > 1e-5 + 1e-3 * p.sd_um[i]) {
            st = sw_fail(ctx, SW_EFORMAT,
                         "%s: term j = %zu has variance %g (sd %g um) but %s gives sd %g um", covp,
                         i, cii, sd, stats, p.sd_um[i]);
            sw_ocular_population_free(&p);
            return st;
        }
        for (size_t jj = 0; jj < i; jj++) {
            const double a = p.cov_um2[i * n + jj], b = p.cov_um2[jj * n + i];
            const double scale = sqrt(cii * p.cov_um2[jj * n + jj]);
            if (fabs(a - b) > 1e-9 * scale) {
                sw_ocular_population_free(&p);
                return sw_fail(ctx, SW_EFORMAT,
                               "%s: not symmetric: entry (%zu, %zu) = %g but (%zu, %zu) = %g", covp,
                               i, jj, a, jj, i, b);
            }
            const double avg = 0.5 * (a + b);
            p.cov_um2[i * n + jj] = p.cov_um2[jj * n + i] = avg;
        }
    }
    memcpy(p.chol, p.cov_um2, n * n * sizeof(double));
    lapack_int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)n, p.chol, (lapack_int)n);
    if (info != 0) {
        sw_ocular_population_free(&p);
        if (info > 0)
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: the covariance is not positive definite (Cholesky fails at term "
                           "j = %d)",
                           covp, (int)info - 1);
        return sw_fail(ctx, SW_EINTERNAL, "ocular population: LAPACKE_dpotrf argument %d",
                       (int)-info);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t jj = i + 1; jj < n; jj++)
            p.chol[i * n + jj] = 0.0;
    *out = p;
    return SW_OK;
}

/* ------------------------------------------------------------------ coefficients */

void sw_eye_rx_to_zernike(const sw_eye_rx *rx, double pupil_mm, double out[3])
{
    const double r2 = 0.25 * pupil_mm * pupil_mm;
    const double a = 2.0 * rx->axis_deg * PI / 180.0;
    const double M = rx->sphere_d + 0.5 * rx->cyl_d;
    const double J0 = -0.5 * rx->cyl_d * cos(a);
    const double J45 = -0.5 * rx->cyl_d * sin(a);
    out[0] = -J45 * r2 / (2.0 * sqrt(6.0));
    out[1] = -M * r2 / (4.0 * sqrt(3.0));
    out[2] = -J0 * r2 / (2.0 * sqrt(6.0));
}

sw_status sw_ocular_rescale(sw_context *ctx, const double *in, int32_t count, double from_mm,
                            double to_mm, double *out)
{
    return sw_zernike_rescale(ctx, in, count, from_mm, to_mm, out);
}

void sw_ocular_options_default(sw_ocular_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->max_order = -1;
}

sw_status sw_ocular_apply(sw_context *ctx, const double *in, int32_t in_count, double in_pupil_mm,
                          const sw_ocular_options *opt, double *out, int32_t count)
{
    const int32_t max_terms = (int32_t)sw_zernike_count(SW_ZERNIKE_MAX_ORDER);
    sw_ocular_options def;
    if (!opt) {
        sw_ocular_options_default(&def);
        opt = &def;
    }
    if (!in || !out)
        return sw_fail(ctx, SW_EINVAL, "sw_ocular_apply: NULL coefficients");
    if (in_count < 1 || in_count > max_terms || count < 1 || count > max_terms)
        return sw_fail(ctx, SW_EINVAL, "ocular coefficients: %d in, %d out (1 to %d each)",
                       in_count, count, max_terms);
    if (!isfinite(in_pupil_mm) || !(in_pupil_mm > 0.0))
        return sw_fail(ctx, SW_EINVAL, "ocular coefficients: pupil %g mm is not positive",
                       in_pupil_mm);
    if (!isfinite(opt->pupil_mm) || opt->pupil_mm < 0.0 || opt->pupil_mm > in_pupil_mm)
        return sw_fail(ctx, SW_EINVAL,
                       "ocular coefficients: cannot go from a %g mm pupil to %g mm (only to a "
                       "smaller pupil)",
                       in_pupil_mm, opt->pupil_mm);
    if (!isfinite(opt->rx.sphere_d) || !isfinite(opt->rx.cyl_d) || !isfinite(opt->rx.axis_deg))
        return sw_fail(ctx, SW_EINVAL, "ocular coefficients: refraction %g/%g x %g is not finite",
                       opt->rx.sphere_d, opt->rx.cyl_d, opt->rx.axis_deg);
    if (!isfinite(opt->total_rms_um) || opt->total_rms_um < 0.0)
        return sw_fail(ctx, SW_EINVAL, "ocular coefficients: RMS %g um is not >= 0",
                       opt->total_rms_um);
    const int have_rx = opt->rx.sphere_d != 0.0 || opt->rx.cyl_d != 0.0;
    if (have_rx && (count < 6 || (opt->max_order >= 0 && opt->max_order < 2)))
        return sw_fail(ctx, SW_EINVAL,
                       "ocular coefficients: a refraction needs the second order (%d terms, "
                       "order <= %d)",
                       count, opt->max_order);
    for (int32_t j = 0; j < in_count; j++)
        if (!isfinite(in[j]))
            return sw_fail(ctx, SW_EINVAL, "ocular coefficients: j = %d is %g", j, in[j]);

    const int32_t n = in_count > count ? in_count : count;
    double *c = calloc((size_t)n, sizeof(double));
    if (!c)
        return sw_fail(ctx, SW_ENOMEM, "ocular coefficients: out of memory");
    memcpy(c, in, (size_t)in_count * sizeof(double));
    double pupil = in_pupil_mm;
    if (opt->pupil_mm > 0.0 && opt->pupil_mm != in_pupil_mm) {
        sw_status st = sw_ocular_rescale(ctx, c, in_count, in_pupil_mm, opt->pupil_mm, c);
        if (st != SW_OK) {
            free(c);
            return st;
        }
        pupil = opt->pupil_mm;
    }
    c[0] = 0.0;
    if (!opt->keep_tilt) {
        if (n > 1)
            c[1] = 0.0;
        if (n > 2)
            c[2] = 0.0;
    }
    if (opt->max_order >= 0)
        for (int32_t j = 0; j < n; j++)
            if (order_of(j) > opt->max_order)
                c[j] = 0.0;
    if (have_rx) {
        double z[3];
        sw_eye_rx_to_zernike(&opt->rx, pupil, z);
        c[3] += z[0];
        c[4] += z[1];
        c[5] += z[2];
    }
    if (opt->total_rms_um > 0.0) {
        double ss = 0.0;
        for (int32_t j = 3; j < count; j++)
            ss += c[j] * c[j];
        if (!(ss > 0.0)) {
            free(c);
            return sw_fail(ctx, SW_EINVAL,
                           "ocular coefficients: no aberration of order 2 or more to scale to an "
                           "RMS of %g um",
                           opt->total_rms_um);
        }
        const double f = opt->total_rms_um / sqrt(ss);
        for (int32_t j = 3; j < count; j++)
            c[j] *= f;
    }
    memcpy(out, c, (size_t)count * sizeof(double));
    free(c);
    return SW_OK;
}

sw_status sw_ocular_draw(sw_context *ctx, const sw_ocular_population *pop, uint64_t seed,
                         uint64_t index, const sw_ocular_options *opt, double *out, int32_t count)
{
    if (!pop || !pop->mean_um || !pop->chol || pop->count < 1)
        return sw_fail(ctx, SW_EINVAL, "sw_ocular_draw: the population is not loaded");
    if (index >= ((uint64_t)1 << 56))
        return sw_fail(ctx, SW_EINVAL, "sw_ocular_draw: eye index %llu is 2^56 or more",
                       (unsigned long long)index);
    const size_t n = (size_t)pop->count;
    double *z = malloc(n * sizeof(double));
    double *c = malloc(n * sizeof(double));
    if (!z || !c) {
        free(z);
        free(c);
        return sw_fail(ctx, SW_ENOMEM, "sw_ocular_draw: out of memory");
    }
    for (size_t b = 0; 2 * b < n; b++) {
        double z0, z1;
        sw_rng_normal2(sw_rng_draw(seed, SW_RNG_STREAM_EYE, index * 256u + b), &z0, &z1);
        z[2 * b] = z0;
        if (2 * b + 1 < n)
            z[2 * b + 1] = z1;
    }
    for (size_t i = 0; i < n; i++) {
        double v = pop->mean_um[i];
        for (size_t k = 0; k <= i; k++)
            v += pop->chol[i * n + k] * z[k];
        c[i] = v;
    }
    sw_status st = sw_ocular_apply(ctx, c, pop->count, pop->pupil_mm, opt, out, count);
    free(z);
    free(c);
    return st;
}

/* ------------------------------------------------------------------ eye images */

void sw_eye_artefacts_none(sw_eye_artefacts *a)
{
    if (!a)
        return;
    sw_eye_artefacts_default(a);
    a->glow_e = 0.0;
    a->reflection_e = 0.0;
    a->brightness = 0.0;
    a->tear_blobs = 0;
    a->white_noise_e = 0.0;
}

void sw_eye_artefacts_default(sw_eye_artefacts *a)
{
    if (!a)
        return;
    memset(a, 0, sizeof *a);
    a->glow_e = 20.0;
    a->glow_falloff = 0.3;
    a->glow_edge_px = 1.5;
    a->reflection_e = 600.0;
    a->reflection_sigma_px = 12.0;
    a->reflection_offset = 0.3;
    a->brightness = 0.3;
    a->brightness_modes = 6;
    a->tear_blobs = 0;
    a->tear_depth = 0.5;
    a->tear_radius = 0.15;
    a->tear_blur_px = 2.0;
    a->white_noise_e = 3.0;
}

void sw_eyesim_params_default(sw_eyesim_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    sw_shsim_params_default(&p->sh);
    p->sh.width = 640;
    p->sh.height = 640;
    sw_sh_geometry_default(&p->sh.geom);
    p->sh.geom.x0 = 0.0;
    p->sh.geom.y0 = 0.0;
    p->sh.geom.pitch_px = 32.0;
    p->sh.geom.nx = 20;
    p->sh.geom.ny = 20;
    p->sh.geom.pixel_um = 5.5;
    p->sh.geom.focal_mm = 3.5;
    p->sh.model = SW_SH_GEOMETRIC;
    p->sh.spot = SW_SH_SPOT_GAUSSIAN;
    p->sh.wavelength_um = 0.78;
    p->sh.flux_e = 2000.0;
    p->n_eyes = 1;
    p->eyes[0].cx_px = 319.5;
    p->eyes[0].cy_px = 319.5;
    p->eyes[0].diameter_px = 576.0;
    p->eyes[0].ellipticity = 1.0;
    p->eyes[0].angle_deg = 0.0;
    p->eyes[0].pupil_mm = 5.12;
    p->eyes[1] = p->eyes[0];
    sw_eye_artefacts_default(&p->art);
    p->seed = 1;
}

void sw_eyesim_truth_free(sw_eyesim_truth *t)
{
    if (!t)
        return;
    for (int e = 0; e < 2; e++) {
        free(t->eye[e].coef_um);
        sw_sh_truth_free(&t->eye[e].sh);
    }
    memset(t, 0, sizeof *t);
}

sw_pupil sw_eye_pupil(const sw_sh_geometry *g, const sw_eye *eye)
{
    sw_pupil p;
    memset(&p, 0, sizeof p);
    const double half_x = 0.5 * g->pitch_px * (double)g->nx;
    const double half_y = 0.5 * g->pitch_px * (double)g->ny;
    /* Inverse of sim_sh.h's x = x0 - 0.5 + d (u / p + nx / 2), with p / d = pixel_um. */
    p.cu_um = (eye->cx_px - g->x0 + 0.5 - half_x) * g->pixel_um;
    p.cv_um = (eye->cy_px - g->y0 + 0.5 - half_y) * g->pixel_um;
    p.a_um = 0.5 * eye->diameter_px * g->pixel_um;
    p.b_um = p.a_um * eye->ellipticity;
    p.angle_deg = eye->angle_deg;
    p.obscuration = 0.0;
    return p;
}

/* An eye's ellipse on the detector, for the artefact passes. */
typedef struct ellipse {
    double cx, cy, a, b, c, s; /* centre, semi-axes, cos and sin of the angle */
} ellipse;

static ellipse eye_ellipse(const sw_eye *e)
{
    ellipse q;
    q.cx = e->cx_px;
    q.cy = e->cy_px;
    q.a = 0.5 * e->diameter_px;
    q.b = q.a * e->ellipticity;
    q.c = cos(e->angle_deg * PI / 180.0);
    q.s = sin(e->angle_deg * PI / 180.0);
    return q;
}

/* Offset (dx, dy) in the ellipse's axes; returns the normalised radius rho. */
static double ellipse_rho(const ellipse *q, double dx, double dy, double *xp, double *yp)
{
    *xp = q->c * dx + q->s * dy;
    *yp = -q->s * dx + q->c * dy;
    const double u = *xp / q->a, v = *yp / q->b;
    return sqrt(u * u + v * v);
}

static sw_status check_eye(sw_context *ctx, int i, const sw_eye *e, int32_t w, int32_t h)
{
    if (!isfinite(e->cx_px) || !isfinite(e->cy_px) || !isfinite(e->diameter_px) ||
        !isfinite(e->ellipticity) || !isfinite(e->angle_deg) || !isfinite(e->pupil_mm))
        return sw_fail(ctx, SW_EINVAL, "eye %d: a pupil parameter is not finite", i);
    if (!(e->diameter_px > 0.0))
        return sw_fail(ctx, SW_EINVAL, "eye %d: pupil diameter %g px is not positive", i,
                       e->diameter_px);
    if (!(e->ellipticity > 0.0) || e->ellipticity > 1.0)
        return sw_fail(ctx, SW_EINVAL, "eye %d: ellipticity (minor/major) %g is not in (0, 1]", i,
                       e->ellipticity);
    if (!(e->pupil_mm > 0.0))
        return sw_fail(ctx, SW_EINVAL, "eye %d: pupil %g mm is not positive", i, e->pupil_mm);
    if (e->count < 0 || (e->count > 0 && !e->coef_um))
        return sw_fail(ctx, SW_EINVAL, "eye %d: %d coefficients but no array", i, e->count);
    for (int32_t j = 0; j < e->count; j++)
        if (!isfinite(e->coef_um[j]))
            return sw_fail(ctx, SW_EINVAL, "eye %d: coefficient j = %d is %g", i, j, e->coef_um[j]);
    const double r = 0.5 * e->diameter_px;
    if (e->cx_px + r < -0.5 || e->cx_px - r > (double)w - 0.5 || e->cy_px + r < -0.5 ||
        e->cy_px - r > (double)h - 0.5)
        return sw_fail(ctx, SW_EINVAL,
                       "eye %d: the pupil at (%g, %g) px of diameter %g px lies outside the %dx%d "
                       "image",
                       i, e->cx_px, e->cy_px, e->diameter_px, w, h);
    return SW_OK;
}

static sw_status check_artefacts(sw_context *ctx, const sw_eye_artefacts *a)
{
    const struct {
        const char *name;
        double v, lo, hi;
    } r[] = {
        {"glow_e", a->glow_e, 0.0, HUGE_VAL},
        {"glow_falloff", a->glow_falloff, 0.0, 1.0},
        {"glow_edge_px", a->glow_edge_px, 0.0, 1e4},
        {"reflection_e", a->reflection_e, 0.0, HUGE_VAL},
        {"reflection_sigma_px", a->reflection_sigma_px, 0.0, 1e4},
        {"reflection_offset", a->reflection_offset, 0.0, 1.0},
        {"brightness", a->brightness, 0.0, 0.999999},
        {"tear_depth", a->tear_depth, 0.0, 1.0},
        {"tear_radius", a->tear_radius, 0.0, 1.0},
        {"tear_blur_px", a->tear_blur_px, 0.0, 1e3},
        {"white_noise_e", a->white_noise_e, 0.0, HUGE_VAL},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (!isfinite(r[i].v) || r[i].v < r[i].lo || r[i].v > r[i].hi)
            return sw_fail(ctx, SW_EINVAL, "eye artefacts: %s = %g is outside [%g, %g]", r[i].name,
                           r[i].v, r[i].lo, r[i].hi);
    if (a->reflection_e > 0.0 && !(a->reflection_sigma_px > 0.0))
        return sw_fail(ctx, SW_EINVAL, "eye artefacts: a reflection needs reflection_sigma_px > 0");
    if (a->brightness > 0.0 && (a->brightness_modes < 1 || a->brightness_modes > 64))
        return sw_fail(ctx, SW_EINVAL, "eye artefacts: brightness_modes = %d is not in 1..64",
                       a->brightness_modes);
    if (a->tear_blobs < 0 || a->tear_blobs > 1000)
        return sw_fail(ctx, SW_EINVAL, "eye artefacts: tear_blobs = %d is not in 0..1000",
                       a->tear_blobs);
    if (a->tear_blobs > 0 && !(a->tear_radius > 0.0))
        return sw_fail(ctx, SW_EINVAL, "eye artefacts: tear-film blobs need tear_radius > 0");
    return SW_OK;
}

/* Random numbers of the artefacts (see the header). */
static sw_rng4 art_draw(uint64_t seed, int eye, int kind, uint64_t k)
{
    const uint64_t idx = ((uint64_t)eye << 48) | ((uint64_t)kind << 40) | k;
    return sw_rng_draw(seed, SW_RNG_STREAM_ARTEFACTS, idx);
}

#define ART_REFLECTION 1
#define ART_BRIGHTNESS 2
#define ART_TEAR       3
#define ART_WHITE      15

#define MAX_MODES 64

/* Per-eye artefact state. */
typedef struct eye_art {
    ellipse q;
    double refl_x, refl_y;               /* reflection centre (NaN: none) */
    int32_t modes;                       /* brightness plane waves */
    double kx[MAX_MODES], ky[MAX_MODES]; /* radians per pixel */
    double ph[MAX_MODES], wt[MAX_MODES]; /* phase, weight (sum of weights 1) */
    int32_t blobs;                       /* tear-film blobs */
    double *bx, *by, *bs;                /* centre, sigma (px) */
} eye_art;

static sw_status prepare_art(sw_context *ctx, const sw_eyesim_params *p, int e, eye_art *ea)
{
    const sw_eye_artefacts *a = &p->art;
    memset(ea, 0, sizeof *ea);
    ea->q = eye_ellipse(&p->eyes[e]);
    const ellipse *q = &ea->q;
    ea->refl_x = ea->refl_y = NAN;
    if (a->reflection_e > 0.0) {
        sw_rng4 r = art_draw(p->seed, e, ART_REFLECTION, 0);
        const double rad = a->reflection_offset * q->a * sqrt(sw_rng_u01(r.v[0], r.v[1]));
        const double th = 2.0 * PI * sw_rng_u01(r.v[2], r.v[3]);
        ea->refl_x = q->cx + rad * cos(th);
        ea->refl_y = q->cy + rad * sin(th);
    }
    if (a->brightness > 0.0) {
        ea->modes = a->brightness_modes;
        double wsum = 0.0;
        for (int32_t k = 0; k < ea->modes; k++) {
            sw_rng4 r = art_draw(p->seed, e, ART_BRIGHTNESS, (uint64_t)k);
            /* 0.25 .. 1 cycle per pupil radius, any direction, any phase, weight 0.2 .. 1. */
            const double f = (0.25 + 0.75 * (double)sw_rng_u01f(r.v[0])) / q->a;
            const double dir = 2.0 * PI * (double)sw_rng_u01f(r.v[1]);
            ea->kx[k] = 2.0 * PI * f * cos(dir);
            ea->ky[k] = 2.0 * PI * f * sin(dir);
            ea->ph[k] = 2.0 * PI * (double)sw_rng_u01f(r.v[2]);
            ea->wt[k] = 0.2 + 0.8 * (double)sw_rng_u01f(r.v[3]);
            wsum += ea->wt[k];
        }
        for (int32_t k = 0; k < ea->modes; k++)
            ea->wt[k] /= wsum;
    }
    if (a->tear_blobs > 0) {
        ea->blobs = a->tear_blobs;
        ea->bx = malloc((size_t)ea->blobs * sizeof(double));
        ea->by = malloc((size_t)ea->blobs * sizeof(double));
        ea->bs = malloc((size_t)ea->blobs * sizeof(double));
        if (!ea->bx || !ea->by || !ea->bs)
            return sw_fail(ctx, SW_ENOMEM, "eye image: out of memory");
        for (int32_t k = 0; k < ea->blobs; k++) {
            sw_rng4 r = art_draw(p->seed, e, ART_TEAR, (uint64_t)k);
            const double rad = sqrt((double)sw_rng_u01f(r.v[0]));
            const double th = 2.0 * PI * (double)sw_rng_u01f(r.v[1]);
            const double xp = q->a * rad * cos(th), yp = q->b * rad * sin(th);
            ea->bx[k] = q->cx + q->c * xp - q->s * yp;
            ea->by[k] = q->cy + q->s * xp + q->c * yp;
            ea->bs[k] = a->tear_radius * q->a * (0.5 + (double)sw_rng_u01f(r.v[2]));
        }
    }
    return SW_OK;
}

static void free_art(eye_art *ea)
{
    free(ea->bx);
    free(ea->by);
    free(ea->bs);
    ea->bx = ea->by = ea->bs = NULL;
}

/* The glow of one eye at a pixel. */
static double glow_at(const sw_eye_artefacts *a, const ellipse *q, double dx, double dy)
{
    double xp, yp;
    const double rho = ellipse_rho(q, dx, dy, &xp, &yp);
    const double prof = 1.0 - a->glow_falloff * (rho < 1.0 ? rho * rho : 1.0);
    if (a->glow_edge_px <= 0.0)
        return rho <= 1.0 ? a->glow_e * prof : 0.0;
    /* Signed distance to the edge along the ray from the centre: rb (rho - 1), rb the distance
     * from the centre to the edge in this direction (exact for a circle). */
    const double len = sqrt(xp * xp + yp * yp);
    const double rb = rho > 0.0 ? len / rho : q->a;
    const double d = rb * (rho - 1.0);
    if (d > 8.0 * a->glow_edge_px)
        return 0.0;
    return a->glow_e * prof * 0.5 * erfc(d / (sqrt(2.0) * a->glow_edge_px));
}

/* Separable Gaussian blur of a w x h double image (kernel renormalised at the edges). */
static sw_status blur(sw_context *ctx, const double *in, double *out, int32_t w, int32_t h,
                      double sigma)
{
    const int rad = (int)ceil(3.0 * sigma);
    double *k = malloc((size_t)(2 * rad + 1) * sizeof(double));
    double *tmp = malloc((size_t)w * (size_t)h * sizeof(double));
    if (!k || !tmp) {
        free(k);
        free(tmp);
        return sw_fail(ctx, SW_ENOMEM, "eye image: out of memory (tear-film blur)");
    }
    for (int i = -rad; i <= rad; i++)
        k[i + rad] = exp(-0.5 * (double)(i * i) / (sigma * sigma));
    const int nt = sw_context_threads(ctx);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            double s = 0.0, ws = 0.0;
            for (int i = -rad; i <= rad; i++) {
                const int32_t xx = x + i;
                if (xx < 0 || xx >= w)
                    continue;
                s += k[i + rad] * in[(size_t)y * (size_t)w + (size_t)xx];
                ws += k[i + rad];
            }
            tmp[(size_t)y * (size_t)w + (size_t)x] = s / ws;
        }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            double s = 0.0, ws = 0.0;
            for (int i = -rad; i <= rad; i++) {
                const int32_t yy = y + i;
                if (yy < 0 || yy >= h)
                    continue;
                s += k[i + rad] * tmp[(size_t)yy * (size_t)w + (size_t)x];
                ws += k[i + rad];
            }
            out[(size_t)y * (size_t)w + (size_t)x] = s / ws;
        }
    free(k);
    free(tmp);
    return SW_OK;
}

/* The artefact passes on the host image (see the header for the order). */
static sw_status apply_artefacts(sw_context *ctx, const sw_eyesim_params *p, sw_image *img,
                                 eye_art *ea)
{
    const sw_eye_artefacts *a = &p->art;
    const int32_t w = img->width, h = img->height;
    const int ne = p->n_eyes;
    const int nt = sw_context_threads(ctx);
    const int any = a->glow_e > 0.0 || a->reflection_e > 0.0 || a->brightness > 0.0 ||
                    a->tear_blobs > 0 || a->white_noise_e > 0.0;
    if (!any)
        return SW_OK;
    const int blend = a->tear_blobs > 0 && a->tear_blur_px > 0.0;
    const size_t npx = (size_t)w * (size_t)h;
    double *base = NULL, *wgt = NULL, *blurred = NULL;
    if (blend) {
        base = malloc(npx * sizeof(double));
        wgt = malloc(npx * sizeof(double));
        blurred = malloc(npx * sizeof(double));
        if (!base || !wgt || !blurred) {
            free(base);
            free(wgt);
            free(blurred);
            return sw_fail(ctx, SW_ENOMEM, "eye image: out of memory (tear film)");
        }
    }
    /* Pass 1: (spots + glow) x brightness x tear dip. */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int32_t y = 0; y < h; y++) {
        float *row = sw_image_row(img, y);
        for (int32_t x = 0; x < w; x++) {
            double v = (double)row[x];
            int sel = 0;
            double best = HUGE_VAL;
            for (int e = 0; e < ne; e++) {
                const double dx = (double)x - ea[e].q.cx, dy = (double)y - ea[e].q.cy;
                if (a->glow_e > 0.0)
                    v += glow_at(a, &ea[e].q, dx, dy);
                double xp, yp;
                const double rho = ellipse_rho(&ea[e].q, dx, dy, &xp, &yp);
                if (rho < best) {
                    best = rho;
                    sel = e;
                }
            }
            if (a->brightness > 0.0) {
                const eye_art *s = &ea[sel];
                const double dx = (double)x - s->q.cx, dy = (double)y - s->q.cy;
                double m = 0.0;
                for (int32_t k = 0; k < s->modes; k++)
                    m += s->wt[k] * cos(s->kx[k] * dx + s->ky[k] * dy + s->ph[k]);
                v *= 1.0 + a->brightness * m;
            }
            double wb = 0.0;
            if (a->tear_blobs > 0) {
                double dip = 1.0;
                for (int e = 0; e < ne; e++)
                    for (int32_t k = 0; k < ea[e].blobs; k++) {
                        const double dx = (double)x - ea[e].bx[k], dy = (double)y - ea[e].by[k];
                        const double r2 = (dx * dx + dy * dy) / (ea[e].bs[k] * ea[e].bs[k]);
                        if (r2 > 50.0)
                            continue;
                        const double g = exp(-0.5 * r2);
                        dip *= 1.0 - a->tear_depth * g;
                        wb += g;
                    }
                v *= dip;
            }
            if (blend) {
                base[(size_t)y * (size_t)w + (size_t)x] = v;
                wgt[(size_t)y * (size_t)w + (size_t)x] = wb < 1.0 ? wb : 1.0;
            } else {
                row[x] = (float)v;
            }
        }
    }
    if (blend) {
        sw_status st = blur(ctx, base, blurred, w, h, a->tear_blur_px);
        if (st != SW_OK) {
            free(base);
            free(wgt);
            free(blurred);
            return st;
        }
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int32_t y = 0; y < h; y++) {
            float *row = sw_image_row(img, y);
            for (int32_t x = 0; x < w; x++) {
                const size_t i = (size_t)y * (size_t)w + (size_t)x;
                row[x] = (float)((1.0 - wgt[i]) * base[i] + wgt[i] * blurred[i]);
            }
        }
        free(base);
        free(wgt);
        free(blurred);
    }
    /* Pass 2: reflections and white noise. */
    if (a->reflection_e > 0.0 || a->white_noise_e > 0.0) {
        const double s2 = a->reflection_sigma_px * a->reflection_sigma_px;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int32_t y = 0; y < h; y++) {
            float *row = sw_image_row(img, y);
            for (int32_t x = 0; x < w; x++) {
                double v = (double)row[x];
                if (a->reflection_e > 0.0)
                    for (int e = 0; e < ne; e++) {
                        const double dx = (double)x - ea[e].refl_x, dy = (double)y - ea[e].refl_y;
                        const double r2 = (dx * dx + dy * dy) / s2;
                        if (r2 < 80.0)
                            v += a->reflection_e * exp(-0.5 * r2);
                    }
                if (a->white_noise_e > 0.0) {
                    double z0, z1;
                    const uint64_t pix = (uint64_t)y * (uint64_t)w + (uint64_t)x;
                    sw_rng_normal2(art_draw(p->seed, 0, ART_WHITE, pix), &z0, &z1);
                    v += a->white_noise_e * z0;
                }
                row[x] = (float)v;
            }
        }
    }
    return SW_OK;
}

sw_status sw_eyesim_render(sw_context *ctx, const sw_eyesim_params *p, sw_image *electrons,
                           sw_eyesim_truth *truth)
{
    if (!p || !electrons)
        return sw_fail(ctx, SW_EINVAL, "sw_eyesim_render: NULL argument");
    if (truth)
        memset(truth, 0, sizeof *truth);
    if (p->n_eyes != 1 && p->n_eyes != 2)
        return sw_fail(ctx, SW_EINVAL, "eye image: %d eyes (1 or 2)", p->n_eyes);
    sw_status st = sw_image_check(ctx, electrons);
    if (st != SW_OK)
        return st;
    if (electrons->type != SW_PIX_F32 || electrons->memory == SW_MEM_DEVICE ||
        electrons->width != p->sh.width || electrons->height != p->sh.height)
        return sw_fail(ctx, SW_EINVAL,
                       "eye image: the output must be a host f32 image of %dx%d (got %s %dx%d%s)",
                       p->sh.width, p->sh.height, sw_pixel_type_string(electrons->type),
                       electrons->width, electrons->height,
                       electrons->memory == SW_MEM_DEVICE ? " in device memory" : "");
    for (int e = 0; e < p->n_eyes; e++)
        if ((st = check_eye(ctx, e, &p->eyes[e], p->sh.width, p->sh.height)) != SW_OK)
            return st;
    if ((st = check_artefacts(ctx, &p->art)) != SW_OK)
        return st;

    /* Plans first: they validate the SH parameters before anything is drawn. */
    sw_shsim *plan[2] = {NULL, NULL};
    eye_art ea[2];
    memset(ea, 0, sizeof ea);
    sw_image dev;
    memset(&dev, 0, sizeof dev);
    for (int e = 0; e < p->n_eyes && st == SW_OK; e++) {
        sw_shsim_params sh = p->sh;
        sh.pupil = sw_eye_pupil(&sh.geom, &p->eyes[e]);
        st = sw_shsim_create(ctx, &sh, &plan[e]);
        if (st == SW_OK && p->eyes[e].count > 0)
            st = sw_shsim_add_zernike(plan[e], p->eyes[e].coef_um, p->eyes[e].count, sh.pupil.a_um);
    }
    for (int e = 0; e < p->n_eyes && st == SW_OK; e++)
        st = prepare_art(ctx, p, e, &ea[e]);
    const int cuda = ctx && sw_context_backend(ctx) == SW_BACKEND_CUDA;
    if (st == SW_OK && cuda)
        st = sw_image_alloc_device(ctx, p->sh.width, p->sh.height, SW_PIX_F32, &dev);
    sw_image *target = cuda ? &dev : electrons;
    for (int e = 0; e < p->n_eyes && st == SW_OK; e++) {
        st = sw_shsim_run(plan[e], target, e > 0);
        if (st == SW_OK && truth)
            st = sw_shsim_truth(plan[e], &truth->eye[e].sh);
    }
    if (st == SW_OK && cuda)
        st = sw_image_copy(ctx, &dev, electrons);
    sw_image_free(&dev);
    for (int e = 0; e < 2; e++)
        sw_shsim_destroy(plan[e]);
    if (st == SW_OK)
        st = apply_artefacts(ctx, p, electrons, ea);
    if (st == SW_OK && truth) {
        truth->n_eyes = p->n_eyes;
        for (int e = 0; e < p->n_eyes && st == SW_OK; e++) {
            const sw_eye *eye = &p->eyes[e];
            sw_eye_truth *t = &truth->eye[e];
            t->cx_px = eye->cx_px;
            t->cy_px = eye->cy_px;
            t->a_px = 0.5 * eye->diameter_px;
            t->b_px = t->a_px * eye->ellipticity;
            double ang = fmod(eye->angle_deg, 180.0);
            t->angle_deg = ang < 0.0 ? ang + 180.0 : ang;
            t->pupil_mm = eye->pupil_mm;
            t->reflection_x_px = ea[e].refl_x;
            t->reflection_y_px = ea[e].refl_y;
            t->count = eye->count > 0 ? eye->count : 0;
            if (t->count > 0) {
                t->coef_um = malloc((size_t)t->count * sizeof(double));
                if (!t->coef_um)
                    st = sw_fail(ctx, SW_ENOMEM, "eye image: out of memory (truth)");
                else
                    memcpy(t->coef_um, eye->coef_um, (size_t)t->count * sizeof(double));
            }
        }
    }
    for (int e = 0; e < 2; e++)
        free_art(&ea[e]);
    if (st != SW_OK && truth)
        sw_eyesim_truth_free(truth);
    return st;
}
