/*
 * bench_find: DIALS dispersion spot finding (find.h, seed 003) on detector-sized frames.
 *
 * Frames: simulated diffraction-like patterns from the star simulator: Gaussian spots (sigma
 * 1 px, fluxes 30 .. 3000 counts, a few per 10^4 pixels) on a Poisson background of 0.8 counts
 * per pixel, u16 or u32, with the module gaps of an Eiger 16M marked as 0xffff (masked as
 * overloaded, as the detector flags them). Sizes: "eiger16m" 4148 x 4362 (16- and 32-bit) and
 * 2048 x 2048 (16-bit). A pool of 4 distinct frames (more bytes than the H100's L2) is cycled.
 * --quick: 2048 x 2048 only and fewer repetitions.
 *
 * Cases (the "bench" field), per size and algorithm (dispersion / dispersion_extended):
 *   find_threshold_gpu  sw_find_threshold_gpu on a device frame; CUDA events (device time);
 *                       config "... brute" and "... tiled" (the two window-sum kernels)
 *   find_label_gpu      connected components + component table (sw_find_label_gpu, copies the
 *                       table to the host and synchronises); host clock
 *   find_frame_gpu      the whole find on a device-resident frame (sw_find_run: threshold,
 *                       counts, labels, components, spots); host clock
 *   find_upload_gpu     one frame from tight pinned host memory to the device (the bandwidth
 *                       that bounds streaming); GB/s
 *   find_stream_gpu     sw_find_sequence over 64 frames given in pinned host memory: reader
 *                       thread -> upload on the copy stream -> find, overlapped; time per frame
 *                       (throughput in frames/s)
 *   find_cpu            sw_find_run on a CPU context (summed-area tables, OpenMP)
 * The table at the end sets the published anchors beside them: DIALS on a CPU ~1.6 s per Eiger
 * 16M frame for per-image analysis, and a GPU service aiming at 500 Hz (issue 6).
 */
#include "harness.h"

#include "../src/find/find_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef SW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PROG         "bench_find"
#define POOL         4
#define STREAM_COUNT 64
#define SEED         0xF1D0ull

typedef struct frames {
    int32_t w, h;
    sw_pixel_type type;
    sw_image host[POOL]; /* pinned on CUDA */
    sw_image dev[POOL];
    int ndev;
} frames;

static void frames_free(frames *f)
{
    for (int i = 0; i < POOL; i++) {
        sw_image_free(&f->host[i]);
        sw_image_free(&f->dev[i]);
    }
}

static int fail(sw_context *ctx, const char *what, sw_status st)
{
    fprintf(stderr, "%s: %s: %s\n", PROG, what,
            sw_context_error(ctx)[0] ? sw_context_error(ctx) : sw_status_string(st));
    return 1;
}

/* Approximately the Eiger 16M module gaps: 4 x 8 modules of 1030 x 514 px. */
static int in_gap(int32_t x, int32_t y, int32_t w, int32_t h)
{
    if (w < 4000 || h < 4000)
        return 0;
    int32_t mx = x % 1039, my = y % 551;
    return mx >= 1030 || my >= 514;
}

