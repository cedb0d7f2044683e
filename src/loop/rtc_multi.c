/*
 * The real-time chain over several GPUs (loop.h, sw_rtc_multi_*): what every build has. The plan
 * itself lives in rtc_multi_cuda.cu, compiled when CUDA and NCCL (the NVIDIA Collective
 * Communications Library) are both found (SW_HAVE_NCCL); without them the entry points below
 * return SW_EUNSUPPORTED with "built without NCCL", the create calls after checking their
 * parameters (sw_rtc_multi_check, every build: no CUDA call).
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

sw_status sw_rtc_multi_check(sw_context *ctx, const sw_rtc_params *p, int several,
                             const sw_centroid_params *wfs, int32_t nwfs,
                             const sw_rtc_multi_params *m, sw_rtc_multi **out,
                             sw_rtc_multi_params *mp)
{
    const char *fn = several ? "sw_rtc_multi_create_wfs" : "sw_rtc_multi_create";
    if (out)
        *out = NULL;
    if (!ctx || !p || !out || (several && !wfs))
        return sw_fail(ctx, SW_EINVAL, "%s: NULL context, parameters%s or output", fn,
                       several ? ", sensors (wfs)" : "");
    sw_rtc_multi_params_default(mp);
    if (m)
        *mp = *m;
    if (mp->ndevices < 1 || mp->ndevices > SW_RTC_MULTI_MAX_GPUS)
        return sw_fail(ctx, SW_EINVAL, "rtc_multi: ndevices = %d; 1..%d allowed", mp->ndevices,
                       SW_RTC_MULTI_MAX_GPUS);
    if (mp->graph != 0 && mp->graph != 1)
        return sw_fail(ctx, SW_EINVAL, "rtc_multi: graph = %d; 0 or 1", mp->graph);
    if (!several && mp->split != SW_RTC_MULTI_ROWS && mp->split != SW_RTC_MULTI_COLUMNS)
        return sw_fail(ctx, SW_EINVAL, "rtc_multi: split = %d; SW_RTC_MULTI_ROWS or _COLUMNS",
                       mp->split);
    if (several) {
        if (nwfs < 1 || nwfs > SW_RTC_MULTI_MAX_WFS)
            return sw_fail(ctx, SW_EINVAL, "rtc_multi: nwfs = %d wavefront sensors; 1..%d allowed",
                           (int)nwfs, SW_RTC_MULTI_MAX_WFS);
        if (nwfs < mp->ndevices)
            return sw_fail(ctx, SW_EINVAL,
                           "rtc_multi: %d wavefront sensors over %d GPUs: every GPU takes at least "
                           "one sensor (sensor k on GPU k mod %d); use at most %d GPUs",
                           (int)nwfs, mp->ndevices, mp->ndevices, (int)nwfs);
        for (int32_t k = 0; k < nwfs; k++)
            if (wfs[k].slope_layout != SW_SLOPES_BLOCKS)
                return sw_fail(ctx, SW_EINVAL,
                               "rtc_multi: sensor %d: the chain takes each sensor's slopes as x "
                               "block then y block (slope_layout SW_SLOPES_BLOCKS)",
                               (int)k);
    } else if (p->centroid.slope_layout != SW_SLOPES_BLOCKS) {
        return sw_fail(ctx, SW_EINVAL,
                       "rtc_multi: the chain takes the slopes as x block then y block "
                       "(slope_layout SW_SLOPES_BLOCKS)");
    }
    if (p->recon != SW_RTC_MVM)
        return sw_fail(ctx, SW_EUNSUPPORTED,
                       "rtc_multi: only the MVM reconstructor is split over GPUs (recon %d)",
                       (int)p->recon);
    if (!p->cm)
        return sw_fail(ctx, SW_EINVAL, "rtc_multi: MVM needs the control matrix cm (NULL given)");
    if (p->fp16 != 0 && p->fp16 != 1)
        return sw_fail(ctx, SW_EINVAL, "rtc_multi: fp16 = %d; 0 or 1", p->fp16);
    if (p->nact < 1 || p->nact > (1 << 24))
        return sw_fail(ctx, SW_EINVAL, "rtc_multi: nact = %d commands; 1..%d allowed", p->nact,
                       1 << 24);
    if (!several && mp->split == SW_RTC_MULTI_ROWS && p->nact < mp->ndevices)
        return sw_fail(ctx, SW_EINVAL, "rtc_multi: %d commands cannot be split over %d GPUs",
                       p->nact, mp->ndevices);
    if (p->controller.nact != p->nact)
        return sw_fail(ctx, SW_EINVAL,
                       "rtc_multi: the controller has nact = %d commands but the chain has nact = "
                       "%d (set controller.nact = nact)",
                       p->controller.nact, p->nact);
    if (p->controller.kind != SW_CTRL_INTEGRATOR && p->controller.kind != SW_CTRL_LEAKY)
        return sw_fail(ctx, SW_EUNSUPPORTED,
                       "rtc_multi: the %s controller is not split over GPUs (integrator or leaky)",
                       sw_controller_kind_string(p->controller.kind));
    if (p->controller.nfilter < 0 || p->controller.nfilter > p->nact ||
        (p->controller.nfilter > 0 && !p->controller.filter))
        return sw_fail(ctx, SW_EINVAL,
                       "rtc_multi: the controller filters %d modes (0..%d, with a filter)",
                       (int)p->controller.nfilter, (int)p->nact);
    return SW_OK;
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
    sw_rtc_multi_params mp;
    SW_TRY(sw_rtc_multi_check(ctx, p, 0, NULL, 0, m, out, &mp));
    return sw_fail(ctx, SW_EUNSUPPORTED, NO_NCCL);
}

sw_status sw_rtc_multi_create_wfs(sw_context *ctx, const sw_rtc_params *p,
                                  const sw_centroid_params *wfs, int32_t nwfs,
                                  const sw_rtc_multi_params *m, sw_rtc_multi **out)
{
    sw_rtc_multi_params mp;
    SW_TRY(sw_rtc_multi_check(ctx, p, 1, wfs, nwfs, m, out, &mp));
    return sw_fail(ctx, SW_EUNSUPPORTED, NO_NCCL);
}

sw_status sw_rtc_multi_run_wfs(sw_rtc_multi *r, const sw_image *const frames[], float *commands,
                               float *slopes)
{
    (void)r;
    (void)frames;
    (void)commands;
    (void)slopes;
    return sw_fail(NULL, SW_EUNSUPPORTED, NO_NCCL);
}

sw_status sw_rtc_multi_profile_wfs(sw_rtc_multi *r, const sw_image *const frames[], int reps,
                                   double us[SW_RTC_MULTI_T_STAGES])
{
    (void)r;
    (void)frames;
    (void)reps;
    (void)us;
    return sw_fail(NULL, SW_EUNSUPPORTED, NO_NCCL);
}

int32_t sw_rtc_multi_nwfs(const sw_rtc_multi *r)
{
    (void)r;
    return 0;
}

sw_status sw_rtc_multi_wfs(const sw_rtc_multi *r, int32_t k, int32_t *gpu, int32_t *slope0,
                           int32_t *nslopes)
{
    (void)r;
    (void)k;
    (void)gpu;
    (void)slope0;
    (void)nslopes;
    return sw_fail(NULL, SW_EUNSUPPORTED, NO_NCCL);
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
