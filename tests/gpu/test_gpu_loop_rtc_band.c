/*
 * The band-wise real-time chain (src/loop/rtc_band.c, rtc_band_cuda.cu) against the whole-frame
 * chain (sw_rtc_run, itself tested against the CPU in test_gpu_loop_rtc.c). A producer thread
 * plays the camera: each frame is written band by band into the ring and published; the main
 * thread waits for each frame's commands and slopes.
 *
 * Frames: 16 x 16 lenslets of 10 px on a 160 x 160 u16 frame, one Gaussian spot (sigma 1.4 px)
 * per lenslet displaced at random per frame, a bias of 100 and uniform noise; corner lenslets and
 * one more left out of the mask. NFRAME distinct frames cycled over NRUN runs (the controller's
 * state carries).
 *
 * Checks:
 *   - slopes bit for bit equal to sw_rtc_run's on the same whole frames (the centroid stage's
 *     arithmetic), for a conditioned plan (dark and a subtracted threshold: float sums) and an
 *     exact one (integer sums), with bands of unequal size;
 *   - commands within a bound carried through the controller: per row and frame
 *       b = keep b + g (2 n2 2^-24 + 2^-22) sum_j |C_aj s_j| + 2^-22 |u|
 *     (the column-blocked GEMV sums in another order than cuBLAS's sgemv or the FP16 GEMV
 *     kernel, on the same half-rounded C for FP16; cuBLAS folds g C s + keep u into one call).
 *     A wrong column or row misses by |C s| itself;
 *   - a band that never comes: SW_ETIMEDOUT from the wait well before its own timeout, naming
 *     the frame and band in the stats; later calls refused;
 *   - bands out of order and a skipped frame number refused and counted; a buffer beyond the
 *     ring refused (overrun) and counted;
 *   - destroy while the kernel waits in the middle of a frame returns promptly;
 *   - the trace: each frame's stamps in the order of the kernel's phases, kept for the last
 *     `trace` frames and refused outside them; the clock relation puts the GPU's stamps between
 *     the host's publish and the host's sight of the done flag (within the round trip); no
 *     trace, no clock.
 * Skips (77) without a GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#ifndef SW_HAVE_CUDA
int main(void)
{
    return 77; /* built without CUDA */
}
#else

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NL     16
#define PITCH  10
#define SIDE   (NL * PITCH)
#define NFRAME 7
#define NRUN   120
#define BIAS   100.0f

static sw_context *gpu;
static uint16_t *frames[NFRAME]; /* host u16 SIDE x SIDE */
static float dark[SIDE * SIDE];
static uint8_t mask[NL * NL];

static double unit_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    for (int l = 0; l < NL * NL; l++) {
        const int ix = l % NL, iy = l / NL;
        mask[l] = !((ix == 0 || ix == NL - 1) && (iy == 0 || iy == NL - 1));
    }
    mask[6 * NL + 9] = 0;
    for (int i = 0; i < SIDE * SIDE; i++)
        dark[i] = BIAS;
    uint64_t seed = 77;
    for (int f = 0; f < NFRAME; f++) {
        uint16_t *im = malloc((size_t)SIDE * SIDE * sizeof *im);
        assert_non_null(im);
        for (int y = 0; y < SIDE; y++)
            for (int x = 0; x < SIDE; x++)
                im[y * SIDE + x] = (uint16_t)(BIAS + 8.0 * unit_rand(&seed));
        for (int iy = 0; iy < NL; iy++)
            for (int ix = 0; ix < NL; ix++) {
                const double cx = ix * PITCH + 0.5 * PITCH - 0.5 + 2.5 * (2 * unit_rand(&seed) - 1);
                const double cy = iy * PITCH + 0.5 * PITCH - 0.5 + 2.5 * (2 * unit_rand(&seed) - 1);
                const double amp = 1500.0 + 1500.0 * unit_rand(&seed);
                for (int y = iy * PITCH; y < (iy + 1) * PITCH; y++)
                    for (int x = ix * PITCH; x < (ix + 1) * PITCH; x++) {
                        const double r2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
                        const double v = im[y * SIDE + x] + amp * exp(-r2 / (2 * 1.4 * 1.4));
                        im[y * SIDE + x] = (uint16_t)(v > 65535.0 ? 65535.0 : v);
                    }
            }
        frames[f] = im;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int f = 0; f < NFRAME; f++)
        free(frames[f]);
    sw_context_destroy(gpu);
    return 0;
}

