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

/* What the child sends: this head, the first frame's header text, then nframes * npix 32-bit
 * values (frame after frame). */
typedef struct cbf_head {
    uint32_t magic;
    int32_t status; /* sw_status */
    char msg[384];
    uint32_t elsize, elsigned;
    uint64_t fast, mid, nframes, npix; /* npix: per frame */
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

/* The child's message as it grows: the head's room, the header text, the frames' values. */
typedef struct cbf_out {
    uint8_t *m;
    size_t size, cap;
    uint64_t elements; /* array elements declared so far, all arrays */
} cbf_out;

static int out_reserve(cbf_out *o, size_t more)
{
    if (o->cap - o->size >= more)
        return 0;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap - o->size < more) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    uint8_t *m = realloc(o->m, cap);
    if (!m)
        return -1;
    o->m = m;
    o->cap = cap;
    return 0;
}

/* The array in the current row of _array_data.data: its frames (the slowest dimension, 1 for a
 * 2-D array) appended to o as 32-bit values. 0; 1 out of memory; -1 with the reason in h. */
static int read_array(cbf_handle cbf, uint64_t in_size, cbf_head *h, cbf_out *o, unsigned block,
                      unsigned row)
{
    unsigned int compression = 0;
    int id = 0, elsigned = 0, elunsigned = 0, minel = 0, maxel = 0;
    size_t elsize = 0, nelem = 0, fast = 0, mid = 0, slow = 0, padding = 0;
    const char *order = NULL;
    int e = cbf_get_integerarrayparameters_wdims_fs(cbf, &compression, &id, &elsize, &elsigned,
                                                    &elunsigned, &nelem, &minel, &maxel, &order,
                                                    &fast, &mid, &slow, &padding);
#define CBF_FAIL(st, ...)                                                                          \
    do {                                                                                           \
        h->status = (int32_t)(st);                                                                 \
        snprintf(h->msg, sizeof h->msg, __VA_ARGS__);                                              \
        return -1;                                                                                 \
    } while (0)
    if (e) {
        size_t rsize = 0, rn = 0;
        unsigned int rc = 0;
        int rid = 0;
        if (cbf_get_realarrayparameters(cbf, &rc, &rid, &rsize, &rn) == 0)
            CBF_FAIL(SW_EUNSUPPORTED,
                     "a real-valued array (%zu-byte floats): spotwave reads the integer arrays "
                     "detectors write",
                     rsize);
        CBF_FAIL(SW_EFORMAT, "the array's parameters do not read (%s)", cbf_strerror(e));
    }
    if (mid == 0 && fast > 0 && nelem == fast)
        mid = 1;
    if (slow == 0)
        slow = 1;
    if (elsize != 1 && elsize != 2 && elsize != 4)
        CBF_FAIL(SW_EUNSUPPORTED, "%zu-byte integers (spotwave reads 8, 16 and 32-bit ones)",
                 elsize);
    if (fast == 0 || mid == 0 || fast > SW_IMAGE_MAX_DIM || mid > SW_IMAGE_MAX_DIM ||
        (uint64_t)fast * mid > (uint64_t)SW_IMAGE_MAX_PIXELS)
        CBF_FAIL(SW_EFORMAT, "an array of %zu x %zu elements (width and height 1..%d)", fast, mid,
                 SW_IMAGE_MAX_DIM);
    if (slow > (size_t)SW_IMAGE_MAX_PIXELS / ((size_t)fast * mid))
        CBF_FAIL(SW_EFORMAT, "an array of %zu frames of %zu x %zu elements", slow, fast, mid);
    /* every element takes at least a byte of the file (byte offset, none) or 1/256 of one (the
     * packed and nibble schemes): sizes a small file cannot hold are refused before anything
     * of their size is allocated (all the file's arrays together) */
    const uint64_t per = (compression == CBF_BYTE_OFFSET || compression == CBF_NONE) ? 1 : 256;
    if ((uint64_t)nelem > in_size * per || o->elements + nelem > in_size * per)
        CBF_FAIL(SW_EFORMAT, "%zu elements declared in a file of %llu bytes", nelem,
                 (unsigned long long)in_size);
    if ((uint64_t)fast * mid * slow != nelem)
        CBF_FAIL(SW_EFORMAT, "%zu elements for an array of %zu x %zu x %zu: the sizes disagree",
                 nelem, fast, mid, slow);
    if (h->nframes == 0) {
        h->elsize = (uint32_t)elsize;
        h->elsigned = elsigned ? 1u : 0u;
        h->fast = fast;
        h->mid = mid;
        h->npix = (uint64_t)fast * mid;
    } else if (h->fast != fast || h->mid != mid || h->elsize != elsize ||
               h->elsigned != (elsigned ? 1u : 0u)) {
        CBF_FAIL(SW_EUNSUPPORTED,
                 "the array of data block %u, row %u is %zu x %zu %s%zu-bit, the first %llu x "
                 "%llu %s%u-bit: spotwave reads frames of one size and type",
                 block + 1, row + 1, fast, mid, elsigned ? "signed " : "unsigned ", 8 * elsize,
                 (unsigned long long)h->fast, (unsigned long long)h->mid,
                 h->elsigned ? "signed " : "unsigned ", 8 * h->elsize);
    }
#undef CBF_FAIL
    o->elements += nelem;
    if (out_reserve(o, nelem * 4) != 0)
        return 1;
    /* decoded at the file's own element size (CBFlib 0.9.7 sign-extends unsigned 16-bit values
     * decoded into 32-bit ones), then widened here */
    uint8_t *raw = malloc(nelem * elsize);
    if (!raw)
        return 1;
    size_t nread = 0;
    e = cbf_get_integerarray(cbf, &id, raw, elsize, elsigned ? 1 : 0, nelem, &nread);
    if (e || nread != nelem) {
        free(raw);
        h->status = SW_EFORMAT;
        if (e)
            snprintf(h->msg, sizeof h->msg, "the array's data do not decode (%s)", cbf_strerror(e));
        else
            snprintf(h->msg, sizeof h->msg, "the array's data hold %zu of %zu elements", nread,
                     nelem);
        return -1;
    }
    uint8_t *dst = o->m + o->size;
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
    o->size += nelem * 4;
    h->nframes += slow;
    return 0;
}

