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
 * Skips (77) without NCCL, without a GPU, or with fewer than 2 GPUs; 4 GPUs when there are 4.
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
    for (int f = 0; f < NFRAME; f++)
        free(frames[f]);
    free(rand_cm);
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
    if (ngpu < 2) {
        printf("SKIP: %d GPU(s) visible; the multi-GPU chain needs at least 2\n", ngpu);
        return 77;
    }
    gpu = sw_test_cuda_context_or_skip();
    printf("rtc_multi: NCCL %d, %d GPUs visible\n", sw_nccl_version(), ngpu);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused), cmocka_unit_test(test_two),
        cmocka_unit_test(test_four),    cmocka_unit_test(test_graph_plain),
        cmocka_unit_test(test_columns),
    };
    const int rc = cmocka_run_group_tests(tests, setup, teardown);
    sw_context_destroy(gpu);
    return rc;
}
