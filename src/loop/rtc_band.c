/*
 * The band-wise real-time chain (loop.h, sw_rtc_band_*): the host side. This file validates the
 * parameters and the plan, cuts the frame into bands, and runs the producer's and the consumer's
 * halves of the protocol on the control words in mapped host memory (loop_internal.h,
 * SW_BAND_*); rtc_band_cuda.cu allocates the ring and runs the persistent kernel.
 *
 * Memory ordering on this side (x86 or ARM alike, C11 builtins):
 *   producer: the band's pixels (plain stores into the ring), then
 *             __atomic_store_n(flag, frame, __ATOMIC_RELEASE): the GPU's acquire load of the flag
 *             sees the pixels;
 *   consumer: __atomic_load_n(done, __ATOMIC_ACQUIRE) >= frame, then the commands' loads: the
 *             GPU stored them, fenced at system scope, before its release store of done.
 *             The slot is re-checked after the copy (frame + depth neither done nor
 *             published far enough to be written there: not overwritten meanwhile, as a
 *             sequence lock's reader).
 * Errors at run time are recorded per thread (sw_fail(NULL, ...)): the producer and the consumer
 * may be two threads, and the context's message belongs to its owner.
 */
#define _POSIX_C_SOURCE 200809L

#include "loop/loop_internal.h"

#include "centroid/centroid_internal.h"
#include "core/core_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BAND_MAX_DEPTH 64
#define BAND_MAX_TRACE (1 << 20)

void sw_rtc_band_params_default(sw_rtc_band_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->bands = 4;
    p->depth = 4;
    p->band_timeout_us = 2000.0;
    p->idle_timeout_us = 1e7;
    p->slopes = 0;
    p->trace = 0;
}

static double band_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

/* The checks that need no GPU (the CPU test runs them). */
static sw_status band_check(sw_rtc *r, const sw_rtc_band_params *p)
{
    sw_context *ctx = r->ctx;
    if (p->bands < 1 || p->bands > r->ny)
        return sw_fail(ctx, SW_EINVAL, "rtc band: bands = %d; 1..%d (the lenslet rows) allowed",
                       p->bands, r->ny);
    if (p->depth < 2 || p->depth > BAND_MAX_DEPTH)
        return sw_fail(ctx, SW_EINVAL, "rtc band: depth = %d frame slots; 2..%d allowed", p->depth,
                       BAND_MAX_DEPTH);
    if (!(p->band_timeout_us >= 1.0 && p->band_timeout_us <= 1e7))
        return sw_fail(ctx, SW_EINVAL, "rtc band: band_timeout_us = %g; 1..1e7 allowed",
                       p->band_timeout_us);
    if (!(p->idle_timeout_us >= p->band_timeout_us && p->idle_timeout_us <= 1e9))
        return sw_fail(ctx, SW_EINVAL,
                       "rtc band: idle_timeout_us = %g; from band_timeout_us (%g) to 1e9 allowed",
                       p->idle_timeout_us, p->band_timeout_us);
    if (p->slopes != 0 && p->slopes != 1)
        return sw_fail(ctx, SW_EINVAL, "rtc band: slopes = %d; 0 or 1", p->slopes);
    if (p->trace < 0 || p->trace > BAND_MAX_TRACE)
        return sw_fail(ctx, SW_EINVAL, "rtc band: trace = %d frames; 0..%d allowed", p->trace,
                       BAND_MAX_TRACE);
    if (r->band)
        return sw_fail(ctx, SW_EINVAL, "rtc band: the plan already has a band chain");
    if (r->p.recon != SW_RTC_MVM)
        return sw_fail(ctx, SW_EUNSUPPORTED,
                       "rtc band: only the MVM reconstructor runs band by band (D-SABRE not yet)");
    const sw_controller_kind k = r->ctrl->p.kind;
    if (k != SW_CTRL_INTEGRATOR && k != SW_CTRL_LEAKY)
        return sw_fail(ctx, SW_EUNSUPPORTED,
                       "rtc band: the integrator and the leaky integrator run band by band, not %s",
                       sw_controller_kind_string(k));
    if (!r->cent->fast || r->cent->fraction)
        return sw_fail(ctx, SW_EUNSUPPORTED,
                       "rtc band: the centroids must be the plain centre of gravity with an "
                       "absolute threshold or none (method cog, no fraction threshold)");
    if (!r->gpu)
        return sw_fail(ctx, SW_EUNSUPPORTED, "rtc band: needs a plan on a CUDA context");
    return SW_OK;
}

