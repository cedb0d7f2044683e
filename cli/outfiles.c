/*
 * The files the command writes for people: FITS header keywords, map pictures (outfiles.h).
 */
#include "outfiles.h"

#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char command_line[2048];

/* Appends src to dst (capacity cap, dst NUL-terminated), replacing bytes outside printable
 * ASCII by '?'; stops at the capacity. */
static void append_ascii(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(dst);
    for (const unsigned char *p = (const unsigned char *)src; *p && n + 1 < cap; p++)
        dst[n++] = (*p >= 0x20 && *p <= 0x7E) ? (char)*p : '?';
    dst[n] = '\0';
}

void sw_cli_set_command_line(int argc, char **argv)
{
    command_line[0] = '\0';
    for (int i = 0; i < argc; i++) {
        const char *a = i == 0 ? "spotwave" : argv[i]; /* not the path it was started by */
        int quote = !*a || strpbrk(a, " \t'\"\\") != NULL;
        if (i > 0)
            append_ascii(command_line, sizeof command_line, " ");
        if (!quote) {
            append_ascii(command_line, sizeof command_line, a);
            continue;
        }
        /* single quotes, a quote inside written '\'' as a shell reads it back */
        append_ascii(command_line, sizeof command_line, "'");
        for (const char *p = a; *p; p++) {
            char one[2] = {*p, '\0'};
            append_ascii(command_line, sizeof command_line, *p == '\'' ? "'\\''" : one);
        }
        append_ascii(command_line, sizeof command_line, "'");
    }
}

const char *sw_cli_command_line(void)
{
    return command_line;
}

/* A slot for one more key, or NULL (and h->full set). */
static sw_fits_key *next_key(sw_cli_hdr *h)
{
    if (h->n >= SW_CLI_HDR_MAX) {
        h->full = 1;
        return NULL;
    }
    sw_fits_key *k = &h->keys[h->n++];
    memset(k, 0, sizeof *k);
    return k;
}

/* A copy of s in the header's text (printable ASCII), or NULL (and h->full set). */
static const char *keep(sw_cli_hdr *h, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s);
    if (h->used + n + 1 > sizeof h->text) {
        h->full = 1;
        return NULL;
    }
    char *d = h->text + h->used;
    d[0] = '\0';
    append_ascii(d, n + 1, s);
    h->used += n + 1;
    return d;
}

void sw_cli_hdr_init(sw_cli_hdr *h, const char *bunit, const char *comment)
{
    h->n = 0;
    h->full = 0;
    h->used = 0;
    sw_cli_hdr_str(h, "BUNIT", bunit, comment);
}

void sw_cli_hdr_str(sw_cli_hdr *h, const char *name, const char *value, const char *comment)
{
    const char *v = keep(h, value ? value : "");
    const char *c = keep(h, comment);
    sw_fits_key *k = v && (c || !comment) ? next_key(h) : NULL;
    if (!k)
        return;
    k->name = name;
    k->type = SW_FITS_KEY_STRING;
    k->str = v;
    k->comment = c;
}

void sw_cli_hdr_num(sw_cli_hdr *h, const char *name, double value, const char *comment)
{
    if (!isfinite(value))
        return;
    const char *c = keep(h, comment);
    sw_fits_key *k = c || !comment ? next_key(h) : NULL;
    if (!k)
        return;
    k->name = name;
    k->type = SW_FITS_KEY_DOUBLE;
    k->num = value;
    k->comment = c;
}

void sw_cli_hdr_int(sw_cli_hdr *h, const char *name, long long value, const char *comment)
{
    const char *c = keep(h, comment);
    sw_fits_key *k = c || !comment ? next_key(h) : NULL;
    if (!k)
        return;
    k->name = name;
    k->type = SW_FITS_KEY_LONG;
    k->integer = value;
    k->comment = c;
}

void sw_cli_hdr_bool(sw_cli_hdr *h, const char *name, int value, const char *comment)
{
    const char *c = keep(h, comment);
    sw_fits_key *k = c || !comment ? next_key(h) : NULL;
    if (!k)
        return;
    k->name = name;
    k->type = SW_FITS_KEY_BOOL;
    k->integer = value != 0;
    k->comment = c;
}

