/*
 * bench_diffraction: the per-image summary a beamline steers by (diffraction.h; spot finding as
 * find.h, DIALS's dispersion_extended: Winter et al. 2018, Acta Cryst. D74, 85-97), with the
 * geometry-aware masks on, on detector-sized frames read from an HDF5 file on disk.
 *
 * Frames: diffraction-like patterns from the star simulator: Gaussian spots (sigma 1 px) whose
 * density follows the resolution (spots to d = 2.0 A, a sparse scatter beyond), fluxes 30 .. 3000
 * counts, on a Poisson background of 0.8 counts per pixel, with the detector's module gaps set to
 * the type's maximum (masked as overloaded, as the detectors flag them):
 *   "eiger16m"   4148 x 4362 u16, 75 um pixels, 4 x 8 modules of 1028 x 512 px with 12 / 38 px
 *                gaps (an Eiger2 16M), 150 mm, 0.9763 A;
 *   "pilatus6m"  2463 x 2527 u32, 172 um pixels, 5 x 12 modules of 487 x 195 px with 7 / 17 px
 *                gaps (a Pilatus 6M; its CBFs hold signed 32-bit counts), 300 mm, 0.9763 A.
 * --quick: a 1024 x 1024 u16 frame instead. A pool of 4 distinct frames is written to a
 * deflate-compressed (or bitshuffle/LZ4 when the plugin is there, as Eiger writes) Eiger-like
 * HDF5 file in $TMPDIR and cycled.
 * Masks: d >= 50 A (the direct beam's surroundings), the ice rings at DIALS's width, a beam-stop
 * circle of 60 px and its arm (a rectangle from the beam to the frame's edge).
 *
 * Cases (the "bench" field):
 *   diffraction_mask     sw_diffraction_mask: the geometry-aware mask, built once per run
 *   summary_frame        one frame already in memory (device memory on CUDA): sw_find_run with
 *                        the mask, then sw_diffraction_summarise (d of every spot, counts, the
 *                        resolution estimate); frames/s
 *   summary_disk         sw_find_sequence over frames read from the HDF5 file on the reader
 *                        thread (decompressed there; the file is in the page cache after the
 *                        first pass), each frame's summary after; time per frame, frames/s
 *   read_disk            sw_h5_read_frame alone: one frame read from the HDF5 file (page cache
 *                        warm) and decoded, its bitshuffle/LZ4 blocks on the context's threads
 *                        (--threads); frames/s
 *   read_cbf             (pilatus6m) sw_cbf_read of one of POOL CBF files as a Pilatus writes
 *                        them (byte-offset, signed 32-bit, gaps -1), CBFlib in its child
 *                        process; frames/s
 * The table ends with the detectors' own rates (Eiger2 16M: 133 Hz at 16 bit; Eiger2 4M: 560 Hz).
 *
 * --decode: instead, the Eiger 16M frames as bitshuffle/LZ4 chunks (the file above, in the page
 * cache; needs the filter plugin to write it) and the whole find (no masks) from the file with
 * each decoder (--quick: 1024 x 1024):
 *   read_chunks          sw_h5_read_frame_chunks: one frame's stored chunks into memory, one
 *                        thread (GB/s of stored bytes)
 *   table_walk           the host's part of the GPU decoder: the frame's block counts checked
 *                        into the table of blocks (sw_bshuf_frame_walk), one thread
 *   decode_cpu           the frame's chunks decoded by sw_bshuf_decode_lz4_mt on --threads
 *   decode_gpu_kernel    (CUDA) the GPU decoder's kernel alone, stored bytes already on the
 *                        device (CUDA events)
 *   h2d_pinned           (CUDA) a raw frame copied from pinned memory to the device (GB/s): the
 *                        PCIe floors, raw and compressed, are printed from it
 *   find_file_cpu_decode sw_find_sequence_chunks without a chunk source: frames read and decoded
 *                        on the reader thread, copied raw
 *   find_file_gpu_decode (CUDA) with the chunk source: stored chunks read by 4 threads, copied
 *                        compressed, decoded on the GPU (the spots must equal the CPU decoder's)
 * and a line with the compression ratio and the stored MB per frame.
 */
#define _GNU_SOURCE /* mkdtemp */

#include "harness.h"
#include "io/bitshuffle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "bench_diffraction"
#define POOL 4
#define SEED 0xD1FFull

