/*
 * The real-time chain on the CPU (loop.h, sw_rtc_*; src/loop/rtc.c): it gives the same commands
 * as running the stages one by one.
 *
 * Frames: 8 x 8 lenslets of 16 px on a 128 x 128 u16 frame, rendered by the SH simulator
 * (GEOMETRIC, Gaussian spots) from a different Zernike wavefront per frame, with a mask that
 * leaves out the four corner lenslets (so that the chain's scatter of the mask's slopes into
 * D-SABRE's full array is exercised). The reference for every frame is built here from the
 * stages' own public calls: the slopes of a separate centroid plan, r = C s (MVM, in double), or
 * the slopes scaled and scattered by hand into a separate D-SABRE plan (CORNERS: its actuators;
 * GLOBAL: P times its values, in double; LOCAL: its actuators with the same local projection),
 * then the controller written out by hand in double (integrator, leaky with clip, PI with an
 * orthonormal modal basis). Tolerance 1e-5 of max |u|: float arithmetic (OpenBLAS sgemv, the
 * float controller) against double, over at most 120 terms per dot product.
 *
 * Also: the integrator's state carries (the same frame twice gives twice the commands), a reset
 * gives back a fresh plan's commands bit for bit, the telemetry ring returns the newest frame's
 * slopes and commands, a reader thread sees only consistent slots while the owner runs 200 frames
 * through a ring of 3 slots, and bad input is refused with SW_EINVAL and a message.
 */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define NL     8  /* lenslets per side */
#define PITCH  16 /* pixels per lenslet */
#define SIDE   (NL * PITCH)
#define NFRAME 4 /* distinct frames */
#define TOL    1e-5

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

/* NFRAME frames of different aberrations (tilts and second/third order, up to ~2 px). */
static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(0);
    for (int l = 0; l < NL * NL; l++) {
        const int ix = l % NL, iy = l / NL;
        mask[l] = !((ix == 0 || ix == NL - 1) && (iy == 0 || iy == NL - 1));
    }
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    geometry(&sp.geom);
    sp.geom.valid = NULL; /* render every lenslet; the chain's mask decides what is read */
    sp.width = SIDE;
    sp.height = SIDE;
    sp.model = SW_SH_GEOMETRIC;
    sp.spot = SW_SH_SPOT_GAUSSIAN;
    sp.sigma_px = 1.5;
    sp.flux_e = 4e4;
    sw_shsim *sim = NULL;
    if (sw_shsim_create(cpu, &sp, &sim) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(cpu));
    const double radius = 0.5 * NL * sw_sh_lenslet_um(&sp.geom);
    sw_image e;
    assert_int_equal(sw_image_alloc(cpu, SIDE, SIDE, SW_PIX_F32, &e), SW_OK);
    uint64_t seed = 99;
    for (int f = 0; f < NFRAME; f++) {
        double coef[10] = {0};
        for (int j = 1; j < 10; j++)
            coef[j] = (j < 3 ? 0.08 : 0.05) * (2.0 * unit_rand(&seed) - 1.0);
        assert_int_equal(sw_shsim_clear_opd(sim), SW_OK);
        assert_int_equal(sw_shsim_add_zernike(sim, coef, 10, radius), SW_OK);
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
    sw_context_destroy(cpu);
    return 0;
}

/* ------------------------------------------------------------------ the stages one by one */

static void centroid_params(sw_centroid_params *c)
{
    sw_centroid_params_default(c);
    geometry(&c->geometry);
    c->width = SIDE;
    c->height = SIDE;
    c->type = SW_PIX_U16;
}

static int32_t nslopes(void)
{
    int32_t n = 0;
    for (int l = 0; l < NL * NL; l++)
        n += mask[l] != 0;
    return n;
}

/* The centroid plan's own slopes of frame f (2 ns floats). */
static void stage_slopes(int f, float *s)
{
    sw_centroid_params c;
    centroid_params(&c);
    c.path = SW_CENTROID_HOST;
    sw_centroid_plan *plan = NULL;
    assert_int_equal(sw_centroid_create(cpu, &c, &plan), SW_OK);
    sw_centroid_result res;
    assert_int_equal(sw_centroid_result_alloc(plan, 1, SW_MEM_HOST, &res), SW_OK);
    assert_int_equal(sw_centroid_run(plan, &frames[f], &res), SW_OK);
    memcpy(s, res.slopes, (size_t)2 * res.nslopes * sizeof(float));
    sw_centroid_result_free(&res);
    sw_centroid_destroy(plan);
}

