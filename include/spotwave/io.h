/*
 * spotwave I/O: FITS (cfitsio), PGM, HDF5 (Eiger / NeXus frames), CBF / imgCIF (CBFlib), TIFF
 * (libtiff), PNG output, CSV tables, JSON strings.
 *
 * All readers allocate the returned images with sw_image_alloc (host memory, pinned on CUDA) and
 * validate everything before returning. On failure *out is left zeroed and the message names the
 * file and the problem; the status says what kind of problem it is:
 *   SW_EFORMAT       a truncated, corrupt, zero-sized or absurd file (dimensions beyond
 *                    SW_IMAGE_MAX_DIM / SW_IMAGE_MAX_PIXELS), or not the format at all
 *   SW_EIO           the file cannot be opened or read
 *   SW_EUNSUPPORTED  valid but not supported (FITS: random groups)
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
#include "spotwave/diffraction.h"

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
 * mandatory keywords, data present and padded to whole 2880-byte blocks). Random groups are
 * SW_EUNSUPPORTED. NAXIS other than 2 or 3, or any NAXISn = 0 in the image read, is SW_EFORMAT.
 * Compressed files are read too (told apart by their contents, not their names):
 *   gzip (.fits.gz, .fit.gz; RFC 1952, one member or several concatenated): inflated into memory
 *        first (the whole file: a reader of a large .gz needs its uncompressed size in memory),
 *        then read as any file; corrupt or truncated gzip data is SW_EFORMAT.
 *   tile-compressed images (fpack, .fz; the FITS standard 4.0 section 10: an image stored as a
 *        BINTABLE with ZIMAGE = T, Rice, GZIP, HCOMPRESS or PLIO tiles) are read through cfitsio,
 *        tile by tile, as the first image when the HDUs before them hold none; ZBITPIX and ZNAXISn
 *        are the image's BITPIX and NAXISn above. Lossless compression reads back bit-identical.
 *        The scan checks the compression keywords cfitsio trusts (ZCMPTYPE, ZTILEn, the Rice
 *        BLOCKSIZE and BYTEPIX); a DATASUM that does not match the compressed data (fpack writes
 *        one) is SW_EFORMAT before any tile is decoded. The tiles themselves are decoded by
 *        cfitsio, whose decoders trust the compressed bytes: a damaged file without a checksum, or
 *        crafted to pass it, can make them read past a tile (Rice) or leak (GZIP error paths).
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

/*
 * Header keywords for sw_fits_write_keys: one card each, written in the order given after the
 * mandatory keywords and CREATOR. Units of a value go at the start of its comment in square
 * brackets ("[um] lenslet pitch"), as the FITS standard (4.0, section 4.3.2) recommends.
 */
typedef enum sw_fits_key_type {
    SW_FITS_KEY_STRING = 0,  /* str; longer than 68 characters: the CONTINUE long-string convention
                                (LONGSTRN = 'OGIP 1.0' is written once)                           */
    SW_FITS_KEY_DOUBLE = 1,  /* num, finite; written with the fewest significant digits (at most
                                17) that read back as the same double                            */
    SW_FITS_KEY_LONG = 2,    /* integer                                                           */
    SW_FITS_KEY_BOOL = 3,    /* integer: 0 is F, anything else T                                  */
    SW_FITS_KEY_HISTORY = 4, /* str as HISTORY text (name and comment unused); text longer than a
                                card continues on further HISTORY cards                           */
    SW_FITS_KEY_COMMENT = 5  /* str as COMMENT text, the same way                                 */
} sw_fits_key_type;

typedef struct sw_fits_key {
    const char *name; /* 1..8 characters of A-Z 0-9 - _; 9..60 printable characters (no '=') are
                         written as "HIERARCH name = value" (ESO's convention). Structural and
                         writer-owned names are refused: SIMPLE, BITPIX, NAXIS, NAXISn, EXTEND,
                         BZERO, BSCALE, BLANK, XTENSION, PCOUNT, GCOUNT, GROUPS, END, CREATOR,
                         LONGSTRN, CONTINUE, HISTORY, COMMENT; so is a name given twice        */
    sw_fits_key_type type;
    const char *str;     /* STRING value, HISTORY / COMMENT text: printable ASCII, not NULL      */
    double num;          /* DOUBLE value                                                          */
    long long integer;   /* LONG value, BOOL value                                                */
    const char *comment; /* printable ASCII or NULL (none); cut to what fits on the card         */
} sw_fits_key;

/*
 * sw_fits_write with header keywords (keys may be NULL when nkeys is 0). Every key is checked
 * before anything is written: a bad name, type, a value that is not printable ASCII or a double
 * that is not finite is SW_EINVAL naming the key.
 */
