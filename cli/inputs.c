/*
 * Several input files (FITS, PGM, CBF, TIFF, Eiger/NeXus HDF5) as one numbered frame sequence, for
 * the commands that take IMAGE... (find, pupil): frames are numbered from 0 across all inputs in
 * order, and all inputs must share one size and pixel type.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* Where external links of HDF5 inputs may lead (sw_cli_inputs_h5_links). */
static struct {
    const char *dirs;
    int anywhere;
} g_h5_links;

void sw_cli_inputs_h5_links(const char *dirs, int anywhere)
{
    if (dirs)
        g_h5_links.dirs = dirs;
    if (anywhere >= 0)
        g_h5_links.anywhere = anywhere;
}

void sw_cli_inputs_geometry(const sw_cli_inputs *in, sw_diffraction_geometry *g)
{
    sw_diffraction_geometry_init(g);
    if (in && in->n > 0)
        *g = in->in[0].geom;
}

void sw_cli_inputs_free(sw_cli_inputs *in)
{
    for (int i = 0; i < in->n; i++) {
        sw_frames_free(&in->in[i].frames);
        sw_h5_close(in->in[i].h5);
        free(in->in[i].valid);
    }
    free(in->in);
    free(in->valid);
    sw_image_free(&in->h5buf);
    memset(in, 0, sizeof *in);
}

int sw_cli_inputs_open(sw_context *ctx, const char *sub, char *const *paths, int n,
                       const char *dataset, int flags, sw_cli_inputs_h5_fn on_h5, void *user,
                       sw_cli_inputs *out)
{
    memset(out, 0, sizeof *out);
    out->in = calloc((size_t)n, sizeof *out->in);
    if (!out->in)
        return sw_cli_fail(sub, "out of memory");
    out->n = n;
    out->h5_no_ctx = (flags & SW_CLI_INPUTS_THREAD) != 0;
    /* Frames read on another thread: the readers get no context (io.h, "Threads"), and their
     * messages stay with the thread that made the call (sw_context_error(NULL)). */
    sw_context *h5ctx = out->h5_no_ctx ? NULL : ctx;
    int any_h5 = 0;
    for (int i = 0; i < n; i++) {
        sw_cli_input *in = &out->in[i];
        in->path = paths[i];
        int32_t w, h;
        sw_pixel_type t;
        if (sw_cli_is_hdf5(in->path)) {
            sw_h5_options ho;
            sw_h5_options_default(&ho);
            ho.dataset = dataset;
            ho.link_dirs = g_h5_links.dirs;
            ho.links_anywhere = g_h5_links.anywhere;
            ho.threads = sw_context_threads(ctx); /* --threads: a frame's chunks decoded on them */
            sw_status st = sw_h5_open_ex(h5ctx, in->path, &ho, &in->h5);
            if (st != SW_OK)
                return sw_cli_fail(sub, "%s", sw_cli_lib_error(h5ctx, st));
            /* the data files its links lead to are inputs too: no output may replace them */
            for (int32_t k = 1; k < sw_h5_file_count(in->h5); k++)
                sw_cli_file_in("a data file of the image", sw_h5_file_path(in->h5, k));
            sw_h5_info info;
            sw_h5_get_info(in->h5, &info);
            sw_h5_read_geometry(in->h5, &in->geom);
            w = info.width;
            h = info.height;
            t = info.type;
            in->nframes = info.frames;
            any_h5 = 1;
            if (on_h5) {
                int rc = on_h5(user, in, &info);
                if (rc != SW_EXIT_OK)
                    return rc;
            }
        } else {
            int rc = sw_cli_read_frames_ex(ctx, sub, "image", in->path, 0, &in->frames, &in->valid,
                                           &in->geom);
            if (rc != SW_EXIT_OK)
                return rc;
            w = in->frames.frames[0].width;
            h = in->frames.frames[0].height;
            t = in->frames.frames[0].type;
            in->nframes = in->frames.count;
        }
        if (i == 0) {
            out->width = w;
            out->height = h;
            out->type = t;
        } else if (w != out->width || h != out->height || t != out->type) {
            return sw_cli_fail(sub,
                               "'%s' has %d x %d %s frames, '%s' has %d x %d %s: the "
                               "inputs must agree",
                               in->path, w, h, sw_pixel_type_string(t), out->in[0].path, out->width,
                               out->height, sw_pixel_type_string(out->type));
        }
        in->start = out->total;
        out->total += in->nframes;
        if (in->valid) { /* a CBF's negative pixels: bad for the whole sequence */
            size_t np = (size_t)w * (size_t)h;
            if (!out->valid) {
                out->valid = malloc(np);
                if (!out->valid)
                    return sw_cli_fail(sub, "out of memory");
                memcpy(out->valid, in->valid, np);
            } else {
                for (size_t k = 0; k < np; k++)
                    out->valid[k] = out->valid[k] && in->valid[k];
            }
        }
    }
    if (any_h5 && !out->h5_no_ctx) {
        sw_status st = sw_image_alloc(ctx, out->width, out->height, out->type, &out->h5buf);
        if (st != SW_OK)
            return sw_cli_fail(sub, "%s", sw_cli_lib_error(ctx, st));
    }
    return SW_EXIT_OK;
}

