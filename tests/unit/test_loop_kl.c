/*
 * Karhunen-Loeve modes of a mirror (loop.h, sw_dm_kl_modes), 8 x 8 lenslets (81 actuators,
 * Gaussian influence, coupling 0.3) over a circular pupil sampled 4 times a lenslet, von Karman
 * turbulence (r0 0.15 m, L0 25 m) on a 4 m pupil:
 *   - the shapes are orthonormal over the pupil with piston removed (F B)^T (F B) = I;
 *   - their coefficients are uncorrelated: (F B)^T C (F B) is diagonal with the variances, which
 *     decrease, the first two about equal (tip and tilt: the pupil is round), far above the last;
 *   - the first two modes span tip and tilt: each tilt keeps >= 95 % of its norm in their span;
 *   - max_modes caps the count; bad input is refused.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NX  8
#define Q   4
#define NA  ((NX + 1) * (NX + 1))
#define DM_ 4.0 /* pupil diameter, m */

static sw_context *ctx;

static int setup(void **state)
{
    (void)state;
    ctx = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(ctx);
    return 0;
}

typedef struct geom {
    sw_dm_params dm;
    sw_lattice_grid g;
    uint8_t *pupil;
    sw_turbulence t;
    double step_m;
} geom;

static void make_geom(geom *G)
{
    sw_dm_params_default(&G->dm);
    G->dm.nx = G->dm.ny = NX;
    G->g = sw_lattice_grid_lenslets(NX, NX, Q, 0);
    G->pupil = malloc((size_t)G->g.width * G->g.height);
    assert_non_null(G->pupil);
    const double c = (NX - 1) / 2.0, r = NX / 2.0;
    for (int32_t k = 0; k < G->g.height; k++)
        for (int32_t i = 0; i < G->g.width; i++)
            G->pupil[(size_t)k * G->g.width + i] =
                hypot(G->g.x0 + i * G->g.step - c, G->g.y0 + k * G->g.step - c) < r;
    sw_turbulence_default(&G->t);
    G->step_m = DM_ / NX * G->g.step; /* lattice units: one lenslet = D / NX */
}

/* The shapes of the modes on the pupil, piston removed: npix x n, column-major. */
static double *shapes(const geom *G, const float *B, int32_t n, int32_t *npix)
{
    sw_dm_shaper *sh = NULL;
    assert_int_equal(sw_dm_shaper_create(ctx, &G->dm, &G->g, &sh), SW_OK);
    const size_t ng = (size_t)G->g.width * G->g.height;
    float *surf = malloc(ng * sizeof(float));
    int32_t np = 0;
    for (size_t k = 0; k < ng; k++)
        np += G->pupil[k] != 0;
    double *S = malloc((size_t)np * n * sizeof(double));
    assert_non_null(surf);
    assert_non_null(S);
    for (int32_t j = 0; j < n; j++) {
        assert_int_equal(sw_dm_shaper_run(sh, B + (size_t)j * NA, SW_MEM_HOST, surf), SW_OK);
        double mean = 0.0;
        int32_t p = 0;
        for (size_t k = 0; k < ng; k++)
            if (G->pupil[k])
                mean += (S[(size_t)j * np + p++] = surf[k]);
        mean /= np;
        for (p = 0; p < np; p++)
            S[(size_t)j * np + p] -= mean;
    }
    free(surf);
    sw_dm_shaper_destroy(sh);
    *npix = np;
    return S;
}

