/*
 * The real-time chain's GPU graph (src/loop/rtc_cuda.cu) against its CPU run (src/loop/rtc.c,
 * itself tested stage by stage in tests/unit/test_loop_rtc.c): plans of the same parameters on a
 * CUDA and a CPU context are fed the same frames, five of them in turn, and must give the same
 * commands after every frame (the controller's state carries from frame to frame).
 *
 * Frames: 16 x 16 lenslets of 12 px on a 192 x 192 u16 frame rendered by the SH simulator
 * (GEOMETRIC) from a different Zernike wavefront per frame; the mask leaves out five lenslets, so
 * that 2 ns = 502 is not a multiple of 8 (the FP16 GEMV's padded rows) and the D-SABRE scatter
 * has holes. The slopes are the centroid stage's on both backends (exact integer moments: equal).
 *
 * Tolerances (relative to max |u_CPU| of the frame unless said):
 *   MVM FP32, 1e-5: cuBLAS's sgemv and OpenBLAS's sum 502 float products in different orders
 *     (~sqrt(502) 6e-8 of the row's sum of |terms|, which is at most a few times |u|), and the
 *     GPU folds g C s + keep u into one call while the CPU rounds r first.
 *   MVM FP16: C is rounded to half (relative error <= 2^-11 per entry), so |r_GPU - r_CPU| <=
 *     2^-11 sum_j |C_ij s_j| plus float rounding; the bound is carried through the controller as
 *     the errors are (integrator / leaky: b = keep b + g e_r; PI: e's bound from M = B^T C, the
 *     integral's bound summed, then through |B|), plus 1e-5 max |u| for the float arithmetic.
 *     (A wrong row, column or padding gives errors of the size of u itself.)
 *   SABRE, 1e-4: the D-SABRE runs agree to 2e-5 of their RMS (tests/gpu/test_gpu_sabre.c: the
 *     GEMM's and the pair sums' orders), and the projection GEMV adds a float sum of ~600 terms.
 * Bit for bit: host, pinned and device frames give the same commands (the same graph); a reset
 * gives the first frame's commands again; the telemetry ring holds each run's slopes and
 * commands; the slopes output without telemetry equals the one with it. Skips (77) without a GPU.
 */
#include "testutil.h"

#ifndef SW_HAVE_CUDA
int main(void)
{
    return 77; /* built without CUDA: nothing to compare */
}
#else

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NL     16 /* lenslets per side */
#define PITCH  12 /* pixels per lenslet */
#define SIDE   (NL * PITCH)
#define NFRAME 5              /* distinct frames */
#define NRUN   7              /* runs per comparison: the frames in turn, the state carries */
#define HALF_U (1.0 / 2048.0) /* unit roundoff of IEEE half (11-bit significand) */

static sw_context *gpu;
static sw_context *cpu;
static sw_image frames[NFRAME]; /* u16 host frames */
static uint8_t mask[NL * NL];

static double unit_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static void geometry(sw_sh_geometry *g)
{
    sw_sh_geometry_default(g);
    g->nx = NL;
    g->ny = NL;
    g->pitch_px = PITCH;
    g->x0 = 0.0;
    g->y0 = 0.0;
    g->valid = mask;
}

