/*
 * bench_centroid: Shack-Hartmann centre-of-gravity centroids (centroid.h), seed 000 Table 1.
 *
 * Configurations (seed 000 section 5): a square RoI of w_P x w_P pixels, w_P in {100, 200, 500,
 * 700, 1000}, lenslet pixel regions of width d in {3.8, 11, 20, 29} px, so nx = ny = w_L =
 * floor(w_P / d) lenslets per side (seed Eq. 5) with the grid's corner at pixel (0, 0). The
 * frames are w_P x w_P u8 images of uniformly random pixels in 0..255, as the seed's benchmark
 * images ("each pixel having random intensity I in [0, 255] to prevent memory caching
 * optimizations"). The "config" field is "w<w_P> d<d>" (batches: "w1000 d<d> B<frames>").
 * --quick: w_P in {100, 1000}, d in {3.8, 29}. --e2e: the host-to-host cases only (centroid_floor,
 * centroid_e2e_copy, _copy_whole, _copy_bands<n>, _e2e_mapped) and no CPU cases (issue 25: a
 * short run, every Table 1 size).
 *
 * Cases (the "bench" field):
 *   centroid_cpu              HOST path, the context's threads, host results (CPU backend;
 *                             also on the CUDA backend unless --json-only, for the table)
 *   centroid_kernel           DEVICE path: frame and results on the device; the kernel's device
 *                             time (sw_centroid_enable_timing / sw_centroid_kernel_us)
 *   centroid_e2e_device       DEVICE path, results copied to pinned host memory; host clock
 *   centroid_e2e_copy         COPY path: pinned host frame uploaded, pinned host results (the
 *                             default bands, sw_centroid_set_bands: one, the whole frame, since
 *                             bands measured slower on an H200)
 *   centroid_e2e_copy_whole   as centroid_e2e_copy with one band (the whole frame copied, then
 *                             one kernel: the order before issue 25)
 *   centroid_e2e_copy_bands<n>  as centroid_e2e_copy with n = 2, 4, 8 bands (fewer when the
 *                             grid has fewer lenslet rows)
 *   centroid_e2e_auto         AUTO path (what a plan gets by default: COPY, a pinned frame of at
 *                             most 256 KB read in place; centroid_cuda.cu cg_sizes), pinned frame
 *                             and results, with the floor and the ratio
 *   centroid_e2e_mapped       MAPPED path: the kernel reads the pinned host frame over the bus
 *   centroid_floor            the transfer floor of a host-to-host run (harness.h,
 *                             sw_bench_floor_case): one empty kernel + stream synchronisation,
 *                             plus the CUDA-event times of a pinned copy of the frame's bytes to
 *                             the device and of the six result arrays' bytes back (14 bytes a
 *                             lenslet + 8 a slope), measured in this program before the cases;
 *                             the e2e copy and mapped cases' JSON lines carry it ("floor_us")
 *                             and their ratios to it ("ratio": median, "ratio_p99": p99)
 *   centroid_e2e_copy_slopes  as centroid_e2e_copy, only the slopes array requested (what an AO
 *                             loop needs); w_P = 1000 only
 *   centroid_batch            DEVICE path, BATCH frames per run, results on the device, device
 *                             time; throughput in frames/s; w_P = 1000 only
 *   centroid_kernel_<method>  the methods of centroid.h (bench_methods below), kernel time as
 *                             centroid_kernel; w_P = 1000 only
 * The single-frame cases ask for all six result arrays (x, y, intensity, valid, saturated,
 * slopes); the saturation check runs (the u8 default level, 255: most lenslets of these random
 * frames hold a 255).
 * Their throughput is in GB/s: frame bytes read plus result bytes written per call.
 *
 * Rotation: each case cycles through a pool of distinct frames, max(8, 64 MiB / frame bytes)
 * of them (more than the GPU's L2 and the CPU's last-level cache), so that no run finds its frame
 * in a cache. The batches rotate over at least two, totalling more than 64 MiB.
 *
 * Unless --json-only, a last table on stderr sets our times beside the seed's Table 1 (Jetson
 * TX2). The seed's t_GPU is "the time elapsed from the issue of the extraction command to the
 * transfer of all extracted centroids" on a device whose GPU shares the CPU's memory; our
 * centroid_e2e_device (frame already in device memory, results to the host) is the nearest
 * like-for-like figure, centroid_e2e_copy adds the frame's upload.
 */
#include "harness.h"

#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef SW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PROG         "bench_centroid"
#define ROTATE_BYTES (64.0 * 1024 * 1024) /* > 60 MB: more than an H100's 50 MB of L2 */
#define MIN_FRAMES   8
#define BATCH        32 /* frames per batched run (halved while device memory is short) */
#define BATCH_WIDTH  1000
#define STREAM_RUNS  64 /* single-frame runs queued back to back per centroid_stream sample */
#define FRAME_SEED   0x5EED000ull