static int make_frames(sw_context *ctx, int32_t w, int32_t h, sw_pixel_type t, frames *f)
{
    memset(f, 0, sizeof *f);
    f->w = w;
    f->h = h;
    f->type = t;
    sw_starsim_params sp;
    sw_starsim_params_default(&sp);
    sp.width = w;
    sp.height = h;
    sp.sigma = 1.0;
    sp.roi_side = 9;
    sp.psf = SW_PSF_INTEGRATED;
    int64_t nspots = (int64_t)w * h / 8000; /* ~2200 on an Eiger 16M */
    sp.max_stars = nspots;
    sw_starsim *sim = NULL;
    sw_image e = {0};
    sw_status st = sw_starsim_create(ctx, &sp, &sim);
    if (st == SW_OK)
        st = sw_image_alloc(ctx, w, h, SW_PIX_F32, &e);
    for (int i = 0; i < POOL && st == SW_OK; i++) {
        sw_stars stars;
        st =
            sw_stars_random(ctx, nspots, w, h, 0.0, 5.0, 3000.0, 2.512, SEED + (uint64_t)i, &stars);
        if (st != SW_OK)
            break;
        st = sw_starsim_run(sim, &stars, &e);
        sw_stars_free(&stars);
        sw_detector d;
        sw_detector_default(&d);
        d.sky_e = 0.8;
        d.shot_noise = 1;
        d.read_noise_e = 0.0;
        d.gain_e_per_adu = 1.0;
        d.bias_adu = 0.0;
        d.out_type = t;
        d.seed = SEED + 100 + (uint64_t)i;
        if (st == SW_OK)
            st = sw_image_alloc(ctx, w, h, t, &f->host[i]);
        if (st == SW_OK)
            st = sw_detector_apply(ctx, &d, &e, &f->host[i]);
        if (st != SW_OK)
            break;
        for (int32_t y = 0; y < h; y++)
            for (int32_t x = 0; x < w; x++)
                if (in_gap(x, y, w, h)) {
                    void *row = sw_image_row(&f->host[i], y);
                    if (t == SW_PIX_U16)
                        ((uint16_t *)row)[x] = 0xffff;
                    else
                        ((uint32_t *)row)[x] = 0xffffffffu;
                }
        if (sw_context_backend(ctx) == SW_BACKEND_CUDA) {
            st = sw_image_alloc_device(ctx, w, h, t, &f->dev[i]);
            if (st == SW_OK)
                st = sw_image_copy(ctx, &f->host[i], &f->dev[i]);
            f->ndev = i + 1;
        }
    }
    sw_image_free(&e);
    sw_starsim_destroy(sim);
    if (st != SW_OK) {
        frames_free(f);
        return fail(ctx, "making the frames", st);
    }
    return 0;
}

typedef struct job {
    sw_context *ctx;
    sw_find_plan *plan;
    frames *f;
    sw_find_window window;
    uint8_t *d_strong;
    int32_t *d_labels;
    sw_spot_list spots;
    int64_t last_spots;
    sw_image tight; /* a frame with tight rows in pinned memory (find_upload_gpu) */
#ifdef SW_HAVE_CUDA
    cudaEvent_t e0, e1;
#endif
} job;

#ifdef SW_HAVE_CUDA
static sw_status run_threshold(void *user, int sample, double *measured_us)
{
    job *j = user;
    cudaStream_t s = (cudaStream_t)sw_context_stream(j->ctx);
    cudaEventRecord(j->e0, s);
    sw_status st =
        sw_find_threshold_gpu(j->plan, &j->f->dev[sample % POOL], j->d_strong, j->window, NULL, s);
    cudaEventRecord(j->e1, s);
    if (st != SW_OK)
        return st;
    if (cudaEventSynchronize(j->e1) != cudaSuccess)
        return SW_ECUDA;
    float ms = 0;
    cudaEventElapsedTime(&ms, j->e0, j->e1);
    *measured_us = 1000.0 * ms;
    return SW_OK;
}

static sw_status run_label(void *user, int sample, double *measured_us)
{
    job *j = user;
    cudaStream_t s = (cudaStream_t)sw_context_stream(j->ctx);
    /* The strong mask of this sample's frame first (not timed). */
    sw_status st = sw_find_threshold_gpu(j->plan, &j->f->dev[sample % POOL], j->d_strong,
                                         j->plan->window, NULL, s);
    if (st == SW_OK)
        st = sw_context_synchronize(j->ctx);
    if (st != SW_OK)
        return st;
    int64_t n = 0;
    double t0 = sw_bench_now_us();
    st = sw_find_label_gpu(j->plan, j->d_strong, &j->f->dev[sample % POOL], j->d_labels,
                           j->plan->comps, j->plan->p.max_components, &n, s);
    *measured_us = sw_bench_now_us() - t0;
    return st;
}
#endif

static sw_status run_frame(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)measured_us;
    const sw_image *img = j->f->ndev ? &j->f->dev[sample % POOL] : &j->f->host[sample % POOL];
    j->spots.count = 0;
    sw_status st = sw_find_run(j->plan, img, sample, &j->spots, NULL, NULL);
    j->last_spots = j->spots.count;
    return st;
}