static int32_t nslopes(void)
{
    int32_t n = 0;
    for (int l = 0; l < NL * NL; l++)
        n += mask[l] != 0;
    return n;
}

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    cpu = sw_test_cpu_context(0);
    for (int l = 0; l < NL * NL; l++) {
        const int ix = l % NL, iy = l / NL;
        mask[l] = !((ix == 0 || ix == NL - 1) && (iy == 0 || iy == NL - 1));
    }
    mask[5 * NL + 7] = 0;
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    geometry(&sp.geom);
    sp.geom.valid = NULL;
    sp.width = SIDE;
    sp.height = SIDE;
    sp.model = SW_SH_GEOMETRIC;
    sp.spot = SW_SH_SPOT_GAUSSIAN;
    sp.sigma_px = 1.3;
    sp.flux_e = 3e4;
    sw_shsim *sim = NULL;
    if (sw_shsim_create(cpu, &sp, &sim) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(cpu));
    const double radius = 0.5 * NL * sw_sh_lenslet_um(&sp.geom);
    sw_image e;
    assert_int_equal(sw_image_alloc(cpu, SIDE, SIDE, SW_PIX_F32, &e), SW_OK);
    uint64_t seed = 4242;
    for (int f = 0; f < NFRAME; f++) {
        double coef[15] = {0};
        for (int j = 1; j < 15; j++)
            coef[j] = (j < 3 ? 0.2 : 0.06) * (2.0 * unit_rand(&seed) - 1.0);
        assert_int_equal(sw_shsim_clear_opd(sim), SW_OK);
        assert_int_equal(sw_shsim_add_zernike(sim, coef, 15, radius), SW_OK);
        assert_int_equal(sw_shsim_run(sim, &e, 0), SW_OK);
        assert_int_equal(sw_image_alloc(cpu, SIDE, SIDE, SW_PIX_U16, &frames[f]), SW_OK);
        assert_int_equal(sw_image_convert(cpu, &e, &frames[f], 1.0, 0.0, NULL), SW_OK);
    }
    sw_image_free(&e);
    sw_shsim_destroy(sim);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int f = 0; f < NFRAME; f++)
        sw_image_free(&frames[f]);
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

static float *random_matrix(int64_t n, uint64_t seed, double amp)
{
    float *a = malloc((size_t)n * sizeof(float));
    assert_non_null(a);
    for (int64_t i = 0; i < n; i++)
        a[i] = (float)(amp * (2.0 * unit_rand(&seed) - 1.0));
    return a;
}

/* nact x nmodes column-major with orthonormal columns (Gram-Schmidt in double). */
static float *orthonormal_modes(int32_t nact, int32_t nmodes, uint64_t seed)
{
    double *q = malloc((size_t)nact * nmodes * sizeof(double));
    assert_non_null(q);
    for (int32_t j = 0; j < nmodes; j++) {
        double *c = q + (size_t)j * nact;
        for (int32_t i = 0; i < nact; i++)
            c[i] = 2.0 * unit_rand(&seed) - 1.0;
        for (int pass = 0; pass < 2; pass++)
            for (int32_t k = 0; k < j; k++) {
                const double *o = q + (size_t)k * nact;
                double d = 0.0;
                for (int32_t i = 0; i < nact; i++)
                    d += o[i] * c[i];
                for (int32_t i = 0; i < nact; i++)
                    c[i] -= d * o[i];
            }
        double nn = 0.0;
        for (int32_t i = 0; i < nact; i++)
            nn += c[i] * c[i];
        for (int32_t i = 0; i < nact; i++)
            c[i] /= sqrt(nn);
    }
    float *b = malloc((size_t)nact * nmodes * sizeof(float));
    assert_non_null(b);
    for (size_t i = 0; i < (size_t)nact * nmodes; i++)
        b[i] = (float)q[i];
    free(q);
    return b;
}

/* ------------------------------------------------------------------ one configuration */

typedef struct cfg {
    sw_rtc_recon recon;
    sw_rtc_projection proj;
    int fp16;
    sw_controller_kind kind;
    double leak, clip;
    int32_t nact;    /* MVM / GLOBAL */
    int32_t nmodes;  /* PI: 0 = identity */
    int32_t nfilter; /* unseen modes filtered (random orthonormal), 0: none */
} cfg;

/* Parameters of a configuration and the arrays they point at (freed by free_setup). */
typedef struct setup_t {
    sw_rtc_params p;
    float *cm, *P, *modes, *kp, *ki, *filter;
} setup_t;

