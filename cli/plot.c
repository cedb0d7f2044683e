/*
 * The command's line-plot rasteriser (plot.h): canvas, lines, a 5x7 bitmap font, panels with
 * ticks, grid, legend, and the PNG writer (libpng).
 */
#define _POSIX_C_SOURCE 200809L

#include "plot.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SIDE 16384

/* ------------------------------------------------------------------ canvas */

int sw_plot_canvas_init(sw_plot_canvas *c, int32_t width, int32_t height, sw_plot_rgb background)
{
    memset(c, 0, sizeof *c);
    if (width < 1 || height < 1 || width > MAX_SIDE || height > MAX_SIDE)
        return -1;
    const size_t n = (size_t)width * (size_t)height;
    c->rgb = malloc(3 * n);
    if (!c->rgb)
        return -1;
    c->width = width;
    c->height = height;
    for (size_t i = 0; i < n; i++) {
        c->rgb[3 * i] = background.r;
        c->rgb[3 * i + 1] = background.g;
        c->rgb[3 * i + 2] = background.b;
    }
    return 0;
}

void sw_plot_canvas_free(sw_plot_canvas *c)
{
    free(c->rgb);
    memset(c, 0, sizeof *c);
}

void sw_plot_pixel(sw_plot_canvas *c, int32_t x, int32_t y, sw_plot_rgb colour)
{
    if (x < 0 || y < 0 || x >= c->width || y >= c->height)
        return;
    unsigned char *p = c->rgb + 3 * ((size_t)y * (size_t)c->width + (size_t)x);
    p[0] = colour.r;
    p[1] = colour.g;
    p[2] = colour.b;
}

void sw_plot_fill(sw_plot_canvas *c, int32_t x0, int32_t y0, int32_t x1, int32_t y1,
                  sw_plot_rgb colour)
{
    if (x0 < 0)
        x0 = 0;
    if (y0 < 0)
        y0 = 0;
    if (x1 >= c->width)
        x1 = c->width - 1;
    if (y1 >= c->height)
        y1 = c->height - 1;
    for (int32_t y = y0; y <= y1; y++)
        for (int32_t x = x0; x <= x1; x++)
            sw_plot_pixel(c, x, y, colour);
}

/* ------------------------------------------------------------------ lines */

/* Liang-Barsky: the part t in [*t0, *t1] of P(t) = (x0 + t dx, y0 + t dy) inside [lo, hi]
 * along one axis. Returns 0 when nothing is left. */
static int clip_axis(double p0, double d, double lo, double hi, double *t0, double *t1)
{
    if (d == 0.0)
        return p0 >= lo && p0 <= hi;
    double a = (lo - p0) / d, b = (hi - p0) / d;
    if (a > b) {
        const double t = a;
        a = b;
        b = t;
    }
    if (a > *t0)
        *t0 = a;
    if (b < *t1)
        *t1 = b;
    return *t0 <= *t1;
}

