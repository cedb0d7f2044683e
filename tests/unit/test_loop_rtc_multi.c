/*
 * The multi-GPU chain's entry points where no GPU computes (loop.h, sw_rtc_multi_*): the default
 * parameters; in a build without NCCL every entry point refuses with SW_EUNSUPPORTED and says
 * "built without NCCL" (the answer `spotwave info` gives too); in a build with NCCL a CPU context
 * is refused with SW_EINVAL. The chain itself is tested against sw_rtc on several GPUs in
 * tests/gpu/test_gpu_loop_rtc_multi.c.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static void test_defaults(void **state)
{
    (void)state;
    sw_rtc_multi_params m;
    memset(&m, 0x5a, sizeof m);
    sw_rtc_multi_params_default(&m);
    assert_int_equal(m.ndevices, 1);
    assert_null(m.devices);
    assert_int_equal(m.graph, 1);
    assert_int_equal(m.split, SW_RTC_MULTI_ROWS);
    sw_rtc_multi_params_default(NULL); /* ignored */
}

static void test_refused(void **state)
{
    (void)state;
    sw_context *cpu = sw_test_cpu_context(1);
    float cm[4 * 8] = {0};
    sw_rtc_params rp;
    sw_rtc_params_default(&rp);
    rp.nact = 4;
    rp.cm = cm;
    rp.controller.nact = 4;
    sw_rtc_multi *m = (sw_rtc_multi *)&rp; /* must be set to NULL */
    const sw_status st = sw_rtc_multi_create(cpu, &rp, NULL, &m);
    assert_null(m);
    if (sw_nccl_version() == 0) {
        assert_int_equal(st, SW_EUNSUPPORTED);
        assert_non_null(strstr(sw_context_error(cpu), "built without NCCL"));
        assert_int_equal(sw_rtc_multi_run(NULL, NULL, NULL, NULL), SW_EUNSUPPORTED);
        assert_int_equal(sw_rtc_multi_reset(NULL), SW_EUNSUPPORTED);
        double us[SW_RTC_MULTI_T_STAGES];
        assert_int_equal(sw_rtc_multi_profile(NULL, NULL, 1, us), SW_EUNSUPPORTED);
        assert_int_equal(sw_rtc_multi_device(NULL, 0, NULL, NULL, NULL), SW_EUNSUPPORTED);
    } else {
        assert_int_equal(st, SW_EINVAL); /* a CPU context */
        assert_non_null(strstr(sw_context_error(cpu), "CUDA"));
        assert_int_equal(sw_rtc_multi_run(NULL, NULL, NULL, NULL), SW_EINVAL);
        assert_int_equal(sw_rtc_multi_device(NULL, 0, NULL, NULL, NULL), SW_EINVAL);
    }
    assert_null(sw_rtc_multi_commands(NULL));
    assert_int_equal(sw_rtc_multi_devices(NULL), 0);
    assert_int_equal(sw_rtc_multi_slopes(NULL), 0);
    assert_int_equal(sw_rtc_multi_graph(NULL), -1);
    assert_true(sw_rtc_multi_last_us(NULL) < 0.0);
    sw_rtc_multi_destroy(NULL);
    sw_context_destroy(cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