/* The bands: lenslet rows [lrow0[b], lrow0[b + 1]) and pixel rows [row0[b], row0[b + 1]). */
static sw_status band_layout(sw_rtc_band *b)
{
    const sw_centroid_plan *c = b->r->cent;
    const int32_t nb = b->nb, ny = c->ny;
    b->row0 = malloc((size_t)(nb + 1) * sizeof(int32_t));
    b->lrow0 = malloc((size_t)(nb + 1) * sizeof(int32_t));
    if (!b->row0 || !b->lrow0)
        return sw_fail(b->ctx, SW_ENOMEM, "rtc band: out of memory");
    for (int32_t i = 0; i <= nb; i++)
        b->lrow0[i] = (int32_t)((int64_t)i * ny / nb);
    b->row0[0] = 0;
    b->row0[nb] = b->height;
    for (int32_t i = 1; i < nb; i++) {
        int32_t y = c->ys[b->lrow0[i]];
        b->row0[i] = y < 0 ? 0 : (y > b->height ? b->height : y);
    }
    /* every band's lenslet rows inside its pixel rows */
    for (int32_t i = 0; i < nb; i++) {
        const int32_t first = b->lrow0[i], last = b->lrow0[i + 1] - 1;
        if (c->ys[first] < b->row0[i] || c->ye[last] > b->row0[i + 1] ||
            b->row0[i] > b->row0[i + 1])
            return sw_fail(b->ctx, SW_EUNSUPPORTED,
                           "rtc band: the lenslet rows' pixel regions overlap (band %d: rows "
                           "%d..%d); the band chain needs a window >= 0",
                           i, c->ys[first], c->ye[last]);
    }
    return SW_OK;
}

sw_status sw_rtc_band_create(sw_rtc *r, const sw_rtc_band_params *p, sw_rtc_band **out)
{
    if (out)
        *out = NULL;
    if (!r || !p || !out)
        return sw_fail(r ? r->ctx : NULL, SW_EINVAL, "sw_rtc_band_create: NULL argument");
    SW_TRY(band_check(r, p)); /* (a CPU build has only CPU plans: refused there) */
    sw_rtc_band *b = calloc(1, sizeof *b);
    if (!b)
        return sw_fail(r->ctx, SW_ENOMEM, "rtc band: out of memory");
    b->ctx = r->ctx;
    b->r = r;
    b->p = *p;
    b->nb = p->bands;
    b->depth = p->depth;
    b->width = r->p.centroid.width;
    b->height = r->p.centroid.height;
    b->ns = r->ns;
    b->nact = r->nact;
    b->next_frame = 1;
    b->next_band = 0;
    b->stride = ((size_t)b->width * sw_pixel_size(r->p.centroid.type) + 63) / 64 * 64;
    b->slot_bytes = ((size_t)b->height * b->stride + 4095) / 4096 * 4096;
    sw_status st = band_layout(b);
#ifdef SW_HAVE_CUDA
    if (st == SW_OK)
        st = sw_rtc_band_gpu_create(b);
#else
    if (st == SW_OK)
        st = sw_fail(r->ctx, SW_EUNSUPPORTED, "rtc band: built without CUDA");
#endif
    if (st != SW_OK) {
        sw_rtc_band_destroy(b);
        return st;
    }
    r->band = b;
    *out = b;
    return SW_OK;
}

void sw_rtc_band_destroy(sw_rtc_band *b)
{
    if (!b)
        return;
#ifdef SW_HAVE_CUDA
    sw_rtc_band_gpu_destroy(b);
#endif
    if (b->r && b->r->band == b)
        b->r->band = NULL;
    free(b->row0);
    free(b->lrow0);
    free(b);
}