typedef struct detector {
    const char *name;
    int32_t w, h;
    sw_pixel_type type;
    double pixel_mm, distance_mm;
    int32_t mod_w, mod_h, gap_x, gap_y; /* 0: no modules */
} detector;

static int fail(sw_context *ctx, const char *what, sw_status st)
{
    fprintf(stderr, "%s: %s: %s\n", PROG, what,
            sw_context_error(ctx)[0] ? sw_context_error(ctx) : sw_status_string(st));
    return 1;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
    return (double)(splitmix(s) >> 11) * 0x1.0p-53;
}

static int in_gap(const detector *d, int32_t x, int32_t y)
{
    if (!d->mod_w)
        return 0;
    return x % (d->mod_w + d->gap_x) >= d->mod_w || y % (d->mod_h + d->gap_y) >= d->mod_h;
}

static void geometry(const detector *d, sw_diffraction_geometry *g)
{
    sw_diffraction_geometry_init(g);
    g->wavelength_a = 0.9763;
    g->distance_mm = d->distance_mm;
    g->beam_x_px = 0.5 * d->w - 3.3;
    g->beam_y_px = 0.5 * d->h + 7.7;
    g->pixel_x_mm = g->pixel_y_mm = d->pixel_mm;
    g->have = SW_DG_RESOLUTION;
}

/* POOL frames of spots that thin out past 2.0 A, written to path. */
static int make_file(sw_context *ctx, const detector *d, const sw_diffraction_geometry *g,
                     const char *path, sw_image host[POOL])
{
    sw_starsim_params sp;
    sw_starsim_params_default(&sp);
    sp.width = d->w;
    sp.height = d->h;
    sp.sigma = 1.0;
    sp.roi_side = 9;
    sp.psf = SW_PSF_INTEGRATED;
    const int64_t tries = (int64_t)d->w * d->h / 4000;
    sp.max_stars = tries;
    sw_starsim *sim = NULL;
    sw_image e = {0};
    sw_status st = sw_starsim_create(ctx, &sp, &sim);
    if (st == SW_OK)
        st = sw_image_alloc(ctx, d->w, d->h, SW_PIX_F32, &e);
    uint64_t rs = SEED;
    for (int i = 0; i < POOL && st == SW_OK; i++) {
        sw_stars stars;
        st = sw_stars_alloc(ctx, tries, &stars);
        if (st != SW_OK)
            break;
        int64_t n = 0;
        for (int64_t k = 0; k < tries; k++) {
            const double x = uniform(&rs) * d->w, y = uniform(&rs) * d->h;
            const double dd = sw_diffraction_d_spacing(g, x, y);
            if (dd < 2.0 && uniform(&rs) > 0.03)
                continue;
            stars.x[n] = x;
            stars.y[n] = y;
            stars.flux[n] = 30.0 * pow(100.0, uniform(&rs));
            n++;
        }
        stars.count = n;
        st = sw_starsim_run(sim, &stars, &e);
        sw_stars_free(&stars);
        sw_detector det;
        sw_detector_default(&det);
        det.sky_e = 0.8;
        det.shot_noise = 1;
        det.read_noise_e = 0.0;
        det.gain_e_per_adu = 1.0;
        det.bias_adu = 0.0;
        det.out_type = d->type;
        det.seed = SEED + 100 + (uint64_t)i;
        if (st == SW_OK)
            st = sw_image_alloc(NULL, d->w, d->h, d->type, &host[i]);
        if (st == SW_OK)
            st = sw_detector_apply(ctx, &det, &e, &host[i]);
        if (st != SW_OK)
            break;
        for (int32_t y = 0; y < d->h; y++)
            for (int32_t x = 0; x < d->w; x++)
                if (in_gap(d, x, y)) {
                    void *row = sw_image_row(&host[i], y);
                    if (d->type == SW_PIX_U16)
                        ((uint16_t *)row)[x] = 0xffff;
                    else
                        ((uint32_t *)row)[x] = 0xffffffffu;
                }
    }
    sw_image_free(&e);
    sw_starsim_destroy(sim);
    if (st == SW_OK)
        st = sw_h5_write(ctx, path, host, POOL, 0,
                         sw_h5_bitshuffle_available() ? SW_H5_BSLZ4 : SW_H5_DEFLATE, NULL, 0.0);
    if (st != SW_OK)
        return fail(ctx, "making the frames", st);
    return 0;
}

