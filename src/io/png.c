/*
 * PNG output for people: an image mapped through a stretch (linear, asinh, zscale) and a colour
 * map (grey, viridis, blue-white-red), optionally with a title above it, circles over it and a
 * vertical colour bar with round tick values and a unit label to its right, drawn with a small
 * built-in 5x7 bitmap font.
 *
 * Layout: the title (if any) is a line across the top; the image sits below it at the left; the
 * bar starts a few pixels to its right; the canvas is at least tall enough for the bar and its
 * labels (so a tiny image gets a taller canvas, filled with the white background below the
 * image). Everything scales with the image height (font scale 1 below 400 rows, up to 4).
 * The picture is rendered a row at a time as libpng writes it.
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

#define GLYPH_MICRO ((char)0xB5) /* the micro sign's code in text items (Latin-1's) */

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
    {'[', {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E}},
    {']', {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E}},
    {'<', {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02}},
    {'>', {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
    {'^', {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {';', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08}},
    {'*', {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}},
    {'!', {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04}},
    {'\'', {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00}},
    {'"', {0x0A, 0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00}},
    {'#', {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A}},
    {'&', {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D}},
    {'|', {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'~', {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00}},
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
    /* the micro sign: a u whose left stroke runs down to a descender */
    {GLYPH_MICRO, {0x00, 0x00, 0x11, 0x11, 0x13, 0x1D, 0x10}},
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

#define MAX_TICKS  12
#define LABEL_MAX  64
#define MAX_TEXT   (MAX_TICKS + 2) /* tick labels, the unit label, the title */
#define SAMPLE_MAX 10000           /* pixels sampled for zscale and the noise */

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
    int img_y0;         /* canvas row of the image's first row (below the title) */
    int bar_x0, bar_x1; /* bar columns [x0, x1) */
    int bar_y0, bar_y1; /* bar rows [y0, y1] (y0 = top, shows the value of t = 1) */
    int tick_len;
    int ntext;
    text_item text[MAX_TEXT];
    int tick_y[MAX_TICKS];
    int nticks;
    double lo, hi; /* value -> u = (v - lo) / (hi - lo) */
    sw_png_stretch stretch;
    double beta, asinh_norm; /* asinh: t = asinh(u / beta) / asinh_norm */
    int nan_transparent;
    sw_colormap cmap;
    const sw_png_marker *marks;
    int32_t nmarks;
    unsigned char mark_rgb[3];
    double mark_w;      /* ring width, image pixels */
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

/* Position of a (non-NaN) value on the colour scale, in [0, 1]: the stretch of the linear
 * position, clamped. */
static double scale_pos(const png_job *j, double v)
{
    double t = (v - j->lo) / (j->hi - j->lo);
    if (isnan(t)) /* inf - inf: an infinite value with an infinite range */
        t = v > 0 ? 1.0 : 0.0;
    if (t < 0)
        t = 0;
    if (t > 1)
        t = 1;
    if (j->stretch == SW_PNG_ASINH)
        t = asinh(t / j->beta) / j->asinh_norm;
    return t;
}

/* Draws the text items that cross canvas row y. */
static void render_text(png_job *j, int32_t y)
{
    const int s = j->s, c = j->channels;
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
                        put(j, j->row + (size_t)x * c, 0, 0, 0, 255);
                }
            }
        }
    }
}

/* Draws the markers' rings on image row iy: the pixels whose centres lie within mark_w / 2 of
 * a circle. */
static void render_markers(png_job *j, int32_t iy)
{
    const double half = 0.5 * j->mark_w;
    for (int32_t m = 0; m < j->nmarks; m++) {
        const sw_png_marker *mk = &j->marks[m];
        const double r = fabs(mk->radius), dy = iy - mk->y;
        if (!isfinite(mk->x) || !isfinite(mk->y) || !isfinite(r) || fabs(dy) > r + half)
            continue;
        double x0 = floor(mk->x - r - half), x1 = ceil(mk->x + r + half);
        if (x0 < 0)
            x0 = 0;
        if (x1 > j->img->width - 1)
            x1 = j->img->width - 1;
        for (double x = x0; x <= x1; x++) {
            double d = hypot(x - mk->x, dy);
            if (fabs(d - r) <= half)
                put(j, j->row + (size_t)x * j->channels, j->mark_rgb[0], j->mark_rgb[1],
                    j->mark_rgb[2], 255);
        }
    }
}