/* In the child (or here when fork failed): CBFlib reads the file, every array of every data
 * block in order (each row of its _array_data.data; a 3-D array is frames along its slowest
 * dimension). */
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
    uint64_t in_size = src->size;
    struct stat sb;
    if (src->path && stat(src->path, &sb) == 0)
        in_size = (uint64_t)sb.st_size;
    unsigned int nblocks = 0;
    if ((e = cbf_count_datablocks(cbf, &nblocks)) != 0 || nblocks == 0) {
        cbf_free_handle(cbf);
        return head_only(&h, SW_EFORMAT, msg, size, "no data block (%s)",
                         e ? cbf_strerror(e) : "none");
    }
    cbf_out o = {NULL, 0, 0, 0};
    if (out_reserve(&o, sizeof h) != 0) {
        cbf_free_handle(cbf);
        return 1;
    }
    o.size = sizeof h;
    int any = 0, rc = 0;
    /* why no frame was found, when none is: the first data block's reason */
    char none[128] = "";
    for (unsigned int b = 0; b < nblocks && rc == 0; b++) {
        if ((e = cbf_select_datablock(cbf, b)) != 0 ||
            (e = cbf_find_category(cbf, "array_data")) != 0) {
            if (!none[0])
                snprintf(none, sizeof none, "no _array_data category (%s)", cbf_strerror(e));
            continue; /* a data block without frames (a CIF block of other categories) */
        }
        unsigned int rows = 0;
        if ((e = cbf_count_rows(cbf, &rows)) != 0 || (e = cbf_find_column(cbf, "data")) != 0) {
            if (!none[0])
                snprintf(none, sizeof none, "no _array_data.data (%s)", cbf_strerror(e));
            continue;
        }
        for (unsigned int r = 0; r < rows && rc == 0; r++) {
            const char *text = NULL;
            if (!any && cbf_find_column(cbf, "header_contents") == 0 &&
                cbf_select_row(cbf, r) == 0 && cbf_get_value(cbf, &text) == 0 && text) {
                size_t tlen = strnlen(text, CBF_HEADER_MAX);
                if (out_reserve(&o, tlen) != 0) {
                    rc = 1;
                    break;
                }
                memcpy(o.m + o.size, text, tlen);
                o.size += tlen;
                h.header_len = tlen;
            }
            if ((e = cbf_find_column(cbf, "data")) != 0 || (e = cbf_select_row(cbf, r)) != 0) {
                rc = -1;
                h.status = SW_EFORMAT;
                snprintf(h.msg, sizeof h.msg, "no _array_data.data in data block %u (%s)", b + 1,
                         cbf_strerror(e));
                break;
            }
            rc = read_array(cbf, in_size, &h, &o, b, r);
            any = 1;
        }
    }
    cbf_free_handle(cbf);
    if (rc == 1) {
        free(o.m);
        return 1;
    }
    if (rc == -1 || !any) {
        free(o.m);
        char why[sizeof h.msg];
        snprintf(why, sizeof why, "%s", any ? h.msg : none[0] ? none : "no frames");
        return head_only(&h, any ? (sw_status)h.status : SW_EFORMAT, msg, size, "%s", why);
    }
    h.status = SW_OK;
    memcpy(o.m, &h, sizeof h);
    *msg = o.m;
    *size = o.size;
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