static void make_params(const cfg *c, setup_t *s)
{
    memset(s, 0, sizeof *s);
    sw_rtc_params *p = &s->p;
    const int32_t ns = nslopes(), corners = (NL + 1) * (NL + 1);
    sw_rtc_params_default(p);
    sw_centroid_params_default(&p->centroid);
    geometry(&p->centroid.geometry);
    p->centroid.width = SIDE;
    p->centroid.height = SIDE;
    p->centroid.type = SW_PIX_U16;
    p->recon = c->recon;
    p->fp16 = c->fp16;
    p->projection = c->proj;
    p->slope_scale = 5.5 / 3500.0;
    p->nact = c->recon == SW_RTC_SABRE && c->proj != SW_RTC_PROJ_GLOBAL ? corners : c->nact;
    if (c->recon == SW_RTC_MVM) {
        s->cm = random_matrix((int64_t)p->nact * 2 * ns, 31, 1.0);
        p->cm = s->cm;
    } else {
        sw_sabre_params_default(&p->sabre);
        p->sabre.pitch = PITCH * 5.5;
        p->sabre.partitions = 4;
        p->sabre.overlap = 1;
        p->sabre.extend_eq17 = c->proj == SW_RTC_PROJ_LOCAL;
        /* the sizes of the projection matrices from a plan of the same parameters */
        sw_sabre_params sp = p->sabre;
        sp.nx = NL;
        sp.ny = NL;
        sp.valid = mask;
        sw_sabre *tmp = NULL;
        assert_int_equal(sw_sabre_create(cpu, &sp, &tmp), SW_OK);
        sw_sabre_info info;
        sw_sabre_get_info(tmp, &info);
        sw_sabre_destroy(tmp);
        if (c->proj == SW_RTC_PROJ_GLOBAL) {
            s->P =
                random_matrix((int64_t)p->nact * sw_sabre_lattice_values(&info.lattice), 37, 1.0);
            p->projection_matrix = s->P;
            p->projection_rows = p->nact;
            p->projection_cols = (int32_t)sw_sabre_lattice_values(&info.lattice);
        } else if (c->proj == SW_RTC_PROJ_LOCAL) {
            s->P = random_matrix((int64_t)info.window * info.window * info.local_values, 41, 0.1);
            p->projection_matrix = s->P;
            p->projection_rows = info.window * info.window;
            p->projection_cols = info.local_values;
        }
    }
    sw_controller_params_default(&p->controller);
    p->controller.kind = c->kind;
    p->controller.nact = p->nact;
    p->controller.gain = 0.35;
    p->controller.leak = c->leak;
    p->controller.clip = c->clip;
    if (c->kind == SW_CTRL_PI) {
        const int32_t nm = c->nmodes > 0 ? c->nmodes : p->nact;
        p->controller.nmodes = nm;
        if (c->nmodes > 0) {
            s->modes = orthonormal_modes(p->nact, nm, 43);
            p->controller.modes = s->modes;
        }
        s->kp = malloc((size_t)nm * sizeof(float));
        s->ki = malloc((size_t)nm * sizeof(float));
        for (int32_t j = 0; j < nm; j++) {
            s->kp[j] = 0.1f + 0.2f * (float)(j % 3);
            s->ki[j] = 0.15f + 0.1f * (float)(j % 4);
        }
        p->controller.kp = s->kp;
        p->controller.ki = s->ki;
    }
    if (c->nfilter > 0) {
        s->filter = orthonormal_modes(p->nact, c->nfilter, 47);
        p->controller.nfilter = c->nfilter;
        p->controller.filter = s->filter;
    }
}

static void free_setup(setup_t *s)
{
    free(s->cm);
    free(s->P);
    free(s->modes);
    free(s->kp);
    free(s->ki);
    free(s->filter);
}

static sw_rtc *make_rtc(sw_context *ctx, const sw_rtc_params *p)
{
    sw_rtc *r = NULL;
    if (sw_rtc_create(ctx, p, &r) != SW_OK)
        fail_msg("sw_rtc_create (%s): %s", ctx == gpu ? "GPU" : "CPU", sw_context_error(ctx));
    return r;
}

