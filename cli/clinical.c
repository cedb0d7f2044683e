/*
 * The refraction and image-quality options and reports shared by 'spotwave fit' and
 * 'spotwave aberrometry' (clinical.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "clinical.h"
#include "plot.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void sw_cli_clinical_init(sw_cli_clinical *o)
{
    memset(o, 0, sizeof *o);
    o->wavelength_um = SW_CLI_DEF_WAVELENGTH_UM;
    o->reference_um = SW_CLI_DEF_REFERENCE_UM;
    o->psf_size = 0; /* automatic */
}

int sw_cli_clinical_option(const char *sub, int c, const char *arg, sw_cli_clinical *o)
{
    switch (c) {
    case SW_CLI_OPT_HIGHER_RX: o->higher_rx = 1; return SW_EXIT_OK;
    case SW_CLI_OPT_FLIP_X: o->flip_x = 1; return SW_EXIT_OK;
    case SW_CLI_OPT_FLIP_Y: o->flip_y = 1; return SW_EXIT_OK;
    case SW_CLI_OPT_QUALITY: o->quality = 1; return SW_EXIT_OK;
    case SW_CLI_OPT_QUALITY_HOA: o->quality = o->quality_hoa = 1; return SW_EXIT_OK;
    case SW_CLI_OPT_WAVELENGTH:
    case SW_CLI_OPT_REFERENCE_WL:
    case SW_CLI_OPT_QUALITY_WL: {
        const char *name = c == SW_CLI_OPT_WAVELENGTH     ? "--wavelength-um"
                           : c == SW_CLI_OPT_REFERENCE_WL ? "--reference-wavelength-um"
                                                          : "--quality-wavelength-um";
        double v = 0.0;
        if (sw_cli_opt_double(sub, name, arg, SW_CLI_POSITIVE, "a wavelength in micrometres", &v) !=
            SW_EXIT_OK)
            return SW_EXIT_USAGE;
        if (v < 0.3 || v > 2.0)
            return sw_cli_usage(sub, "%s: %g um is outside 0.3..2 (give micrometres)", name, v);
        if (c == SW_CLI_OPT_WAVELENGTH)
            o->wavelength_um = v;
        else if (c == SW_CLI_OPT_REFERENCE_WL)
            o->reference_um = v;
        else {
            o->quality_um = v;
            o->quality = 1;
        }
        return SW_EXIT_OK;
    }
    case SW_CLI_OPT_PSF:
    case SW_CLI_OPT_MTF:
        if (sw_cli_opt_file(sub, c == SW_CLI_OPT_PSF ? "--psf" : "--mtf", arg,
                            c == SW_CLI_OPT_PSF ? &o->psf_png : &o->mtf_png) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
        o->quality = 1;
        return SW_EXIT_OK;
    case SW_CLI_OPT_PSF_SIZE:
        if (sw_cli_parse_long(arg, 32, 2048, &o->psf_size) != 0 ||
            (o->psf_size & (o->psf_size - 1)) != 0)
            return sw_cli_usage(sub, "--psf-size: '%s' is not a power of two in 32..2048", arg);
        return SW_EXIT_OK;
    default: return -1;
    }
}

int sw_cli_clinical_check(const char *sub, const sw_cli_clinical *o)
{
    if (o->psf_png && (strcmp(o->psf_png, "-") == 0 || !sw_cli_ends_with(o->psf_png, ".png")))
        return sw_cli_usage(sub, "--psf: '%s' is not a .png file name", o->psf_png);
    if (o->mtf_png && (strcmp(o->mtf_png, "-") == 0 || !sw_cli_ends_with(o->mtf_png, ".png")))
        return sw_cli_usage(sub, "--mtf: '%s' is not a .png file name", o->mtf_png);
    return SW_EXIT_OK;
}

void sw_cli_clinical_help(FILE *out)
{
    fputs(sw_cli_clinical_help_text(), out);
}

const char *sw_cli_clinical_help_text(void)
{
    static char text[8192];
    snprintf(
        text, sizeof text,
        "Refraction (power vectors M, J0, J45 of Thibos, Hong, Bradley & Applegate 2004,\n"
        "J. Vision 4(4), 329; the JSON gives both refractions below, 'refraction' the one "
        "chosen):\n"
        "  --higher-order-rx      the refraction with the 4th and 6th order terms too (their\n"
        "                         Seidel terms to order 6); default: the second-order terms\n"
        "                         c(2,-2), c(2,0), c(2,2) alone\n"
        "  --wavelength-um W      the measurement wavelength, micrometres (default %g)\n"
        "  --reference-wavelength-um R\n"
        "                         the clinical refraction's wavelength (default %g): the defocus\n"
        "                         is moved from W to R by the longitudinal chromatic aberration "
        "of\n"
        "                         the Chromatic Eye (Thibos, Ye, Zhang & Bradley 1992, Appl. Opt.\n"
        "                         31(19), 3594), Rx(l) = p - 0.63346 / (l - 0.21410) D: 0.78 ->\n"
        "                         0.555 um adds -0.74 D to the sphere. R = W: no correction\n"
        "  --flip-x, --flip-y     the instrument's camera mirrors the image left-right (x) or\n"
        "                         top-bottom (y): the coefficients are turned into the examiner's\n"
        "                         frame by changing the sign of the terms odd in x (cos m theta,\n"
        "                         m odd; sin m theta, m even: c(1,1), c(2,-2), c(3,1), c(3,3),\n"
        "                         ...) or odd in y (every sin term, m < 0). Without them the\n"
        "                         detector's +x (columns) and +y (rows) are taken as the eye's\n"
        "                         x and y as the examiner sees it (ANSI Z80.28), the refraction's\n"
        "                         axis counter-clockwise from +x towards +y (the TABO scale,\n"
        "                         the same for both eyes, written 1..180)\n"
        "Image quality (Fourier optics: PSF = |FFT of the pupil function|^2, MTF = |OTF|):\n"
        "  --quality              compute the Strehl ratio and the visual Strehl ratios VSOTF,\n"
        "                         VSMTF (Thibos et al. 2004, appendix; the neural weighting is\n"
        "                         Mannos & Sakrison's 1974 contrast sensitivity function)\n"
        "  --quality-wavelength-um Q  at this wavelength (default: the reference wavelength; the\n"
        "                         defocus moved there with the Chromatic Eye); implies --quality\n"
        "  --quality-hoa          of the orders >= 3 alone (the eye with its sphere and cylinder\n"
        "                         corrected); implies --quality\n"
        "  --psf FILE.png         a picture of the PSF, arc minutes on both axes (of the last\n"
        "                         frame; FILE_eye1/_eye2 for two eyes); implies --quality\n"
        "  --mtf FILE.png         the radially averaged MTF against the diffraction-limited one,\n"
        "                         cycles per degree; implies --quality\n"
        "  --psf-size N           the FFT grid, a power of two in 32..2048 (the pupil spans\n"
        "                         N / 2 samples); default: the smallest of 256, 512, 1024 that\n"
        "                         samples the wavefront's steepest slope at 1/8 wave a sample,\n"
        "                         so the PSF fits the grid (the JSON's 'sampled' says whether N\n"
        "                         was enough; a few dioptres of blur over a large pupil need\n"
        "                         more, at about a second per eye and frame for 1024)\n",
        SW_CLI_DEF_WAVELENGTH_UM, SW_CLI_DEF_REFERENCE_UM);
    return text;
}

int sw_cli_eye_parse(const char *arg, int *side)
{
    if (strcasecmp(arg, "OD") == 0 || strcasecmp(arg, "right") == 0)
        *side = 1;
    else if (strcasecmp(arg, "OS") == 0 || strcasecmp(arg, "left") == 0)
        *side = 2;
    else
        return -1;
    return 0;
}

const char *sw_cli_eye_name(int side)
{
    return side == 1 ? "OD" : side == 2 ? "OS" : NULL;
}

static void rx_nan(sw_refraction *r)
{
    r->M = r->J0 = r->J45 = r->sphere_d = r->cyl_d = r->axis_deg = NAN;
}

int sw_cli_eye_clinical(sw_context *ctx, const char *sub, const char *what,
                        const sw_cli_clinical *o, const double *coef, int32_t count,
                        double pupil_mm, double vertex_mm, sw_image *psf, sw_image *mtf,
                        sw_cli_eye_rx *out)
{
    memset(out, 0, sizeof *out);
    rx_nan(&out->measured);
    rx_nan(&out->second);
    rx_nan(&out->higher);
    out->lca_d = sw_eye_lca_d(o->wavelength_um, o->reference_um);
    const int32_t n = count < 6 ? 6 : count;
    double *c = calloc((size_t)n, sizeof *c);
    if (!c)
        return sw_cli_fail(sub, "out of memory");
    memcpy(c, coef, (size_t)count * sizeof *c);
    sw_status st =
        sw_zernike_refraction(ctx, c, n, pupil_mm, o->higher_rx, vertex_mm, &out->measured);
    if (st == SW_OK)
        st = sw_zernike_refraction_shifted(ctx, c, n, pupil_mm, 0, vertex_mm, out->lca_d,
                                           &out->second);
    if (st == SW_OK)
        st = sw_zernike_refraction_shifted(ctx, c, n, pupil_mm, 1, vertex_mm, out->lca_d,
                                           &out->higher);
    if (st != SW_OK) {
        free(c);
        return sw_cli_fail(sub, "%s: refraction: %s", what, sw_cli_lib_error(ctx, st));
    }
    out->ok = 1;
    if (o->quality) {
        const double qwl = o->quality_um > 0 ? o->quality_um : o->reference_um;
        /* the defocus at the quality wavelength: M changes by the chromatic shift, and
         * c(2,0) = -M r^2 / (4 sqrt 3) */
        const double r = 0.5 * pupil_mm;
        c[4] -= sw_eye_lca_d(o->wavelength_um, qwl) * r * r / (4.0 * sqrt(3.0));
        if (o->quality_hoa)
            for (int j = 3; j < 6; j++)
                c[j] = 0.0;
        /* the steepest slope g of W (um per unit radius, tilts left out): with Q = N / 2
         * samples across the pupil the PSF's half-width is about 2 N g / (lambda Q) pixels, and
         * Q >= 8 g / lambda keeps it inside N / 4 and the phase below 1/8 wave a sample */
        double g = 0.0;
        {
            const double t[3] = {c[0], c[1], c[2]};
            c[0] = c[1] = c[2] = 0.0;
            for (int iy = -40; iy <= 40; iy++)
                for (int ix = -40; ix <= 40; ix++) {
                    const double x = ix / 40.0, y = iy / 40.0;
                    if (x * x + y * y > 1.0)
                        continue;
                    double w = 0.0, gx = 0.0, gy = 0.0;
                    sw_zernike_sum_grad(c, n, x, y, &w, &gx, &gy);
                    g = fmax(g, hypot(gx, gy));
                }
            c[0] = t[0];
            c[1] = t[1];
            c[2] = t[2];
        }
        int32_t N = (int32_t)o->psf_size;
        if (N == 0)
            for (N = 256; N < 1024 && N / 2 < 8.0 * g / qwl; N *= 2)
                ;
        out->psf_size = N;
        out->sampled = N / 2 >= 8.0 * g / qwl;
        if ((psf && psf->width != N && (sw_image_free(psf), 1) &&
             sw_image_alloc(NULL, N, N, SW_PIX_F32, psf) != SW_OK) ||
            (mtf && mtf->width != N && (sw_image_free(mtf), 1) &&
             sw_image_alloc(NULL, N, N, SW_PIX_F32, mtf) != SW_OK)) {
            free(c);
            return sw_cli_fail(sub, "out of memory");
        }
        sw_psf_params pp;
        sw_psf_params_default(&pp);
        pp.size = N;
        pp.pupil_samples = pp.size / 2;
        pp.pupil_mm = pupil_mm;
        pp.wavelength_um = qwl;
        pp.first_j = 3;
        pp.max_order = 1;
        {
            int nn = 0, mm = 0;
            if (sw_zernike_osa_nm(n - 1, &nn, &mm) == SW_OK)
                pp.max_order = nn < 1 ? 1 : nn;
        }
        sw_psf_plan *plan = NULL;
        st = sw_psf_create(ctx, &pp, &plan);
        if (st == SW_OK)
            st = sw_psf_run(plan, c, n, psf, mtf, &out->q);
        if (st == SW_OK) {
            out->have_quality = 1;
            out->quality_um = qwl;
            out->psf_arcmin_px = sw_psf_arcmin_per_px(plan);
            out->mtf_cpd_px = sw_psf_cpd_per_px(plan);
            out->cutoff_cpd = sw_psf_cutoff_cpd(plan);
        }
        sw_psf_destroy(plan);
        if (st != SW_OK) {
            free(c);
            return sw_cli_fail(sub, "%s: image quality: %s", what, sw_cli_lib_error(ctx, st));
        }
    }
    free(c);
    return SW_EXIT_OK;
}

static void rx_object(cJSON *parent, const char *key, const sw_refraction *r, int higher,
                      const sw_cli_clinical *o, double lca_d, double vertex_mm)
{
    cJSON *x = cJSON_AddObjectToObject(parent, key);
    sw_cli_json_string(x, "terms", higher ? "orders 2, 4 and 6 (Seidel terms)" : "second order");
    sw_cli_json_double(x, "wavelength_um", o->reference_um);
    sw_cli_json_double(x, "measurement_wavelength_um", o->wavelength_um);
    sw_cli_json_double(x, "lca_d", lca_d);
    sw_cli_json_double(x, "vertex_mm", vertex_mm);
    sw_cli_json_double(x, "M_d", r->M);
    sw_cli_json_double(x, "J0_d", r->J0);
    sw_cli_json_double(x, "J45_d", r->J45);
    cJSON *m = cJSON_AddObjectToObject(x, "minus_cyl");
    sw_cli_json_double(m, "sphere_d", r->sphere_d);
    sw_cli_json_double(m, "cyl_d", r->cyl_d);
    sw_cli_json_double(m, "axis_deg", sw_refraction_axis_clinical(r->axis_deg));
    double s = NAN, cy = NAN, a = NAN;
    if (isfinite(r->sphere_d))
        sw_refraction_transpose(r->sphere_d, r->cyl_d, r->axis_deg, &s, &cy, &a);
    cJSON *p = cJSON_AddObjectToObject(x, "plus_cyl");
    sw_cli_json_double(p, "sphere_d", s);
    sw_cli_json_double(p, "cyl_d", cy);
    sw_cli_json_double(p, "axis_deg", a);
}

void sw_cli_eye_json(cJSON *obj, const sw_cli_clinical *o, const sw_cli_eye_rx *rx, int side,
                     const double *coef, int32_t count, double pupil_mm, double vertex_mm)
{
    sw_cli_json_string(obj, "eye_side", sw_cli_eye_name(side));
    if (!rx->ok) {
        cJSON_AddNullToObject(obj, "refraction_2nd_order");
        cJSON_AddNullToObject(obj, "refraction_higher_order");
    } else {
        rx_object(obj, "refraction_2nd_order", &rx->second, 0, o, rx->lca_d, vertex_mm);
        rx_object(obj, "refraction_higher_order", &rx->higher, 1, o, rx->lca_d, vertex_mm);
    }
    int nmax = 0, mm = 0;
    if (count > 0)
        (void)sw_zernike_osa_nm(count - 1, &nmax, &mm);
    cJSON *ro = cJSON_AddArrayToObject(obj, "rms_by_order_um");
    for (int n = 0; n <= nmax; n++)
        cJSON_AddItemToArray(ro,
                             sw_cli_json_num(rx->ok ? sw_zernike_rms_order(coef, count, n) : NAN));
    sw_cli_json_double(obj, "hoa_rms_um",
                       rx->ok && count > 6 ? sw_zernike_rms(coef, count, 6) : NAN);
    if (!rx->have_quality) {
        cJSON_AddNullToObject(obj, "quality");
        return;
    }
    cJSON *q = cJSON_AddObjectToObject(obj, "quality");
    sw_cli_json_double(q, "wavelength_um", rx->quality_um);
    sw_cli_json_double(q, "pupil_mm", pupil_mm);
    sw_cli_json_string(q, "terms", o->quality_hoa ? "orders >= 3" : "orders >= 2 (no tilt)");
    sw_cli_json_double(q, "strehl", rx->q.strehl);
    sw_cli_json_double(q, "vsotf", rx->q.vsotf);
    sw_cli_json_double(q, "vsmtf", rx->q.vsmtf);
    sw_cli_json_double(q, "psf_arcmin_per_px", rx->psf_arcmin_px);
    sw_cli_json_double(q, "mtf_cpd_per_px", rx->mtf_cpd_px);
    sw_cli_json_double(q, "cutoff_cpd", rx->cutoff_cpd);
    sw_cli_json_int(q, "grid", rx->psf_size);
    cJSON_AddBoolToObject(q, "sampled", rx->sampled);
}

void sw_cli_clinical_json(cJSON *obj, const sw_cli_clinical *o)
{
    cJSON_AddBoolToObject(obj, "higher_order_rx", o->higher_rx);
    sw_cli_json_double(obj, "wavelength_um", o->wavelength_um);
    sw_cli_json_double(obj, "reference_wavelength_um", o->reference_um);
    sw_cli_json_double(obj, "lca_d", sw_eye_lca_d(o->wavelength_um, o->reference_um));
    cJSON_AddBoolToObject(obj, "flip_x", o->flip_x);
    cJSON_AddBoolToObject(obj, "flip_y", o->flip_y);
}

void sw_cli_rx_text(char *buf, size_t size, const sw_refraction *rx, int side, double wl_um)
{
    double s = NAN, c = NAN, a = NAN;
    sw_refraction_transpose(rx->sphere_d, rx->cyl_d, rx->axis_deg, &s, &c, &a);
    snprintf(buf, size, "%s%s%+.2f %+.2f x %.0f (plus cyl %+.2f %+.2f x %.0f) at %.3g um",
             side ? sw_cli_eye_name(side) : "", side ? " " : "", rx->sphere_d, rx->cyl_d,
             sw_refraction_axis_clinical(rx->axis_deg), s, c, a, wl_um);
}

void sw_cli_eye_file(const char *path, int n_eyes, int k, char *buf, size_t size)
{
    if (n_eyes < 2) {
        snprintf(buf, size, "%s", path);
        return;
    }
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash))
        dot = path + strlen(path);
    snprintf(buf, size, "%.*s_eye%d%s", (int)(dot - path), path, k + 1, dot);
}