static float *random_matrix(int64_t n, uint64_t seed)
{
    float *a = malloc((size_t)n * sizeof(float));
    assert_non_null(a);
    for (int64_t i = 0; i < n; i++)
        a[i] = (float)(2.0 * unit_rand(&seed) - 1.0);
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

/* The controller by hand, in double (loop.h's formulas; seed 000 section 6). */
typedef struct hand_ctrl {
    sw_controller_params p;
    double *u, *integ, *e, *v;
} hand_ctrl;

static void hand_init(hand_ctrl *h, const sw_controller_params *p)
{
    h->p = *p;
    const int32_t nm = p->kind == SW_CTRL_PI ? p->nmodes : 1;
    h->u = calloc((size_t)p->nact, sizeof(double));
    h->integ = calloc((size_t)nm, sizeof(double));
    h->e = calloc((size_t)nm, sizeof(double));
    h->v = calloc((size_t)nm, sizeof(double));
}

static void hand_free(hand_ctrl *h)
{
    free(h->u);
    free(h->integ);
    free(h->e);
    free(h->v);
}

static void hand_law(hand_ctrl *h, const double *r);

static double clip_to(double u, double c)
{
    return c > 0.0 ? (u > c ? c : (u < -c ? -c : u)) : u;
}

static void hand_step(hand_ctrl *h, const double *rin)
{
    const sw_controller_params *p = &h->p;
    const int32_t n = p->nact;
    /* the unseen modes out: r - Z (Z^T r) */
    double *r = malloc((size_t)n * sizeof(double));
    assert_non_null(r);
    memcpy(r, rin, (size_t)n * sizeof(double));
    for (int32_t j = 0; j < p->nfilter; j++) {
        const float *z = p->filter + (size_t)j * n;
        double t = 0.0;
        for (int32_t i = 0; i < n; i++)
            t += (double)z[i] * rin[i];
        for (int32_t i = 0; i < n; i++)
            r[i] -= t * z[i];
    }
    hand_law(h, r);
    free(r);
}

static void hand_law(hand_ctrl *h, const double *r)
{
    const sw_controller_params *p = &h->p;
    const int32_t n = p->nact;
    if (p->kind != SW_CTRL_PI) {
        const double keep = p->kind == SW_CTRL_LEAKY ? 1.0 - p->leak : 1.0;
        for (int32_t i = 0; i < n; i++)
            h->u[i] = clip_to(keep * h->u[i] + p->gain * r[i], p->clip);
        return;
    }
    const int32_t nm = p->nmodes;
    for (int32_t j = 0; j < nm; j++) {
        double e = 0.0;
        if (p->modes)
            for (int32_t i = 0; i < n; i++)
                e += (double)p->modes[(size_t)j * n + i] * r[i];
        else
            e = r[j];
        h->integ[j] += e;
        const double kp = p->kp ? p->kp[j] : 0.0, ki = p->ki ? p->ki[j] : p->gain;
        h->v[j] = kp * e + ki * h->integ[j];
    }
    double *d = calloc((size_t)n, sizeof(double));
    assert_non_null(d);
    for (int32_t i = 0; i < n; i++) {
        double u = 0.0;
        if (p->modes)
            for (int32_t j = 0; j < nm; j++)
                u += (double)p->modes[(size_t)j * n + i] * h->v[j];
        else
            u = h->v[i];
        h->u[i] = clip_to(u, p->clip);
        d[i] = h->u[i] - u;
    }
    /* anti-windup by back-calculation: I_j += (B^T d)_j / ki_j */
    for (int32_t j = 0; j < nm; j++) {
        double bd = 0.0;
        if (p->modes)
            for (int32_t i = 0; i < n; i++)
                bd += (double)p->modes[(size_t)j * n + i] * d[i];
        else
            bd = d[j];
        const double ki = p->ki ? p->ki[j] : p->gain;
        if (ki != 0.0)
            h->integ[j] += bd / ki;
    }
    free(d);
}

/* max |a - b| <= TOL max |b| (and a few ulps of nothing when b is 0). */
static void assert_close(const float *a, const double *b, int32_t n, double tol)
{
    double m = 0.0, d = 0.0;
    for (int32_t i = 0; i < n; i++) {
        m = fmax(m, fabs(b[i]));
        d = fmax(d, fabs((double)a[i] - b[i]));
    }
    if (!(d <= tol * m + 1e-12))
        fail_msg("max |chain - stages| = %g, max |stages| = %g (tolerance %g relative)", d, m, tol);
    assert_true(m > 0.0); /* a test on all-zero commands would prove little */
}

/* r = A x in double, A rows x cols row-major. */
static void matvec(const float *A, int32_t rows, int64_t cols, const float *x, double *r)
{
    for (int32_t i = 0; i < rows; i++) {
        double acc = 0.0;
        for (int64_t j = 0; j < cols; j++)
            acc += (double)A[(size_t)i * cols + j] * x[j];
        r[i] = acc;
    }
}

/* The slopes (mask order) into D-SABRE's x / y blocks over all lenslets, times scale. */
static void scatter(const float *s, int32_t ns, double scale, float *out)
{
    const int n = NL * NL;
    memset(out, 0, (size_t)2 * n * sizeof(float));
    int32_t k = 0;
    for (int l = 0; l < n; l++) {
        if (!mask[l])
            continue;
        out[l] = s[k] * (float)scale;
        out[n + l] = s[ns + k] * (float)scale;
        k++;
    }
    assert_int_equal(k, ns);
}

static void sabre_params(sw_sabre_params *sp, int extend)
{
    sw_sabre_params_default(sp);
    sp->nx = NL;
    sp->ny = NL;
    sp->pitch = PITCH * 5.5; /* um: values in um of OPD for slopes in radians */
    sp->partitions = 2;
    sp->overlap = 1;
    sp->extend_eq17 = extend;
}

/* ------------------------------------------------------------------ the chain vs the stages */

typedef struct chain_case {
    sw_rtc_recon recon;
    sw_rtc_projection proj;
    sw_controller_kind kind;
    double leak, clip;
    int32_t nact;    /* MVM / GLOBAL */
    int32_t nmodes;  /* PI (0: identity) */
    int32_t nfilter; /* unseen modes filtered (random orthonormal), 0: none */
} chain_case;

/* Runs NFRAME + 1 frames (the last repeats frame 0) through the chain and through the stages one
 * by one, comparing the commands after every frame (the state carries between them). */
static void compare_chain(const chain_case *cc)
{
    const int32_t ns = nslopes(), n2 = 2 * ns, corners = (NL + 1) * (NL + 1);
    const double scale = 5.5 / (3.5 * 1000.0); /* pixel_um / (focal_mm 1000): radians */
    sw_rtc_params p;
    sw_rtc_params_default(&p);
    centroid_params(&p.centroid);
    p.recon = cc->recon;
    p.projection = cc->proj;
    p.slope_scale = scale;
    const int uses_corners = cc->recon == SW_RTC_SABRE && cc->proj != SW_RTC_PROJ_GLOBAL;
    p.nact = uses_corners ? corners : cc->nact;
    const int32_t nact = p.nact;

    float *cm = NULL, *P = NULL, *modes = NULL, *kp = NULL, *ki = NULL;
    sw_sabre *ref = NULL;
    sw_sabre_params sp;
    sabre_params(&sp, cc->proj == SW_RTC_PROJ_LOCAL);
    sp.valid = mask;
    int64_t nvalues = 0;
    if (cc->recon == SW_RTC_MVM) {
        cm = random_matrix((int64_t)nact * n2, 7);
        p.cm = cm;
    } else {
        p.sabre = sp;
        p.sabre.valid = NULL; /* the chain takes the geometry's mask */
        assert_int_equal(sw_sabre_create(cpu, &sp, &ref), SW_OK);
        sw_sabre_info info;
        sw_sabre_get_info(ref, &info);
        nvalues = sw_sabre_lattice_values(&info.lattice);
        if (cc->proj == SW_RTC_PROJ_GLOBAL) {
            P = random_matrix((int64_t)nact * nvalues, 11);
            p.projection_matrix = P;
            p.projection_rows = nact;
            p.projection_cols = (int32_t)nvalues;
        } else if (cc->proj == SW_RTC_PROJ_LOCAL) {
            const int32_t rows = info.window * info.window, cols = info.local_values;
            P = random_matrix((int64_t)rows * cols, 13);
            for (int64_t i = 0; i < (int64_t)rows * cols; i++)
                P[i] *= 0.1f;
            p.projection_matrix = P;
            p.projection_rows = rows;
            p.projection_cols = cols;
            assert_int_equal(sw_sabre_set_projection(ref, P, rows, cols), SW_OK);
        }
    }

    sw_controller_params_default(&p.controller);
    p.controller.kind = cc->kind;
    p.controller.nact = nact;
    p.controller.gain = 0.4;
    p.controller.leak = cc->leak;
    p.controller.clip = cc->clip;
    if (cc->kind == SW_CTRL_PI) {
        const int32_t nm = cc->nmodes > 0 ? cc->nmodes : nact;
        p.controller.nmodes = nm;
        if (cc->nmodes > 0) {
            modes = orthonormal_modes(nact, nm, 17);
            p.controller.modes = modes;
        }
        kp = malloc((size_t)nm * sizeof(float));
        ki = malloc((size_t)nm * sizeof(float));
        for (int32_t j = 0; j < nm; j++) {
            kp[j] = 0.1f + 0.3f * (float)(j % 3);
            ki[j] = 0.2f + 0.1f * (float)(j % 4);
        }
        p.controller.kp = kp;
        p.controller.ki = ki;
    }

    float *filter = NULL;
    if (cc->nfilter > 0) {
        filter = orthonormal_modes(nact, cc->nfilter, 29);
        p.controller.nfilter = cc->nfilter;
        p.controller.filter = filter;
    }

    sw_rtc *rtc = NULL;
    if (sw_rtc_create(cpu, &p, &rtc) != SW_OK)
        fail_msg("sw_rtc_create: %s", sw_context_error(cpu));
    assert_int_equal(sw_rtc_slopes(rtc), ns);

    hand_ctrl h;
    hand_init(&h, &p.controller);
    float *s = malloc((size_t)n2 * sizeof(float)), *cs = malloc((size_t)n2 * sizeof(float));
    float *u = malloc((size_t)nact * sizeof(float));
    float *sab = malloc((size_t)2 * NL * NL * sizeof(float));
    float *act = malloc((size_t)corners * sizeof(float));
    float *val = malloc((size_t)(nvalues > 0 ? nvalues : 1) * sizeof(float));
    double *r = malloc((size_t)nact * sizeof(double));
    for (int k = 0; k <= NFRAME; k++) {
        const int f = k % NFRAME;
        assert_int_equal(sw_rtc_run(rtc, &frames[f], u, cs), SW_OK);
        /* the stages */
        stage_slopes(f, s);
        assert_memory_equal(cs, s, (size_t)n2 * sizeof(float));
        if (cc->recon == SW_RTC_MVM) {
            matvec(cm, nact, n2, s, r);
        } else {
            scatter(s, ns, scale, sab);
            if (cc->proj == SW_RTC_PROJ_GLOBAL) {
                assert_int_equal(sw_sabre_run(ref, sab, SW_MEM_HOST, val, NULL), SW_OK);
                matvec(P, nact, nvalues, val, r);
            } else {
                assert_int_equal(sw_sabre_run(ref, sab, SW_MEM_HOST, NULL, act), SW_OK);
                for (int32_t i = 0; i < nact; i++)
                    r[i] = act[i];
            }
        }
        hand_step(&h, r);
        assert_close(u, h.u, nact, TOL);
        assert_memory_equal(sw_rtc_commands(rtc), u, (size_t)nact * sizeof(float));
        assert_true(sw_rtc_last_us(rtc) >= 0.0);
    }

    hand_free(&h);
    free(s);
    free(cs);
    free(u);
    free(sab);
    free(act);
    free(val);
    free(r);
    free(cm);
    free(P);
    free(modes);
    free(kp);
    free(ki);
    free(filter);
    sw_sabre_destroy(ref);
    sw_rtc_destroy(rtc);
}

static void test_mvm(void **state)
{
    (void)state;
    const chain_case a = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, SW_CTRL_INTEGRATOR, 0, 0, 37, 0, 0};
    compare_chain(&a);
    /* leaky with a clip that bites (random C times slopes of ~1 px reach a few units) */
    const chain_case b = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, SW_CTRL_LEAKY, 0.1, 1.5, 37, 0, 0};
    compare_chain(&b);
    const chain_case c = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, SW_CTRL_PI, 0, 0, 37, 12, 0};
    compare_chain(&c);
    const chain_case d = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, SW_CTRL_PI, 0, 2.0, 37, 0, 0};
    compare_chain(&d);
    /* PI over modes with a clip that bites: the back-calculation */
    const chain_case e = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, SW_CTRL_PI, 0, 1.0, 37, 12, 0};
    compare_chain(&e);
    /* the unseen modes' filter, folded into C */
    const chain_case f = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, SW_CTRL_INTEGRATOR, 0, 0, 37, 0, 2};
    compare_chain(&f);
    const chain_case g = {SW_RTC_MVM, SW_RTC_PROJ_CORNERS, SW_CTRL_PI, 0, 0, 37, 12, 3};
    compare_chain(&g);
}

