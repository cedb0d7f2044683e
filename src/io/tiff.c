/*
 * TIFF frames (io.h) with libtiff: every page a frame, grey 8/16/32-bit unsigned or 32-bit float,
 * strips or tiles. libtiff itself is fuzzed continuously (OSS-Fuzz) and is called in this process;
 * what it is handed is bounded here: sizes checked before any pixel is read, no single allocation
 * of libtiff's larger than a frame needs, its messages kept per open file (never on stderr).
 */
#define _POSIX_C_SOURCE 200809L

#include "io/io_internal.h"

#include <stdarg.h>
#include <tiffio.h>

#define TIFF_MAX_PAGES (1 << 20)

typedef struct tiff_job {
    sw_context *ctx;
    const char *name;
    char error[512];    /* libtiff's first error */
    uint64_t file_size; /* bytes in the file: what its pages can hold */
} tiff_job;

/* How many times its stored bytes a compressed strip or tile may decode to, at most: deflate
 * 1032, LZW about 2730 (a 12-bit code names at most a 4094-byte string), PackBits 64; other
 * codecs (zstd, LZMA, JPEG, ...) 65536. A page that would need more is refused before its frame
 * is allocated, so that a small file cannot make spotwave reserve gigabytes. */
static uint64_t max_ratio(uint16_t comp)
{
    switch (comp) {
    case COMPRESSION_NONE: return 1;
    case COMPRESSION_PACKBITS: return 64;
    case COMPRESSION_ADOBE_DEFLATE:
    case COMPRESSION_DEFLATE: return 1100;
    case COMPRESSION_LZW: return 2800;
    default: return 65536;
    }
}

/* SW_OK when the current page's strips or tiles can hold a frame of `need` bytes. */
static sw_status check_stored(tiff_job *j, TIFF *tif, int page, uint64_t need)
{
    uint16_t comp = COMPRESSION_NONE;
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
    uint32_t n = TIFFNumberOfStrips(tif); /* tiles too, for a tiled page */
    uint64_t stored = 0;
    for (uint32_t i = 0; i < n && stored < j->file_size; i++) {
        int err = 0;
        uint64_t b = TIFFGetStrileByteCountWithErr(tif, i, &err);
        if (err)
            break;
        stored += b;
    }
    if (stored > j->file_size)
        stored = j->file_size;
    const uint64_t r = max_ratio(comp);
    if (stored == 0 || (stored < need / r + (need % r != 0)))
        return sw_fail(j->ctx, SW_EFORMAT,
                       "%s: corrupt TIFF: page %d stores %llu bytes for %llu bytes of pixels "
                       "(compression %u: at most %llu times)",
                       j->name, page, (unsigned long long)stored, (unsigned long long)need,
                       (unsigned)comp, (unsigned long long)r);
    return SW_OK;
}

static int on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif;
    (void)module;
    tiff_job *j = user;
    if (j && j->error[0] == '\0')
        vsnprintf(j->error, sizeof j->error, fmt, ap);
    return 1; /* handled: nothing on stderr */
}

static int on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif;
    (void)module;
    tiff_job *j = user;
    if (j && j->ctx) {
        char m[256];
        vsnprintf(m, sizeof m, fmt, ap);
        sw_log(j->ctx, SW_LOG_DEBUG, "%s: libtiff: %s", j->name, m);
    }
    return 1;
}

/* A file in memory for TIFFClientOpen. */
typedef struct tiff_mem {
    const uint8_t *p;
    size_t n, pos;
} tiff_mem;

static tmsize_t mem_read(thandle_t h, void *buf, tmsize_t size)
{
    tiff_mem *m = (tiff_mem *)h;
    if (size <= 0 || m->pos >= m->n)
        return 0;
    size_t k = (size_t)size;
    if (k > m->n - m->pos)
        k = m->n - m->pos;
    memcpy(buf, m->p + m->pos, k);
    m->pos += k;
    return (tmsize_t)k;
}

static tmsize_t mem_write(thandle_t h, void *buf, tmsize_t size)
{
    (void)h;
    (void)buf;
    (void)size;
    return -1;
}

