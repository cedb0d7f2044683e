/*
 * The GPU run of D-SABRE (sabre_cuda.cu) against the CPU's (sabre.c): plans with the same
 * parameters give the same lattice values and actuators for several array sizes and partitionings
 * (16 x 16 with k = 1, 2, 4; 64 x 64 with k = 8, 32; 100 x 100 with k = 16; 200 x 200 with
 * k = 32), H-PME, D-PME and none, overlap 0, 1, 2, a full and an annular mask.
 *
 * Tolerance: max |GPU - CPU| <= 2e-5 x the RMS (about the mean) of the CPU's output. Both runs
 * are the same arithmetic except the order of the additions in the float GEMM Y = Q X (cuBLAS vs
 * OpenBLAS) and in the pair sums; against a double GEMM the CPU's values of these configurations
 * are off by at most 4e-6 of their RMS (measured: the longest dot products, k = 1 on 16 x 16, 512
 * slopes), so two float orders differ by about twice that. A wrong index, partition or offset
 * gives errors of 1e-3 to 1 of the RMS.
 *
 * Bit-for-bit (the same GPU plan): repeated runs (graph replays) reproduce the first; host,
 * pinned and device memory give the same outputs; values only and actuators only give the
 * outputs of a run asking for both. A NaN slope of a valid lenslet gives SW_ERANGE with the CPU's
 * message, and the next good run is correct again; NaN slopes of invalid lenslets are not read.
 * Robust passes, robust PME and the border band (sabre.h): GPU = CPU within the same tolerance
 * (Huber's clipping and the medians are continuous in the values, so rounding moves them little).
 * Projection (step 6', extend_eq17): projected commands GPU = CPU, set / replaced / removed;
 * the real-time chain's sw_sabre_gpu_enqueue (plain and captured into a graph) = sw_sabre_run.
 * Sizes are small enough for compute-sanitizer. Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "sabre/sabre_internal.h"

#ifndef SW_HAVE_CUDA
int main(void)
{
    return 77; /* built without CUDA: nothing to compare */
}
#else

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 2e-5 /* of the RMS of the CPU's output, see above */

static sw_context *gpu;
static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

static double unit_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

typedef struct cfg {
    int32_t nx, ny, k, overlap;
    sw_sabre_pme pme;
    int annular; /* 30 % central obscuration; else all lenslets valid; 2: annular with
                    SW_SABRE_PAD_NEAREST; 3: annular with 3 fill iterations */
    int opts;    /* bit 0: 2 robust passes; bit 1: robust_pme; bit 2: pme_band (sabre.h) */
} cfg;

/* A CPU and a GPU plan of the same parameters, with their output sizes. */
typedef struct plans {
    sw_sabre *c, *g;
    uint8_t *mask;
    int64_t nv; /* lattice values */
    int64_t na; /* actuators */
    int32_t n;  /* lenslets */
} plans;

/* eq17: extend_eq17 */
static void make_plans_eq17(const cfg *c, int eq17, plans *out)
{
    memset(out, 0, sizeof *out);
    sw_sabre_params p;
    sw_sabre_params_default(&p);
    p.nx = c->nx;
    p.ny = c->ny;
    p.pitch = 0.25;
    p.partitions = c->k;
    p.overlap = c->overlap;
    p.pme = c->pme;
    p.extend_eq17 = eq17;
    p.robust_passes = c->opts & 1 ? 2 : 0;
    p.robust_pme = (c->opts >> 1) & 1;
    p.pme_band = (c->opts >> 2) & 1;
    if (c->annular) {
        /* lenslet centres inside an annulus of outer radius max(nx, ny) / 2, inner 0.3 of it */
        out->mask = malloc((size_t)c->nx * c->ny);
        assert_non_null(out->mask);
        double R = 0.5 * (c->nx > c->ny ? c->nx : c->ny);
        for (int32_t iy = 0; iy < c->ny; iy++)
            for (int32_t ix = 0; ix < c->nx; ix++) {
                double r = hypot(ix - 0.5 * (c->nx - 1), iy - 0.5 * (c->ny - 1));
                out->mask[iy * c->nx + ix] = r <= R && r >= 0.3 * R;
            }
        p.valid = out->mask;
        if (c->annular == 2)
            p.padding = SW_SABRE_PAD_NEAREST;
        if (c->annular == 3)
            p.fill_iterations = 3;
    }
    if (sw_sabre_create(cpu, &p, &out->c) != SW_OK)
        fail_msg("CPU plan: %s", sw_context_error(cpu));
    if (sw_sabre_create(gpu, &p, &out->g) != SW_OK)
        fail_msg("GPU plan: %s", sw_context_error(gpu));
    sw_sabre_info ic, ig;
    sw_sabre_get_info(out->c, &ic);
    sw_sabre_get_info(out->g, &ig);
    assert_int_equal(ic.k, ig.k);
    assert_int_equal(ic.m, ig.m);
    assert_int_equal(ic.window, ig.window);
    assert_int_equal(ic.local_values, ig.local_values);
    assert_int_equal(ic.dpme_iterations, ig.dpme_iterations);
    assert_memory_equal(&ic.lattice, &ig.lattice, sizeof ic.lattice);
    out->nv = sw_sabre_lattice_values(&ic.lattice);
    out->na = (int64_t)(c->nx + 1) * (c->ny + 1);
    out->n = c->nx * c->ny;
}