sw_status sw_fits_write_keys(sw_context *ctx, const char *path, const sw_image *frames,
                             int32_t count, const sw_fits_key *keys, int32_t nkeys);

/* ------------------------------------------------------------------ PGM (P5, binary) */

/* Reads an 8-bit (maxval <= 255 -> SW_PIX_U8) or 16-bit (maxval <= 65535 -> SW_PIX_U16,
 * big-endian as Netpbm says) P5 file; comments in the header are accepted. */
sw_status sw_pgm_read(sw_context *ctx, const char *path, sw_image *out);
sw_status sw_pgm_read_memory(sw_context *ctx, const void *buf, size_t size, sw_image *out);
/* Writes u8 (maxval 255) or u16 (maxval 65535) host images; other types are SW_EINVAL. */
sw_status sw_pgm_write(sw_context *ctx, const char *path, const sw_image *img);

/* ------------------------------------------------------------------ CBF / imgCIF (Pilatus) */

/*
 * The Crystallographic Binary File (Bernstein H. J., Hammersley A. P. (2006), "Specification of
 * the Crystallographic Binary File (CBF/imgCIF)", International Tables for Crystallography Vol. G,
 * ch. 2.3, pp. 37-43; read with CBFlib) as Dectris Pilatus detectors write it: one frame per
 * file, an integer array (_array_data.data) compressed with the byte-offset scheme (or not), and
 * the "mini-header" in _array_data.header_contents. sw_cbf_read_frames also reads files of
 * several frames: every array of the file in order (the data blocks in order, each row of their
 * _array_data.data in order), a 3-D array (a third dimension above 1) giving a frame per plane
 * along its slowest dimension; all must share width, height and element type (else
 * SW_EUNSUPPORTED naming the one that differs).
 *
 * Pixels: X-Binary-Size-Fastest-Dimension is the width (x), the second dimension the height;
 * pixel (x, y) is element y * width + x (no flips). Unsigned 8-bit arrays -> SW_PIX_U8; 16-bit
 * (signed or unsigned) -> SW_PIX_U16; 32-bit -> SW_PIX_U32. Pilatus stores signed 32-bit values
 * and marks pixels it cannot measure with negative ones (-1 a bad pixel, -2 a gap between
 * modules): every negative pixel reads as 0 and is marked invalid in *valid (width * height
 * bytes, row-major, 1 = good, 0 = not; allocated with malloc, the caller frees) so that it can be
 * find's pixel mask; *valid is NULL when no pixel is negative (or when valid is NULL: then the
 * negative pixels are 0 and nothing says so). Of several frames, a pixel negative in any of them
 * is invalid, and the pixel type is the one wide enough for the values of all of them.
 * sw_cbf_read takes a file of one frame (several: SW_EUNSUPPORTED). Real-valued arrays are
 * SW_EUNSUPPORTED.
 *
 * The mini-header (lines "# Name value unit"; of several frames, the first's) gives, in geom (may
 * be NULL; geom->have says which were found, each only when its unit is the one expected and its
 * value finite and positive):
 *   Wavelength 0.9763 A                    -> wavelength_a                  SW_DG_WAVELENGTH
 *   Detector_distance 0.25 m (or mm)       -> distance_mm                   SW_DG_DISTANCE
 *   Beam_xy (1231.5, 1263.5) pixels        -> beam_x_px, beam_y_px          SW_DG_BEAM
 *   Pixel_size 172e-6 m x 172e-6 m         -> pixel_x_mm, pixel_y_mm        SW_DG_PIXEL
 *   Count_cutoff 1048576 counts            -> overload                      SW_DG_OVERLOAD
 *   Exposure_time 0.1 s                    -> exposure_s                    SW_DG_EXPOSURE
 * Beam_xy is read as the DIALS/dxtbx format reader reads it (pixel edges at whole numbers: the
 * beam at Beam_xy * pixel size from the detector's corner), so beam_x_px = Beam_xy x - 0.5 in
 * spotwave's convention (the centre of pixel 0 at 0.0; diffraction.h). The detector is taken
 * normal to the beam (orientation 0).
 *
 * Files are untrusted input, and CBFlib (0.9.7, Debian) is not safe on them: a fuzzer found a
 * mutated byte-offset file that makes cbf_get_integerarray write past the array it was given (a
 * heap overflow, then an abort in free), and CBFlib prints its diagnostics on stderr. So CBFlib
 * runs in a child process (at most 2 GiB of memory beyond what it inherits, SW_CBF_TIMEOUT
 * seconds) that sends the header text and the pixels back; a crash, a hang or a message that does
 * not hold together (sizes checked against each other and against SW_IMAGE_MAX_DIM /
 * SW_IMAGE_MAX_PIXELS) is SW_EFORMAT with CBFlib's last diagnostic quoted. Where fork fails it
 * runs in the calling process, with a warning.
 * Status: SW_EIO (cannot open), SW_EFORMAT (not CBF, corrupt, truncated, no array, a digest that
 * does not match, sizes that disagree), SW_EUNSUPPORTED (as above), SW_ENOMEM, SW_EINVAL (NULL).
 */