/* Seed 000 (Mocci et al. 2020), Table 1: t_CPU and t_GPU in microseconds on an NVIDIA Jetson TX2
 * (GPU at 1.3 GHz, CPU cores at 2 GHz), mean of 50 runs on one 8-bit random image, and the
 * speed-up t_CPU / t_GPU (Eq. 13), copied as printed. */
typedef struct seed_row {
    int w;
    double d;
    int wl2;
    double t_cpu, t_gpu, speedup;
} seed_row;

static const seed_row SEED_TABLE1[] = {
    {100, 3.8, 676, 54, 104, 0.5192},       {100, 11, 81, 44, 59, 0.7458},
    {100, 20, 25, 10, 57, 0.1754},          {100, 29, 9, 1, 57, 0.0175},
    {200, 3.8, 2704, 308, 151, 2.0397},     {200, 11, 324, 186, 57, 3.2632},
    {200, 20, 100, 158, 57, 2.7719},        {200, 29, 36, 102, 57, 1.7895},
    {500, 3.8, 17161, 2095, 615, 3.4065},   {500, 11, 2025, 1268, 208, 6.0962},
    {500, 20, 625, 1220, 165, 7.3939},      {500, 29, 289, 1106, 107, 10.3364},
    {700, 3.8, 33856, 4194, 1090, 3.8477},  {700, 11, 3969, 2475, 331, 7.4773},
    {700, 20, 1225, 2405, 265, 9.0755},     {700, 29, 576, 2228, 162, 13.7531},
    {1000, 3.8, 69169, 8922, 2307, 3.8674}, {1000, 11, 8100, 5158, 631, 8.1743},
    {1000, 20, 2500, 4266, 481, 8.8690},    {1000, 29, 1156, 3210, 317, 10.1262},
};
#define N_SEED ((int)(sizeof SEED_TABLE1 / sizeof SEED_TABLE1[0]))

static const seed_row *seed_lookup(int w, double d)
{
    for (int i = 0; i < N_SEED; i++)
        if (SEED_TABLE1[i].w == w && fabs(SEED_TABLE1[i].d - d) < 1e-9)
            return &SEED_TABLE1[i];
    return NULL;
}

/* Our medians for one configuration (NAN: not measured). */
typedef struct row {
    int w;
    double d;
    int wl2;
    double cpu, kernel, stream, graph, e2e_device, copy, mapped, slopes, batch_frame, autop,
        auto_p99;
    double floor, copy_p99, whole; /* the transfer floor, copy's p99, the one-band copy */
} row;

static void fail(sw_context *ctx, const char *what, sw_status st)
{
    const char *m = ctx ? sw_context_error(ctx) : sw_context_error(NULL);
    fprintf(stderr, "%s: %s: %s\n", PROG, what, (m && *m) ? m : sw_status_string(st));
}

/* ------------------------------------------------------------------ the pool of frames */

/*
 * A pool of nframes distinct w x w u8 frames, stacked vertically in chunk images of at most
 * SW_IMAGE_MAX_DIM rows (per_chunk frames each, a multiple of the batch size when batches are
 * cut from it, so that a batch never straddles two chunks). Host chunks (pinned on a CUDA
 * context), and their device copies on a CUDA context.
 */
typedef struct pool {
    int32_t w;
    int nframes, per_chunk, nchunks;
    sw_image *host;
    sw_image *dev; /* NULL on the CPU */
} pool;

static void pool_free(pool *p)
{
    for (int c = 0; c < p->nchunks; c++) {
        if (p->host)
            sw_image_free(&p->host[c]);
        if (p->dev)
            sw_image_free(&p->dev[c]);
    }
    free(p->host);
    free(p->dev);
    memset(p, 0, sizeof *p);
}

/* Uniform random bytes 0..255 (seed 000 section 5), 16 per Philox draw; frame rows are numbered
 * through the whole pool so that every frame differs. */
static void fill_frames(sw_image *chunk, int32_t w, int64_t first_row)
{
    const uint64_t words = ((uint64_t)w + 15) / 16;
    for (int32_t y = 0; y < chunk->height; y++) {
        uint8_t *px = sw_image_row(chunk, y);
        const uint64_t r = (uint64_t)(first_row + y);
        for (int32_t x0 = 0; x0 < w; x0 += 16) {
            sw_rng4 v = sw_rng_draw(FRAME_SEED, SW_RNG_STREAM_USER, r * words + (uint64_t)x0 / 16);
            for (int32_t k = 0; k < 16 && x0 + k < w; k++)
                px[x0 + k] = (uint8_t)(v.v[k / 4] >> (8 * (k % 4)));
        }
    }
}

