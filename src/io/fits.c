/*
 * FITS images through cfitsio.
 *
 * Before cfitsio sees a file, a small structural scan of our own walks the headers up to the
 * image HDU we will read: header cards must be printable ASCII, the mandatory keywords (SIMPLE /
 * XTENSION, BITPIX, NAXIS, NAXISn, PCOUNT, GCOUNT) must be present and sane, and the data the
 * headers promise must be in the file. That turns truncated, corrupt or absurd files into clear
 * messages and keeps cfitsio away from input it was never meant to parse (it is then only asked
 * to read headers that passed the scan). Files are opened with fits_open_diskfile /
 * fits_create_diskfile so that cfitsio's extended file-name syntax ("file.fits[1]", "!file")
 * plays no part. gzip files are inflated here (zlib) and read from memory after the same scan;
 * tile-compressed images (ZIMAGE = T tables) are scanned by their ZBITPIX / ZNAXISn and their
 * tiles decompressed by cfitsio, which presents them as images.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/io_internal.h"

#include <fitsio.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <zlib.h>

#define FITS_BLOCK             2880
#define FITS_CARD              80
#define FITS_MAX_HEADER_BLOCKS 10000 /* 288000 cards: far beyond any real header */
#define FITS_MAX_HDUS          10000

/* ------------------------------------------------------------------ input and structural scan */

typedef struct fits_input {
    const char *name;         /* for messages */
    const char *path;         /* disk file, or NULL for memory */
    const unsigned char *buf; /* memory input */
    unsigned char *owned;     /* buf when it is ours (decompressed gzip data), freed at the end */
    FILE *f;                  /* disk input during the scan */
    unsigned long long size;  /* bytes in the file or buffer */
} fits_input;

/* What the scan found about the image HDU to read. */
typedef struct fits_target {
    int hdu; /* 1-based HDU number */
    int bitpix;
    int naxis;
    long long naxes[3];
    int compressed; /* a tile-compressed image (a BINTABLE with ZIMAGE = T) */
} fits_target;

static int input_read(fits_input *in, unsigned long long off, void *dst, size_t n)
{
    if (off > in->size || n > in->size - off)
        return -1;
    if (in->buf) {
        memcpy(dst, in->buf + off, n);
        return 0;
    }
    if (fseeko(in->f, (off_t)off, SEEK_SET) != 0)
        return -2;
    if (fread(dst, 1, n, in->f) != n)
        return -2;
    return 0;
}

typedef struct hdr_values {
    int has_bitpix, has_naxis, has_pcount, has_gcount, has_tfields;
    long long tfields; /* tables: cfitsio sizes its column arrays by it */
    long long bitpix, naxis, pcount, gcount;
    long long naxes[1000];
    unsigned char has_naxes[1000];
    int groups; /* GROUPS = T */
    int zimage; /* ZIMAGE = T */
    char xtension[72];
    /* a tile-compressed image's own geometry (ZBITPIX, ZNAXIS, ZNAXISn for n <= 3) */
    int has_zbitpix, has_znaxis;
    long long zbitpix, znaxis;
    long long znaxes[4];
    unsigned char has_znaxes[4];
    /* and the compression parameters cfitsio trusts (it divides by them): ZCMPTYPE, ZTILEn,
     * ZNAMEi / ZVALi (i <= 9) */
    char zcmptype[72];
    long long ztile[4];
    unsigned char has_ztile[4], ztile_bad[4];
    char zname[10][72];
    long long zval[10];
    unsigned char has_zval[10], zval_int[10];
} hdr_values;

/* Parses an integer value field (columns 11-80 of a card). 0 when it is not a plain integer. */
static int card_int(const char *card, long long *out)
{
    if (card[8] != '=' || card[9] != ' ')
        return 0;
    int i = 10;
    while (i < FITS_CARD && card[i] == ' ')
        i++;
    int neg = 0;
    if (i < FITS_CARD && (card[i] == '+' || card[i] == '-'))
        neg = card[i++] == '-';
    if (i >= FITS_CARD || card[i] < '0' || card[i] > '9')
        return 0;
    long long v = 0;
    while (i < FITS_CARD && card[i] >= '0' && card[i] <= '9') {
        if (v > (LLONG_MAX - 9) / 10)
            return 0; /* absurdly large: refused as malformed */
        v = v * 10 + (card[i] - '0');
        i++;
    }
    while (i < FITS_CARD && card[i] == ' ')
        i++;
    if (i < FITS_CARD && card[i] != '/')
        return 0;
    *out = neg ? -v : v;
    return 1;
}

/* Parses a logical value field: 1 for T, 0 for F, -1 otherwise. */
static int card_logical(const char *card)
{
    if (card[8] != '=' || card[9] != ' ')
        return -1;
    int i = 10;
    while (i < FITS_CARD && card[i] == ' ')
        i++;
    if (i >= FITS_CARD)
        return -1;
    if (card[i] == 'T')
        return 1;
    if (card[i] == 'F')
        return 0;
    return -1;
}

/* Parses a string value field ('...'), trailing blanks removed. */
static int card_string(const char *card, char *out, size_t cap)
{
    if (card[8] != '=' || card[9] != ' ')
        return 0;
    int i = 10;
    while (i < FITS_CARD && card[i] == ' ')
        i++;
    if (i >= FITS_CARD || card[i] != '\'')
        return 0;
    size_t n = 0;
    for (i++; i < FITS_CARD; i++) {
        if (card[i] == '\'') {
            if (i + 1 < FITS_CARD && card[i + 1] == '\'') {
                i++;
            } else {
                while (n > 0 && out[n - 1] == ' ')
                    n--;
                out[n] = '\0';
                return 1;
            }
        }
        if (n + 1 < cap)
            out[n++] = card[i];
    }
    return 0; /* no closing quote */
}

static int keyword_is(const char *card, const char *kw)
{
    size_t n = strlen(kw);
    if (memcmp(card, kw, n) != 0)
        return 0;
    for (size_t i = n; i < 8; i++)
        if (card[i] != ' ')
            return 0;
    return 1;
}

/*
 * Reads and checks the header of the HDU at *off: every card printable ASCII, END present,
 * mandatory keywords collected. On success *off moves to the start of the data.
 */
