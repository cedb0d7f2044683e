/*
 * CBF / imgCIF frames (io.h): read with CBFlib in a child process (isolate.h), the Pilatus
 * mini-header parsed here; written with CBFlib.
 *
 * Why a child: CBFlib 0.9.7 (Debian 12) trusts the binary section's sizes. Mutating bytes of a
 * byte-offset file it wrote itself (3000 mutants, 1 to 4 bytes changed or the file cut short) gave
 * one that makes cbf_get_integerarray write past the array it was handed, ending in "double free
 * or corruption" in the caller's free; and it prints its diagnostics on stderr. Its CIF parser
 * is a yacc grammar over the whole text, which nothing outside it can check first. The child sends
 * back plain numbers (the array's element size, sign, dimensions), the header text and the pixels
 * as 32-bit integers; every size is checked again here.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/io_internal.h"
#include "io/isolate.h"

#include <cbflib/cbf.h>
#include <math.h>
#include <stdarg.h>

#define CBF_MAGIC        0x53464243u /* "CBFS" */
#define CBF_HEADER_MAX   ((size_t)1 << 20)
#define CBF_CHILD_MEMORY ((size_t)2 << 30)

/* What the child sends: this head, the header text, then npix 32-bit values. */
typedef struct cbf_head {
    uint32_t magic;
    int32_t status; /* sw_status */
    char msg[384];
    uint32_t elsize, elsigned;
    uint64_t fast, mid, slow, npix;
    uint64_t header_len;
} cbf_head;

typedef struct cbf_src {
    const char *path; /* or NULL: buf, size */
    const void *buf;
    size_t size;
} cbf_src;

static int head_only(cbf_head *h, sw_status st, uint8_t **msg, size_t *size, const char *fmt, ...)
{
    h->status = (int32_t)st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->msg, sizeof h->msg, fmt, ap);
    va_end(ap);
    *msg = malloc(sizeof *h);
    if (!*msg)
        return 1;
    memcpy(*msg, h, sizeof *h);
    *size = sizeof *h;
    return 0;
}

