/*
 * bench_rtc_band: latency of the band-wise real-time chain (loop.h, sw_rtc_band_*) with a
 * producer thread playing the camera.
 *
 * The camera: frame f is due at t0 + (f - 1) / rate; its bands complete one after the other over
 * `readout` x the frame period (band b at (b + 1) / bands of it), each written into the ring
 * (memcpy of its rows from one of 8 pre-rendered frames) and published; just before the release
 * store of the last band's flag the camera reads CLOCK_MONOTONIC (t_last). The main thread spins
 * in sw_rtc_band_wait for each frame and reads the clock when the commands are in host memory
 * (t_seen). Latency = t_seen - t_last: from the last pixel's arrival to the commands in host
 * memory. The first 100 frames are warm-up. A frame whose ring slot is still in use when it is
 * due is late (counted as missed; the camera waits on the done flag, sw_rtc_band_done, and
 * delivers it when the slot frees). A late frame's latency includes the queue before it (with
 * the ring full, about depth x the chain's time per frame), so a chain that cannot keep up is
 * not measured: after 20 late frames past the warm-up (or a run longer than twice its camera
 * time plus 5 s) the run ends early with a message giving the chain's rate, and the
 * configuration's higher rates are skipped.
 *
 * Systems (as bench_loop --latency): 40 x 40 lenslets of 6 px on a 240 x 240 u16 frame, 80 x 80
 * of 8 px on 640 x 640; circular pupil (lenslet centres inside the circle), actuators at the
 * corners of valid lenslets, a random control matrix of the right shape (the latency does not
 * depend on its values), dark frame 100 ADU and a subtracted threshold of 6 ADU, integrator gain
 * 0.5. Frames: one Gaussian spot (sigma 1.2 px) per lenslet at a random offset, bias and noise.
 *
 * Options:
 *   --configs LIST  of 40/fp32, 40/fp16, 80/fp32, 80/fp16 (default 40/fp32,80/fp16)
 *   --rates LIST    camera frame rates in Hz (default 1000,2000,4000)
 *   --frames N      frames per rate, after 100 warm-up (default 10000)
 *   --bands N       bands per frame (default 8)
 *   --readout F     fraction of the frame period over which the bands arrive, 0..1 (default 0.5)
 *   --soak N        instead: N frames of the first config at the first rate, the process's RSS
 *                   before and after printed (memory growth), p99 and max of every 10^5 frames
 *   --trace         also the kernel's clock at each phase of every frame (sw_rtc_band_trace_get),
 *                   related to the host's clock by round trips before and after the run
 *                   (sw_rtc_band_clock; linear in between): medians and p99 of each phase
 *   --cpus A,B      pin the consumer (main) thread to CPU A and the camera thread to CPU B
 *   --rt            run both threads SCHED_FIFO (priority 80) with the process's memory locked
 *                   (mlockall); the JSON's "rt" says whether the system allowed it (it needs
 *                   CAP_SYS_NICE and CAP_IPC_LOCK or root; refused, the run goes on without)
 *   --json-only     JSON lines only on stdout (default: also a table on stderr)
 * The GEMV's floor: each frame reads all of the control matrix once from device memory, nact x
 * 2 ns x 2 (FP16) or 4 (FP32) bytes, each band its share; printed per config (and "c_bytes" in
 * the JSON) with the time that takes at an H100 SXM's (3.35 TB/s) and an H200's (4.8 TB/s)
 * nominal bandwidth: 80/fp16 reads 104 MB, >= 22 us a frame on an H200, ~2.7 us a band of 8.
 * It bounds gemv_controller (the last band's share) and the rate the chain can keep up with.
 * Default run: 2 configs x 3 rates x 5000 frames: about 18 s of camera time.
 * JSON: one "rtc_band_latency" line per config and rate; "rtc_band_soak" (and per 10^5 frames
 * "rtc_band_soak_window") with --soak.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np */

#include "harness.h"

#include <errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG      "bench_rtc_band"
#define POOL      8
#define WARMUP    100
#define BIAS      100.0
#define THRESHOLD 6.0
#define WINDOW    100000
#define LATE_MAX  20 /* late frames after the warm-up before a run ends early */
#define DEPTH     8

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* ------------------------------------------------------------------ options */

typedef struct bconfig {
    int32_t n, px;
    int fp16;
} bconfig;

typedef struct opts {
    bconfig cfg[8];
    int ncfg;
    double rates[16];
    int nrates;
    int64_t frames;
    int32_t bands;
    double readout;
    int64_t soak;
    int json_only, trace;
    int cpu_main, cpu_camera; /* -1: not pinned */
    int rt;                   /* --rt: SCHED_FIFO + mlockall asked                   */
    int cpu_backend;          /* --backend cpu: nothing to measure (a GPU chain)    */
} opts;

static int parse_configs(const char *s, opts *o)
{
    o->ncfg = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        bconfig c;
        if (strcmp(t, "40/fp32") == 0)
            c = (bconfig){40, 6, 0};
        else if (strcmp(t, "40/fp16") == 0)
            c = (bconfig){40, 6, 1};
        else if (strcmp(t, "80/fp32") == 0)
            c = (bconfig){80, 8, 0};
        else if (strcmp(t, "80/fp16") == 0)
            c = (bconfig){80, 8, 1};
        else
            return -1;
        if (o->ncfg == 8)
            return -1;
        o->cfg[o->ncfg++] = c;
    }
    return o->ncfg > 0 ? 0 : -1;
}