static sw_status scan_header(sw_context *ctx, fits_input *in, int hdu, unsigned long long *off,
                             hdr_values *hv)
{
    char block[FITS_BLOCK];
    memset(hv, 0, sizeof *hv);
    for (int b = 0; b < FITS_MAX_HEADER_BLOCKS; b++) {
        int r = input_read(in, *off + (unsigned long long)b * FITS_BLOCK, block, FITS_BLOCK);
        if (r == -2)
            return sw_fail(ctx, SW_EIO, "%s: read error in the header of HDU %d (%s)", in->name,
                           hdu, strerror(errno));
        if (r != 0) {
            if (hdu == 1 && b == 0 && in->size >= 10 && input_read(in, 0, block, 10) == 0 &&
                memcmp(block, "SIMPLE  = ", 10) == 0)
                return sw_fail(ctx, SW_EFORMAT,
                               "%s: truncated FITS file: %llu bytes, less than one 2880-byte "
                               "header block",
                               in->name, in->size);
            if (hdu == 1 && b == 0)
                return sw_fail(ctx, SW_EFORMAT,
                               "%s: not a FITS file: %llu bytes, shorter than one 2880-byte "
                               "header block",
                               in->name, in->size);
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: truncated FITS file: the header of HDU %d has no END card "
                           "before the end of the file (byte %llu)",
                           in->name, hdu, in->size);
        }
        for (int c = 0; c < FITS_BLOCK / FITS_CARD; c++) {
            const char *card = block + c * FITS_CARD;
            long long cardno = (long long)b * (FITS_BLOCK / FITS_CARD) + c + 1;
            for (int i = 0; i < FITS_CARD; i++) {
                unsigned char ch = (unsigned char)card[i];
                if (ch < 0x20 || ch > 0x7E) {
                    if (hdu == 1 && cardno == 1 && b == 0) {
                        if ((unsigned char)block[0] == 0x1F && (unsigned char)block[1] == 0x8B)
                            return sw_fail(ctx, SW_EFORMAT,
                                           "%s: gzip-compressed twice (gzip data inside "
                                           "gzip data), not a FITS file",
                                           in->name);
                        return sw_fail(ctx, SW_EFORMAT,
                                       "%s: not a FITS file (it does not start with "
                                       "\"SIMPLE  =                    T\")",
                                       in->name);
                    }
                    return sw_fail(ctx, SW_EFORMAT,
                                   "%s: corrupt FITS header: card %lld of HDU %d contains byte "
                                   "0x%02x (headers are printable ASCII)",
                                   in->name, cardno, hdu, (unsigned)ch);
                }
            }
            if (cardno == 1) {
                if (hdu == 1) {
                    if (!keyword_is(card, "SIMPLE") || card_logical(card) != 1)
                        return sw_fail(ctx, SW_EFORMAT,
                                       "%s: not a FITS file (it does not start with "
                                       "\"SIMPLE  =                    T\")",
                                       in->name);
                } else {
                    if (!keyword_is(card, "XTENSION") ||
                        !card_string(card, hv->xtension, sizeof hv->xtension))
                        return sw_fail(ctx, SW_EFORMAT,
                                       "%s: corrupt FITS file: HDU %d at byte %llu does not start "
                                       "with an XTENSION card",
                                       in->name, hdu, *off);
                }
                continue;
            }
            if (keyword_is(card, "END")) {
                *off += (unsigned long long)(b + 1) * FITS_BLOCK;
                return SW_OK;
            }
            long long v;
            if (keyword_is(card, "BITPIX") && !hv->has_bitpix) {
                if (!card_int(card, &v))
                    return sw_fail(ctx, SW_EFORMAT,
                                   "%s: corrupt FITS header: BITPIX of HDU %d "
                                   "is not an integer",
                                   in->name, hdu);
                hv->bitpix = v;
                hv->has_bitpix = 1;
            } else if (keyword_is(card, "NAXIS") && !hv->has_naxis) {
                if (!card_int(card, &v) || v < 0 || v > 999)
                    return sw_fail(ctx, SW_EFORMAT,
                                   "%s: corrupt FITS header: NAXIS of HDU %d "
                                   "is not an integer in 0..999",
                                   in->name, hdu);
                hv->naxis = v;
                hv->has_naxis = 1;
            } else if (memcmp(card, "NAXIS", 5) == 0 && card[5] >= '1' && card[5] <= '9') {
                int k = 0, i = 5;
                while (i < 8 && card[i] >= '0' && card[i] <= '9')
                    k = k * 10 + (card[i++] - '0');
                while (i < 8 && card[i] == ' ')
                    i++;
                if (i == 8 && k >= 1 && k <= 999 && !hv->has_naxes[k]) {
                    if (!card_int(card, &v) || v < 0)
                        return sw_fail(ctx, SW_EFORMAT,
                                       "%s: corrupt FITS header: NAXIS%d of HDU "
                                       "%d is not a non-negative integer",
                                       in->name, k, hdu);
                    hv->naxes[k] = v;
                    hv->has_naxes[k] = 1;
                }
            } else if (keyword_is(card, "PCOUNT") && !hv->has_pcount) {
                if (!card_int(card, &v) || v < 0)
                    return sw_fail(ctx, SW_EFORMAT,
                                   "%s: corrupt FITS header: PCOUNT of HDU %d "
                                   "is not a non-negative integer",
                                   in->name, hdu);
                hv->pcount = v;
                hv->has_pcount = 1;
            } else if (keyword_is(card, "GCOUNT") && !hv->has_gcount) {
                if (!card_int(card, &v) || v < 0)
                    return sw_fail(ctx, SW_EFORMAT,
                                   "%s: corrupt FITS header: GCOUNT of HDU %d "
                                   "is not a non-negative integer",
                                   in->name, hdu);
                hv->gcount = v;
                hv->has_gcount = 1;
            } else if (keyword_is(card, "TFIELDS") && !hv->has_tfields) {
                if (!card_int(card, &hv->tfields) || hv->tfields < 0 || hv->tfields > 999)
                    return sw_fail(ctx, SW_EFORMAT,
                                   "%s: corrupt FITS header: TFIELDS of HDU %d is not an "
                                   "integer in 0..999",
                                   in->name, hdu);
                hv->has_tfields = 1;
            } else if (keyword_is(card, "GROUPS")) {
                hv->groups = card_logical(card) == 1;
            } else if (keyword_is(card, "ZIMAGE")) {
                hv->zimage = card_logical(card) == 1;
            } else if (keyword_is(card, "ZBITPIX") && !hv->has_zbitpix) {
                /* checked when the HDU turns out to be a compressed image */
                hv->has_zbitpix = card_int(card, &hv->zbitpix);
            } else if (keyword_is(card, "ZNAXIS") && !hv->has_znaxis) {
                hv->has_znaxis = card_int(card, &hv->znaxis);
            } else if (memcmp(card, "ZNAXIS", 6) == 0 && card[6] >= '1' && card[6] <= '3' &&
                       card[7] == ' ' && !hv->has_znaxes[card[6] - '0']) {
                int k = card[6] - '0';
                hv->has_znaxes[k] = (unsigned char)card_int(card, &hv->znaxes[k]);
            } else if (keyword_is(card, "ZCMPTYPE") && !hv->zcmptype[0]) {
                if (!card_string(card, hv->zcmptype, sizeof hv->zcmptype) || !hv->zcmptype[0])
                    strcpy(hv->zcmptype, "?");
            } else if (memcmp(card, "ZTILE", 5) == 0 && card[5] >= '1' && card[5] <= '3' &&
                       card[6] == ' ' && card[7] == ' ' && !hv->has_ztile[card[5] - '0']) {
                int k = card[5] - '0';
                hv->has_ztile[k] = 1;
                hv->ztile_bad[k] = !card_int(card, &hv->ztile[k]);
            } else if (memcmp(card, "ZNAME", 5) == 0 && card[5] >= '1' && card[5] <= '9' &&
                       card[6] == ' ' && card[7] == ' ' && !hv->zname[card[5] - '0'][0]) {
                int k = card[5] - '0';
                if (!card_string(card, hv->zname[k], sizeof hv->zname[k]) || !hv->zname[k][0])
                    strcpy(hv->zname[k], "?");
            } else if (memcmp(card, "ZVAL", 4) == 0 && card[4] >= '1' && card[4] <= '9' &&
                       card[5] == ' ' && card[6] == ' ' && card[7] == ' ' &&
                       !hv->has_zval[card[4] - '0']) {
                int k = card[4] - '0';
                hv->has_zval[k] = 1;
                hv->zval_int[k] = (unsigned char)card_int(card, &hv->zval[k]);
            }
        }
    }
    return sw_fail(ctx, SW_EFORMAT,
                   "%s: corrupt FITS header: HDU %d has no END card in its "
                   "first %d blocks",
                   in->name, hdu, FITS_MAX_HEADER_BLOCKS);
}

