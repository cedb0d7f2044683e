/*
 * The real-time chain over several GPUs (src/loop/rtc_multi_cuda.cu, NCCL) against the one-GPU
 * chain (sw_rtc on the same context, GPU 0): plans of the same parameters are fed the same frames,
 * ten in turn, and must give the same slopes (bit for bit: the same centroid kernel on the same
 * GPU) and the same commands after every frame, the controller's state carried from frame to frame
 * on each GPU.
 *
 * Matrices: a real one, the control matrix of an 8 x 8 MVM loop (sw_loop on the CPU: push-pull
 * interaction matrix, truncated SVD; its piston and waffle filter folded in by both plans), run in
 * closed loop (the one-GPU chain's commands go back to the loop's camera, sw_loop_camera, whose
 * next frame both chains get); and a random one, 301 x 2 ns (301: the rows do not split evenly),
 * on the loop's open-loop frames.
 *
 * Tolerance, per command a, carried through the controller as the errors are: rows are split, not
 * columns, so each command is the same dot product over the same slopes; two float evaluations of
 * it in any order differ by at most 2 gamma_n sum_j |C_aj s_j| (gamma_n = n 2^-24 / (1 - n
 * 2^-24), n = 2 ns; FP16: the same half entries on both), so b_a(k) = keep b_a(k - 1) + g 2
 * gamma_n sum_j |C_aj s_j| + 2^-22 |u_a| (the update's own rounding, once per plan). The FP16
 * kernel is the one sw_rtc runs, row by row: its commands should be bit-identical; FP32 ones are
 * when cuBLAS picks the same sgemv kernel for the smaller row count. The test prints which.
 * The split by columns (each GPU a band of lenslet rows, its own centroids, a reduction of the
 * partial commands): the same comparisons; its slopes come from plans re-based on each band's
 * first pixel row, so they must agree within 1e-5 px (+ 1e-5 relative), and the bound above
 * takes g sum_j |C_aj| |ds_j| more; its sums are split across GPUs, so no bit-identity is
 * expected.
 * Also: graph and plain launches give the same commands bit for bit; a reset gives the first
 * frame's commands again; bad devices and unsupported chains are refused.
 * Several wavefront sensors (sw_rtc_multi_create_wfs): sensor 0 the 8 x 8 loop's (f32 frames),
 * sensor 1 another loop's, 6 x 6 lenslets of 10 px (u16 frames), sensors 2, 3 alternately as 0,
 * 1 with other frames; one random stacked matrix, nact x 2 NS (with the 8 x 8 loop's filter
 * folded in when nact is its). The reference is plain CPU code: each sensor's slopes from its own
 * sw_rtc (bit for bit for the sensors on GPU 0, whose plan is sw_rtc's; within 1e-5 px on other
 * GPUs), stacked, multiplied by C in double and run through the controller in double (its float
 * gain and keep). Per command, b_a(k) = keep b_a(k - 1) + g sw_rtc_split_bound(C_a, s, s') +
 * 2^-23 (keep |u_a(k - 1)| + g |r_a| + |u_a(k)|): the first term twice gamma_n sum |C_aj s_j| (the
 * GPU's float sum in any order is within gamma_n of the exact one; Higham 2002 section 3.1) with
 * sum |C_aj| |ds_j| for the slopes, the second the update's float roundings (at most three of
 * 2^-24, doubled); FP16: C_a the half entries the GPU holds (rounded here as __float2half_rn
 * does). Two sensors on one GPU run on any machine with a GPU (no NCCL call); 2, 3 sensors over 2
 * GPUs and 4 over 4 where there are as many.
 * Skips (77) without NCCL or without a GPU; with one GPU only the sensors on one GPU run; 4 GPUs
 * when there are 4.
 * Sets NCCL_NVLS_ENABLE=0 when unset (NVLink multicast off, as the GPU machines require).
 * SW_TEST_RTC_MULTI_NO_GRAPH (set to anything) makes every plan use plain launches.
 * Sets SPOTWAVE_RTC_MULTI_POISON_MS=10 when unset: each GPU's stream sleeps 10 ms and fills the
 * matrix share's buffer with NaNs before its upload (rtc_multi_cuda.cu, rm_poison), so that an
 * upload not ordered on that stream gives NaN commands on every run, not only when a loaded GPU
 * delays its copy (it once did, under ctest -j 8: command 43 of the FP16 random case off by 0.009
 * on the first frame). 0 turns the probe off.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include "testutil.h"

#include "loop/loop_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NRUN   10  /* frames per comparison */
#define NRAND  301 /* commands of the random matrix */
#define NFRAME 4   /* open-loop frames for the random matrix */

static sw_context *gpu;
static sw_context *cpu;
static int ngpu;
static sw_loop *loop;
static sw_loop_chain_info ci;
static int32_t width, height, ns;
static float *frames[NFRAME]; /* f32 host, width x height */
static float *rand_cm;
/* several sensors: the second sensor's loop, 6 x 6 lenslets of 10 px, its frames as u16 */
#define MAXW 4
static sw_loop *loop2;
static sw_loop_chain_info ci2;
static int32_t width2, height2, ns2;
static uint16_t *frames2[NFRAME];

