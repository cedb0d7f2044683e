/*
 * HDF5 raw data read without HDF5 (hdf5_internal.h): contiguous values and stored chunks read
 * with pread at the addresses the walk found, chunks decoded through deflate (zlib), HDF5's byte
 * shuffle and bitshuffle (with or without LZ4). Every stage must give exactly the chunk's size:
 * anything else is refused with the reason, never passed on as pixels.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/bitshuffle.h"
#include "io/hdf5_internal.h"

#include <limits.h>
#include <zlib.h>

void h5_scratch_free(h5_scratch *s)
{
    free(s->raw);
    free(s->work);
    memset(s, 0, sizeof *s);
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (*cap >= need && *buf)
        return 0;
    uint8_t *p = realloc(*buf, need ? need : 1);
    if (!p)
        return -1;
    *buf = p;
    *cap = need;
    return 0;
}

/* zlib stream (HDF5's deflate filter writes one per chunk) to exactly out_size bytes. */
static int inflate_exact(const uint8_t *in, size_t in_size, uint8_t *out, size_t out_size,
                         char *why, size_t why_size)
{
    if (in_size > UINT_MAX || out_size > UINT_MAX) {
        snprintf(why, why_size, "a deflate chunk of %zu bytes is too large", in_size);
        return -1;
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit(&z) != Z_OK) {
        snprintf(why, why_size, "zlib cannot start (out of memory)");
        return -1;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)in_size;
    z.next_out = out;
    z.avail_out = (uInt)out_size;
    int ret = inflate(&z, Z_FINISH);
    int rc = 0;
    if (ret != Z_STREAM_END) {
        if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT)
            snprintf(why, why_size, "the deflate data is corrupt (zlib: %s)",
                     z.msg ? z.msg : "data error");
        else if (z.avail_out == 0)
            snprintf(why, why_size, "the deflate data decodes to more than the chunk's %zu bytes",
                     out_size);
        else
            snprintf(why, why_size,
                     "the deflate data ends early: %lu of the chunk's %zu bytes (truncated)",
                     (unsigned long)z.total_out, out_size);
        rc = -1;
    } else if (z.total_out != out_size) {
        snprintf(why, why_size, "the deflate data decodes to %lu bytes instead of %zu",
                 (unsigned long)z.total_out, out_size);
        rc = -1;
    } else if (z.avail_in != 0) {
        snprintf(why, why_size, "%u stray bytes after the deflate data", z.avail_in);
        rc = -1;
    }
    inflateEnd(&z);
    return rc;
}

/* HDF5's shuffle undone: byte j of element i was stored at j * n + i (n = size / bytes); the
 * size % bytes bytes at the end were stored as they are. bytes <= 1 or n <= 1: a copy, as HDF5. */
static void unshuffle(const uint8_t *in, uint8_t *out, size_t size, size_t bytes)
{
    size_t n = bytes ? size / bytes : 0;
    if (bytes <= 1 || n <= 1) {
        memcpy(out, in, size);
        return;
    }
    for (size_t j = 0; j < bytes; j++)
        for (size_t i = 0; i < n; i++)
            out[i * bytes + j] = in[j * n + i];
    memcpy(out + n * bytes, in + n * bytes, size - n * bytes);
}