#define SW_CBF_TIMEOUT 30.0

sw_status sw_cbf_read(sw_context *ctx, const char *path, sw_image *out, uint8_t **valid,
                      sw_diffraction_geometry *geom);
/* The same from a memory buffer (the fuzzer, embedded callers). */
sw_status sw_cbf_read_memory(sw_context *ctx, const void *buf, size_t size, sw_image *out,
                             uint8_t **valid, sw_diffraction_geometry *geom);
/* Every frame of the file (above), into out (sw_frames_free); on failure out is zeroed. */
sw_status sw_cbf_read_frames(sw_context *ctx, const char *path, sw_frames *out, uint8_t **valid,
                             sw_diffraction_geometry *geom);
sw_status sw_cbf_read_frames_memory(sw_context *ctx, const void *buf, size_t size, sw_frames *out,
                                    uint8_t **valid, sw_diffraction_geometry *geom);

/*
 * Parses a Pilatus mini-header (the text of _array_data.header_contents) into g as above (g is
 * initialised first); returns how many fields were found. Lines it does not know are skipped.
 */
int sw_cbf_parse_header(const char *text, size_t size, sw_diffraction_geometry *g);

/*
 * Writes a host image as a mini-CBF the way a Pilatus does (with CBFlib): signed 32-bit values,
 * byte-offset compressed, MIME headers with an MD5 digest, and a mini-header with the fields of
 * geom that it has (geom may be NULL; Beam_xy written back in the edge convention above). u8, u16
 * and u32 images (u32 values above 2147483647 are SW_ERANGE, except in pixels valid marks bad);
 * f32 is SW_EINVAL. valid (NULL: every pixel good) marks pixels written as -1 (whatever they
 * hold: a detector's gaps flagged at the type's maximum). Temporary name, then rename.
 */
sw_status sw_cbf_write(sw_context *ctx, const char *path, const sw_image *img, const uint8_t *valid,
                       const sw_diffraction_geometry *geom);

/* ------------------------------------------------------------------ TIFF (Rayonix, lab detectors)
 */

/*
 * TIFF 6.0 (Adobe, 1992) read with libtiff: every image (page, directory) of the file is a frame,
 * and all must share width, height and type. Grey images of one sample per pixel: 8, 16 and
 * 32-bit unsigned integers (SW_PIX_U8 / U16 / U32) and 32-bit IEEE floats (SW_PIX_F32), in strips
 * or tiles, with any compression this libtiff decodes (none, LZW, deflate, PackBits, ...). Pixel
 * (x, y) is row y, column x as stored (Orientation is not applied). Anything else (signed
 * integers, 64-bit, several samples per pixel, palettes, 1-bit images, planar configurations other
 * than contiguous) is SW_EUNSUPPORTED with what the file holds. Sizes are checked against
 * SW_IMAGE_MAX_DIM / SW_IMAGE_MAX_PIXELS, and a page's frame against the bytes its strips or
 * tiles store (uncompressed: all of it; compressed: at most 64 (PackBits), 1100 (deflate), 2800
 * (LZW) or 65536 (other codecs) times them, within the file's size), before any pixel is read or
 * the frame allocated; libtiff is told to allocate no single buffer larger than 2 GiB; a strip or
 * tile that does not decode is SW_EFORMAT naming the page. libtiff's warnings go to the context's
 * log (debug), never to stderr. TIFF carries no diffraction geometry spotwave reads (Rayonix's own
 * header is not parsed).
 */
sw_status sw_tiff_read(sw_context *ctx, const char *path, sw_frames *out);
sw_status sw_tiff_read_memory(sw_context *ctx, const void *buf, size_t size, sw_frames *out);

/*
 * Writes count host images (one size and type: u8, u16, u32 or f32) as a TIFF of count pages,
 * deflate-compressed strips of 16 rows (tiles of 64 x 64 when tiled is non-zero). Temporary
 * name, then rename.
 */
sw_status sw_tiff_write(sw_context *ctx, const char *path, const sw_image *frames, int32_t count,
                        int tiled);

/* ------------------------------------------------------------------ PNG (pictures for people) */

