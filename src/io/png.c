/*
 * PNG output for people: an image mapped through a colour map (grey, viridis, blue-white-red),
 * optionally with a vertical colour bar, tick labels and a unit label to its right, drawn with a
 * small built-in 5x7 bitmap font.
 *
 * Layout with a scale bar: the image sits at the top left of the canvas; the bar starts a few
 * pixels to its right; the canvas is at least tall enough for the bar and its labels (so a tiny
 * image gets a taller canvas, filled with the white background below the image). Everything
 * scales with the image height (font scale 1 below 400 rows, up to 4).
 */
#define _POSIX_C_SOURCE 200809L

#include "io/io_internal.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>

/* ------------------------------------------------------------------ colour maps */

typedef struct cmap_point {
    unsigned char r, g, b;
} cmap_point;

/* viridis (van der Walt & Smith, matplotlib), sampled at 16 equally spaced points. */
static const cmap_point viridis16[16] = {
    {0x44, 0x01, 0x54}, {0x48, 0x1A, 0x6C}, {0x47, 0x2F, 0x7D}, {0x41, 0x44, 0x87},
    {0x39, 0x56, 0x8C}, {0x31, 0x68, 0x8E}, {0x2A, 0x78, 0x8E}, {0x23, 0x88, 0x8E},
    {0x1F, 0x98, 0x8B}, {0x22, 0xA8, 0x84}, {0x35, 0xB7, 0x79}, {0x54, 0xC5, 0x68},
    {0x7A, 0xD1, 0x51}, {0xA5, 0xDB, 0x36}, {0xD2, 0xE2, 0x1B}, {0xFD, 0xE7, 0x25},
};

/* Moreland's "cool to warm" diverging map (blue - near-white - red), 17 equally spaced points. */
static const cmap_point coolwarm17[17] = {
    {59, 76, 192},   {77, 104, 215},  {98, 130, 234},  {119, 154, 247}, {141, 176, 254},
    {163, 194, 255}, {184, 208, 249}, {204, 217, 238}, {221, 221, 221}, {236, 211, 197},
    {245, 196, 173}, {247, 177, 148}, {244, 154, 123}, {236, 127, 99},  {222, 96, 77},
    {203, 62, 56},   {180, 4, 38},
};

/* Colour at t in [0, 1]: linear interpolation between equally spaced control points (exact at
 * the control points, so the ends and the centre of the diverging map are the published ones). */
static void colour_at(sw_colormap cm, double t, unsigned char rgb[3])
{
    if (cm == SW_CMAP_GREY) {
        rgb[0] = rgb[1] = rgb[2] = (unsigned char)lround(t * 255.0);
        return;
    }
    const cmap_point *pts = cm == SW_CMAP_VIRIDIS ? viridis16 : coolwarm17;
    int n = cm == SW_CMAP_VIRIDIS ? 16 : 17;
    double pos = t * (n - 1);
    int k = (int)pos;
    if (k >= n - 1)
        k = n - 2;
    if (k < 0)
        k = 0;
    double f = pos - k;
    rgb[0] = (unsigned char)lround(pts[k].r + f * (pts[k + 1].r - pts[k].r));
    rgb[1] = (unsigned char)lround(pts[k].g + f * (pts[k + 1].g - pts[k].g));
    rgb[2] = (unsigned char)lround(pts[k].b + f * (pts[k + 1].b - pts[k].b));
}

/* ------------------------------------------------------------------ 5x7 bitmap font */

typedef struct glyph {
    char c;
    unsigned char rows[7]; /* bit 4 = leftmost column */
} glyph;

static const glyph font5x7[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
    {' ', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
    {'/', {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
    {'^', {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {'*', {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}},
    {'?', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}},
    {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E}},
    {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E}},
    {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}},
    {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}},
    {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11}},
    {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}},
    {'p', {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x00, 0x0D, 0x13, 0x0F, 0x01, 0x01}},
    {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E}},
    {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D}},
    {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A}},
    {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
};

/* Glyph of a character: upper case is drawn as lower case; unknown characters as '?'. */
static const unsigned char *glyph_rows(char c)
{
    if (c >= 'A' && c <= 'Z')
        c = (char)(c - 'A' + 'a');
    const unsigned char *unknown = NULL;
    for (size_t i = 0; i < sizeof font5x7 / sizeof font5x7[0]; i++) {
        if (font5x7[i].c == c)
            return font5x7[i].rows;
        if (font5x7[i].c == '?')
            unknown = font5x7[i].rows;
    }
    return unknown;
}

/* ------------------------------------------------------------------ layout and rendering */