void sw_plot_line(sw_plot_canvas *c, double x0, double y0, double x1, double y1, sw_plot_rgb colour,
                  int thickness, int dash, double *phase, const sw_plot_rect *clip)
{
    if (!isfinite(x0) || !isfinite(y0) || !isfinite(x1) || !isfinite(y1))
        return;
    if (thickness < 1)
        thickness = 1;
    if (thickness > 8)
        thickness = 8;
    sw_plot_rect r = {0, 0, c->width - 1, c->height - 1};
    if (clip)
        r = *clip;
    const double dx = x1 - x0, dy = y1 - y0;
    const double length = hypot(dx, dy);
    const double start = phase ? *phase : 0.0;
    if (phase)
        *phase += length;
    /* Clip the segment to the rectangle grown by the brush, so that far-away points (data off
     * the axis range) cost nothing. */
    double t0 = 0.0, t1 = 1.0;
    const double m = thickness;
    if (!clip_axis(x0, dx, r.x0 - m, r.x1 + m, &t0, &t1) ||
        !clip_axis(y0, dy, r.y0 - m, r.y1 + m, &t0, &t1))
        return;
    const double span = (t1 - t0) * fmax(fabs(dx), fabs(dy));
    const int64_t steps = (int64_t)ceil(span);
    const int on = dash, period = dash > 0 ? dash + dash / 2 + 1 : 1;
    const int lo = -(thickness - 1) / 2, hi = thickness / 2;
    for (int64_t i = 0; i <= steps; i++) {
        const double t = steps > 0 ? (double)i / (double)steps : 0.0;
        const double tt = t0 + t * (t1 - t0); /* position on the whole segment */
        if (dash > 0) {
            /* distance along the line: product before the division, so that whole pixels of
             * an axis-parallel line come out whole */
            const double along =
                start + t0 * length +
                (steps > 0 ? (double)i * (length * (t1 - t0)) / (double)steps : 0.0);
            if (fmod(along, (double)period) >= (double)on)
                continue;
        }
        const int32_t px = (int32_t)floor(x0 + tt * dx + 0.5);
        const int32_t py = (int32_t)floor(y0 + tt * dy + 0.5);
        for (int b = lo; b <= hi; b++)
            for (int a = lo; a <= hi; a++) {
                const int32_t qx = px + a, qy = py + b;
                if (qx >= r.x0 && qx <= r.x1 && qy >= r.y0 && qy <= r.y1)
                    sw_plot_pixel(c, qx, qy, colour);
            }
    }
}

/* ------------------------------------------------------------------ 5x7 font */

typedef struct plot_glyph {
    char ch;
    unsigned char rows[7]; /* bit 4: the leftmost column */
} plot_glyph;