static void test_sabre_corners(void **state)
{
    (void)state;
    const chain_case a = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, SW_CTRL_INTEGRATOR, 0, 0, 0, 0, 0};
    compare_chain(&a);
    const chain_case b = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, SW_CTRL_PI, 0, 0, 0, 20, 0};
    compare_chain(&b);
    /* the filter applied to r each frame (the chain cannot fold it) */
    const chain_case c = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, SW_CTRL_INTEGRATOR, 0, 0, 0, 0, 2};
    compare_chain(&c);
    const chain_case d = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, SW_CTRL_PI, 0, 0.5, 0, 20, 2};
    compare_chain(&d);
    const chain_case e = {SW_RTC_SABRE, SW_RTC_PROJ_CORNERS, SW_CTRL_PI, 0, 0, 0, 0, 1};
    compare_chain(&e);
}

static void test_sabre_global(void **state)
{
    (void)state;
    const chain_case a = {SW_RTC_SABRE, SW_RTC_PROJ_GLOBAL, SW_CTRL_INTEGRATOR, 0, 0, 45, 0, 0};
    compare_chain(&a);
    const chain_case b = {SW_RTC_SABRE, SW_RTC_PROJ_GLOBAL, SW_CTRL_LEAKY, 0.05, 0, 45, 0, 0};
    compare_chain(&b);
    const chain_case c = {SW_RTC_SABRE, SW_RTC_PROJ_GLOBAL, SW_CTRL_INTEGRATOR, 0, 0, 45, 0, 2};
    compare_chain(&c);
}