static int32_t nslopes(void)
{
    int32_t n = 0;
    for (int l = 0; l < NL * NL; l++)
        n += mask[l] != 0;
    return n;
}

/* ------------------------------------------------------------------ plans */

typedef struct cfg {
    int exact; /* 1: no dark, no threshold (integer sums) */
    int fp16;
    sw_controller_kind kind;
    double leak, clip;
    int32_t bands;
} cfg;

typedef struct plan {
    sw_rtc *rtc;
    float *cm;
    int32_t ns, nact;
    float gain, keep;
} plan;

static void make_plan(const cfg *c, plan *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->ns = nslopes();
    pl->nact = (NL + 1) * (NL + 1);
    const int64_t n = (int64_t)pl->nact * 2 * pl->ns;
    pl->cm = malloc((size_t)n * sizeof(float));
    assert_non_null(pl->cm);
    uint64_t seed = 1234;
    for (int64_t i = 0; i < n; i++)
        pl->cm[i] = (float)(0.05 * (2.0 * unit_rand(&seed) - 1.0));
    sw_rtc_params p;
    sw_rtc_params_default(&p);
    sw_centroid_params_default(&p.centroid);
    sw_sh_geometry_default(&p.centroid.geometry);
    p.centroid.geometry.nx = p.centroid.geometry.ny = NL;
    p.centroid.geometry.pitch_px = PITCH;
    p.centroid.geometry.x0 = p.centroid.geometry.y0 = 0.0;
    p.centroid.geometry.valid = mask;
    p.centroid.width = p.centroid.height = SIDE;
    p.centroid.type = SW_PIX_U16;
    if (!c->exact) {
        p.centroid.dark = dark;
        p.centroid.threshold_mode = SW_THRESHOLD_SUBTRACT;
        p.centroid.threshold_kind = SW_THRESHOLD_ABSOLUTE;
        p.centroid.threshold = 6.0;
    }
    p.recon = SW_RTC_MVM;
    p.nact = pl->nact;
    p.cm = pl->cm;
    p.fp16 = c->fp16;
    sw_controller_params_default(&p.controller);
    p.controller.kind = c->kind;
    p.controller.nact = pl->nact;
    p.controller.gain = 0.4;
    p.controller.leak = c->leak;
    p.controller.clip = c->clip;
    if (sw_rtc_create(gpu, &p, &pl->rtc) != SW_OK)
        fail_msg("sw_rtc_create: %s", sw_context_error(gpu));
    pl->gain = 0.4f;
    pl->keep = c->kind == SW_CTRL_LEAKY ? (float)(1.0 - c->leak) : 1.0f;
}

static void free_plan(plan *pl)
{
    sw_rtc_destroy(pl->rtc);
    free(pl->cm);
}

/* ------------------------------------------------------------------ the camera */

typedef struct camera {
    sw_rtc_band *b;
    int32_t nframes;
    int32_t stop_at_frame, stop_at_band; /* publish nothing from here on (0: all) */
    int pace;                            /* 1: a short pause between bands of every third frame */
    int track;                           /* 1: wait for the consumer too (consumed)               */
    int64_t consumed;                    /* frames the consumer has read (atomic)                 */
    sw_status status;                    /* the first failure, or SW_OK */
    char msg[256];
} camera;