static void render_row(png_job *j, int32_t y)
{
    const int c = j->channels;
    unsigned char *row = j->row;
    /* background: white, opaque */
    memset(row, 255, (size_t)j->cw * (size_t)c);
    const int32_t iy = y - j->img_y0;
    if (iy >= 0 && iy < j->img->height) {
        sw_load_row(sw_image_row(j->img, iy), j->img->type, j->img->width, j->vals);
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
        render_markers(j, iy);
    }
    if (j->bar) {
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
    }
    render_text(j, y);
}

/* ------------------------------------------------------------------ ranges and ticks */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Up to SAMPLE_MAX finite pixels, evenly spaced over the image in row-major order, sorted
 * (malloc'ed; *n may be 0). NULL when out of memory. */
static double *sorted_sample(png_job *j, size_t *n)
{
    const sw_image *img = j->img;
    const size_t total = (size_t)img->width * (size_t)img->height;
    const size_t step = total > SAMPLE_MAX ? (total + SAMPLE_MAX - 1) / SAMPLE_MAX : 1;
    double *v = malloc(SAMPLE_MAX * sizeof *v);
    if (!v)
        return NULL;
    size_t k = 0, next = 0;
    for (int32_t y = 0; y < img->height && k < SAMPLE_MAX; y++) {
        const size_t first = (size_t)y * (size_t)img->width;
        if (next >= first + (size_t)img->width)
            continue;
        sw_load_row(sw_image_row(img, y), img->type, img->width, j->vals);
        for (; next < first + (size_t)img->width && k < SAMPLE_MAX; next += step)
            if (isfinite(j->vals[next - first]))
                v[k++] = j->vals[next - first];
    }
    qsort(v, k, sizeof *v, cmp_double);
    *n = k;
    return v;
}

/*
 * IRAF's zscale on a sorted sample (the display task's ZSCALE ALGORITHM): fit
 * I(i) = intercept + slope (i - midpoint) to the sample's values by rank with iterative
 * 2.5-sigma rejection (at most 5 passes, each rejected point's neighbours rejected too); more
 * than half rejected: the sample's range; otherwise z1 = I(mid) + (slope / contrast) (1 - mid),
 * z2 = I(mid) + (slope / contrast) (n - mid) with contrast 0.25, kept within the sample's range.
 */
static void zscale(const double *v, size_t n, double *z1, double *z2)
{
    *z1 = v[0];
    *z2 = v[n - 1];
    if (n < 5)
        return;
    unsigned char *bad = calloc(n, 1);
    if (!bad)
        return;
    const double mid = 0.5 * (double)(n + 1); /* ranks 1..n */
    const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    size_t good = n;
    double a = median, b = 0.0;
    for (int pass = 0; pass < 5; pass++) {
        double s0 = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (size_t i = 0; i < n; i++) {
            if (bad[i])
                continue;
            const double x = (double)(i + 1) - mid;
            s0 += 1;
            sx += x;
            sy += v[i];
            sxx += x * x;
            sxy += x * v[i];
        }
        const double den = s0 * sxx - sx * sx;
        if (!(den > 0))
            break;
        b = (s0 * sxy - sx * sy) / den;
        a = (sy - b * sx) / s0;
        double ss = 0;
        for (size_t i = 0; i < n; i++)
            if (!bad[i]) {
                const double r = v[i] - (a + b * ((double)(i + 1) - mid));
                ss += r * r;
            }
        const double lim = 2.5 * sqrt(ss / s0);
        size_t rejected = 0;
        for (size_t i = 0; i < n; i++) {
            const double r = v[i] - (a + b * ((double)(i + 1) - mid));
            if (!bad[i] && fabs(r) > lim) {
                bad[i] = 1; /* rejected in this pass */
                rejected++;
            }
        }
        for (size_t i = 0; i < n; i++) /* their neighbours go too */
            if (bad[i] == 1) {
                if (i > 0 && !bad[i - 1])
                    bad[i - 1] = 2;
                if (i + 1 < n && !bad[i + 1])
                    bad[i + 1] = 2;
                bad[i] = 3;
            }
        good = 0;
        for (size_t i = 0; i < n; i++)
            good += !bad[i];
        if (rejected == 0 || good < n / 2)
            break;
    }
    free(bad);
    if (good < n / 2)
        return;
    const double slope = b / 0.25;
    const double lo = a + slope * (1.0 - mid), hi = a + slope * ((double)n - mid);
    if (lo > *z1)
        *z1 = lo;
    if (hi < *z2)
        *z2 = hi;
}

/* 1, 2 or 5 times a power of ten: the smallest of them >= span / target. */
static double nice_step(double span, int target)
{
    double raw = span / target;
    double p = pow(10.0, floor(log10(raw)));
    double m = raw / p;
    double f = m <= 1.0 + 1e-9 ? 1.0 : m <= 2.0 + 1e-9 ? 2.0 : m <= 5.0 + 1e-9 ? 5.0 : 10.0;
    return f * p;
}

/* A tick value's text: as many decimals as `step` (a power of ten, or 2 or 5 of one) needs;
 * %.3g for very large or small numbers; a value within step * 1e-9 of 0 is "0". */
static void tick_text(double v, double step, char *out, size_t cap)
{
    if (fabs(v) < fabs(step) * 1e-9)
        v = 0.0;
    double a = fabs(v) > fabs(step) ? fabs(v) : fabs(step);
    if (a >= 1e6 || fabs(step) < 1e-4) {
        snprintf(out, cap, "%.3g", v);
        return;
    }
    int dec = (int)ceil(-log10(fabs(step)) - 1e-9);
    if (dec < 0)
        dec = 0;
    snprintf(out, cap, "%.*f", dec, v);
}

/* Bar row of a value (its position on the colour scale). */
static int bar_row(const png_job *j, double v)
{
    return j->bar_y1 - (int)lround(scale_pos(j, v) * (j->bar_y1 - j->bar_y0));
}

/* Adds a tick at value v (text from step) when it keeps `gap` rows from the ticks placed. */
static void try_tick(png_job *j, double v, double step, int gap)
{
    if (j->nticks >= MAX_TICKS)
        return;
    const int y = bar_row(j, v);
    for (int k = 0; k < j->nticks; k++)
        if (abs(j->tick_y[k] - y) < gap)
            return;
    text_item *ti = &j->text[j->ntext++];
    tick_text(v, step, ti->s, sizeof ti->s);
    j->tick_y[j->nticks++] = y;
}

/*
 * The bar's ticks at round values. Linear: every multiple of a 1-2-5 step in the range, the step
 * giving about one tick per 12 text heights of bar. Asinh: 0, then +-10^k, then +-2 10^k and
 * +-5 10^k, each where it keeps a text height and a half from the others.
 */
static void place_ticks(png_job *j)
{
    const int s = j->s, bh = j->bar_y1 - j->bar_y0;
    const double lo = j->lo < j->hi ? j->lo : j->hi, hi = j->lo < j->hi ? j->hi : j->lo;
    const int gap = 11 * s;
    j->nticks = 0;
    if (!(hi > lo))
        return;
    if (j->stretch != SW_PNG_ASINH) {
        int target = bh / (12 * s);
        target = target < 2 ? 2 : target > 8 ? 8 : target;
        const double step = nice_step(hi - lo, target);
        const double k0 = ceil(lo / step - 1e-9), k1 = floor(hi / step + 1e-9);
        for (double k = k0; k <= k1 && j->nticks < MAX_TICKS; k++)
            try_tick(j, k * step, step, gap / 2);
        return;
    }
    if (lo <= 0 && hi >= 0)
        try_tick(j, 0.0, 1.0, gap);
    const double big = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
    const int e1 = (int)floor(log10(big)), e0 = e1 - 8;
    static const double mult[3] = {1.0, 5.0, 2.0};
    for (int m = 0; m < 3; m++)
        for (int e = e1; e >= e0; e--)
            for (int sign = 1; sign >= -1; sign -= 2) {
                const double p = pow(10.0, e), v = sign * mult[m] * p;
                if (v >= lo && v <= hi)
                    try_tick(j, v, p, gap);
            }
}

/* Sorts the ticks (and their texts) from the top of the bar down; places their texts. */
static void finish_ticks(png_job *j, int text_x)
{
    for (int a = 1; a < j->nticks; a++)
        for (int b = a; b > 0 && j->tick_y[b] < j->tick_y[b - 1]; b--) {
            int ty = j->tick_y[b];
            j->tick_y[b] = j->tick_y[b - 1];
            j->tick_y[b - 1] = ty;
            text_item tt = j->text[b];
            j->text[b] = j->text[b - 1];
            j->text[b - 1] = tt;
        }
    for (int k = 0; k < j->nticks; k++) {
        j->text[k].x = text_x;
        j->text[k].y = j->tick_y[k] - 3 * j->s;
    }
}

/* Copies a label or title, keeping printable ASCII; the micro sign in UTF-8 (U+00B5, U+03BC)
 * becomes the font's micro glyph; other bytes are dropped. */
static void copy_label(const char *label, char *out)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)label; *p && n < LABEL_MAX; p++) {
        if ((p[0] == 0xC2 && p[1] == 0xB5) || (p[0] == 0xCE && p[1] == 0xBC)) {
            out[n++] = GLYPH_MICRO;
            p++;
        } else if (*p >= 0x20 && *p < 0x7F) {
            out[n++] = (char)*p;
        }
    }
    out[n] = '\0';
}

