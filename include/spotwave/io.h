/*
 * spotwave I/O: FITS (cfitsio), PGM, PNG output, CSV tables, JSON strings.
 *
 * All readers allocate the returned images with sw_image_alloc (host memory, pinned on CUDA) and
 * validate everything before returning. On failure *out is left zeroed and the message names the
 * file and the problem; the status says what kind of problem it is:
 *   SW_EFORMAT       a truncated, corrupt, zero-sized or absurd file (dimensions beyond
 *                    SW_IMAGE_MAX_DIM / SW_IMAGE_MAX_PIXELS), or not the format at all
 *   SW_EIO           the file cannot be opened or read
 *   SW_EUNSUPPORTED  valid but not supported (FITS: tile-compressed images, random groups)
 *   SW_ERANGE        pixel values that do not fit the type they are read as (FITS: BITPIX -64
 *                    values beyond the range of float)
 *   SW_ENOMEM        out of memory
 *   SW_EINVAL        bad arguments (NULL or empty path, NULL buffer or out, a FITS file name too
 *                    long for cfitsio, a frame index out of range)
 * Writers never leave a half-written file under the final name: they write to "<path>.tmp.XXXX"
 * and rename.
 */
#ifndef SPOTWAVE_IO_H
#define SPOTWAVE_IO_H

#include "spotwave/core.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ FITS */

/*
 * Reads the first image HDU with data (primary, or the first IMAGE extension when the primary
 * is empty). 2-D images give one frame; 3-D cubes NAXIS3 frames.
 * BITPIX  8        -> SW_PIX_U8
 * BITPIX 16        -> SW_PIX_U16 when BZERO = 32768 and BSCALE = 1 (unsigned convention),
 *                     otherwise SW_PIX_F32 (signed or scaled data: physical values)
 * BITPIX 32        -> SW_PIX_U32 when BZERO = 2147483648 and BSCALE = 1, otherwise SW_PIX_F32
 *                     (values beyond float precision lose digits; a debug log says so)
 * BITPIX -32       -> SW_PIX_F32
 * BITPIX -64, 64   -> SW_PIX_F32 (values are narrowed; out-of-range values: SW_ERANGE)
 * (Unsigned 8-bit with BZERO = -128, i.e. signed bytes, reads as SW_PIX_F32.)
 * Read as SW_PIX_F32, integer pixels equal to the BLANK keyword become NaN; NaN in float data
 * stays NaN. Values are returned as stored (no flips): FITS pixel (1, 1) is spotwave (0, 0).
 * Before cfitsio sees the file, the headers up to the image are checked (printable ASCII cards,
 * mandatory keywords, data present and padded to whole 2880-byte blocks). Tile-compressed images
 * (fpack) and random groups are SW_EUNSUPPORTED; gzip-compressed files are SW_EFORMAT with a hint.
 * NAXIS other than 2 or 3, or any NAXISn = 0 in the image read, is SW_EFORMAT.
 */
typedef struct sw_frames {
    int32_t count;    /* number of frames */
    sw_image *frames; /* count images, each owned */
} sw_frames;

sw_status sw_fits_read(sw_context *ctx, const char *path, sw_frames *out);
/* Convenience: reads frame `index` only (0-based) of a 2-D image or a cube. */
sw_status sw_fits_read_frame(sw_context *ctx, const char *path, int32_t index, sw_image *out);
/* Same as sw_fits_read from a memory buffer (used by the fuzzer and by embedded callers). */
sw_status sw_fits_read_memory(sw_context *ctx, const void *buf, size_t size, sw_frames *out);

/*
 * Writes frames (all the same size and type, host memory) as one primary HDU: 2-D when count is
 * 1, a NAXIS3 cube otherwise. u8 -> BITPIX 8; u16 -> BITPIX 16 with BZERO 32768; u32 -> BITPIX
 * 32 with BZERO 2147483648; f32 -> BITPIX -32. Overwrites an existing file.
 */
sw_status sw_fits_write(sw_context *ctx, const char *path, const sw_image *frames, int32_t count);

void sw_frames_free(sw_frames *f); /* frees every frame and the array; NULL is ignored */

/* ------------------------------------------------------------------ PGM (P5, binary) */

/* Reads an 8-bit (maxval <= 255 -> SW_PIX_U8) or 16-bit (maxval <= 65535 -> SW_PIX_U16,
 * big-endian as Netpbm says) P5 file; comments in the header are accepted. */
sw_status sw_pgm_read(sw_context *ctx, const char *path, sw_image *out);
sw_status sw_pgm_read_memory(sw_context *ctx, const void *buf, size_t size, sw_image *out);
/* Writes u8 (maxval 255) or u16 (maxval 65535) host images; other types are SW_EINVAL. */
sw_status sw_pgm_write(sw_context *ctx, const char *path, const sw_image *img);

/* ------------------------------------------------------------------ PNG (pictures for people) */

