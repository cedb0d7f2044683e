/*
 * PGM (Netpbm "P5", binary greymap): 8-bit (maxval <= 255) and 16-bit big-endian
 * (maxval <= 65535) images, from files or memory.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/io_internal.h"

#include <limits.h>

/* A byte source: a memory buffer or a stdio stream. */
typedef struct pgm_src {
    const unsigned char *buf; /* memory source, or NULL */
    size_t size, pos;
    FILE *f; /* stream source, or NULL */
} pgm_src;

static int src_getc(pgm_src *s)
{
    if (s->f)
        return getc(s->f);
    if (s->pos >= s->size)
        return EOF;
    return s->buf[s->pos++];
}

/* Bytes left in the source after the header, or -1 when unknown (a pipe). */
static long long src_remaining(pgm_src *s)
{
    if (!s->f)
        return (long long)(s->size - s->pos);
    struct stat sb;
    if (fstat(fileno(s->f), &sb) != 0 || !S_ISREG(sb.st_mode))
        return -1;
    long pos = ftell(s->f);
    if (pos < 0)
        return -1;
    return (long long)sb.st_size - pos;
}

static size_t src_read(pgm_src *s, void *dst, size_t n)
{
    if (s->f)
        return fread(dst, 1, n, s->f);
    size_t avail = s->size - s->pos;
    if (n > avail)
        n = avail;
    memcpy(dst, s->buf + s->pos, n);
    s->pos += n;
    return n;
}

static int is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Skips whitespace and comments before a header number; returns its first character. */
static int skip_blank(pgm_src *s)
{
    int c = src_getc(s);
    for (;;) {
        if (c == '#') {
            do
                c = src_getc(s);
            while (c != '\n' && c != '\r' && c != EOF);
        } else if (is_space(c)) {
            c = src_getc(s);
        } else {
            return c;
        }
    }
}

/*
 * Reads one unsigned decimal header number. Values beyond 2^40 saturate (they are refused later
 * as too large anyway). *term receives the character that ended the number. Returns 0 when no
 * digit was found (the offending character in *term).
 */
static int read_number(pgm_src *s, unsigned long long *value, int *term)
{
    int c = skip_blank(s);
    if (c < '0' || c > '9') {
        *term = c;
        return 0;
    }
    unsigned long long v = 0;
    const unsigned long long cap = 1ull << 40;
    while (c >= '0' && c <= '9') {
        if (v < cap)
            v = v * 10 + (unsigned long long)(c - '0');
        if (v > cap)
            v = cap;
        c = src_getc(s);
    }
    *value = v;
    *term = c;
    return 1;
}

static const char *describe_char(int c, char buf[16])
{
    if (c == EOF)
        return "end of data";
    if (c >= 0x21 && c < 0x7F)
        snprintf(buf, 16, "'%c'", c);
    else
        snprintf(buf, 16, "byte 0x%02x", (unsigned)c & 0xFFu);
    return buf;
}

static sw_status pgm_read_src(sw_context *ctx, const char *name, pgm_src *s, sw_image *out)
{
    char cbuf[16];
    int c0 = src_getc(s);
    if (c0 == EOF)
        return sw_fail(ctx, SW_EFORMAT, "%s: empty file, not a PGM image", name);
    int c1 = src_getc(s);
    if (c0 != 'P' || c1 != '5') {
        if (c0 == 'P' && c1 == '2')
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: ASCII PGM (P2) is not supported; convert it to binary P5 "
                           "(e.g. pnmtopnm / convert)",
                           name);
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: not a binary PGM image (it does not start with \"P5\")", name);
    }
    int c = src_getc(s);
    if (!is_space(c) && c != '#')
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: bad PGM header: %s after \"P5\" where whitespace is "
                       "expected",
                       name, describe_char(c, cbuf));
    if (c == '#') {
        do
            c = src_getc(s);
        while (c != '\n' && c != '\r' && c != EOF);
    }

    static const char *const what[3] = {"width", "height", "maxval"};
    unsigned long long v[3];
    for (int i = 0; i < 3; i++) {
        int term;
        if (!read_number(s, &v[i], &term)) {
            if (term == EOF)
                return sw_fail(ctx, SW_EFORMAT, "%s: truncated PGM header: the %s is missing", name,
                               what[i]);
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: bad PGM header: %s where the %s (a decimal number) is expected",
                           name, describe_char(term, cbuf), what[i]);
        }
        if (term == '#') { /* a comment right after the number ends it */
            do
                term = src_getc(s);
            while (term != '\n' && term != '\r' && term != EOF);
        }
        if (term == EOF)
            return sw_fail(ctx, SW_EFORMAT, "%s: truncated PGM header after the %s", name, what[i]);
        if (!is_space(term))
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: bad PGM header: %s after the %s where whitespace is expected", name,
                           describe_char(term, cbuf), what[i]);
        /* After maxval exactly one whitespace character (consumed above) precedes the pixels. */
    }
    unsigned long long w = v[0], h = v[1], maxval = v[2];
    if (w == 0 || h == 0)
        return sw_fail(ctx, SW_EFORMAT, "%s: PGM image has zero size (%llu x %llu)", name, w, h);
    if (w > SW_IMAGE_MAX_DIM || h > SW_IMAGE_MAX_DIM)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: PGM dimensions %llu x %llu exceed the maximum of %d pixels per side",
                       name, w, h, SW_IMAGE_MAX_DIM);
    if (w * h > (unsigned long long)SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: PGM image of %llu x %llu pixels exceeds the maximum "
                       "of %lld pixels",
                       name, w, h, SW_IMAGE_MAX_PIXELS);
    if (maxval == 0 || maxval > 65535)
        return sw_fail(ctx, SW_EFORMAT, "%s: PGM maxval %llu is out of range (1..65535)", name,
                       maxval);

    int wide = maxval > 255;
    size_t bps = wide ? 2 : 1;
    size_t rowbytes, total;
    if (!sw_mul_ok((size_t)w, bps, &rowbytes) || !sw_mul_ok(rowbytes, (size_t)h, &total))
        return sw_fail(ctx, SW_EFORMAT, "%s: PGM image too large for this machine", name);
    long long remaining = src_remaining(s);
    if (remaining >= 0 && (unsigned long long)remaining < total)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: truncated PGM file: the header (%llu x %llu, maxval %llu) promises "
                       "%zu bytes of pixels but only %lld are present",
                       name, w, h, maxval, total, remaining);

    sw_image img;
    sw_status st = sw_image_alloc(ctx, (int32_t)w, (int32_t)h, wide ? SW_PIX_U16 : SW_PIX_U8, &img);
    if (st != SW_OK)
        return st;
    for (int32_t y = 0; y < img.height; y++) {
        unsigned char *row = sw_image_row(&img, y);
        size_t got = src_read(s, row, rowbytes);
        if (got != rowbytes) {
            sw_image_free(&img);
            if (s->f && ferror(s->f))
                return sw_fail(ctx, SW_EIO, "%s: read error in the pixel data (row %d): %s", name,
                               (int)y, strerror(errno));
            return sw_fail(ctx, SW_EFORMAT,
                           "%s: truncated PGM file: pixel data ends in row %d of %llu", name,
                           (int)y, h);
        }
        if (wide) {
            uint16_t *p = (uint16_t *)(void *)row;
            for (size_t x = 0; x < (size_t)w; x++) {
                uint16_t val = (uint16_t)((unsigned)row[2 * x] << 8 | row[2 * x + 1]);
                p[x] = val;
            }
        }
        for (size_t x = 0; x < (size_t)w; x++) {
            unsigned val = wide ? ((uint16_t *)(void *)row)[x] : row[x];
            if (val > maxval) {
                sw_image_free(&img);
                return sw_fail(ctx, SW_EFORMAT,
                               "%s: pixel (%zu, %d) has value %u, above the maxval %llu of the "
                               "header (corrupt file?)",
                               name, x, (int)y, val, maxval);
            }
        }
    }
    *out = img;
    return SW_OK;
}