static double unit_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(0);
    sw_loop_params p;
    sw_loop_params_default(&p);
    p.nx = 8;
    p.diameter_m = 3.0;
    p.model = SW_SH_GEOMETRIC;
    p.samples = 4;
    p.square_pupil = 0;
    p.recon = SW_LOOP_MVM;
    p.wind_m_s = 10.0;
    if (sw_loop_create(cpu, &p, &loop) != SW_OK)
        fail_msg("sw_loop_create: %s", sw_context_error(cpu));
    assert_int_equal(sw_loop_chain(loop, &ci), SW_OK);
    sw_loop_sensor(loop, &width, &height, &ns);
    const size_t npx = (size_t)width * height;
    float *zero = calloc((size_t)ci.nact, sizeof(float));
    assert_non_null(zero);
    for (int f = 0; f < NFRAME; f++) {
        frames[f] = malloc(npx * sizeof(float));
        assert_non_null(frames[f]);
        assert_int_equal(sw_loop_camera(loop, zero, frames[f], NULL), SW_OK);
    }
    free(zero);
    /* the second sensor: another loop (geometry, pixels, seed), its frames rounded to u16 */
    p.nx = 6;
    p.px_per_lenslet = 10;
    p.seed = 5;
    if (sw_loop_create(cpu, &p, &loop2) != SW_OK)
        fail_msg("sw_loop_create (second sensor): %s", sw_context_error(cpu));
    assert_int_equal(sw_loop_chain(loop2, &ci2), SW_OK);
    sw_loop_sensor(loop2, &width2, &height2, &ns2);
    const size_t npx2 = (size_t)width2 * height2;
    float *zero2 = calloc((size_t)ci2.nact, sizeof(float));
    float *f2 = malloc(npx2 * sizeof(float));
    assert_true(zero2 && f2);
    for (int f = 0; f < NFRAME; f++) {
        frames2[f] = malloc(npx2 * sizeof(uint16_t));
        assert_non_null(frames2[f]);
        assert_int_equal(sw_loop_camera(loop2, zero2, f2, NULL), SW_OK);
        for (size_t i = 0; i < npx2; i++) {
            const double v = nearbyint(f2[i]);
            frames2[f][i] = (uint16_t)(v < 0.0 ? 0.0 : v > 65535.0 ? 65535.0 : v);
        }
    }
    free(zero2);
    free(f2);
    const int64_t n = (int64_t)NRAND * 2 * ns;
    rand_cm = malloc((size_t)n * sizeof(float));
    assert_non_null(rand_cm);
    uint64_t seed = 77;
    for (int64_t i = 0; i < n; i++)
        rand_cm[i] = (float)(0.02 * (2.0 * unit_rand(&seed) - 1.0));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int f = 0; f < NFRAME; f++) {
        free(frames[f]);
        free(frames2[f]);
    }
    free(rand_cm);
    sw_loop_destroy(loop2);
    sw_loop_destroy(loop);
    sw_context_destroy(cpu);
    return 0;
}

typedef struct cfg {
    int ndev, fp16, real, graph;
    sw_controller_kind kind;
    double clip;
    int split; /* SW_RTC_MULTI_ROWS or SW_RTC_MULTI_COLUMNS */
} cfg;

static void params(const cfg *c, sw_rtc_params *rp)
{
    sw_rtc_params_default(rp);
    rp->centroid = ci.centroid;
    rp->recon = SW_RTC_MVM;
    rp->nact = c->real ? ci.nact : NRAND;
    rp->cm = c->real ? ci.cm : rand_cm;
    rp->fp16 = c->fp16;
    sw_controller_params_default(&rp->controller);
    rp->controller.kind = c->kind;
    rp->controller.nact = rp->nact;
    rp->controller.gain = c->real ? 0.5 : 0.3;
    rp->controller.leak = 0.05;
    rp->controller.clip = c->clip;
    if (c->real) {
        rp->controller.nfilter = ci.nfilter;
        rp->controller.filter = ci.filter;
    }
}

/* Runs one configuration; returns the multi-GPU chain's commands of every frame (NRUN x nact,
 * malloc'ed). */