typedef struct job {
    sw_context *ctx;
    const sw_diffraction_geometry *g;
    const sw_diffraction_mask_params *mp;
    int32_t w, h;
    uint8_t *mask;
    sw_find_plan *plan;
    sw_image *frames; /* POOL frames (device ones on CUDA) */
    sw_h5_reader *h5;
    sw_image readbuf; /* read_disk's frame */
    char cbf[POOL][4096];
    int64_t nstream;
    sw_spot_list spots;
    sw_diffraction_summary last;
    int64_t masked; /* pixels the geometry-aware mask cleared */
} job;

static sw_status run_mask(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)sample;
    (void)measured_us;
    memset(j->mask, 1, (size_t)j->w * j->h);
    return sw_diffraction_mask(j->ctx, j->g, j->mp, j->w, j->h, j->mask, &j->masked);
}

/* The summaries of the frames in spots (ordered by frame), first .. first+n-1. */
static sw_status summarise_all(job *j, int64_t first, int64_t n)
{
    int64_t k = 0;
    sw_status st = SW_OK;
    for (int64_t f = first; f < first + n && st == SW_OK; f++) {
        int64_t e = k;
        while (e < j->spots.count && j->spots.spots[e].z0 == f)
            e++;
        st = sw_diffraction_summarise(j->ctx, j->g, j->spots.spots + k, e - k, f, &j->last);
        k = e;
    }
    return st;
}

static sw_status run_frame(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)measured_us;
    j->spots.count = 0;
    sw_status st = sw_find_run(j->plan, &j->frames[sample % POOL], sample, &j->spots, NULL, NULL);
    if (st == SW_OK)
        st = summarise_all(j, sample, 1);
    return st;
}

static sw_status disk_read(void *user, int64_t index, sw_image *dst)
{
    return sw_h5_read_frame(((job *)user)->h5, index % POOL, dst);
}

static sw_status run_read(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)measured_us;
    return sw_h5_read_frame(j->h5, sample % POOL, &j->readbuf);
}

static sw_status run_cbf(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)measured_us;
    sw_image img;
    uint8_t *valid = NULL;
    sw_status st = sw_cbf_read(j->ctx, j->cbf[sample % POOL], &img, &valid, NULL);
    if (st == SW_OK) {
        sw_image_free(&img);
        free(valid);
    }
    return st;
}

/* The pool as Pilatus CBFs (signed 32-bit, byte offset; the gaps -1), for read_cbf. */
static int write_cbfs(sw_context *ctx, const detector *d, const char *dir, const sw_image *host,
                      job *j)
{
    uint8_t *valid = malloc((size_t)d->w * d->h);
    if (!valid)
        return fail(ctx, "out of memory", SW_ENOMEM);
    for (int32_t y = 0; y < d->h; y++)
        for (int32_t x = 0; x < d->w; x++)
            valid[(size_t)y * d->w + x] = !in_gap(d, x, y);
    sw_status st = SW_OK;
    for (int i = 0; i < POOL && st == SW_OK; i++) {
        snprintf(j->cbf[i], sizeof j->cbf[i], "%s/%s_%d.cbf", dir, d->name, i);
        st = sw_cbf_write(ctx, j->cbf[i], &host[i], valid, NULL);
    }
    free(valid);
    return st == SW_OK ? 0 : fail(ctx, "writing the CBF files", st);
}

static sw_status run_disk(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)sample;
    sw_find_source src = {disk_read, NULL, NULL, j};
    j->spots.count = 0;
    const double t0 = sw_bench_now_us();
    sw_status st = sw_find_sequence(j->plan, 0, j->nstream, &src, 0, &j->spots, NULL);
    if (st == SW_OK)
        st = summarise_all(j, 0, j->nstream);
    *measured_us = (sw_bench_now_us() - t0) / (double)j->nstream;
    return st;
}