typedef enum sw_colormap {
    SW_CMAP_GREY = 0,     /* linear grey                                               */
    SW_CMAP_VIRIDIS = 1,  /* perceptually uniform sequential (for intensities)          */
    SW_CMAP_DIVERGING = 2 /* perceptually balanced blue-white-red (for signed maps)     */
} sw_colormap;

/* How values map onto the colour scale (t in 0..1 from the bottom colour to the top one). */
typedef enum sw_png_stretch {
    SW_PNG_LINEAR = 0, /* t = (v - vmin) / (vmax - vmin)                                        */
    SW_PNG_ASINH = 1,  /* t = asinh(u / beta) / asinh(1 / beta), u the linear t: linear below
                          beta, logarithmic above (Lupton et al. 2004, PASP 116, 133), for star
                          fields: faint stars and the noise visible, bright cores not saturated */
    SW_PNG_ZSCALE = 2  /* linear, the automatic range IRAF's zscale (below)                     */
} sw_png_stretch;

/* A circle drawn over the image (found spots, stars): centre in image pixels (0-based, pixel
 * centres), radius in image pixels. */
typedef struct sw_png_marker {
    double x, y, radius;
} sw_png_marker;

typedef struct sw_png_options {
    sw_colormap colormap;
    double vmin, vmax;   /* value range mapped to the colour scale; vmin == vmax: automatic  */
    int scale_bar;       /* non-zero: draw a colour bar with tick labels to the right     */
    const char *label;   /* unit label under the scale bar (e.g. "um"); may be NULL       */
    int nan_transparent; /* non-zero: NaN pixels transparent (RGBA) instead of black        */
    /* (since issue 29) */
    const char *title;            /* a line of text above the image; NULL: none              */
    sw_png_stretch stretch;       /* default SW_PNG_LINEAR                                   */
    double softening;             /* asinh's beta, a fraction of the range (0..1]; 0: three
                                     times the noise (1.4826 MAD of the sample) / the range  */
    const sw_png_marker *markers; /* nmarkers circles over the image; NULL: none             */
    int32_t nmarkers;             /* >= 0                                                    */
    unsigned char marker_rgb[3];  /* their colour (default red: 255, 48, 48)                 */
} sw_png_options;

/* Grey, automatic range, linear, no scale bar, no label, no title, no markers, NaN black. */
void sw_png_options_default(sw_png_options *o);
/*
 * Writes a host image of any type as an 8-bit PNG: grey for SW_CMAP_GREY (RGB when there are
 * markers), RGB for the colour maps, RGBA whenever nan_transparent is set. opts may be NULL (the
 * defaults). Values map to the colour scale by the stretch and are clamped at its ends (+Inf to
 * the top colour).
 * Automatic range (vmin == vmax): SW_PNG_LINEAR: the finite minimum and maximum of the image;
 * SW_PNG_ZSCALE: IRAF's zscale (the display task's algorithm, contrast 0.25: a line fitted with
 * 2.5-sigma rejection to up to 10000 evenly spaced finite pixels sorted by value; z1, z2 its
 * ends over the sample divided by the contrast, within the sample's range; the sample's range
 * when more than half is rejected); SW_PNG_ASINH: zscale's z1 to the finite maximum. For
 * SW_CMAP_DIVERGING the range is then made -m .. m with m the larger |end|, so that 0 is the
 * neutral centre; a range that is still empty (a constant image) is widened around its value,
 * which then sits at the centre of the scale; an image without finite pixels uses 0 .. 1.
 * vmin > vmax reverses the scale. vmin or vmax not finite, a softening outside 0..1, nmarkers < 0
 * or markers NULL with nmarkers > 0: SW_EINVAL.
 * With scale_bar the picture is wider than the image (the bar, ticks and labels sit to its right)
 * and at least tall enough for the bar (a small image gets white background below it). The bar's
 * ticks sit at round values (1, 2 or 5 times a power of ten: evenly spaced on a linear scale;
 * on an asinh scale 0 and the decades first, then 2 and 5 times them where there is room). With
 * a title the image starts below it; otherwise the image is at the top left, pixel for pixel.
 * Text uses a built-in 5x7 font: digits, a-z (upper case is drawn as lower case), space,
 * + - . , _ / ( ) [ ] < > % ^ : ; * = ! ' " # & | ~ and the micro sign (UTF-8 U+00B5 or U+03BC);
 * any other character is drawn as '?'. Label and title are cut at 64 characters.
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

/* ------------------------------------------------------------------ HDF5 (Eiger / NeXus) */