/* In the child (or here when fork failed): CBFlib reads the file. */
static int cbf_child(void *arg, uint8_t **msg, size_t *size)
{
    const cbf_src *src = arg;
    cbf_head h;
    memset(&h, 0, sizeof h);
    h.magic = CBF_MAGIC;
    FILE *f = src->path ? fopen(src->path, "rb")
                        : (src->size ? fmemopen((void *)src->buf, src->size, "rb") : NULL);
    if (!f)
        return head_only(&h, src->path ? SW_EIO : SW_EFORMAT, msg, size, "%s",
                         src->path ? strerror(errno) : "empty");
    cbf_handle cbf = NULL;
    if (cbf_make_handle(&cbf) != 0) {
        fclose(f);
        return 1;
    }
    /* CBFlib owns f from here and closes it with the handle. */
    int e = cbf_read_widefile(cbf, f, MSG_DIGEST);
    if (e) {
        cbf_free_handle(cbf);
        return head_only(&h, SW_EFORMAT, msg, size, "not a CBF file CBFlib can read (%s)",
                         cbf_strerror(e));
    }
    if ((e = cbf_find_category(cbf, "array_data")) != 0) {
        cbf_free_handle(cbf);
        return head_only(&h, SW_EFORMAT, msg, size, "no _array_data category (%s)",
                         cbf_strerror(e));
    }
    const char *text = NULL;
    if (cbf_find_column(cbf, "header_contents") == 0 && cbf_rewind_row(cbf) == 0)
        cbf_get_value(cbf, &text);
    size_t tlen = text ? strnlen(text, CBF_HEADER_MAX) : 0;
    if ((e = cbf_find_column(cbf, "data")) != 0 || (e = cbf_rewind_row(cbf)) != 0) {
        cbf_free_handle(cbf);
        return head_only(&h, SW_EFORMAT, msg, size, "no _array_data.data (%s)", cbf_strerror(e));
    }
    unsigned int compression = 0;
    int id = 0, elsigned = 0, elunsigned = 0, minel = 0, maxel = 0;
    size_t elsize = 0, nelem = 0, fast = 0, mid = 0, slow = 0, padding = 0;
    const char *order = NULL;
    e = cbf_get_integerarrayparameters_wdims_fs(cbf, &compression, &id, &elsize, &elsigned,
                                                &elunsigned, &nelem, &minel, &maxel, &order, &fast,
                                                &mid, &slow, &padding);
    if (e) {
        size_t rsize = 0, rn = 0;
        unsigned int rc = 0;
        int rid = 0;
        int real = cbf_get_realarrayparameters(cbf, &rc, &rid, &rsize, &rn) == 0;
        cbf_free_handle(cbf);
        if (real)
            return head_only(&h, SW_EUNSUPPORTED, msg, size,
                             "a real-valued array (%zu-byte floats): spotwave reads the integer "
                             "arrays detectors write",
                             rsize);
        return head_only(&h, SW_EFORMAT, msg, size, "the array's parameters do not read (%s)",
                         cbf_strerror(e));
    }
    if (mid == 0 && fast > 0 && nelem == fast)
        mid = 1;
    if (slow == 0)
        slow = 1;
    if (elsize != 1 && elsize != 2 && elsize != 4) {
        cbf_free_handle(cbf);
        return head_only(&h, SW_EUNSUPPORTED, msg, size,
                         "%zu-byte integers (spotwave reads 8, 16 and 32-bit ones)", elsize);
    }
    if (fast == 0 || mid == 0 || fast > SW_IMAGE_MAX_DIM || mid > SW_IMAGE_MAX_DIM ||
        (uint64_t)fast * mid > (uint64_t)SW_IMAGE_MAX_PIXELS) {
        cbf_free_handle(cbf);
        return head_only(&h, SW_EFORMAT, msg, size,
                         "an array of %zu x %zu elements (width and height 1..%d)", fast, mid,
                         SW_IMAGE_MAX_DIM);
    }
    if (slow != 1) {
        cbf_free_handle(cbf);
        return head_only(&h, SW_EUNSUPPORTED, msg, size,
                         "an array of %zu frames (spotwave reads one frame per CBF file)", slow);
    }
    /* every element takes at least a byte of the file (byte offset, none) or 1/256 of one (the
     * packed and nibble schemes): sizes a small file cannot hold are refused before anything
     * of their size is allocated */
    uint64_t in_size = src->size;
    struct stat sb;
    if (src->path && stat(src->path, &sb) == 0)
        in_size = (uint64_t)sb.st_size;
    const uint64_t per = (compression == CBF_BYTE_OFFSET || compression == CBF_NONE) ? 1 : 256;
    if ((uint64_t)nelem > in_size * per) {
        cbf_free_handle(cbf);
        return head_only(&h, SW_EFORMAT, msg, size, "%zu elements declared in a file of %llu bytes",
                         nelem, (unsigned long long)in_size);
    }
    if ((uint64_t)fast * mid != nelem) {
        cbf_free_handle(cbf);
        return head_only(&h, SW_EFORMAT, msg, size,
                         "%zu elements for an array of %zu x %zu: the sizes disagree", nelem, fast,
                         mid);
    }
    h.elsize = (uint32_t)elsize;
    h.elsigned = elsigned ? 1u : 0u;
    h.fast = fast;
    h.mid = mid;
    h.slow = 1;
    h.npix = nelem;
    h.header_len = tlen;
    size_t n = sizeof h + tlen + nelem * 4;
    uint8_t *m = malloc(n);
    if (!m) {
        cbf_free_handle(cbf);
        return 1;
    }
    if (tlen)
        memcpy(m + sizeof h, text, tlen);
    /* decoded at the file's own element size (CBFlib 0.9.7 sign-extends unsigned 16-bit values
     * decoded into 32-bit ones), then widened here */
    uint8_t *raw = malloc(nelem * elsize);
    if (!raw) {
        free(m);
        cbf_free_handle(cbf);
        return 1;
    }
    size_t nread = 0;
    e = cbf_get_integerarray(cbf, &id, raw, elsize, elsigned ? 1 : 0, nelem, &nread);
    cbf_free_handle(cbf);
    if (e || nread != nelem) {
        free(raw);
        free(m);
        return head_only(&h, SW_EFORMAT, msg, size,
                         e ? "the array's data do not decode (%s)"
                           : "the array's data hold %zu of %zu elements",
                         e ? cbf_strerror(e) : "", nread, nelem);
    }
    uint8_t *dst = m + sizeof h + tlen;
    for (size_t i = 0; i < nelem; i++) {
        uint32_t v;
        if (elsize == 4) {
            memcpy(&v, raw + 4 * i, 4);
        } else if (elsize == 2) {
            uint16_t u16;
            memcpy(&u16, raw + 2 * i, 2);
            v = elsigned ? (uint32_t)(int32_t)(int16_t)u16 : u16;
        } else {
            v = elsigned ? (uint32_t)(int32_t)(int8_t)raw[i] : raw[i];
        }
        memcpy(dst + 4 * i, &v, 4);
    }
    free(raw);
    h.status = SW_OK;
    memcpy(m, &h, sizeof h);
    *msg = m;
    *size = n;
    return 0;
}