static int pool_create(sw_context *ctx, int32_t w, int nframes, int batch, pool *p)
{
    memset(p, 0, sizeof *p);
    const int cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    p->w = w;
    p->per_chunk = SW_IMAGE_MAX_DIM / w;
    if (batch > 1)
        p->per_chunk -= p->per_chunk % batch;
    p->nframes = nframes;
    p->nchunks = (nframes + p->per_chunk - 1) / p->per_chunk;
    p->host = calloc((size_t)p->nchunks, sizeof *p->host);
    p->dev = cuda ? calloc((size_t)p->nchunks, sizeof *p->dev) : NULL;
    if (!p->host || (cuda && !p->dev)) {
        fprintf(stderr, "%s: out of host memory for the frame pool\n", PROG);
        pool_free(p);
        return 1;
    }
    for (int c = 0; c < p->nchunks; c++) {
        const int n = c < p->nchunks - 1 ? p->per_chunk : nframes - c * p->per_chunk;
        sw_status st = sw_image_alloc(ctx, w, n * w, SW_PIX_U8, &p->host[c]);
        if (st != SW_OK) {
            fail(ctx, "sw_image_alloc (frame pool)", st);
            pool_free(p);
            return 1;
        }
        fill_frames(&p->host[c], w, (int64_t)c * p->per_chunk * w);
        if (cuda) {
            st = sw_image_alloc_device(ctx, w, n * w, SW_PIX_U8, &p->dev[c]);
            if (st == SW_OK)
                st = sw_image_copy(ctx, &p->host[c], &p->dev[c]);
            if (st != SW_OK) {
                fail(ctx, "sw_image_alloc_device / sw_image_copy (frame pool)", st);
                pool_free(p);
                return 1;
            }
        }
    }
    return 0;
}

/* Views of `count` frames each, starting at frames 0, count, 2 count, ... of the pool's host or
 * device chunks (n views). */
static sw_image *pool_views(sw_context *ctx, const pool *p, int device, int count, int *n)
{
    *n = p->nframes / count;
    sw_image *v = calloc((size_t)*n, sizeof *v);
    if (!v) {
        fprintf(stderr, "%s: out of host memory for the frame views\n", PROG);
        return NULL;
    }
    for (int i = 0; i < *n; i++) {
        const int f = i * count;
        const sw_image *chunk = device ? &p->dev[f / p->per_chunk] : &p->host[f / p->per_chunk];
        sw_status st =
            sw_image_roi(ctx, chunk, 0, (f % p->per_chunk) * p->w, p->w, count * p->w, &v[i]);
        if (st != SW_OK) {
            fail(ctx, "sw_image_roi (frame view)", st);
            free(v);
            return NULL;
        }
    }
    return v;
}

/* ------------------------------------------------------------------ one case */

typedef struct job {
    sw_context *ctx;
    sw_centroid_plan *plan;
    const sw_image *views;
    int nviews;
    sw_centroid_result *res;
    int device_time; /* report the kernel's CUDA-event time */
    int stream;      /* > 0: this many runs back to back per sample, one synchronisation,
                        the time per run reported (launch overhead overlapped) */
} job;

static sw_status run_job(void *user, int sample, double *measured_us)
{
    job *j = user;
    if (j->stream > 0) {
        const double t0 = sw_bench_now_us();
        for (int i = 0; i < j->stream; i++) {
            sw_status st = sw_centroid_run(
                j->plan, &j->views[((int64_t)sample * j->stream + i) % j->nviews], j->res);
            if (st != SW_OK)
                return st;
        }
        sw_status st = sw_context_synchronize(j->ctx);
        *measured_us = (sw_bench_now_us() - t0) / j->stream;
        return st;
    }
    sw_status st = sw_centroid_run(j->plan, &j->views[sample % j->nviews], j->res);
    if (st != SW_OK || !j->device_time)
        return st;
    st = sw_context_synchronize(j->ctx); /* the events have been reached */
    if (st != SW_OK)
        return st;
    const double us = sw_centroid_kernel_us(j->plan);
    if (!(us >= 0)) {
        fprintf(stderr, "%s: sw_centroid_kernel_us gave no device time after a run with timing\n",
                PROG);
        return SW_EINTERNAL;
    }
    *measured_us = us;
    return SW_OK;
}

#ifdef SW_HAVE_CUDA
/* STREAM_RUNS single-frame device-path runs captured once into a CUDA graph (the launch cost of
 * a real-time loop that replays its chain as a graph): each sample launches the graph and
 * reports the time per run. */
typedef struct graph_job {
    sw_context *ctx;
    cudaGraphExec_t exec;
} graph_job;