static void make_plans(const cfg *c, plans *out)
{
    make_plans_eq17(c, 0, out);
}

static void free_plans(plans *pl)
{
    sw_sabre_destroy(pl->c);
    sw_sabre_destroy(pl->g);
    free(pl->mask);
}

/* Slopes of a smooth wavefront (a few low orders over the array) plus uniform noise; invalid
 * lenslets get garbage (large values), which no run may read. */
static float *make_slopes(const plans *pl, int32_t nx, int32_t ny, uint64_t seed)
{
    float *s = malloc((size_t)2 * pl->n * sizeof(float));
    assert_non_null(s);
    double a = unit_rand(&seed) - 0.5, b = unit_rand(&seed) - 0.5, c = unit_rand(&seed) - 0.5;
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            int32_t l = iy * nx + ix;
            double x = (2.0 * ix - (nx - 1)) / nx, y = (2.0 * iy - (ny - 1)) / ny;
            /* W = a (x^2 + y^2) + b x y + c x^3: its gradient in x, y */
            double gx = 2 * a * x + b * y + 3 * c * x * x, gy = 2 * a * y + b * x;
            s[l] = (float)(gx + 0.2 * (unit_rand(&seed) - 0.5));
            s[pl->n + l] = (float)(gy + 0.2 * (unit_rand(&seed) - 0.5));
            if (pl->mask && !pl->mask[l]) {
                s[l] = 1e30f;
                s[pl->n + l] = -1e30f;
            }
        }
    return s;
}

/* max |g - c| <= tol x RMS(c) over n values (all finite). */
static void assert_close_rms_tol(const float *c, const float *g, int64_t n, const char *what,
                                 const cfg *k, double tol)
{
    double mean = 0.0, var = 0.0, d = 0.0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(c[i]) || !isfinite(g[i]))
            fail_msg("%s: value %lld is %g on the CPU, %g on the GPU", what, (long long)i, c[i],
                     g[i]);
        mean += c[i];
    }
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        var += (c[i] - mean) * (c[i] - mean);
        double e = fabs((double)g[i] - (double)c[i]);
        if (e > d)
            d = e, worst = i;
    }
    double rms = sqrt(var / (double)n);
    assert_true(rms > 0.0);
    if (!(d <= tol * rms))
        fail_msg("%dx%d k=%d OL=%d pme=%s mask=%d: %s differ by %g at %lld (CPU %g, GPU %g), "
                 "more than %g x RMS %g",
                 k->nx, k->ny, k->k, k->overlap, sw_sabre_pme_string(k->pme), k->annular, what, d,
                 (long long)worst, c[worst], g[worst], tol, rms);
}

static void assert_close_rms(const float *c, const float *g, int64_t n, const char *what,
                             const cfg *k)
{
    assert_close_rms_tol(c, g, n, what, k, TOL);
}