/*
 * Frames in HDF5 files laid out as Eiger detectors write them (NeXus NXmx): a master file whose
 * /entry/data/data_000001, data_000002, ... are datasets of [frames, height, width] unsigned
 * integers, usually external links to data files "<stem>_data_000001.h5" that hold
 * /entry/data/data; chunked one frame per chunk and compressed with bitshuffle/LZ4 (HDF5 filter
 * 32008; Masui K. et al. (2015), "A compression scheme for radio data in high performance
 * computing", Astronomy and Computing 12, 181-190). The master may hold
 *   /entry/instrument/detector/detectorSpecific/pixel_mask   uint32 [height, width], 0 = good
 *   /entry/instrument/detector/detectorSpecific/countrate_correction_count_cutoff   the overload
 *   /entry/instrument/detector/saturation_value               the overload (NeXus), used when
 *                                                             the cut-off is absent
 * Pixel (x, y) of a frame is element [frame][y][x] of the dataset (row-major, no flips).
 *
 * Files are untrusted input. Opening walks the file's structure (links, groups, dataset shapes,
 * types, filters, where each chunk lies) in a child process: Debian's libhdf5 can crash, loop or
 * allocate gigabytes on a corrupt file, and a crash or a walk longer than the time limit
 * (sw_h5_options) is then SW_EFORMAT with a message instead of the end of the caller's process;
 * the child may take at most 2 GiB of memory beyond what it inherits (RLIMIT_DATA). Where fork
 * fails the walk runs in the calling process, with a warning. Frames are then read and
 * decoded by spotwave itself, every size checked before it is used: contiguous data, and chunks
 * whose filters are any of bitshuffle (uncompressed or LZ4: the header's total and block size,
 * every block's byte count, every block decoding to exactly its size with liblz4's bounded
 * decoder), deflate (zlib) and HDF5's shuffle, read with pread at the addresses the walk listed
 * (a dataset of more than 4096 chunks has its index walked once in the child and each chunk
 * looked up when read, with HDF5's H5Dread_chunk in the calling process). A chunk that does not
 * decode to exactly its size, a chunk or contiguous run beyond the file's end, or a file that
 * changed since it was opened is SW_EFORMAT; chunks never written read as the fill value, with
 * a warning. Compact datasets, chunks through other filters (LZ4 32004, bzip2, LZF,
 * zstd, Blosc, ...) and virtual datasets are read through HDF5 and its filter plugins in the
 * calling process (Debian: bitshuffle and hdf5-filter-plugin, in
 * /usr/lib/x86_64-linux-gnu/hdf5/serial/plugins; HDF5_PLUGIN_PATH overrides where HDF5 looks);
 * their structure was walked in the child first, but their data reaches HDF5's own code.
 * Datasets whose values live in external raw files (H5Pset_external) are refused.
 *
 * External links: HDF5 follows none by itself. The links data_000001, ... (or the dataset named)
 * may be external links; their data file is looked for beside the master (the master's directory
 * + the link's file name), then in each of sw_h5_options.link_dirs. Link targets that are
 * absolute paths or contain ".." are refused (SW_EFORMAT) unless links_anywhere is set; HDF5's
 * own search (HDF5_EXT_PREFIX, the working directory) is not used. External links anywhere else
 * (an external /entry/data group, links inside a data file) are not followed (SW_EFORMAT).
 * Virtual datasets, whose source files could be anywhere, need links_anywhere too.
 *
 * Status codes (the messages name the file, the dataset and the problem; HDF5's own reason, the
 * innermost entry of its error stack, is quoted):
 *   SW_EIO           the file (or a data file an external link points to) is missing or cannot
 *                    be opened
 *   SW_EFORMAT       not HDF5, truncated or corrupt (including compressed data that does not
 *                    decode, and a crash or a hang of HDF5 on the file's structure); no frames
 *                    where they were looked for; a dataset of rank other than 2 or 3, of zero or
 *                    absurd size, or of a type other than unsigned 8/16/32-bit integers (signed,
 *                    float, 64-bit); blocks that differ in height, width or type; a pixel mask of
 *                    the wrong shape or type, or none when one is asked for; an external link
 *                    or a virtual dataset refused as above
 *   SW_EUNSUPPORTED  a dataset compressed with a filter that is not decoded here and that this
 *                    HDF5 cannot load (the message gives the filter's id and name and how to get
 *                    it), or writing bitshuffle/LZ4 when its plugin is missing
 *   SW_EINVAL        bad arguments: NULL, a frame index out of range, a destination image of the
 *                    wrong size or type or in device memory, f32 frames given to the writer
 *   SW_ENOMEM        out of memory
 * Uncompressed data has no checksums: bytes corrupted inside it are read as they are (and so
 * are bytes changed inside LZ4 literals, which keep the stream valid).
 * HDF5 prints nothing: every call turns HDF5's automatic error printing off for its duration and
 * restores the caller's handler before it returns.
 *
 * Threads: one reader is used by one thread at a time (sw_find_sequence's source.read runs on a
 * reader thread of its own: open the reader with a context of its own, or ctx = NULL, since a
 * context is used by one thread at a time; sw_h5_reader_error gives the message from any thread
 * once the call has returned). Debian's HDF5 is not built thread-safe: opening (and reading
 * layouts read through HDF5) must not run concurrently with other HDF5 use in the process from
 * other threads; reads that spotwave decodes from listed chunks or contiguous data call no HDF5
 * function. Opening forks: the child calls only HDF5, malloc and write, and leaves with _exit
 * (no exit handlers, no stdio flushed). Within one read, a bitshuffle/LZ4 chunk's blocks are
 * decoded by an OpenMP team of sw_h5_options.threads threads that the reading thread starts
 * (the pixels, the status and the message are those of one thread decoding in order).
 */