/* The FP16 error bound of one frame, carried through the controller (see the top). b: nact
 * (integrator / leaky), or bI (nmodes, the integrals' bound) for PI; out: the commands' bound. */
static void half_bound(const setup_t *s, const float *slopes, double *b, double *bI, double *out)
{
    const sw_rtc_params *p = &s->p;
    const int32_t nact = p->nact, n2 = 2 * nslopes();
    /* |r_GPU - r_CPU| per row of C (or of M = B^T C for PI): half rounding of every entry */
    const double eps = HALF_U + 1e-6;
    if (p->controller.kind != SW_CTRL_PI) {
        const double keep = p->controller.kind == SW_CTRL_LEAKY ? 1.0 - p->controller.leak : 1.0;
        for (int32_t i = 0; i < nact; i++) {
            double m = 0.0;
            for (int32_t j = 0; j < n2; j++)
                m += fabs((double)s->cm[(size_t)i * n2 + j] * slopes[j]);
            b[i] = keep * b[i] + p->controller.gain * eps * m;
            out[i] = b[i];
        }
        return;
    }
    const int32_t nm = p->controller.nmodes;
    double *bv = malloc((size_t)nm * sizeof(double));
    for (int32_t k = 0; k < nm; k++) {
        double m = 0.0;
        for (int32_t j = 0; j < n2; j++) {
            double mkj = 0.0; /* M = B^T C (or C) */
            if (s->modes)
                for (int32_t i = 0; i < nact; i++)
                    mkj += (double)s->modes[(size_t)k * nact + i] * s->cm[(size_t)i * n2 + j];
            else
                mkj = s->cm[(size_t)k * n2 + j];
            m += fabs(mkj * slopes[j]);
        }
        const double be = eps * m;
        bI[k] += be;
        bv[k] = fabs(s->kp[k]) * be + fabs(s->ki[k]) * bI[k];
    }
    for (int32_t i = 0; i < nact; i++) {
        double acc = 0.0;
        if (s->modes)
            for (int32_t k = 0; k < nm; k++)
                acc += fabs((double)s->modes[(size_t)k * nact + i]) * bv[k];
        else
            acc = bv[i];
        out[i] = acc;
    }
    free(bv);
}

/* Runs NRUN frames through a GPU and a CPU plan of configuration c and compares the commands
 * after every frame. */
static void compare(const cfg *c)
{
    setup_t s;
    make_params(c, &s);
    const int32_t nact = s.p.nact, n2 = 2 * nslopes();
    sw_rtc *g = make_rtc(gpu, &s.p), *h = make_rtc(cpu, &s.p);
    float *ug = malloc((size_t)nact * sizeof(float)), *uc = malloc((size_t)nact * sizeof(float));
    float *sg = malloc((size_t)n2 * sizeof(float)), *sc = malloc((size_t)n2 * sizeof(float));
    double *b = calloc((size_t)nact, sizeof(double)), *bI = calloc((size_t)nact, sizeof(double));
    double *bound = calloc((size_t)nact, sizeof(double));
    for (int k = 0; k < NRUN; k++) {
        const sw_image *f = &frames[k % NFRAME];
        assert_int_equal(sw_rtc_run(g, f, ug, sg), SW_OK);
        assert_int_equal(sw_rtc_run(h, f, uc, sc), SW_OK);
        for (int32_t j = 0; j < n2; j++)
            assert_near(sg[j], sc[j], 1e-5);
        assert_memory_equal(sw_rtc_commands(g), ug, (size_t)nact * sizeof(float));
        double m = 0.0;
        for (int32_t i = 0; i < nact; i++)
            m = fmax(m, fabs(uc[i]));
        assert_true(m > 0.0);
        const double rel = c->recon == SW_RTC_SABRE ? 1e-4 : 1e-5;
        if (c->fp16)
            half_bound(&s, sc, b, bI, bound);
        for (int32_t i = 0; i < nact; i++) {
            const double tol = rel * m + (c->fp16 ? bound[i] : 0.0);
            if (!(fabs((double)ug[i] - uc[i]) <= tol))
                fail_msg("frame %d, command %d: GPU %.9g, CPU %.9g (tolerance %.3g, max |u| %.3g)",
                         k + 1, i, ug[i], uc[i], tol, m);
        }
    }
    free(ug);
    free(uc);
    free(sg);
    free(sc);
    free(b);
    free(bI);
    free(bound);
    sw_rtc_destroy(g);
    sw_rtc_destroy(h);
    free_setup(&s);
}