/* Drawn for this plotter: round digits, lower-case letters with ascenders in the top two rows. */
static const plot_glyph glyphs[] = {
    {'0', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x14, 0x04, 0x04, 0x04, 0x1F}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x0E, 0x11, 0x01, 0x06, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x0E, 0x10, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x01, 0x0E}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}},
    {'b', {0x10, 0x10, 0x1E, 0x11, 0x11, 0x11, 0x1E}},
    {'c', {0x00, 0x00, 0x0F, 0x10, 0x10, 0x10, 0x0F}},
    {'d', {0x01, 0x01, 0x0F, 0x11, 0x11, 0x11, 0x0F}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0F}},
    {'f', {0x06, 0x08, 0x1C, 0x08, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x00, 0x0F, 0x11, 0x0F, 0x01, 0x0E}},
    {'h', {0x10, 0x10, 0x1E, 0x11, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}},
    {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}},
    {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x15, 0x15}},
    {'n', {0x00, 0x00, 0x1E, 0x11, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}},
    {'p', {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x00, 0x0F, 0x11, 0x0F, 0x01, 0x01}},
    {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0F, 0x10, 0x0E, 0x01, 0x1E}},
    {'t', {0x08, 0x08, 0x1E, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x11, 0x0F}},
    {'v', {0x00, 0x00, 0x11, 0x11, 0x0A, 0x0A, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A}},
    {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
    {' ', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
    {'-', {0x00, 0x00, 0x00, 0x0E, 0x00, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'/', {0x01, 0x02, 0x02, 0x04, 0x08, 0x08, 0x10}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}},
    {'%', {0x19, 0x19, 0x02, 0x04, 0x08, 0x13, 0x13}},
    {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
    {'?', {0x0E, 0x11, 0x02, 0x04, 0x04, 0x00, 0x04}},
    /* the micro sign (SW_PLOT_MICRO): a u whose left stroke runs down to a descender */
    {SW_PLOT_MICRO, {0x00, 0x00, 0x11, 0x11, 0x13, 0x1D, 0x10}},
};

/* The character at s[*k] and the bytes it takes: the micro sign in UTF-8 (U+00B5 as C2 B5,
 * U+03BC as CE BC) is one character, SW_PLOT_MICRO; any other byte is itself. */
static char next_char(const char *s, size_t *k)
{
    const unsigned char a = (unsigned char)s[*k], b = a ? (unsigned char)s[*k + 1] : 0;
    if ((a == 0xC2 && b == 0xB5) || (a == 0xCE && b == 0xBC)) {
        *k += 2;
        return SW_PLOT_MICRO;
    }
    *k += 1;
    return (char)a;
}

const unsigned char *sw_plot_glyph(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        ch = (char)(ch - 'A' + 'a');
    const unsigned char *unknown = NULL;
    for (size_t i = 0; i < sizeof glyphs / sizeof glyphs[0]; i++) {
        if (glyphs[i].ch == ch)
            return glyphs[i].rows;
        if (glyphs[i].ch == '?')
            unknown = glyphs[i].rows;
    }
    return unknown;
}

int32_t sw_plot_text_width(const char *s, int scale)
{
    size_t n = 0;
    for (size_t k = 0; s[k]; n++)
        next_char(s, &k);
    return n == 0 ? 0 : (int32_t)(6 * n - 1) * scale;
}

/* Draws the text with glyph cell (u, v) (u along the text, v down the glyph) at canvas
 * (ox + u, oy + v) when upright, (ox + v, oy - u) when turned to read upwards. */
static int32_t draw_text(sw_plot_canvas *c, int32_t ox, int32_t oy, const char *s, int scale,
                         sw_plot_rgb colour, int up)
{
    if (scale < 1)
        scale = 1;
    for (size_t i = 0, k = 0; s[i]; k++) {
        const unsigned char *g = sw_plot_glyph(next_char(s, &i));
        for (int row = 0; row < 7; row++)
            for (int col = 0; col < 5; col++) {
                if (!(g[row] & (0x10 >> col)))
                    continue;
                for (int b = 0; b < scale; b++)
                    for (int a = 0; a < scale; a++) {
                        const int32_t u = (int32_t)(6 * k + (size_t)col) * scale + a;
                        const int32_t v = row * scale + b;
                        if (up)
                            sw_plot_pixel(c, ox + v, oy - u, colour);
                        else
                            sw_plot_pixel(c, ox + u, oy + v, colour);
                    }
            }
    }
    return sw_plot_text_width(s, scale);
}

int32_t sw_plot_text(sw_plot_canvas *c, int32_t x, int32_t y, const char *s, int scale,
                     sw_plot_rgb colour)
{
    return draw_text(c, x, y, s, scale, colour, 0);
}

int32_t sw_plot_text_up(sw_plot_canvas *c, int32_t x, int32_t y, const char *s, int scale,
                        sw_plot_rgb colour)
{
    return draw_text(c, x, y, s, scale, colour, 1);
}

/* ------------------------------------------------------------------ ticks */

double sw_plot_nice_step(double span, int target)
{
    if (!(span > 0) || !isfinite(span))
        return 1.0;
    if (target < 1)
        target = 1;
    const double raw = span / target;
    double p = pow(10.0, floor(log10(raw)));
    /* 1, 2, 5 x p, then 10 p: the smallest not below raw (with a hair of tolerance). */
    static const double mult[4] = {1.0, 2.0, 5.0, 10.0};
    for (int i = 0; i < 4; i++)
        if (mult[i] * p >= raw * (1.0 - 1e-9))
            return mult[i] * p;
    return 10.0 * p;
}

void sw_plot_tick_label(double v, double step, char *buf, size_t size)
{
    if (fabs(v) < 1e-9 * fabs(step))
        v = 0.0; /* no "-0" */
    if (fabs(v) >= 1e6 || fabs(step) >= 1e6 || !(step > 0)) {
        snprintf(buf, size, "%.3g", v);
        return;
    }
    int decimals = step >= 1.0 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (decimals > 9) {
        snprintf(buf, size, "%.3g", v);
        return;
    }
    snprintf(buf, size, "%.*f", decimals, v);
    if (strcmp(buf, "-0") == 0 || (buf[0] == '-' && strspn(buf + 1, "0.") == strlen(buf + 1)))
        memmove(buf, buf + 1, strlen(buf)); /* "-0.00" -> "0.00" */
}

/* ------------------------------------------------------------------ panels */

static const sw_plot_rgb black = {0, 0, 0};
static const sw_plot_rgb white = {255, 255, 255};
static const sw_plot_rgb grid_grey = {226, 226, 226};
static const sw_plot_rgb frame_grey = {150, 150, 150};
static const sw_plot_rgb marker_grey = {120, 120, 120};

/* One axis' range: fixed ends, or the data's rounded outwards to the tick step. */
static void axis_range(double fixed_lo, double fixed_hi, double data_lo, double data_hi, double *lo,
                       double *hi, double *step)
{
    if (!(data_lo <= data_hi)) { /* no finite data */
        data_lo = 0.0;
        data_hi = 1.0;
    }
    double a = isnan(fixed_lo) ? data_lo : fixed_lo;
    double b = isnan(fixed_hi) ? data_hi : fixed_hi;
    if (!(b > a)) {
        if (isnan(fixed_hi))
            b = a + 1.0;
        else
            a = b - 1.0;
    }
    const double s = sw_plot_nice_step(b - a, 5);
    if (isnan(fixed_lo))
        a = floor(a / s + 1e-9) * s;
    if (isnan(fixed_hi))
        b = ceil(b / s - 1e-9) * s;
    *lo = a;
    *hi = b;
    *step = s;
}

double sw_plot_map_x(const sw_plot_axes *a, double x)
{
    return a->area.x0 + (x - a->xmin) / (a->xmax - a->xmin) * (a->area.x1 - a->area.x0);
}

double sw_plot_map_y(const sw_plot_axes *a, double y)
{
    return a->area.y1 - (y - a->ymin) / (a->ymax - a->ymin) * (a->area.y1 - a->area.y0);
}

/* The ticks of [lo, hi] with step s: count, and the first one. */
static int tick_count(double lo, double hi, double s, double *first)
{
    *first = ceil(lo / s - 1e-9) * s;
    int n = 0;
    while (n < 200 && *first + n * s <= hi + 1e-9 * s)
        n++;
    return n;
}

/* How much of the series lies inside the rectangle (for placing the legend): every segment
 * sampled about every two pixels. */
static int64_t points_inside(const sw_plot_panel *p, const sw_plot_axes *a, const sw_plot_rect *r)
{
    int64_t n = 0;
    for (int s = 0; s < p->nseries; s++) {
        const sw_plot_series *se = &p->series[s];
        for (int64_t i = 0; i < se->n; i++) {
            const double x0 = sw_plot_map_x(a, se->x[i]), y0 = sw_plot_map_y(a, se->y[i]);
            const int64_t j = i + 1 < se->n ? i + 1 : i;
            const double x1 = sw_plot_map_x(a, se->x[j]), y1 = sw_plot_map_y(a, se->y[j]);
            if (!isfinite(x0) || !isfinite(y0) || !isfinite(x1) || !isfinite(y1))
                continue;
            const double len = fmin(fmax(fabs(x1 - x0), fabs(y1 - y0)), 4096.0);
            const int k = (int)(len / 2.0) + 1;
            for (int t = 0; t < k; t++) {
                const double x = x0 + (x1 - x0) * t / k, y = y0 + (y1 - y0) * t / k;
                if (x >= r->x0 && x <= r->x1 && y >= r->y0 && y <= r->y1)
                    n++;
            }
        }
    }
    return n;
}

static void draw_legend(sw_plot_canvas *c, const sw_plot_panel *p, const sw_plot_axes *a)
{
    const int s = p->scale;
    const int32_t ch = 7 * s, pad = 3 * s, sample = 10 * s;
    int entries = 0;
    int32_t wmax = 0;
    for (int i = 0; i < p->nseries; i++)
        if (p->series[i].label) {
            entries++;
            const int32_t w = sw_plot_text_width(p->series[i].label, s);
            wmax = w > wmax ? w : wmax;
        }
    if (!isnan(p->vline) && p->vline_label) {
        entries++;
        const int32_t w = sw_plot_text_width(p->vline_label, s);
        wmax = w > wmax ? w : wmax;
    }
    if (entries == 0)
        return;
    const int32_t bw = pad + sample + pad + wmax + pad, bh = pad + entries * (ch + pad);
    const int32_t inset = 2 * s;
    /* Candidates: the four corners first, then the middles of the sides and the centre. */
    const int32_t xl = a->area.x0 + inset, xr = a->area.x1 - inset - bw;
    const int32_t yt = a->area.y0 + inset, yb = a->area.y1 - inset - bh;
    const int32_t xm = (xl + xr) / 2, ym = (yt + yb) / 2;
    const int32_t cx[9] = {xr, xl, xr, xl, xr, xl, xm, xm, xm};
    const int32_t cy[9] = {yt, yt, yb, yb, ym, ym, yt, yb, ym};
    sw_plot_rect corners[9];
    int best = 0;
    int64_t fewest = -1;
    for (int k = 0; k < 9; k++) {
        corners[k] = (sw_plot_rect){cx[k], cy[k], cx[k] + bw, cy[k] + bh};
        const int64_t n = points_inside(p, a, &corners[k]);
        if (fewest < 0 || n < fewest) {
            fewest = n;
            best = k;
        }
    }
    const sw_plot_rect b = corners[best];
    sw_plot_fill(c, b.x0, b.y0, b.x1, b.y1, white);
    sw_plot_line(c, b.x0, b.y0, b.x1, b.y0, frame_grey, 1, 0, NULL, NULL);
    sw_plot_line(c, b.x0, b.y1, b.x1, b.y1, frame_grey, 1, 0, NULL, NULL);
    sw_plot_line(c, b.x0, b.y0, b.x0, b.y1, frame_grey, 1, 0, NULL, NULL);
    sw_plot_line(c, b.x1, b.y0, b.x1, b.y1, frame_grey, 1, 0, NULL, NULL);
    int32_t y = b.y0 + pad;
    for (int i = 0; i < p->nseries + 1; i++) {
        const char *label;
        sw_plot_rgb col;
        int dash;
        if (i < p->nseries) {
            label = p->series[i].label;
            col = p->series[i].colour;
            dash = p->series[i].dashed ? 4 * s : 0;
        } else {
            label = isnan(p->vline) ? NULL : p->vline_label;
            col = marker_grey;
            dash = 2 * s;
        }
        if (!label)
            continue;
        const double yline = y + (ch - 1) / 2.0;
        double phase = 0.0;
        sw_plot_line(c, b.x0 + pad, yline, b.x0 + pad + sample, yline, col, i < p->nseries ? s : 1,
                     dash, &phase, NULL);
        sw_plot_text(c, b.x0 + pad + sample + pad, y, label, s, black);
        y += ch + pad;
    }
}

int sw_plot_panel_draw(sw_plot_canvas *c, const sw_plot_panel *p, sw_plot_axes *axes)
{
    const int s = p->scale < 1 ? 1 : (p->scale > 4 ? 4 : p->scale);
    sw_plot_panel q = *p;
    q.scale = s;
    const int32_t ch = 7 * s, pad = 3 * s, tick = 3 * s;

    /* Data ranges. */
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int k = 0; k < p->nseries; k++)
        for (int64_t i = 0; i < p->series[k].n; i++) {
            const double x = p->series[k].x[i], y = p->series[k].y[i];
            if (!isfinite(x) || !isfinite(y))
                continue;
            xlo = fmin(xlo, x);
            xhi = fmax(xhi, x);
            ylo = fmin(ylo, y);
            yhi = fmax(yhi, y);
        }
    sw_plot_axes a;
    memset(&a, 0, sizeof a);
    axis_range(p->xmin, p->xmax, xlo, xhi, &a.xmin, &a.xmax, &a.xstep);
    axis_range(p->ymin, p->ymax, ylo, yhi, &a.ymin, &a.ymax, &a.ystep);

    /* Layout: the widest y tick label sets the left margin; the last x label the right one. */
    char label[64];
    double yfirst, xfirst;
    const int ny = tick_count(a.ymin, a.ymax, a.ystep, &yfirst);
    const int nx = tick_count(a.xmin, a.xmax, a.xstep, &xfirst);
    int32_t wy = 0;
    for (int i = 0; i < ny; i++) {
        sw_plot_tick_label(yfirst + i * a.ystep, a.ystep, label, sizeof label);
        const int32_t w = sw_plot_text_width(label, s);
        wy = w > wy ? w : wy;
    }
    sw_plot_tick_label(xfirst + (nx > 0 ? nx - 1 : 0) * a.xstep, a.xstep, label, sizeof label);
    const int32_t wx_last = sw_plot_text_width(label, s);

    const int32_t top = p->y + pad + (p->title ? ch + 2 * pad : 0);
    const int32_t left = p->x + pad + (p->ylabel ? ch + 2 * pad : 0) + wy + pad + tick;
    const int32_t bottom =
        p->y + p->height - 1 - pad - (p->xlabel ? ch + 2 * pad : 0) - ch - pad - tick;
    const int32_t right = p->x + p->width - 1 - pad - wx_last / 2;
    if (right - left < 24 || bottom - top < 24)
        return -1;
    a.area.x0 = left + 1;
    a.area.y0 = top + 1;
    a.area.x1 = right - 1;
    a.area.y1 = bottom - 1;

    /* Grid and ticks. */
    for (int i = 0; i < ny; i++) {
        const double v = yfirst + i * a.ystep;
        const int32_t py = (int32_t)floor(sw_plot_map_y(&a, v) + 0.5);
        sw_plot_line(c, a.area.x0, py, a.area.x1, py, grid_grey, 1, 0, NULL, &a.area);
        sw_plot_line(c, left - tick, py, left - 1, py, black, 1, 0, NULL, NULL);
        sw_plot_tick_label(v, a.ystep, label, sizeof label);
        sw_plot_text(c, left - tick - pad - sw_plot_text_width(label, s), py - ch / 2, label, s,
                     black);
    }
    for (int i = 0; i < nx; i++) {
        const double v = xfirst + i * a.xstep;
        const int32_t px = (int32_t)floor(sw_plot_map_x(&a, v) + 0.5);
        sw_plot_line(c, px, a.area.y0, px, a.area.y1, grid_grey, 1, 0, NULL, &a.area);
        sw_plot_line(c, px, bottom + 1, px, bottom + tick, black, 1, 0, NULL, NULL);
        sw_plot_tick_label(v, a.xstep, label, sizeof label);
        sw_plot_text(c, px - sw_plot_text_width(label, s) / 2, bottom + tick + pad, label, s,
                     black);
    }

    /* The marker, the series, then the frame over their ends. */
    if (!isnan(p->vline)) {
        const double px = sw_plot_map_x(&a, p->vline);
        double phase = 0.0;
        sw_plot_line(c, px, a.area.y1, px, a.area.y0, marker_grey, 1, 2 * s, &phase, &a.area);
    }
    for (int k = 0; k < p->nseries; k++) {
        const sw_plot_series *se = &p->series[k];
        double phase = 0.0;
        for (int64_t i = 0; i + 1 < se->n; i++)
            sw_plot_line(c, sw_plot_map_x(&a, se->x[i]), sw_plot_map_y(&a, se->y[i]),
                         sw_plot_map_x(&a, se->x[i + 1]), sw_plot_map_y(&a, se->y[i + 1]),
                         se->colour, s, se->dashed ? 4 * s : 0, &phase, &a.area);
        if (se->n == 1) /* a lone point: a dot */
            sw_plot_line(c, sw_plot_map_x(&a, se->x[0]), sw_plot_map_y(&a, se->y[0]),
                         sw_plot_map_x(&a, se->x[0]), sw_plot_map_y(&a, se->y[0]), se->colour,
                         s + 2, 0, NULL, &a.area);
    }
    sw_plot_line(c, left, top, right, top, black, 1, 0, NULL, NULL);
    sw_plot_line(c, left, bottom, right, bottom, black, 1, 0, NULL, NULL);
    sw_plot_line(c, left, top, left, bottom, black, 1, 0, NULL, NULL);
    sw_plot_line(c, right, top, right, bottom, black, 1, 0, NULL, NULL);

    /* Title, axis labels, legend. */
    if (p->title)
        sw_plot_text(c, (left + right) / 2 - sw_plot_text_width(p->title, s) / 2, p->y + pad,
                     p->title, s, black);
    if (p->xlabel)
        sw_plot_text(c, (left + right) / 2 - sw_plot_text_width(p->xlabel, s) / 2,
                     bottom + tick + pad + ch + 2 * pad, p->xlabel, s, black);
    if (p->ylabel)
        sw_plot_text_up(c, p->x + pad, (top + bottom) / 2 + sw_plot_text_width(p->ylabel, s) / 2,
                        p->ylabel, s, black);
    draw_legend(c, &q, &a);
    if (axes)
        *axes = a;
    return 0;
}

/* ------------------------------------------------------------------ PNG */

typedef struct png_out {
    FILE *f;
    const sw_plot_canvas *c;
    char message[200];
    png_structp png;
    png_infop info;
} png_out;

static void on_png_error(png_structp png, png_const_charp msg)
{
    png_out *o = png_get_error_ptr(png);
    snprintf(o->message, sizeof o->message, "%s", msg);
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void png_rows(png_out *o)
{
    png_init_io(o->png, o->f);
    png_set_IHDR(o->png, o->info, (png_uint_32)o->c->width, (png_uint_32)o->c->height, 8,
                 PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(o->png, o->info);
    for (int32_t y = 0; y < o->c->height; y++)
        png_write_row(o->png, o->c->rgb + 3 * (size_t)y * (size_t)o->c->width);
    png_write_end(o->png, o->info);
}

/* 0, or 1 after a libpng error (its message in o->message). */
static int png_guarded(png_out *o)
{
    if (setjmp(png_jmpbuf(o->png)))
        return 1;
    png_rows(o);
    return 0;
}

int sw_plot_write_png(const sw_plot_canvas *c, const char *path, char *err, size_t errsize)
{
    if (!c->rgb || c->width < 1 || c->height < 1) {
        snprintf(err, errsize, "%s: the plot is empty", path);
        return -1;
    }
    png_out o;
    memset(&o, 0, sizeof o);
    o.c = c;
    o.f = fopen(path, "wb");
    if (!o.f) {
        snprintf(err, errsize, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    o.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &o, on_png_error, on_png_warning);
    if (o.png)
        o.info = png_create_info_struct(o.png);
    if (!o.png || !o.info) {
        png_destroy_write_struct(o.png ? &o.png : NULL, NULL);
        fclose(o.f);
        remove(path);
        snprintf(err, errsize, "cannot write '%s': out of memory", path);
        return -1;
    }
    const int failed = png_guarded(&o);
    png_destroy_write_struct(&o.png, &o.info);
    /* on disk before cli/files.c renames it into place */
    const int sync_failed = !failed && (fflush(o.f) != 0 || fsync(fileno(o.f)) != 0);
    const int close_failed = fclose(o.f) != 0 || sync_failed;
    if (failed || close_failed) {
        const int e = errno;
        remove(path);
        if (failed)
            snprintf(err, errsize, "cannot write '%s': %s", path, o.message);
        else
            snprintf(err, errsize, "cannot write '%s': %s", path, strerror(e));
        return -1;
    }
    return 0;
}
