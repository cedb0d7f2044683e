/*
 * The GPU runs of the mirror model (src/loop/dm_cuda.cu) against the CPU's (src/loop/dm.c): the
 * shaper (Eq. 12 as two cuBLAS sgemm) and the projector (u = P c, one cuBLAS sgemv), for a few
 * sizes, both influence functions, and host, pinned and device memory.
 *
 * Tolerances. Shaper: |GPU - CPU| <= 1e-5 max |u| (loop.h's promise): both are float products of
 * the same matrices, differing only in the order of the additions; a sample sums at most
 * (nx + 1) + (ny + 1) products of magnitude <= max |u| in two stages, so two orders differ by a
 * few float roundings of the sample's magnitude (a few 1e-7 of max |u| x the sum of the
 * profiles, < 3). Projector: |GPU - CPU| <= 1e-5 x max_a sum_v |P_av c_v| (the scale of the dot
 * products' roundings; a wrong row or column is off by the size of u itself). The matrices are
 * built on the host by the same code for both plans, so P is compared bit for bit.
 *
 * The GPU's own runs with host, pinned and device arrays are the same cuBLAS calls on the same
 * data, so they agree bit for bit. Device arrays are only queued: the test synchronises the
 * context before reading them. Skips (77) when no GPU is usable.
 */
#include "testutil.h"

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

typedef sw_status (*run_fn)(void *plan, const float *in, sw_memory memory, float *out);

static sw_status shaper_run(void *plan, const float *in, sw_memory memory, float *out)
{
    return sw_dm_shaper_run((sw_dm_shaper *)plan, in, memory, out);
}

static sw_status projector_run(void *plan, const float *in, sw_memory memory, float *out)
{
    return sw_projector_run((sw_projector *)plan, in, memory, out);
}