#define MAX_TICKS 5
#define LABEL_MAX 64

typedef struct text_item {
    int x, y; /* top-left corner */
    char s[LABEL_MAX + 1];
} text_item;

typedef struct png_job {
    sw_context *ctx;
    const sw_image *img;
    const char *path;
    int channels;       /* 1 grey, 3 RGB, 4 RGBA */
    int bar;            /* draw the scale bar */
    int32_t cw, ch;     /* canvas size */
    int s;              /* font / feature scale */
    int bar_x0, bar_x1; /* bar columns [x0, x1) */
    int bar_y0, bar_y1; /* bar rows [y0, y1] (y0 = top, shows the value of t = 1) */
    int tick_len;
    int ntext;
    text_item text[MAX_TICKS + 1];
    int tick_y[MAX_TICKS];
    int nticks;
    double lo, hi; /* value -> t = (v - lo) / (hi - lo) */
    int nan_transparent;
    sw_colormap cmap;
    double *vals;       /* one image row as doubles */
    unsigned char *row; /* one canvas row */
    char err[256];      /* libpng's error message */
    png_structp png;
    png_infop info;
    FILE *f;
} png_job;

static void put(png_job *j, unsigned char *px, unsigned char r, unsigned char g, unsigned char b,
                unsigned char a)
{
    if (j->channels == 1) {
        px[0] = r; /* grey canvases only ever use grey colours */
        return;
    }
    px[0] = r;
    px[1] = g;
    px[2] = b;
    if (j->channels == 4)
        px[3] = a;
}

/* Position of a (non-NaN) value on the colour scale, clamped to [0, 1]. */
static double scale_pos(const png_job *j, double v)
{
    double t = (v - j->lo) / (j->hi - j->lo);
    if (isnan(t)) /* inf - inf: an infinite value with an infinite range */
        t = v > 0 ? 1.0 : 0.0;
    if (t < 0)
        t = 0;
    if (t > 1)
        t = 1;
    return t;
}

static void render_row(png_job *j, int32_t y)
{
    const int c = j->channels;
    unsigned char *row = j->row;
    /* background: white, opaque */
    memset(row, 255, (size_t)j->cw * (size_t)c);
    if (y < j->img->height) {
        sw_load_row(sw_image_row(j->img, y), j->img->type, j->img->width, j->vals);
        for (int32_t x = 0; x < j->img->width; x++) {
            unsigned char *px = row + (size_t)x * c;
            double v = j->vals[x];
            if (isnan(v)) {
                put(j, px, 0, 0, 0, j->nan_transparent ? 0 : 255);
            } else {
                unsigned char col[3];
                colour_at(j->cmap, scale_pos(j, v), col);
                put(j, px, col[0], col[1], col[2], 255);
            }
        }
    }
    if (!j->bar)
        return;
    const int s = j->s;
    /* the bar, with a one-pixel black frame */
    if (y >= j->bar_y0 - 1 && y <= j->bar_y1 + 1) {
        for (int x = j->bar_x0 - 1; x <= j->bar_x1; x++) {
            unsigned char *px = row + (size_t)x * c;
            if (y < j->bar_y0 || y > j->bar_y1 || x < j->bar_x0 || x >= j->bar_x1) {
                put(j, px, 0, 0, 0, 255);
            } else {
                unsigned char col[3];
                colour_at(j->cmap, (j->bar_y1 - y) / (double)(j->bar_y1 - j->bar_y0), col);
                put(j, px, col[0], col[1], col[2], 255);
            }
        }
    }
    /* ticks */
    for (int k = 0; k < j->nticks; k++) {
        int half = (s - 1) / 2;
        if (y >= j->tick_y[k] - half && y <= j->tick_y[k] - half + (s > 1 ? s / 2 : 0)) {
            for (int x = j->bar_x1 + 1; x < j->bar_x1 + 1 + j->tick_len; x++)
                put(j, row + (size_t)x * c, 0, 0, 0, 255);
        }
    }
    /* text */
    for (int t = 0; t < j->ntext; t++) {
        const text_item *ti = &j->text[t];
        if (y < ti->y || y >= ti->y + 7 * s)
            continue;
        int gy = (y - ti->y) / s;
        for (int k = 0; ti->s[k]; k++) {
            const unsigned char *g = glyph_rows(ti->s[k]);
            unsigned bits = g[gy];
            for (int gx = 0; gx < 5; gx++) {
                if (!(bits & (0x10u >> gx)))
                    continue;
                for (int dx = 0; dx < s; dx++) {
                    int x = ti->x + (k * 6 + gx) * s + dx;
                    if (x >= 0 && x < j->cw)
                        put(j, row + (size_t)x * c, 0, 0, 0, 255);
                }
            }
        }
    }
}