static void test_sabre_local(void **state)
{
    (void)state;
    const chain_case a = {SW_RTC_SABRE, SW_RTC_PROJ_LOCAL, SW_CTRL_INTEGRATOR, 0, 0, 0, 0, 0};
    compare_chain(&a);
    const chain_case b = {SW_RTC_SABRE, SW_RTC_PROJ_LOCAL, SW_CTRL_LEAKY, 0.02, 0.3, 0, 0, 2};
    compare_chain(&b);
}

/* ------------------------------------------------------------------ state, reset, telemetry */

/* An MVM chain of nact commands with a random C and the given controller kind. */
static sw_rtc *mvm_chain(sw_context *ctx, int32_t nact, sw_controller_kind kind, int32_t telemetry,
                         float **cm)
{
    sw_rtc_params p;
    sw_rtc_params_default(&p);
    centroid_params(&p.centroid);
    p.recon = SW_RTC_MVM;
    p.nact = nact;
    *cm = random_matrix((int64_t)nact * 2 * nslopes(), 23);
    p.cm = *cm;
    sw_controller_params_default(&p.controller);
    p.controller.kind = kind;
    p.controller.nact = nact;
    p.controller.gain = 0.5;
    p.telemetry = telemetry;
    float *kp = NULL, *ki = NULL;
    if (kind == SW_CTRL_PI) { /* kp = 1, ki = 0: u = r = C s, a function of the frame alone */
        p.controller.nmodes = nact;
        kp = malloc((size_t)nact * sizeof(float));
        ki = malloc((size_t)nact * sizeof(float));
        for (int32_t j = 0; j < nact; j++) {
            kp[j] = 1.0f;
            ki[j] = 0.0f;
        }
        p.controller.kp = kp;
        p.controller.ki = ki;
    }
    sw_rtc *r = NULL;
    if (sw_rtc_create(ctx, &p, &r) != SW_OK)
        fail_msg("sw_rtc_create: %s", sw_context_error(ctx));
    free(kp); /* copied */
    free(ki);
    return r;
}