/* Size in bytes of the data unit described by a header (without padding). */
static sw_status data_size(sw_context *ctx, fits_input *in, int hdu, const hdr_values *hv,
                           unsigned long long *bytes)
{
    if (!hv->has_bitpix || !hv->has_naxis)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: corrupt FITS header: HDU %d lacks the mandatory "
                       "%s keyword",
                       in->name, hdu, hv->has_bitpix ? "NAXIS" : "BITPIX");
    long long bp = hv->bitpix;
    if (bp != 8 && bp != 16 && bp != 32 && bp != 64 && bp != -32 && bp != -64)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: unsupported BITPIX = %lld in HDU %d (FITS allows "
                       "8, 16, 32, 64, -32, -64)",
                       in->name, bp, hdu);
    if (hv->naxis == 0) {
        *bytes = 0;
        return SW_OK;
    }
    size_t n = 1;
    int first = 1;
    if (hdu == 1 && hv->groups && hv->has_naxes[1] && hv->naxes[1] == 0)
        first = 2; /* random groups: NAXIS1 = 0 is not a dimension */
    for (int k = 1; k <= hv->naxis; k++) {
        if (!hv->has_naxes[k])
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: corrupt FITS header: HDU %d has NAXIS = %lld "
                           "but no NAXIS%d keyword",
                           in->name, hdu, hv->naxis, k);
        if (k >= first && !sw_mul_ok(n, (size_t)hv->naxes[k], &n))
            goto too_big;
    }
    /* cfitsio honours PCOUNT and GCOUNT wherever they appear; so does this size. */
    long long pcount = hv->has_pcount ? hv->pcount : 0;
    long long gcount = hv->has_gcount ? hv->gcount : 1;
    if (n > SIZE_MAX - (size_t)pcount)
        goto too_big;
    n += (size_t)pcount;
    if (!sw_mul_ok(n, (size_t)gcount, &n) || !sw_mul_ok(n, (size_t)(bp < 0 ? -bp : bp) / 8, &n))
        goto too_big;
    *bytes = n;
    return SW_OK;
too_big:
    return sw_fail(ctx, SW_EFORMAT,
                   "%s: corrupt FITS header: the data size of HDU %d overflows "
                   "(absurd NAXISn)",
                   in->name, hdu);
}

/* Checks that the data unit of an HDU, padded to whole 2880-byte blocks, is in the file
 * (cfitsio needs the padding too). */
static sw_status check_data_present(sw_context *ctx, fits_input *in, int hdu,
                                    unsigned long long start, unsigned long long off,
                                    unsigned long long bytes, unsigned long long *padded)
{
    unsigned long long left = in->size - off;
    if (bytes > left || (FITS_BLOCK - bytes % FITS_BLOCK) % FITS_BLOCK > left - bytes)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: truncated FITS file: HDU %d (header at byte %llu) promises %llu bytes "
                       "of data, padded to whole 2880-byte blocks, but only %llu remain in the "
                       "file",
                       in->name, hdu, start, bytes, left);
    *padded = bytes + (FITS_BLOCK - bytes % FITS_BLOCK) % FITS_BLOCK;
    return SW_OK;
}

/* Width, height and frames within spotwave's limits. */
static sw_status check_image_size(sw_context *ctx, fits_input *in, long long w, long long h,
                                  long long d)
{
    if (w > SW_IMAGE_MAX_DIM || h > SW_IMAGE_MAX_DIM)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: image dimensions %lld x %lld exceed the maximum of "
                       "%d pixels per side",
                       in->name, w, h, SW_IMAGE_MAX_DIM);
    if (w * h > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: image of %lld x %lld pixels exceeds the maximum of "
                       "%lld pixels",
                       in->name, w, h, SW_IMAGE_MAX_PIXELS);
    if (d > INT32_MAX)
        return sw_fail(ctx, SW_EFORMAT, "%s: cube of %lld frames: more than %d", in->name, d,
                       (int)INT32_MAX);
    return SW_OK;
}

/* Checks the geometry of an image HDU with data: 2-D or 3-D, sizes within spotwave's limits. */
static sw_status check_image_geometry(sw_context *ctx, fits_input *in, int hdu,
                                      const hdr_values *hv)
{
    if (hdu == 1 && hv->groups)
        return sw_fail(ctx, SW_EUNSUPPORTED, "%s: random-groups FITS files are not supported",
                       in->name);
    if (hv->naxis != 2 && hv->naxis != 3)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: HDU %d has NAXIS = %lld; only 2-D images and 3-D cubes (NAXIS = 2 or "
                       "3) are supported",
                       in->name, hdu, hv->naxis);
    for (int k = 1; k <= hv->naxis; k++) {
        if (!hv->has_naxes[k])
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: corrupt FITS header: HDU %d has NAXIS = %lld "
                           "but no NAXIS%d keyword",
                           in->name, hdu, hv->naxis, k);
        if (hv->naxes[k] == 0)
            return sw_fail(ctx, SW_EFORMAT, "%s: HDU %d has NAXIS%d = 0: the image is empty",
                           in->name, hdu, k);
    }
    if ((hv->has_pcount && hv->pcount != 0) || (hv->has_gcount && hv->gcount != 1))
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: corrupt FITS header: HDU %d is an image with PCOUNT "
                       "= %lld, GCOUNT = %lld (an image has PCOUNT = 0, GCOUNT = 1)",
                       in->name, hdu, hv->has_pcount ? hv->pcount : 0,
                       hv->has_gcount ? hv->gcount : 1);
    return check_image_size(ctx, in, hv->naxes[1], hv->naxes[2], hv->naxis == 3 ? hv->naxes[3] : 1);
}

/* Checks the geometry of a tile-compressed image (ZBITPIX, ZNAXIS, ZNAXISn) the way
 * check_image_geometry checks a plain one. */
static sw_status check_compressed_geometry(sw_context *ctx, fits_input *in, int hdu,
                                           const hdr_values *hv)
{
    long long bp = hv->zbitpix;
    if (!hv->has_zbitpix || !hv->has_znaxis)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: corrupt tile-compressed image in HDU %d: no valid %s keyword", in->name,
                       hdu, hv->has_zbitpix ? "ZNAXIS" : "ZBITPIX");
    if (bp != 8 && bp != 16 && bp != 32 && bp != 64 && bp != -32 && bp != -64)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: unsupported ZBITPIX = %lld in HDU %d (FITS allows 8, 16, 32, 64, -32, "
                       "-64)",
                       in->name, bp, hdu);
    if (hv->znaxis != 2 && hv->znaxis != 3)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: HDU %d is a tile-compressed image with ZNAXIS = %lld; only 2-D images "
                       "and 3-D cubes are supported",
                       in->name, hdu, hv->znaxis);
    for (int k = 1; k <= hv->znaxis; k++) {
        if (!hv->has_znaxes[k] || hv->znaxes[k] < 0)
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: corrupt tile-compressed image in HDU %d: no valid ZNAXIS%d",
                           in->name, hdu, k);
        if (hv->znaxes[k] == 0)
            return sw_fail(ctx, SW_EFORMAT, "%s: HDU %d has ZNAXIS%d = 0: the image is empty",
                           in->name, hdu, k);
    }
    /* What cfitsio computes its buffers from without checking (a zero block size is a division
     * by zero): the algorithm, the tile sizes and the algorithm's parameters. */
    static const char *const known[] = {"RICE_1", "RICE_ONE",    "GZIP_1",    "GZIP_2",
                                        "PLIO_1", "HCOMPRESS_1", "NOCOMPRESS"};
    int algorithm = -1;
    for (int k = 0; k < (int)(sizeof known / sizeof known[0]); k++)
        if (strcmp(hv->zcmptype, known[k]) == 0)
            algorithm = k;
    if (algorithm < 0)
        return sw_fail(
            ctx, hv->zcmptype[0] && strcmp(hv->zcmptype, "?") != 0 ? SW_EUNSUPPORTED : SW_EFORMAT,
            "%s: tile-compressed image in HDU %d: compression '%s' is not one of "
            "RICE_1, GZIP_1, GZIP_2, PLIO_1, HCOMPRESS_1, NOCOMPRESS",
            in->name, hdu, hv->zcmptype[0] ? hv->zcmptype : "(none)");
    for (int k = 1; k <= hv->znaxis; k++)
        if (hv->has_ztile[k] && (hv->ztile_bad[k] || hv->ztile[k] < 1))
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: corrupt tile-compressed image in HDU %d: ZTILE%d is not a "
                           "positive integer",
                           in->name, hdu, k);
    for (int k = 1; k <= 9; k++) {
        const char *n = hv->zname[k];
        const long long v = hv->zval[k];
        int bad = 0;
        if (strcmp(n, "BLOCKSIZE") == 0)
            bad = hv->has_zval[k] && (!hv->zval_int[k] || v < 1 || v > 65536);
        else if (strcmp(n, "BYTEPIX") == 0)
            bad = hv->has_zval[k] && (!hv->zval_int[k] || (v != 1 && v != 2 && v != 4 && v != 8));
        if (bad)
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: corrupt tile-compressed image in HDU %d: %s (ZVAL%d) is out of "
                           "range",
                           in->name, hdu, n, k);
    }
    return check_image_size(ctx, in, hv->znaxes[1], hv->znaxes[2],
                            hv->znaxis == 3 ? hv->znaxes[3] : 1);
}