typedef struct sw_h5_reader sw_h5_reader;

typedef struct sw_h5_info {
    int64_t frames;     /* frames in all blocks together                                    */
    int32_t width;      /* x: the last dimension of the datasets                            */
    int32_t height;     /* y: the middle dimension                                          */
    sw_pixel_type type; /* SW_PIX_U8, SW_PIX_U16 or SW_PIX_U32                              */
    int32_t blocks;     /* datasets read (data_000001 ... or one)                           */
    double overload;    /* the file's overload (count cut-off or saturation value); 0: none */
    int has_pixel_mask; /* 1 when detectorSpecific/pixel_mask exists                        */
    int compressed;     /* 1 when any block goes through an HDF5 filter                     */
} sw_h5_info;

/* Time (s) the walk over a file's structure may take by default. */
#define SW_H5_WALK_TIMEOUT 60.0

typedef struct sw_h5_options {
    const char *dataset;   /* NULL: automatic (see sw_h5_open); or the path of one dataset     */
    const char *link_dirs; /* NULL, or directories ("a:b") where data files named by external
                              links are looked for after the master's own directory            */
    int links_anywhere;    /* non-zero: also absolute link targets and ".." (as given), and
                              virtual datasets; for trusted files only                          */
    int in_process;        /* non-zero: walk the structure in this process (no child): a corrupt
                              file can then crash it; for trusted files where fork is unwanted  */
    double timeout_s;      /* the walk's time limit; 0: SW_H5_WALK_TIMEOUT                     */
    int threads;           /* threads that decode one frame's bitshuffle/LZ4 chunks (its LZ4
                              blocks in parallel, OpenMP); 0: the context's (sw_context_threads:
                              all cores for a NULL context); 1: the reading thread alone       */
} sw_h5_options;

/* Defaults: automatic dataset, beside the master only, in a child, SW_H5_WALK_TIMEOUT, the
 * context's threads. */
void sw_h5_options_default(sw_h5_options *o);

/*
 * Opens an HDF5 file for reading frames. dataset NULL = automatic: /entry/data/data_000001,
 * data_000002, ... in order, stopping at the first missing number (an Eiger master), else
 * /entry/data/data (an Eiger data file); else SW_EFORMAT listing what was looked for. Or the
 * path of one dataset (from the file's root; a leading '/' is optional). Every dataset must be
 * rank 3 [frames, height, width] or rank 2 (one frame), of unsigned 8/16/32-bit integers, and all
 * must share height, width and type. Their filters are checked here (SW_EUNSUPPORTED when one
 * that spotwave does not decode cannot be loaded). External links are resolved as the section
 * above says. File locking is off for reading (files on file systems without locks open too).
 * Messages of later calls on the reader go to ctx (which may be NULL: the calling thread's
 * message) and to sw_h5_reader_error. On failure *out is NULL. Same as sw_h5_open_ex with the
 * default options and this dataset.
 */
sw_status sw_h5_open(sw_context *ctx, const char *path, const char *dataset, sw_h5_reader **out);
/* The same with options (NULL: the defaults). A negative or non-finite timeout, or a negative
 * thread count, is SW_EINVAL. */
sw_status sw_h5_open_ex(sw_context *ctx, const char *path, const sw_h5_options *opts,
                        sw_h5_reader **out);

/* Sizes, type, block count, overload and mask presence of an open file. */
sw_status sw_h5_get_info(const sw_h5_reader *r, sw_h5_info *info);

/*
 * Reads frame `index` (0-based across the blocks, in order) into dst, a host image (plain or
 * pinned) of the file's width, height and type, with any row stride: its chunks read and decoded
 * by spotwave (or, for the layouts above, one hyperslab read through HDF5). On SW_EFORMAT (data
 * that does not read or decode) dst's pixels are undefined; on argument errors dst is untouched.
 */