/* One configuration: CPU and GPU runs on host memory agree within the tolerance. */
static void compare(cfg c)
{
    plans pl;
    make_plans(&c, &pl);
    float *s = make_slopes(&pl, c.nx, c.ny, 77 + (uint64_t)c.nx * 131 + (uint64_t)c.k);
    float *vc = malloc((size_t)pl.nv * sizeof(float)), *vg = malloc((size_t)pl.nv * sizeof(float));
    float *ac = malloc((size_t)pl.na * sizeof(float)), *ag = malloc((size_t)pl.na * sizeof(float));
    assert_true(vc && vg && ac && ag);
    if (sw_sabre_run(pl.c, s, SW_MEM_HOST, vc, ac) != SW_OK)
        fail_msg("CPU run: %s", sw_context_error(cpu));
    if (sw_sabre_run(pl.g, s, SW_MEM_HOST, vg, ag) != SW_OK)
        fail_msg("GPU run: %s", sw_context_error(gpu));
    assert_close_rms(vc, vg, pl.nv, "values", &c);
    assert_close_rms(ac, ag, pl.na, "actuators", &c);
    assert_true(sw_sabre_kernel_us(pl.g) > 0.0);
    assert_true(sw_sabre_kernel_us(pl.c) == -1.0);
    free(s);
    free(vc);
    free(vg);
    free(ac);
    free(ag);
    free_plans(&pl);
}

static void test_sizes(void **state)
{
    (void)state;
    const sw_sabre_pme H = SW_SABRE_PME_HIERARCHICAL;
    compare((cfg){16, 16, 1, 1, H, 0, 0});
    compare((cfg){16, 16, 2, 1, H, 0, 0});
    compare((cfg){16, 16, 4, 1, H, 0, 0});
    compare((cfg){64, 64, 8, 1, H, 0, 0});
    compare((cfg){64, 64, 32, 1, H, 0, 0});
    compare((cfg){100, 100, 16, 1, H, 0, 0});
    compare((cfg){200, 200, 32, 1, H, 0, 0});
    compare((cfg){40, 28, 4, 1, H, 0, 0}); /* not square: the array is offset in the lattice */
    /* the PME block's memory: its data in shared memory (above), past 48 KB with the opt-in
     * (k = 64: 181 KB) and, beyond 200 KB, K and the pair data in global memory (k = 256) */
    compare((cfg){100, 100, 64, 1, H, 1, 0});
    compare((cfg){300, 300, 256, 1, H, 0, 0});
}

static void test_pme(void **state)
{
    (void)state;
    const sw_sabre_pme D = SW_SABRE_PME_DISTRIBUTED, N = SW_SABRE_PME_NONE;
    compare((cfg){64, 64, 8, 1, D, 0, 0});
    compare((cfg){64, 64, 8, 1, N, 0, 0});
    compare((cfg){100, 100, 16, 1, D, 0, 0});
    compare((cfg){16, 16, 4, 1, N, 0, 0});
    compare((cfg){48, 40, 6, 1, D, 0, 0}); /* D-PME takes any k */
    compare((cfg){16, 16, 1, 1, D, 0, 0}); /* one partition: nothing to equalise */
}

static void test_overlap(void **state)
{
    (void)state;
    const sw_sabre_pme H = SW_SABRE_PME_HIERARCHICAL, D = SW_SABRE_PME_DISTRIBUTED;
    for (int ol = 0; ol <= 2; ol++) {
        compare((cfg){64, 64, 8, ol, H, 0, 0});
        compare((cfg){64, 64, 8, ol, D, 1, 0});
        compare((cfg){32, 32, 4, ol, H, 1, 0});
    }
}

static void test_annular(void **state)
{
    (void)state;
    const sw_sabre_pme H = SW_SABRE_PME_HIERARCHICAL, D = SW_SABRE_PME_DISTRIBUTED;
    compare((cfg){16, 16, 4, 1, H, 1, 0});
    compare((cfg){64, 64, 8, 1, H, 1, 0});
    compare((cfg){64, 64, 32, 1, H, 1, 0});
    compare((cfg){100, 100, 16, 1, H, 1, 0});
    compare((cfg){100, 100, 16, 1, D, 1, 0});
    compare((cfg){64, 64, 8, 1, SW_SABRE_PME_NONE, 1, 0});
    compare((cfg){64, 64, 8, 1, H, 2, 0});
    compare((cfg){100, 100, 16, 1, H, 2, 0});
    compare((cfg){64, 64, 8, 1, H, 3, 0});
    compare((cfg){100, 100, 16, 1, SW_SABRE_PME_DISTRIBUTED, 3, 0});
}

/* Robust passes (sb_robust: per-partition medians by ranking), the pair sums' medians and the
 * border band, alone and together, on the sizes and pupils above. The slopes' uniform noise gives
 * residuals of all sizes, so some lenslets are clipped and most are not. */