static void test_mvm_fp32(void **state)
{
    (void)state;
    const cfg a = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_INTEGRATOR, 0, 0, 301, 0, 0};
    compare(&a);
    const cfg b = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_LEAKY, 0.05, 6.0, 301, 0, 0};
    compare(&b);
    const cfg c = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_PI, 0, 0, 301, 40, 0};
    compare(&c);
    const cfg d = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_PI, 0, 8.0, 301, 0, 0};
    compare(&d);
    /* PI over modes with a clip: the back-calculation's GEMV; the filter folded into C */
    const cfg e = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_PI, 0, 4.0, 301, 40, 2};
    compare(&e);
}

static void test_mvm_fp16(void **state)
{
    (void)state;
    const cfg a = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 1, SW_CTRL_INTEGRATOR, 0, 0, 301, 0, 0};
    compare(&a);
    const cfg b = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 1, SW_CTRL_LEAKY, 0.05, 6.0, 301, 0, 0};
    compare(&b);
    const cfg c = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 1, SW_CTRL_PI, 0, 0, 301, 40, 0};
    compare(&c);
    const cfg d = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 1, SW_CTRL_PI, 0, 0, 301, 0, 0};
    compare(&d);
}

static void test_sabre(void **state)
{
    (void)state;
    const cfg a = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_INTEGRATOR, 0, 0, 0, 0, 0};
    compare(&a);
    const cfg b = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_PI, 0, 0, 0, 30, 0};
    compare(&b);
    const cfg c = {SW_RTC_SABRE, SW_RTC_PROJ_GLOBAL, 0, SW_CTRL_INTEGRATOR, 0, 0, 150, 0, 0};
    compare(&c);
    const cfg d = {SW_RTC_SABRE, SW_RTC_PROJ_GLOBAL, 0, SW_CTRL_PI, 0, 0, 150, 25, 0};
    compare(&d);
    const cfg e = {SW_RTC_SABRE, SW_RTC_PROJ_LOCAL, 0, SW_CTRL_INTEGRATOR, 0, 0, 0, 0, 0};
    compare(&e);
    const cfg f = {SW_RTC_SABRE, SW_RTC_PROJ_LOCAL, 0, SW_CTRL_LEAKY, 0.1, 0, 0, 0, 0};
    compare(&f);
    /* the unseen-mode filter per frame (rt_filter): fused with the update, and before PI */
    const cfg g = {SW_RTC_SABRE, SW_RTC_PROJ_LOCAL, 0, SW_CTRL_LEAKY, 0.1, 0.5, 0, 0, 2};
    compare(&g);
    const cfg h = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_PI, 0, 0.5, 0, 30, 3};
    compare(&h);
    const cfg i = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_PI, 0, 0.5, 0, 0, 2};
    compare(&i);
}

/* ------------------------------------------------------------------ memory, reset, telemetry */

/* Host, pinned and device frames through three plans of the same parameters: the same commands
 * and slopes, bit for bit. */