sw_status sw_h5_read_frame(sw_h5_reader *r, int64_t index, sw_image *dst);

/*
 * A frame's chunks as stored, for decoding elsewhere (the GPU: sw_find_sequence_chunks): when
 * frame `index` lies in a dataset whose only filter is bitshuffle with LZ4 (HDF5 filter 32008,
 * cd_values[4] = 2; the Eiger detectors'), in this machine's byte order, chunked as whole rows of
 * one frame, with its chunks listed at open (datasets of at most 4096 chunks), its chunks' stored
 * bytes are read one after another into buf (cap bytes) and described in chunks[0..*nchunks)
 * (their places in the frame with tight rows). Otherwise, and for a frame with a chunk never
 * written or stored without the filter, *nchunks = 0 and SW_OK: read that frame with
 * sw_h5_read_frame. A chunk larger than bitshuffle/LZ4 can make of its size
 * (sw_bshuf_lz4_bound's) is SW_EFORMAT; a buf or chunks too small, SW_EINVAL. Nothing is
 * decoded or checked beyond that. Unlike the other calls on a reader, this one may run on
 * several threads at once (each opens the file for itself); its messages go to the calling
 * thread's (sw_context_error(NULL)).
 */
sw_status sw_h5_read_frame_chunks(sw_h5_reader *r, int64_t index, void *buf, size_t cap,
                                  sw_find_chunk *chunks, int64_t max_chunks, int64_t *nchunks);
/* The room sw_h5_read_frame_chunks needs for any frame of the file: *bytes of stored chunks and
 * *chunks entries; *chunks = 0 when some dataset's frames are not read as stored chunks. */
sw_status sw_h5_frame_chunks_limits(const sw_h5_reader *r, size_t *bytes, int64_t *chunks);

/*
 * Reads detectorSpecific/pixel_mask into valid (width * height bytes, row-major): 1 where the
 * mask is 0 (a good pixel), 0 where it is non-zero. SW_EFORMAT when the file has none (see
 * has_pixel_mask) or when it is not a rank-2 [height, width] integer dataset.
 */
sw_status sw_h5_read_pixel_mask(sw_h5_reader *r, uint8_t *valid);

/*
 * The experiment's geometry as the master's NeXus/NXmx fields give it (Bernstein H. J. et al.
 * (2020), "Gold Standard for macromolecular crystallography diffraction data", IUCrJ 7(5),
 * 784-792), read by the structure walk (in its child, each a numeric scalar dataset without
 * filters, its type and size checked before it is read, its "units" attribute a string of at most
 * 63 characters):
 *   /entry/instrument/beam/incident_wavelength   angstrom (also nm, m; none: angstrom)
 *   /entry/instrument/detector/detector_distance m (also mm, um, cm; none: m)
 *   .../detector/x_pixel_size, y_pixel_size      m (as above; none: m)
 *   .../detector/beam_center_x, beam_center_y    pixels (or a length, with the pixel size);
 *                                                beam_x_px = beam_center_x - 0.5 (pixel edges at
 *                                                whole numbers, as DIALS reads NXmx; diffraction.h
 *                                                puts the centre of pixel 0 at 0.0)
 *   .../detector/count_time                      s
 *   the overload (sw_h5_info.overload)           SW_DG_OVERLOAD
 * A field that is there but unusable (not one finite positive number, an unknown unit) is left
 * out with a warning.
 * The module orientation (SW_DG_ORIENTATION, orientation = 1), for one module:
 * .../detector/module/fast_pixel_direction and slow_pixel_direction (translations whose values
 * are the pixel size and whose "vector" attributes are +x and +y of the image) and the
 * depends_on chain they share (module_offset, the detector's transformations: translations and
 * rotations with "vector", "offset", "offset_units", units m/mm or deg/rad; at most 16, paths
 * absolute or relative to the object's group). The chain carries the first pixel's corner and
 * the two directions into the laboratory frame; origin_mm is that corner plus half a pixel along
 * each direction (the centre of pixel (0,0)). The pixel size comes from the directions when
 * x/y_pixel_size are absent. A chain that breaks, loops, or gives directions that are not
 * perpendicular leaves the orientation out (0) with a warning. The orientation is that of the
 * module ".../detector/module" (the one Eiger masters describe); several modules are read by
 * sw_h5_read_modules.
 * SW_EINVAL for NULL arguments (g then zeroed).
 */
sw_status sw_h5_read_geometry(const sw_h5_reader *r, sw_diffraction_geometry *g);