static void test_robust(void **state)
{
    (void)state;
    const sw_sabre_pme H = SW_SABRE_PME_HIERARCHICAL, D = SW_SABRE_PME_DISTRIBUTED;
    compare((cfg){16, 16, 1, 1, H, 0, 1});
    compare((cfg){64, 64, 8, 1, H, 0, 1});
    compare((cfg){64, 64, 32, 1, H, 1, 1});
    compare((cfg){64, 64, 8, 1, H, 0, 2});
    compare((cfg){64, 64, 8, 2, H, 1, 4});
    compare((cfg){64, 64, 8, 1, D, 1, 6});
    compare((cfg){100, 100, 16, 1, H, 3, 7});
    compare((cfg){200, 200, 32, 1, H, 1, 7});
}

/* Runs the GPU plan on slopes s in `memory` (copied there), returns the outputs on the host. */
static sw_status run_in(const plans *pl, const float *s, sw_memory memory, float *values,
                        float *actuators)
{
    size_t bs = (size_t)2 * pl->n * sizeof(float), bv = (size_t)pl->nv * sizeof(float),
           ba = (size_t)pl->na * sizeof(float);
    if (memory == SW_MEM_HOST)
        return sw_sabre_run(pl->g, s, memory, values, actuators);
    void *ds = NULL, *dv = NULL, *da = NULL;
    if (memory == SW_MEM_PINNED) {
        assert_int_equal(cudaHostAlloc(&ds, bs, cudaHostAllocDefault), cudaSuccess);
        assert_int_equal(cudaHostAlloc(&dv, bv, cudaHostAllocDefault), cudaSuccess);
        assert_int_equal(cudaHostAlloc(&da, ba, cudaHostAllocDefault), cudaSuccess);
        memcpy(ds, s, bs);
    } else {
        assert_int_equal(cudaMalloc(&ds, bs), cudaSuccess);
        assert_int_equal(cudaMalloc(&dv, bv), cudaSuccess);
        assert_int_equal(cudaMalloc(&da, ba), cudaSuccess);
        assert_int_equal(cudaMemcpy(ds, s, bs, cudaMemcpyHostToDevice), cudaSuccess);
    }
    sw_status st = sw_sabre_run(pl->g, ds, memory, values ? dv : NULL, actuators ? da : NULL);
    if (st == SW_OK) { /* finished when the call returns (sabre.h) */
        enum cudaMemcpyKind kind =
            memory == SW_MEM_DEVICE ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
        if (values)
            assert_int_equal(cudaMemcpy(values, dv, bv, kind), cudaSuccess);
        if (actuators)
            assert_int_equal(cudaMemcpy(actuators, da, ba, kind), cudaSuccess);
    }
    if (memory == SW_MEM_PINNED) {
        cudaFreeHost(ds);
        cudaFreeHost(dv);
        cudaFreeHost(da);
    } else {
        cudaFree(ds);
        cudaFree(dv);
        cudaFree(da);
    }
    return st;
}

/* Graph replays: A, B, A again gives the first A's outputs bit for bit (and B others). */
static void test_replay(void **state)
{
    (void)state;
    cfg c = {64, 64, 8, 1, SW_SABRE_PME_HIERARCHICAL, 1, 0};
    plans pl;
    make_plans(&c, &pl);
    float *sa = make_slopes(&pl, c.nx, c.ny, 5), *sb = make_slopes(&pl, c.nx, c.ny, 6);
    size_t bv = (size_t)pl.nv * sizeof(float), ba = (size_t)pl.na * sizeof(float);
    float *v1 = malloc(bv), *a1 = malloc(ba), *v2 = malloc(bv), *a2 = malloc(ba);
    assert_true(v1 && a1 && v2 && a2);
    assert_int_equal(sw_sabre_run(pl.g, sa, SW_MEM_HOST, v1, a1), SW_OK);
    for (int r = 0; r < 5; r++) {
        assert_int_equal(sw_sabre_run(pl.g, sb, SW_MEM_HOST, v2, a2), SW_OK);
        assert_true(memcmp(v1, v2, bv) != 0);
        assert_int_equal(sw_sabre_run(pl.g, sa, SW_MEM_HOST, v2, a2), SW_OK);
        assert_memory_equal(v1, v2, bv);
        assert_memory_equal(a1, a2, ba);
    }
    free(sa);
    free(sb);
    free(v1);
    free(a1);
    free(v2);
    free(a2);
    free_plans(&pl);
}