sw_status sw_rtc_band_rows(const sw_rtc_band *b, int32_t band, int32_t *row0, int32_t *rows)
{
    if (!b || band < 0 || band >= b->nb)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_band_rows: NULL chain or band %d out of range",
                       band);
    if (row0)
        *row0 = b->row0[band];
    if (rows)
        *rows = b->row0[band + 1] - b->row0[band];
    return SW_OK;
}

/* SW_ETIMEDOUT when the kernel has stopped (a missing band or the stop flag), else SW_OK. */
static sw_status band_stopped(sw_rtc_band *b)
{
    const uint64_t e = __atomic_load_n(&b->ctl[SW_BAND_ERR], __ATOMIC_ACQUIRE);
    if (e == SW_BAND_EOK)
        return SW_OK;
    const int64_t f = (int64_t)b->ctl[SW_BAND_ERR_FRAME];
    const int64_t band = (int64_t)b->ctl[SW_BAND_ERR_BAND];
    if (e == SW_BAND_ETIMEOUT)
        return sw_fail(NULL, SW_ETIMEDOUT,
                       "rtc band: band %lld of frame %lld did not arrive in time; the chain has "
                       "stopped (destroy it and make a new one)",
                       (long long)band, (long long)f);
    return sw_fail(NULL, SW_ETIMEDOUT, "rtc band: the chain has stopped at frame %lld (%s)",
                   (long long)f,
                   e == SW_BAND_ESTOP ? "stop flag" : "its blocks' frame barrier timed out");
}

sw_status sw_rtc_band_buffer(sw_rtc_band *b, int64_t frame, int32_t band, void **data,
                             size_t *stride)
{
    if (!b || !data || band < 0 || band >= b->nb || frame < 1)
        return sw_fail(NULL, SW_EINVAL,
                       "sw_rtc_band_buffer: NULL argument, band %d or frame %lld out of range",
                       band, (long long)frame);
    *data = NULL;
    SW_TRY(band_stopped(b));
    const int64_t done = (int64_t)__atomic_load_n(&b->ctl[SW_BAND_DONE], __ATOMIC_ACQUIRE);
    if (frame - b->depth > done) {
        __atomic_add_fetch(&b->overruns, 1, __ATOMIC_RELAXED);
        return sw_fail(NULL, SW_ERANGE,
                       "rtc band: frame %lld's slot still holds frame %lld (done: %lld; an "
                       "overrun of the %d-slot ring)",
                       (long long)frame, (long long)(frame - b->depth), (long long)done, b->depth);
    }
    const int64_t slot = (frame - 1) % b->depth;
    *data = b->frames + (size_t)slot * b->slot_bytes + (size_t)b->row0[band] * b->stride;
    if (stride)
        *stride = b->stride;
    return SW_OK;
}

sw_status sw_rtc_band_publish(sw_rtc_band *b, int64_t frame, int32_t band)
{
    if (!b)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_band_publish: NULL chain");
    SW_TRY(band_stopped(b));
    if (frame != b->next_frame || band != b->next_band) {
        __atomic_add_fetch(&b->out_of_order, 1, __ATOMIC_RELAXED);
        return sw_fail(NULL, SW_EINVAL,
                       "rtc band: band %d of frame %lld published out of order (expected band "
                       "%d of frame %lld); not used",
                       band, (long long)frame, b->next_band, (long long)b->next_frame);
    }
    const int64_t done = (int64_t)__atomic_load_n(&b->ctl[SW_BAND_DONE], __ATOMIC_ACQUIRE);
    if (frame - b->depth > done) {
        __atomic_add_fetch(&b->overruns, 1, __ATOMIC_RELAXED);
        return sw_fail(NULL, SW_ERANGE,
                       "rtc band: frame %lld published over frame %lld (done: %lld)",
                       (long long)frame, (long long)(frame - b->depth), (long long)done);
    }
    const int64_t slot = (frame - 1) % b->depth;
    __atomic_store_n(&b->ctl[SW_BAND_FLAGS + slot * b->nb + band], (uint64_t)frame,
                     __ATOMIC_RELEASE);
    if (++b->next_band == b->nb) {
        b->next_band = 0;
        b->next_frame++;
    }
    return SW_OK;
}