static void *camera_run(void *arg)
{
    camera *c = arg;
    c->status = SW_OK;
    const double t_end = now_s() + 20.0; /* never more than this */
    for (int32_t f = 1; f <= c->nframes; f++) {
        const uint16_t *src = frames[(f - 1) % NFRAME];
        int32_t nb = 0;
        sw_rtc_band_stats s;
        /* pace on the chain (the slot of frame f is free once f - depth is done) and, when the
         * consumer checks every frame, on the consumer: frame f's results overwrite those of
         * f - depth (depth 4 here), which the consumer must have read by then (the chain ran
         * ahead of a slow consumer on an H200: results read after they were overwritten) */
        for (;;) {
            sw_rtc_band_get_stats(c->b, &s);
            const int64_t seen =
                c->track ? __atomic_load_n(&c->consumed, __ATOMIC_ACQUIRE) : (int64_t)f;
            if ((s.done >= f - 2 && seen >= f - 2) || now_s() > t_end)
                break;
        }
        for (int32_t band = 0;; band++) {
            int32_t row0, rows;
            if (sw_rtc_band_rows(c->b, band, &row0, &rows) != SW_OK)
                break;
            nb++;
            if (f == c->stop_at_frame && band == c->stop_at_band)
                return NULL;
            void *dst = NULL;
            size_t stride = 0;
            sw_status st = sw_rtc_band_buffer(c->b, f, band, &dst, &stride);
            if (st == SW_OK) {
                for (int32_t y = 0; y < rows; y++)
                    memcpy((char *)dst + (size_t)y * stride, src + (size_t)(row0 + y) * SIDE,
                           SIDE * sizeof(uint16_t));
                st = sw_rtc_band_publish(c->b, f, band);
            }
            if (st != SW_OK) {
                c->status = st;
                snprintf(c->msg, sizeof c->msg, "frame %d band %d: %s", f, band,
                         sw_context_error(NULL));
                return NULL;
            }
            if (c->pace && f % 3 == 0) {
                struct timespec d = {0, 30000};
                nanosleep(&d, NULL);
            }
        }
        (void)nb;
    }
    return NULL;
}

/* ------------------------------------------------------------------ equivalence */