static sw_status run_graph(void *user, int sample, double *measured_us)
{
    (void)sample;
    graph_job *g = user;
    cudaStream_t s = (cudaStream_t)sw_context_stream(g->ctx);
    const double t0 = sw_bench_now_us();
    if (cudaGraphLaunch(g->exec, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
        return SW_ECUDA;
    *measured_us = (sw_bench_now_us() - t0) / STREAM_RUNS;
    return SW_OK;
}

/* Captures the runs of j (STREAM_RUNS frames, rotated) into a graph; 0 on success. */
static int capture_graph(job *j, cudaGraphExec_t *exec)
{
    cudaStream_t s = (cudaStream_t)sw_context_stream(j->ctx);
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return 1;
    sw_status st = SW_OK;
    for (int i = 0; i < STREAM_RUNS && st == SW_OK; i++)
        st = sw_centroid_run(j->plan, &j->views[i % j->nviews], j->res);
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (st != SW_OK || e != cudaSuccess) {
        fprintf(stderr, "%s: capturing the runs into a CUDA graph failed: %s\n", PROG,
                st != SW_OK ? sw_context_error(j->ctx) : cudaGetErrorString(e));
        if (graph)
            cudaGraphDestroy(graph);
        return 1;
    }
    e = cudaGraphInstantiate(exec, graph, 0);
    cudaGraphDestroy(graph);
    return e != cudaSuccess;
}
#endif

/* Runs one case; stores its median in *median_us. 0 on success, 1 on failure. */
static int one_case_floor(const sw_bench_options *o, const char *bench, const char *config, job *j,
                          double bytes, double frames, double floor_us, double *median_us,
                          double *p99_us)
{
    sw_bench_case c = {bench, config, j->ctx, run_job, j, bytes, frames, "frame"};
    sw_bench_result r;
    if (sw_bench_run_floor(o, &c, floor_us, NULL, &r) != SW_OK)
        return 1;
    if (median_us)
        *median_us = r.median_us;
    if (p99_us)
        *p99_us = r.p99_us;
    return 0;
}

static int one_case(const sw_bench_options *o, const char *bench, const char *config, job *j,
                    double bytes, double frames, double *median_us)
{
    return one_case_floor(o, bench, config, j, bytes, frames, 0.0, median_us, NULL);
}

/* ------------------------------------------------------------------ one configuration */

static void fill_params(sw_centroid_params *p, int32_t w, double d, int32_t frames,
                        sw_centroid_path path)
{
    sw_centroid_params_default(p);
    p->geometry.x0 = p->geometry.y0 = 0.0;
    p->geometry.pitch_px = d;
    p->geometry.nx = p->geometry.ny = (int32_t)floor(w / d); /* w_L, seed Eq. (5) */
    p->geometry.valid = NULL;
    p->width = p->height = w;
    p->type = SW_PIX_U8;
    p->max_frames = frames;
    p->path = path;
}

/* Bytes a single-frame run moves: the frame read, the requested result arrays written. */
static double run_bytes(int32_t w, const sw_centroid_plan *plan, int slopes_only)
{
    const double nl = sw_centroid_plan_lenslets(plan), ns = sw_centroid_plan_slopes(plan);
    /* x, y, intensity (4 bytes each), valid, saturated (1 byte each); slopes */
    const double results = slopes_only ? 8.0 * ns : 14.0 * nl + 8.0 * ns;
    return (double)w * w + results;
}

typedef struct setup {
    const sw_bench_options *o;
    sw_context *ctx; /* the backend asked for */
    sw_context *cpu; /* the CPU context for centroid_cpu, or NULL */
    int batch;       /* frames per batched run (CUDA, w = BATCH_WIDTH) */
    int e2e_only;    /* --e2e: the host-to-host cases only */
} setup;

static int bench_cpu(const setup *s, const pool *pl, double d, const char *config, row *out)
{
    int rc = 1, nv = 0;
    sw_centroid_plan *plan = NULL;
    sw_centroid_result res = {0};
    sw_image *views = pool_views(s->cpu, pl, 0, 1, &nv);
    if (!views)
        return 1;
    /* The pool is pinned when the run is on CUDA; pinned memory is host memory to the CPU. */
    for (int i = 0; i < nv; i++)
        views[i].memory = SW_MEM_HOST;
    sw_centroid_params p;
    fill_params(&p, pl->w, d, 1, SW_CENTROID_HOST);
    sw_status st = sw_centroid_create(s->cpu, &p, &plan);
    if (st != SW_OK) {
        fail(s->cpu, "sw_centroid_create (host path)", st);
        goto done;
    }
    st = sw_centroid_result_alloc(plan, 1, SW_MEM_HOST, &res);
    if (st != SW_OK) {
        fail(s->cpu, "sw_centroid_result_alloc (host)", st);
        goto done;
    }
    job j = {s->cpu, plan, views, nv, &res, 0, 0};
    rc = one_case(s->o, "centroid_cpu", config, &j, run_bytes(pl->w, plan, 0), 0, &out->cpu);
done:
    sw_centroid_result_free(&res);
    sw_centroid_destroy(plan);
    free(views);
    return rc;
}

/*
 * The methods (centroid.h "Methods") on the frames of one configuration, w_P = 1000 only: one
 * DEVICE plan per method, device results with all ten arrays, kernel device time. Cases
 * centroid_kernel_<method>: cog_errors (CoG with error bars: the generic kernel), wcog (FWHM d/3,
 * 3 re-centrings), local, brightest (N = 9), correlation (against the pool's first frame, search
 * +-max(1, d/4)), quadcell (FWHM 2). Each with --gain 1 and the status checks on (min SNR 5,
 * max shift d/3, peak on the border).
 */
static int bench_methods(const setup *s, const pool *pl, double d, const char *config,
                         const sw_image *dv, int nd, sw_centroid_result *res)
{
    sw_context *ctx = s->ctx;
    const int32_t w = pl->w;
    static const char *const names[6] = {"centroid_kernel_cog_errors",  "centroid_kernel_wcog",
                                         "centroid_kernel_local",       "centroid_kernel_brightest",
                                         "centroid_kernel_correlation", "centroid_kernel_quadcell"};
    static const sw_centroid_method methods[6] = {
        SW_CENTROID_METHOD_COG,       SW_CENTROID_METHOD_WCOG,        SW_CENTROID_METHOD_LOCAL,
        SW_CENTROID_METHOD_BRIGHTEST, SW_CENTROID_METHOD_CORRELATION, SW_CENTROID_METHOD_QUADCELL};
    float *ref = malloc((size_t)w * (size_t)w * sizeof(float));
    sw_image hv0;
    int rc = 1;
    if (!ref || sw_image_alloc(NULL, w, w, SW_PIX_U8, &hv0) != SW_OK) {
        free(ref);
        return 1;
    }
    if (sw_image_copy(ctx, &dv[0], &hv0) == SW_OK) {
        for (int32_t y = 0; y < w; y++)
            for (int32_t x = 0; x < w; x++)
                ref[(size_t)y * w + x] = ((const uint8_t *)hv0.data)[(size_t)y * hv0.stride + x];
        rc = 0;
    }
    sw_image_free(&hv0);
    for (int m = 0; m < 6 && !rc; m++) {
        sw_centroid_params p;
        fill_params(&p, w, d, 1, SW_CENTROID_DEVICE);
        p.method = methods[m];
        p.fwhm_px = m == 5 ? 2.0 : d / 3.0;
        p.wcog_iterations = 3;
        p.brightest_n = 9;
        p.corr_reference = ref;
        p.corr_search_px = d / 4 > 1 ? (int32_t)(d / 4) : 1;
        p.gain_e_per_adu = 1.0;
        p.min_snr = 5.0;
        p.max_shift_px = d / 3.0;
        p.peak_border = 1;
        sw_centroid_plan *plan = NULL;
        sw_status st = sw_centroid_create(ctx, &p, &plan);
        if (st != SW_OK) {
            fail(ctx, "sw_centroid_create (method)", st);
            rc = 1;
            break;
        }
        sw_centroid_enable_timing(plan, 1);
        job j = {ctx, plan, dv, nd, res, 1, 0};
        double us = NAN;
        rc = one_case(s->o, names[m], config, &j, run_bytes(w, plan, 0), 0, &us);
        sw_centroid_destroy(plan);
    }
    free(ref);
    return rc;
}

static int bench_cuda(const setup *s, const pool *pl, double d, const char *config, row *out)
{
    sw_context *ctx = s->ctx;
    const sw_bench_options *o = s->o;
    const int32_t w = pl->w;
    int rc = 1, nh = 0, nd = 0, nb = 0;
    sw_centroid_plan *dev = NULL, *copy = NULL, *mapped = NULL, *autop = NULL, *batch = NULL;
    sw_centroid_result dres = {0}, pres = {0}, bres = {0}, pres_full = {0}, dres_full = {0};
    sw_image *hv = pool_views(ctx, pl, 0, 1, &nh);
    sw_image *dv = pool_views(ctx, pl, 1, 1, &nd);
    sw_image *bv = NULL;
    if (!hv || !dv)
        goto done;
    sw_centroid_params p;
    sw_status st;
#define CHECK(call, what)                                                                          \
    do {                                                                                           \
        st = (call);                                                                               \
        if (st != SW_OK) {                                                                         \
            fail(ctx, what, st);                                                                   \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

    fill_params(&p, w, d, 1, SW_CENTROID_DEVICE);
    CHECK(sw_centroid_create(ctx, &p, &dev), "sw_centroid_create (device path)");
    fill_params(&p, w, d, 1, SW_CENTROID_COPY);
    CHECK(sw_centroid_create(ctx, &p, &copy), "sw_centroid_create (copy path)");
    fill_params(&p, w, d, 1, SW_CENTROID_MAPPED);
    CHECK(sw_centroid_create(ctx, &p, &mapped), "sw_centroid_create (mapped path)");
    fill_params(&p, w, d, 1, SW_CENTROID_AUTO);
    CHECK(sw_centroid_create(ctx, &p, &autop), "sw_centroid_create (auto path)");
    CHECK(sw_centroid_result_alloc(dev, 1, SW_MEM_DEVICE, &dres), "sw_centroid_result_alloc");
    CHECK(sw_centroid_result_alloc(dev, 1, SW_MEM_PINNED, &pres), "sw_centroid_result_alloc");
    /* the plain CoG cases ask for the six arrays they always did (not status, x_var, y_var, snr:
     * the fast path would only write a status and NaNs there) */
    dres_full = dres;
    pres_full = pres;
    dres.owned = 0;
    dres.status = NULL;
    dres.x_var = dres.y_var = dres.snr = NULL;
    pres.status = NULL;
    pres.x_var = pres.y_var = pres.snr = NULL;
    const double bytes = run_bytes(w, dev, 0);

    /* the transfer floor of a host-to-host run: frame in, the six result arrays out, one sync */
    sw_bench_floor fl;
    if (sw_bench_floor_case(o, "centroid_floor", config, ctx, (double)w * w, bytes - (double)w * w,
                            &fl))
        goto done;
    out->floor = fl.floor_us;
    if (s->e2e_only)
        goto e2e;

    /* kernel only: device frame, device results, CUDA-event time */
    sw_centroid_enable_timing(dev, 1);
    job j = {ctx, dev, dv, nd, &dres, 1, 0};
    if (one_case(o, "centroid_kernel", config, &j, bytes, 0, &out->kernel))
        goto done;
    sw_centroid_enable_timing(dev, 0);

    /* single-frame runs queued back to back: the time per frame once launches overlap */
    j = (job){ctx, dev, dv, nd, &dres, 0, STREAM_RUNS};
    if (one_case(o, "centroid_stream", config, &j, bytes, 0, &out->stream))
        goto done;
#ifdef SW_HAVE_CUDA
    {
        /* the same runs replayed from a CUDA graph: the launch overhead mostly gone */
        graph_job gj = {ctx, NULL};
        j = (job){ctx, dev, dv, nd, &dres, 0, 0};
        if (capture_graph(&j, &gj.exec))
            goto done;
        sw_bench_case c = {"centroid_graph", config, ctx, run_graph, &gj, bytes, 0, "frame"};
        sw_bench_result r;
        int bad = sw_bench_run(o, &c, &r) != SW_OK;
        cudaGraphExecDestroy(gj.exec);
        if (bad)
            goto done;
        out->graph = r.median_us;
    }
#endif

    /* end to end, host clock: results in pinned host memory */
    j = (job){ctx, dev, dv, nd, &pres, 0, 0};
    if (one_case(o, "centroid_e2e_device", config, &j, bytes, 0, &out->e2e_device))
        goto done;
e2e:
    j = (job){ctx, copy, hv, nh, &pres, 0, 0};
    if (one_case_floor(o, "centroid_e2e_copy", config, &j, bytes, 0, fl.floor_us, &out->copy,
                       &out->copy_p99))
        goto done;
    {
        /* the same with one band (the whole frame, then the kernel) and with 2, 4, 8 bands */
        static const int32_t nbs[4] = {1, 2, 4, 8};
        for (int b = 0; b < 4; b++) {
            char name[64];
            if (nbs[b] == 1)
                snprintf(name, sizeof name, "centroid_e2e_copy_whole");
            else
                snprintf(name, sizeof name, "centroid_e2e_copy_bands%d", (int)nbs[b]);
            CHECK(sw_centroid_set_bands(copy, nbs[b]), "sw_centroid_set_bands");
            if (one_case_floor(o, name, config, &j, bytes, 0, fl.floor_us,
                               nbs[b] == 1 ? &out->whole : NULL, NULL))
                goto done;
        }
        CHECK(sw_centroid_set_bands(copy, 0), "sw_centroid_set_bands");
    }
    j = (job){ctx, mapped, hv, nh, &pres, 0, 0};
    if (one_case_floor(o, "centroid_e2e_mapped", config, &j, bytes, 0, fl.floor_us, &out->mapped,
                       NULL))
        goto done;
    j = (job){ctx, autop, hv, nh, &pres, 0, 0};
    if (one_case_floor(o, "centroid_e2e_auto", config, &j, bytes, 0, fl.floor_us, &out->autop,
                       &out->auto_p99))
        goto done;

    if (w == BATCH_WIDTH && !s->e2e_only) {
        /* what an AO loop reads back: the slopes only */
        sw_centroid_result sres = pres;
        sres.x = sres.y = sres.intensity = NULL;
        sres.valid = NULL;
        sres.owned = 0;
        j = (job){ctx, copy, hv, nh, &sres, 0, 0};
        if (one_case(o, "centroid_e2e_copy_slopes", config, &j, run_bytes(w, copy, 1), 0,
                     &out->slopes))
            goto done;

        /* batches of frames already on the device, results on the device, device time */
        char bconfig[96];
        snprintf(bconfig, sizeof bconfig, "%s B%d", config, s->batch);
        fill_params(&p, w, d, s->batch, SW_CENTROID_DEVICE);
        CHECK(sw_centroid_create(ctx, &p, &batch), "sw_centroid_create (device path, batch)");
        CHECK(sw_centroid_result_alloc(batch, s->batch, SW_MEM_DEVICE, &bres),
              "sw_centroid_result_alloc (batch)");
        bv = pool_views(ctx, pl, 1, s->batch, &nb);
        if (!bv)
            goto done;
        sw_centroid_enable_timing(batch, 1);
        j = (job){ctx, batch, bv, nb, &bres, 1, 0};
        double us = NAN;
        if (one_case(o, "centroid_batch", bconfig, &j, 0, s->batch, &us))
            goto done;
        out->batch_frame = us / s->batch;

        /* the methods of centroid.h on the same frames: DEVICE path, all ten result arrays on
         * the device, the kernel's device time (issue 23: within 2x of centroid_kernel) */
        if (bench_methods(s, pl, d, config, dv, nd, &dres_full))
            goto done;
    }
#undef CHECK
    rc = 0;
done:
    sw_centroid_result_free(&bres);
    sw_centroid_result_free(pres_full.owned ? &pres_full : &pres);
    sw_centroid_result_free(dres_full.owned ? &dres_full : &dres);
    sw_centroid_destroy(batch);
    sw_centroid_destroy(mapped);
    sw_centroid_destroy(autop);
    sw_centroid_destroy(copy);
    sw_centroid_destroy(dev);
    free(bv);
    free(dv);
    free(hv);
    return rc;
}

/* All d of one RoI width w: one pool of frames, then the cases of each configuration. */
static int bench_width(const setup *s, int32_t w, const double *ds, int nd, row *rows, int *nrows)
{
    const int cuda = sw_context_backend(s->ctx) == SW_BACKEND_CUDA;
    const double frame_bytes = (double)w * w;
    int nframes = (int)ceil(ROTATE_BYTES / frame_bytes);
    if (nframes < MIN_FRAMES)
        nframes = MIN_FRAMES;
    const int batch = cuda && w == BATCH_WIDTH ? s->batch : 1;
    if (batch > 1) {
        /* at least two batches, more than ROTATE_BYTES together */
        int nb = (int)ceil(ROTATE_BYTES / (frame_bytes * batch));
        nb = nb < 2 ? 2 : nb;
        if (nframes < nb * batch)
            nframes = nb * batch;
        nframes -= nframes % batch;
    }
    /* the pool lives where the cases run; for a CPU context beside a CUDA one, the CUDA
     * context's pinned pool is shared */
    pool pl;
    if (pool_create(s->ctx, w, nframes, batch, &pl))
        return 1;
    int rc = 0;
    for (int k = 0; k < nd && !rc; k++) {
        row *r = &rows[(*nrows)++];
        const double d = ds[k];
        r->w = w;
        r->d = d;
        r->wl2 = (int)floor(w / d) * (int)floor(w / d);
        r->cpu = r->kernel = r->stream = r->graph = r->e2e_device = r->copy = r->mapped =
            r->slopes = r->batch_frame = r->floor = r->copy_p99 = r->whole = r->autop =
                r->auto_p99 = NAN;
        char config[64];
        snprintf(config, sizeof config, "w%d d%g", (int)w, d);
        const seed_row *sr = seed_lookup(w, d);
        if (sr && sr->wl2 != r->wl2 && !s->o->json_only)
            fprintf(stderr, "%s: warning: %s gives %d lenslets, the seed's Table 1 %d\n", PROG,
                    config, r->wl2, sr->wl2);
        if (s->cpu)
            rc = bench_cpu(s, &pl, d, config, r);
        if (!rc && cuda)
            rc = bench_cuda(s, &pl, d, config, r);
    }
    pool_free(&pl);
    return rc;
}

/* ------------------------------------------------------------------ Table 1 */

static void print_us(double v)
{
    if (isfinite(v))
        fprintf(stderr, " %9.1f", v);
    else
        fprintf(stderr, " %9s", "-");
}

static void print_table(sw_context *ctx, const row *rows, int n)
{
    char dev[256];
    sw_bench_device_name(ctx, dev, sizeof dev);
    fprintf(stderr,
            "\n# Seed 000 Table 1 reproduced (medians, us). Ours: %s. Seed: Jetson TX2, mean of "
            "50 runs.\n"
            "# kernel = device time of one launch (CUDA events); stream = per frame, single-frame "
            "runs back to back;\n"
            "# graph = per frame, %d single-frame runs replayed from one CUDA graph;\n"
            "# e2e-dev = frame on the device, results to the host; copy = frame uploaded too;\n"
            "# mapped = frame read over the bus; slopes = copy with the slopes only; batch/fr = "
            "batched device time per frame;\n"
            "# speed-up = t_CPU / t_GPU copy (Eq. 13).\n"
            "# floor = sync (empty kernel) + frame in + results out (pinned copies, events); "
            "whole = copy with one band;\n"
            "# copy/fl, p99/fl = the copy path's median and p99 over the floor (issue 25: "
            "<= 1.2); auto = the AUTO path (a plan's default), auto/fl its median over the "
            "floor.\n",
            dev, STREAM_RUNS);
    fprintf(stderr,
            "%5s %5s %6s | %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s | %9s %9s %7s %7s %9s %7s | "
            "%9s %9s %8s\n",
            "w_P", "d", "w_L^2", "t_CPU", "kernel", "stream", "graph", "e2e-dev", "copy", "mapped",
            "slopes", "batch/fr", "speed-up", "floor", "whole", "copy/fl", "p99/fl", "auto",
            "auto/fl", "seed CPU", "seed GPU", "seed s-u");
    for (int i = 0; i < n; i++) {
        const row *r = &rows[i];
        fprintf(stderr, "%5d %5g %6d |", r->w, r->d, r->wl2);
        print_us(r->cpu);
        print_us(r->kernel);
        print_us(r->stream);
        print_us(r->graph);
        print_us(r->e2e_device);
        print_us(r->copy);
        print_us(r->mapped);
        print_us(r->slopes);
        print_us(r->batch_frame);
        const double su = r->cpu / r->copy;
        if (isfinite(su))
            fprintf(stderr, " %8.2f |", su);
        else
            fprintf(stderr, " %8s |", "-");
        print_us(r->floor);
        print_us(r->whole);
        const double q50 = r->copy / r->floor, q99 = r->copy_p99 / r->floor;
        if (isfinite(q50) && isfinite(q99))
            fprintf(stderr, " %7.2f %7.2f", q50, q99);
        else
            fprintf(stderr, " %7s %7s", "-", "-");
        print_us(r->autop);
        const double qa = r->autop / r->floor;
        if (isfinite(qa))
            fprintf(stderr, " %7.2f |", qa);
        else
            fprintf(stderr, " %7s |", "-");
        const seed_row *sr = seed_lookup(r->w, r->d);
        if (sr)
            fprintf(stderr, " %9.0f %9.0f %8.4f\n", sr->t_cpu, sr->t_gpu, sr->speedup);
        else
            fprintf(stderr, " %9s %9s %8s\n", "-", "-", "-");
    }
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    sw_bench_options o;
    /* --e2e: this program's own option (the host-to-host cases only) */
    int e2e_only = 0, na = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && strcmp(argv[i], "--e2e") == 0) {
            e2e_only = 1;
            continue;
        }
        argv[na++] = argv[i];
    }
    argv[na] = NULL;
    argc = na;
    int rc = sw_bench_parse_args(
        argc, argv, PROG,
        "Seed 000 Table 1: RoI w_P x w_P u8 frames of random pixels, w_P in {100, 200, 500,\n"
        "700, 1000}, pixel regions d in {3.8, 11, 20, 29} (--quick: w_P in {100, 1000}, d in\n"
        "{3.8, 29}). Cases: centroid_cpu (CPU backend; on CUDA too unless --json-only);\n"
        "centroid_kernel, centroid_stream, centroid_graph, centroid_e2e_device, centroid_e2e_copy, "
        "centroid_e2e_mapped, centroid_e2e_auto (CUDA);\n"
        "centroid_e2e_copy_slopes and centroid_batch (CUDA, w_P = 1000).\n"
        "--e2e: only centroid_floor and the host-to-host cases (e2e copy, its band variants,\n"
        "mapped, auto), each with the floor and the ratio to it; no CPU cases.\n",
        &o);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    sw_context *ctx = NULL, *cpu = NULL;
    if (sw_bench_context(&o, PROG, &ctx) != 0)
        return 1;
    setup s = {&o, ctx, NULL, BATCH, e2e_only};
    if (sw_context_backend(ctx) == SW_BACKEND_CPU) {
        s.cpu = ctx;
    } else {
        /* The CPU cases beside the GPU ones fill the table's t_CPU column; with --json-only
         * there is no table, and tools/gpu-check runs --backend cpu on its own. */
        if (!o.json_only && !e2e_only) {
            if (sw_bench_cpu_context(&o, PROG, &cpu) != 0) {
                sw_context_destroy(ctx);
                return 1;
            }
            s.cpu = cpu;
        }
        /* Batch size as device memory allows: the pool (>= 2 batches of 1000 x 1000 u8) and the
         * results should take at most a quarter of the free memory. */
        sw_device_info info;
        sw_status st = sw_context_device_info(ctx, &info);
        if (st != SW_OK) {
            fail(ctx, "sw_context_device_info", st);
            sw_context_destroy(cpu);
            sw_context_destroy(ctx);
            return 1;
        }
        const double per_frame = 3.0 * BATCH_WIDTH * 1024.0; /* the pool: 3 batches, pitched rows */
        while (s.batch > 1 && per_frame * s.batch > 0.25 * (double)info.free_memory)
            s.batch /= 2;
    }

    static const int32_t w_full[] = {100, 200, 500, 700, 1000}, w_quick[] = {100, 1000};
    static const double d_full[] = {3.8, 11, 20, 29}, d_quick[] = {3.8, 29};
    const int32_t *ws = o.quick ? w_quick : w_full;
    const double *ds = o.quick ? d_quick : d_full;
    const int nw = o.quick ? 2 : 5, nd = o.quick ? 2 : 4;
    row rows[20];
    int nrows = 0;
    rc = 0;
    for (int i = 0; i < nw && !rc; i++)
        rc = bench_width(&s, ws[i], ds, nd, rows, &nrows);
    sw_bench_finish(&o);
    if (!o.json_only && nrows > 0)
        print_table(ctx, rows, nrows);
    sw_context_destroy(cpu);
    sw_context_destroy(ctx);
    return rc;
}