static void test_kl_modes(void **state)
{
    (void)state;
    geom G;
    make_geom(&G);
    float *B = malloc((size_t)NA * NA * sizeof(float));
    double var[NA];
    int32_t n = 0;
    assert_non_null(B);
    assert_int_equal(sw_dm_kl_modes(ctx, &G.dm, &G.g, G.pupil, G.step_m, &G.t, NA, B, var, &n),
                     SW_OK);
    print_message("%d KL modes; variances %.4g %.4g %.4g ... %.4g\n", n, var[0], var[1], var[2],
                  var[n - 1]);
    assert_true(n >= NA - 10 && n < NA); /* piston (and what the pupil does not see) dropped */
    int32_t np = 0;
    double *S = shapes(&G, B, n, &np);
    /* orthonormal */
    double worst = 0.0;
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j <= i; j++) {
            double d = 0.0;
            for (int32_t p = 0; p < np; p++)
                d += S[(size_t)i * np + p] * S[(size_t)j * np + p];
            worst = fmax(worst, fabs(d - (i == j)));
        }
    print_message("orthonormality: worst |(FB)^T FB - I| %.3g\n", worst);
    assert_true(worst < 1e-3);
    /* variances decreasing; tip and tilt first and about equal; far above the last */
    for (int32_t i = 1; i < n; i++)
        assert_true(var[i] <= var[i - 1] * (1.0 + 1e-9));
    assert_true(var[n - 1] > 0.0);
    assert_true(fabs(var[0] - var[1]) < 0.1 * var[0]);
    assert_true(var[0] > 100.0 * var[n - 1]);
    /* tip and tilt in the span of modes 0 and 1 (orthonormal: the projection's norm) */
    int32_t idx = 0;
    double tilt[2] = {0.0, 0.0};
    for (int32_t axis = 0; axis < 2; axis++) {
        double *tv = malloc((size_t)np * sizeof(double)), mean = 0.0, nn = 0.0, in = 0.0;
        assert_non_null(tv);
        idx = 0;
        for (int32_t k = 0; k < G.g.height; k++)
            for (int32_t i = 0; i < G.g.width; i++)
                if (G.pupil[(size_t)k * G.g.width + i])
                    mean += (tv[idx++] = axis ? k : i);
        mean /= np;
        for (int32_t p = 0; p < np; p++) {
            tv[p] -= mean;
            nn += tv[p] * tv[p];
        }
        for (int32_t j = 0; j < 2; j++) {
            double d = 0.0;
            for (int32_t p = 0; p < np; p++)
                d += S[(size_t)j * np + p] * tv[p];
            in += d * d;
        }
        tilt[axis] = in / nn;
        free(tv);
    }
    print_message("tilt x, y kept by modes 0-1: %.4f, %.4f\n", tilt[0], tilt[1]);
    assert_true(tilt[0] > 0.95 && tilt[1] > 0.95);
    free(S);

    /* a cap on the count: the same first modes */
    float *B5 = malloc((size_t)NA * 5 * sizeof(float));
    int32_t n5 = 0;
    assert_non_null(B5);
    assert_int_equal(sw_dm_kl_modes(ctx, &G.dm, &G.g, G.pupil, G.step_m, &G.t, 5, B5, NULL, &n5),
                     SW_OK);
    assert_int_equal(n5, 5);
    for (int32_t k = 0; k < 5 * NA; k++)
        assert_true(B5[k] == B[k]);
    /* bad input */
    assert_int_equal(sw_dm_kl_modes(ctx, &G.dm, &G.g, G.pupil, -1.0, &G.t, 5, B5, NULL, &n5),
                     SW_EINVAL);
    assert_int_equal(sw_dm_kl_modes(ctx, &G.dm, &G.g, NULL, G.step_m, &G.t, 5, B5, NULL, &n5),
                     SW_EINVAL);
    assert_int_equal(sw_dm_kl_modes(ctx, &G.dm, &G.g, G.pupil, G.step_m, &G.t, 0, B5, NULL, &n5),
                     SW_EINVAL);
    memset(G.pupil, 0, (size_t)G.g.width * G.g.height);
    assert_int_equal(sw_dm_kl_modes(ctx, &G.dm, &G.g, G.pupil, G.step_m, &G.t, 5, B5, NULL, &n5),
                     SW_EINVAL);
    free(B5);
    free(B);
    free(G.pupil);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kl_modes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