/* Walks the HDUs to the first one with image data and checks it is an image we can read. */
static sw_status fits_scan(sw_context *ctx, fits_input *in, fits_target *t)
{
    hdr_values *hv = malloc(sizeof *hv);
    if (!hv)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", in->name);
    sw_status st = SW_OK;
    unsigned long long off = 0;
    for (int hdu = 1; hdu <= FITS_MAX_HDUS; hdu++) {
        if (hdu > 1 && off >= in->size) {
            st = sw_fail(ctx, SW_EFORMAT,
                         "%s: no image data: the primary HDU is empty and no "
                         "IMAGE extension with data follows",
                         in->name);
            goto done;
        }
        unsigned long long start = off, padded = 0;
        st = scan_header(ctx, in, hdu, &off, hv);
        if (st != SW_OK)
            goto done;
        int is_image = hdu == 1 || strcmp(hv->xtension, "IMAGE") == 0;
        if (hdu > 1 &&
            (strcmp(hv->xtension, "BINTABLE") == 0 || strcmp(hv->xtension, "TABLE") == 0) &&
            !hv->has_tfields) {
            /* cfitsio reads every header on the way to the image */
            st = sw_fail(ctx, SW_EFORMAT, "%s: corrupt FITS header: table HDU %d has no TFIELDS",
                         in->name, hdu);
            goto done;
        }
        if (hdu > 1 && strcmp(hv->xtension, "BINTABLE") == 0 && hv->zimage) {
            /* A tile-compressed image (fpack; the FITS standard 4.0, section 10): its tiles are
             * the rows of a binary table, which cfitsio presents as an image. */
            unsigned long long bytes = 0;
            st = check_compressed_geometry(ctx, in, hdu, hv);
            if (st == SW_OK)
                st = data_size(ctx, in, hdu, hv, &bytes);
            if (st == SW_OK)
                st = check_data_present(ctx, in, hdu, start, off, bytes, &padded);
            if (st != SW_OK)
                goto done;
            t->hdu = hdu;
            t->bitpix = (int)hv->zbitpix;
            t->naxis = (int)hv->znaxis;
            t->naxes[0] = hv->znaxes[1];
            t->naxes[1] = hv->znaxes[2];
            t->naxes[2] = hv->znaxis == 3 ? hv->znaxes[3] : 1;
            t->compressed = 1;
            goto done;
        }
        if (is_image && hv->has_naxis && hv->naxis > 0) {
            st = check_image_geometry(ctx, in, hdu, hv);
            if (st != SW_OK)
                goto done;
        }
        unsigned long long bytes = 0;
        st = data_size(ctx, in, hdu, hv, &bytes);
        if (st == SW_OK)
            st = check_data_present(ctx, in, hdu, start, off, bytes, &padded);
        if (st != SW_OK)
            goto done;
        if (is_image && hv->naxis > 0) {
            t->hdu = hdu;
            t->bitpix = (int)hv->bitpix;
            t->naxis = (int)hv->naxis;
            t->naxes[0] = hv->naxes[1];
            t->naxes[1] = hv->naxes[2];
            t->naxes[2] = hv->naxis == 3 ? hv->naxes[3] : 1;
            goto done;
        }
        off += padded; /* skip the data unit */
    }
    st = sw_fail(ctx, SW_EFORMAT, "%s: no image found in the first %d HDUs", in->name,
                 FITS_MAX_HDUS);
done:
    free(hv);
    return st;
}

/* ------------------------------------------------------------------ cfitsio helpers */

/*
 * The "realloc" given to cfitsio's memory driver for read-only buffers. cfitsio calls it through
 * its truncate routine: with the current size while opening (harmless: the buffer is returned
 * as is), and with a larger size when the headers describe more data than the buffer holds.
 * Without a realloc function the driver would then just raise its idea of the file size and
 * read past the end of the caller's buffer; refusing turns that into an error.
 */
static _Thread_local size_t mem_buffer_size;
static _Thread_local int mem_grow_refused;

static void *readonly_realloc(void *p, size_t newsize)
{
    if (newsize <= mem_buffer_size)
        return p;
    mem_grow_refused = 1;
    return NULL;
}

static sw_status cfitsio_fail(sw_context *ctx, const char *name, int status, const char *what,
                              int writing)
{
    char text[FLEN_STATUS] = "";
    char detail[FLEN_ERRMSG] = "";
    fits_get_errstatus(status, text);
    fits_read_errmsg(detail); /* oldest message on cfitsio's stack, often the most precise */
    fits_clear_errmsg();
    sw_status st = writing ? SW_EIO : SW_EFORMAT;
    if (status == MEMORY_ALLOCATION && mem_grow_refused) {
        mem_grow_refused = 0;
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: %s: the headers describe more data than the buffer "
                       "holds (corrupt or truncated)",
                       name, what);
    }
    if (status == MEMORY_ALLOCATION)
        st = SW_ENOMEM;
    else if (status == FILE_NOT_OPENED || status == FILE_NOT_CREATED || status == READ_ERROR ||
             status == WRITE_ERROR || status == TOO_MANY_FILES)
        st = SW_EIO;
    if (detail[0] && strcmp(detail, text) != 0)
        return sw_fail(ctx, st, "%s: %s: %s (cfitsio status %d: %s)", name, what, text, status,
                       detail);
    return sw_fail(ctx, st, "%s: %s: %s (cfitsio status %d)", name, what, text, status);
}

/* Checks the argument path: present and short enough for cfitsio's name buffers. */
static sw_status check_path(sw_context *ctx, const char *fn, const char *path)
{
    if (!path)
        return sw_fail(ctx, SW_EINVAL, "%s: path is NULL", fn);
    if (!path[0])
        return sw_fail(ctx, SW_EINVAL, "%s: empty file name", fn);
    if (strlen(path) + 16 >= FLEN_FILENAME)
        return sw_fail(ctx, SW_EINVAL,
                       "%s: file name too long for cfitsio (%zu characters, "
                       "at most %d)",
                       path, strlen(path), FLEN_FILENAME - 17);
    return SW_OK;
}