/* The child's frames into out (frames of one type: what the file holds, wide enough for the
 * values of all of them), *valid the pixels negative in any frame. */
static sw_status cbf_read_any(sw_context *ctx, const char *name, const cbf_src *src, sw_frames *out,
                              uint8_t **valid, sw_diffraction_geometry *geom)
{
    memset(out, 0, sizeof *out);
    if (valid)
        *valid = NULL;
    if (geom)
        sw_diffraction_geometry_init(geom);
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
        h.npix != h.fast * h.mid || h.nframes < 1 ||
        h.nframes > (uint64_t)SW_IMAGE_MAX_PIXELS / h.npix || h.nframes > INT32_MAX ||
        h.header_len > CBF_HEADER_MAX || (h.elsize != 1 && h.elsize != 2 && h.elsize != 4) ||
        h.elsigned > 1 || r.size != sizeof h + h.header_len + h.nframes * h.npix * 4) {
        free(r.msg);
        return sw_fail(ctx, SW_EFORMAT, "%s: corrupt CBF: the reader's sizes do not hold together",
                       name);
    }
    const uint8_t *text = r.msg + sizeof h;
    const uint8_t *pix = text + h.header_len;
    const int32_t w = (int32_t)h.fast, ht = (int32_t)h.mid, nf = (int32_t)h.nframes;
    const size_t n = (size_t)h.npix, all = n * (size_t)nf;
    /* the type: what the file holds, wide enough for the values it has */
    uint64_t maxv = 0;
    size_t negative = 0;
    for (size_t i = 0; i < all; i++) {
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
    uint8_t *mask = NULL;
    out->frames = calloc((size_t)nf, sizeof *out->frames);
    if (!out->frames || (negative && valid && !(mask = malloc(n)))) {
        free(r.msg);
        free(out->frames);
        out->frames = NULL;
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", name);
    }
    if (mask)
        memset(mask, 1, n);
    for (int32_t k = 0; k < nf; k++) {
        sw_image *img = &out->frames[k];
        if ((st = sw_image_alloc(ctx, w, ht, t, img)) != SW_OK) {
            out->count = k;
            sw_frames_free(out);
            free(mask);
            free(r.msg);
            return st;
        }
        const uint8_t *fp = pix + 4 * n * (size_t)k;
        for (int32_t y = 0; y < ht; y++) {
            uint8_t *row = sw_image_row(img, y);
            for (int32_t x = 0; x < w; x++) {
                size_t i = (size_t)y * (size_t)w + (size_t)x;
                uint32_t u;
                memcpy(&u, fp + 4 * i, 4);
                if (h.elsigned && (int32_t)u < 0) {
                    u = 0;
                    if (mask)
                        mask[i] = 0;
                }
                if (t == SW_PIX_U8)
                    row[x] = (uint8_t)u;
                else if (t == SW_PIX_U16)
                    ((uint16_t *)(void *)row)[x] = (uint16_t)u;
                else
                    ((uint32_t *)(void *)row)[x] = u;
            }
        }
    }
    out->count = nf;
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

/* One frame: the file's only one. */
static sw_status cbf_read_one(sw_context *ctx, const char *name, const cbf_src *src, sw_image *out,
                              uint8_t **valid, sw_diffraction_geometry *geom)
{
    sw_frames fr;
    sw_status st = cbf_read_any(ctx, name, src, &fr, valid, geom);
    if (st != SW_OK)
        return st;
    if (fr.count != 1) {
        const int32_t count = fr.count;
        sw_frames_free(&fr);
        if (valid) {
            free(*valid);
            *valid = NULL;
        }
        if (geom)
            sw_diffraction_geometry_init(geom);
        return sw_fail(ctx, SW_EUNSUPPORTED,
                       "%s: %d frames in one CBF file: sw_cbf_read_frames reads them", name,
                       (int)count);
    }
    *out = fr.frames[0];
    free(fr.frames);
    return SW_OK;
}

sw_status sw_cbf_read(sw_context *ctx, const char *path, sw_image *out, uint8_t **valid,
                      sw_diffraction_geometry *geom)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read: NULL output");
    if (!path || !*path)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read: no path given");
    cbf_src src = {path, NULL, 0};
    return cbf_read_one(ctx, path, &src, out, valid, geom);
}