static toff_t mem_seek(thandle_t h, toff_t off, int whence)
{
    tiff_mem *m = (tiff_mem *)h;
    uint64_t base = whence == SEEK_CUR ? m->pos : whence == SEEK_END ? m->n : 0;
    uint64_t to = base + off;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END)
        return (toff_t)-1;
    if (to < base && (int64_t)off > 0) /* wrapped */
        return (toff_t)-1;
    m->pos = to > m->n ? m->n : (size_t)to;
    return (toff_t)to;
}

static int mem_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t mem_size(thandle_t h)
{
    return (toff_t)((tiff_mem *)h)->n;
}

static int mem_map(thandle_t h, void **base, toff_t *size)
{
    (void)h;
    (void)base;
    (void)size;
    return 0;
}

static void mem_unmap(thandle_t h, void *base, toff_t size)
{
    (void)h;
    (void)base;
    (void)size;
}

/* The page's type, or SW_EUNSUPPORTED with what it holds. */
static sw_status page_type(tiff_job *j, TIFF *tif, int page, sw_pixel_type *t)
{
    uint16_t bps = 1, spp = 1, fmt = SAMPLEFORMAT_UINT, planar = PLANARCONFIG_CONTIG, photo = 0;
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bps);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &fmt);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
    if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photo))
        photo = PHOTOMETRIC_MINISBLACK;
    if (spp != 1)
        return sw_fail(j->ctx, SW_EUNSUPPORTED,
                       "%s: page %d has %u samples per pixel (spotwave reads grey images: one)",
                       j->name, page, (unsigned)spp);
    if (photo == PHOTOMETRIC_PALETTE)
        return sw_fail(j->ctx, SW_EUNSUPPORTED,
                       "%s: page %d is a palette image (spotwave reads grey images)", j->name,
                       page);
    if (planar != PLANARCONFIG_CONTIG)
        return sw_fail(j->ctx, SW_EUNSUPPORTED, "%s: page %d: planar configuration %u", j->name,
                       page, (unsigned)planar);
    uint16_t comp = COMPRESSION_NONE;
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
    if (!TIFFIsCODECConfigured(comp))
        return sw_fail(j->ctx, SW_EUNSUPPORTED,
                       "%s: page %d is compressed with scheme %u, which this libtiff does not "
                       "decode",
                       j->name, page, (unsigned)comp);
    if ((fmt == SAMPLEFORMAT_UINT || fmt == SAMPLEFORMAT_VOID) && bps == 8)
        *t = SW_PIX_U8;
    else if ((fmt == SAMPLEFORMAT_UINT || fmt == SAMPLEFORMAT_VOID) && bps == 16)
        *t = SW_PIX_U16;
    else if ((fmt == SAMPLEFORMAT_UINT || fmt == SAMPLEFORMAT_VOID) && bps == 32)
        *t = SW_PIX_U32;
    else if (fmt == SAMPLEFORMAT_IEEEFP && bps == 32)
        *t = SW_PIX_F32;
    else
        return sw_fail(j->ctx, SW_EUNSUPPORTED,
                       "%s: page %d holds %u-bit %s samples (spotwave reads 8, 16 and 32-bit "
                       "unsigned integers and 32-bit floats)",
                       j->name, page, (unsigned)bps,
                       fmt == SAMPLEFORMAT_INT      ? "signed integer"
                       : fmt == SAMPLEFORMAT_IEEEFP ? "floating-point"
                       : fmt == SAMPLEFORMAT_UINT   ? "unsigned integer"
                                                    : "complex or unknown");
    return SW_OK;
}

static sw_status page_fail(tiff_job *j, int page, const char *what)
{
    return sw_fail(j->ctx, SW_EFORMAT, "%s: corrupt TIFF: page %d: %s%s%s%s", j->name, page, what,
                   j->error[0] ? " (libtiff: " : "", j->error, j->error[0] ? ")" : "");
}