/* A tick label: %.4g; a value within half a bar pixel of zero is printed as "0". */
static void format_value(double v, double span, int bar_px, char *out, size_t cap)
{
    if (fabs(v) < fabs(span) / (2.0 * bar_px))
        v = 0.0;
    snprintf(out, cap, "%.4g", v);
}

/* Copies a unit label, keeping printable ASCII (the micro sign in UTF-8 becomes 'u'). */
static void copy_label(const char *label, char *out)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)label; *p && n < LABEL_MAX; p++) {
        if (p[0] == 0xC2 && p[1] == 0xB5) { /* U+00B5 MICRO SIGN */
            out[n++] = 'u';
            p++;
        } else if (p[0] == 0xCE && p[1] == 0xBC) { /* U+03BC GREEK SMALL LETTER MU */
            out[n++] = 'u';
            p++;
        } else if (*p >= 0x20 && *p < 0x7F) {
            out[n++] = (char)*p;
        }
    }
    out[n] = '\0';
}

static void layout(png_job *j, const char *label)
{
    const sw_image *img = j->img;
    j->cw = img->width;
    j->ch = img->height;
    if (!j->bar)
        return;
    int s = 1 + img->height / 400;
    if (s > 4)
        s = 4;
    j->s = s;
    char unit[LABEL_MAX + 1] = "";
    if (label)
        copy_label(label, unit);
    int has_label = unit[0] != '\0';
    int top = 4 * s, bottom = has_label ? 15 * s : 4 * s, minbar = 40 * s;
    if (j->ch < top + minbar + bottom + 1)
        j->ch = top + minbar + bottom + 1;
    j->bar_x0 = img->width + 6 * s + 1;
    j->bar_x1 = j->bar_x0 + 12 * s;
    j->bar_y0 = top;
    j->bar_y1 = j->ch - 1 - bottom;
    j->tick_len = 3 * s;
    int bh = j->bar_y1 - j->bar_y0;
    j->nticks = bh >= 60 * s ? 5 : 3;
    int text_x = j->bar_x1 + 1 + j->tick_len + 2 * s;
    int maxlen = 0;
    j->ntext = 0;
    for (int k = 0; k < j->nticks; k++) {
        double f = (double)k / (j->nticks - 1);
        text_item *ti = &j->text[j->ntext++];
        format_value(j->lo + (j->hi - j->lo) * f, j->hi - j->lo, bh, ti->s, sizeof ti->s);
        j->tick_y[k] = j->bar_y1 - (int)lround(f * bh);
        ti->x = text_x;
        ti->y = j->tick_y[k] - 3 * s;
        int len = (int)strlen(ti->s);
        if (len > maxlen)
            maxlen = len;
    }
    int cw = text_x + maxlen * 6 * s + 4 * s;
    if (has_label) {
        text_item *ti = &j->text[j->ntext++];
        memcpy(ti->s, unit, sizeof unit);
        ti->x = j->bar_x0;
        ti->y = j->bar_y1 + 6 * s;
        int lw = j->bar_x0 + (int)strlen(unit) * 6 * s + 4 * s;
        if (lw > cw)
            cw = lw;
    }
    j->cw = cw;
}

/* ------------------------------------------------------------------ libpng */

static void png_err_fn(png_structp png, png_const_charp msg)
{
    png_job *j = png_get_error_ptr(png);
    snprintf(j->err, sizeof j->err, "%s", msg ? msg : "unknown libpng error");
    png_longjmp(png, 1);
}

static void png_warn_fn(png_structp png, png_const_charp msg)
{
    png_job *j = png_get_error_ptr(png);
    sw_log(j->ctx, SW_LOG_DEBUG, "%s: libpng warning: %s", j->path, msg ? msg : "");
}

