/*
 * The counter-based RNG (rng.h): Philox4x32-10 known answers from Random123's published test
 * vectors, the mapping of (seed, stream, index) onto key and counter, and the distributions.
 */
#include "testutil.h"

#include "spotwave/rng.h"

#include <math.h>

/* Random123 kat_vectors, philox4x32 with 10 rounds: counter[4], key[2] -> output[4]. */
static void test_philox_known_answers(void **state)
{
    (void)state;
    sw_rng4 r = sw_rng_draw(0, 0, 0);
    assert_int_equal(r.v[0], 0x6627e8d5u);
    assert_int_equal(r.v[1], 0xe169c58du);
    assert_int_equal(r.v[2], 0xbc57ac4cu);
    assert_int_equal(r.v[3], 0x9b00dbd8u);

    r = sw_rng_draw(UINT64_MAX, UINT64_MAX, UINT64_MAX);
    assert_int_equal(r.v[0], 0x408f276du);
    assert_int_equal(r.v[1], 0x41c83b0eu);
    assert_int_equal(r.v[2], 0xa20bc7c6u);
    assert_int_equal(r.v[3], 0x6d5451fdu);

    /* counter = (243f6a88 85a308d3 13198a2e 03707344), key = (a4093822 299f31d0): the digits
     * of pi; index fills counter words 0-1, stream words 2-3, seed the key, low word first. */
    r = sw_rng_draw(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
    assert_int_equal(r.v[0], 0xd16cfe09u);
    assert_int_equal(r.v[1], 0x94fdccebu);
    assert_int_equal(r.v[2], 0x5001e420u);
    assert_int_equal(r.v[3], 0x24126ea1u);
}

static void test_uniform_open_interval(void **state)
{
    (void)state;
    assert_true(sw_rng_u01f(0) > 0.0f);
    assert_true(sw_rng_u01f(0xffffffffu) < 1.0f);
    assert_true(sw_rng_u01(0, 0) > 0.0);
    assert_true(sw_rng_u01(0xffffffffu, 0xffffffffu) < 1.0);
    /* Mean and variance of many draws: 1/2 and 1/12. */
    double s = 0, ss = 0;
    const int n = 1000000;
    for (int i = 0; i < n; i++) {
        sw_rng4 r = sw_rng_draw(123, SW_RNG_STREAM_TEST, (uint64_t)i);
        double u = sw_rng_u01(r.v[0], r.v[1]);
        s += u;
        ss += u * u;
    }
    double mean = s / n, var = ss / n - mean * mean;
    assert_near(mean, 0.5, 0.0015); /* 5 standard errors */
    assert_near(var, 1.0 / 12.0, 0.0005);
}

static void test_normal_moments(void **state)
{
    (void)state;
    const int n = 500000;
    double s = 0, ss = 0, s4 = 0, cross = 0;
    for (int i = 0; i < n; i++) {
        double z0, z1;
        sw_rng_normal2(sw_rng_draw(99, SW_RNG_STREAM_PIXEL_NOISE, (uint64_t)i), &z0, &z1);
        s += z0 + z1;
        ss += z0 * z0 + z1 * z1;
        s4 += z0 * z0 * z0 * z0;
        cross += z0 * z1;
    }
    double m = s / (2.0 * n), v = ss / (2.0 * n);
    assert_near(m, 0.0, 0.005);
    assert_near(v, 1.0, 0.01);
    assert_near(s4 / n, 3.0, 0.05);    /* kurtosis of a normal */
    assert_near(cross / n, 0.0, 0.01); /* the pair is uncorrelated */
}

static void test_streams_independent(void **state)
{
    (void)state;
    /* Different seeds, streams and indices give different words. */
    sw_rng4 a = sw_rng_draw(1, 2, 3), b = sw_rng_draw(1, 2, 4), c = sw_rng_draw(1, 3, 3),
            d = sw_rng_draw(2, 2, 3), e = sw_rng_draw(1, 2, 3);
    assert_int_not_equal(a.v[0], b.v[0]);
    assert_int_not_equal(a.v[0], c.v[0]);
    assert_int_not_equal(a.v[0], d.v[0]);
    assert_memory_equal(&a, &e, sizeof a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_uniform_open_interval),
        cmocka_unit_test(test_normal_moments),
        cmocka_unit_test(test_streams_independent),
    };
    return cmocka_run_group_tests_name("rng", tests, NULL, NULL);
}