static int bench_detector(const sw_bench_options *o, sw_context *ctx, const detector *d,
                          const char *dir)
{
    sw_diffraction_geometry g;
    geometry(d, &g);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.h5", dir, d->name);
    sw_image host[POOL], dev[POOL];
    memset(host, 0, sizeof host);
    memset(dev, 0, sizeof dev);
    int rc = make_file(ctx, d, &g, path, host);
    const int cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    job j;
    memset(&j, 0, sizeof j);
    j.ctx = ctx;
    j.g = &g;
    j.w = d->w;
    j.h = d->h;
    /* d >= 50 A, the ice rings, the beam stop (60 px) and its arm to the right-hand edge */
    sw_diffraction_shape shapes[2] = {
        {SW_DIFFRACTION_CIRCLE, {g.beam_x_px, g.beam_y_px, 60.0, 0.0}, 0, NULL},
        {SW_DIFFRACTION_RECT,
         {g.beam_x_px, (double)d->w, g.beam_y_px - 12.0, g.beam_y_px + 12.0},
         0,
         NULL},
    };
    sw_diffraction_mask_params mp;
    memset(&mp, 0, sizeof mp);
    mp.d_max = 50.0;
    mp.ice_rings = 1;
    mp.shapes = shapes;
    mp.nshapes = 2;
    j.mp = &mp;
    char config[128];
    snprintf(config, sizeof config, "%s %s", d->name, sw_pixel_type_string(d->type));
    if (rc == 0) {
        j.mask = malloc((size_t)d->w * d->h);
        if (!j.mask) {
            fprintf(stderr, "%s: out of memory\n", PROG);
            rc = 1;
        }
    }
    sw_bench_case cm = {"diffraction_mask", config, ctx, run_mask, &j, 0, 1, "masks"};
    if (rc == 0 && sw_bench_run(o, &cm, NULL) != SW_OK)
        rc = 1;
    sw_find_params p;
    sw_find_params_default(&p, d->w, d->h, d->type);
    p.mask = j.mask;
    sw_status st = SW_OK;
    if (rc == 0 && (st = sw_find_create(ctx, &p, &j.plan)) != SW_OK)
        rc = fail(ctx, "sw_find_create", st);
    j.frames = host;
    if (rc == 0 && cuda) {
        for (int i = 0; i < POOL && st == SW_OK; i++) {
            st = sw_image_alloc_device(ctx, d->w, d->h, d->type, &dev[i]);
            if (st == SW_OK)
                st = sw_image_copy(ctx, &host[i], &dev[i]);
        }
        if (st != SW_OK)
            rc = fail(ctx, "device frames", st);
        j.frames = dev;
    }
    sw_bench_case cf = {"summary_frame", config, ctx, run_frame, &j, 0, 1, "frames"};
    if (rc == 0 && sw_bench_run(o, &cf, NULL) != SW_OK)
        rc = 1;
    if (rc == 0 && !o->json_only)
        fprintf(stderr,
                "%s: %s: %lld spots (%lld with d < 4 A), resolution estimate %.2f A, "
                "%.1f%% of the pixels masked by geometry\n",
                PROG, config, (long long)j.last.n_spots, (long long)j.last.n_spots_d_lt_4a,
                j.last.d_min_estimate, 100.0 * (double)j.masked / ((double)d->w * d->h));
    /* the reader decodes a frame's bitshuffle/LZ4 blocks on the context's threads (--threads) */
    sw_h5_options ho;
    sw_h5_options_default(&ho);
    ho.threads = sw_context_threads(ctx);
    if (rc == 0 && (st = sw_h5_open_ex(NULL, path, &ho, &j.h5)) != SW_OK)
        rc = fail(ctx, "opening the HDF5 file", st);
    if (rc == 0 && (st = sw_image_alloc(ctx, d->w, d->h, d->type, &j.readbuf)) != SW_OK)
        rc = fail(ctx, "a frame buffer", st);
    sw_bench_case cr = {"read_disk", config, ctx, run_read, &j, 0, 1, "frames"};
    if (rc == 0 && sw_bench_run(o, &cr, NULL) != SW_OK)
        rc = 1;
    if (rc == 0 && d->type == SW_PIX_U32 && !o->quick) {
        rc = write_cbfs(ctx, d, dir, host, &j);
        sw_bench_case cc = {"read_cbf", config, ctx, run_cbf, &j, 0, 1, "frames"};
        if (rc == 0 && sw_bench_run(o, &cc, NULL) != SW_OK)
            rc = 1;
        for (int i = 0; i < POOL; i++)
            if (j.cbf[i][0])
                unlink(j.cbf[i]);
    }
    j.nstream = cuda ? 32 : (o->quick ? 4 : 8);
    sw_bench_case cd = {"summary_disk", config, ctx, run_disk, &j, 0, 1, "frames"};
    if (rc == 0 && sw_bench_run(o, &cd, NULL) != SW_OK)
        rc = 1;
    sw_h5_close(j.h5);
    sw_image_free(&j.readbuf);
    sw_find_destroy(j.plan);
    sw_spot_list_free(&j.spots);
    free(j.mask);
    for (int i = 0; i < POOL; i++) {
        sw_image_free(&host[i]);
        sw_image_free(&dev[i]);
    }
    unlink(path);
    return rc;
}