/* ------------------------------------------------------------------ pictures */

static sw_status write_canvas(sw_context *ctx, const sw_plot_canvas *cv, const char *path)
{
    char err[512];
    if (sw_plot_write_png(cv, path, err, sizeof err) != 0)
        return sw_error_set(ctx, SW_EIO, "%s", err);
    return SW_OK;
}

sw_status sw_cli_psf_png(sw_context *ctx, const char *path, const sw_image *psf, double arcmin_px,
                         const char *title)
{
    const int32_t N = psf->width;
    /* the field shown: the square holding 99 % of the light, at least 6 Airy radii */
    double total = 0.0, peak = 0.0;
    for (int32_t y = 0; y < N; y++)
        for (int32_t x = 0; x < N; x++) {
            const double v = sw_image_get(psf, x, y);
            total += v;
            peak = fmax(peak, v);
        }
    int32_t half = 6;
    for (; half < N / 2; half++) {
        double in = 0.0;
        for (int32_t y = N / 2 - half; y <= N / 2 + half; y++)
            for (int32_t x = N / 2 - half; x <= N / 2 + half; x++)
                in += sw_image_get(psf, x, y);
        if (in >= 0.99 * total)
            break;
    }
    if (half > N / 2 - 1)
        half = N / 2 - 1;
    const sw_plot_rgb white = {255, 255, 255};
    sw_plot_canvas cv;
    if (sw_plot_canvas_init(&cv, 640, 640, white) != 0)
        return sw_error_set(ctx, SW_ENOMEM, "--psf: out of memory");
    const double lim = (half + 0.5) * arcmin_px;
    sw_plot_panel p;
    memset(&p, 0, sizeof p);
    p.x = 0;
    p.y = 0;
    p.width = 640;
    p.height = 640;
    p.title = title;
    p.xlabel = "x (arcmin)";
    p.ylabel = "y (arcmin)";
    p.xmin = -lim;
    p.xmax = lim;
    p.ymin = -lim;
    p.ymax = lim;
    p.vline = NAN;
    p.scale = 2;
    sw_plot_axes ax;
    if (sw_plot_panel_draw(&cv, &p, &ax) != 0) {
        sw_plot_canvas_free(&cv);
        return sw_error_set(ctx, SW_EINTERNAL, "--psf: the picture has no room for its plot");
    }
    /* each plot-area pixel shows the PSF sample under it, sqrt-stretched (grey, white = peak) */
    for (int32_t py = ax.area.y0; py <= ax.area.y1; py++)
        for (int32_t px = ax.area.x0; px <= ax.area.x1; px++) {
            const double xa = ax.xmin + (px - ax.area.x0 + 0.5) / (ax.area.x1 - ax.area.x0 + 1) *
                                            (ax.xmax - ax.xmin);
            const double ya = ax.ymax - (py - ax.area.y0 + 0.5) / (ax.area.y1 - ax.area.y0 + 1) *
                                            (ax.ymax - ax.ymin);
            const long ix = lround(xa / arcmin_px) + N / 2, iy = lround(ya / arcmin_px) + N / 2;
            double v = 0.0;
            if (ix >= 0 && ix < N && iy >= 0 && iy < N && peak > 0)
                v = sqrt(fmax(0.0, sw_image_get(psf, (int32_t)ix, (int32_t)iy) / peak));
            const unsigned char g = (unsigned char)lround(255.0 * v);
            const sw_plot_rgb col = {g, g, g};
            sw_plot_pixel(&cv, px, py, col);
        }
    sw_status st = write_canvas(ctx, &cv, path);
    sw_plot_canvas_free(&cv);
    return st;
}