int h5_decode_chunk(const h5_dset *d, const uint8_t *in, size_t in_size, uint32_t mask,
                    uint8_t *out, h5_scratch *s, char *why, size_t why_size)
{
    const size_t bytes = (size_t)h5_chunk_bytes(d);
    why[0] = '\0';
    /* stages run from the last filter applied to the first; the last one run writes into out */
    int last_run = -1, nrun = 0;
    for (int i = (int)d->nfilters - 1; i >= 0; i--)
        if (!(mask & (1u << i))) {
            last_run = i;
            nrun++;
        }
    if (nrun == 0) {
        if (in_size != bytes) {
            snprintf(why, why_size, "%zu bytes stored for a chunk of %zu (no filter applied)",
                     in_size, bytes);
            return -1;
        }
        memcpy(out, in, bytes);
        return 0;
    }
    /* two intermediate buffers at most: work holds both halves */
    if (nrun > 1 && grow(&s->work, &s->work_cap, 2 * bytes) < 0) {
        snprintf(why, why_size, "out of memory (%zu bytes)", 2 * bytes);
        return -1;
    }
    const uint8_t *cur = in;
    size_t cur_size = in_size;
    int flip = 0;
    for (int i = (int)d->nfilters - 1; i >= 0; i--) {
        if (mask & (1u << i))
            continue;
        uint8_t *dst = i == last_run ? out : s->work + (size_t)flip * bytes;
        const h5_filter *f = &d->filters[i];
        int rc = 0;
        switch (f->id) {
        case H5_FILTER_DEFLATE: rc = inflate_exact(cur, cur_size, dst, bytes, why, why_size); break;
        case H5_FILTER_SHUFFLE:
            if (cur_size != bytes) {
                snprintf(why, why_size, "%zu bytes reach the shuffle filter for a chunk of %zu",
                         cur_size, bytes);
                rc = -1;
            } else {
                unshuffle(cur, dst, bytes, f->ncd > 0 ? f->cd[0] : d->esize);
            }
            break;
        case H5_FILTER_BSHUF:
            if (f->ncd > 4 && f->cd[4] == H5_BSHUF_LZ4)
                rc = sw_bshuf_decode_lz4_mt(cur, cur_size, dst, bytes, d->esize, s->threads, why,
                                            why_size);
            else
                rc = sw_bshuf_decode_plain(cur, cur_size, dst, bytes, d->esize,
                                           f->ncd > 3 ? f->cd[3] : 0, why, why_size);
            break;
        default: snprintf(why, why_size, "filter %u is not decoded here", (unsigned)f->id); rc = -1;
        }
        if (rc != 0) {
            if (rc == -2 || why[0] == '\0')
                snprintf(why, why_size, "out of memory");
            return -1;
        }
        cur = dst;
        cur_size = bytes;
        flip ^= 1;
    }
    return 0;
}

/* Reads exactly n bytes at off; -1 with the reason when the file is shorter or unreadable. */
static int pread_all(int fd, uint8_t *buf, size_t n, uint64_t off, char *why, size_t why_size)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            snprintf(why, why_size, "read error at byte %llu (%s)", (unsigned long long)(off + got),
                     strerror(errno));
            return -1;
        }
        if (k == 0) {
            snprintf(why, why_size,
                     "the file ends at byte %llu, inside data that should run to %llu",
                     (unsigned long long)(off + got), (unsigned long long)(off + n));
            return -1;
        }
        got += (size_t)k;
    }
    return 0;
}

/* Fills n values of esize bytes with the fill value. */
static void fill_values(uint8_t *dst, size_t n, const h5_dset *d)
{
    for (size_t i = 0; i < n; i++)
        memcpy(dst + i * d->esize, d->fill, d->esize);
}

/* Decodes chunk ci of d (stored, or the fill value when never written) into out. */
static int load_chunk(const h5_dset *d, const h5_source *src, uint64_t ci, uint8_t *out,
                      h5_scratch *s, char *why, size_t why_size)
{
    const size_t bytes = (size_t)h5_chunk_bytes(d);
    if (!d->listed) {
        size_t size = 0;
        uint32_t mask = 0;
        int absent = 0;
        if (!src->fetch) {
            snprintf(why, why_size, "no way to look chunks up");
            return -1;
        }
        if (src->fetch(src->user, ci, s, &size, &mask, &absent, why, why_size) < 0)
            return -1;
        if (absent) {
            fill_values(out, bytes / d->esize, d);
            return 0;
        }
        return h5_decode_chunk(d, s->raw, size, mask, out, s, why, why_size);
    }
    const h5_chunk *c = &d->chunks[ci];
    if (c->addr == H5_ADDR_NONE) {
        fill_values(out, bytes / d->esize, d);
        return 0;
    }
    /* (the message's sizes were checked against the file when it arrived; the file may have
     * changed since, which pread then finds) */
    if (c->addr > src->file_size || c->size > src->file_size - c->addr) {
        snprintf(why, why_size, "chunk at byte %llu (%llu bytes) lies beyond the file's end",
                 (unsigned long long)c->addr, (unsigned long long)c->size);
        return -1;
    }
    if (grow(&s->raw, &s->raw_cap, (size_t)c->size) < 0) {
        snprintf(why, why_size, "out of memory (%llu bytes)", (unsigned long long)c->size);
        return -1;
    }
    if (pread_all(src->fd, s->raw, (size_t)c->size, c->addr, why, why_size) < 0)
        return -1;
    return h5_decode_chunk(d, s->raw, (size_t)c->size, c->mask, out, s, why, why_size);
}