sw_status sw_rtc_band_wait(sw_rtc_band *b, int64_t frame, double timeout_us, float *commands,
                           float *slopes)
{
    if (!b || frame < 1 || !(timeout_us >= 0.0))
        return sw_fail(NULL, SW_EINVAL,
                       "sw_rtc_band_wait: NULL chain, frame %lld or timeout %g out of range",
                       (long long)frame, timeout_us);
    const double t0 = band_now_us();
    for (unsigned i = 0;; i++) {
        const int64_t done = (int64_t)__atomic_load_n(&b->ctl[SW_BAND_DONE], __ATOMIC_ACQUIRE);
        if (done >= frame) {
            if (done >= frame + b->depth)
                return sw_fail(NULL, SW_ERANGE,
                               "rtc band: frame %lld's results were overwritten (done: %lld)",
                               (long long)frame, (long long)done);
            const int64_t slot = (frame - 1) % b->depth;
            if (commands)
                memcpy(commands, b->cmds + (size_t)slot * b->nact, (size_t)b->nact * sizeof(float));
            if (slopes && b->slopes)
                memcpy(slopes, b->slopes + (size_t)slot * 2 * b->ns,
                       (size_t)2 * b->ns * sizeof(float));
            __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the copies before the re-checks */
            /* The kernel writes frame + depth's slopes into the slot once that frame's band 0 is
             * published, and its commands once its last band is, before done says frame +
             * depth - 1 (its blocks pass the frame barrier on their own counter): the slot's
             * flag, not done, says whether that may have begun. */
            const int32_t band = slopes && b->slopes ? 0 : b->nb - 1;
            const uint64_t flag =
                __atomic_load_n(&b->ctl[SW_BAND_FLAGS + slot * b->nb + band], __ATOMIC_RELAXED);
            if (flag != (uint64_t)frame ||
                (int64_t)__atomic_load_n(&b->ctl[SW_BAND_DONE], __ATOMIC_RELAXED) >=
                    frame + b->depth)
                return sw_fail(NULL, SW_ERANGE,
                               "rtc band: frame %lld's results were overwritten while read",
                               (long long)frame);
            return SW_OK;
        }
        if ((i & 63) == 63) {
            const sw_status st = band_stopped(b);
            if (st != SW_OK) {
                __atomic_add_fetch(&b->timeouts, 1, __ATOMIC_RELAXED);
                return st;
            }
            if (band_now_us() - t0 > timeout_us) {
                __atomic_add_fetch(&b->timeouts, 1, __ATOMIC_RELAXED);
                return sw_fail(NULL, SW_ETIMEDOUT,
                               "rtc band: frame %lld not done within %g us (done: %lld)",
                               (long long)frame, timeout_us, (long long)done);
            }
        }
    }
}

void sw_rtc_band_get_stats(const sw_rtc_band *b, sw_rtc_band_stats *s)
{
    if (!s)
        return;
    memset(s, 0, sizeof *s);
    s->missed_band = -1;
    if (!b)
        return;
    s->done = (int64_t)__atomic_load_n(&b->ctl[SW_BAND_DONE], __ATOMIC_ACQUIRE);
    s->out_of_order = __atomic_load_n(&b->out_of_order, __ATOMIC_RELAXED);
    s->overruns = __atomic_load_n(&b->overruns, __ATOMIC_RELAXED);
    s->timeouts = __atomic_load_n(&b->timeouts, __ATOMIC_RELAXED);
    if (__atomic_load_n(&b->ctl[SW_BAND_ERR], __ATOMIC_ACQUIRE) == SW_BAND_ETIMEOUT) {
        s->missed_frame = (int64_t)b->ctl[SW_BAND_ERR_FRAME];
        s->missed_band = (int32_t)(int64_t)b->ctl[SW_BAND_ERR_BAND];
    }
    s->blocks = b->blocks;
}

int64_t sw_rtc_band_done(const sw_rtc_band *b)
{
    if (!b || !b->ctl)
        return -1;
    return (int64_t)__atomic_load_n(&b->ctl[SW_BAND_DONE], __ATOMIC_ACQUIRE);
}

static int64_t band_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