/* ------------------------------------------------------------------ gzip */

static int is_gzip(const unsigned char *p, unsigned long long n)
{
    return n >= 2 && p[0] == 0x1F && p[1] == 0x8B;
}

/*
 * Inflates gzip data (RFC 1952; one member or several concatenated, as gzip itself reads them)
 * into a new buffer (*out, *outn; the caller frees it). Bytes after the last member that do not
 * start another one are ignored, as gzip does (a debug message says so). Corrupt or truncated
 * data: SW_EFORMAT.
 */
static sw_status gunzip(sw_context *ctx, const char *name, const unsigned char *src, size_t n,
                        unsigned char **out, size_t *outn)
{
    *out = NULL;
    *outn = 0;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
        return sw_fail(ctx, SW_ENOMEM, "%s: cannot start gzip decompression (out of memory)", name);
    /* The last member's ISIZE (the uncompressed size mod 2^32) is a good first guess. */
    size_t cap = n < 65536 ? 262144 : 4 * n;
    if (n >= 18) {
        size_t isize = (size_t)src[n - 4] | (size_t)src[n - 3] << 8 | (size_t)src[n - 2] << 16 |
                       (size_t)src[n - 1] << 24;
        if (isize >= n / 2 && isize / 1100 <= n)
            cap = isize + 1;
    }
    size_t len = 0, pos = 0;
    sw_status st =
        sw_memory_check(ctx, 1, cap, "%s: a first buffer for the decompressed gzip data", name);
    unsigned char *buf = st == SW_OK ? malloc(cap) : NULL;
    if (st != SW_OK)
        goto done;
    if (!buf) {
        st = sw_fail(ctx, SW_ENOMEM, "%s: out of memory for the decompressed data", name);
        goto done;
    }
    for (;;) {
        if (zs.avail_in == 0 && pos < n) {
            zs.next_in = (unsigned char *)src + pos;
            zs.avail_in = (uInt)(n - pos > UINT_MAX ? UINT_MAX : n - pos);
            pos += zs.avail_in;
        }
        if (len == cap) {
            size_t ncap = cap > SIZE_MAX / 2 ? SIZE_MAX : 2 * cap;
            if (sw_memory_check(ctx, 1, ncap, "%s: the decompressed gzip data (%zu bytes so far)",
                                name, len) != SW_OK) {
                st = SW_ENOMEM;
                goto done;
            }
            unsigned char *nb = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!nb) {
                st = sw_fail(ctx, SW_ENOMEM,
                             "%s: out of memory for the decompressed data (%zu bytes so far)", name,
                             len);
                goto done;
            }
            buf = nb;
            cap = ncap;
        }
        zs.next_out = buf + len;
        zs.avail_out = (uInt)(cap - len > UINT_MAX ? UINT_MAX : cap - len);
        uInt room = zs.avail_out;
        int ret = inflate(&zs, Z_NO_FLUSH);
        len += room - zs.avail_out;
        if (ret == Z_STREAM_END) {
            size_t left = zs.avail_in + (n - pos);
            const unsigned char *next = zs.next_in;
            if (left >= 2 && zs.avail_in >= 2 && is_gzip(next, 2)) {
                inflateReset(&zs); /* another member follows */
                continue;
            }
            if (left > 0)
                sw_log(ctx, SW_LOG_DEBUG, "%s: %zu bytes after the gzip data ignored", name, left);
            break;
        }
        if (ret == Z_BUF_ERROR && zs.avail_in == 0 && pos == n) {
            st = sw_fail(ctx, SW_EFORMAT,
                         "%s: truncated gzip data (the compressed stream ends early)", name);
            goto done;
        }
        if (ret == Z_MEM_ERROR) {
            st = sw_fail(ctx, SW_ENOMEM, "%s: out of memory in gzip decompression", name);
            goto done;
        }
        if (ret != Z_OK && ret != Z_BUF_ERROR) {
            st = sw_fail(ctx, SW_EFORMAT, "%s: corrupt gzip data (zlib: %s)", name,
                         zs.msg ? zs.msg : "invalid stream");
            goto done;
        }
    }
done:
    inflateEnd(&zs);
    if (st != SW_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *outn = len;
    return SW_OK;
}

/* ------------------------------------------------------------------ reading */

/* Reads frames [first, first + n) of the target HDU into imgs (allocated here). */
static sw_status read_frames(sw_context *ctx, const char *name, fitsfile *fp, const fits_target *t,
                             int32_t first, int32_t n, sw_image *imgs)
{
    int status = 0;
    int bitpix, naxis;
    LONGLONG naxes[3] = {0, 0, 0};
    if (fits_get_img_paramll(fp, 3, &bitpix, &naxis, naxes, &status))
        return cfitsio_fail(ctx, name, status, "cannot read the image parameters", 0);
    if (bitpix != t->bitpix || naxis != t->naxis || naxes[0] != t->naxes[0] ||
        naxes[1] != t->naxes[1] || (naxis == 3 && naxes[2] != t->naxes[2]))
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: inconsistent FITS header in HDU %d (duplicate "
                       "BITPIX/NAXIS keywords?)",
                       name, t->hdu);

    double bzero = 0.0, bscale = 1.0;
    if (fits_read_key(fp, TDOUBLE, "BZERO", &bzero, NULL, &status)) {
        if (status != KEY_NO_EXIST)
            return cfitsio_fail(ctx, name, status, "bad BZERO keyword", 0);
        status = 0;
        bzero = 0.0;
        fits_clear_errmsg();
    }
    if (fits_read_key(fp, TDOUBLE, "BSCALE", &bscale, NULL, &status)) {
        if (status != KEY_NO_EXIST)
            return cfitsio_fail(ctx, name, status, "bad BSCALE keyword", 0);
        status = 0;
        bscale = 1.0;
        fits_clear_errmsg();
    }
    if (!isfinite(bzero) || !isfinite(bscale) || bscale == 0.0)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: HDU %d has BZERO = %g, BSCALE = %g: BSCALE must be "
                       "finite and non-zero, BZERO finite",
                       name, t->hdu, bzero, bscale);

    sw_pixel_type type = SW_PIX_F32;
    int ftype = TDOUBLE;
    if (bscale == 1.0) {
        if (bitpix == 8 && bzero == 0.0) {
            type = SW_PIX_U8;
            ftype = TBYTE;
        } else if (bitpix == 16 && bzero == 32768.0) {
            type = SW_PIX_U16;
            ftype = TUSHORT;
        } else if (bitpix == 32 && bzero == 2147483648.0) {
            type = SW_PIX_U32;
            ftype = TUINT;
        } else if (bitpix == -32 && bzero == 0.0) {
            ftype = TFLOAT; /* read as is: bit-exact, NaN payloads included */
        }
    }
    int32_t w = (int32_t)t->naxes[0], h = (int32_t)t->naxes[1];
    /* Rows read per call: one for plain images (straight into the image's rows); a tile's
     * height for tile-compressed ones, so that each tile is decompressed once. */
    int32_t chunk = 1;
    if (t->compressed) {
        long tile[3] = {0, 0, 0};
        if (fits_get_tile_dim(fp, 3, tile, &status))
            return cfitsio_fail(ctx, name, status, "cannot read the tile size", 0);
        chunk = tile[1] < 1 ? 1 : tile[1] > h ? h : (int32_t)tile[1];
    }
    const size_t esize = ftype == TDOUBLE ? sizeof(double) : sw_pixel_size(type);
    const size_t rowbytes = (size_t)w * sw_pixel_size(type);
    void *buf = NULL; /* chunk rows as read, when they are not read in place */
    if (ftype == TDOUBLE || chunk > 1) {
        buf = malloc((size_t)chunk * (size_t)w * esize);
        if (!buf)
            return sw_fail(ctx, SW_ENOMEM, "%s: out of memory for a row buffer", name);
    }
    sw_status st = SW_OK;
    int32_t done = 0;
    long long lost = 0;
    double nan_value = NAN;
    for (; done < n; done++) {
        sw_image *img = &imgs[done];
        st = sw_image_alloc(ctx, w, h, type, img);
        if (st != SW_OK)
            break;
        for (int32_t y0 = 0; y0 < h && st == SW_OK; y0 += chunk) {
            int32_t rows = h - y0 < chunk ? h - y0 : chunk;
            LONGLONG fpix[3] = {1, (LONGLONG)y0 + 1, (LONGLONG)first + done + 1};
            int anynul = 0;
            void *dst = buf ? (void *)buf : sw_image_row(img, y0);
            if (fits_read_pixll(fp, ftype, fpix, (LONGLONG)rows * w,
                                ftype == TDOUBLE ? &nan_value : NULL, dst, &anynul, &status)) {
                st = cfitsio_fail(ctx, name, status, "cannot read the pixel data", 0);
                break;
            }
            if (!buf)
                continue;
            for (int32_t r = 0; r < rows && st == SW_OK; r++) {
                int32_t y = y0 + r;
                void *row = sw_image_row(img, y);
                if (ftype != TDOUBLE) {
                    memcpy(row, (const unsigned char *)buf + (size_t)r * w * esize, rowbytes);
                    continue;
                }
                const double *dbuf = (const double *)buf + (size_t)r * w;
                float *fr = row;
                for (int32_t x = 0; x < w; x++) {
                    double v = dbuf[x];
                    if (isfinite(v) && fabs(v) > FLT_MAX) {
                        st = sw_fail(ctx, SW_ERANGE,
                                     "%s: pixel (%d, %d) of frame %d has the value %g, outside the "
                                     "range of 32-bit float (BITPIX %d)",
                                     name, (int)x, (int)y, (int)(first + done), v, bitpix);
                        break;
                    }
                    fr[x] = (float)v;
                    if ((bitpix == 32 || bitpix == 64) && (double)fr[x] != v && isfinite(v))
                        lost++;
                }
            }
        }
        if (st != SW_OK) {
            sw_image_free(img);
            break;
        }
    }
    free(buf);
    if (st != SW_OK) {
        for (int32_t i = 0; i < done; i++)
            sw_image_free(&imgs[i]);
        return st;
    }
    if (lost)
        sw_log(ctx, SW_LOG_DEBUG,
               "%s: %lld pixel values of BITPIX %d lost digits in the "
               "conversion to 32-bit float",
               name, lost, bitpix);
    return SW_OK;
}