/* Host, pinned and device memory; values only and actuators only: the same outputs. */
static void test_memory(void **state)
{
    (void)state;
    cfg c = {48, 48, 4, 2, SW_SABRE_PME_DISTRIBUTED, 1, 0};
    plans pl;
    make_plans(&c, &pl);
    float *s = make_slopes(&pl, c.nx, c.ny, 11);
    size_t bv = (size_t)pl.nv * sizeof(float), ba = (size_t)pl.na * sizeof(float);
    float *v0 = malloc(bv), *a0 = malloc(ba), *v = malloc(bv), *a = malloc(ba);
    assert_true(v0 && a0 && v && a);
    assert_int_equal(sw_sabre_run(pl.g, s, SW_MEM_HOST, v0, a0), SW_OK);
    const sw_memory kinds[3] = {SW_MEM_HOST, SW_MEM_PINNED, SW_MEM_DEVICE};
    for (int q = 0; q < 3; q++) {
        memset(v, 0xff, bv);
        memset(a, 0xff, ba);
        if (run_in(&pl, s, kinds[q], v, a) != SW_OK)
            fail_msg("memory %d: %s", (int)kinds[q], sw_context_error(gpu));
        assert_memory_equal(v, v0, bv);
        assert_memory_equal(a, a0, ba);
        memset(v, 0xff, bv);
        assert_int_equal(run_in(&pl, s, kinds[q], v, NULL), SW_OK);
        assert_memory_equal(v, v0, bv);
        memset(a, 0xff, ba);
        assert_int_equal(run_in(&pl, s, kinds[q], NULL, a), SW_OK);
        assert_memory_equal(a, a0, ba);
    }
    free(s);
    free(v0);
    free(a0);
    free(v);
    free(a);
    free_plans(&pl);
}

/* A NaN (or Inf) slope of a valid lenslet: SW_ERANGE with the CPU's message; the next good run
 * gives the good outputs. NaN on an invalid lenslet: not read. */
static void test_nan(void **state)
{
    (void)state;
    cfg c = {64, 64, 8, 1, SW_SABRE_PME_HIERARCHICAL, 1, 0};
    plans pl;
    make_plans(&c, &pl);
    float *s = make_slopes(&pl, c.nx, c.ny, 21);
    size_t bs = (size_t)2 * pl.n * sizeof(float), bv = (size_t)pl.nv * sizeof(float),
           ba = (size_t)pl.na * sizeof(float);
    float *v0 = malloc(bv), *a0 = malloc(ba), *v = malloc(bv), *a = malloc(ba), *vc = malloc(bv);
    float *bad = malloc(bs);
    assert_true(v0 && a0 && v && a && vc && bad);
    assert_int_equal(sw_sabre_run(pl.g, s, SW_MEM_HOST, v0, a0), SW_OK);

    /* valid lenslets (the mask is 1 there): a y Inf at (40, 20) and an x NaN at (50, 30); the
     * message names the lower index, (40, 20) */
    int32_t l1 = 20 * c.nx + 40, l2 = 30 * c.nx + 50, l0 = 32 * c.nx + 32; /* l0: obscured */
    assert_true(pl.mask[l1] && pl.mask[l2] && !pl.mask[l0]);
    const sw_memory kinds[2] = {SW_MEM_HOST, SW_MEM_DEVICE};
    for (int q = 0; q < 2; q++) {
        memcpy(bad, s, bs);
        bad[l2] = NAN;
        bad[pl.n + l1] = INFINITY;
        assert_int_equal(sw_sabre_run(pl.c, bad, SW_MEM_HOST, vc, NULL), SW_ERANGE);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", sw_context_error(cpu));
        assert_int_equal(run_in(&pl, bad, kinds[q], v, a), SW_ERANGE);
        assert_string_equal(sw_context_error(gpu), msg);
        assert_int_equal(run_in(&pl, s, kinds[q], v, a), SW_OK);
        assert_memory_equal(v, v0, bv);
        assert_memory_equal(a, a0, ba);
    }

    /* invalid lenslet: NaN there changes nothing */
    memcpy(bad, s, bs);
    bad[l0] = NAN;
    bad[pl.n + l0] = NAN;
    assert_int_equal(sw_sabre_run(pl.g, bad, SW_MEM_HOST, v, a), SW_OK);
    assert_memory_equal(v, v0, bv);
    assert_memory_equal(a, a0, ba);
    free(s);
    free(bad);
    free(v0);
    free(a0);
    free(v);
    free(a);
    free(vc);
    free_plans(&pl);
}