/* Reads the current page into img (allocated here). */
static sw_status read_page(tiff_job *j, TIFF *tif, int page, sw_pixel_type t, uint32_t w,
                           uint32_t h, sw_image *img)
{
    sw_status st = sw_image_alloc(j->ctx, (int32_t)w, (int32_t)h, t, img);
    if (st != SW_OK)
        return st;
    const size_t px = sw_pixel_size(t), rowbytes = (size_t)w * px;
    uint8_t *buf = NULL;
    if (TIFFIsTiled(tif)) {
        uint32_t tw = 0, th = 0;
        if (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw) ||
            !TIFFGetField(tif, TIFFTAG_TILELENGTH, &th) || tw == 0 || th == 0 ||
            tw > SW_IMAGE_MAX_DIM || th > SW_IMAGE_MAX_DIM) {
            sw_image_free(img);
            return page_fail(j, page, "bad tile size");
        }
        tmsize_t ts = TIFFTileSize(tif);
        if (ts <= 0 || (uint64_t)ts != (uint64_t)tw * th * px) {
            sw_image_free(img);
            return page_fail(j, page, "a tile size that does not match its shape");
        }
        /* a tile may be larger than the image (TIFF allows it): bounded by the memory budget */
        st = sw_memory_check(j->ctx, 1, (uint64_t)ts, "%s: a TIFF tile of %u x %u pixels", j->name,
                             (unsigned)tw, (unsigned)th);
        if (st != SW_OK) {
            sw_image_free(img);
            return st;
        }
        buf = malloc((size_t)ts);
        if (!buf) {
            sw_image_free(img);
            return sw_fail(j->ctx, SW_ENOMEM, "%s: out of memory", j->name);
        }
        for (uint32_t ty = 0; ty < h; ty += th)
            for (uint32_t tx = 0; tx < w; tx += tw) {
                if (TIFFReadTile(tif, buf, tx, ty, 0, 0) != ts) {
                    free(buf);
                    sw_image_free(img);
                    return page_fail(j, page, "a tile does not decode");
                }
                uint32_t cw = w - tx < tw ? w - tx : tw, ch = h - ty < th ? h - ty : th;
                for (uint32_t y = 0; y < ch; y++)
                    memcpy((uint8_t *)sw_image_row(img, (int32_t)(ty + y)) + (size_t)tx * px,
                           buf + (size_t)y * tw * px, (size_t)cw * px);
            }
    } else {
        uint32_t rps = 0;
        TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
        if (rps == 0 || rps > h)
            rps = h;
        tmsize_t ss = TIFFStripSize(tif);
        if (ss <= 0 || (uint64_t)ss < (uint64_t)rps * rowbytes) {
            sw_image_free(img);
            return page_fail(j, page, "a strip size that does not match its rows");
        }
        buf = malloc((size_t)ss);
        if (!buf) {
            sw_image_free(img);
            return sw_fail(j->ctx, SW_ENOMEM, "%s: out of memory", j->name);
        }
        uint32_t nstrips = TIFFNumberOfStrips(tif);
        for (uint32_t y0 = 0, s = 0; y0 < h; y0 += rps, s++) {
            uint32_t rows = h - y0 < rps ? h - y0 : rps;
            if (s >= nstrips || TIFFReadEncodedStrip(tif, s, buf, (tmsize_t)(rows * rowbytes)) !=
                                    (tmsize_t)(rows * rowbytes)) {
                free(buf);
                sw_image_free(img);
                return page_fail(j, page, "a strip does not decode to its rows");
            }
            for (uint32_t y = 0; y < rows; y++)
                memcpy(sw_image_row(img, (int32_t)(y0 + y)), buf + (size_t)y * rowbytes, rowbytes);
        }
    }
    free(buf);
    return SW_OK;
}