/* ------------------------------------------------------------------ the mini-header */

static int good(double v)
{
    return isfinite(v) && v > 0.0;
}

/* Skips spaces and tabs. */
static const char *skip(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* A number at s: 1 with *v and *end, 0 when none. */
static int number(const char *s, double *v, const char **end)
{
    char *e;
    errno = 0;
    double d = strtod(s, &e);
    if (e == s || errno == ERANGE)
        return 0;
    *v = d;
    *end = e;
    return 1;
}

/* The unit word at s (letters), compared with want (exactly). */
static int unit_is(const char *s, const char *want)
{
    s = skip(s);
    size_t n = strlen(want);
    return strncmp(s, want, n) == 0 &&
           !((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z'));
}

/* A length with its unit (m or mm) in mm, or 0 when neither. */
static int length_mm(const char *s, double *mm, const char **end)
{
    double v;
    if (!number(s, &v, end))
        return 0;
    if (unit_is(*end, "mm"))
        *mm = v;
    else if (unit_is(*end, "m"))
        *mm = v * 1000.0;
    else
        return 0;
    *end = skip(*end);
    while (**end && **end != ' ' && **end != '\t')
        (*end)++;
    return good(*mm);
}

static int parse_line(const char *line, sw_diffraction_geometry *g)
{
    const char *s = skip(line);
    if (*s == '#')
        s = skip(s + 1);
    static const char *const keys[] = {"Wavelength", "Detector_distance", "Beam_xy",
                                       "Pixel_size", "Count_cutoff",      "Exposure_time"};
    int k = -1;
    for (int i = 0; i < 6; i++) {
        size_t n = strlen(keys[i]);
        if (strncmp(s, keys[i], n) == 0 && (s[n] == ' ' || s[n] == '\t')) {
            k = i;
            s = skip(s + n);
            break;
        }
    }
    const char *e;
    double a, b;
    switch (k) {
    case 0:
        if (number(s, &a, &e) && unit_is(e, "A") && good(a)) {
            g->wavelength_a = a;
            g->have |= SW_DG_WAVELENGTH;
            return 1;
        }
        break;
    case 1:
        if (length_mm(s, &a, &e)) {
            g->distance_mm = a;
            g->have |= SW_DG_DISTANCE;
            return 1;
        }
        break;
    case 2:
        if (*s == '(' && number(skip(s + 1), &a, &e) && *(e = skip(e)) == ',' &&
            number(skip(e + 1), &b, &e) && *(e = skip(e)) == ')' && unit_is(e + 1, "pixels") &&
            isfinite(a) && isfinite(b) && fabs(a) < 1e7 && fabs(b) < 1e7) {
            g->beam_x_px = a - 0.5;
            g->beam_y_px = b - 0.5;
            g->have |= SW_DG_BEAM;
            return 1;
        }
        break;
    case 3:
        if (length_mm(s, &a, &e) && *(e = skip(e)) == 'x' && length_mm(skip(e + 1), &b, &e)) {
            g->pixel_x_mm = a;
            g->pixel_y_mm = b;
            g->have |= SW_DG_PIXEL;
            return 1;
        }
        break;
    case 4:
        if (number(s, &a, &e) && good(a) && (*skip(e) == '\0' || unit_is(e, "counts"))) {
            g->overload = a;
            g->have |= SW_DG_OVERLOAD;
            return 1;
        }
        break;
    case 5:
        if (number(s, &a, &e) && unit_is(e, "s") && good(a)) {
            g->exposure_s = a;
            g->have |= SW_DG_EXPOSURE;
            return 1;
        }
        break;
    default: break;
    }
    return 0;
}

int sw_cbf_parse_header(const char *text, size_t size, sw_diffraction_geometry *g)
{
    sw_diffraction_geometry_init(g);
    if (!text || !g)
        return 0;
    int found = 0;
    char line[256];
    size_t i = 0;
    while (i < size) {
        size_t k = 0;
        int longline = 0;
        for (; i < size && text[i] != '\n' && text[i] != '\r'; i++) {
            if (text[i] == '\0')
                break;
            if (k + 1 < sizeof line)
                line[k++] = text[i];
            else
                longline = 1;
        }
        line[k] = '\0';
        if (!longline)
            found += parse_line(line, g);
        if (i < size && text[i] == '\0')
            break;
        while (i < size && (text[i] == '\n' || text[i] == '\r'))
            i++;
    }
    return found;
}

/* ------------------------------------------------------------------ reading */

static sw_status cbf_read_any(sw_context *ctx, const char *name, const cbf_src *src, sw_image *out,
                              uint8_t **valid, sw_diffraction_geometry *geom)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (valid)
        *valid = NULL;
    if (geom)
        sw_diffraction_geometry_init(geom);
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read: NULL output");
    if (src->path) { /* a missing file is SW_EIO, said here rather than by the child */
        FILE *f = fopen(src->path, "rb");
        if (!f)
            return sw_fail(ctx, SW_EIO, "%s: cannot open (%s)", name, strerror(errno));
        char magic[6] = {0};
        size_t n = fread(magic, 1, sizeof magic, f);
        fclose(f);
        if (n < 6 || memcmp(magic, "###CBF", 6) != 0)
            return sw_fail(ctx, SW_EFORMAT, "%s: not a CBF file (no \"###CBF\" at its start)",
                           name);
    } else if (src->size < 6 || memcmp(src->buf, "###CBF", 6) != 0) {
        return sw_fail(ctx, SW_EFORMAT, "%s: not a CBF file (no \"###CBF\" at its start)", name);
    }
    sw_isolated r;
    size_t max = sizeof(cbf_head) + CBF_HEADER_MAX + (size_t)SW_IMAGE_MAX_PIXELS * 4;
    /* the child's message is held whole in this process: bounded by the memory budget too */
    const uint64_t lim = sw_context_memory_limit(ctx);
    if (lim > 0 && lim < (uint64_t)max)
        max = (size_t)lim;
    int rc = sw_isolated_run(cbf_child, (void *)src, SW_CBF_TIMEOUT, CBF_CHILD_MEMORY, max, &r);
    if (r.in_process)
        sw_log(ctx, SW_LOG_WARN, "%s: CBFlib read the file in this process (no child: fork failed)",
               name);
    if (rc == -2)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", name);
    if (rc != 0)
        return sw_fail(ctx, SW_EFORMAT, "%s: corrupt CBF: %s%s%s%s", name, r.why,
                       r.stderr_tail[0] ? " (CBFlib: \"" : "", r.stderr_tail,
                       r.stderr_tail[0] ? "\")" : "");
    cbf_head h;
    sw_status st = SW_OK;
    if (r.size < sizeof h) {
        free(r.msg);
        return sw_fail(ctx, SW_EFORMAT, "%s: corrupt CBF: the reader's message is cut short", name);
    }
    memcpy(&h, r.msg, sizeof h);
    h.msg[sizeof h.msg - 1] = '\0';
    if (h.magic != CBF_MAGIC) {
        free(r.msg);
        return sw_fail(ctx, SW_EFORMAT, "%s: corrupt CBF: the reader's message is garbled", name);
    }
    if (h.status != SW_OK) {
        free(r.msg);
        st = (h.status == SW_EIO || h.status == SW_EUNSUPPORTED) ? (sw_status)h.status : SW_EFORMAT;
        return sw_fail(ctx, st, "%s: %s%s%s%s%s", name, st == SW_EFORMAT ? "corrupt CBF: " : "",
                       h.msg, r.stderr_tail[0] ? " (CBFlib: \"" : "", r.stderr_tail,
                       r.stderr_tail[0] ? "\")" : "");
    }
    /* every size again, against each other and the message's length */
    if (h.fast < 1 || h.mid < 1 || h.fast > SW_IMAGE_MAX_DIM || h.mid > SW_IMAGE_MAX_DIM ||
        h.npix != h.fast * h.mid || h.slow != 1 || h.header_len > CBF_HEADER_MAX ||
        (h.elsize != 1 && h.elsize != 2 && h.elsize != 4) || h.elsigned > 1 ||
        r.size != sizeof h + h.header_len + h.npix * 4) {
        free(r.msg);
        return sw_fail(ctx, SW_EFORMAT, "%s: corrupt CBF: the reader's sizes do not hold together",
                       name);
    }
    const uint8_t *text = r.msg + sizeof h;
    const uint8_t *pix = text + h.header_len;
    int32_t w = (int32_t)h.fast, ht = (int32_t)h.mid;
    size_t n = (size_t)h.npix;
    /* the type: what the file holds, wide enough for the values it has */
    uint64_t maxv = 0;
    size_t negative = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, pix + 4 * i, 4);
        if (h.elsigned && (int32_t)u < 0) {
            negative++;
            continue;
        }
        if (u > maxv)
            maxv = u;
    }
    sw_pixel_type t = SW_PIX_U32;
    if (h.elsize == 1 && !h.elsigned && maxv <= 255)
        t = SW_PIX_U8;
    else if (h.elsize <= 2 && maxv <= 65535)
        t = SW_PIX_U16;
    if ((st = sw_image_alloc(ctx, w, ht, t, out)) != SW_OK) {
        free(r.msg);
        return st;
    }
    uint8_t *mask = NULL;
    if (negative && valid) {
        mask = malloc(n);
        if (!mask) {
            free(r.msg);
            sw_image_free(out);
            return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", name);
        }
    }
    for (int32_t y = 0; y < ht; y++) {
        uint8_t *row = sw_image_row(out, y);
        for (int32_t x = 0; x < w; x++) {
            size_t i = (size_t)y * (size_t)w + (size_t)x;
            uint32_t u;
            memcpy(&u, pix + 4 * i, 4);
            int bad = h.elsigned && (int32_t)u < 0;
            if (bad)
                u = 0;
            if (mask)
                mask[i] = bad ? 0 : 1;
            if (t == SW_PIX_U8)
                row[x] = (uint8_t)u;
            else if (t == SW_PIX_U16)
                ((uint16_t *)(void *)row)[x] = (uint16_t)u;
            else
                ((uint32_t *)(void *)row)[x] = u;
        }
    }
    if (negative)
        sw_log(ctx, SW_LOG_DEBUG, "%s: %zu negative pixels (bad pixels, module gaps) read as 0%s",
               name, negative, mask ? " and masked" : "");
    if (geom)
        sw_cbf_parse_header((const char *)text, (size_t)h.header_len, geom);
    if (valid)
        *valid = mask;
    free(r.msg);
    return SW_OK;
}