/* ------------------------------------------------------------------ projection (step 6') */

/* A local projection for the tests (w^2 x nl, row-major): each square's command is a smoothing
 * of its own vertices (1/2 its centre, 1/8 each corner) plus small random weights on every
 * value (so that a transposed or mis-strided P shows); random = 0: the centre picker alone. */
static float *test_projection_matrix(const sw_sabre *plan, int random, uint64_t seed, int32_t *rows,
                                     int32_t *cols)
{
    sw_sabre_info in;
    sw_sabre_get_info(plan, &in);
    const int32_t w = in.window, L = w + 1, nl = in.local_values, w2 = w * w;
    float *P = calloc((size_t)w2 * nl, sizeof *P);
    assert_non_null(P);
    for (int32_t ls = 0; ls < w2; ls++) {
        float *row = P + (size_t)ls * nl;
        const int32_t i = ls % w, j = ls / w;
        if (!random) {
            row[L * L + ls] = 1.0f;
            continue;
        }
        for (int32_t c = 0; c < nl; c++)
            row[c] = (float)(0.01 * (unit_rand(&seed) - 0.5));
        row[L * L + ls] += 0.5f;
        row[j * L + i] += 0.125f;
        row[j * L + i + 1] += 0.125f;
        row[(j + 1) * L + i] += 0.125f;
        row[(j + 1) * L + i + 1] += 0.125f;
    }
    *rows = w2;
    *cols = nl;
    return P;
}

/*
 * Projected commands, GPU = CPU (tolerance 2 TOL: the commands add a second float GEMM, Z = P Y,
 * to the values' differences; its rows weigh Y mostly through the smoothing part, sum 1, the
 * random part adding sum |P| of 0.15 (w = 5) to 1.5 (k = 1, w = 17)); the GPU's centre picker
 * gives its own assembled centre values exactly; a new P on a plan that has one (same graph, new
 * data) and removing it (graph captured again: the spline at the corners, as before the
 * projection, bit for bit) work on the GPU as on the CPU.
 */
static void check_projection(cfg c)
{
    plans pl;
    make_plans_eq17(&c, 1, &pl);
    sw_sabre_info in;
    sw_sabre_get_info(pl.c, &in);
    const int32_t S = in.lattice.sx;
    float *s = make_slopes(&pl, c.nx, c.ny, 300 + (uint64_t)c.k);
    size_t bv = (size_t)pl.nv * sizeof(float), ba = (size_t)pl.na * sizeof(float);
    float *vc = malloc(bv), *vg = malloc(bv), *ac = malloc(ba), *ag = malloc(ba), *a0 = malloc(ba);
    assert_true(vc && vg && ac && ag && a0);
    assert_int_equal(sw_sabre_run(pl.g, s, SW_MEM_HOST, NULL, a0), SW_OK); /* the spline */

    for (int pass = 0; pass < 3; pass++) {
        int32_t rows, cols;
        float *P = test_projection_matrix(pl.c, pass != 1, 17 + (uint64_t)pass, &rows, &cols);
        if (sw_sabre_set_projection(pl.c, P, rows, cols) != SW_OK)
            fail_msg("CPU projection: %s", sw_context_error(cpu));
        if (sw_sabre_set_projection(pl.g, P, rows, cols) != SW_OK)
            fail_msg("GPU projection: %s", sw_context_error(gpu));
        free(P);
        if (sw_sabre_run(pl.c, s, SW_MEM_HOST, vc, ac) != SW_OK)
            fail_msg("CPU run: %s", sw_context_error(cpu));
        if (sw_sabre_run(pl.g, s, SW_MEM_HOST, vg, ag) != SW_OK)
            fail_msg("GPU run: %s", sw_context_error(gpu));
        assert_close_rms(vc, vg, pl.nv, "values (projection set)", &c);
        assert_close_rms_tol(ac, ag, pl.na, "projected commands", &c, 2 * TOL);
        if (pass == 1) /* the picker: command = the centre value of the corner's square */
            for (int32_t cy = 0; cy <= c.ny; cy++)
                for (int32_t cx = 0; cx <= c.nx; cx++) {
                    int32_t I = cx - 1 + in.lattice.offx, J = cy - 1 + in.lattice.offy;
                    float want = vg[(int64_t)(S + 1) * (S + 1) + (int64_t)J * S + I];
                    if (ag[cy * (c.nx + 1) + cx] != want)
                        fail_msg("GPU picker: corner (%d, %d) %.9g, centre value %.9g", cx, cy,
                                 ag[cy * (c.nx + 1) + cx], want);
                }
    }
    assert_int_equal(sw_sabre_set_projection(pl.g, NULL, 0, 0), SW_OK);
    assert_int_equal(sw_sabre_run(pl.g, s, SW_MEM_HOST, NULL, ag), SW_OK);
    assert_memory_equal(ag, a0, ba);
    free(s);
    free(vc);
    free(vg);
    free(ac);
    free(ag);
    free(a0);
    free_plans(&pl);
}