/* All libpng calls that may longjmp. Kept apart from the setjmp frame. */
static void png_body(png_job *j)
{
    static const int types[5] = {0, PNG_COLOR_TYPE_GRAY, 0, PNG_COLOR_TYPE_RGB,
                                 PNG_COLOR_TYPE_RGB_ALPHA};
    png_init_io(j->png, j->f);
    png_set_IHDR(j->png, j->info, (png_uint_32)j->cw, (png_uint_32)j->ch, 8, types[j->channels],
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(j->png, j->info);
    for (int32_t y = 0; y < j->ch; y++) {
        render_row(j, y);
        png_write_row(j->png, j->row);
    }
    png_write_end(j->png, j->info);
}

/* Returns 0 on success, 1 when libpng reported an error (message in j->err). */
static int png_run(png_job *j)
{
    if (setjmp(png_jmpbuf(j->png)))
        return 1;
    png_body(j);
    return 0;
}

/* ------------------------------------------------------------------ API */

void sw_png_options_default(sw_png_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->colormap = SW_CMAP_GREY;
    o->vmin = 0.0;
    o->vmax = 0.0;
    o->scale_bar = 0;
    o->label = NULL;
    o->nan_transparent = 0;
}

sw_status sw_png_write(sw_context *ctx, const char *path, const sw_image *img,
                       const sw_png_options *opts)
{
    if (!path)
        return sw_fail(ctx, SW_EINVAL, "sw_png_write: path is NULL");
    sw_status st = sw_io_check_write_image(ctx, path, img);
    if (st != SW_OK)
        return st;
    sw_png_options def;
    sw_png_options_default(&def);
    if (!opts)
        opts = &def;
    if (opts->colormap != SW_CMAP_GREY && opts->colormap != SW_CMAP_VIRIDIS &&
        opts->colormap != SW_CMAP_DIVERGING)
        return sw_fail(ctx, SW_EINVAL, "%s: unknown colour map %d", path, (int)opts->colormap);
    if (!isfinite(opts->vmin) || !isfinite(opts->vmax))
        return sw_fail(ctx, SW_EINVAL, "%s: the colour range [%g, %g] is not finite", path,
                       opts->vmin, opts->vmax);

    png_job *j = calloc(1, sizeof *j);
    if (!j)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    j->ctx = ctx;
    j->img = img;
    j->path = path;
    j->bar = opts->scale_bar != 0;
    j->nan_transparent = opts->nan_transparent != 0;
    j->channels = j->nan_transparent ? 4 : (opts->colormap == SW_CMAP_GREY ? 1 : 3);
    j->cmap = opts->colormap;
    j->vals = malloc((size_t)img->width * sizeof *j->vals);
    if (!j->vals) {
        free(j);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory for a row buffer", path);
    }

    /* value range */
    double lo = opts->vmin, hi = opts->vmax;
    if (lo == hi) {
        lo = INFINITY;
        hi = -INFINITY;
        for (int32_t y = 0; y < img->height; y++) {
            sw_load_row(sw_image_row(img, y), img->type, img->width, j->vals);
            for (int32_t x = 0; x < img->width; x++) {
                double v = j->vals[x];
                if (isfinite(v)) {
                    if (v < lo)
                        lo = v;
                    if (v > hi)
                        hi = v;
                }
            }
        }
        if (lo > hi) { /* no finite pixel */
            lo = 0.0;
            hi = 1.0;
        } else if (opts->colormap == SW_CMAP_DIVERGING) { /* symmetric: 0 is the centre */
            double m = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
            lo = -m;
            hi = m;
        }
        if (lo == hi) { /* constant image: centre it in the scale */
            double d = fabs(lo) * 0.01 > 0.5 ? fabs(lo) * 0.01 : 0.5;
            lo -= d;
            hi += d;
        }
    }
    j->lo = lo;
    j->hi = hi;
    layout(j, opts->label);

    size_t rowbytes;
    if (!sw_mul_ok((size_t)j->cw, (size_t)j->channels, &rowbytes) || !(j->row = malloc(rowbytes))) {
        free(j->vals);
        free(j);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory for a row buffer", path);
    }

    char *tmp;
    st = sw_io_tmp_open(ctx, path, &tmp, &j->f);
    if (st != SW_OK)
        goto out;
    j->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, j, png_err_fn, png_warn_fn);
    if (j->png)
        j->info = png_create_info_struct(j->png);
    if (!j->png || !j->info) {
        png_destroy_write_struct(j->png ? &j->png : NULL, NULL);
        sw_io_tmp_abort(tmp, j->f);
        st = sw_fail(ctx, SW_ENOMEM, "%s: cannot initialise libpng (out of memory)", path);
        goto out;
    }
    int failed = png_run(j);
    png_destroy_write_struct(&j->png, &j->info);
    if (failed) {
        sw_io_tmp_abort(tmp, j->f);
        st = sw_fail(ctx, SW_EIO, "%s: PNG write failed: %s", path, j->err);
        goto out;
    }
    st = sw_io_tmp_commit(ctx, path, tmp, j->f);
out:
    free(j->row);
    free(j->vals);
    free(j);
    return st;
}
