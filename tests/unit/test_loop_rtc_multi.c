/*
 * The multi-GPU chain's entry points where no GPU computes (loop.h, sw_rtc_multi_*): the default
 * parameters; in a build without NCCL every entry point refuses with SW_EUNSUPPORTED and says
 * "built without NCCL" (the answer `spotwave info` gives too); in a build with NCCL a CPU context
 * is refused with SW_EINVAL. Before either, both create calls check their parameters on the host
 * (sw_rtc_multi_check, every build): each bad parameter is refused with a message naming it, the
 * several sensors' (sw_rtc_multi_create_wfs) ones included. The chain itself is tested against
 * sw_rtc on several GPUs in tests/gpu/test_gpu_loop_rtc_multi.c.
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

/* The build's answer to parameters that pass the host's checks on a CPU context. */
static void assert_build_answer(sw_context *cpu, sw_status st)
{
    if (sw_nccl_version() == 0) {
        assert_int_equal(st, SW_EUNSUPPORTED);
        assert_non_null(strstr(sw_context_error(cpu), "built without NCCL"));
    } else {
        assert_int_equal(st, SW_EINVAL);
        assert_non_null(strstr(sw_context_error(cpu), "CUDA backend"));
    }
}

/* One refusal: the status, *out NULL, and the message naming the cause. */
static void refused(sw_context *cpu, const sw_rtc_params *rp, const sw_centroid_params *w,
                    int32_t nwfs, const sw_rtc_multi_params *mp, sw_status want, const char *text)
{
    sw_rtc_multi *m = (sw_rtc_multi *)rp; /* must be set to NULL */
    assert_int_equal(sw_rtc_multi_create_wfs(cpu, rp, w, nwfs, mp, &m), want);
    assert_null(m);
    if (!strstr(sw_context_error(cpu), text))
        fail_msg("expected \"%s\" in: %s", text, sw_context_error(cpu));
}

static void test_wfs_refused(void **state)
{
    (void)state;
    sw_context *cpu = sw_test_cpu_context(1);
    enum { NW = 3, NACT = 5 };
    static const float cm[1] = {0}; /* the checks read only that it is there */
    sw_centroid_params w[NW];
    for (int k = 0; k < NW; k++) {
        sw_centroid_params_default(&w[k]);
        w[k].width = w[k].height = 64;
    }
    sw_rtc_params rp;
    sw_rtc_params_default(&rp);
    rp.nact = NACT;
    rp.cm = cm;
    rp.controller.nact = NACT;
    rp.centroid.slope_layout = SW_SLOPES_INTERLEAVED; /* not read for several sensors */
    sw_rtc_multi_params mp;
    sw_rtc_multi_params_default(&mp);
    mp.ndevices = 2;
    mp.split = 7; /* not read either */

    /* parameters that pass: the build's answer, with and without m (the defaults: 1 GPU) */
    sw_rtc_multi *m = (sw_rtc_multi *)&rp;
    assert_build_answer(cpu, sw_rtc_multi_create_wfs(cpu, &rp, w, NW, &mp, &m));
    assert_null(m);
    m = (sw_rtc_multi *)&rp;
    assert_build_answer(cpu, sw_rtc_multi_create_wfs(cpu, &rp, w, 1, NULL, &m));
    assert_null(m);

    refused(cpu, &rp, NULL, NW, &mp, SW_EINVAL, "sensors (wfs)");
    assert_int_equal(sw_rtc_multi_create_wfs(cpu, &rp, w, NW, &mp, NULL), SW_EINVAL);
    assert_int_equal(sw_rtc_multi_create_wfs(NULL, &rp, w, NW, &mp, &m), SW_EINVAL);
    refused(cpu, NULL, w, NW, &mp, SW_EINVAL, "NULL context, parameters");
    refused(cpu, &rp, w, 0, &mp, SW_EINVAL, "nwfs = 0");
    refused(cpu, &rp, w, 65, &mp, SW_EINVAL, "1..64");
    mp.ndevices = 3;
    refused(cpu, &rp, w, 2, &mp, SW_EINVAL, "at least one sensor");
    mp.ndevices = 17;
    refused(cpu, &rp, w, NW, &mp, SW_EINVAL, "ndevices = 17");
    mp.ndevices = 2;
    mp.graph = 2;
    refused(cpu, &rp, w, NW, &mp, SW_EINVAL, "graph = 2");
    mp.graph = 1;
    w[1].slope_layout = SW_SLOPES_INTERLEAVED;
    refused(cpu, &rp, w, NW, &mp, SW_EINVAL, "sensor 1");
    w[1].slope_layout = SW_SLOPES_BLOCKS;
    rp.recon = SW_RTC_SABRE;
    refused(cpu, &rp, w, NW, &mp, SW_EUNSUPPORTED, "only the MVM");
    rp.recon = SW_RTC_MVM;
    rp.cm = NULL;
    refused(cpu, &rp, w, NW, &mp, SW_EINVAL, "control matrix cm");
    rp.cm = cm;
    rp.fp16 = 2;
    refused(cpu, &rp, w, NW, &mp, SW_EINVAL, "fp16 = 2");
    rp.fp16 = 0;
    rp.controller.nact = NACT + 1;
    refused(cpu, &rp, w, NW, &mp, SW_EINVAL, "controller.nact = nact");
    rp.controller.nact = NACT;
    rp.controller.kind = SW_CTRL_PI;
    refused(cpu, &rp, w, NW, &mp, SW_EUNSUPPORTED, "pi controller");
    rp.controller.kind = SW_CTRL_LEAKY;
    rp.controller.nfilter = 2; /* without a filter */
    refused(cpu, &rp, w, NW, &mp, SW_EINVAL, "filters 2 modes");
    rp.controller.nfilter = 0;
    assert_build_answer(cpu, sw_rtc_multi_create_wfs(cpu, &rp, w, NW, &mp, &m));

    /* the one-frame create checks first too: the split and p->centroid's layout are read there */
    rp.centroid.slope_layout = SW_SLOPES_BLOCKS;
    assert_int_equal(sw_rtc_multi_create(cpu, &rp, &mp, &m), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(cpu), "split = 7"));
    mp.split = SW_RTC_MULTI_ROWS;
    rp.centroid.slope_layout = SW_SLOPES_INTERLEAVED;
    assert_int_equal(sw_rtc_multi_create(cpu, &rp, &mp, &m), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(cpu), "SW_SLOPES_BLOCKS"));
    rp.centroid.slope_layout = SW_SLOPES_BLOCKS;
    rp.nact = rp.controller.nact = 1; /* fewer commands than GPUs, split by rows */
    assert_int_equal(sw_rtc_multi_create(cpu, &rp, &mp, &m), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(cpu), "cannot be split over 2 GPUs"));
    assert_build_answer(cpu, sw_rtc_multi_create_wfs(cpu, &rp, w, NW, &mp, &m)); /* columns */
    assert_null(m);

    /* the other entry points on no plan */
    const sw_image *frames[NW] = {NULL, NULL, NULL};
    double us[SW_RTC_MULTI_T_STAGES];
    const sw_status none = sw_nccl_version() == 0 ? SW_EUNSUPPORTED : SW_EINVAL;
    assert_int_equal(sw_rtc_multi_run_wfs(NULL, frames, NULL, NULL), none);
    assert_int_equal(sw_rtc_multi_profile_wfs(NULL, frames, 1, us), none);
    assert_int_equal(sw_rtc_multi_wfs(NULL, 0, NULL, NULL, NULL), none);
    assert_int_equal(sw_rtc_multi_nwfs(NULL), 0);
    sw_context_destroy(cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_wfs_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