static float *compare(const cfg *c)
{
    sw_rtc_params rp;
    params(c, &rp);
    const int32_t nact = rp.nact, n2 = 2 * ns;
    const int cols = c->split == SW_RTC_MULTI_COLUMNS;
    /* the matrix both plans multiply by (the filter folded in as they fold it) */
    float *C = malloc((size_t)nact * n2 * sizeof(float));
    assert_non_null(C);
    memcpy(C, rp.cm, (size_t)nact * n2 * sizeof(float));
    if (c->real && ci.nfilter > 0)
        assert_int_equal(sw_loop_fold_filter(ci.filter, ci.nfilter, nact, n2, C), 0);

    sw_rtc *one = NULL;
    if (sw_rtc_create(gpu, &rp, &one) != SW_OK)
        fail_msg("sw_rtc_create: %s", sw_context_error(gpu));
    sw_rtc_multi_params mp;
    sw_rtc_multi_params_default(&mp);
    mp.ndevices = c->ndev;
    mp.graph = getenv("SW_TEST_RTC_MULTI_NO_GRAPH") ? 0 : c->graph;
    mp.split = c->split;
    sw_rtc_multi *multi = NULL;
    if (sw_rtc_multi_create(gpu, &rp, &mp, &multi) != SW_OK)
        fail_msg("sw_rtc_multi_create (%d GPUs, %s): %s", c->ndev, cols ? "columns" : "rows",
                 sw_context_error(gpu));
    assert_int_equal(sw_rtc_multi_slopes(multi), ns);
    assert_int_equal(sw_rtc_multi_devices(multi), c->ndev);
    int32_t total = 0;
    for (int i = 0; i < c->ndev; i++) {
        int32_t dev = -1, row0 = -1, rows = -1;
        assert_int_equal(sw_rtc_multi_device(multi, i, &dev, &row0, &rows), SW_OK);
        if (cols) { /* every GPU: all the commands, its slopes */
            assert_int_equal(row0, 0);
            assert_int_equal(rows, nact);
            continue;
        }
        assert_int_equal(row0, total);
        assert_true(rows >= nact / c->ndev && rows <= nact / c->ndev + 1);
        total += rows;
    }
    if (!cols)
        assert_int_equal(total, nact);
    if (c->graph && sw_rtc_multi_graph(multi) != 1)
        printf("NOTE: the graph over %d GPUs could not be captured; plain launches\n", c->ndev);

    float *us = calloc((size_t)nact, sizeof(float)), *um = calloc((size_t)nact, sizeof(float));
    float *ss = malloc((size_t)n2 * sizeof(float)), *sm = malloc((size_t)n2 * sizeof(float));
    float *fb = calloc((size_t)ci.nact, sizeof(float)); /* the commands fed back (real) */
    float *cam = malloc((size_t)width * height * sizeof(float));
    float *first = malloc((size_t)width * height * sizeof(float));
    double *bound = calloc((size_t)nact, sizeof(double));
    float *all = malloc((size_t)NRUN * nact * sizeof(float));
    assert_true(us && um && ss && sm && fb && cam && first && bound && all);
    const double keep = c->kind == SW_CTRL_LEAKY ? 1.0 - rp.controller.leak : 1.0;
    double worst = 0.0, worst_bound = 0.0, worst_ds = 0.0;
    int identical = 1, same_slopes = 1;
    for (int k = 0; k < NRUN; k++) {
        const float *px = frames[k % NFRAME];
        if (c->real) {
            assert_int_equal(sw_loop_camera(loop, fb, cam, NULL), SW_OK);
            px = cam;
        }
        if (k == 0)
            memcpy(first, px, (size_t)width * height * sizeof(float));
        sw_image img;
        assert_int_equal(sw_image_wrap((void *)px, width, height, 0, SW_PIX_F32, SW_MEM_HOST, &img),
                         SW_OK);
        if (sw_rtc_run(one, &img, us, ss) != SW_OK)
            fail_msg("sw_rtc_run: %s", sw_context_error(gpu));
        if (sw_rtc_multi_run(multi, &img, um, sm) != SW_OK)
            fail_msg("sw_rtc_multi_run: %s", sw_context_error(gpu));
        /* rows: GPU 0's centroid plan is sw_rtc's, bit for bit; columns: each band's plan
         * re-based on its first pixel row (the same sums in shifted coordinates) */
        for (int32_t j = 0; j < n2; j++) {
            const double ds = fabs((double)ss[j] - sm[j]);
            if (memcmp(&ss[j], &sm[j], sizeof(float)) != 0)
                same_slopes = 0;
            if (ds > worst_ds)
                worst_ds = ds;
            if ((!cols && memcmp(&ss[j], &sm[j], sizeof(float)) != 0) ||
                !(ds <= 1e-5 + 1e-5 * fabs((double)ss[j])))
                fail_msg("frame %d: slope %d is %.9g on one GPU, %.9g on %d (%s)", k, (int)j,
                         (double)ss[j], (double)sm[j], c->ndev, cols ? "columns" : "rows");
        }
        for (int32_t a = 0; a < nact; a++) {
            /* 2 gamma_n sum |C s| (+ sum |C| |ds|): loop_internal.h */
            bound[a] =
                keep * bound[a] +
                rp.controller.gain * sw_rtc_split_bound(C + (int64_t)a * n2, n2, ss, sm, c->fp16) +
                0x1.0p-22 * fabs((double)us[a]) + 1e-37;
            const double d = fabs((double)us[a] - um[a]);
            if (!(d <= bound[a]))
                fail_msg("%d GPUs %s %s frame %d: command %d is %.9g on one GPU, %.9g on %d "
                         "(|du| %.3g > bound %.3g)",
                         c->ndev, c->fp16 ? "FP16" : "FP32", c->real ? "real" : "random", k, (int)a,
                         (double)us[a], (double)um[a], c->ndev, d, bound[a]);
            if (d > worst)
                worst = d;
            if (bound[a] > worst_bound)
                worst_bound = bound[a];
            if (!isfinite(um[a]))
                fail_msg("command %d is not finite", (int)a);
        }
        if (memcmp(us, um, (size_t)nact * sizeof(float)) != 0)
            identical = 0;
        memcpy(all + (size_t)k * nact, um, (size_t)nact * sizeof(float));
        if (c->real)
            memcpy(fb, us, (size_t)nact * sizeof(float));
        if (c->clip > 0.0)
            for (int32_t a = 0; a < nact; a++)
                assert_true(fabsf(um[a]) <= (float)c->clip);
    }
    printf("rtc_multi %d GPUs by %s, %s, %s matrix (%d x %d), %s%s, %s: %d frames, max |du| = "
           "%.3g (largest bound %.3g), bit-identical to sw_rtc: %s; slopes max |ds| = %.3g "
           "(bit-identical: %s)\n",
           c->ndev, cols ? "columns" : "rows", c->fp16 ? "FP16" : "FP32",
           c->real ? "real" : "random", (int)nact, (int)n2, sw_controller_kind_string(c->kind),
           c->clip > 0.0 ? " with a clip" : "",
           sw_rtc_multi_graph(multi) ? "one graph" : "plain launches", NRUN, worst, worst_bound,
           identical ? "yes" : "no", worst_ds, same_slopes ? "yes" : "no");
    if (c->fp16 && !identical && !cols)
        printf("NOTE: FP16 commands differ from sw_rtc's although the kernel is the same\n");

    /* a reset: the first frame's commands again, bit for bit */
    assert_int_equal(sw_rtc_multi_reset(multi), SW_OK);
    sw_image img;
    assert_int_equal(sw_image_wrap(first, width, height, 0, SW_PIX_F32, SW_MEM_HOST, &img), SW_OK);
    assert_int_equal(sw_rtc_multi_run(multi, &img, um, NULL), SW_OK);
    assert_memory_equal(um, all, (size_t)nact * sizeof(float));
    assert_memory_equal(sw_rtc_multi_commands(multi), all, (size_t)nact * sizeof(float));
    assert_true(sw_rtc_multi_last_us(multi) > 0.0);

    sw_rtc_multi_destroy(multi);
    sw_rtc_destroy(one);
    free(us);
    free(um);
    free(ss);
    free(sm);
    free(fb);
    free(cam);
    free(first);
    free(bound);
    free(C);
    return all;
}