static void layout(png_job *j, const char *label, const char *title)
{
    const sw_image *img = j->img;
    int s = 1 + img->height / 400;
    if (s > 4)
        s = 4;
    j->s = s;
    j->mark_w = s;
    j->ntext = 0;
    j->nticks = 0;
    char head[LABEL_MAX + 1] = "";
    if (title)
        copy_label(title, head);
    j->img_y0 = head[0] ? 15 * s : 0;
    j->cw = img->width;
    j->ch = j->img_y0 + img->height;
    if (j->bar) {
        char unit[LABEL_MAX + 1] = "";
        if (label)
            copy_label(label, unit);
        int has_label = unit[0] != '\0';
        int top = 4 * s, bottom = has_label ? 15 * s : 4 * s, minbar = 40 * s;
        if (j->ch < j->img_y0 + top + minbar + bottom + 1)
            j->ch = j->img_y0 + top + minbar + bottom + 1;
        j->bar_x0 = img->width + 6 * s + 1;
        j->bar_x1 = j->bar_x0 + 12 * s;
        j->bar_y0 = j->img_y0 + top;
        j->bar_y1 = j->ch - 1 - bottom;
        j->tick_len = 3 * s;
        int text_x = j->bar_x1 + 1 + j->tick_len + 2 * s;
        place_ticks(j);
        finish_ticks(j, text_x);
        int maxlen = 0;
        for (int k = 0; k < j->nticks; k++) {
            int len = (int)strlen(j->text[k].s);
            maxlen = len > maxlen ? len : maxlen;
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
    if (head[0]) {
        /* centred over the image, the canvas widened when it is longer */
        const int tw = (int)strlen(head) * 6 * s - s;
        if (tw + 4 * s > j->cw)
            j->cw = tw + 4 * s;
        text_item *ti = &j->text[j->ntext++];
        memcpy(ti->s, head, sizeof head);
        ti->x = img->width >= tw + 4 * s ? (img->width - tw) / 2 : 2 * s;
        ti->y = 4 * s;
    }
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
    o->title = NULL;
    o->stretch = SW_PNG_LINEAR;
    o->softening = 0.0;
    o->markers = NULL;
    o->nmarkers = 0;
    o->marker_rgb[0] = 255;
    o->marker_rgb[1] = 48;
    o->marker_rgb[2] = 48;
}

/* The value range (and asinh's softening) the options ask for. */
static sw_status choose_range(png_job *j, const sw_png_options *opts)
{
    const sw_image *img = j->img;
    double lo = opts->vmin, hi = opts->vmax;
    const int automatic = lo == hi;
    double *sample = NULL;
    size_t n = 0;
    if ((automatic && opts->stretch != SW_PNG_LINEAR) ||
        (opts->stretch == SW_PNG_ASINH && opts->softening == 0.0)) {
        sample = sorted_sample(j, &n);
        if (!sample)
            return sw_fail(j->ctx, SW_ENOMEM, "%s: out of memory for a pixel sample", j->path);
    }
    if (automatic) {
        lo = INFINITY;
        hi = -INFINITY;
        if (opts->stretch != SW_PNG_ZSCALE) { /* the finite maximum (and minimum) */
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
        }
        if (opts->stretch != SW_PNG_LINEAR && n > 0) {
            double z1, z2;
            zscale(sample, n, &z1, &z2);
            lo = z1;
            if (opts->stretch == SW_PNG_ZSCALE)
                hi = z2;
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
    j->beta = opts->softening;
    if (opts->stretch == SW_PNG_ASINH && j->beta == 0.0) {
        /* three times the noise: 1.4826 x the median absolute deviation of the sample */
        double sigma = 0.0;
        if (n > 0) {
            const double med = sample[n / 2];
            double *dev = malloc(n * sizeof *dev);
            if (dev) {
                for (size_t i = 0; i < n; i++)
                    dev[i] = fabs(sample[i] - med);
                qsort(dev, n, sizeof *dev, cmp_double);
                sigma = 1.4826 * dev[n / 2];
                free(dev);
            }
        }
        j->beta = 3.0 * sigma / fabs(hi - lo);
        if (!(j->beta >= 1e-4))
            j->beta = sigma > 0 ? 1e-4 : 0.1;
        if (j->beta > 1.0)
            j->beta = 1.0;
    }
    if (opts->stretch == SW_PNG_ASINH)
        j->asinh_norm = asinh(1.0 / j->beta);
    free(sample);
    return SW_OK;
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
    if (opts->stretch != SW_PNG_LINEAR && opts->stretch != SW_PNG_ASINH &&
        opts->stretch != SW_PNG_ZSCALE)
        return sw_fail(ctx, SW_EINVAL, "%s: unknown stretch %d", path, (int)opts->stretch);
    if (!isfinite(opts->vmin) || !isfinite(opts->vmax))
        return sw_fail(ctx, SW_EINVAL, "%s: the colour range [%g, %g] is not finite", path,
                       opts->vmin, opts->vmax);
    if (!(opts->softening >= 0.0 && opts->softening <= 1.0))
        return sw_fail(ctx, SW_EINVAL, "%s: softening %g is not in 0..1", path, opts->softening);
    if (opts->nmarkers < 0 || (opts->nmarkers > 0 && !opts->markers))
        return sw_fail(ctx, SW_EINVAL, "%s: %d markers given at %p", path, (int)opts->nmarkers,
                       (const void *)opts->markers);

    png_job *j = calloc(1, sizeof *j);
    if (!j)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    j->ctx = ctx;
    j->img = img;
    j->path = path;
    j->bar = opts->scale_bar != 0;
    j->nan_transparent = opts->nan_transparent != 0;
    j->marks = opts->markers;
    j->nmarks = opts->nmarkers;
    memcpy(j->mark_rgb, opts->marker_rgb, 3);
    j->channels = j->nan_transparent                                   ? 4
                  : (opts->colormap == SW_CMAP_GREY && j->nmarks == 0) ? 1
                                                                       : 3;
    j->cmap = opts->colormap;
    j->stretch = opts->stretch;
    j->vals = malloc((size_t)img->width * sizeof *j->vals);
    if (!j->vals) {
        free(j);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory for a row buffer", path);
    }
    if ((st = choose_range(j, opts)) != SW_OK) {
        free(j->vals);
        free(j);
        return st;
    }
    layout(j, opts->label, opts->title);

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