/* ---------------------------------------------------------------- --decode */

typedef struct djob {
    sw_context *ctx;
    sw_h5_reader *h5;
    sw_find_plan *plan;
    size_t cap, frame_bytes, es;
    int64_t max_chunks, nstream, gpu_frames;
    uint8_t *comp[POOL]; /* each pool frame's stored chunks */
    size_t comp_bytes[POOL];
    sw_find_chunk *chunks[POOL];
    int64_t nchunks[POOL];
    sw_find_chunk *scratch; /* read_chunks' */
    sw_bshuf_block *table;  /* table_walk's */
    size_t table_cap;
    uint8_t *buf, *out;
    sw_image pinned, dev;
    sw_spot_list spots;
} djob;

static sw_status djob_read(void *user, int64_t index, sw_image *dst)
{
    return sw_h5_read_frame(((djob *)user)->h5, index % POOL, dst);
}

static sw_status djob_chunks(void *user, int64_t index, void *buf, size_t cap,
                             sw_find_chunk *chunks, int64_t max_chunks, int64_t *nchunks)
{
    return sw_h5_read_frame_chunks(((djob *)user)->h5, index % POOL, buf, cap, chunks, max_chunks,
                                   nchunks);
}

static sw_status run_read_chunks(void *user, int sample, double *measured_us)
{
    djob *j = user;
    (void)measured_us;
    int64_t n = 0;
    return sw_h5_read_frame_chunks(j->h5, sample % POOL, j->buf, j->cap, j->scratch, j->max_chunks,
                                   &n);
}

static sw_status run_table_walk(void *user, int sample, double *measured_us)
{
    djob *j = user;
    (void)measured_us;
    const int k = sample % POOL;
    size_t n, big, bad;
    if (sw_bshuf_frame_walk(j->comp[k], j->comp_bytes[k], j->chunks[k], (size_t)j->nchunks[k],
                            j->es, j->frame_bytes, j->table, j->table_cap, &n, &big, &bad) != 0)
        return sw_error_set(j->ctx, SW_EFORMAT, "table_walk: chunk %zu refused", bad + 1);
    return SW_OK;
}

static sw_status run_decode_cpu(void *user, int sample, double *measured_us)
{
    djob *j = user;
    (void)measured_us;
    const int k = sample % POOL;
    char why[256];
    for (int64_t c = 0; c < j->nchunks[k]; c++) {
        const sw_find_chunk *ch = &j->chunks[k][c];
        if (sw_bshuf_decode_lz4_mt(j->comp[k] + ch->offset, (size_t)ch->size,
                                   j->out + ch->out_offset, (size_t)ch->out_size, j->es,
                                   sw_context_threads(j->ctx), why, sizeof why) != 0)
            return sw_error_set(j->ctx, SW_EFORMAT, "decode_cpu: %s", why);
    }
    return SW_OK;
}

#ifdef SW_HAVE_CUDA
static sw_status run_decode_gpu(void *user, int sample, double *measured_us)
{
    djob *j = user;
    const int k = sample % POOL;
    char why[256];
    float ms = 0.0f;
    if (sw_bshuf_decode_frame_gpu(j->comp[k], j->comp_bytes[k], j->chunks[k], (size_t)j->nchunks[k],
                                  j->es, j->out, j->frame_bytes, &ms, why, sizeof why) != 0)
        return sw_error_set(j->ctx, SW_EFORMAT, "decode_gpu_kernel: %s", why);
    *measured_us = 1000.0 * ms;
    return SW_OK;
}
#endif

static sw_status run_h2d(void *user, int sample, double *measured_us)
{
    djob *j = user;
    (void)sample;
    (void)measured_us;
    return sw_image_copy(j->ctx, &j->pinned, &j->dev);
}