sw_status sw_pgm_read_memory(sw_context *ctx, const void *buf, size_t size, sw_image *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_pgm_read_memory: out is NULL");
    memset(out, 0, sizeof *out);
    if (!buf && size)
        return sw_fail(ctx, SW_EINVAL, "sw_pgm_read_memory: buffer is NULL");
    pgm_src s = {.buf = buf, .size = buf ? size : 0, .pos = 0, .f = NULL};
    return pgm_read_src(ctx, "<memory>", &s, out);
}

sw_status sw_pgm_read(sw_context *ctx, const char *path, sw_image *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_pgm_read: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path)
        return sw_fail(ctx, SW_EINVAL, "sw_pgm_read: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f)
        return sw_fail(ctx, SW_EIO, "%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return sw_fail(ctx, SW_EIO, "%s: is a directory, not a PGM file", path);
    }
    pgm_src s = {.buf = NULL, .size = 0, .pos = 0, .f = f};
    sw_status st = pgm_read_src(ctx, path, &s, out);
    if (st == SW_OK && ferror(f)) {
        sw_image_free(out);
        st = sw_fail(ctx, SW_EIO, "%s: read error (%s)", path, strerror(errno));
    }
    fclose(f);
    return st;
}

sw_status sw_pgm_write(sw_context *ctx, const char *path, const sw_image *img)
{
    if (!path)
        return sw_fail(ctx, SW_EINVAL, "sw_pgm_write: path is NULL");
    sw_status st = sw_io_check_write_image(ctx, path, img);
    if (st != SW_OK)
        return st;
    if (img->type != SW_PIX_U8 && img->type != SW_PIX_U16)
        return sw_fail(ctx, SW_EINVAL,
                       "%s: PGM holds only u8 or u16 pixels, this image is %s (convert it with "
                       "sw_image_convert, or write FITS)",
                       path, sw_pixel_type_string(img->type));
    int wide = img->type == SW_PIX_U16;
    size_t rowbytes = (size_t)img->width * (wide ? 2u : 1u);
    unsigned char *buf = NULL;
    if (wide) {
        buf = malloc(rowbytes);
        if (!buf)
            return sw_fail(ctx, SW_ENOMEM, "%s: out of memory for a row buffer", path);
    }
    char *tmp;
    FILE *f;
    st = sw_io_tmp_open(ctx, path, &tmp, &f);
    if (st != SW_OK) {
        free(buf);
        return st;
    }
    int ok =
        fprintf(f, "P5\n%d %d\n%d\n", (int)img->width, (int)img->height, wide ? 65535 : 255) > 0;
    for (int32_t y = 0; ok && y < img->height; y++) {
        const unsigned char *row = sw_image_row(img, y);
        if (wide) {
            const uint16_t *p = (const uint16_t *)(const void *)row;
            for (int32_t x = 0; x < img->width; x++) {
                buf[2 * (size_t)x] = (unsigned char)(p[x] >> 8);
                buf[2 * (size_t)x + 1] = (unsigned char)(p[x] & 0xFFu);
            }
            row = buf;
        }
        ok = fwrite(row, 1, rowbytes, f) == rowbytes;
    }
    free(buf);
    if (!ok) {
        int e = errno;
        sw_io_tmp_abort(tmp, f);
        return sw_fail(ctx, SW_EIO, "%s: write failed (%s)", path, strerror(e));
    }
    return sw_io_tmp_commit(ctx, path, tmp, f);
}