static void run_equivalence(const cfg *c)
{
    plan pl;
    make_plan(c, &pl);
    const int32_t ns = pl.ns, nact = pl.nact, n2 = 2 * ns;
    /* 1. the whole-frame chain's slopes and commands, frame by frame */
    float *ref_s = malloc((size_t)NRUN * n2 * sizeof(float));
    float *ref_u = malloc((size_t)NRUN * nact * sizeof(float));
    assert_non_null(ref_s);
    assert_non_null(ref_u);
    sw_image img;
    assert_int_equal(sw_image_alloc(gpu, SIDE, SIDE, SW_PIX_U16, &img), SW_OK);
    for (int32_t k = 0; k < NRUN; k++) {
        for (int y = 0; y < SIDE; y++)
            memcpy((char *)img.data + (size_t)y * img.stride, frames[k % NFRAME] + y * SIDE,
                   SIDE * sizeof(uint16_t));
        if (sw_rtc_run(pl.rtc, &img, ref_u + (size_t)k * nact, ref_s + (size_t)k * n2) != SW_OK)
            fail_msg("sw_rtc_run: %s", sw_context_error(gpu));
    }

    /* 2. the band chain on the same plan (its own state from 0), fed by the camera thread */
    sw_rtc_band_params bp;
    sw_rtc_band_params_default(&bp);
    bp.bands = c->bands;
    bp.depth = 3;
    bp.slopes = 1;
    bp.band_timeout_us = 1e6; /* generous: a loaded test machine */
    bp.idle_timeout_us = 5e6;
    sw_rtc_band *b = NULL;
    if (sw_rtc_band_create(pl.rtc, &bp, &b) != SW_OK)
        fail_msg("sw_rtc_band_create: %s", sw_context_error(gpu));
    /* the plan refuses whole frames while the chain lives */
    assert_int_equal(sw_rtc_run(pl.rtc, &img, NULL, NULL), SW_EINVAL);

    camera cam;
    memset(&cam, 0, sizeof cam);
    cam.b = b;
    cam.nframes = NRUN;
    cam.pace = 1;
    cam.track = 1;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, camera_run, &cam), 0);
    float *u = malloc((size_t)nact * sizeof(float)), *s = malloc((size_t)n2 * sizeof(float));
    double *bound = calloc((size_t)nact, sizeof(double));
    assert_non_null(u);
    assert_non_null(s);
    assert_non_null(bound);
    int32_t bad_s = 0, bad_u = 0;
    double worst = 0.0;
    sw_status wst = SW_OK;
    for (int32_t k = 0; k < NRUN && wst == SW_OK; k++) {
        wst = sw_rtc_band_wait(b, k + 1, 5e6, u, s);
        if (wst != SW_OK) {
            print_message("wait for frame %d: %s\n", k + 1, sw_context_error(NULL));
            break;
        }
        __atomic_store_n(&cam.consumed, (int64_t)(k + 1), __ATOMIC_RELEASE); /* u, s copied */
        const float *rs = ref_s + (size_t)k * n2, *ru = ref_u + (size_t)k * nact;
        if (memcmp(s, rs, (size_t)n2 * sizeof(float)) != 0) {
            for (int32_t j = 0; j < n2; j++)
                if (memcmp(s + j, rs + j, sizeof(float)) != 0 && bad_s++ < 5)
                    print_message("frame %d slope %d: band %.9g, whole %.9g\n", k + 1, j, s[j],
                                  rs[j]);
        }
        for (int32_t a = 0; a < nact; a++) {
            double cs = 0.0;
            for (int32_t j = 0; j < n2; j++)
                cs += fabs((double)pl.cm[(size_t)a * n2 + j] * rs[j]);
            const double er = (2.0 * n2 * ldexp(1.0, -24) + ldexp(1.0, -22)) * cs;
            bound[a] = pl.keep * bound[a] + pl.gain * er + ldexp(1.0, -22) * fabs(ru[a]);
            const double d = fabs((double)u[a] - ru[a]);
            if (d > bound[a] + 1e-30) {
                if (bad_u++ < 5)
                    print_message("frame %d command %d: band %.9g, whole %.9g (bound %.3g)\n",
                                  k + 1, a, u[a], ru[a], bound[a]);
            }
            if (bound[a] > 0 && d / bound[a] > worst)
                worst = d / bound[a];
        }
    }
    pthread_join(th, NULL);
    if (cam.status != SW_OK)
        fail_msg("camera: %s", cam.msg);
    sw_rtc_band_stats st;
    sw_rtc_band_get_stats(b, &st);
    print_message("bands %d, exact %d, fp16 %d: %d blocks, worst |du| / bound %.3f\n", c->bands,
                  c->exact, c->fp16, st.blocks, worst);
    assert_int_equal(wst, SW_OK);
    assert_int_equal(bad_s, 0);
    assert_int_equal(bad_u, 0);
    assert_true(st.done == NRUN);
    assert_true(st.out_of_order == 0 && st.overruns == 0 && st.timeouts == 0);
    assert_true(st.missed_band == -1);
    sw_rtc_band_destroy(b);
    /* the plan runs whole frames again */
    assert_int_equal(sw_rtc_run(pl.rtc, &img, NULL, NULL), SW_OK);
    sw_image_free(&img);
    free(u);
    free(s);
    free(bound);
    free(ref_s);
    free(ref_u);
    free_plan(&pl);
}

static void test_band_conditioned_fp32(void **state)
{
    (void)state;
    const cfg c = {0, 0, SW_CTRL_INTEGRATOR, 0.0, 0.0, 4};
    run_equivalence(&c);
}

static void test_band_exact_fp16_leaky_clip(void **state)
{
    (void)state;
    const cfg c = {1, 1, SW_CTRL_LEAKY, 0.05, 0.5, 3}; /* 16 rows in 3 bands: 5, 5, 6 */
    run_equivalence(&c);
}

static void test_band_one_band(void **state)
{
    (void)state;
    const cfg c = {0, 0, SW_CTRL_INTEGRATOR, 0.0, 0.0, 1};
    run_equivalence(&c);
}

/* ------------------------------------------------------------------ failures */