static sw_status run_find_cpu_decode(void *user, int sample, double *measured_us)
{
    djob *j = user;
    (void)sample;
    sw_find_source src = {djob_read, NULL, NULL, j};
    j->spots.count = 0;
    const double t0 = sw_bench_now_us();
    sw_status st =
        sw_find_sequence_chunks(j->plan, 0, j->nstream, &src, NULL, 0, &j->spots, NULL, NULL);
    *measured_us = (sw_bench_now_us() - t0) / (double)j->nstream;
    return st;
}

static sw_status run_find_gpu_decode(void *user, int sample, double *measured_us)
{
    djob *j = user;
    (void)sample;
    sw_find_source src = {djob_read, NULL, NULL, j};
    sw_find_chunk_source cs = {djob_chunks, j->cap, j->max_chunks, 4, j};
    j->spots.count = 0;
    j->gpu_frames = 0;
    const double t0 = sw_bench_now_us();
    sw_status st = sw_find_sequence_chunks(j->plan, 0, j->nstream, &src, &cs, 0, &j->spots, NULL,
                                           &j->gpu_frames);
    *measured_us = (sw_bench_now_us() - t0) / (double)j->nstream;
    if (st == SW_OK && j->gpu_frames != j->nstream)
        return sw_error_set(j->ctx, SW_EINTERNAL,
                            "only %lld of %lld frames were decoded on the GPU",
                            (long long)j->gpu_frames, (long long)j->nstream);
    return st;
}