sw_status sw_cbf_read(sw_context *ctx, const char *path, sw_image *out, uint8_t **valid,
                      sw_diffraction_geometry *geom)
{
    if (!path || !*path) {
        if (out)
            memset(out, 0, sizeof *out);
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read: no path given");
    }
    cbf_src src = {path, NULL, 0};
    return cbf_read_any(ctx, path, &src, out, valid, geom);
}

sw_status sw_cbf_read_memory(sw_context *ctx, const void *buf, size_t size, sw_image *out,
                             uint8_t **valid, sw_diffraction_geometry *geom)
{
    if (!buf && size) {
        if (out)
            memset(out, 0, sizeof *out);
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read_memory: NULL buffer");
    }
    cbf_src src = {NULL, buf, size};
    return cbf_read_any(ctx, "(memory)", &src, out, valid, geom);
}

/* ------------------------------------------------------------------ writing */

/* The mini-header for geom, into buf. */
static void header_text(const sw_diffraction_geometry *g, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = '\0';
#define ADD(...)                                                                                   \
    do {                                                                                           \
        int m_ = snprintf(buf + k, size - k, __VA_ARGS__);                                         \
        if (m_ > 0 && (size_t)m_ < size - k)                                                       \
            k += (size_t)m_;                                                                       \
    } while (0)
    ADD("\n# Detector: spotwave\n");
    if (g && (g->have & SW_DG_PIXEL))
        ADD("# Pixel_size %.17g m x %.17g m\n", g->pixel_x_mm / 1000.0, g->pixel_y_mm / 1000.0);
    if (g && (g->have & SW_DG_EXPOSURE))
        ADD("# Exposure_time %.17g s\n", g->exposure_s);
    if (g && (g->have & SW_DG_OVERLOAD))
        ADD("# Count_cutoff %.17g counts\n", g->overload);
    if (g && (g->have & SW_DG_WAVELENGTH))
        ADD("# Wavelength %.17g A\n", g->wavelength_a);
    if (g && (g->have & SW_DG_DISTANCE))
        ADD("# Detector_distance %.17g m\n", g->distance_mm / 1000.0);
    if (g && (g->have & SW_DG_BEAM))
        ADD("# Beam_xy (%.17g, %.17g) pixels\n", g->beam_x_px + 0.5, g->beam_y_px + 0.5);
#undef ADD
}