typedef enum sw_colormap {
    SW_CMAP_GREY = 0,     /* linear grey                                               */
    SW_CMAP_VIRIDIS = 1,  /* perceptually uniform sequential (for intensities)          */
    SW_CMAP_DIVERGING = 2 /* perceptually balanced blue-white-red (for signed maps)     */
} sw_colormap;

typedef struct sw_png_options {
    sw_colormap colormap;
    double vmin, vmax;   /* value range mapped to the colour scale; vmin == vmax: use min/max */
    int scale_bar;       /* non-zero: draw a colour bar with tick labels to the right     */
    const char *label;   /* unit label under the scale bar (e.g. "um"); may be NULL       */
    int nan_transparent; /* non-zero: NaN pixels transparent (RGBA) instead of black        */
} sw_png_options;

/* Grey, automatic range, no scale bar, no label, NaN black. */
void sw_png_options_default(sw_png_options *o);
/*
 * Writes a host image of any type as an 8-bit PNG: grey for SW_CMAP_GREY, RGB for the colour
 * maps, RGBA whenever nan_transparent is set. opts may be NULL (the defaults).
 * Values map linearly to the colour scale and are clamped at its ends (+Inf to the top colour).
 * Automatic range (vmin == vmax): the finite minimum and maximum of the image; for
 * SW_CMAP_DIVERGING -m .. m with m the largest finite |value|, so that 0 is the neutral centre;
 * a range that is still empty (a constant image) is widened around its value, which then sits
 * at the centre of the scale; an image without finite pixels uses 0 .. 1.
 * vmin > vmax reverses the scale. vmin or vmax not finite: SW_EINVAL.
 * With scale_bar the picture is wider than the image (the bar, ticks and labels sit to its right)
 * and at least tall enough for the bar (a small image gets white background below it); the image
 * itself is at the top left, pixel for pixel. Labels use a built-in 5x7 font: digits, a-z (upper
 * case is drawn as lower case), space and + - . , _ / ( ) % ^ : * =; the micro sign (UTF-8
 * U+00B5 or U+03BC) is drawn as 'u'; any other character as '?'. The label is cut at 64
 * characters.
 */
sw_status sw_png_write(sw_context *ctx, const char *path, const sw_image *img,
                       const sw_png_options *opts);

/* ------------------------------------------------------------------ text files */

/*
 * A text file written the way every spotwave writer writes: to "<path>.tmp.NNNNNN" beside it
 * (created exclusively, mode 0666 & ~umask), renamed onto path only when complete, so that a
 * failed run never leaves a half-written file. open gives the stream and the temporary name;
 * commit flushes, closes (checking for write errors such as a full disk) and renames; abort
 * closes and removes. Both free the name. SW_EIO with the path and the reason.
 */
sw_status sw_text_file_open(sw_context *ctx, const char *path, FILE **f, char **tmp);
sw_status sw_text_file_commit(sw_context *ctx, const char *path, char *tmp, FILE *f);
void sw_text_file_abort(char *tmp, FILE *f);

/* ------------------------------------------------------------------ CSV tables */

/*
 * A table of named double columns (struct of arrays). Column names carry units ("x_px").
 * Text cells are not supported: a cell must parse as a number (or "nan", "inf").
 */
typedef struct sw_table {
    int32_t ncols;
    int64_t nrows;
    char **names;     /* ncols names */
    double **cols;    /* ncols arrays of nrows values */
    int64_t capacity; /* rows allocated per column */
} sw_table;

/* Creates an empty table with the given column names (copied). */
sw_status sw_table_create(sw_context *ctx, int32_t ncols, const char *const *names, sw_table *out);
/* Appends one row of ncols values. */
sw_status sw_table_append(sw_context *ctx, sw_table *t, const double *row);
/* Index of a column by name, or -1. */
int32_t sw_table_column(const sw_table *t, const char *name);
void sw_table_free(sw_table *t);

/* Reads a CSV with one header row (names), comma-separated, '#' comment lines skipped, blank
 * lines skipped. Rows with a wrong number of cells or non-numeric cells are SW_EFORMAT with the
 * line number. */
sw_status sw_csv_read(sw_context *ctx, const char *path, sw_table *out);
/* Writes a header row and the rows; numbers with %.17g so they read back bit-exact. */
sw_status sw_csv_write(sw_context *ctx, const char *path, const sw_table *t);

/* ------------------------------------------------------------------ JSON */

/*
 * Writes s as a JSON string literal with quotes; escapes '"', '\\' and control characters
 * (newline, carriage return and tab as \n, \r, \t; the others as \u00XX, lower-case hex), passes
 * valid UTF-8 through unchanged, replaces each invalid byte with U+FFFD (written as the escape
 * \ufffd, so the output is pure ASCII there); NULL writes null. Write errors are left in
 * ferror(out) for the caller to check.
 */
void sw_json_write_string(FILE *out, const char *s);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_IO_H */