/* The integrator's state carries: the same frame twice gives twice the first commands (u1 = g r,
 * u2 = u1 + g r, in float: exact doubling up to one rounding). A reset gives the first commands
 * again, bit for bit. */
static void test_state_and_reset(void **state)
{
    (void)state;
    const int32_t nact = 25;
    float *cm = NULL;
    sw_rtc *r = mvm_chain(cpu, nact, SW_CTRL_INTEGRATOR, 0, &cm);
    float u1[25], u2[25], u3[25];
    assert_int_equal(sw_rtc_run(r, &frames[1], u1, NULL), SW_OK);
    assert_int_equal(sw_rtc_run(r, &frames[1], u2, NULL), SW_OK);
    double m = 0.0;
    for (int32_t i = 0; i < nact; i++)
        m = fmax(m, fabs(u1[i]));
    assert_true(m > 0.0);
    for (int32_t i = 0; i < nact; i++)
        assert_near(u2[i], 2.0 * u1[i], 1e-6 * m);
    sw_rtc_reset(r);
    for (int32_t i = 0; i < nact; i++)
        assert_true(sw_rtc_commands(r)[i] == 0.0f);
    assert_int_equal(sw_rtc_run(r, &frames[1], u3, NULL), SW_OK);
    assert_memory_equal(u3, u1, sizeof u1);
    sw_rtc_destroy(r);
    free(cm);
}