sw_status sw_cbf_write(sw_context *ctx, const char *path, const sw_image *img, const uint8_t *valid,
                       const sw_diffraction_geometry *geom)
{
    if (!path || !*path)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_write: no path given");
    sw_status st = sw_io_check_write_image(ctx, path, img);
    if (st != SW_OK)
        return st;
    if (img->type == SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL,
                       "%s: CBF holds the integers a detector counts; convert f32 images first",
                       path);
    size_t w = (size_t)img->width, h = (size_t)img->height, n = w * h;
    int32_t *a = malloc(n * sizeof *a);
    if (!a)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    for (size_t y = 0; y < h; y++) {
        const uint8_t *row = sw_image_row(img, (int32_t)y);
        for (size_t x = 0; x < w; x++) {
            uint32_t v = img->type == SW_PIX_U8    ? row[x]
                         : img->type == SW_PIX_U16 ? ((const uint16_t *)(const void *)row)[x]
                                                   : ((const uint32_t *)(const void *)row)[x];
            if (v > INT32_MAX) {
                free(a);
                return sw_fail(ctx, SW_ERANGE,
                               "%s: pixel (%zu, %zu) = %u does not fit CBF's signed 32-bit "
                               "integers",
                               path, x, y, v);
            }
            a[y * w + x] = (valid && !valid[y * w + x]) ? -1 : (int32_t)v;
        }
    }
    char text[2048];
    header_text(geom, text, sizeof text);
    char *tmp = NULL;
    int fd = -1;
    if ((st = sw_io_tmp_create(ctx, path, &tmp, &fd)) != SW_OK) {
        free(a);
        return st;
    }
    FILE *f = fdopen(fd, "wb");
    cbf_handle cbf = NULL;
    int e = !f ? CBF_FILEOPEN : cbf_make_handle(&cbf);
    if (!e)
        e = cbf_new_datablock(cbf, "image_1");
    if (!e)
        e = cbf_new_category(cbf, "array_data");
    if (!e)
        e = cbf_new_column(cbf, "header_convention");
    if (!e)
        e = cbf_set_value(cbf, "PILATUS_1.2");
    if (!e)
        e = cbf_new_column(cbf, "header_contents");
    if (!e)
        e = cbf_set_value(cbf, text);
    if (!e)
        e = cbf_new_column(cbf, "data");
    if (!e)
        e = cbf_set_integerarray_wdims_fs(cbf, CBF_BYTE_OFFSET, 1, a, sizeof *a, 1, n,
                                          "little_endian", w, h, 0, 0);
    if (!e) /* not a buffer: f stays ours, closed below with its errors checked */
        e = cbf_write_file(cbf, f, 0, CBF, MSG_DIGEST | MIME_HEADERS,
                           ENC_NONE | ENC_CRTERM | ENC_LFTERM);
    if (cbf)
        cbf_free_handle(cbf);
    free(a);
    int bad = e != 0;
    if (f) {
        bad |= fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
        bad |= fclose(f) != 0;
    } else {
        close(fd);
    }
    if (bad || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        free(tmp);
        return sw_fail(ctx, e ? SW_EIO : SW_EIO, "%s: cannot write the CBF file (%s)", path,
                       e ? cbf_strerror(e) : strerror(err));
    }
    free(tmp);
    return SW_OK;
}