static sw_rtc_band *make_chain(plan *pl, double band_timeout_us)
{
    const cfg c = {0, 0, SW_CTRL_INTEGRATOR, 0.0, 0.0, 4};
    make_plan(&c, pl);
    sw_rtc_band_params bp;
    sw_rtc_band_params_default(&bp);
    bp.bands = 4;
    bp.band_timeout_us = band_timeout_us;
    bp.idle_timeout_us = 5e6;
    sw_rtc_band *b = NULL;
    if (sw_rtc_band_create(pl->rtc, &bp, &b) != SW_OK)
        fail_msg("sw_rtc_band_create: %s", sw_context_error(gpu));
    return b;
}

static void test_band_missing(void **state)
{
    (void)state;
    plan pl;
    sw_rtc_band *b = make_chain(&pl, 1e5); /* 100 ms */
    camera cam;
    memset(&cam, 0, sizeof cam);
    cam.b = b;
    cam.nframes = 3;
    cam.stop_at_frame = 2;
    cam.stop_at_band = 2; /* frame 1 whole, frame 2 bands 0 and 1 only */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, camera_run, &cam), 0);
    pthread_join(th, NULL);
    assert_int_equal(cam.status, SW_OK);
    float u[(NL + 1) * (NL + 1)];
    assert_int_equal(sw_rtc_band_wait(b, 1, 5e6, u, NULL), SW_OK);
    const double t0 = now_s();
    assert_int_equal(sw_rtc_band_wait(b, 2, 5e6, u, NULL), SW_ETIMEDOUT);
    const double dt = now_s() - t0;
    print_message("missing band reported after %.1f ms: %s\n", 1e3 * dt, sw_context_error(NULL));
    assert_true(dt < 2.0); /* the kernel's 100 ms, not the wait's 5 s */
    sw_rtc_band_stats st;
    sw_rtc_band_get_stats(b, &st);
    assert_true(st.done == 1);
    assert_true(st.missed_frame == 2);
    assert_int_equal(st.missed_band, 2);
    assert_true(st.timeouts >= 1);
    /* the chain has stopped: a late band is refused, not used */
    assert_int_equal(sw_rtc_band_publish(b, 2, 2), SW_ETIMEDOUT);
    const double t1 = now_s();
    sw_rtc_band_destroy(b);
    assert_true(now_s() - t1 < 2.0);
    free_plan(&pl);
}

static void test_band_order(void **state)
{
    (void)state;
    plan pl;
    sw_rtc_band *b = make_chain(&pl, 1e6);
    void *dst = NULL;
    size_t stride = 0;
    /* beyond the ring (depth 4, nothing done): an overrun */
    assert_int_equal(sw_rtc_band_buffer(b, 5, 0, &dst, &stride), SW_ERANGE);
    assert_int_equal(sw_rtc_band_buffer(b, 1, 4, &dst, &stride), SW_EINVAL); /* band 4 of 4 */
    assert_int_equal(sw_rtc_band_buffer(b, 1, 0, &dst, &stride), SW_OK);
    assert_non_null(dst);
    assert_true(stride >= SIDE * sizeof(uint16_t) && stride % 64 == 0);
    assert_int_equal(sw_rtc_band_publish(b, 1, 1), SW_EINVAL); /* band 0 first */
    assert_int_equal(sw_rtc_band_publish(b, 2, 0), SW_EINVAL); /* frame 1 first */
    assert_int_equal(sw_rtc_band_publish(b, 1, 0), SW_OK);
    assert_int_equal(sw_rtc_band_publish(b, 1, 0), SW_EINVAL); /* twice */
    assert_int_equal(sw_rtc_band_publish(b, 1, 2), SW_EINVAL); /* band 1 skipped */
    for (int32_t band = 1; band < 4; band++)
        assert_int_equal(sw_rtc_band_publish(b, 1, band), SW_OK);
    assert_int_equal(sw_rtc_band_publish(b, 3, 0), SW_EINVAL); /* frame 2 skipped */
    float u[(NL + 1) * (NL + 1)];
    assert_int_equal(sw_rtc_band_wait(b, 1, 5e6, u, NULL), SW_OK);
    /* a wait that runs out of time (frame 2 never comes; the kernel's idle timeout is 5 s) */
    assert_int_equal(sw_rtc_band_wait(b, 2, 2000.0, u, NULL), SW_ETIMEDOUT);
    sw_rtc_band_stats st;
    sw_rtc_band_get_stats(b, &st);
    assert_true(st.out_of_order == 5);
    assert_true(st.overruns == 1);
    assert_true(st.timeouts == 1);
    assert_true(st.done == 1);
    assert_int_equal(st.missed_band, -1);
    sw_rtc_band_destroy(b);
    free_plan(&pl);
}