static int parse_rates(const char *s, opts *o)
{
    o->nrates = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        const double r = strtod(t, &end);
        if (*end || !(r >= 1.0 && r <= 100000.0) || o->nrates == 16)
            return -1;
        o->rates[o->nrates++] = r;
    }
    return o->nrates > 0 ? 0 : -1;
}

static const char *HELP =
    "usage: " PROG " [--configs LIST] [--rates LIST] [--frames N] [--bands N] [--readout F]\n"
    "                      [--soak N] [--trace] [--cpus A,B] [--json-only]\n"
    "Latency of the band-wise real-time chain (sw_rtc_band) from the last band's arrival to the\n"
    "commands in host memory, a producer thread playing the camera (CUDA only).\n"
    "  --configs LIST  of 40/fp32, 40/fp16, 80/fp32, 80/fp16 (default 40/fp32,80/fp16)\n"
    "  --rates LIST    frame rates in Hz (default 1000,2000,4000)\n"
    "  --frames N      frames per rate after 100 warm-up (default 5000)\n"
    "  --bands N       bands per frame (default 8)\n"
    "  --readout F     fraction of the frame period the bands arrive over, 0..1 (default 0.5)\n"
    "  --soak N        N frames of the first config at the first rate; RSS before and after\n"
    "  --trace         the kernel's clock at each phase: medians and p99 of the phases\n"
    "  --cpus A,B      pin the consumer thread to CPU A and the camera thread to CPU B\n"
    "  --rt            both threads SCHED_FIFO and memory locked, where the system allows\n"
    "  --json-only     JSON lines only\n"
    "A run whose frames find their ring slot still in use (the chain slower than the camera)\n"
    "ends early with the chain's rate; that configuration's higher rates are skipped.\n";

static int parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    parse_configs("40/fp32,80/fp16", o);
    parse_rates("1000,2000,4000", o);
    o->frames = 5000;
    o->bands = 8;
    o->cpu_main = o->cpu_camera = -1;
    o->readout = 0.5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(HELP, stdout);
            return 0;
        } else if (strcmp(a, "--json-only") == 0) {
            o->json_only = 1;
        } else if (strcmp(a, "--backend") == 0 && v &&
                   (strcmp(v, "cpu") == 0 || strcmp(v, "cuda") == 0)) {
            o->cpu_backend = strcmp(v, "cpu") == 0; /* (tools/gpu-check runs both) */
            i++;
        } else if (strcmp(a, "--trace") == 0) {
            o->trace = 1;
        } else if (strcmp(a, "--rt") == 0) {
            o->rt = 1;
        } else if (!v) {
            fprintf(stderr, "%s: %s needs a value (--help)\n", PROG, a);
            return 2;
        } else if (strcmp(a, "--configs") == 0) {
            if (parse_configs(v, o) != 0)
                goto bad;
            i++;
        } else if (strcmp(a, "--rates") == 0) {
            if (parse_rates(v, o) != 0)
                goto bad;
            i++;
        } else if (strcmp(a, "--frames") == 0) {
            o->frames = strtoll(v, &end, 10);
            if (*end || o->frames < 1 || o->frames > 100000000)
                goto bad;
            i++;
        } else if (strcmp(a, "--bands") == 0) {
            o->bands = (int32_t)strtol(v, &end, 10);
            if (*end || o->bands < 1 || o->bands > 80)
                goto bad;
            i++;
        } else if (strcmp(a, "--readout") == 0) {
            o->readout = strtod(v, &end);
            if (*end || !(o->readout >= 0.0 && o->readout <= 1.0))
                goto bad;
            i++;
        } else if (strcmp(a, "--cpus") == 0) {
            char *e2 = NULL;
            const long c0 = strtol(v, &end, 10);
            if (*end != ',' || c0 < 0 || c0 >= CPU_SETSIZE)
                goto bad;
            const long c1 = strtol(end + 1, &e2, 10);
            if (*e2 || e2 == end + 1 || c1 < 0 || c1 >= CPU_SETSIZE)
                goto bad;
            o->cpu_main = (int)c0;
            o->cpu_camera = (int)c1;
            i++;
        } else if (strcmp(a, "--soak") == 0) {
            o->soak = strtoll(v, &end, 10);
            if (*end || o->soak < 1 || o->soak > 100000000)
                goto bad;
            i++;
        } else {
            fprintf(stderr, "%s: unknown option %s (--help)\n", PROG, a);
            return 2;
        }
        continue;
    bad:
        fprintf(stderr, "%s: bad value for %s: %s (--help)\n", PROG, a, v);
        return 2;
    }
    if (o->rt && (o->cpu_main < 0 || o->cpu_main == o->cpu_camera)) {
        /* two SCHED_FIFO threads that spin must not share a CPU: one would starve the other */
        fprintf(stderr, "%s: --rt needs --cpus A,B with A != B (--help)\n", PROG);
        return 2;
    }
    return -1;
}

/* ------------------------------------------------------------------ the system */