static void test_projection(void **state)
{
    (void)state;
    const sw_sabre_pme H = SW_SABRE_PME_HIERARCHICAL, D = SW_SABRE_PME_DISTRIBUTED;
    check_projection((cfg){32, 32, 4, 1, H, 0, 0});
    check_projection((cfg){32, 32, 16, 1, H, 0, 0});
    check_projection((cfg){64, 64, 8, 2, D, 1, 0});
    check_projection((cfg){100, 100, 16, 1, H, 1, 0});
    check_projection((cfg){40, 28, 4, 1, H, 2, 0});
    check_projection((cfg){16, 16, 1, 1, H, 0, 0});
}

/*
 * One projection matrix per partition (sw_sabre_set_projection_partitions: the strided-batched
 * product and each partition's q1), GPU = CPU within 2 TOL as above, each partition's matrix a
 * different random one; the changes of kind (shared -> per partition, which needs the larger
 * device buffers and a new graph, -> shared, -> none) keep the GPU in step with the CPU.
 */
static void check_projection_partitions(cfg c)
{
    plans pl;
    make_plans_eq17(&c, 1, &pl);
    sw_sabre_info in;
    sw_sabre_get_info(pl.c, &in);
    const int32_t G = in.k * in.k;
    float *s = make_slopes(&pl, c.nx, c.ny, 500 + (uint64_t)c.k);
    size_t ba = (size_t)pl.na * sizeof(float);
    float *ac = malloc(ba), *ag = malloc(ba), *a0 = malloc(ba);
    assert_true(ac && ag && a0);
    assert_int_equal(sw_sabre_run(pl.g, s, SW_MEM_HOST, NULL, a0), SW_OK); /* the spline */
    int32_t rows = 0, cols = 0;
    float *P1 = test_projection_matrix(pl.c, 1, 3, &rows, &cols);
    const size_t ne = (size_t)rows * cols;
    float *Ps = malloc(ne * G * sizeof *Ps);
    assert_non_null(Ps);
    for (int32_t i = 0; i < G; i++) {
        float *Pi = test_projection_matrix(pl.c, 1, 1000 + (uint64_t)i, &rows, &cols);
        memcpy(Ps + (size_t)i * ne, Pi, ne * sizeof *Pi);
        free(Pi);
    }
    for (int pass = 0; pass < 4; pass++) { /* shared, per partition, shared, per partition */
        sw_context *ctxs[2] = {cpu, gpu};
        sw_sabre *pls[2] = {pl.c, pl.g};
        for (int b = 0; b < 2; b++) {
            const sw_status st = pass % 2
                                     ? sw_sabre_set_projection_partitions(pls[b], Ps, G, rows, cols)
                                     : sw_sabre_set_projection(pls[b], P1, rows, cols);
            if (st != SW_OK)
                fail_msg("%s projection (pass %d): %s", b ? "GPU" : "CPU", pass,
                         sw_context_error(ctxs[b]));
        }
        if (sw_sabre_run(pl.c, s, SW_MEM_HOST, NULL, ac) != SW_OK)
            fail_msg("CPU run: %s", sw_context_error(cpu));
        if (sw_sabre_run(pl.g, s, SW_MEM_HOST, NULL, ag) != SW_OK)
            fail_msg("GPU run: %s", sw_context_error(gpu));
        assert_close_rms_tol(ac, ag, pl.na,
                             pass % 2 ? "per-partition projected commands" : "projected commands",
                             &c, 2 * TOL);
    }
    assert_int_equal(sw_sabre_set_projection_partitions(pl.g, NULL, 0, 0, 0), SW_OK);
    assert_int_equal(sw_sabre_run(pl.g, s, SW_MEM_HOST, NULL, ag), SW_OK);
    assert_memory_equal(ag, a0, ba);
    free(P1);
    free(Ps);
    free(s);
    free(ac);
    free(ag);
    free(a0);
    free_plans(&pl);
}