static void add_text(sw_cli_hdr *h, sw_fits_key_type type, const char *fmt, va_list ap)
{
    char buf[2400];
    vsnprintf(buf, sizeof buf, fmt, ap);
    const char *t = keep(h, buf);
    sw_fits_key *k = t ? next_key(h) : NULL;
    if (!k)
        return;
    k->type = type;
    k->str = t;
}

void sw_cli_hdr_history(sw_cli_hdr *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_text(h, SW_FITS_KEY_HISTORY, fmt, ap);
    va_end(ap);
}

void sw_cli_hdr_comment(sw_cli_hdr *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_text(h, SW_FITS_KEY_COMMENT, fmt, ap);
    va_end(ap);
}

void sw_cli_hdr_command(sw_cli_hdr *h)
{
    sw_cli_hdr_history(h, "command: %s", command_line);
}

void sw_cli_hdr_wcs_linear(sw_cli_hdr *h, const char *ctype1, const char *ctype2, const char *cunit,
                           double crpix1, double crpix2, double crval1, double crval2,
                           double cdelt1, double cdelt2)
{
    sw_cli_hdr_int(h, "WCSAXES", 2, "world coordinate axes");
    sw_cli_hdr_str(h, "CTYPE1", ctype1, "axis 1: a linear coordinate");
    sw_cli_hdr_str(h, "CTYPE2", ctype2, "axis 2: a linear coordinate");
    sw_cli_hdr_str(h, "CUNIT1", cunit, "unit of axis 1");
    sw_cli_hdr_str(h, "CUNIT2", cunit, "unit of axis 2");
    sw_cli_hdr_num(h, "CRPIX1", crpix1, "reference pixel (FITS pixels count from 1)");
    sw_cli_hdr_num(h, "CRPIX2", crpix2, "reference pixel (FITS pixels count from 1)");
    sw_cli_hdr_num(h, "CRVAL1", crval1, "axis 1 coordinate at the reference pixel");
    sw_cli_hdr_num(h, "CRVAL2", crval2, "axis 2 coordinate at the reference pixel");
    sw_cli_hdr_num(h, "CDELT1", cdelt1, "axis 1 coordinate step per pixel");
    sw_cli_hdr_num(h, "CDELT2", cdelt2, "axis 2 coordinate step per pixel");
}

void sw_cli_hdr_detector(sw_cli_hdr *h, const sw_detector *d)
{
    sw_cli_hdr_num(h, "GAIN", d->gain_e_per_adu, "[electron/adu] detector gain");
    sw_cli_hdr_num(h, "BIAS", d->bias_adu, "[adu] offset added");
    sw_cli_hdr_num(h, "RDNOISE", d->read_noise_e, "[electron] read noise RMS");
    sw_cli_hdr_num(h, "SKY", d->sky_e, "[electron] sky background per pixel");
    sw_cli_hdr_num(h, "DARK", d->dark_e, "[electron] dark current x exposure per pixel");
    sw_cli_hdr_num(h, "FULLWELL", d->full_well_e, "[electron] saturation (0: none)");
    sw_cli_hdr_bool(h, "SHOTNOIS", d->shot_noise, "Poisson shot noise drawn");
    sw_cli_hdr_u64(h, "NOISESD", d->seed, "detector noise seed");
}

void sw_cli_hdr_u64(sw_cli_hdr *h, const char *name, uint64_t value, const char *comment)
{
    if (value <= (uint64_t)INT64_MAX) {
        sw_cli_hdr_int(h, name, (long long)value, comment);
        return;
    }
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)value);
    sw_cli_hdr_str(h, name, text, comment);
}

sw_status sw_cli_hdr_write(sw_context *ctx, const char *path, const sw_image *frames, int32_t count,
                           const sw_cli_hdr *h)
{
    if (h->full)
        return sw_error_set(ctx, SW_EINVAL, "%s: internal error: too many header keys", path);
    return sw_fits_write_keys(ctx, path, frames, count, h->keys, h->n);
}

sw_status sw_cli_map_png(sw_context *ctx, const char *path, const sw_image *map, const char *unit,
                         const char *title)
{
    sw_png_options o;
    sw_png_options_default(&o);
    o.colormap = SW_CMAP_DIVERGING; /* automatic range: -max|W| .. max|W|, 0 white */
    o.scale_bar = 1;
    o.label = unit;
    o.nan_transparent = 1;
    o.title = title;
    return sw_png_write(ctx, path, map, &o);
}