/* The ring returns the newest frame (numbered from 1), its slopes and its commands; nothing
 * before the first run; nothing ever without a ring. */
static void test_telemetry(void **state)
{
    (void)state;
    const int32_t nact = 19, ns = nslopes();
    float *cm = NULL;
    sw_rtc *r = mvm_chain(cpu, nact, SW_CTRL_INTEGRATOR, 4, &cm);
    int64_t fr = -1;
    float *ts = malloc((size_t)2 * ns * sizeof(float)), *s = malloc((size_t)2 * ns * sizeof(float));
    float tu[19], u[19];
    assert_int_equal(sw_rtc_telemetry_read(r, &fr, NULL, NULL), SW_OK);
    assert_int_equal(fr, 0);
    for (int k = 1; k <= 7; k++) {
        assert_int_equal(sw_rtc_run(r, &frames[k % NFRAME], u, s), SW_OK);
        assert_int_equal(sw_rtc_telemetry_read(r, &fr, ts, tu), SW_OK);
        assert_int_equal(fr, k);
        assert_memory_equal(ts, s, (size_t)2 * ns * sizeof(float));
        assert_memory_equal(tu, u, sizeof u);
        assert_int_equal(sw_rtc_telemetry_read(r, &fr, NULL, tu), SW_OK); /* slopes optional */
        assert_memory_equal(tu, u, sizeof u);
    }
    sw_rtc_destroy(r);
    free(cm);

    r = mvm_chain(cpu, nact, SW_CTRL_INTEGRATOR, 0, &cm);
    assert_int_equal(sw_rtc_run(r, &frames[0], u, NULL), SW_OK);
    assert_int_equal(sw_rtc_telemetry_read(r, &fr, ts, tu), SW_OK);
    assert_int_equal(fr, 0);
    sw_rtc_destroy(r);
    free(cm);
    free(ts);
    free(s);
}

/* A reader thread against the owner: 200 frames, frame k = frames[(k - 1) % NFRAME], through a
 * ring of one slot (the owner always rewrites the slot the reader reads) and of three. The
 * controller is PI with kp = 1, ki = 0 and the identity basis, so the commands of frame k are
 * C s_k, a function of the frame alone; 2000 commands make the slot's write long enough to be
 * caught in the middle. Every slot the reader gets must hold frame k's own slopes (exactly) and
 * commands (C s_k within float rounding), and the frame numbers it sees never go back. */
typedef struct reader_arg {
    sw_rtc *r;
    const float *slopes;  /* NFRAME x 2 ns, the stages' */
    const double *expect; /* NFRAME x nact: C s in double */
    const double *mag;    /* NFRAME x nact: sum |C_ij s_j| (the rounding scale) */
    int32_t ns, nact;
    atomic_int done;
    int reads, bad, back;
} reader_arg;

static void *reader(void *arg)
{
    reader_arg *a = arg;
    const int32_t n2 = 2 * a->ns;
    float *s = malloc((size_t)n2 * sizeof(float)), *u = malloc((size_t)a->nact * sizeof(float));
    int64_t last = 0;
    while (!atomic_load(&a->done) || a->reads < 50) {
        int64_t f = 0;
        if (sw_rtc_telemetry_read(a->r, &f, s, u) != SW_OK) {
            a->bad++;
            break;
        }
        if (f == 0)
            continue;
        a->reads++;
        if (f < last)
            a->back++;
        last = f;
        const size_t i = (size_t)((f - 1) % NFRAME);
        if (memcmp(s, a->slopes + i * n2, (size_t)n2 * sizeof(float)) != 0) {
            a->bad++;
            continue;
        }
        const double *e = a->expect + i * a->nact, *m = a->mag + i * a->nact;
        for (int32_t j = 0; j < a->nact; j++)
            if (!(fabs(u[j] - e[j]) <= 1e-5 * m[j] + 1e-12)) {
                a->bad++;
                break;
            }
    }
    free(s);
    free(u);
    return NULL;
}