static int bench_decode(const sw_bench_options *o, sw_context *ctx, const detector *d,
                        const char *dir)
{
    if (!sw_h5_bitshuffle_available()) {
        fprintf(stderr, "%s: --decode needs HDF5's bitshuffle filter (32008) to write the file\n",
                PROG);
        return 1;
    }
    sw_diffraction_geometry g;
    geometry(d, &g);
    char path[4096];
    snprintf(path, sizeof path, "%.4000s/%.40s_bslz4.h5", dir, d->name);
    sw_image host[POOL];
    memset(host, 0, sizeof host);
    int rc = make_file(ctx, d, &g, path, host);
    const int cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    djob j;
    memset(&j, 0, sizeof j);
    j.ctx = ctx;
    j.es = sw_pixel_size(d->type);
    j.frame_bytes = (size_t)d->w * d->h * j.es;
    sw_status st = SW_OK;
    sw_h5_options ho;
    sw_h5_options_default(&ho);
    ho.threads = sw_context_threads(ctx);
    if (rc == 0 && (st = sw_h5_open_ex(NULL, path, &ho, &j.h5)) != SW_OK)
        rc = fail(ctx, "opening the HDF5 file", st);
    if (rc == 0 && (st = sw_h5_frame_chunks_limits(j.h5, &j.cap, &j.max_chunks)) != SW_OK)
        rc = fail(ctx, "sw_h5_frame_chunks_limits", st);
    if (rc == 0 && j.max_chunks == 0) {
        fprintf(stderr, "%s: the file's frames are not read as bitshuffle/LZ4 chunks\n", PROG);
        rc = 1;
    }
    double stored = 0.0;
    if (rc == 0) {
        j.buf = malloc(j.cap);
        j.out = malloc(j.frame_bytes);
        j.scratch = calloc((size_t)j.max_chunks, sizeof(sw_find_chunk));
        j.table_cap = sw_bshuf_frame_table_max(j.frame_bytes, j.es, (size_t)j.max_chunks);
        j.table = malloc(j.table_cap * sizeof(sw_bshuf_block));
        for (int k = 0; k < POOL; k++) {
            j.comp[k] = malloc(j.cap);
            j.chunks[k] = calloc((size_t)j.max_chunks, sizeof(sw_find_chunk));
        }
        for (int k = 0; k < POOL && rc == 0; k++) {
            if (!j.buf || !j.out || !j.scratch || !j.table || !j.comp[k] || !j.chunks[k]) {
                rc = fail(ctx, "out of memory", SW_ENOMEM);
                break;
            }
            st = sw_h5_read_frame_chunks(j.h5, k, j.comp[k], j.cap, j.chunks[k], j.max_chunks,
                                         &j.nchunks[k]);
            if (st != SW_OK)
                rc = fail(NULL, "sw_h5_read_frame_chunks", st);
            for (int64_t c = 0; c < j.nchunks[k]; c++)
                j.comp_bytes[k] += (size_t)j.chunks[k][c].size;
            stored += (double)j.comp_bytes[k] / POOL;
        }
    }
    char config[128];
    snprintf(config, sizeof config, "%s %s bitshuffle/LZ4", d->name, sw_pixel_type_string(d->type));
    if (rc == 0 && !o->json_only)
        fprintf(stderr,
                "%s: %s: %.2f MB stored per frame of %.2f MB (compression ratio %.2f; background "
                "0.8 counts a pixel, Poisson, spots of 30 .. 3000 counts)\n",
                PROG, config, stored / 1e6, (double)j.frame_bytes / 1e6,
                (double)j.frame_bytes / stored);
    sw_bench_result rread = {0}, rkern = {0};
    sw_bench_case cr = {"read_chunks", config, ctx, run_read_chunks, &j, stored, 0, NULL};
    if (rc == 0 && sw_bench_run(o, &cr, &rread) != SW_OK)
        rc = 1;
    /* the host's part of the GPU decoder: every block count of the frame checked into the table
     * (on a reader thread, per frame) */
    sw_bench_case cw = {"table_walk", config, ctx, run_table_walk, &j, 0, 1, "frames"};
    if (rc == 0 && sw_bench_run(o, &cw, NULL) != SW_OK)
        rc = 1;
    sw_bench_case cc = {"decode_cpu", config, ctx, run_decode_cpu, &j, 0, 1, "frames"};
    if (rc == 0 && sw_bench_run(o, &cc, NULL) != SW_OK)
        rc = 1;
#ifdef SW_HAVE_CUDA
    sw_bench_case cg = {"decode_gpu_kernel", config, ctx, run_decode_gpu, &j, 0, 1, "frames"};
    if (rc == 0 && cuda && sw_bench_run(o, &cg, &rkern) != SW_OK)
        rc = 1;
#endif
    sw_bench_result bw = {0};
    if (rc == 0 && cuda) {
        if ((st = sw_image_alloc(ctx, d->w, d->h, d->type, &j.pinned)) != SW_OK ||
            (st = sw_image_alloc_device(ctx, d->w, d->h, d->type, &j.dev)) != SW_OK)
            rc = fail(ctx, "frame buffers", st);
        sw_bench_case ch = {"h2d_pinned", config, ctx, run_h2d, &j, (double)j.frame_bytes, 0, NULL};
        if (rc == 0 && sw_bench_run(o, &ch, &bw) != SW_OK)
            rc = 1;
        if (rc == 0 && !o->json_only && bw.median_us > 0)
            fprintf(stderr,
                    "%s: PCIe floor at %.1f GB/s pinned: raw %.0f us (%.0f frames/s), "
                    "compressed %.0f us (%.0f frames/s)\n",
                    PROG, (double)j.frame_bytes / bw.median_us / 1e3, bw.median_us,
                    1e6 / bw.median_us, bw.median_us * stored / (double)j.frame_bytes,
                    1e6 / (bw.median_us * stored / (double)j.frame_bytes));
        /* what frames reach the device at, decoded, without the find: the slowest of the four
         * readers' reads, the compressed copy and the decoding kernel (they overlap) */
        const double read_us = rread.median_us / 4.0,
                     copy_us = bw.median_us * stored / (double)j.frame_bytes,
                     kern_us = rkern.median_us;
        double worst = read_us > copy_us ? read_us : copy_us;
        worst = kern_us > worst ? kern_us : worst;
        if (rc == 0 && !o->json_only && worst > 0)
            fprintf(stderr,
                    "%s: decoded frames delivered at most every %.0f us (%.0f frames/s): reading "
                    "%.0f us a frame over 4 threads, copying %.0f us, decoding %.0f us\n",
                    PROG, worst, 1e6 / worst, read_us, copy_us, kern_us);
    }
    sw_find_params p;
    sw_find_params_default(&p, d->w, d->h, d->type);
    if (rc == 0 && (st = sw_find_create(ctx, &p, &j.plan)) != SW_OK)
        rc = fail(ctx, "sw_find_create", st);
    j.nstream = cuda ? 64 : (o->quick ? 4 : 8);
    sw_bench_result rcpu = {0}, rgpu = {0};
    sw_bench_case fc = {
        "find_file_cpu_decode", config, ctx, run_find_cpu_decode, &j, 0, 1, "frames"};
    if (rc == 0 && sw_bench_run(o, &fc, &rcpu) != SW_OK)
        rc = 1;
    /* the CPU decoder's spots, to compare with the GPU decoder's */
    const int64_t ncpu = j.spots.count;
    sw_spot *cpu_spots = malloc((size_t)(ncpu ? ncpu : 1) * sizeof(sw_spot));
    if (rc == 0 && !cpu_spots)
        rc = fail(NULL, "out of memory", SW_ENOMEM);
    if (rc == 0 && ncpu)
        memcpy(cpu_spots, j.spots.spots, (size_t)ncpu * sizeof(sw_spot));
    if (rc == 0 && cuda) {
        sw_bench_case fg = {
            "find_file_gpu_decode", config, ctx, run_find_gpu_decode, &j, 0, 1, "frames"};
        if (sw_bench_run(o, &fg, &rgpu) != SW_OK)
            rc = 1;
        if (rc == 0 &&
            (ncpu != j.spots.count ||
             memcmp(cpu_spots, j.spots.spots, (size_t)j.spots.count * sizeof(sw_spot)) != 0)) {
            fprintf(stderr, "%s: the GPU decoder's spots differ from the CPU decoder's\n", PROG);
            rc = 1;
        }
        if (rc == 0 && !o->json_only)
            fprintf(stderr,
                    "%s: whole find from the file: %.0f frames/s with the CPU decoder, %.0f "
                    "with the GPU decoder (%lld spots in %lld frames, identical)\n",
                    PROG, rcpu.throughput, rgpu.throughput, (long long)j.spots.count,
                    (long long)j.nstream);
    }
    free(cpu_spots);
    sw_find_destroy(j.plan);
    sw_spot_list_free(&j.spots);
    sw_h5_close(j.h5);
    sw_image_free(&j.pinned);
    sw_image_free(&j.dev);
    free(j.buf);
    free(j.out);
    free(j.scratch);
    free(j.table);
    for (int k = 0; k < POOL; k++) {
        free(j.comp[k]);
        free(j.chunks[k]);
        sw_image_free(&host[k]);
    }
    unlink(path);
    return rc;
}