/*
 * Opens and scans the input, then reads frame `index` (or every frame when index < 0) into
 * frames_out / image_out.
 */
static sw_status fits_load_input(sw_context *ctx, fits_input *in, int32_t index,
                                 sw_frames *frames_out, sw_image *image_out)
{
    fits_target t;
    memset(&t, 0, sizeof t);
    sw_status st = fits_scan(ctx, in, &t);
    if (in->f) {
        fclose(in->f);
        in->f = NULL;
    }
    if (st != SW_OK)
        return st;
    if (index >= 0 && index >= t.naxes[2])
        return sw_fail(ctx, SW_EINVAL, "%s: frame %d requested but the file has %lld frame%s",
                       in->name, (int)index, t.naxes[2], t.naxes[2] == 1 ? "" : "s");
    /* What the header asks for, before anything is allocated: a tile-compressed or sparse file
     * can claim far more pixels than it holds. Frames are stored as u8, u16 or 4-byte pixels. */
    const uint64_t px_bytes = t.bitpix == 8 ? 1 : t.bitpix == 16 ? 2 : 4;
    const uint64_t frame_bytes = (uint64_t)t.naxes[0] * (uint64_t)t.naxes[1] * px_bytes;
    const long long want = index >= 0 ? 1 : t.naxes[2];
    st = sw_memory_check(ctx, (uint64_t)want, frame_bytes, "%s: %lld frame%s of %lld x %lld pixels",
                         in->name, want, want == 1 ? "" : "s", t.naxes[0], t.naxes[1]);
    if (st != SW_OK)
        return st;

    fitsfile *fp = NULL;
    int status = 0;
    void *mem = (void *)in->buf;
    /* cfitsio's memory driver reads whole 2880-byte blocks without checking the end of the
     * buffer: hand it whole blocks only (the scan has checked that what we read lies in them;
     * a partial block at the end is trailing junk). */
    size_t memsize = (size_t)(in->size - in->size % FITS_BLOCK);
    mem_buffer_size = memsize;
    mem_grow_refused = 0;
    if (in->path)
        fits_open_diskfile(&fp, in->path, READONLY, &status);
    else
        fits_open_memfile(&fp, "memory.fits", READONLY, &mem, &memsize, 0, readonly_realloc,
                          &status);
    if (status) {
        if (fp) {
            int s2 = 0;
            fits_close_file(fp, &s2);
        }
        return cfitsio_fail(ctx, in->name, status, "cannot open", 0);
    }
    if (t.hdu > 1) {
        int hdutype;
        if (fits_movabs_hdu(fp, t.hdu, &hdutype, &status) || hdutype != IMAGE_HDU) {
            st = status ? cfitsio_fail(ctx, in->name, status, "cannot move to the image HDU", 0)
                        : sw_fail(ctx, SW_EFORMAT, "%s: HDU %d is not an image", in->name, t.hdu);
            goto close;
        }
    }
    if (t.compressed) {
        /* cfitsio's tile decoders trust the compressed bytes; fpack writes a checksum of them
         * (DATASUM), so a damaged file is refused here instead of being decoded. */
        int dataok = 0, hduok = 0;
        if (fits_verify_chksum(fp, &dataok, &hduok, &status)) {
            st = cfitsio_fail(ctx, in->name, status, "cannot verify the checksum", 0);
            goto close;
        }
        if (dataok < 0) {
            st = sw_fail(ctx, SW_EFORMAT,
                         "%s: the tile-compressed data of HDU %d do not match their checksum "
                         "(DATASUM): the file is damaged",
                         in->name, t.hdu);
            goto close;
        }
    }
    if (index >= 0) {
        st = read_frames(ctx, in->name, fp, &t, index, 1, image_out);
    } else {
        int32_t count = (int32_t)t.naxes[2];
        sw_image *imgs = calloc((size_t)count, sizeof *imgs);
        if (!imgs) {
            st = sw_fail(ctx, SW_ENOMEM, "%s: out of memory for %d frame descriptors", in->name,
                         (int)count);
            goto close;
        }
        st = read_frames(ctx, in->name, fp, &t, 0, count, imgs);
        if (st != SW_OK) {
            free(imgs);
            goto close;
        }
        frames_out->count = count;
        frames_out->frames = imgs;
    }
close:
    status = 0;
    fits_close_file(fp, &status);
    fits_clear_errmsg();
    return st;
}

/* fits_load_input, then the input's decompressed buffer (if any) is freed. */
static sw_status fits_load(sw_context *ctx, fits_input *in, int32_t index, sw_frames *frames_out,
                           sw_image *image_out)
{
    sw_status st = fits_load_input(ctx, in, index, frames_out, image_out);
    free(in->owned);
    in->owned = NULL;
    in->buf = NULL;
    return st;
}