/* Runs a GPU plan with nin inputs and nout outputs in `memory` (copied there and back). */
static void run_in(run_fn fn, void *plan, const float *in, size_t nin, sw_memory memory, float *out,
                   size_t nout)
{
    const size_t bi = nin * sizeof(float), bo = nout * sizeof(float);
    if (memory == SW_MEM_HOST) {
        assert_int_equal(fn(plan, in, memory, out), SW_OK);
        return;
    }
    void *di = NULL, *dout = NULL;
    if (memory == SW_MEM_PINNED) {
        assert_int_equal(cudaHostAlloc(&di, bi, cudaHostAllocDefault), cudaSuccess);
        assert_int_equal(cudaHostAlloc(&dout, bo, cudaHostAllocDefault), cudaSuccess);
        memcpy(di, in, bi);
        assert_int_equal(fn(plan, di, memory, dout), SW_OK); /* finished on return */
        memcpy(out, dout, bo);
        cudaFreeHost(di);
        cudaFreeHost(dout);
        return;
    }
    assert_int_equal(cudaMalloc(&di, bi), cudaSuccess);
    assert_int_equal(cudaMalloc(&dout, bo), cudaSuccess);
    assert_int_equal(cudaMemcpy(di, in, bi, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(fn(plan, di, memory, dout), SW_OK);
    /* device in, device out: only queued on the context's stream */
    assert_int_equal(sw_context_synchronize(gpu), SW_OK);
    assert_int_equal(cudaMemcpy(out, dout, bo, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(di);
    cudaFree(dout);
}

static const sw_memory kinds[3] = {SW_MEM_HOST, SW_MEM_PINNED, SW_MEM_DEVICE};

/* ------------------------------------------------------------------ shaper */

static void compare_shaper(int32_t nx, int32_t ny, int32_t q, int32_t margin, sw_dm_influence f,
                           double coupling, uint64_t seed)
{
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    dm.nx = nx;
    dm.ny = ny;
    dm.influence = f;
    dm.coupling = coupling;
    const sw_lattice_grid g = sw_lattice_grid_lenslets(nx, ny, q, margin);
    sw_dm_shaper *sc = NULL, *sg = NULL;
    assert_int_equal(sw_dm_shaper_create(cpu, &dm, &g, &sc), SW_OK);
    assert_int_equal(sw_dm_shaper_create(gpu, &dm, &g, &sg), SW_OK);
    const size_t na = (size_t)(nx + 1) * (ny + 1), no = (size_t)g.width * g.height;
    float *u = malloc(na * sizeof(float)), *oc = malloc(no * sizeof(float));
    float *og = malloc(no * sizeof(float)), *o0 = malloc(no * sizeof(float));
    assert_true(u && oc && og && o0);
    double umax = 0.0;
    for (size_t a = 0; a < na; a++) {
        u[a] = (float)(2.0 * unit_rand(&seed) - 1.0);
        umax = fmax(umax, fabs(u[a]));
    }
    assert_int_equal(sw_dm_shaper_run(sc, u, SW_MEM_HOST, oc), SW_OK);
    for (int m = 0; m < 3; m++) {
        run_in(shaper_run, sg, u, na, kinds[m], og, no);
        double worst = 0.0;
        for (size_t i = 0; i < no; i++)
            worst = fmax(worst, fabs(og[i] - oc[i]));
        print_message("shaper %dx%d q %d %s, memory %d: max |GPU - CPU| = %.3g max |u|\n", nx, ny,
                      q, sw_dm_influence_string(f), m, worst / umax);
        assert_true(worst <= 1e-5 * umax);
        if (m == 0)
            memcpy(o0, og, no * sizeof(float));
        else
            assert_memory_equal(og, o0, no * sizeof(float));
    }
    free(u);
    free(oc);
    free(og);
    free(o0);
    sw_dm_shaper_destroy(sc);
    sw_dm_shaper_destroy(sg);
}

static void test_shaper(void **state)
{
    (void)state;
    compare_shaper(32, 32, 8, 4, SW_DM_GAUSSIAN, 0.3, 1);
    compare_shaper(17, 9, 3, 0, SW_DM_BEZIER, 0.4, 2);
    compare_shaper(64, 48, 4, 2, SW_DM_GAUSSIAN, 0.5, 3);
    compare_shaper(1, 1, 1, 0, SW_DM_BEZIER, 0.2, 4);
    compare_shaper(100, 100, 2, 1, SW_DM_BEZIER, 0.3, 5);
}

/* ------------------------------------------------------------------ projector */

static void compare_projector(const sw_projector_params *pp, uint64_t seed)
{
    sw_projector *pc = NULL, *pg = NULL;
    assert_int_equal(sw_projector_create(cpu, pp, &pc), SW_OK);
    assert_int_equal(sw_projector_create(gpu, pp, &pg), SW_OK);
    int32_t rc = 0, cc = 0, rg = 0, cg = 0;
    const float *Pc = sw_projector_matrix(pc, &rc, &cc), *Pg = sw_projector_matrix(pg, &rg, &cg);
    assert_int_equal(rc, rg);
    assert_int_equal(cc, cg);
    assert_memory_equal(Pc, Pg, (size_t)rc * cc * sizeof(float));
    float *c = malloc((size_t)cc * sizeof(float)), *uc = malloc((size_t)rc * sizeof(float));
    float *ug = malloc((size_t)rc * sizeof(float)), *u0 = malloc((size_t)rc * sizeof(float));
    assert_true(c && uc && ug && u0);
    for (int32_t v = 0; v < cc; v++)
        c[v] = (float)(2.0 * unit_rand(&seed) - 1.0);
    double scale = 0.0;
    for (int32_t a = 0; a < rc; a++) {
        double s = 0.0;
        for (int32_t v = 0; v < cc; v++)
            s += fabs((double)Pc[(int64_t)a * cc + v] * c[v]);
        scale = fmax(scale, s);
    }
    assert_int_equal(sw_projector_run(pc, c, SW_MEM_HOST, uc), SW_OK);
    for (int m = 0; m < 3; m++) {
        run_in(projector_run, pg, c, (size_t)cc, kinds[m], ug, (size_t)rc);
        double worst = 0.0;
        for (int32_t a = 0; a < rc; a++)
            worst = fmax(worst, fabs(ug[a] - uc[a]));
        print_message("projector %d x %d, memory %d: max |GPU - CPU| = %.3g of the scale\n", rc, cc,
                      m, worst / scale);
        assert_true(worst <= 1e-5 * scale);
        if (m == 0)
            memcpy(u0, ug, (size_t)rc * sizeof(float));
        else
            assert_memory_equal(ug, u0, (size_t)rc * sizeof(float));
    }
    free(c);
    free(uc);
    free(ug);
    free(u0);
    sw_projector_destroy(pc);
    sw_projector_destroy(pg);
}

static void test_projector(void **state)
{
    (void)state;
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    sw_projector_params pp;
    /* window projections (Eq. 14-15) */
    sw_projector_params_window(&pp, &dm, 5);
    compare_projector(&pp, 10);
    dm.influence = SW_DM_BEZIER;
    sw_projector_params_window(&pp, &dm, 11);
    compare_projector(&pp, 11);
    /* global projections (Eq. 13) of an extended lattice around a 16 x 16 array */
    dm.nx = 16;
    dm.ny = 16;
    const sw_sabre_lattice lat = {19, 19, 2, 2};
    sw_projector_params_global(&pp, &dm, &lat);
    compare_projector(&pp, 12);
    dm.influence = SW_DM_GAUSSIAN;
    sw_projector_params_global(&pp, &dm, &lat);
    pp.samples = 2;
    compare_projector(&pp, 13);
}

/* Bad calls on the GPU plan: nothing queued, the CPU's messages. */
static void test_bad(void **state)
{
    (void)state;
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    dm.nx = 4;
    dm.ny = 4;
    const sw_lattice_grid g = sw_lattice_grid_lenslets(4, 4, 2, 0);
    sw_dm_shaper *s = NULL;
    assert_int_equal(sw_dm_shaper_create(gpu, &dm, &g, &s), SW_OK);
    float u[25] = {0}, out[64];
    assert_int_equal(sw_dm_shaper_run(s, NULL, SW_MEM_HOST, out), SW_EINVAL);
    assert_int_equal(sw_dm_shaper_run(s, u, (sw_memory)7, out), SW_EINVAL);
    sw_dm_shaper_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shaper),
        cmocka_unit_test(test_projector),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#endif