typedef struct sys {
    int32_t n, px, w, ns, nact;
    uint8_t *mask;
    float *dark, *cm;
    uint16_t *frames[POOL];
    sw_rtc *rtc;
} sys;

static void sys_free(sys *s)
{
    sw_rtc_destroy(s->rtc);
    free(s->mask);
    free(s->dark);
    free(s->cm);
    for (int i = 0; i < POOL; i++)
        free(s->frames[i]);
    memset(s, 0, sizeof *s);
}

static int sys_make(sw_context *ctx, const bconfig *c, sys *s)
{
    memset(s, 0, sizeof *s);
    s->n = c->n;
    s->px = c->px;
    s->w = c->n * c->px;
    const int32_t n = s->n, w = s->w;
    s->mask = calloc((size_t)n * n, 1);
    s->dark = malloc((size_t)w * w * sizeof(float));
    if (!s->mask || !s->dark)
        return 1;
    for (int32_t iy = 0; iy < n; iy++)
        for (int32_t ix = 0; ix < n; ix++) {
            const double dx = ix + 0.5 - 0.5 * n, dy = iy + 0.5 - 0.5 * n;
            s->mask[iy * n + ix] = dx * dx + dy * dy <= 0.25 * n * n;
            s->ns += s->mask[iy * n + ix];
        }
    for (int32_t cy = 0; cy <= n; cy++)
        for (int32_t cx = 0; cx <= n; cx++) {
            int lit = 0;
            for (int32_t iy = cy - 1; iy <= cy; iy++)
                for (int32_t ix = cx - 1; ix <= cx; ix++)
                    lit |= ix >= 0 && iy >= 0 && ix < n && iy < n && s->mask[iy * n + ix];
            s->nact += lit;
        }
    for (int64_t i = 0; i < (int64_t)w * w; i++)
        s->dark[i] = (float)BIAS;
    uint64_t seed = 0x2500b0001ull + (uint64_t)n;
    const int64_t ncm = (int64_t)s->nact * 2 * s->ns;
    s->cm = malloc((size_t)ncm * sizeof(float));
    if (!s->cm)
        return 1;
    for (int64_t i = 0; i < ncm; i++)
        s->cm[i] = (float)(0.01 * (2.0 * urand(&seed) - 1.0));
    for (int k = 0; k < POOL; k++) {
        uint16_t *im = malloc((size_t)w * w * sizeof(uint16_t));
        if (!im)
            return 1;
        s->frames[k] = im;
        for (int64_t i = 0; i < (int64_t)w * w; i++)
            im[i] = (uint16_t)(BIAS + 6.0 * urand(&seed));
        for (int32_t iy = 0; iy < n; iy++)
            for (int32_t ix = 0; ix < n; ix++) {
                if (!s->mask[iy * n + ix])
                    continue;
                const double cx = (ix + 0.5) * s->px - 0.5 + 0.8 * (2 * urand(&seed) - 1);
                const double cy = (iy + 0.5) * s->px - 0.5 + 0.8 * (2 * urand(&seed) - 1);
                for (int32_t y = iy * s->px; y < (iy + 1) * s->px; y++)
                    for (int32_t x = ix * s->px; x < (ix + 1) * s->px; x++) {
                        const double r2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
                        im[(int64_t)y * w + x] += (uint16_t)(2000.0 * exp(-r2 / (2 * 1.2 * 1.2)));
                    }
            }
    }
    sw_rtc_params p;
    sw_rtc_params_default(&p);
    sw_centroid_params_default(&p.centroid);
    sw_sh_geometry_default(&p.centroid.geometry);
    p.centroid.geometry.nx = p.centroid.geometry.ny = n;
    p.centroid.geometry.pitch_px = s->px;
    p.centroid.geometry.x0 = p.centroid.geometry.y0 = 0.0;
    p.centroid.geometry.valid = s->mask;
    p.centroid.width = p.centroid.height = w;
    p.centroid.type = SW_PIX_U16;
    p.centroid.dark = s->dark;
    p.centroid.threshold_mode = SW_THRESHOLD_SUBTRACT;
    p.centroid.threshold_kind = SW_THRESHOLD_ABSOLUTE;
    p.centroid.threshold = THRESHOLD;
    p.recon = SW_RTC_MVM;
    p.nact = s->nact;
    p.cm = s->cm;
    p.fp16 = c->fp16;
    sw_controller_params_default(&p.controller);
    p.controller.nact = s->nact;
    p.controller.gain = 0.5;
    if (sw_rtc_create(ctx, &p, &s->rtc) != SW_OK) {
        fprintf(stderr, "%s: sw_rtc_create: %s\n", PROG, sw_context_error(ctx));
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ the camera */

typedef struct camera {
    sw_rtc_band *b;
    const sys *s;
    int32_t nb, depth;
    int cpu;    /* -1: not pinned */
    int rt;     /* SCHED_FIFO asked                  */
    int rt_err; /* its pthread error, 0 when granted */
    double period_us, readout, deadline_us;
    int64_t n;
    _Atomic double *tlast; /* n + 1: the last band's clock, per frame */
    atomic_int stop;
    atomic_int finished;     /* the camera has returned */
    atomic_llong published;  /* frames whose last band is published */
    int64_t late, late_warm; /* late frames: all, and after the warm-up */
    int behind;              /* ended early: the chain cannot keep up */
    sw_status status;
    char msg[256];
} camera;

/* SCHED_FIFO at RT_PRIORITY for the calling thread: 0, or the pthread error (EPERM without the
 * capability). */
#define RT_PRIORITY 80
static int go_realtime(void)
{
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    sp.sched_priority = RT_PRIORITY;
    return pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
}

static int pin(int cpu)
{
    if (cpu < 0)
        return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Spins until the clock passes t (us) or stop is raised: 0, or 1 when stopped. */
static int spin_until(camera *c, double t)
{
    while (now_us() < t)
        if (atomic_load_explicit(&c->stop, memory_order_relaxed))
            return 1;
    return 0;
}

/* Frame f's slot is free (frame f - depth done), waiting for it when the chain is behind: 0;
 * 1 to end the run (stopped, or the chain cannot keep up). No error machinery while it spins:
 * the done flag alone (sw_rtc_band_buffer then reports a stopped chain). */
static int slot_free(camera *c, int64_t f)
{
    if (f - c->depth <= sw_rtc_band_done(c->b))
        return 0;
    c->late++;
    if (f > WARMUP && ++c->late_warm > LATE_MAX) {
        c->behind = 1;
        return 1;
    }
    const double give_up = now_us() + 1e6;
    while (f - c->depth > sw_rtc_band_done(c->b)) {
        if (atomic_load_explicit(&c->stop, memory_order_relaxed))
            return 1;
        const double t = now_us();
        if (t > c->deadline_us) {
            c->behind = 1;
            return 1;
        }
        if (t > give_up)
            break; /* a stopped chain: sw_rtc_band_buffer says why */
    }
    return 0;
}

static void *camera_run(void *arg)
{
    camera *c = arg;
    const sys *s = c->s;
    if (pin(c->cpu) != 0) {
        c->status = SW_EINVAL;
        snprintf(c->msg, sizeof c->msg, "cannot pin the camera thread to CPU %d", c->cpu);
        atomic_store(&c->finished, 1);
        return NULL;
    }
    if (c->rt)
        c->rt_err = go_realtime();
    const double t0 = now_us() + 1000.0;
    for (int64_t f = 1; f <= c->n; f++) {
        const uint16_t *src = s->frames[(f - 1) % POOL];
        const double tf = t0 + (double)(f - 1) * c->period_us;
        for (int32_t band = 0; band < c->nb; band++) {
            if (spin_until(c, tf + c->readout * c->period_us * (band + 1) / c->nb))
                goto out;
            if (band == 0 && slot_free(c, f))
                goto out;
            if (now_us() > c->deadline_us) {
                c->behind = 1;
                goto out;
            }
            int32_t row0 = 0, rows = 0;
            void *dst = NULL;
            size_t stride = 0;
            sw_status st = sw_rtc_band_rows(c->b, band, &row0, &rows);
            if (st == SW_OK)
                st = sw_rtc_band_buffer(c->b, f, band, &dst, &stride);
            if (st == SW_OK) {
                for (int32_t y = 0; y < rows; y++)
                    memcpy((char *)dst + (size_t)y * stride, src + (size_t)(row0 + y) * s->w,
                           (size_t)s->w * sizeof(uint16_t));
                if (band == c->nb - 1)
                    atomic_store_explicit(&c->tlast[f], now_us(), memory_order_release);
                st = sw_rtc_band_publish(c->b, f, band);
            }
            if (st != SW_OK) {
                c->status = st;
                snprintf(c->msg, sizeof c->msg, "frame %lld band %d: %s", (long long)f, band,
                         sw_context_error(NULL));
                goto out;
            }
        }
        atomic_store_explicit(&c->published, (long long)f, memory_order_release);
    }
out:
    atomic_store(&c->finished, 1);
    return NULL;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* median, p99, p99.9 (nearest rank) and max of n samples (sorted in place) */
static void stats(float *v, int64_t n, double *median, double *p99, double *p999, double *max)
{
    if (n <= 0) {
        *median = *p99 = *p999 = *max = NAN;
        return;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    *median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    int64_t k = (int64_t)ceil(0.99 * (double)n);
    *p99 = v[(k < 1 ? 1 : k) - 1];
    k = (int64_t)ceil(0.999 * (double)n);
    *p999 = v[(k < 1 ? 1 : k) - 1];
    *max = v[n - 1];
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

/* The chain's diagnostic settings (rtc_band_cuda.cu reads them at create), or the default. */
static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

static void json_head(const char *bench, const char *cname, const char *device)
{
    printf("{\"bench\":");
    sw_json_write_string(stdout, bench);
    printf(",\"config\":");
    sw_json_write_string(stdout, cname);
    printf(",\"backend\":\"cuda\",\"device\":");
    sw_json_write_string(stdout, device);
    printf(",\"sys_fences_per\":");
    sw_json_write_string(stdout, env_or("SPOTWAVE_RTC_BAND_FENCE", "frame"));
    printf(",\"stop_polled_by\":");
    sw_json_write_string(stdout, env_or("SPOTWAVE_RTC_BAND_STOP_POLL", "flag"));
    printf(",\"blocks_per_sm_max\":");
    sw_json_write_string(stdout, env_or("SPOTWAVE_RTC_BAND_BLOCKS_PER_SM", "2"));
}

static void json_num(const char *name, double v)
{
    if (isfinite(v))
        printf(",\"%s\":%.6g", name, v);
    else
        printf(",\"%s\":null", name);
}

/* ------------------------------------------------------------------ the trace */

#define NPHASE 10
static const char *PHASE[NPHASE][2] = {
    {"readout", "band 0's flag seen -> the last band's flag seen"},
    {"publish_to_flag", "host: last flag stored -> GPU: seen (clocks related)"},
    {"copy", "last band's flag seen -> its first row in shared memory"},
    {"centroid_count", "-> the last band's slopes all counted"},
    {"count_seen", "-> that count seen by block 0"},
    {"gemv_controller", "-> every block's commands written"},
    {"fence_done", "-> system fence and done flag stored"},
    {"done_to_host", "GPU: done stored -> host: commands copied (clocks related)"},
    {"gpu_total", "last band's flag seen -> done flag stored"},
    {"host_total", "the bench's latency (host clock only)"},
};

typedef struct clocksync {
    int ok;
    double t0, t1;      /* host us of the two syncs */
    int64_t off0, off1; /* GPU - host, ns */
    int64_t rtt0, rtt1;
} clocksync;

/* GPU ns -> host us (CLOCK_MONOTONIC), the offset interpolated between the two syncs */
static double gpu_to_host_us(const clocksync *k, uint64_t g)
{
    /* in integers first: the GPU clock's epoch is far (a double would keep 256 ns steps) */
    const double h = 1e-3 * (double)((int64_t)g - k->off0); /* host us at the first offset */
    if (!(k->t1 > k->t0))
        return h;
    return h - 1e-3 * (double)(k->off1 - k->off0) * (h - k->t0) / (k->t1 - k->t0);
}

/* The phases of frames WARMUP + 1 .. last: medians and p99 to stderr and a JSON line. */
static void trace_report(sw_rtc_band *b, const camera *cam, const double *seen, int64_t last,
                         const clocksync *k, const opts *o, double rate, const char *cname,
                         const char *device)
{
    const int64_t n = last > WARMUP ? last - WARMUP : 0;
    float *v[NPHASE];
    int64_t m = 0;
    int okall = n > 0;
    for (int p = 0; p < NPHASE; p++) {
        v[p] = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        okall = okall && v[p];
    }
    for (int64_t f = WARMUP + 1; okall && f <= last; f++) {
        sw_rtc_band_trace t;
        if (sw_rtc_band_trace_get(b, f, &t) != SW_OK || seen[f] <= 0.0)
            continue;
        const double tl = atomic_load_explicit(&cam->tlast[f], memory_order_acquire);
        v[0][m] = 1e-3f * (float)(int64_t)(t.last_flag_ns - t.band0_flag_ns);
        v[1][m] = k->ok ? (float)(gpu_to_host_us(k, t.last_flag_ns) - tl) : NAN;
        v[2][m] = 1e-3f * (float)(int64_t)(t.last_copied_ns - t.last_flag_ns);
        v[3][m] = 1e-3f * (float)(int64_t)(t.last_counted_ns - t.last_copied_ns);
        v[4][m] = 1e-3f * (float)(int64_t)(t.last_seen_ns - t.last_counted_ns);
        v[5][m] = 1e-3f * (float)(int64_t)(t.commands_ns - t.last_seen_ns);
        v[6][m] = 1e-3f * (float)(int64_t)(t.done_ns - t.commands_ns);
        v[7][m] = k->ok ? (float)(seen[f] - gpu_to_host_us(k, t.done_ns)) : NAN;
        v[8][m] = 1e-3f * (float)(int64_t)(t.done_ns - t.last_flag_ns);
        v[9][m] = (float)(seen[f] - tl);
        m++;
    }
    json_head("rtc_band_trace", cname, device);
    printf(",\"rate_hz\":%g,\"frames\":%lld", rate, (long long)m);
    if (k->ok) {
        json_num("clock_rtt_us", 1e-3 * (double)(k->rtt0 > k->rtt1 ? k->rtt0 : k->rtt1));
        json_num("clock_drift_ppm",
                 k->t1 > k->t0 ? 1e3 * (double)(k->off1 - k->off0) / (k->t1 - k->t0) : NAN);
    }
    if (!o->json_only)
        fprintf(stderr, "    trace over %lld frames (us; clocks %s)\n", (long long)m,
                k->ok ? "related by round trips" : "NOT related: host-GPU phases absent");
    for (int p = 0; p < NPHASE && okall; p++) {
        /* the finite values only (the host legs are NaN without the clocks related) */
        int64_t nf = 0;
        for (int64_t i = 0; i < m; i++)
            if (isfinite(v[p][i]))
                v[p][nf++] = v[p][i];
        double md, p99, p999, mx;
        stats(v[p], nf, &md, &p99, &p999, &mx);
        char key[64];
        snprintf(key, sizeof key, "%s_median_us", PHASE[p][0]);
        json_num(key, md);
        snprintf(key, sizeof key, "%s_p99_us", PHASE[p][0]);
        json_num(key, p99);
        if (!o->json_only)
            fprintf(stderr, "      %-16s median %8.2f  p99 %8.2f  max %8.2f   %s\n", PHASE[p][0],
                    md, p99, mx, PHASE[p][1]);
    }
    printf("}\n");
    fflush(stdout);
    for (int p = 0; p < NPHASE; p++)
        free(v[p]);
}

static void clock_sync(sw_rtc_band *b, int64_t *off, int64_t *rtt, double *t, int *ok)
{
    *t = now_us();
    if (sw_rtc_band_clock(b, off, rtt) != SW_OK) {
        fprintf(stderr, "%s: sw_rtc_band_clock: %s\n", PROG, sw_context_error(NULL));
        *ok = 0;
    }
}

/* ------------------------------------------------------------------ one run */

typedef struct result {
    double median, p99, max, p999;
    int64_t measured, late, lost;
    int behind;          /* ended early: the chain cannot keep up */
    double us_per_frame; /* then: the consumer's time between frames, frames WARMUP + 1 .. */
    sw_rtc_band_stats stats;
    int rt_camera_err; /* the camera thread's SCHED_FIFO error, 0 when granted (with --rt) */
} result;

/* Runs warm-up + frames frames at rate; lat receives the measured latencies (us) of the frames
 * after the warm-up, in frame order. With soak, a line per WINDOW frames. */
static int run_rate(sys *s, const opts *o, double rate, int64_t frames, float *lat, int soak,
                    const char *cname, const char *device, result *res)
{
    memset(res, 0, sizeof *res);
    const int64_t n = WARMUP + frames;
    sw_rtc_band_params bp;
    sw_rtc_band_params_default(&bp);
    bp.bands = o->bands < s->n ? o->bands : s->n;
    bp.depth = DEPTH;
    bp.band_timeout_us = 1e6 / rate + 5000.0; /* a frame period and a margin */
    bp.idle_timeout_us = 2e6;
    bp.trace = o->trace ? (int32_t)(n < (1 << 20) ? n : (1 << 20)) : 0;
    sw_rtc_band *b = NULL;
    if (sw_rtc_band_create(s->rtc, &bp, &b) != SW_OK) {
        fprintf(stderr, "%s: sw_rtc_band_create: %s\n", PROG, sw_context_error(NULL));
        return 1;
    }
    camera cam;
    memset(&cam, 0, sizeof cam);
    cam.b = b;
    cam.s = s;
    cam.nb = bp.bands;
    cam.depth = bp.depth;
    cam.cpu = o->cpu_camera;
    cam.rt = o->rt;
    cam.period_us = 1e6 / rate;
    cam.readout = o->readout;
    cam.n = n;
    cam.tlast = malloc((size_t)(n + 1) * sizeof *cam.tlast);
    double *seen = o->trace ? calloc((size_t)(n + 1), sizeof(double)) : NULL;
    float *u = malloc((size_t)s->nact * sizeof(float));
    if (!cam.tlast || !u || (o->trace && !seen)) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        sw_rtc_band_destroy(b);
        free((void *)cam.tlast);
        free(seen);
        free(u);
        return 1;
    }
    for (int64_t f = 0; f <= n; f++)
        atomic_init(&cam.tlast[f], 0.0);
    atomic_init(&cam.stop, 0);
    atomic_init(&cam.finished, 0);
    atomic_init(&cam.published, 0);
    clocksync k;
    memset(&k, 0, sizeof k);
    k.ok = o->trace;
    if (o->trace)
        clock_sync(b, &k.off0, &k.rtt0, &k.t0, &k.ok); /* the kernel idles: frame 1 not sent */
    cam.deadline_us = now_us() + 2.0 * (double)n * cam.period_us + 5e6;
    /* The camera thread starts on its own CPU: a new thread inherits the creator's CPUs and
     * policy, so with --rt it would start SCHED_FIFO on the consumer's CPU, behind this thread,
     * which spins at the same priority below and never yields it the CPU to pin itself. */
    pthread_t th;
    pthread_attr_t attr;
    const int attr_ok = pthread_attr_init(&attr) == 0;
    int made = attr_ok;
    if (made && cam.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cam.cpu, &set);
        made = pthread_attr_setaffinity_np(&attr, sizeof set, &set) == 0;
    }
    if (made)
        made = pthread_create(&th, &attr, camera_run, &cam) == 0;
    if (attr_ok)
        pthread_attr_destroy(&attr);
    if (!made) {
        fprintf(stderr, "%s: pthread_create failed (camera thread on CPU %d)\n", PROG, cam.cpu);
        sw_rtc_band_destroy(b);
        free((void *)cam.tlast);
        free(seen);
        free(u);
        return 1;
    }
    int rc = 0;
    int64_t m = 0, wstart = 0, last = 0;
    double seen_first = 0.0, seen_last = 0.0;
    for (int64_t f = 1; f <= n; f++) {
        /* the done flag, or the camera's end short of this frame */
        int ended = 0;
        const double tw = now_us();
        while (sw_rtc_band_done(b) < f) {
            if (atomic_load_explicit(&cam.finished, memory_order_acquire) &&
                atomic_load_explicit(&cam.published, memory_order_acquire) < f &&
                sw_rtc_band_done(b) < f) {
                ended = 1;
                break;
            }
            if (now_us() - tw > 2e6)
                break; /* sw_rtc_band_wait below says why */
        }
        if (ended)
            break;
        const sw_status st = sw_rtc_band_wait(b, f, 2e6, u, NULL);
        const double t_seen = now_us();
        if (st == SW_ERANGE) { /* this thread fell a ring behind: not measured */
            res->lost++;
            continue;
        }
        if (st != SW_OK) {
            fprintf(stderr, "%s: %s at %g Hz, frame %lld: %s\n", PROG, cname, rate, (long long)f,
                    sw_context_error(NULL));
            rc = 1;
            break;
        }
        last = f;
        if (seen)
            seen[f] = t_seen;
        if (f > WARMUP) {
            const double tl = atomic_load_explicit(&cam.tlast[f], memory_order_acquire);
            lat[m++] = (float)(t_seen - tl);
            if (f == WARMUP + 1)
                seen_first = t_seen;
            seen_last = t_seen;
        }
        if (soak && m - wstart == WINDOW) {
            float *w = malloc(WINDOW * sizeof(float));
            if (w) {
                memcpy(w, lat + wstart, WINDOW * sizeof(float));
                double md, p99, p999, mx;
                stats(w, WINDOW, &md, &p99, &p999, &mx);
                json_head("rtc_band_soak_window", cname, device);
                printf(",\"rate_hz\":%g,\"first\":%lld,\"frames\":%d", rate,
                       (long long)(WARMUP + wstart + 1), WINDOW);
                json_num("median_us", md);
                json_num("p99_us", p99);
                json_num("max_us", mx);
                printf(",\"rss_kb\":%ld}\n", rss_kb());
                fflush(stdout);
                free(w);
            }
            wstart = m;
        }
    }
    atomic_store(&cam.stop, 1);
    pthread_join(th, NULL);
    if (rc == 0 && cam.status != SW_OK) {
        fprintf(stderr, "%s: %s at %g Hz: camera: %s\n", PROG, cname, rate, cam.msg);
        rc = 1;
    }
    res->behind = cam.behind;
    res->rt_camera_err = cam.rt_err;
    res->us_per_frame = m > 1 ? (seen_last - seen_first) / (double)(m - 1) : NAN;
    if (rc == 0 && cam.behind)
        fprintf(stderr,
                "%s: %s at %g Hz: the chain cannot keep up: %lld frames found their ring slot "
                "still in use (%lld after the warm-up); the consumer saw a frame every %.1f us, "
                "the camera sends one every %.1f us. Run ended early at frame %lld; its "
                "latencies include the queue in the ring and are not the chain's.\n",
                PROG, cname, rate, (long long)cam.late, (long long)cam.late_warm, res->us_per_frame,
                cam.period_us, (long long)last);
    if (rc == 0 && o->trace) {
        /* every published frame done: the kernel idles again for the second clock sync */
        const long long pub = atomic_load(&cam.published);
        const double tw = now_us();
        while (sw_rtc_band_done(b) < pub && now_us() - tw < 1e6)
            ;
        if (k.ok)
            clock_sync(b, &k.off1, &k.rtt1, &k.t1, &k.ok);
        trace_report(b, &cam, seen, last, &k, o, rate, cname, device);
    }
    sw_rtc_band_get_stats(b, &res->stats);
    sw_rtc_band_destroy(b);
    res->measured = m;
    res->late = cam.late;
    free((void *)cam.tlast);
    free(seen);
    free(u);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    const int pr = parse(argc, argv, &o);
    if (pr >= 0)
        return pr;
    if (o.cpu_backend) {
        fprintf(stderr, "%s: the band chain runs on a GPU only: nothing for --backend cpu\n", PROG);
        return 0;
    }
    sw_bench_options bo;
    memset(&bo, 0, sizeof bo);
    bo.backend = SW_BACKEND_CUDA;
    bo.json_only = o.json_only;
    sw_context *ctx = NULL;
    if (sw_bench_context(&bo, PROG, &ctx) != 0)
        return 1;
    if (pin(o.cpu_main) != 0) { /* (after the context: the driver's threads stay free) */
        fprintf(stderr, "%s: cannot pin the main thread to CPU %d\n", PROG, o.cpu_main);
        sw_context_destroy(ctx);
        return 1;
    }
    /* --rt: memory locked and this thread SCHED_FIFO; refused, the run goes on and says so */
    int rt_lock_err = 0, rt_main_err = 0;
    if (o.rt) {
        rt_lock_err = mlockall(MCL_CURRENT | MCL_FUTURE) != 0 ? errno : 0;
        rt_main_err = go_realtime();
        if (!o.json_only && (rt_lock_err || rt_main_err))
            fprintf(stderr, "%s: --rt: mlockall %s, SCHED_FIFO %s: running without\n", PROG,
                    rt_lock_err ? strerror(rt_lock_err) : "ok",
                    rt_main_err ? strerror(rt_main_err) : "ok");
    }
    char device[256];
    sw_bench_device_name(ctx, device, sizeof device);
    int rc = 0;
    const int ncfg = o.soak ? 1 : o.ncfg, nrates = o.soak ? 1 : o.nrates;
    const int64_t frames = o.soak ? o.soak : o.frames;
    float *lat = malloc((size_t)frames * sizeof(float));
    if (!lat) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        sw_context_destroy(ctx);
        return 1;
    }
    memset(lat, 0, (size_t)frames * sizeof(float)); /* touched: the RSS counts it already */
    if (!o.json_only)
        fprintf(stderr,
                "%s: latency from the last band's flag to the commands in host memory (us), "
                "%d bands, readout %.0f%% of the period, %s; system fences per %s, stop word "
                "polled by %s waits, at most %s blocks per SM\n",
                PROG, o.bands, 100.0 * o.readout, device,
                env_or("SPOTWAVE_RTC_BAND_FENCE", "frame"),
                env_or("SPOTWAVE_RTC_BAND_STOP_POLL", "flag"),
                env_or("SPOTWAVE_RTC_BAND_BLOCKS_PER_SM", "2"));
    for (int ci = 0; ci < ncfg && rc == 0; ci++) {
        const bconfig *c = &o.cfg[ci];
        sys s;
        if (sys_make(ctx, c, &s) != 0) {
            sys_free(&s);
            rc = 1;
            break;
        }
        char config_s[128];
        snprintf(config_s, sizeof config_s, "%dx%d on %d^2 u16, MVM %s (%d x %d), %d bands",
                 (int)s.n, (int)s.n, (int)s.w, c->fp16 ? "FP16" : "FP32", (int)s.nact,
                 (int)(2 * s.ns), (int)(o.bands < s.n ? o.bands : s.n));
        const int32_t nbands = o.bands < s.n ? o.bands : s.n;
        const double cbytes = (double)s.nact * 2.0 * s.ns * (c->fp16 ? 2.0 : 4.0);
        if (!o.json_only)
            fprintf(stderr,
                    "  %s: C is %.1f MB a frame, %.2f MB a band: at 3.35 / 4.8 TB/s >= %.1f / "
                    "%.1f us a frame, %.2f / %.2f us a band\n",
                    config_s, 1e-6 * cbytes, 1e-6 * cbytes / nbands, cbytes / 3.35e6,
                    cbytes / 4.8e6, cbytes / 3.35e6 / nbands, cbytes / 4.8e6 / nbands);
        int behind = 0;
        for (int ri = 0; ri < nrates && rc == 0; ri++) {
            const double rate = o.rates[ri];
            if (behind) { /* a chain too slow at a lower rate is too slow here too */
                if (!o.json_only)
                    fprintf(stderr,
                            "  %-44s %6.0f Hz  skipped: the chain did not keep up at a "
                            "lower rate\n",
                            config_s, rate);
                continue;
            }
            const long rss0 = rss_kb();
            result r;
            rc = run_rate(&s, &o, rate, frames, lat, o.soak > 0, config_s, device, &r);
            const long rss1 = rss_kb();
            if (rc != 0)
                break;
            behind = r.behind;
            double md, p99, p999, mx;
            stats(lat, r.measured, &md, &p99, &p999, &mx);
            json_head(o.soak ? "rtc_band_soak" : "rtc_band_latency", config_s, device);
            printf(",\"lenslets\":%d,\"frame_px\":%d,\"slopes\":%d,\"nact\":%d,\"rate_hz\":%g",
                   (int)(s.n * s.n), (int)s.w, (int)(2 * s.ns), (int)s.nact, rate);
            printf(",\"c_bytes\":%.0f", cbytes);
            printf(",\"frames\":%lld,\"measured\":%lld,\"warmup\":%d", (long long)frames,
                   (long long)r.measured, WARMUP);
            json_num("median_us", md);
            json_num("p99_us", p99);
            json_num("p999_us", p999);
            json_num("max_us", mx);
            printf(",\"missed\":%lld,\"not_measured\":%lld,\"timeouts\":%lld,\"out_of_order\":%lld,"
                   "\"overruns\":%lld,\"blocks\":%d,\"readout\":%g",
                   (long long)r.late, (long long)r.lost, (long long)r.stats.timeouts,
                   (long long)r.stats.out_of_order, (long long)r.stats.overruns,
                   (int)r.stats.blocks, o.readout);
            printf(",\"keeps_up\":%s", r.behind ? "false" : "true");
            if (r.behind)
                json_num("consumer_us_per_frame", r.us_per_frame);
            if (s.n == 40)
                printf(",\"target_median_us\":20,\"target_p99_us\":30,\"meets_target\":%s",
                       !r.behind && md <= 20.0 && p99 <= 30.0 ? "true" : "false");
            if (o.rt)
                printf(",\"rt_mlockall\":%s,\"rt_fifo_consumer\":%s,\"rt_fifo_camera\":%s",
                       rt_lock_err ? "false" : "true", rt_main_err ? "false" : "true",
                       r.rt_camera_err ? "false" : "true");
            printf(",\"rss_before_kb\":%ld,\"rss_after_kb\":%ld}\n", rss0, rss1);
            fflush(stdout);
            if (!o.json_only)
                fprintf(stderr,
                        "  %-44s %6.0f Hz  median %7.1f  p99 %7.1f  max %8.1f  missed %lld  "
                        "RSS %ld -> %ld kB%s\n",
                        config_s, rate, md, p99, mx, (long long)r.late, rss0, rss1,
                        r.behind ? "  ENDED EARLY: cannot keep up (latencies include the queue)"
                                 : "");
        }
        sys_free(&s);
    }
    free(lat);
    sw_context_destroy(ctx);
    return rc;
}