static void test_band_destroy_running(void **state)
{
    (void)state;
    plan pl;
    sw_rtc_band *b = make_chain(&pl, 1e6);
    camera cam;
    memset(&cam, 0, sizeof cam);
    cam.b = b;
    cam.nframes = 5;
    cam.stop_at_frame = 5;
    cam.stop_at_band = 1; /* the kernel is waiting inside frame 5 */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, camera_run, &cam), 0);
    pthread_join(th, NULL);
    assert_int_equal(cam.status, SW_OK);
    float u[(NL + 1) * (NL + 1)];
    assert_int_equal(sw_rtc_band_wait(b, 4, 5e6, u, NULL), SW_OK);
    const double t0 = now_s();
    sw_rtc_band_destroy(b);
    const double dt = now_s() - t0;
    print_message("destroy while waiting: %.2f ms\n", 1e3 * dt);
    assert_true(dt < 1.0);
    /* the plan (and the device) are usable again */
    sw_image img;
    assert_int_equal(sw_image_alloc(gpu, SIDE, SIDE, SW_PIX_U16, &img), SW_OK);
    memset(img.data, 0, (size_t)img.stride * SIDE);
    assert_int_equal(sw_rtc_run(pl.rtc, &img, NULL, NULL), SW_OK);
    sw_image_free(&img);
    free_plan(&pl);
}

/* ------------------------------------------------------------------ trace */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

/* Frame f written and published band by band from this thread; *t_pub: the host clock just
 * before the last band's release store. */
static void send_frame(sw_rtc_band *b, int64_t f, int64_t *t_pub)
{
    const uint16_t *src = frames[(f - 1) % NFRAME];
    for (int32_t band = 0;; band++) {
        int32_t row0, rows;
        if (sw_rtc_band_rows(b, band, &row0, &rows) != SW_OK)
            break;
        void *dst = NULL;
        size_t stride = 0;
        assert_int_equal(sw_rtc_band_buffer(b, f, band, &dst, &stride), SW_OK);
        for (int32_t y = 0; y < rows; y++)
            memcpy((char *)dst + (size_t)y * stride, src + (size_t)(row0 + y) * SIDE,
                   SIDE * sizeof(uint16_t));
        int32_t next_rows;
        if (sw_rtc_band_rows(b, band + 1, NULL, &next_rows) != SW_OK)
            *t_pub = now_ns(); /* the last band */
        assert_int_equal(sw_rtc_band_publish(b, f, band), SW_OK);
    }
}

