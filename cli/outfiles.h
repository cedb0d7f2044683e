/*
 * The files the command writes for people.
 *
 * FITS header keywords (io.h's sw_fits_write_keys): every file says what its pixels are (BUNIT),
 * how large a pixel is where that is known (the FITS WCS keywords, or XPIXSZ / FOCALLEN for
 * detector images), and what made it (the command line as HISTORY, and the parameters as
 * keywords). Conventions: keyword names of at most 8 characters; units in square brackets at the
 * start of a comment ("[um] lenslet pitch"), as the FITS standard 4.0 section 4.3.2 recommends;
 * unit strings as its section 4.3 spells them ('adu', 'electron', 'um', 'mm', 'm', 'deg').
 *
 * Wavefront map pictures (sw_cli_map_png): one look for every --map PNG.
 */
#ifndef SW_CLI_OUTFILES_H
#define SW_CLI_OUTFILES_H

#include "spotwave/spotwave.h"

#define SW_CLI_HDR_MAX  80   /* keys one file may carry */
#define SW_CLI_HDR_TEXT 8192 /* bytes for the copies of string values */

/* A header being filled: a fixed list, no allocation. */
typedef struct sw_cli_hdr {
    sw_fits_key keys[SW_CLI_HDR_MAX];
    int32_t n;
    int full; /* a key did not fit (a programming error): sw_cli_hdr_write refuses */
    char text[SW_CLI_HDR_TEXT];
    size_t used;
} sw_cli_hdr;

/* Records the command line (main.c calls it first): later sw_cli_hdr_command calls write it. */
void sw_cli_set_command_line(int argc, char **argv);
/* The command line recorded, as printable ASCII: arguments with blanks or quotes in single quotes,
 * other characters outside printable ASCII as '?'. "" before sw_cli_set_command_line. */
const char *sw_cli_command_line(void);

/* Empties h and adds BUNIT = bunit (with its comment; NULL: none). */
void sw_cli_hdr_init(sw_cli_hdr *h, const char *bunit, const char *comment);

/* One key each. Strings are copied (printable ASCII is kept, other bytes become '?'); a number
 * that is not finite is left out (a header holds finite numbers only). */
void sw_cli_hdr_str(sw_cli_hdr *h, const char *name, const char *value, const char *comment);
void sw_cli_hdr_num(sw_cli_hdr *h, const char *name, double value, const char *comment);
void sw_cli_hdr_int(sw_cli_hdr *h, const char *name, long long value, const char *comment);
void sw_cli_hdr_bool(sw_cli_hdr *h, const char *name, int value, const char *comment);
/* An unsigned 64-bit number (a seed): an integer up to 2^63 - 1, its decimal text beyond (a
 * FITS integer reader holds signed 64 bits). */
void sw_cli_hdr_u64(sw_cli_hdr *h, const char *name, uint64_t value, const char *comment);
/* A HISTORY / COMMENT line, printf-style (copied as sw_cli_hdr_str copies). */
void sw_cli_hdr_history(sw_cli_hdr *h, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void sw_cli_hdr_comment(sw_cli_hdr *h, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* HISTORY "command: <the command line>". */
void sw_cli_hdr_command(sw_cli_hdr *h);

/*
 * A linear world coordinate system on both axes (FITS WCS, Greisen & Calabretta 2002, A&A 395,
 * 1061): coordinate = crval + cdelt (p - crpix) along each axis, p the 1-based FITS pixel
 * number (spotwave's pixel x is FITS pixel x + 1). ctype: the axes' names (e.g. "PUPILX",
 * "PUPILY"); cunit: their unit ("" for a dimensionless one).
 */
void sw_cli_hdr_wcs_linear(sw_cli_hdr *h, const char *ctype1, const char *ctype2, const char *cunit,
                           double crpix1, double crpix2, double crval1, double crval2,
                           double cdelt1, double cdelt2);

/* The detector model's parameters (sim.h's sw_detector): GAIN, BIAS, RDNOISE, SKY, DARK, FULLWELL,
 * SHOTNOIS, NOISESD (the noise seed). */
void sw_cli_hdr_detector(sw_cli_hdr *h, const sw_detector *d);

/* sw_fits_write_keys with the header's keys. SW_EINVAL when keys were dropped (full). */
sw_status sw_cli_hdr_write(sw_context *ctx, const char *path, const sw_image *frames, int32_t count,
                           const sw_cli_hdr *h);

/*
 * A wavefront map as a picture (a host f32 image): the blue-white-red scale symmetric about 0,
 * a colour bar labelled in `unit` (UTF-8; the micro sign is drawn), pixels outside the pupil
 * (NaN) transparent, and the title above it (NULL: none).
 */
sw_status sw_cli_map_png(sw_context *ctx, const char *path, const sw_image *map, const char *unit,
                         const char *title);

/* "µm" in UTF-8, for labels and titles. */
#define SW_CLI_UM "\xc2\xb5m"

#endif /* SW_CLI_OUTFILES_H */