static void test_frame_memory(void **state)
{
    (void)state;
    const cfg c = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_INTEGRATOR, 0, 0, 64, 0, 0};
    setup_t s;
    make_params(&c, &s);
    const int32_t nact = s.p.nact, n2 = 2 * nslopes();
    sw_rtc *r[3] = {make_rtc(gpu, &s.p), make_rtc(gpu, &s.p), make_rtc(gpu, &s.p)};
    sw_image pinned, dev;
    assert_int_equal(sw_image_alloc(gpu, SIDE, SIDE, SW_PIX_U16, &pinned), SW_OK);
    assert_int_equal(pinned.memory, SW_MEM_PINNED);
    assert_int_equal(sw_image_alloc_device(gpu, SIDE, SIDE, SW_PIX_U16, &dev), SW_OK);
    float *u[3], *sl[3];
    for (int i = 0; i < 3; i++) {
        u[i] = malloc((size_t)nact * sizeof(float));
        sl[i] = malloc((size_t)n2 * sizeof(float));
    }
    for (int k = 0; k < NRUN; k++) {
        const sw_image *f = &frames[k % NFRAME];
        assert_int_equal(sw_image_copy(gpu, f, &pinned), SW_OK);
        assert_int_equal(sw_image_copy(gpu, f, &dev), SW_OK);
        assert_int_equal(sw_context_synchronize(gpu), SW_OK);
        assert_int_equal(sw_rtc_run(r[0], f, u[0], sl[0]), SW_OK);
        assert_int_equal(sw_rtc_run(r[1], &pinned, u[1], sl[1]), SW_OK);
        assert_int_equal(sw_rtc_run(r[2], &dev, u[2], sl[2]), SW_OK);
        for (int i = 1; i < 3; i++) {
            assert_memory_equal(u[i], u[0], (size_t)nact * sizeof(float));
            assert_memory_equal(sl[i], sl[0], (size_t)n2 * sizeof(float));
        }
    }
    /* a frame of the wrong size or type is refused */
    sw_image bad;
    assert_int_equal(sw_image_alloc(gpu, SIDE, SIDE, SW_PIX_U8, &bad), SW_OK);
    assert_int_equal(sw_rtc_run(r[0], &bad, u[0], NULL), SW_EINVAL);
    sw_image_free(&bad);
    for (int i = 0; i < 3; i++) {
        free(u[i]);
        free(sl[i]);
        sw_rtc_destroy(r[i]);
    }
    sw_image_free(&pinned);
    sw_image_free(&dev);
    free_setup(&s);
}

/* The state carries (the second frame's commands differ from a fresh plan's), a reset brings back
 * the fresh plan's commands bit for bit, and the telemetry ring holds each run's frame number,
 * slopes and commands; a plan without telemetry gives the same slopes output. */
/* New PI gains between frames (sw_rtc_set_gains): the GPU's device integrals are rescaled as the
 * CPU controller's (ki_old / ki_new; a mode from ki = 0 restarts at 0), so both plans keep giving
 * the same commands after the change, with and without a modal basis. */
static void test_set_gains(void **state)
{
    (void)state;
    for (int basis = 0; basis < 2; basis++) {
        const cfg c = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_PI, 0, 0,
                       301,        basis ? 40 : 0,      0};
        setup_t s;
        make_params(&c, &s);
        const int32_t nact = s.p.nact, nm = s.p.controller.nmodes;
        s.ki[0] = 0.0f; /* a mode that starts without an integral gain */
        sw_rtc *g = make_rtc(gpu, &s.p), *h = make_rtc(cpu, &s.p);
        float *ug = malloc((size_t)nact * sizeof(float)),
              *uc = malloc((size_t)nact * sizeof(float));
        float *ki = malloc((size_t)nm * sizeof(float));
        for (int k = 0; k < 2 * NRUN; k++) {
            if (k == NRUN) { /* every mode's ki changes; mode 0 from 0 to 0.3 */
                for (int32_t j = 0; j < nm; j++)
                    ki[j] = 0.3f + 0.05f * (float)(j % 5);
                assert_int_equal(sw_rtc_set_gains(g, NULL, ki), SW_OK);
                assert_int_equal(sw_rtc_set_gains(h, NULL, ki), SW_OK);
            }
            const sw_image *f = &frames[k % NFRAME];
            assert_int_equal(sw_rtc_run(g, f, ug, NULL), SW_OK);
            assert_int_equal(sw_rtc_run(h, f, uc, NULL), SW_OK);
            double m = 0.0;
            for (int32_t i = 0; i < nact; i++)
                m = fmax(m, fabs(uc[i]));
            for (int32_t i = 0; i < nact; i++)
                if (!(fabs((double)ug[i] - uc[i]) <= 1e-5 * m))
                    fail_msg("basis %d, frame %d, command %d: GPU %.9g, CPU %.9g", basis, k + 1, i,
                             ug[i], uc[i]);
        }
        free(ug);
        free(uc);
        free(ki);
        sw_rtc_destroy(g);
        sw_rtc_destroy(h);
        free_setup(&s);
    }
}