#ifdef SW_HAVE_CUDA
/* One upload of a frame from a tight pinned buffer into the plan's device slot: the
 * host-to-device bandwidth that bounds find_stream_gpu. */
static sw_status run_upload(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)sample;
    double t0 = sw_bench_now_us();
    sw_status st = sw_find_gpu_upload(j->plan, &j->tight, 0);
    if (st == SW_OK)
        st = sw_find_gpu_upload_wait(j->plan, 0);
    *measured_us = sw_bench_now_us() - t0;
    return st;
}

/* The streamed pipeline (sw_find_sequence with uploads overlapped): a GPU case only. */
static sw_status stream_read(void *user, int64_t index, sw_image *dst)
{
    /* The two host buffers get distinct frames once (the first two reads); later frames reuse
     * what is in them, so that the time measured is the pipeline's (upload + find), not a
     * memcpy into the buffer. */
    frames *f = user;
    if (index < 2) {
        const sw_image *src = &f->host[index % POOL];
        size_t row = (size_t)f->w * sw_pixel_size(f->type);
        for (int32_t y = 0; y < f->h; y++)
            memcpy(sw_image_row(dst, y), sw_image_row(src, y), row);
    }
    return SW_OK;
}

static sw_status run_stream(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)sample;
    sw_find_source src = {stream_read, NULL, NULL, j->f};
    j->spots.count = 0;
    double t0 = sw_bench_now_us();
    sw_status st = sw_find_sequence(j->plan, 0, STREAM_COUNT, &src, 0, &j->spots, NULL);
    *measured_us = (sw_bench_now_us() - t0) / STREAM_COUNT;
    return st;
}
#endif