int sw_cli_inputs_range(const char *sub, const sw_cli_inputs *in, int64_t first, int64_t count,
                        int64_t *count_out)
{
    if (count < 0)
        count = in->total - first;
    if (first >= in->total || count <= 0 || count > in->total - first)
        return sw_cli_fail(
            sub, "frame %lld%s asked for, but the inputs have %lld frame%s (0..%lld)",
            (long long)(first + (count > 0 ? count : 1) - 1), count > 1 ? " (the last one)" : "",
            (long long)in->total, in->total == 1 ? "" : "s", (long long)(in->total - 1));
    *count_out = count;
    return SW_EXIT_OK;
}

/* The input holding frame `index`, and the frame's index in it; NULL when beyond the inputs. */
static sw_cli_input *find_input(sw_cli_inputs *in, int64_t index, int64_t *k)
{
    for (int i = 0; i < in->n; i++) {
        sw_cli_input *p = &in->in[i];
        if (index >= p->start && index < p->start + p->nframes) {
            *k = index - p->start;
            return p;
        }
    }
    return NULL;
}

int sw_cli_inputs_frame(sw_context *ctx, const char *sub, sw_cli_inputs *in, int64_t index,
                        const sw_image **out)
{
    int64_t k;
    sw_cli_input *p = find_input(in, index, &k);
    /* Not reached from the commands: they check the range against the inputs first. */
    if (!p)
        return sw_cli_fail(sub, "frame %lld is beyond the inputs", (long long)index);
    if (!p->h5) {
        *out = &p->frames.frames[k];
        return SW_EXIT_OK;
    }
    if (!in->h5buf.data) /* opened with SW_CLI_INPUTS_THREAD: sw_cli_inputs_read is the way */
        return sw_cli_fail(sub, "no frame buffer for HDF5 frames");
    sw_status st = sw_h5_read_frame(p->h5, k, &in->h5buf);
    if (st != SW_OK)
        return sw_cli_fail(sub, "%s", sw_cli_lib_error(in->h5_no_ctx ? NULL : ctx, st));
    *out = &in->h5buf;
    return SW_EXIT_OK;
}

sw_status sw_cli_inputs_frame_status(sw_context *ctx, sw_cli_inputs *in, int64_t index,
                                     const sw_image **out)
{
    int64_t k;
    sw_cli_input *p = find_input(in, index, &k);
    if (!p)
        return sw_error_set(ctx, SW_EINVAL, "frame %lld is beyond the inputs", (long long)index);
    if (!p->h5) {
        *out = &p->frames.frames[k];
        return SW_OK;
    }
    if (!in->h5buf.data)
        return sw_error_set(ctx, SW_EINVAL, "no frame buffer for HDF5 frames");
    sw_status st = sw_h5_read_frame(p->h5, k, &in->h5buf);
    if (st != SW_OK)
        return in->h5_no_ctx ? sw_error_set(ctx, st, "%s", sw_cli_lib_error(NULL, st)) : st;
    *out = &in->h5buf;
    return SW_OK;
}

sw_status sw_cli_inputs_read(sw_cli_inputs *in, int64_t index, sw_image *dst)
{
    int64_t k;
    sw_cli_input *p = find_input(in, index, &k);
    /* Not reached from the commands: they check the range against the inputs first. */
    if (!p)
        return sw_error_set(NULL, SW_EINVAL, "frame %lld is beyond the inputs", (long long)index);
    if (p->h5)
        return sw_h5_read_frame(p->h5, k, dst);
    const sw_image *src = &p->frames.frames[k];
    size_t row = (size_t)src->width * sw_pixel_size(src->type);
    for (int32_t y = 0; y < src->height; y++)
        memcpy(sw_image_row(dst, y), sw_image_row(src, y), row);
    return SW_OK;
}

sw_status sw_cli_inputs_read_chunks(sw_cli_inputs *in, int64_t index, void *buf, size_t cap,
                                    sw_find_chunk *chunks, int64_t max_chunks, int64_t *nchunks)
{
    int64_t k;
    sw_cli_input *p = find_input(in, index, &k);
    *nchunks = 0;
    if (!p)
        return sw_error_set(NULL, SW_EINVAL, "frame %lld is beyond the inputs", (long long)index);
    if (!p->h5 || !p->chunked)
        return SW_OK; /* read decoded (the room given is another input's) */
    return sw_h5_read_frame_chunks(p->h5, k, buf, cap, chunks, max_chunks, nchunks);
}

int sw_cli_inputs_chunk_limits(sw_cli_inputs *in, size_t *cap, int64_t *max_chunks)
{
    *cap = 0;
    *max_chunks = 0;
    int all = in->n > 0;
    for (int i = 0; i < in->n; i++) {
        size_t b = 0;
        int64_t c = 0;
        in->in[i].chunked = 0;
        if (!in->in[i].h5 || sw_h5_frame_chunks_limits(in->in[i].h5, &b, &c) != SW_OK || c == 0) {
            all = 0;
            continue;
        }
        if (b > *cap)
            *cap = b;
        if (c > *max_chunks)
            *max_chunks = c;
        in->in[i].chunked = 1;
    }
    return all;
}