int main(int argc, char **argv)
{
    /* --decode (this program's own option) is taken out before the common ones are parsed */
    int decode = 0, n = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--decode"))
            decode = 1;
        else
            argv[n++] = argv[i];
    }
    argc = n;
    sw_bench_options o;
    int rc =
        sw_bench_parse_args(argc, argv, PROG,
                            "  --decode     the Eiger frames as bitshuffle/LZ4 chunks: the CPU "
                            "and GPU decoders\n",
                            &o);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    sw_context *ctx = NULL;
    if (sw_bench_context(&o, PROG, &ctx) != 0)
        return 1;
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/bench_diffraction.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "%s: cannot make a folder in %s\n", PROG, tmp && *tmp ? tmp : "/tmp");
        sw_context_destroy(ctx);
        return 1;
    }
    static const detector eiger = {"eiger16m", 4148, 4362, SW_PIX_U16, 0.075,
                                   150.0,      1028, 512,  12,         38};
    static const detector pilatus = {"pilatus6m", 2463, 2527, SW_PIX_U32, 0.172,
                                     300.0,       487,  195,  7,          17};
    static const detector small = {"1024", 1024, 1024, SW_PIX_U16, 0.075, 60.0, 0, 0, 0, 0};
    rc = 0;
    if (decode) {
        rc = bench_decode(&o, ctx, o.quick ? &small : &eiger, dir);
    } else if (o.quick) {
        rc = bench_detector(&o, ctx, &small, dir);
    } else {
        rc = bench_detector(&o, ctx, &eiger, dir);
        if (rc == 0)
            rc = bench_detector(&o, ctx, &pilatus, dir);
    }
    rmdir(dir);
    sw_bench_finish(&o);
    if (!o.json_only)
        fprintf(stderr, "detector rates: Eiger2 16M 133 Hz (7.5 ms a frame) at 16 bit; Eiger2 "
                        "4M 560 Hz (1.8 ms)\n");
    sw_context_destroy(ctx);
    return rc;
}