static void test_projection_partitions(void **state)
{
    (void)state;
    const sw_sabre_pme H = SW_SABRE_PME_HIERARCHICAL;
    check_projection_partitions((cfg){32, 32, 4, 1, H, 1, 0});
    check_projection_partitions((cfg){64, 64, 16, 1, H, 0, 0});
    check_projection_partitions((cfg){40, 28, 8, 1, H, 1, 0});
}

/* The real-time chain's entry points: slopes copied into the plan's buffer, sw_sabre_gpu_enqueue,
 * a wait on the context's stream: the values and actuators buffers hold the outputs of
 * sw_sabre_run on the same slopes, bit for bit (the same kernels), with and without a
 * projection; the same work captured into a graph of the test's own and replayed on other
 * slopes, too (enqueue is capturable). */
static void check_enqueue(int project)
{
    cfg c = {64, 64, 8, 1, SW_SABRE_PME_HIERARCHICAL, 1, 0};
    plans pl;
    make_plans_eq17(&c, 1, &pl);
    if (project) {
        int32_t rows, cols;
        float *P = test_projection_matrix(pl.g, 1, 5, &rows, &cols);
        assert_int_equal(sw_sabre_set_projection(pl.g, P, rows, cols), SW_OK);
        free(P);
    }
    cudaStream_t st = (cudaStream_t)sw_context_stream(gpu);
    float *ds = sw_sabre_gpu_slopes(pl.g), *dv = sw_sabre_gpu_values(pl.g),
          *da = sw_sabre_gpu_actuators(pl.g);
    assert_true(ds && dv && da);
    size_t bs = (size_t)2 * pl.n * sizeof(float), bv = (size_t)pl.nv * sizeof(float),
           ba = (size_t)pl.na * sizeof(float);
    float *v0 = malloc(bv), *a0 = malloc(ba), *v = malloc(bv), *a = malloc(ba);
    assert_true(v0 && a0 && v && a);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    for (int round = 0; round < 3; round++) {
        float *s = make_slopes(&pl, c.nx, c.ny, 900 + (uint64_t)round);
        assert_int_equal(sw_sabre_run(pl.g, s, SW_MEM_HOST, v0, a0), SW_OK);
        assert_int_equal(cudaMemcpy(ds, s, bs, cudaMemcpyHostToDevice), cudaSuccess);
        if (round == 0) {
            assert_int_equal(sw_sabre_gpu_enqueue(pl.g), SW_OK);
        } else {
            if (!exec) { /* captured once, replayed on the next slopes */
                assert_int_equal(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal),
                                 cudaSuccess);
                sw_status e = sw_sabre_gpu_enqueue(pl.g);
                assert_int_equal(cudaStreamEndCapture(st, &graph), cudaSuccess);
                assert_int_equal(e, SW_OK);
                assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
            }
            assert_int_equal(cudaGraphLaunch(exec, st), cudaSuccess);
        }
        assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
        assert_int_equal(cudaMemcpy(v, dv, bv, cudaMemcpyDeviceToHost), cudaSuccess);
        assert_int_equal(cudaMemcpy(a, da, ba, cudaMemcpyDeviceToHost), cudaSuccess);
        assert_memory_equal(v, v0, bv);
        assert_memory_equal(a, a0, ba);
        free(s);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    free(v0);
    free(a0);
    free(v);
    free(a);
    free_plans(&pl);
}

static void test_enqueue(void **state)
{
    (void)state;
    check_enqueue(0);
    check_enqueue(1);
    assert_int_equal(sw_sabre_gpu_enqueue(NULL), SW_EINVAL);
    assert_null(sw_sabre_gpu_slopes(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_pme),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_annular),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_nan),
        cmocka_unit_test(test_projection),
        cmocka_unit_test(test_projection_partitions),
        cmocka_unit_test(test_enqueue),
        cmocka_unit_test(test_robust),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#endif /* SW_HAVE_CUDA */