static sw_status tiff_read_any(tiff_job *j, const char *path, tiff_mem *mem, sw_frames *out)
{
    TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
    if (!opts)
        return sw_fail(j->ctx, SW_ENOMEM, "%s: out of memory", j->name);
    TIFFOpenOptionsSetErrorHandlerExtR(opts, on_error, j);
    TIFFOpenOptionsSetWarningHandlerExtR(opts, on_warning, j);
    /* no single buffer of libtiff's beyond what the largest frame spotwave reads could need */
    TIFFOpenOptionsSetMaxSingleMemAlloc(opts, (tmsize_t)1 << 31);
    TIFF *tif = path ? TIFFOpenExt(path, "rm", opts)
                     : TIFFClientOpenExt(j->name, "rm", (thandle_t)mem, mem_read, mem_write,
                                         mem_seek, mem_close, mem_size, mem_map, mem_unmap, opts);
    TIFFOpenOptionsFree(opts);
    if (!tif)
        return sw_fail(j->ctx, SW_EFORMAT, "%s: not a TIFF file libtiff can open%s%s%s", j->name,
                       j->error[0] ? " (libtiff: " : "", j->error, j->error[0] ? ")" : "");
    sw_status st = SW_OK;
    int32_t cap = 0;
    sw_image first = {0};
    for (int page = 0;; page++) {
        if (page >= TIFF_MAX_PAGES) {
            st = sw_fail(j->ctx, SW_EFORMAT, "%s: more than %d pages", j->name, TIFF_MAX_PAGES);
            break;
        }
        uint32_t w = 0, h = 0;
        if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w) ||
            !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h) || w == 0 || h == 0 ||
            w > SW_IMAGE_MAX_DIM || h > SW_IMAGE_MAX_DIM ||
            (uint64_t)w * h > (uint64_t)SW_IMAGE_MAX_PIXELS) {
            st = sw_fail(j->ctx, SW_EFORMAT,
                         "%s: page %d is %u x %u pixels (width and height 1..%d)", j->name, page, w,
                         h, SW_IMAGE_MAX_DIM);
            break;
        }
        sw_pixel_type t = SW_PIX_U8;
        if ((st = page_type(j, tif, page, &t)) != SW_OK)
            break;
        if (page > 0 &&
            ((int32_t)w != first.width || (int32_t)h != first.height || t != first.type)) {
            st = sw_fail(j->ctx, SW_EFORMAT,
                         "%s: page %d is %u x %u %s, page 0 %d x %d %s: the pages must agree",
                         j->name, page, w, h, sw_pixel_type_string(t), first.width, first.height,
                         sw_pixel_type_string(first.type));
            break;
        }
        if (out->count == cap) {
            int32_t nc = cap ? 2 * cap : 4;
            sw_image *f = realloc(out->frames, (size_t)nc * sizeof *f);
            if (!f) {
                st = sw_fail(j->ctx, SW_ENOMEM, "%s: out of memory", j->name);
                break;
            }
            out->frames = f;
            cap = nc;
        }
        if ((st = check_stored(j, tif, page, (uint64_t)w * h * sw_pixel_size(t))) != SW_OK)
            break;
        sw_image *img = &out->frames[out->count];
        memset(img, 0, sizeof *img);
        if ((st = read_page(j, tif, page, t, w, h, img)) != SW_OK)
            break;
        out->count++;
        if (page == 0)
            first = *img;
        j->error[0] = '\0';
        if (!TIFFReadDirectory(tif)) {
            if (j->error[0]) /* a next page that is there but does not read */
                st = page_fail(j, page + 1, "its directory does not read");
            break;
        }
    }
    TIFFClose(tif);
    if (st != SW_OK)
        sw_frames_free(out);
    return st;
}

sw_status sw_tiff_read(sw_context *ctx, const char *path, sw_frames *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!out || !path || !*path)
        return sw_fail(ctx, SW_EINVAL, "sw_tiff_read: NULL or empty argument");
    FILE *f = fopen(path, "rb"); /* SW_EIO for a file that is not there, before libtiff */
    if (!f)
        return sw_fail(ctx, SW_EIO, "%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    int got = fstat(fileno(f), &sb) == 0;
    fclose(f);
    tiff_job j = {ctx, path, "", got && sb.st_size > 0 ? (uint64_t)sb.st_size : 0};
    return tiff_read_any(&j, path, NULL, out);
}

sw_status sw_tiff_read_memory(sw_context *ctx, const void *buf, size_t size, sw_frames *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!out || (!buf && size))
        return sw_fail(ctx, SW_EINVAL, "sw_tiff_read_memory: NULL argument");
    if (size < 8)
        return sw_fail(ctx, SW_EFORMAT, "(memory): not a TIFF file (%zu bytes)", size);
    tiff_job j = {ctx, "(memory)", "", size};
    tiff_mem m = {buf, size, 0};
    return tiff_read_any(&j, NULL, &m, out);
}