/* When the input is gzip data: inflates it into a buffer of ours, which then is the input (read
 * through cfitsio's memory driver, after the same scan as any file). */
static sw_status maybe_gunzip(sw_context *ctx, fits_input *in)
{
    unsigned char head[2];
    if (in->buf) {
        if (!is_gzip(in->buf, in->size))
            return SW_OK;
    } else {
        if (in->size < 2 || input_read(in, 0, head, 2) != 0 || !is_gzip(head, 2))
            return SW_OK;
    }
    const unsigned char *src = in->buf;
    unsigned char *file = NULL;
    if (!src) {
        if (in->size > SIZE_MAX) {
            fclose(in->f);
            in->f = NULL;
            return sw_fail(ctx, SW_ENOMEM, "%s: too large to decompress here", in->name);
        }
        file = malloc((size_t)in->size);
        int r = file ? input_read(in, 0, file, (size_t)in->size) : 0;
        fclose(in->f);
        in->f = NULL;
        if (!file)
            return sw_fail(ctx, SW_ENOMEM, "%s: out of memory for the gzip data", in->name);
        if (r != 0) {
            free(file);
            return sw_fail(ctx, SW_EIO, "%s: read error (%s)", in->name, strerror(errno));
        }
        src = file;
    }
    unsigned char *out;
    size_t outn;
    sw_status st = gunzip(ctx, in->name, src, (size_t)in->size, &out, &outn);
    free(file);
    if (st != SW_OK)
        return st;
    in->owned = out;
    in->buf = out;
    in->size = outn;
    in->path = NULL; /* read from memory from now on */
    return SW_OK;
}