int h5_scratch_raw(h5_scratch *s, size_t n)
{
    return grow(&s->raw, &s->raw_cap, n);
}

int h5_read_plane(const h5_dset *d, const h5_source *src, int64_t k, uint8_t *dst,
                  size_t dst_stride, h5_scratch *s, uint8_t **cache, size_t *cache_cap,
                  int64_t *cache_id, const h5_dset **cache_owner, char *why, size_t why_size)
{
    const size_t h = (size_t)d->dims[1], w = (size_t)d->dims[2], es = d->esize;
    const size_t row = w * es;
    why[0] = '\0';
    if (d->layout == H5_LAYOUT_CONTIG) {
        const uint64_t plane = (uint64_t)h * row;
        if (d->addr == H5_ADDR_NONE) {
            for (size_t y = 0; y < h; y++)
                fill_values(dst + y * dst_stride, w, d);
            return 0;
        }
        const uint64_t off = d->addr + (uint64_t)k * plane;
        if (dst_stride == row)
            return pread_all(src->fd, dst, (size_t)plane, off, why, why_size);
        for (size_t y = 0; y < h; y++)
            if (pread_all(src->fd, dst + y * dst_stride, row, off + y * row, why, why_size) < 0)
                return -1;
        return 0;
    }
    const uint64_t c0 = d->cdim[0], c1 = d->cdim[1], c2 = d->cdim[2];
    const uint64_t g0 = (uint64_t)k / c0, plane = (uint64_t)k % c0;
    /* One chunk that is exactly this frame, read into rows laid out as the caller's: no copy. */
    if (c0 == 1 && c1 == h && c2 == w && dst_stride == row)
        return load_chunk(d, src, g0, dst, s, why, why_size);
    const size_t cbytes = (size_t)h5_chunk_bytes(d);
    if (grow(cache, cache_cap, cbytes) < 0) {
        snprintf(why, why_size, "out of memory (%zu bytes)", cbytes);
        return -1;
    }
    for (uint64_t gy = 0; gy < d->grid[1]; gy++)
        for (uint64_t gx = 0; gx < d->grid[2]; gx++) {
            const uint64_t ci = (g0 * d->grid[1] + gy) * d->grid[2] + gx;
            if (*cache_owner != d || *cache_id != (int64_t)ci) {
                *cache_owner = NULL;
                if (load_chunk(d, src, ci, *cache, s, why, why_size) < 0)
                    return -1;
                *cache_owner = d;
                *cache_id = (int64_t)ci;
            }
            const uint64_t y0 = gy * c1, x0 = gx * c2;
            const uint64_t ny = y0 + c1 > h ? h - y0 : c1, nx = x0 + c2 > w ? w - x0 : c2;
            for (uint64_t y = 0; y < ny; y++) {
                const uint8_t *from = *cache + ((plane * c1 + y) * c2) * es;
                memcpy(dst + (size_t)(y0 + y) * dst_stride + (size_t)x0 * es, from,
                       (size_t)(nx * es));
            }
        }
    return 0;
}