sw_status sw_rtc_band_trace_get(const sw_rtc_band *b, int64_t frame, sw_rtc_band_trace *t)
{
    if (!b || !t || frame < 1)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_band_trace_get: NULL argument or frame %lld",
                       (long long)frame);
    if (!b->trace)
        return sw_fail(NULL, SW_EINVAL, "rtc band: no trace (params.trace = 0)");
    const int64_t done = sw_rtc_band_done(b);
    if (frame > done || frame <= done - b->p.trace)
        return sw_fail(NULL, SW_ERANGE,
                       "rtc band: frame %lld is not among the traced frames (done: %lld, the last "
                       "%d kept)",
                       (long long)frame, (long long)done, b->p.trace);
    /* the entry is rewritten only once frame + ntrace is under way (done >= frame + trace); the
     * kernel stores its frame tag (word 0) after the done word and the other stamps, so a frame
     * just done may still carry the old tag for a moment: wait for it (at most 10 ms) */
    const volatile uint64_t *e = b->trace + (size_t)((frame - 1) % b->ntrace) * SW_BAND_TRACE_WORDS;
    uint64_t w[SW_BAND_TRACE_WORDS];
    const int64_t t_end = band_now_ns() + 10000000;
    for (;;) {
        w[0] =
            __atomic_load_n((const uint64_t *)e, __ATOMIC_ACQUIRE); /* the tag, then the stamps */
        for (int i = 1; i < SW_BAND_TRACE_WORDS; i++)
            w[i] = e[i];
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the copies before the re-check */
        if (sw_rtc_band_done(b) - b->p.trace >= frame)
            return sw_fail(NULL, SW_ERANGE,
                           "rtc band: frame %lld's trace was overwritten while read",
                           (long long)frame);
        if ((int64_t)w[0] == frame)
            break;
        if (band_now_ns() > t_end)
            return sw_fail(NULL, SW_ETIMEDOUT,
                           "rtc band: frame %lld is done but its trace entry "
                           "was not tagged within 10 ms",
                           (long long)frame);
    }
    t->frame = frame;
    t->band0_flag_ns = w[1];
    t->last_flag_ns = w[2];
    t->last_copied_ns = w[3];
    t->last_counted_ns = w[4];
    t->last_seen_ns = w[5];
    t->commands_ns = w[6];
    t->done_ns = w[7];
    return SW_OK;
}

sw_status sw_rtc_band_clock(sw_rtc_band *b, int64_t *offset_ns, int64_t *rtt_ns)
{
    if (!b || !offset_ns || !rtt_ns)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_band_clock: NULL argument");
    if (!b->trace)
        return sw_fail(NULL, SW_EINVAL, "rtc band: the clock answers only with a trace on");
    SW_TRY(band_stopped(b));
    uint64_t *req = &b->ctl[SW_BAND_CLK_REQ], *ack = &b->ctl[SW_BAND_CLK_ACK];
    int64_t best = -1, off = 0;
    sw_status st = SW_OK;
    for (uint64_t k = 1; k <= 32 && st == SW_OK; k++) {
        const uint64_t old = __atomic_load_n(ack, __ATOMIC_ACQUIRE);
        const int64_t ta = band_now_ns();
        __atomic_store_n(req, k, __ATOMIC_RELEASE);
        uint64_t v;
        int64_t tb;
        for (;;) {
            v = __atomic_load_n(ack, __ATOMIC_ACQUIRE);
            tb = band_now_ns();
            if (v != old)
                break;
            if (tb - ta > 100000000) {
                st = sw_fail(NULL, SW_ETIMEDOUT,
                             "rtc band: the kernel did not answer clock request %llu within 100 "
                             "ms (frames in flight?)",
                             (unsigned long long)k);
                break;
            }
        }
        if (st == SW_OK && (best < 0 || tb - ta < best)) {
            best = tb - ta;
            off = (int64_t)v - (ta + (tb - ta) / 2);
        }
    }
    __atomic_store_n(req, SW_BAND_CLK_END, __ATOMIC_RELEASE);
    if (st != SW_OK)
        return st;
    *offset_ns = off;
    *rtt_ns = best;
    return SW_OK;
}