static sw_status open_disk_input(sw_context *ctx, const char *path, fits_input *in)
{
    memset(in, 0, sizeof *in);
    in->name = path;
    in->path = path;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sw_fail(ctx, SW_EIO, "%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        int e = errno;
        fclose(f);
        return sw_fail(ctx, SW_EIO, "%s: cannot stat (%s)", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        fclose(f);
        return sw_fail(ctx, SW_EIO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        fclose(f);
        return sw_fail(ctx, SW_EFORMAT, "%s: empty file (0 bytes), not a FITS image", path);
    }
    in->f = f;
    in->size = (unsigned long long)sb.st_size;
    return maybe_gunzip(ctx, in);
}

sw_status sw_fits_read(sw_context *ctx, const char *path, sw_frames *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_fits_read: out is NULL");
    memset(out, 0, sizeof *out);
    sw_status st = check_path(ctx, "sw_fits_read", path);
    if (st != SW_OK)
        return st;
    fits_input in;
    st = open_disk_input(ctx, path, &in);
    if (st != SW_OK)
        return st;
    return fits_load(ctx, &in, -1, out, NULL);
}

sw_status sw_fits_read_frame(sw_context *ctx, const char *path, int32_t index, sw_image *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_fits_read_frame: out is NULL");
    memset(out, 0, sizeof *out);
    sw_status st = check_path(ctx, "sw_fits_read_frame", path);
    if (st != SW_OK)
        return st;
    if (index < 0)
        return sw_fail(ctx, SW_EINVAL, "%s: frame index %d is negative", path, (int)index);
    fits_input in;
    st = open_disk_input(ctx, path, &in);
    if (st != SW_OK)
        return st;
    return fits_load(ctx, &in, index, NULL, out);
}

sw_status sw_fits_read_memory(sw_context *ctx, const void *buf, size_t size, sw_frames *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_fits_read_memory: out is NULL");
    memset(out, 0, sizeof *out);
    if (!buf && size)
        return sw_fail(ctx, SW_EINVAL, "sw_fits_read_memory: buffer is NULL");
    if (size == 0)
        return sw_fail(ctx, SW_EFORMAT, "<memory>: empty buffer (0 bytes), not a FITS image");
    fits_input in;
    memset(&in, 0, sizeof in);
    in.name = "<memory>";
    in.buf = buf;
    in.size = size;
    sw_status st = maybe_gunzip(ctx, &in);
    if (st != SW_OK)
        return st;
    return fits_load(ctx, &in, -1, out, NULL);
}

void sw_frames_free(sw_frames *f)
{
    if (!f)
        return;
    if (f->frames) {
        for (int32_t i = 0; i < f->count; i++)
            sw_image_free(&f->frames[i]);
        free(f->frames);
    }
    f->frames = NULL;
    f->count = 0;
}

/* ------------------------------------------------------------------ writing */

/* 1 when every byte of s is printable ASCII (the only characters a header card may hold). */
static int printable_ascii(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p > 0x7E)
            return 0;
    return 1;
}

/* Names the writer sets itself or that give a header its structure. */
static int reserved_name(const char *n)
{
    static const char *const reserved[] = {"SIMPLE",  "BITPIX",  "NAXIS",    "EXTEND",   "BZERO",
                                           "BSCALE",  "BLANK",   "XTENSION", "PCOUNT",   "GCOUNT",
                                           "GROUPS",  "END",     "CREATOR",  "LONGSTRN", "CONTINUE",
                                           "HISTORY", "COMMENT", "HIERARCH"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcmp(n, reserved[i]) == 0)
            return 1;
    if (strncmp(n, "NAXIS", 5) == 0 && n[5] >= '1' && n[5] <= '9') {
        const char *p = n + 5;
        while (*p >= '0' && *p <= '9')
            p++;
        return *p == '\0';
    }
    return 0;
}

/* Checks the keys given to sw_fits_write_keys; sets *long_strings when a string needs the
 * CONTINUE convention. */
static sw_status check_keys(sw_context *ctx, const char *path, const sw_fits_key *keys,
                            int32_t nkeys, int *long_strings)
{
    *long_strings = 0;
    if (nkeys < 0 || (nkeys > 0 && !keys))
        return sw_fail(ctx, SW_EINVAL, "%s: %d header keys given at %p", path, (int)nkeys,
                       (const void *)keys);
    for (int32_t i = 0; i < nkeys; i++) {
        const sw_fits_key *k = &keys[i];
        if (k->type == SW_FITS_KEY_HISTORY || k->type == SW_FITS_KEY_COMMENT) {
            if (!k->str || !printable_ascii(k->str))
                return sw_fail(ctx, SW_EINVAL,
                               "%s: header key %d: %s text that is %s (printable ASCII only)", path,
                               (int)i, k->type == SW_FITS_KEY_HISTORY ? "HISTORY" : "COMMENT",
                               k->str ? "not printable ASCII" : "NULL");
            continue;
        }
        if (!k->name)
            return sw_fail(ctx, SW_EINVAL, "%s: header key %d has no name", path, (int)i);
        size_t len = strlen(k->name);
        int ok = len >= 1 && len <= 60 && printable_ascii(k->name) && !strchr(k->name, '=');
        if (ok && len <= 8)
            for (size_t c = 0; c < len && ok; c++) {
                char ch = k->name[c];
                ok = (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
            }
        if (ok && len > 8)
            ok = k->name[0] != ' ' && k->name[len - 1] != ' ';
        if (!ok)
            return sw_fail(ctx, SW_EINVAL,
                           "%s: header key name '%s' is not 1..8 characters of A-Z 0-9 - _ (or "
                           "9..60 printable characters without '=', written as HIERARCH)",
                           path, printable_ascii(k->name) ? k->name : "?");
        if (reserved_name(k->name))
            return sw_fail(ctx, SW_EINVAL,
                           "%s: header key %s is written by sw_fits_write_keys itself or shapes "
                           "the file; it cannot be given",
                           path, k->name);
        for (int32_t j = 0; j < i; j++)
            if (keys[j].type != SW_FITS_KEY_HISTORY && keys[j].type != SW_FITS_KEY_COMMENT &&
                strcmp(keys[j].name, k->name) == 0)
                return sw_fail(ctx, SW_EINVAL, "%s: header key %s is given twice", path, k->name);
        if (k->comment && !printable_ascii(k->comment))
            return sw_fail(ctx, SW_EINVAL,
                           "%s: the comment of header key %s is not printable ASCII", path,
                           k->name);
        switch (k->type) {
        case SW_FITS_KEY_STRING:
            if (!k->str || !printable_ascii(k->str))
                return sw_fail(ctx, SW_EINVAL,
                               "%s: the value of header key %s is %s (printable ASCII only)", path,
                               k->name, k->str ? "not printable ASCII" : "NULL");
            if (strlen(k->str) > 68)
                *long_strings = 1;
            break;
        case SW_FITS_KEY_DOUBLE:
            if (!isfinite(k->num))
                return sw_fail(ctx, SW_EINVAL,
                               "%s: header key %s has the value %g: a header holds finite numbers "
                               "only",
                               path, k->name, k->num);
            break;
        case SW_FITS_KEY_LONG:
        case SW_FITS_KEY_BOOL: break;
        default:
            return sw_fail(ctx, SW_EINVAL, "%s: header key %s has the unknown type %d", path,
                           k->name, (int)k->type);
        }
    }
    return SW_OK;
}

/* The fewest significant digits (1..17) with which v prints and reads back as itself, and at
 * least as many as its integer part has below 10^17 (150 is "150.", not "1.5E+02"). */
static int round_trip_digits(double v)
{
    char buf[40];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*G", p, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    int whole = 1; /* digits of the integer part */
    for (double a = fabs(v), ten = 10.0; a >= ten && a < 1e17; ten *= 10.0)
        whole++;
    return whole > p ? whole : p;
}

/* Writes the keys (checked) to the open file: cfitsio's status. */
static int write_keys(fitsfile *fp, const sw_fits_key *keys, int32_t nkeys, int long_strings,
                      int *status)
{
    if (long_strings && fits_write_key_longwarn(fp, status))
        return *status;
    for (int32_t i = 0; i < nkeys && !*status; i++) {
        const sw_fits_key *k = &keys[i];
        const char *com = k->comment;
        switch (k->type) {
        case SW_FITS_KEY_STRING: fits_write_key_longstr(fp, k->name, k->str, com, status); break;
        case SW_FITS_KEY_DOUBLE:
            fits_write_key_dbl(fp, k->name, k->num, -round_trip_digits(k->num), com, status);
            break;
        case SW_FITS_KEY_LONG: fits_write_key_lng(fp, k->name, k->integer, com, status); break;
        case SW_FITS_KEY_BOOL: fits_write_key_log(fp, k->name, k->integer != 0, com, status); break;
        case SW_FITS_KEY_HISTORY: fits_write_history(fp, k->str, status); break;
        case SW_FITS_KEY_COMMENT: fits_write_comment(fp, k->str, status); break;
        }
    }
    return *status;
}

sw_status sw_fits_write(sw_context *ctx, const char *path, const sw_image *frames, int32_t count)
{
    return sw_fits_write_keys(ctx, path, frames, count, NULL, 0);
}

sw_status sw_fits_write_keys(sw_context *ctx, const char *path, const sw_image *frames,
                             int32_t count, const sw_fits_key *keys, int32_t nkeys)
{
    sw_status st = check_path(ctx, "sw_fits_write", path);
    if (st != SW_OK)
        return st;
    if (!frames)
        return sw_fail(ctx, SW_EINVAL, "%s: no frames given (NULL)", path);
    if (count < 1)
        return sw_fail(ctx, SW_EINVAL, "%s: frame count %d is not positive", path, (int)count);
    for (int32_t i = 0; i < count; i++) {
        st = sw_io_check_write_image(ctx, path, &frames[i]);
        if (st != SW_OK)
            return st;
        if (frames[i].width != frames[0].width || frames[i].height != frames[0].height ||
            frames[i].type != frames[0].type)
            return sw_fail(ctx, SW_EINVAL,
                           "%s: frame %d is %dx%d %s but frame 0 is %dx%d %s: "
                           "all frames of a cube must match",
                           path, (int)i, (int)frames[i].width, (int)frames[i].height,
                           sw_pixel_type_string(frames[i].type), (int)frames[0].width,
                           (int)frames[0].height, sw_pixel_type_string(frames[0].type));
    }
    int bitpix, ftype;
    switch (frames[0].type) {
    case SW_PIX_U8:
        bitpix = BYTE_IMG;
        ftype = TBYTE;
        break;
    case SW_PIX_U16:
        bitpix = USHORT_IMG;
        ftype = TUSHORT;
        break; /* BITPIX 16, BZERO 32768 */
    case SW_PIX_U32:
        bitpix = ULONG_IMG;
        ftype = TUINT;
        break; /* BITPIX 32, BZERO 2^31 */
    case SW_PIX_F32:
        bitpix = FLOAT_IMG;
        ftype = TFLOAT;
        break;
    default: return sw_fail(ctx, SW_EINVAL, "%s: unknown pixel type %d", path, (int)frames[0].type);
    }
    int long_strings = 0;
    st = check_keys(ctx, path, keys, nkeys, &long_strings);
    if (st != SW_OK)
        return st;

    char *tmp;
    int fd;
    st = sw_io_tmp_create(ctx, path, &tmp, &fd);
    if (st != SW_OK)
        return st;
    /* cfitsio creates the file itself and refuses an existing one: the name was reserved
     * exclusively above and is handed over now. */
    close(fd);
    unlink(tmp);

    fitsfile *fp = NULL;
    int status = 0;
    const char *what = "cannot create the file";
    if (fits_create_diskfile(&fp, tmp, &status))
        goto fail;
    int naxis = count > 1 ? 3 : 2;
    LONGLONG naxes[3] = {frames[0].width, frames[0].height, count};
    what = "cannot write the header";
    if (fits_create_imgll(fp, bitpix, naxis, naxes, &status))
        goto fail;
    char creator[64];
    snprintf(creator, sizeof creator, "spotwave %s", sw_version());
    if (fits_write_key(fp, TSTRING, "CREATOR", creator, "software that wrote this file", &status))
        goto fail;
    if (write_keys(fp, keys, nkeys, long_strings, &status))
        goto fail;
    what = "cannot write the pixel data";
    for (int32_t k = 0; k < count; k++) {
        const sw_image *img = &frames[k];
        for (int32_t y = 0; y < img->height; y++) {
            LONGLONG fpix[3] = {1, (LONGLONG)y + 1, (LONGLONG)k + 1};
            if (fits_write_pixll(fp, ftype, fpix, img->width, sw_image_row(img, y), &status))
                goto fail;
        }
    }
    what = "cannot finish the file";
    if (fits_close_file(fp, &status)) {
        fp = NULL;
        goto fail;
    }
    fits_clear_errmsg();
    return sw_io_tmp_rename(ctx, path, tmp);

fail:
    st = cfitsio_fail(ctx, path, status, what, 1);
    if (fp) {
        int s2 = 0;
        fits_delete_file(fp, &s2); /* closes and removes the temporary file */
        fits_clear_errmsg();
    }
    unlink(tmp);
    free(tmp);
    return st;
}