static void test_reset_and_telemetry(void **state)
{
    (void)state;
    const cfg c = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, 0, SW_CTRL_LEAKY, 0.02, 0, 0, 0, 0};
    setup_t s;
    make_params(&c, &s);
    s.p.telemetry = 4;
    const int32_t nact = s.p.nact, n2 = 2 * nslopes();
    sw_rtc *r = make_rtc(gpu, &s.p);
    s.p.telemetry = 0;
    sw_rtc *r0 = make_rtc(gpu, &s.p);
    float *u = malloc((size_t)nact * sizeof(float)), *u1 = malloc((size_t)nact * sizeof(float));
    float *tu = malloc((size_t)nact * sizeof(float));
    float *sl = malloc((size_t)n2 * sizeof(float)), *ts = malloc((size_t)n2 * sizeof(float));
    float *s0 = malloc((size_t)n2 * sizeof(float));
    int64_t fr = -1;
    assert_int_equal(sw_rtc_telemetry_read(r, &fr, ts, tu), SW_OK);
    assert_int_equal(fr, 0);
    for (int k = 1; k <= 6; k++) {
        const sw_image *f = &frames[k % NFRAME];
        assert_int_equal(sw_rtc_run(r, f, u, sl), SW_OK);
        assert_int_equal(sw_rtc_run(r0, f, NULL, s0), SW_OK);
        assert_memory_equal(s0, sl, (size_t)n2 * sizeof(float));
        assert_memory_equal(sw_rtc_commands(r0), u, (size_t)nact * sizeof(float));
        if (k == 1)
            memcpy(u1, u, (size_t)nact * sizeof(float));
        assert_int_equal(sw_rtc_telemetry_read(r, &fr, ts, tu), SW_OK);
        assert_int_equal(fr, k);
        assert_memory_equal(ts, sl, (size_t)n2 * sizeof(float));
        assert_memory_equal(tu, u, (size_t)nact * sizeof(float));
    }
    /* frame 1 again after the state has moved: different; after a reset: the same */
    assert_int_equal(sw_rtc_run(r, &frames[1], u, NULL), SW_OK);
    assert_true(memcmp(u, u1, (size_t)nact * sizeof(float)) != 0);
    sw_rtc_reset(r);
    assert_int_equal(sw_rtc_run(r, &frames[1], u, NULL), SW_OK);
    assert_memory_equal(u, u1, (size_t)nact * sizeof(float));
    assert_int_equal(sw_rtc_telemetry_read(r, &fr, NULL, tu), SW_OK);
    assert_int_equal(fr, 8); /* frames keep counting through a reset */
    assert_memory_equal(tu, u1, (size_t)nact * sizeof(float));
    assert_true(sw_rtc_last_us(r) > 0.0);
    free(u);
    free(u1);
    free(tu);
    free(sl);
    free(ts);
    free(s0);
    sw_rtc_destroy(r);
    sw_rtc_destroy(r0);
    free_setup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mvm_fp32),
        cmocka_unit_test(test_mvm_fp16),
        cmocka_unit_test(test_sabre),
        cmocka_unit_test(test_frame_memory),
        cmocka_unit_test(test_reset_and_telemetry),
        cmocka_unit_test(test_set_gains),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#endif