/*
 * The detector's modules as the master lists them (NXmx: every group under
 * /entry/instrument/detector, in the order of their names, whose NX_class is NXdetector_module;
 * Bernstein et al. 2020): data_origin and data_size, each a dataset of two integers in NeXus's
 * slow-to-fast order ([y, x] of the frame, 0-based), give each module's rectangle (x0, y0, width,
 * height); fast_pixel_direction, slow_pixel_direction and their depends_on chain give its
 * orientation as for the detector above, carried to the frame's pixel coordinates (origin_mm is
 * where frame pixel (0,0) would lie on the module's plane; diffraction.h) with the module's own
 * pixel size. A module without usable directions has orientation 0 (a warning when they were
 * there but unusable). Modules that do not hold together (data_origin or data_size missing or not
 * two integers, a rectangle outside the frames, two that overlap, more than 1024) are all left
 * out with a warning: *count is then 0. Writes min(max, *count) modules to out and the number of
 * modules to *count. SW_EINVAL for NULL arguments or max < 0.
 */
sw_status sw_h5_read_modules(const sw_h5_reader *r, sw_diffraction_module *out, int32_t max,
                             int32_t *count);

/* The files an open reader reads frames from: the master (k = 0) and each data file an external
 * link led to, each once, as their paths were opened (for a caller that must not overwrite them).
 * sw_h5_file_path gives NULL for k out of range. */
int32_t sw_h5_file_count(const sw_h5_reader *r);
const char *sw_h5_file_path(const sw_h5_reader *r, int32_t k);

/* The message of the last failure of a call on r ("" when none); for any thread to read after
 * the call has returned. */
const char *sw_h5_reader_error(const sw_h5_reader *r);

void sw_h5_close(sw_h5_reader *r); /* NULL is ignored */

typedef enum sw_h5_compression {
    SW_H5_NONE = 0,   /* no filter                                                           */
    SW_H5_BSLZ4 = 1,  /* bitshuffle/LZ4 as Eiger writes: filter 32008, stored cd_values
                         {major, minor, element size, 0, 2} (block size automatic, LZ4);
                         needs the plugin                                                     */
    SW_H5_DEFLATE = 2 /* HDF5's built-in byte shuffle + gzip level 4: always available        */
} sw_h5_compression;

/* 1 when HDF5 can load the bitshuffle/LZ4 filter (32008) for writing and reading, 0 otherwise. */
int sw_h5_bitshuffle_available(void);

/*
 * Writes frames (count host images of one size and type, u8/u16/u32; f32 is SW_EINVAL: Eiger
 * writes integers, convert first) as one Eiger-like file: /entry/data/data_000001, ... hold
 * frames_per_block frames each (the last one the rest; 0 = all frames in one block), chunked one
 * frame per chunk, unsigned little-endian, compressed as comp says, with attributes
 * image_nr_low / image_nr_high (1-based frame numbers, as Eiger). NX_class attributes: /entry
 * NXentry, /entry/data NXdata, /entry/instrument NXinstrument, .../detector NXdetector,
 * .../detectorSpecific NXcollection; detectorSpecific also gets x_pixels_in_detector,
 * y_pixels_in_detector and nimages. valid (width * height bytes, non-zero = good; or NULL for
 * none) becomes detectorSpecific/pixel_mask (uint32, 0 good, 1 bad). overload > 0 is written as
 * detectorSpecific/countrate_correction_count_cutoff and detector/saturation_value (uint32 when
 * it is a whole number that fits, float64 otherwise); 0 writes neither; negative or not finite
 * is SW_EINVAL. BSLZ4 without its plugin is SW_EUNSUPPORTED (nothing is written). The file is
 * written to "<path>.tmp.XXXXXX" and renamed when complete; an existing file is replaced.
 */
sw_status sw_h5_write(sw_context *ctx, const char *path, const sw_image *frames, int32_t count,
                      int32_t frames_per_block, sw_h5_compression comp, const uint8_t *valid,
                      double overload);

/*
 * Same content in Eiger's layout of several files: every block goes to a data file
 * "<stem>_data_000001.h5", ... beside path, holding /entry/data/data (with image_nr_low/high),
 * and path becomes the master, whose /entry/data/data_000001, ... are external links to them
 * (by file name only, so the set can be moved together). <stem> is path without a final
 * ".h5", ".hdf5", ".hdf" or ".nxs" and then without a final "_master" ("run_master.h5" ->
 * "run_data_000001.h5", as Eiger names them). Every file goes through the temporary-name
 * protocol; the master is renamed into place last.
 */
sw_status sw_h5_write_linked(sw_context *ctx, const char *path, const sw_image *frames,
                             int32_t count, int32_t frames_per_block, sw_h5_compression comp,
                             const uint8_t *valid, double overload);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_IO_H */