sw_status sw_cbf_read_memory(sw_context *ctx, const void *buf, size_t size, sw_image *out,
                             uint8_t **valid, sw_diffraction_geometry *geom)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read_memory: NULL output");
    if (!buf && size)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read_memory: NULL buffer");
    cbf_src src = {NULL, buf, size};
    return cbf_read_one(ctx, "(memory)", &src, out, valid, geom);
}

sw_status sw_cbf_read_frames(sw_context *ctx, const char *path, sw_frames *out, uint8_t **valid,
                             sw_diffraction_geometry *geom)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read_frames: NULL output");
    memset(out, 0, sizeof *out);
    if (!path || !*path)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read_frames: no path given");
    cbf_src src = {path, NULL, 0};
    return cbf_read_any(ctx, path, &src, out, valid, geom);
}

sw_status sw_cbf_read_frames_memory(sw_context *ctx, const void *buf, size_t size, sw_frames *out,
                                    uint8_t **valid, sw_diffraction_geometry *geom)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read_frames_memory: NULL output");
    memset(out, 0, sizeof *out);
    if (!buf && size)
        return sw_fail(ctx, SW_EINVAL, "sw_cbf_read_frames_memory: NULL buffer");
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
            if (valid && !valid[y * w + x]) { /* written as -1 whatever it holds */
                a[y * w + x] = -1;
                continue;
            }
            if (v > INT32_MAX) {
                free(a);
                return sw_fail(ctx, SW_ERANGE,
                               "%s: pixel (%zu, %zu) = %u does not fit CBF's signed 32-bit "
                               "integers",
                               path, x, y, v);
            }
            a[y * w + x] = (int32_t)v;
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