sw_status sw_cli_mtf_png(sw_context *ctx, const char *path, const sw_image *mtf, double cpd_px,
                         double cutoff_cpd, const char *title)
{
    const int32_t N = mtf->width;
    const int32_t n = N / 2;
    double *f = malloc((size_t)n * sizeof *f), *m = malloc((size_t)n * sizeof *m),
           *d = malloc((size_t)n * sizeof *d), *cnt = calloc((size_t)n, sizeof *cnt);
    if (!f || !m || !d || !cnt) {
        free(f);
        free(m);
        free(d);
        free(cnt);
        return sw_error_set(ctx, SW_ENOMEM, "--mtf: out of memory");
    }
    for (int32_t k = 0; k < n; k++)
        m[k] = 0.0;
    for (int32_t y = 0; y < N; y++)
        for (int32_t x = 0; x < N; x++) {
            const long r = lround(hypot((double)(x - N / 2), (double)(y - N / 2)));
            if (r < n) {
                m[r] += sw_image_get(mtf, x, y);
                cnt[r] += 1.0;
            }
        }
    for (int32_t k = 0; k < n; k++) {
        f[k] = k * cpd_px;
        m[k] = cnt[k] > 0 ? m[k] / cnt[k] : NAN;
        d[k] = sw_mtf_diffraction(f[k] / cutoff_cpd);
    }
    const sw_plot_rgb white = {255, 255, 255}, blue = {31, 119, 180}, grey = {120, 120, 120};
    sw_plot_series s[2] = {{f, m, n, blue, 0, "eye (radial mean)"},
                           {f, d, n, grey, 1, "diffraction limit"}};
    sw_plot_canvas cv;
    sw_status st = SW_OK;
    if (sw_plot_canvas_init(&cv, 800, 520, white) != 0) {
        st = sw_error_set(ctx, SW_ENOMEM, "--mtf: out of memory");
    } else {
        sw_plot_panel p;
        memset(&p, 0, sizeof p);
        p.width = 800;
        p.height = 520;
        p.title = title;
        p.xlabel = "spatial frequency (cycles/degree)";
        p.ylabel = "MTF";
        p.xmin = 0.0;
        p.xmax = fmin(cutoff_cpd, f[n - 1]);
        p.ymin = 0.0;
        p.ymax = 1.0;
        p.series = s;
        p.nseries = 2;
        p.vline = NAN;
        p.scale = 2;
        if (sw_plot_panel_draw(&cv, &p, NULL) != 0)
            st = sw_error_set(ctx, SW_EINTERNAL, "--mtf: the picture has no room for its plot");
        else
            st = write_canvas(ctx, &cv, path);
        sw_plot_canvas_free(&cv);
    }
    free(f);
    free(m);
    free(d);
    free(cnt);
    return st;
}