static void run_all(int ndev, int split)
{
    const cfg cases[] = {
        {ndev, 0, 0, 1, SW_CTRL_INTEGRATOR, 0.0, split},
        {ndev, 1, 0, 1, SW_CTRL_LEAKY, 0.05, split},
        {ndev, 0, 1, 1, SW_CTRL_INTEGRATOR, 0.0, split},
        {ndev, 1, 1, 1, SW_CTRL_LEAKY, 0.0, split},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        free(compare(&cases[i]));
}

static void test_two(void **state)
{
    (void)state;
    run_all(2, SW_RTC_MULTI_ROWS);
}

static void test_four(void **state)
{
    (void)state;
    if (ngpu < 4) {
        printf("SKIP (this case): %d GPUs, 4 needed\n", ngpu);
        skip();
    }
    run_all(4, SW_RTC_MULTI_ROWS);
}

/* The split by columns (each GPU a band of lenslet rows: its own centroids and slopes, a
 * reduction of the partial commands) on 2 GPUs, and on 4 when there are 4. */
static void test_columns(void **state)
{
    (void)state;
    run_all(2, SW_RTC_MULTI_COLUMNS);
    if (ngpu >= 4)
        run_all(4, SW_RTC_MULTI_COLUMNS);
    cfg c = {2, 0, 0, 1, SW_CTRL_LEAKY, 0.0, SW_RTC_MULTI_COLUMNS};
    float *g = compare(&c);
    c.graph = 0;
    float *p = compare(&c);
    assert_memory_equal(g, p, (size_t)NRUN * NRAND * sizeof(float));
    free(g);
    free(p);
}

/* Graph and plain launches: the same commands, bit for bit. */
static void test_graph_plain(void **state)
{
    (void)state;
    cfg c = {ngpu >= 4 ? 4 : 2, 0, 0, 1, SW_CTRL_LEAKY, 0.0, SW_RTC_MULTI_ROWS};
    float *g = compare(&c);
    c.graph = 0;
    float *p = compare(&c);
    assert_memory_equal(g, p, (size_t)NRUN * NRAND * sizeof(float));
    free(g);
    free(p);
}

static void test_refused(void **state)
{
    (void)state;
    cfg c = {2, 0, 0, 1, SW_CTRL_INTEGRATOR, 0.0, SW_RTC_MULTI_ROWS};
    sw_rtc_params rp;
    params(&c, &rp);
    sw_rtc_multi_params mp;
    sw_rtc_multi_params_default(&mp);
    sw_rtc_multi *m = NULL;
    int32_t twice[2] = {0, 0};
    mp.ndevices = 2;
    mp.devices = twice;
    assert_int_equal(sw_rtc_multi_create(gpu, &rp, &mp, &m), SW_EINVAL);
    assert_null(m);
    mp.devices = NULL;
    mp.ndevices = ngpu + 1;
    assert_int_equal(sw_rtc_multi_create(gpu, &rp, &mp, &m), SW_EINVAL);
    mp.ndevices = 2;
    rp.controller.kind = SW_CTRL_PI;
    assert_int_equal(sw_rtc_multi_create(gpu, &rp, &mp, &m), SW_EUNSUPPORTED);
    assert_non_null(strstr(sw_context_error(gpu), "pi"));
    rp.controller.kind = SW_CTRL_INTEGRATOR;
    mp.split = 7;
    assert_int_equal(sw_rtc_multi_create(gpu, &rp, &mp, &m), SW_EINVAL);
    mp.split = SW_RTC_MULTI_ROWS;
    assert_int_equal(sw_rtc_multi_create(cpu, &rp, &mp, &m), SW_EINVAL);
    assert_null(m);
}

/* ---------------------------------------------------------------- several wavefront sensors */

/* Sensor k: even, the 8 x 8 loop's (f32 frames); odd, the 6 x 6 loop's (u16 frames). */
static void wfs_params(int k, sw_centroid_params *w)
{
    *w = k % 2 ? ci2.centroid : ci.centroid;
    if (k % 2)
        w->type = SW_PIX_U16;
}

static int32_t wfs_ns(int k)
{
    return k % 2 ? ns2 : ns;
}

/* Sensor k's frame of run f (host memory): its loop's open-loop frames, offset by k. */
static void wfs_frame(int k, int f, sw_image *img)
{
    sw_status st;
    if (k % 2)
        st = sw_image_wrap(frames2[(f + k) % NFRAME], width2, height2, 0, SW_PIX_U16, SW_MEM_HOST,
                           img);
    else
        st =
            sw_image_wrap(frames[(f + k) % NFRAME], width, height, 0, SW_PIX_F32, SW_MEM_HOST, img);
    assert_int_equal(st, SW_OK);
}

/* x rounded to the nearest half (IEEE binary16), ties to even, as __float2half_rn rounds (the
 * entries here are far inside its range): 11 significant bits, or the subnormals' 2^-24. */
static float half_of(float x)
{
    if (x == 0.0f || !isfinite(x))
        return x;
    int e;
    frexp(fabs((double)x), &e); /* |x| = f 2^e, f in [0.5, 1) */
    const double q = ldexp(1.0, e - 11 < -24 ? -24 : e - 11);
    return (float)(nearbyint((double)x / q) * q);
}

typedef struct wcfg {
    int ndev, nwfs, fp16, graph;
    sw_controller_kind kind;
    double clip;
    int filter; /* 1: nact = the 8 x 8 loop's, its filter folded in */
} wcfg;

/* Runs one configuration against the CPU reference (the opening comment); returns the plan's
 * commands of every frame (NRUN x nact, malloc'ed). */
static float *compare_wfs(const wcfg *c)
{
    const int nw = c->nwfs;
    const int32_t nact = c->filter ? ci.nact : NRAND;
    sw_centroid_params w[MAXW];
    int32_t start[MAXW], n2 = 0;
    for (int k = 0; k < nw; k++) {
        wfs_params(k, &w[k]);
        start[k] = n2;
        n2 += 2 * wfs_ns(k);
    }
    /* the stacked matrix (random, +-0.02), and as the GPUs hold it: the filter folded in, FP16 */
    float *C = malloc((size_t)nact * n2 * sizeof(float));
    float *Cq = malloc((size_t)nact * n2 * sizeof(float));
    assert_true(C && Cq);
    uint64_t seed = 4242 + (uint64_t)nw;
    for (int64_t i = 0; i < (int64_t)nact * n2; i++)
        C[i] = (float)(0.02 * (2.0 * unit_rand(&seed) - 1.0));
    memcpy(Cq, C, (size_t)nact * n2 * sizeof(float));
    if (c->filter)
        assert_int_equal(sw_loop_fold_filter(ci.filter, ci.nfilter, nact, n2, Cq), 0);

    /* each sensor's own sw_rtc on GPU 0, for its slopes (its block of the folded matrix) */
    sw_rtc *one[MAXW];
    for (int k = 0; k < nw; k++) {
        const int32_t m2 = 2 * wfs_ns(k);
        float *blk = malloc((size_t)nact * m2 * sizeof(float));
        assert_non_null(blk);
        for (int32_t a = 0; a < nact; a++)
            memcpy(blk + (int64_t)a * m2, Cq + (int64_t)a * n2 + start[k],
                   (size_t)m2 * sizeof(float));
        sw_rtc_params rk;
        sw_rtc_params_default(&rk);
        rk.centroid = w[k];
        rk.recon = SW_RTC_MVM;
        rk.nact = nact;
        rk.cm = blk;
        sw_controller_params_default(&rk.controller);
        rk.controller.nact = nact;
        if (sw_rtc_create(gpu, &rk, &one[k]) != SW_OK)
            fail_msg("sw_rtc_create (sensor %d): %s", k, sw_context_error(gpu));
        free(blk);
    }
    if (c->fp16)
        for (int64_t i = 0; i < (int64_t)nact * n2; i++)
            Cq[i] = half_of(Cq[i]);

    sw_rtc_params rp;
    sw_rtc_params_default(&rp); /* rp.centroid is not read */
    rp.recon = SW_RTC_MVM;
    rp.nact = nact;
    rp.cm = C;
    rp.fp16 = c->fp16;
    sw_controller_params_default(&rp.controller);
    rp.controller.kind = c->kind;
    rp.controller.nact = nact;
    rp.controller.gain = 0.3;
    rp.controller.leak = 0.05;
    rp.controller.clip = c->clip;
    if (c->filter) {
        rp.controller.nfilter = ci.nfilter;
        rp.controller.filter = ci.filter;
    }
    sw_rtc_multi_params mp;
    sw_rtc_multi_params_default(&mp);
    mp.ndevices = c->ndev;
    mp.graph = getenv("SW_TEST_RTC_MULTI_NO_GRAPH") ? 0 : c->graph;
    sw_rtc_multi *multi = NULL;
    if (sw_rtc_multi_create_wfs(gpu, &rp, w, nw, &mp, &multi) != SW_OK)
        fail_msg("sw_rtc_multi_create_wfs (%d sensors, %d GPUs): %s", nw, c->ndev,
                 sw_context_error(gpu));
    assert_int_equal(sw_rtc_multi_nwfs(multi), nw);
    assert_int_equal(sw_rtc_multi_slopes(multi), n2 / 2);
    assert_int_equal(sw_rtc_multi_devices(multi), c->ndev);
    for (int k = 0; k < nw;
         k++) { /* sensor k on GPU k mod N, its slopes where the matrix has them */
        int32_t g = -2, s0 = -1, nk = -1;
        assert_int_equal(sw_rtc_multi_wfs(multi, k, &g, &s0, &nk), SW_OK);
        assert_int_equal(g, k % c->ndev);
        assert_int_equal(s0, start[k]);
        assert_int_equal(nk, wfs_ns(k));
    }
    assert_int_equal(sw_rtc_multi_wfs(multi, nw, NULL, NULL, NULL), SW_EINVAL);
    for (int i = 0; i < c->ndev; i++) {
        int32_t row0 = -1, rows = -1;
        assert_int_equal(sw_rtc_multi_device(multi, i, NULL, &row0, &rows), SW_OK);
        assert_int_equal(row0, 0);
        assert_int_equal(rows, nact);
    }
    if (c->graph && sw_rtc_multi_graph(multi) != 1)
        printf("NOTE: the graph over %d GPUs could not be captured; plain launches\n", c->ndev);

    const double gain = (float)rp.controller.gain; /* the plan's float gain, keep and clip */
    const double keep = c->kind == SW_CTRL_LEAKY ? (float)(1.0 - rp.controller.leak) : 1.0f;
    const double clip = (float)c->clip;
    float *um = malloc((size_t)nact * sizeof(float));
    float *ss = malloc((size_t)n2 * sizeof(float)), *sm = malloc((size_t)n2 * sizeof(float));
    double *uref = calloc((size_t)nact, sizeof(double));
    double *bound = calloc((size_t)nact, sizeof(double));
    float *all = malloc((size_t)NRUN * nact * sizeof(float));
    assert_true(um && ss && sm && uref && bound && all);
    double worst = 0.0, worst_bound = 0.0, worst_ds = 0.0;
    int same_slopes = 1;
    sw_image img[MAXW];
    const sw_image *fr[MAXW];
    for (int f = 0; f < NRUN; f++) {
        for (int k = 0; k < nw; k++) {
            wfs_frame(k, f, &img[k]);
            fr[k] = &img[k];
            if (sw_rtc_run(one[k], &img[k], NULL, ss + start[k]) != SW_OK)
                fail_msg("sw_rtc_run (sensor %d): %s", k, sw_context_error(gpu));
        }
        if (sw_rtc_multi_run_wfs(multi, fr, um, sm) != SW_OK)
            fail_msg("sw_rtc_multi_run_wfs: %s", sw_context_error(gpu));
        for (int k = 0; k < nw; k++)
            for (int32_t j = start[k]; j < start[k] + 2 * wfs_ns(k); j++) {
                const double ds = fabs((double)ss[j] - sm[j]);
                const int bits = memcmp(&ss[j], &sm[j], sizeof(float)) == 0;
                same_slopes &= bits;
                worst_ds = ds > worst_ds ? ds : worst_ds;
                /* GPU 0 runs sw_rtc's plan on the same GPU: bit for bit */
                if ((k % c->ndev == 0 && !bits) || !(ds <= 1e-5 + 1e-5 * fabs((double)ss[j])))
                    fail_msg("frame %d: sensor %d's slope %d is %.9g alone, %.9g in the plan "
                             "(GPU %d of %d)",
                             f, k, (int)(j - start[k]), (double)ss[j], (double)sm[j], k % c->ndev,
                             c->ndev);
            }
        for (int32_t a = 0; a < nact; a++) {
            const float *row = Cq + (int64_t)a * n2;
            double r = 0.0;
            for (int32_t j = 0; j < n2; j++)
                r += (double)row[j] * ss[j];
            double u = keep * uref[a] + gain * r;
            if (clip > 0.0)
                u = u > clip ? clip : u < -clip ? -clip : u;
            bound[a] = keep * bound[a] + gain * sw_rtc_split_bound(row, n2, ss, sm, 0) +
                       0x1.0p-23 * (keep * fabs(uref[a]) + gain * fabs(r) + fabs(u)) + 1e-37;
            uref[a] = u;
            const double d = fabs(u - um[a]);
            if (!(d <= bound[a]))
                fail_msg("%d sensors on %d GPUs %s frame %d: command %d is %.9g, %.9g on the CPU "
                         "(|du| %.3g > bound %.3g)",
                         nw, c->ndev, c->fp16 ? "FP16" : "FP32", f, (int)a, (double)um[a], u, d,
                         bound[a]);
            worst = d > worst ? d : worst;
            worst_bound = bound[a] > worst_bound ? bound[a] : worst_bound;
        }
        memcpy(all + (size_t)f * nact, um, (size_t)nact * sizeof(float));
    }
    printf(
        "rtc_multi %d sensors on %d GPU%s, %s, %d x %d matrix%s, %s%s, %s: %d frames, max |du| = "
        "%.3g (largest bound %.3g) against the CPU; slopes max |ds| = %.3g (bit-identical to "
        "each sensor's sw_rtc: %s)\n",
        nw, c->ndev, c->ndev > 1 ? "s" : "", c->fp16 ? "FP16" : "FP32", (int)nact, (int)n2,
        c->filter ? " (filter folded)" : "", sw_controller_kind_string(c->kind),
        c->clip > 0.0 ? " with a clip" : "",
        sw_rtc_multi_graph(multi) ? "one graph" : "plain launches", NRUN, worst, worst_bound,
        worst_ds, same_slopes ? "yes" : "no");

    /* a reset: the first frame's commands again, bit for bit, from host frames and then from
     * device copies on GPU 0 (copied from there to the sensors' GPUs) */
    assert_int_equal(sw_rtc_multi_reset(multi), SW_OK);
    for (int k = 0; k < nw; k++) {
        wfs_frame(k, 0, &img[k]);
        fr[k] = &img[k];
    }
    assert_int_equal(sw_rtc_multi_run_wfs(multi, fr, um, NULL), SW_OK);
    assert_memory_equal(um, all, (size_t)nact * sizeof(float));
    assert_memory_equal(sw_rtc_multi_commands(multi), all, (size_t)nact * sizeof(float));
    assert_true(sw_rtc_multi_last_us(multi) > 0.0);
    sw_image dev[MAXW];
    for (int k = 0; k < nw; k++) {
        assert_int_equal(
            sw_image_alloc_device(gpu, img[k].width, img[k].height, img[k].type, &dev[k]), SW_OK);
        assert_int_equal(sw_image_copy(gpu, &img[k], &dev[k]), SW_OK);
        fr[k] = &dev[k];
    }
    assert_int_equal(sw_rtc_multi_reset(multi), SW_OK);
    assert_int_equal(sw_rtc_multi_run_wfs(multi, fr, um, NULL), SW_OK);
    assert_memory_equal(um, all, (size_t)nact * sizeof(float));
    for (int k = 0; k < nw; k++)
        sw_image_free(&dev[k]);

    sw_rtc_multi_destroy(multi);
    for (int k = 0; k < nw; k++)
        sw_rtc_destroy(one[k]);
    free(um);
    free(ss);
    free(sm);
    free(uref);
    free(bound);
    free(C);
    free(Cq);
    return all;
}

static void run_wfs(const wcfg *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(compare_wfs(&cases[i]));
}

/* Graph and plain launches: the same commands, bit for bit. */
static void wfs_graph_plain(wcfg c)
{
    c.graph = 1;
    float *g = compare_wfs(&c);
    c.graph = 0;
    float *p = compare_wfs(&c);
    const int32_t nact = c.filter ? ci.nact : NRAND;
    assert_memory_equal(g, p, (size_t)NRUN * nact * sizeof(float));
    free(g);
    free(p);
}

/* Two and three sensors on one GPU (GPU 0: no NCCL call; runs where there is one GPU). */
static void test_wfs_one_gpu(void **state)
{
    (void)state;
    const wcfg cases[] = {
        {1, 2, 0, 1, SW_CTRL_INTEGRATOR, 0.0, 0},
        {1, 3, 1, 1, SW_CTRL_LEAKY, 0.05, 0},
        {1, 2, 0, 1, SW_CTRL_LEAKY, 0.0, 1},
    };
    run_wfs(cases, sizeof cases / sizeof cases[0]);
    wfs_graph_plain(cases[0]);
}

/* One sensor per GPU, and three sensors over two GPUs (GPU 0 takes sensors 0 and 2); four over
 * four where there are four. */
static void test_wfs_gpus(void **state)
{
    (void)state;
    const wcfg cases[] = {
        {2, 2, 0, 1, SW_CTRL_INTEGRATOR, 0.0, 0},
        {2, 2, 1, 1, SW_CTRL_LEAKY, 0.05, 0},
        {2, 3, 0, 1, SW_CTRL_LEAKY, 0.0, 1},
        {2, 3, 1, 1, SW_CTRL_INTEGRATOR, 0.0, 1},
    };
    run_wfs(cases, sizeof cases / sizeof cases[0]);
    wfs_graph_plain(cases[2]);
    if (ngpu >= 4) {
        const wcfg four[] = {
            {4, 4, 0, 1, SW_CTRL_INTEGRATOR, 0.0, 0},
            {4, 4, 1, 1, SW_CTRL_LEAKY, 0.05, 1},
        };
        run_wfs(four, sizeof four / sizeof four[0]);
    } else {
        printf("SKIP (four sensors on four GPUs): %d GPUs\n", ngpu);
    }
}

/* The several sensors' plan refuses what it cannot take; a one-frame plan takes
 * sw_rtc_multi_run_wfs with one frame; the stages time. */
static void test_wfs_api(void **state)
{
    (void)state;
    sw_centroid_params w[2];
    wfs_params(0, &w[0]);
    wfs_params(1, &w[1]);
    const int32_t n2 = 2 * (ns + ns2);
    float *C = calloc((size_t)NRAND * n2, sizeof(float));
    assert_non_null(C);
    for (int64_t i = 0; i < (int64_t)NRAND * n2; i += 7)
        C[i] = 0.01f;
    sw_rtc_params rp;
    sw_rtc_params_default(&rp);
    rp.recon = SW_RTC_MVM;
    rp.nact = NRAND;
    rp.cm = C;
    sw_controller_params_default(&rp.controller);
    rp.controller.nact = NRAND;
    sw_rtc_multi_params mp;
    sw_rtc_multi_params_default(&mp);
    sw_rtc_multi *m = NULL;
    mp.ndevices = 3; /* more GPUs than sensors: refused before any GPU is asked */
    assert_int_equal(sw_rtc_multi_create_wfs(gpu, &rp, w, 2, &mp, &m), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(gpu), "at least one sensor"));
    assert_null(m);
    mp.ndevices = 1;
    sw_centroid_params bad = w[1];
    bad.gamma = -1.0; /* the sensor's centroid plan refuses it; the message names the sensor */
    const sw_centroid_params wb[2] = {w[0], bad};
    assert_int_equal(sw_rtc_multi_create_wfs(gpu, &rp, wb, 2, &mp, &m), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(gpu), "sensor 1"));
    assert_non_null(strstr(sw_context_error(gpu), "gamma"));
    assert_null(m);
    if (sw_rtc_multi_create_wfs(gpu, &rp, w, 2, &mp, &m) != SW_OK)
        fail_msg("sw_rtc_multi_create_wfs: %s", sw_context_error(gpu));
    sw_image img[2];
    wfs_frame(0, 0, &img[0]);
    wfs_frame(1, 0, &img[1]);
    float *u = malloc(NRAND * sizeof(float));
    assert_non_null(u);
    assert_int_equal(sw_rtc_multi_run(m, &img[0], u, NULL), SW_EINVAL); /* two frames wanted */
    assert_non_null(strstr(sw_context_error(gpu), "sw_rtc_multi_run_wfs"));
    double us[SW_RTC_MULTI_T_STAGES];
    assert_int_equal(sw_rtc_multi_profile(m, &img[0], 1, us), SW_EINVAL);
    const sw_image *swapped[2] = {&img[1], &img[0]};
    assert_int_equal(sw_rtc_multi_run_wfs(m, swapped, u, NULL), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(gpu), "sensor 0's frame"));
    const sw_image *missing[2] = {&img[0], NULL};
    assert_int_equal(sw_rtc_multi_run_wfs(m, missing, u, NULL), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(gpu), "sensor 1's frame is NULL"));
    assert_int_equal(sw_rtc_multi_run_wfs(m, NULL, u, NULL), SW_EINVAL);
    const sw_image *fr[2] = {&img[0], &img[1]};
    assert_int_equal(sw_rtc_multi_run_wfs(m, fr, u, NULL), SW_OK);
    assert_int_equal(sw_rtc_multi_profile_wfs(m, fr, 3, us), SW_OK);
    for (int i = 0; i < SW_RTC_MULTI_T_STAGES; i++)
        assert_true(isfinite(us[i]) && us[i] >= 0.0);
    assert_true(us[SW_RTC_MULTI_T_CENTROID] > 0.0 && us[SW_RTC_MULTI_T_MVM] > 0.0);
    sw_rtc_multi_destroy(m);

    /* a one-frame plan (1 GPU, rows): run_wfs with its one frame = run, bit for bit */
    cfg c = {1, 0, 0, 1, SW_CTRL_INTEGRATOR, 0.0, SW_RTC_MULTI_ROWS};
    params(&c, &rp);
    m = NULL;
    if (sw_rtc_multi_create(gpu, &rp, &mp, &m) != SW_OK)
        fail_msg("sw_rtc_multi_create: %s", sw_context_error(gpu));
    assert_int_equal(sw_rtc_multi_nwfs(m), 1);
    int32_t g = -2, s0 = -1, nk = -1;
    assert_int_equal(sw_rtc_multi_wfs(m, 0, &g, &s0, &nk), SW_OK);
    assert_int_equal(g, 0);
    assert_int_equal(s0, 0);
    assert_int_equal(nk, ns);
    assert_int_equal(sw_rtc_multi_wfs(m, 1, NULL, NULL, NULL), SW_EINVAL);
    float *u2 = malloc(NRAND * sizeof(float));
    assert_non_null(u2);
    assert_int_equal(sw_rtc_multi_run(m, &img[0], u, NULL), SW_OK);
    assert_int_equal(sw_rtc_multi_reset(m), SW_OK);
    assert_int_equal(sw_rtc_multi_run_wfs(m, fr, u2, NULL), SW_OK); /* frames[1] not read */
    assert_memory_equal(u, u2, NRAND * sizeof(float));
    sw_rtc_multi_destroy(m);
    free(u);
    free(u2);
    free(C);
}

