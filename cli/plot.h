/*
 * A small line-plot rasteriser for the command (`spotwave loop --plot`): an RGB canvas, panels
 * with a framed plot area, "nice" ticks with labels, grid lines, series drawn as solid or dashed
 * lines, a vertical marker, a legend, text in a built-in 5x7 bitmap font (digits, a-z, upper case
 * drawn as lower case, space and . , - + ( ) / : = % _, the micro sign written in UTF-8 (U+00B5
 * or U+03BC: "\xc2\xb5m" draws "µm"); anything else as '?'), and a PNG writer (libpng, 8-bit
 * RGB).
 *
 * Coordinates on the canvas: pixel (x, y), x to the right, y down, (0, 0) the top-left pixel.
 * Nothing here prints or exits; failures are return values with a message.
 */
#ifndef SW_CLI_PLOT_H
#define SW_CLI_PLOT_H

#include <stddef.h>
#include <stdint.h>

typedef struct sw_plot_rgb {
    unsigned char r, g, b;
} sw_plot_rgb;

typedef struct sw_plot_canvas {
    int32_t width, height;
    unsigned char *rgb; /* width x height x 3 bytes, row-major */
} sw_plot_canvas;

/* Allocates a canvas of 1..16384 pixels a side filled with `background`. 0, or -1 (bad size or
 * out of memory; the canvas is left empty). */
int sw_plot_canvas_init(sw_plot_canvas *c, int32_t width, int32_t height, sw_plot_rgb background);
void sw_plot_canvas_free(sw_plot_canvas *c);

/* One pixel; pixels outside the canvas are ignored. */
void sw_plot_pixel(sw_plot_canvas *c, int32_t x, int32_t y, sw_plot_rgb colour);
/* A filled rectangle [x0, x1] x [y0, y1] (inclusive, clipped to the canvas). */
void sw_plot_fill(sw_plot_canvas *c, int32_t x0, int32_t y0, int32_t x1, int32_t y1,
                  sw_plot_rgb colour);

/* A clip rectangle, inclusive. */
typedef struct sw_plot_rect {
    int32_t x0, y0, x1, y1;
} sw_plot_rect;

/*
 * A line from (x0, y0) to (x1, y1) (canvas pixels, fractional), stepped one pixel at a time along
 * its longer axis, each step stamped with a square brush of `thickness` pixels (1..8). dash: 0
 * solid; > 0 a dashed line, `dash` pixels on then dash / 2 + 1 off (at least one off), the phase
 * carried in *phase across the segments of one polyline (phase may be NULL for a lone segment).
 * Only pixels inside clip (NULL: the canvas) are drawn.
 */
void sw_plot_line(sw_plot_canvas *c, double x0, double y0, double x1, double y1, sw_plot_rgb colour,
                  int thickness, int dash, double *phase, const sw_plot_rect *clip);

/* The micro sign's glyph code (sw_plot_glyph(SW_PLOT_MICRO)); in text, write it in UTF-8. */
#define SW_PLOT_MICRO ((char)0xB5)

/* Text: glyphs of 5 x 7 cells of scale x scale pixels, advancing 6 scale pixels a character (the
 * UTF-8 micro sign, two bytes, is one character).
 * sw_plot_text draws with the text's top-left corner at (x, y). sw_plot_text_up draws it turned
 * a quarter turn anticlockwise (reading upwards, 7 scale pixels wide) with the box's bottom-left
 * corner at (x, y). Both return the text's length along its direction in pixels, as
 * sw_plot_text_width does. */
int32_t sw_plot_text_width(const char *s, int scale);
int32_t sw_plot_text(sw_plot_canvas *c, int32_t x, int32_t y, const char *s, int scale,
                     sw_plot_rgb colour);
int32_t sw_plot_text_up(sw_plot_canvas *c, int32_t x, int32_t y, const char *s, int scale,
                        sw_plot_rgb colour);

/* The 7 rows of a character's glyph (bit 4 = leftmost column); '?' for characters not in the
 * font. */
const unsigned char *sw_plot_glyph(char ch);

/* A "nice" tick step for an axis spanning `span` (> 0) with about `target` (>= 1) intervals: 1, 2
 * or 5 times a power of ten, the smallest of them >= span / target. */
double sw_plot_nice_step(double span, int target);

/* Tick label text of value v on an axis with tick step `step`: fixed point with as many decimals
 * as the step needs (0 for steps >= 1), "%.3g" for |v| or step >= 1e6; "-0" is written "0". */
void sw_plot_tick_label(double v, double step, char *buf, size_t size);

/* A series: n points (x[i], y[i]); a non-finite coordinate breaks the line there. */
typedef struct sw_plot_series {
    const double *x, *y;
    int64_t n;
    sw_plot_rgb colour;
    int dashed;        /* 0 solid, 1 dashed                                      */
    const char *label; /* legend entry; NULL: none                               */
} sw_plot_series;

/*
 * A panel: a box of the canvas holding a title (top, centred), the plot area framed in black,
 * y tick labels and the y label (rotated) on the left, x tick labels and the x label below.
 * Axis ranges: xmin, xmax, ymin, ymax; a NaN end is taken from the finite data and rounded
 * outwards to a tick (a range still empty is widened by 1 around its value). vline: a dotted
 * grey vertical marker at that x (NaN: none) with legend entry vline_label (NULL: none). The
 * legend (series and marker with labels) goes where it hides the least of the lines: a corner
 * of the plot area, else the middle of a side, else the centre.
 */
typedef struct sw_plot_panel {
    int32_t x, y, width, height; /* the panel's box on the canvas */
    const char *title, *xlabel, *ylabel;
    double xmin, xmax, ymin, ymax;
    const sw_plot_series *series;
    int nseries;
    double vline;
    const char *vline_label;
    int scale; /* font scale, 1..4 */
} sw_plot_panel;

/* Where a panel's plot area and axes ended up (for tests and callers that add to it). */
typedef struct sw_plot_axes {
    sw_plot_rect area; /* the plot area inside the frame, inclusive            */
    double xmin, xmax, ymin, ymax;
    double xstep, ystep;
} sw_plot_axes;

/* Draws the panel. 0, or -1 when the box is too small for the plot area (nothing drawn);
 * axes may be NULL. */
int sw_plot_panel_draw(sw_plot_canvas *c, const sw_plot_panel *p, sw_plot_axes *axes);

/* Data (x, y) to canvas pixel coordinates (pixel centres; fractional) on drawn axes. */
double sw_plot_map_x(const sw_plot_axes *a, double x);
double sw_plot_map_y(const sw_plot_axes *a, double y);

/* Writes the canvas as an 8-bit RGB PNG. 0, or -1 with a message in err (size errsize). A failed
 * write leaves no file behind. */
int sw_plot_write_png(const sw_plot_canvas *c, const char *path, char *err, size_t errsize);

#endif /* SW_CLI_PLOT_H */
