/*
 * The GPU Zernike fit (zfit_cuda.cu) against the CPU's (zfit.c): the same plan parameters and
 * slopes give coefficients and residuals within 1e-9 relative, for PINV and QR, host and device
 * arrays, batches, and frames with invalid lenslets (flagged 0, NaN slopes; fitted on the host
 * on their reduced systems), in both slope layouts. Skips (77) when no GPU is usable.
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

static void params(sw_zfit_params *p, int N, int order, sw_zfit_method method, int frames)
{
    sw_zfit_params_default(p);
    p->geometry.nx = p->geometry.ny = N;
    p->pupil_cx_px = -0.5 + p->geometry.pitch_px * N / 2.0;
    p->pupil_cy_px = p->pupil_cx_px;
    p->pupil_radius_px = p->geometry.pitch_px * N / 2.0;
    p->max_order = order;
    p->method = method;
    p->max_frames = frames;
}

/* max |a - b| <= 1e-9 max |a| over n values (NaN must match NaN). */
static void assert_close(const double *a, const double *b, int n, const char *what)
{
    double scale = 0.0, d = 0.0;
    for (int i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) {
            if (!(isnan(a[i]) && isnan(b[i])))
                fail_msg("%s: value %d is %g on the CPU, %g on the GPU", what, i, a[i], b[i]);
            continue;
        }
        scale = fmax(scale, fabs(a[i]));
        d = fmax(d, fabs(a[i] - b[i]));
    }
    if (!(d <= 1e-9 * scale))
        fail_msg("%s: max difference %g (scale %g)", what, d, scale);
}

static void compare(sw_zfit_method method, sw_slope_layout layout, int frames, int invalid,
                    sw_memory memory)
{
    enum { N = 30 };
    sw_zfit_params p;
    params(&p, N, 8, method, frames);
    p.layout = layout;
    double w[N * N];
    uint64_t seed = 1234 + (uint64_t)frames;
    for (int l = 0; l < N * N; l++)
        w[l] = 0.5 + unit_rand(&seed);
    p.weights = w;
    sw_zfit_plan *pc = NULL, *pg = NULL;
    assert_int_equal(sw_zfit_create(cpu, &p, &pc), SW_OK);
    if (sw_zfit_create(gpu, &p, &pg) != SW_OK)
        fail_msg("GPU plan: %s", sw_context_error(gpu));
    int n = sw_zfit_slopes(pc), J = sw_zfit_terms(pc), nl = N * N;
    size_t ns = (size_t)frames * 2 * n;
    float *s = malloc(ns * sizeof(float));
    uint8_t *valid = malloc((size_t)frames * nl);
    for (size_t i = 0; i < ns; i++)
        s[i] = (float)(2.0 * unit_rand(&seed) - 1.0);
    memset(valid, 1, (size_t)frames * nl);
    if (invalid) {
        /* every third frame flags a lit lenslet 0, every fifth has a NaN slope */
        for (int f = 0; f < frames; f++) {
            if (f % 3 == 1)
                valid[(size_t)f * nl + 15 * N + 15] = 0;
            if (f % 5 == 2)
                s[(size_t)f * 2 * n + 14 * N + 12] = NAN;
        }
    }
    double *cc = malloc((size_t)frames * J * sizeof(double)), *rc = malloc(frames * sizeof(double));
    double *cg = malloc((size_t)frames * J * sizeof(double)), *rg = malloc(frames * sizeof(double));
    assert_int_equal(sw_zfit_run(pc, s, invalid ? valid : NULL, frames, SW_MEM_HOST, cc, rc),
                     SW_OK);
    if (memory == SW_MEM_DEVICE) {
        float *ds;
        uint8_t *dv;
        double *dc, *dr;
        assert_int_equal(cudaMalloc((void **)&ds, ns * sizeof(float)), cudaSuccess);
        assert_int_equal(cudaMalloc((void **)&dv, (size_t)frames * nl), cudaSuccess);
        assert_int_equal(cudaMalloc((void **)&dc, (size_t)frames * J * sizeof(double)),
                         cudaSuccess);
        assert_int_equal(cudaMalloc((void **)&dr, frames * sizeof(double)), cudaSuccess);
        cudaMemcpy(ds, s, ns * sizeof(float), cudaMemcpyHostToDevice);
        cudaMemcpy(dv, valid, (size_t)frames * nl, cudaMemcpyHostToDevice);
        if (sw_zfit_run(pg, ds, invalid ? dv : NULL, frames, SW_MEM_DEVICE, dc, dr) != SW_OK)
            fail_msg("GPU run: %s", sw_context_error(gpu));
        assert_int_equal(sw_context_synchronize(gpu), SW_OK);
        cudaMemcpy(cg, dc, (size_t)frames * J * sizeof(double), cudaMemcpyDeviceToHost);
        cudaMemcpy(rg, dr, frames * sizeof(double), cudaMemcpyDeviceToHost);
        cudaFree(ds);
        cudaFree(dv);
        cudaFree(dc);
        cudaFree(dr);
    } else {
        if (sw_zfit_run(pg, s, invalid ? valid : NULL, frames, memory, cg, rg) != SW_OK)
            fail_msg("GPU run: %s", sw_context_error(gpu));
    }
    assert_close(cc, cg, frames * J, "coefficients");
    assert_close(rc, rg, frames, "residuals");
    for (int f = 0; f < frames; f++)
        assert_true(cg[(size_t)f * J] == 0.0);
    free(s);
    free(valid);
    free(cc);
    free(rc);
    free(cg);
    free(rg);
    sw_zfit_destroy(pc);
    sw_zfit_destroy(pg);
}

static void test_pinv(void **state)
{
    (void)state;
    compare(SW_ZFIT_PINV, SW_SLOPES_BLOCKS, 1, 0, SW_MEM_HOST);
    compare(SW_ZFIT_PINV, SW_SLOPES_BLOCKS, 1, 0, SW_MEM_DEVICE);
    compare(SW_ZFIT_PINV, SW_SLOPES_BLOCKS, 32, 0, SW_MEM_DEVICE);
    compare(SW_ZFIT_PINV, SW_SLOPES_INTERLEAVED, 7, 0, SW_MEM_HOST);
}

static void test_qr(void **state)
{
    (void)state;
    compare(SW_ZFIT_QR, SW_SLOPES_BLOCKS, 1, 0, SW_MEM_HOST);
    compare(SW_ZFIT_QR, SW_SLOPES_BLOCKS, 1, 0, SW_MEM_DEVICE);
    compare(SW_ZFIT_QR, SW_SLOPES_INTERLEAVED, 32, 0, SW_MEM_DEVICE);
    compare(SW_ZFIT_QR, SW_SLOPES_BLOCKS, 9, 0, SW_MEM_HOST);
}

static void test_invalid_frames(void **state)
{
    (void)state;
    compare(SW_ZFIT_PINV, SW_SLOPES_BLOCKS, 16, 1, SW_MEM_HOST);
    compare(SW_ZFIT_PINV, SW_SLOPES_BLOCKS, 16, 1, SW_MEM_DEVICE);
    compare(SW_ZFIT_QR, SW_SLOPES_BLOCKS, 16, 1, SW_MEM_HOST);
    compare(SW_ZFIT_QR, SW_SLOPES_INTERLEAVED, 16, 1, SW_MEM_DEVICE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pinv),
        cmocka_unit_test(test_qr),
        cmocka_unit_test(test_invalid_frames),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#endif /* SW_HAVE_CUDA */