int main(void)
{
    if (!getenv("NCCL_NVLS_ENABLE"))
        setenv("NCCL_NVLS_ENABLE", "0", 1); /* NVLink multicast off, before NCCL reads it */
    if (!getenv("SPOTWAVE_RTC_MULTI_POISON_MS"))
        setenv("SPOTWAVE_RTC_MULTI_POISON_MS", "10", 1); /* the uploads' order probed */
    if (sw_nccl_version() == 0) {
        printf(
            "SKIP: built without NCCL (the multi-GPU chain needs it: SW_WITH_NCCL, NCCL_ROOT)\n");
        return 77;
    }
    ngpu = sw_cuda_device_count();
    if (ngpu < 1) {
        printf("SKIP: no GPU visible\n");
        return 77;
    }
    gpu = sw_test_cuda_context_or_skip();
    printf("rtc_multi: NCCL %d, %d GPUs visible\n", sw_nccl_version(), ngpu);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),  cmocka_unit_test(test_two),
        cmocka_unit_test(test_four),     cmocka_unit_test(test_graph_plain),
        cmocka_unit_test(test_columns),  cmocka_unit_test(test_wfs_one_gpu),
        cmocka_unit_test(test_wfs_gpus), cmocka_unit_test(test_wfs_api),
    };
    /* one GPU: the sensors sharing it (no NCCL call), nothing split over GPUs */
    const struct CMUnitTest one_gpu[] = {
        cmocka_unit_test(test_wfs_one_gpu),
        cmocka_unit_test(test_wfs_api),
    };
    if (ngpu < 2)
        printf("NOTE: 1 GPU visible: only the sensors on one GPU run (the chains split over GPUs "
               "need at least 2)\n");
    const int rc = ngpu >= 2 ? cmocka_run_group_tests(tests, setup, teardown)
                             : cmocka_run_group_tests(one_gpu, setup, teardown);
    sw_context_destroy(gpu);
    return rc;
}