static void test_band_trace(void **state)
{
    (void)state;
    const cfg c = {0, 0, SW_CTRL_INTEGRATOR, 0.0, 0.0, 4};
    plan pl;
    make_plan(&c, &pl);
    sw_rtc_band_params bp;
    sw_rtc_band_params_default(&bp);
    bp.bands = 4;
    bp.depth = 3;
    bp.band_timeout_us = 1e6;
    bp.idle_timeout_us = 5e6;
    bp.trace = 8;
    sw_rtc_band *b = NULL;
    if (sw_rtc_band_create(pl.rtc, &bp, &b) != SW_OK)
        fail_msg("sw_rtc_band_create: %s", sw_context_error(gpu));
    assert_true(sw_rtc_band_done(b) == 0);
    sw_rtc_band_trace t;
    assert_int_equal(sw_rtc_band_trace_get(b, 1, &t), SW_ERANGE); /* not done */
    float u[(NL + 1) * (NL + 1)];
    int64_t worst_lo = INT64_MAX, worst_hi = INT64_MAX, rtt_max = 0;
    for (int64_t f = 1; f <= 20; f++) {
        int64_t off = 0, rtt = 0;
        if (f <= 3 || f == 20) { /* the kernel idles between frames here: the clock answers */
            if (sw_rtc_band_clock(b, &off, &rtt) != SW_OK)
                fail_msg("sw_rtc_band_clock: %s", sw_context_error(NULL));
            assert_true(rtt > 0 && rtt < 100000000);
            rtt_max = rtt > rtt_max ? rtt : rtt_max;
        }
        int64_t t_pub = 0;
        send_frame(b, f, &t_pub);
        assert_int_equal(sw_rtc_band_wait(b, f, 5e6, u, NULL), SW_OK);
        const int64_t t_seen = now_ns();
        assert_true(sw_rtc_band_done(b) == f);
        if (sw_rtc_band_trace_get(b, f, &t) != SW_OK)
            fail_msg("trace of frame %lld: %s", (long long)f, sw_context_error(NULL));
        assert_true(t.frame == f);
        /* the phases in order (one global clock); block 0 may see the last count a moment
         * before the block that made it reads its clock */
        assert_true(t.band0_flag_ns <= t.last_flag_ns);
        assert_true(t.last_flag_ns <= t.last_copied_ns);
        assert_true(t.last_copied_ns <= t.last_counted_ns);
        assert_true(t.last_seen_ns + 2000 >= t.last_counted_ns);
        assert_true(t.last_seen_ns <= t.commands_ns);
        assert_true(t.commands_ns <= t.done_ns);
        assert_true(t.done_ns - t.band0_flag_ns < 100000000ull); /* < 100 ms */
        if (f <= 3) {
            /* the clock relation: flag seen after the publish, done before the host saw it,
             * each within the round trip (the offset's error is at most half of it) and 2 us
             * (the GPU clock may tick in 1 us steps) */
            const int64_t lo = (int64_t)(t.last_flag_ns - (uint64_t)off) - t_pub;
            const int64_t hi = t_seen - (int64_t)(t.done_ns - (uint64_t)off);
            worst_lo = lo < worst_lo ? lo : worst_lo;
            worst_hi = hi < worst_hi ? hi : worst_hi;
            assert_true(lo > -rtt - 2000 && hi > -rtt - 2000);
        }
    }
    print_message("trace: clock round trip up to %.2f us; flag seen %.2f us after the publish, "
                  "done %.2f us before the host saw it (worst of 3)\n",
                  1e-3 * (double)rtt_max, 1e-3 * (double)worst_lo, 1e-3 * (double)worst_hi);
    /* the last 8 frames kept, no others */
    assert_int_equal(sw_rtc_band_trace_get(b, 13, &t), SW_OK);
    assert_int_equal(sw_rtc_band_trace_get(b, 12, &t), SW_ERANGE);
    assert_int_equal(sw_rtc_band_trace_get(b, 21, &t), SW_ERANGE);
    assert_int_equal(sw_rtc_band_trace_get(b, 0, &t), SW_EINVAL);
    sw_rtc_band_destroy(b);
    /* no trace: no stamps, no clock */
    bp.trace = 0;
    if (sw_rtc_band_create(pl.rtc, &bp, &b) != SW_OK)
        fail_msg("sw_rtc_band_create: %s", sw_context_error(gpu));
    int64_t off = 0, rtt = 0;
    assert_int_equal(sw_rtc_band_clock(b, &off, &rtt), SW_EINVAL);
    assert_int_equal(sw_rtc_band_trace_get(b, 1, &t), SW_EINVAL);
    sw_rtc_band_destroy(b);
    free_plan(&pl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_band_conditioned_fp32),
        cmocka_unit_test(test_band_exact_fp16_leaky_clip),
        cmocka_unit_test(test_band_one_band),
        cmocka_unit_test(test_band_missing),
        cmocka_unit_test(test_band_order),
        cmocka_unit_test(test_band_destroy_running),
        cmocka_unit_test(test_band_trace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
#endif