static void test_telemetry_thread(void **state)
{
    (void)state;
    const int32_t nact = 2000, ns = nslopes(), n2 = 2 * ns;
    float *slopes = malloc((size_t)NFRAME * n2 * sizeof(float));
    double *expect = malloc((size_t)NFRAME * nact * sizeof(double));
    double *mag = malloc((size_t)NFRAME * nact * sizeof(double));
    for (int f = 0; f < NFRAME; f++)
        stage_slopes(f, slopes + (size_t)f * n2);
    /* the frames must differ, or a torn slot could not be seen */
    assert_true(memcmp(slopes, slopes + n2, (size_t)n2 * sizeof(float)) != 0);
    sw_context *one = sw_test_cpu_context(1);
    for (int32_t slots = 1; slots <= 3; slots += 2) {
        float *cm = NULL;
        /* the owner on one thread: the reader would stall an OpenMP team's barriers */
        sw_rtc *r = mvm_chain(one, nact, SW_CTRL_PI, slots, &cm);
        for (int f = 0; f < NFRAME; f++)
            for (int32_t i = 0; i < nact; i++) {
                double acc = 0.0, m = 0.0;
                for (int32_t j = 0; j < n2; j++) {
                    const double t = (double)cm[(size_t)i * n2 + j] * slopes[(size_t)f * n2 + j];
                    acc += t;
                    m += fabs(t);
                }
                expect[(size_t)f * nact + i] = acc;
                mag[(size_t)f * nact + i] = m;
            }
        reader_arg a;
        memset(&a, 0, sizeof a);
        a.r = r;
        a.slopes = slopes;
        a.expect = expect;
        a.mag = mag;
        a.ns = ns;
        a.nact = nact;
        atomic_init(&a.done, 0);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, reader, &a), 0);
        for (int k = 1; k <= 200; k++)
            assert_int_equal(sw_rtc_run(r, &frames[(k - 1) % NFRAME], NULL, NULL), SW_OK);
        atomic_store(&a.done, 1);
        assert_int_equal(pthread_join(th, NULL), 0);
        if (a.bad != 0 || a.back != 0)
            fail_msg("ring of %d: %d inconsistent slots and %d steps back in %d reads", slots,
                     a.bad, a.back, a.reads);
        assert_true(a.reads >= 50);
        int64_t fr = 0;
        assert_int_equal(sw_rtc_telemetry_read(r, &fr, NULL, NULL), SW_OK);
        assert_int_equal(fr, 200);
        sw_rtc_destroy(r);
        free(cm);
    }
    sw_context_destroy(one);
    free(slopes);
    free(expect);
    free(mag);
}

/* ------------------------------------------------------------------ bad input */

static void expect_einval(const sw_rtc_params *p, const char *what)
{
    sw_rtc *r = (sw_rtc *)0x1;
    const sw_status st = sw_rtc_create(cpu, p, &r);
    if (st != SW_EINVAL)
        fail_msg("%s: sw_rtc_create returned %d, not SW_EINVAL", what, (int)st);
    assert_null(r);
    assert_true(strlen(sw_context_error(cpu)) > 0);
}