sw_status sw_tiff_write(sw_context *ctx, const char *path, const sw_image *frames, int32_t count,
                        int tiled)
{
    if (!path || !*path || !frames || count < 1)
        return sw_fail(ctx, SW_EINVAL, "sw_tiff_write: no path or no frames");
    for (int32_t k = 0; k < count; k++) {
        sw_status st = sw_io_check_write_image(ctx, path, &frames[k]);
        if (st != SW_OK)
            return st;
        if (frames[k].width != frames[0].width || frames[k].height != frames[0].height ||
            frames[k].type != frames[0].type)
            return sw_fail(ctx, SW_EINVAL, "%s: frame %d differs from frame 0 in size or type",
                           path, k);
    }
    char *tmp = NULL;
    int fd = -1;
    sw_status st = sw_io_tmp_create(ctx, path, &tmp, &fd);
    if (st != SW_OK)
        return st;
    close(fd);
    tiff_job j = {ctx, path, "", 0};
    TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
    if (opts) {
        TIFFOpenOptionsSetErrorHandlerExtR(opts, on_error, &j);
        TIFFOpenOptionsSetWarningHandlerExtR(opts, on_warning, &j);
    }
    TIFF *tif = opts ? TIFFOpenExt(tmp, "w", opts) : NULL;
    TIFFOpenOptionsFree(opts);
    int ok = tif != NULL;
    const sw_pixel_type t = frames[0].type;
    const uint32_t w = (uint32_t)frames[0].width, h = (uint32_t)frames[0].height;
    const size_t px = sw_pixel_size(t);
    const uint16_t comp = TIFFIsCODECConfigured(COMPRESSION_ADOBE_DEFLATE)
                              ? COMPRESSION_ADOBE_DEFLATE
                              : COMPRESSION_NONE;
    uint8_t *buf = ok ? malloc((size_t)64 * 64 * px > (size_t)16 * w * px ? (size_t)64 * 64 * px
                                                                          : (size_t)16 * w * px)
                      : NULL;
    ok = ok && buf;
    for (int32_t k = 0; ok && k < count; k++) {
        const sw_image *img = &frames[k];
        ok = TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, w) &&
             TIFFSetField(tif, TIFFTAG_IMAGELENGTH, h) &&
             TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)(8 * px)) &&
             TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)1) &&
             TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT,
                          t == SW_PIX_F32 ? SAMPLEFORMAT_IEEEFP : SAMPLEFORMAT_UINT) &&
             TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK) &&
             TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG) &&
             TIFFSetField(tif, TIFFTAG_COMPRESSION, comp) &&
             TIFFSetField(tif, TIFFTAG_SOFTWARE, "spotwave");
        if (ok && count > 1)
            ok = TIFFSetField(tif, TIFFTAG_SUBFILETYPE, FILETYPE_PAGE) &&
                 TIFFSetField(tif, TIFFTAG_PAGENUMBER, (uint16_t)(k < 65535 ? k : 65535),
                              (uint16_t)(count < 65535 ? count : 65535));
        if (ok && tiled) {
            ok = TIFFSetField(tif, TIFFTAG_TILEWIDTH, 64u) &&
                 TIFFSetField(tif, TIFFTAG_TILELENGTH, 64u);
            for (uint32_t ty = 0; ok && ty < h; ty += 64)
                for (uint32_t tx = 0; ok && tx < w; tx += 64) {
                    memset(buf, 0, (size_t)64 * 64 * px);
                    uint32_t cw = w - tx < 64 ? w - tx : 64, ch = h - ty < 64 ? h - ty : 64;
                    for (uint32_t y = 0; y < ch; y++)
                        memcpy(buf + (size_t)y * 64 * px,
                               (const uint8_t *)sw_image_row(img, (int32_t)(ty + y)) + tx * px,
                               cw * px);
                    ok = TIFFWriteTile(tif, buf, tx, ty, 0, 0) >= 0;
                }
        } else if (ok) {
            ok = TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 16u);
            for (uint32_t y0 = 0, s = 0; ok && y0 < h; y0 += 16, s++) {
                uint32_t rows = h - y0 < 16 ? h - y0 : 16;
                for (uint32_t y = 0; y < rows; y++)
                    memcpy(buf + (size_t)y * w * px, sw_image_row(img, (int32_t)(y0 + y)), w * px);
                ok = TIFFWriteEncodedStrip(tif, s, buf, (tmsize_t)(rows * w * px)) >= 0;
            }
        }
        if (ok)
            ok = TIFFWriteDirectory(tif);
    }
    free(buf);
    if (tif)
        TIFFClose(tif);
    if (ok) { /* on disk before it gets its name */
        int f2 = open(tmp, O_RDONLY);
        ok = f2 >= 0 && fsync(f2) == 0;
        if (f2 >= 0)
            close(f2);
    }
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return sw_fail(ctx, SW_EIO, "%s: cannot write the TIFF file (%s)", path,
                       j.error[0] ? j.error : strerror(e));
    }
    free(tmp);
    return SW_OK;
}