static int bench_size(const sw_bench_options *o, sw_context *ctx, sw_context *cpu, int32_t w,
                      int32_t h, sw_pixel_type t)
{
    frames f, fc;
    if (make_frames(ctx, w, h, t, &f) != 0)
        return 1;
    int rc = 0;
    char config[128];
    for (int a = 0; a < 2 && rc == 0; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, t);
        p.algorithm = a ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION;
        const char *alg = a ? "ext" : "disp";
        const char *size = w == 4148 ? "eiger16m" : "2048";
        job j;
        memset(&j, 0, sizeof j);
        j.ctx = ctx;
        j.f = &f;
        sw_status st = sw_find_create(ctx, &p, &j.plan);
        if (st != SW_OK) {
            rc = fail(ctx, "sw_find_create", st);
            break;
        }
#ifdef SW_HAVE_CUDA
        if (sw_context_backend(ctx) == SW_BACKEND_CUDA) {
            size_t n = (size_t)w * h;
            if (cudaMalloc((void **)&j.d_strong, n) != cudaSuccess ||
                cudaMalloc((void **)&j.d_labels, n * sizeof(int32_t)) != cudaSuccess ||
                cudaEventCreate(&j.e0) != cudaSuccess || cudaEventCreate(&j.e1) != cudaSuccess) {
                fprintf(stderr, "%s: CUDA allocation failed\n", PROG);
                rc = 1;
            }
            for (int win = 1; win <= 2 && rc == 0; win++) {
                j.window = (sw_find_window)win;
                snprintf(config, sizeof config, "%s %s %s %s", size, sw_pixel_type_string(t), alg,
                         win == 1 ? "brute" : "tiled");
                sw_bench_case c = {"find_threshold_gpu", config,  ctx, run_threshold, &j, 0,
                                   (double)w * h / 1e6,  "Mpixel"};
                if (sw_bench_run(o, &c, NULL) != SW_OK)
                    rc = 1;
            }
            snprintf(config, sizeof config, "%s %s %s", size, sw_pixel_type_string(t), alg);
            sw_bench_case cl = {"find_label_gpu", config, ctx, run_label, &j, 0, 1, "frames"};
            if (rc == 0 && sw_bench_run(o, &cl, NULL) != SW_OK)
                rc = 1;
            sw_bench_case cf = {"find_frame_gpu", config, ctx, run_frame, &j, 0, 1, "frames"};
            if (rc == 0 && sw_bench_run(o, &cf, NULL) != SW_OK)
                rc = 1;
            if (rc == 0 && !o->json_only)
                fprintf(stderr, "%s: %s: %lld spots per frame\n", PROG, config,
                        (long long)j.last_spots);
            size_t fbytes = (size_t)w * h * sw_pixel_size(t);
            j.tight.data = sw_host_alloc(ctx, fbytes, 1);
            j.tight.width = w;
            j.tight.height = h;
            j.tight.stride = (size_t)w * sw_pixel_size(t);
            j.tight.type = t;
            j.tight.memory = SW_MEM_PINNED;
            j.tight.owned = 1;
            sw_bench_case cu = {"find_upload_gpu", config, ctx, run_upload, &j,
                                (double)fbytes,    0,      NULL};
            if (rc == 0 && a == 0 && j.tight.data && sw_bench_run(o, &cu, NULL) != SW_OK)
                rc = 1;
            sw_image_free(&j.tight);
            sw_bench_case cs = {"find_stream_gpu", config, ctx, run_stream, &j, 0, 1, "frames"};
            if (rc == 0 && sw_bench_run(o, &cs, NULL) != SW_OK)
                rc = 1;
            cudaFree(j.d_strong);
            cudaFree(j.d_labels);
            cudaEventDestroy(j.e0);
            cudaEventDestroy(j.e1);
        }
#endif
        sw_spot_list_free(&j.spots);
        sw_find_destroy(j.plan);
        if (rc != 0 || !cpu)
            continue;
        /* The CPU: host frames on a CPU context. */
        job jc;
        memset(&jc, 0, sizeof jc);
        jc.ctx = cpu;
        fc = f;
        fc.ndev = 0;
        jc.f = &fc;
        st = sw_find_create(cpu, &p, &jc.plan);
        if (st != SW_OK) {
            rc = fail(cpu, "sw_find_create (CPU)", st);
            break;
        }
        snprintf(config, sizeof config, "%s %s %s", size, sw_pixel_type_string(t), alg);
        sw_bench_case cc = {"find_cpu", config, cpu, run_frame, &jc, 0, 1, "frames"};
        if (sw_bench_run(o, &cc, NULL) != SW_OK)
            rc = 1;
        else if (!o->json_only)
            fprintf(stderr, "%s: %s (CPU): %lld spots per frame\n", PROG, config,
                    (long long)jc.last_spots);
        sw_spot_list_free(&jc.spots);
        sw_find_destroy(jc.plan);
    }
    frames_free(&f);
    return rc;
}

int main(int argc, char **argv)
{
    sw_bench_options o;
    int rc = sw_bench_parse_args(argc, argv, PROG, NULL, &o);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    sw_context *ctx = NULL, *cpu = NULL; /* ctx: the GPU's, NULL on the CPU backend */
    if (sw_bench_contexts(&o, PROG, 1, &ctx, &cpu) != 0)
        return 1;
    sw_context *main_ctx = ctx ? ctx : cpu;
    rc = 0;
    if (ctx) {
        if (!o.quick)
            rc = bench_size(&o, ctx, cpu, 4148, 4362, SW_PIX_U16);
        if (rc == 0 && !o.quick)
            rc = bench_size(&o, ctx, cpu, 4148, 4362, SW_PIX_U32);
        if (rc == 0)
            rc = bench_size(&o, ctx, cpu, 2048, 2048, SW_PIX_U16);
    } else {
        /* CPU only: the CPU case alone. */
        if (!o.quick)
            rc = bench_size(&o, main_ctx, cpu, 4148, 4362, SW_PIX_U16);
        if (rc == 0)
            rc = bench_size(&o, main_ctx, cpu, 2048, 2048, SW_PIX_U16);
    }
    sw_bench_finish(&o);
    if (!o.json_only)
        fprintf(stderr,
                "published anchors: DIALS per-image spot finding on a CPU ~1.6 s per Eiger 16M "
                "frame; a GPU service aiming at 500 Hz (2 ms per frame)\n");
    sw_context_destroy(ctx);
    sw_context_destroy(cpu);
    return rc;
}