static void test_bad_input(void **state)
{
    (void)state;
    const int32_t nact = 10, ns = nslopes();
    float *cm = random_matrix((int64_t)nact * 2 * ns, 5);
    sw_rtc_params good;
    sw_rtc_params_default(&good);
    centroid_params(&good.centroid);
    good.nact = nact;
    good.cm = cm;
    sw_controller_params_default(&good.controller);
    good.controller.nact = nact;

    sw_rtc_params p = good;
    p.cm = NULL;
    expect_einval(&p, "NULL cm");
    p = good;
    p.controller.nact = nact + 1;
    expect_einval(&p, "controller nact mismatch");
    p = good;
    p.nact = 0;
    p.controller.nact = 0;
    expect_einval(&p, "nact 0");
    p = good;
    p.telemetry = 65537;
    expect_einval(&p, "telemetry 65537");
    p = good;
    p.telemetry = -1;
    expect_einval(&p, "telemetry -1");
    p = good;
    p.centroid.slope_layout = SW_SLOPES_INTERLEAVED;
    expect_einval(&p, "interleaved slopes");
    p = good;
    p.recon = (sw_rtc_recon)7;
    expect_einval(&p, "unknown reconstructor");
    p = good;
    p.centroid.width = 64; /* the geometry does not fit */
    expect_einval(&p, "geometry outside the frame");
    cm[3] = NAN;
    p = good;
    expect_einval(&p, "NaN in cm");
    cm[3] = 0.5f;

    /* SABRE */
    sw_rtc_params q = good;
    q.recon = SW_RTC_SABRE;
    q.cm = NULL;
    sabre_params(&q.sabre, 0);
    q.nact = (NL + 1) * (NL + 1);
    q.controller.nact = q.nact;
    q.slope_scale = 0.0;
    expect_einval(&q, "slope_scale 0");
    q.slope_scale = NAN;
    expect_einval(&q, "slope_scale NaN");
    q.slope_scale = 1.0;
    q.nact = 80;
    q.controller.nact = 80;
    expect_einval(&q, "corners with the wrong nact");
    q.nact = (NL + 1) * (NL + 1);
    q.controller.nact = q.nact;
    q.projection = SW_RTC_PROJ_GLOBAL;
    expect_einval(&q, "global without a matrix");
    q.projection = SW_RTC_PROJ_LOCAL;
    q.projection_matrix = cm;
    expect_einval(&q, "local without extend_eq17");
    q.sabre.extend_eq17 = 1;
    q.projection_rows = 3; /* not the window's w^2 x local_values */
    q.projection_cols = 5;
    expect_einval(&q, "local projection of the wrong size");
    q.projection = SW_RTC_PROJ_GLOBAL;
    expect_einval(&q, "global projection of the wrong size");
    q.sabre.extend_eq17 = 0;
    q.projection_rows = q.projection_cols = 0;
    q.projection = (sw_rtc_projection)9;
    expect_einval(&q, "unknown projection");
    q.projection = SW_RTC_PROJ_CORNERS;
    q.sabre.nx = NL + 1;
    expect_einval(&q, "sabre nx differs from the geometry");

    /* runs: wrong frame size, type, memory */
    sw_rtc *r = NULL;
    assert_int_equal(sw_rtc_create(cpu, &good, &r), SW_OK);
    float u[10];
    sw_image wrong;
    assert_int_equal(sw_image_alloc(cpu, SIDE + 1, SIDE, SW_PIX_U16, &wrong), SW_OK);
    assert_int_equal(sw_rtc_run(r, &wrong, u, NULL), SW_EINVAL);
    sw_image_free(&wrong);
    assert_int_equal(sw_image_alloc(cpu, SIDE, SIDE + 16, SW_PIX_U16, &wrong), SW_OK);
    assert_int_equal(sw_rtc_run(r, &wrong, u, NULL), SW_EINVAL);
    sw_image_free(&wrong);
    assert_int_equal(sw_image_alloc(cpu, SIDE, SIDE, SW_PIX_U8, &wrong), SW_OK);
    assert_int_equal(sw_rtc_run(r, &wrong, u, NULL), SW_EINVAL);
    assert_true(strlen(sw_context_error(cpu)) > 0);
    sw_image_free(&wrong);
    sw_image dev = frames[0];
    dev.memory = SW_MEM_DEVICE;
    assert_int_equal(sw_rtc_run(r, &dev, u, NULL), SW_EINVAL);
    assert_int_equal(sw_rtc_run(r, NULL, u, NULL), SW_EINVAL);
    assert_int_equal(sw_rtc_run(NULL, &frames[0], u, NULL), SW_EINVAL);
    /* nothing was run: no frame in the telemetry, commands still 0 */
    for (int32_t i = 0; i < nact; i++)
        assert_true(sw_rtc_commands(r)[i] == 0.0f);
    assert_int_equal(sw_rtc_telemetry_read(r, NULL, NULL, NULL), SW_EINVAL);
    sw_rtc_destroy(r);
    sw_rtc_destroy(NULL);
    free(cm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mvm),
        cmocka_unit_test(test_sabre_corners),
        cmocka_unit_test(test_sabre_global),
        cmocka_unit_test(test_sabre_local),
        cmocka_unit_test(test_state_and_reset),
        cmocka_unit_test(test_telemetry),
        cmocka_unit_test(test_telemetry_thread),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
