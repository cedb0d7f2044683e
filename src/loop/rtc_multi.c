/*
 * The real-time chain over several GPUs (loop.h, sw_rtc_multi_*): what every build has. The plan
 * itself lives in rtc_multi_cuda.cu, compiled when CUDA and NCCL (the NVIDIA Collective
 * Communications Library) are both found (SW_HAVE_NCCL); without them the entry points below
 * return SW_EUNSUPPORTED with "built without NCCL".
 */
#include "loop/loop_internal.h"

#include <math.h>
#include <string.h>

double sw_rtc_split_bound(const float *row, int32_t n, const float *s, const float *s2, int fp16)
{
    const double nu = (double)n * 0x1.0p-24;
    const double gam = nu < 1.0 ? nu / (1.0 - nu) : INFINITY;
    double dot = 0.0, ds = 0.0; /* sum |row s| and sum |row| |s - s2| */
    for (int32_t j = 0; j < n; j++) {
        dot += fabs((double)row[j] * s[j]);
        if (s2)
            ds += fabs((double)row[j]) * fabs((double)s[j] - s2[j]);
    }
    return 2.0 * gam * dot * (fp16 ? 1.001 : 1.0) + 1.01 * ds;
}

void sw_rtc_multi_params_default(sw_rtc_multi_params *m)
{
    if (!m)
        return;
    memset(m, 0, sizeof *m);
    m->ndevices = 1;
    m->devices = NULL;
    m->graph = 1;
    m->split = SW_RTC_MULTI_ROWS;
}

#ifndef SW_HAVE_NCCL

#define NO_NCCL                                                                                    \
    "rtc_multi: built without NCCL (configure with CUDA and NCCL: SW_WITH_NCCL, NCCL_ROOT)"

int sw_nccl_version(void)
{
    return 0;
}

sw_status sw_rtc_multi_create(sw_context *ctx, const sw_rtc_params *p, const sw_rtc_multi_params *m,
                              sw_rtc_multi **out)
{
    (void)p;
    (void)m;
    if (out)
        *out = NULL;
    return sw_fail(ctx, SW_EUNSUPPORTED, NO_NCCL);
}

void sw_rtc_multi_destroy(sw_rtc_multi *r)
{
    (void)r;
}

sw_status sw_rtc_multi_reset(sw_rtc_multi *r)
{
    (void)r;
    return sw_fail(NULL, SW_EUNSUPPORTED, NO_NCCL);
}

sw_status sw_rtc_multi_run(sw_rtc_multi *r, const sw_image *frame, float *commands, float *slopes)
{
    (void)r;
    (void)frame;
    (void)commands;
    (void)slopes;
    return sw_fail(NULL, SW_EUNSUPPORTED, NO_NCCL);
}

const float *sw_rtc_multi_commands(const sw_rtc_multi *r)
{
    (void)r;
    return NULL;
}

double sw_rtc_multi_last_us(const sw_rtc_multi *r)
{
    (void)r;
    return -1.0;
}

int32_t sw_rtc_multi_slopes(const sw_rtc_multi *r)
{
    (void)r;
    return 0;
}

int sw_rtc_multi_graph(const sw_rtc_multi *r)
{
    (void)r;
    return -1;
}

sw_status sw_rtc_multi_device(const sw_rtc_multi *r, int32_t i, int32_t *ordinal, int32_t *row0,
                              int32_t *rows)
{
    (void)r;
    (void)i;
    (void)ordinal;
    (void)row0;
    (void)rows;
    return sw_fail(NULL, SW_EUNSUPPORTED, NO_NCCL);
}

int32_t sw_rtc_multi_devices(const sw_rtc_multi *r)
{
    (void)r;
    return 0;
}

sw_status sw_rtc_multi_profile(sw_rtc_multi *r, const sw_image *frame, int reps,
                               double us[SW_RTC_MULTI_T_STAGES])
{
    (void)r;
    (void)frame;
    (void)reps;
    (void)us;
    return sw_fail(NULL, SW_EUNSUPPORTED, NO_NCCL);
}

#endif /* !SW_HAVE_NCCL */
