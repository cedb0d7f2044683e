/*
 * bench_rtc_multi: the MVM real-time chain over 1, 2, 4 GPUs of one node (sw_rtc_multi, NCCL:
 * the NVIDIA Collective Communications Library), 80 x 80 and 200 x 200 lenslets, the control
 * matrix in FP32 and FP16, against the one-GPU chain (sw_rtc).
 *
 * System: n x n lenslets of 8 px (640 or 1600 px u16 frames, in pinned host memory), the lenslets
 * at least half lit by a circular pupil (GEOMETRIC SH simulator, flat wavefront, shot and read
 * noise), the Fried corners of the lit lenslets as the actuators (80 x 80: 5185 commands x 10048
 * slopes; 200 x 200: 31829 x 62856, 8 GB in FP32) and a random control matrix of that shape (the
 * latency does not depend on its values); integrator, gain 0.5.
 *
 * Per size, precision, split (rows: each GPU a share of the commands; columns: each GPU a band of
 * lenslet rows, its own frame copy, centroids and slopes, a reduction of the partial commands;
 * loop.h) and GPU count (the columns from 2 GPUs on):
 *   "rtc_multi" line: latency, frame (host, pinned) -> commands (host), host clock around
 *       sw_rtc_multi_run, over --frames frames after --warmup; median, p99; whether the run
 *       launches one CUDA graph; the first frame's commands checked against the reference plan's
 *       (sw_rtc, else the 1-GPU sw_rtc_multi; see "Check" below; the bench fails otherwise);
 *   "rtc_multi_stages": the stages alone (sw_rtc_multi_profile, medians over --profile-reps):
 *       t_centroid (frame copy + centroids on GPU 0; columns: each GPU its band, the slowest),
 *       t_bcast (ncclBroadcast of the slopes; columns: 0), t_mvm (GEMV + update, slowest GPU),
 *       t_gather (ncclSend/ncclRecv of the commands; columns: ncclReduce and the update), t_copy
 *       (commands to the host), and t_sync = median - their sum (what launching and waiting cost);
 *   "rtc_single": sw_rtc on GPU 0 alone, the same frames (the reference, --no-single skips it);
 *   "rtc_multi_model" (one per size, precision and split): the model
 *       t(N) = t_centroid + bytes(C) / N / B + t_bcast(N) + t_gather(N) + t_copy + t_sync(N),
 *       B = bytes(C) / t_mvm(1) (the HBM bandwidth the GEMV reaches), each term measured, the
 *       model's t(N) beside the measured median, and its projection to 8 GPUs: bytes(C) / 8 / B,
 *       t_bcast and t_gather extrapolated linearly in N - 1 from the two largest N measured (the
 *       largest N's when only one), t_sync the largest N's; for the columns t_centroid(8) =
 *       t_centroid(N) N / 8 (each GPU its band) and t_gather is the reduction.
 * Check. A command u_a = g sum_j C_aj s_j (n = 2 ns terms, FP32 sums; the integrator starts at 0)
 * is summed in another order by another split: by columns each GPU sums its band's partial and
 * ncclReduce adds the partials; by rows another cuBLAS kernel may run for fewer rows. Any order
 * of the sum of n products is within gamma_n sum_j |C_aj s_j| of the exact value (gamma_n =
 * n u / (1 - n u), u = 2^-24: Higham N. J. (2002), "Accuracy and Stability of Numerical
 * Algorithms", 2nd ed., SIAM, section 3.1), so two orders differ by at most 2 gamma_n sum_j
 * |C_aj s_j|, about n eps sum_j |C_aj s_j| (FP32 eps 1.19e-7); the FP16 matrix holds the same
 * half entries on both sides and sums in FP32, the same bound on sum |half(C_aj) s_j| (0.1 %
 * more); the columns' slopes come from band plans re-based on each band's first pixel row, which
 * adds sum_j |C_aj| |s_j - s'_j|. Per command a, the first frame's |du_a| must be within
 * 2 (g bound_a + 2^-22 |u_a|) (2^-22: the gain's and the update's roundings; 2: the safety
 * factor), bound_a computed from the matrix and both runs' slopes (sw_rtc_split_bound, the GPU
 * test's bound, src/loop/loop_internal.h). The JSON gives max |du| / max |u| and the largest
 * |du_a| / that bound. (A relative limit on max |du| / max |u| does not follow from the
 * arithmetic: a random matrix's cancelling signs make |u| small against sum |C s|, and 1e-4 of
 * max |u| refused the columns at 6e-4 (80 x 80) and 1.8e-3 (200 x 200) on 2 H200s.)
 * A table on stderr. NCCL_NVLS_ENABLE=0 is set (setenv) before any communicator when unset:
 * NVLink multicast off. A watchdog (--timeout seconds per case, default 120) ends the program with
 * a line naming the case if a run hangs (NCCL documents deadlocks of graphs driven from one
 * thread).
 *
 * Several wavefront sensors (--wfs N): instead of the cases above, N sensors of n x n lenslets each
 * (the same geometry; sensor j's frames are the pool's from frame j on, so no two are alike) feed
 * one mirror of the size's nact commands through one stacked random matrix, nact x 2 N ns
 * (sw_rtc_multi_create_wfs: sensor k centroided on GPU k mod G, each GPU's partial commands
 * summed by ncclReduce on GPU 0), on each G of --gpus up to N (a GPU takes one sensor at least);
 * per size and precision the first of them is the Check's reference. "rtc_multi_wfs" line: the
 * latency of N frames (host, pinned) -> commands (host) around sw_rtc_multi_run_wfs, median and
 * p99, with the stages (sw_rtc_multi_profile_wfs: t_centroid, every GPU's copies and centroids,
 * the slowest GPU's; t_mvm; t_reduce, the reduction and the update; t_copy; t_sync). No model
 * line, no sw_rtc line; a size whose stacked matrix passes the plan's 2^31 entries is skipped
 * with a message (200 x 200 takes one sensor only).
 * Options: --gpus LIST (1,2,4; counts above the visible GPUs are dropped), --sizes LIST (80,200),
 * --precision LIST (fp32,fp16), --split LIST (rows,columns), --frames N (1000), --warmup N (100),
 * --profile-reps N (100), --no-graph (every plan with plain launches: the way out should the one
 * graph over all GPUs hang on some machine),
 * --plain (also N > 1 with plain launches: graph = 0), --no-single, --wfs N (1..16 sensors; the
 * one-frame cases, --split and --no-single do not apply then), --timeout S, --json-only.
 * A failing case is reported on stderr and the others still run; exit 0, 1 when any case failed
 * (or the set-up), 2 on a usage error, 3 on the watchdog.
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"
#include "loop/loop_internal.h" /* sw_rtc_split_bound */

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG         "bench_rtc_multi"
#define PX           8 /* pixels per lenslet side */
#define PIXEL_UM     10.0
#define WFS_WL_UM    0.7
#define NYQ_PX       1.5
#define FLUX_E       5e3
#define READ_E       2.0
#define BIAS_ADU     100.0
#define POOL         4
#define MAX_N        8
#define MAX_WFS      16
#define SPLIT_WFS    2 /* result.split of several sensors' cases */
#define GAIN         0.5
#define SEED_CM      0x200b0003ull
#define SEED_NOISE   0x200b0002ull
#define CHECK_SAFETY 2.0 /* on the rounding bound of the first frame's commands (Check) */
#define RANDOM_NOTE  "random control matrix of the right shape: the latency does not depend on it"

typedef struct opts {
    int gpus[MAX_N], ngpus;
    int sizes[4], nsizes;
    int prec[2], nprec;    /* 0 fp32, 1 fp16 */
    int splits[2], nsplit; /* SW_RTC_MULTI_ROWS, SW_RTC_MULTI_COLUMNS */
    int frames, warmup, profile_reps, plain, single, timeout, json_only;
    int cpu_backend; /* --backend cpu: nothing to measure (GPU chains) */
    int no_graph;    /* every plan with graph = 0 */
    int nwfs;        /* --wfs N: N sensors per case (sw_rtc_multi_create_wfs); 0: one frame */
} opts;

static char watch_what[160];

static void on_alarm(int sig)
{
    (void)sig;
    static const char head[] = PROG ": TIMEOUT (a run hung, or the case is too slow) in ";
    if (write(2, head, sizeof head - 1) < 0 || write(2, watch_what, strlen(watch_what)) < 0 ||
        write(2, "\n", 1) < 0)
        _exit(3);
    _exit(3);
}

static void watch(const opts *o, const char *what)
{
    snprintf(watch_what, sizeof watch_what, "%s", what);
    alarm((unsigned)o->timeout);
}

static int parse_list(const char *s, int *out, int max, int lo, int hi)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end = NULL;
        const long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > hi || n >= max)
            return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

static int parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->gpus[0] = 1, o->gpus[1] = 2, o->gpus[2] = 4, o->ngpus = 3;
    o->sizes[0] = 80, o->sizes[1] = 200, o->nsizes = 2;
    o->prec[0] = 0, o->prec[1] = 1, o->nprec = 2;
    o->splits[0] = SW_RTC_MULTI_ROWS, o->splits[1] = SW_RTC_MULTI_COLUMNS, o->nsplit = 2;
    o->frames = 1000;
    o->warmup = 100;
    o->profile_reps = 100;
    o->single = 1;
    o->timeout = 120;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--plain") == 0) {
            o->plain = 1;
        } else if (strcmp(a, "--no-graph") == 0) {
            o->no_graph = 1;
        } else if (strcmp(a, "--no-single") == 0) {
            o->single = 0;
        } else if (strcmp(a, "--json-only") == 0) {
            o->json_only = 1;
        } else if (strcmp(a, "--backend") == 0 && v &&
                   (strcmp(v, "cpu") == 0 || strcmp(v, "cuda") == 0)) {
            o->cpu_backend = strcmp(v, "cpu") == 0; /* (tools/gpu-check runs both) */
            i++;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf(
                "usage: %s [--gpus 1,2,4] [--sizes 80,200] [--precision fp32,fp16] [--frames "
                "N] [--warmup N] [--profile-reps N] [--split rows,columns] [--plain] [--no-single] "
                "[--no-graph] [--wfs N] [--timeout S] "
                "[--json-only]\n(see the opening comment of bench/bench_rtc_multi.c)\n",
                PROG);
            exit(0);
        } else if (!v) {
            fprintf(stderr, "%s: unknown option or missing value: %s\n", PROG, a);
            return 2;
        } else if (strcmp(a, "--gpus") == 0) {
            if ((o->ngpus = parse_list(v, o->gpus, MAX_N, 1, 16)) < 1)
                return fprintf(stderr, "%s: --gpus %s: counts 1..16\n", PROG, v), 2;
            i++;
        } else if (strcmp(a, "--sizes") == 0) {
            if ((o->nsizes = parse_list(v, o->sizes, 4, 4, 400)) < 1)
                return fprintf(stderr, "%s: --sizes %s: lenslets per side, 4..400\n", PROG, v), 2;
            i++;
        } else if (strcmp(a, "--precision") == 0) {
            o->nprec = 0;
            if (strstr(v, "fp32"))
                o->prec[o->nprec++] = 0;
            if (strstr(v, "fp16"))
                o->prec[o->nprec++] = 1;
            if (o->nprec == 0)
                return fprintf(stderr, "%s: --precision %s: fp32 and / or fp16\n", PROG, v), 2;
            i++;
        } else if (strcmp(a, "--split") == 0) {
            o->nsplit = 0;
            if (strstr(v, "rows"))
                o->splits[o->nsplit++] = SW_RTC_MULTI_ROWS;
            if (strstr(v, "columns"))
                o->splits[o->nsplit++] = SW_RTC_MULTI_COLUMNS;
            if (o->nsplit == 0)
                return fprintf(stderr, "%s: --split %s: rows and / or columns\n", PROG, v), 2;
            i++;
        } else if (strcmp(a, "--wfs") == 0) {
            o->nwfs = atoi(v);
            if (o->nwfs < 1 || o->nwfs > MAX_WFS)
                return fprintf(stderr, "%s: --wfs %s: sensors, 1..%d\n", PROG, v, MAX_WFS), 2;
            i++;
        } else if (strcmp(a, "--frames") == 0 || strcmp(a, "--warmup") == 0 ||
                   strcmp(a, "--profile-reps") == 0 || strcmp(a, "--timeout") == 0) {
            const int n = atoi(v);
            if (n < 1 || n > 1000000)
                return fprintf(stderr, "%s: %s %s: 1..1000000\n", PROG, a, v), 2;
            if (a[2] == 'f')
                o->frames = n;
            else if (a[2] == 'w')
                o->warmup = n;
            else if (a[2] == 'p')
                o->profile_reps = n;
            else
                o->timeout = n;
            i++;
        } else {
            fprintf(stderr, "%s: unknown option %s\n", PROG, a);
            return 2;
        }
    }
    return -1;
}

static int fail(sw_context *ctx, const char *what, sw_status st)
{
    fprintf(stderr, "%s: %s: %s (%s)\n", PROG, what, sw_context_error(ctx), sw_status_string(st));
    return 1;
}

static void json_start(const char *bench, const char *config, sw_context *ctx)
{
    char device[256];
    sw_bench_device_name(ctx, device, sizeof device);
    printf("{\"bench\":");
    sw_json_write_string(stdout, bench);
    printf(",\"config\":");
    sw_json_write_string(stdout, config);
    printf(",\"backend\":\"cuda\",\"device\":");
    sw_json_write_string(stdout, device);
}

static void json_num(const char *name, double v)
{
    if (isfinite(v))
        printf(",\"%s\":%.6g", name, v);
    else
        printf(",\"%s\":null", name);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median and p99 (nearest rank) of n samples, sorted in place */
static void stats(double *t, int n, double *median, double *p99)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    *median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    int k = (int)ceil(0.99 * n) - 1;
    *p99 = t[k < 0 ? 0 : k];
}

/* ---------------------------------------------------------------- the system of one size */

typedef struct sys {
    int32_t n, w, ns, nact;
    uint8_t *mask;
    float *dark;
    sw_image frames[POOL];
    sw_centroid_params centroid;
    float *cm; /* nact x 2 ns */
} sys;

static void sys_free(sys *s)
{
    for (int i = 0; i < POOL; i++)
        sw_image_free(&s->frames[i]);
    free(s->mask);
    free(s->dark);
    free(s->cm);
    memset(s, 0, sizeof *s);
}

/* A random control matrix of count entries, uniform in +-1e-3 (xorshift64* from seed); NULL (and
 * a message) when out of memory. */
static float *random_matrix(size_t count, uint64_t seed)
{
    float *cm = malloc(count * sizeof(float));
    if (!cm) {
        fprintf(stderr, "%s: out of memory (%zu B control matrix)\n", PROG, count * 4);
        return NULL;
    }
    uint64_t x = seed | 1;
    for (size_t i = 0; i < count; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        const uint64_t r = x * 0x2545F4914F6CDD1Dull;
        cm[i] = (float)(((double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0) * 1e-3);
    }
    return cm;
}

/* The system of n x n lenslets; with_cm: with its one sensor's control matrix. */
static int sys_make(sw_context *ctx, int32_t n, sys *s, int with_cm)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->w = n * PX;
    const double lenslet_um = PX * PIXEL_UM;
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = sp.height = s->w;
    sw_sh_geometry_default(&sp.geom);
    sp.geom.x0 = sp.geom.y0 = 0.0;
    sp.geom.pitch_px = PX;
    sp.geom.nx = sp.geom.ny = n;
    sp.geom.pixel_um = PIXEL_UM;
    sp.geom.focal_mm = NYQ_PX * lenslet_um * PIXEL_UM / WFS_WL_UM / 1000.0;
    sp.model = SW_SH_GEOMETRIC;
    sp.wavelength_um = WFS_WL_UM;
    sp.flux_e = FLUX_E;
    sp.pupil = sw_pupil_circle(n * lenslet_um);
    sp.samples = 4; /* a flat wavefront: few samples per lenslet suffice */
    sw_shsim *sim = NULL;
    sw_sh_truth tr;
    memset(&tr, 0, sizeof tr);
    sw_status st = sw_shsim_create(ctx, &sp, &sim);
    if (st == SW_OK)
        st = sw_shsim_truth(sim, &tr);
    if (st != SW_OK) {
        sw_shsim_destroy(sim);
        return fail(ctx, "SH simulator", st);
    }
    s->mask = malloc((size_t)n * n);
    s->dark = malloc((size_t)s->w * s->w * sizeof(float));
    if (!s->mask || !s->dark) {
        sw_sh_truth_free(&tr);
        sw_shsim_destroy(sim);
        return fprintf(stderr, "%s: out of memory\n", PROG), 1;
    }
    for (int64_t l = 0; l < (int64_t)n * n; l++) {
        s->mask[l] = tr.illum[l] >= 0.5;
        s->ns += s->mask[l];
    }
    sw_sh_truth_free(&tr);
    for (int64_t i = 0; i < (int64_t)s->w * s->w; i++)
        s->dark[i] = (float)BIAS_ADU;
    /* the actuators: the Fried corners of the lit lenslets */
    for (int32_t cy = 0; cy <= n; cy++)
        for (int32_t cx = 0; cx <= n; cx++) {
            int lit = 0;
            for (int32_t iy = cy - 1; iy <= cy; iy++)
                for (int32_t ix = cx - 1; ix <= cx; ix++)
                    if (ix >= 0 && iy >= 0 && ix < n && iy < n && s->mask[iy * n + ix])
                        lit = 1;
            s->nact += lit;
        }
    sw_image e = {0};
    st = sw_image_alloc(ctx, s->w, s->w, SW_PIX_F32, &e);
    if (st == SW_OK)
        st = sw_shsim_run(sim, &e, 0);
    sw_detector det;
    sw_detector_default(&det);
    det.shot_noise = 1;
    det.read_noise_e = READ_E;
    det.bias_adu = BIAS_ADU;
    det.gain_e_per_adu = 1.0;
    det.out_type = SW_PIX_U16;
    for (int i = 0; i < POOL && st == SW_OK; i++) {
        det.seed = SEED_NOISE + (uint64_t)(n * POOL + i);
        st = sw_image_alloc(ctx, s->w, s->w, SW_PIX_U16, &s->frames[i]);
        if (st == SW_OK)
            st = sw_detector_apply(ctx, &det, &e, &s->frames[i]);
    }
    sw_image_free(&e);
    sw_shsim_destroy(sim);
    if (st != SW_OK)
        return fail(ctx, "rendering the frames", st);
    sw_centroid_params_default(&s->centroid);
    sw_sh_geometry g = sp.geom;
    g.valid = s->mask;
    s->centroid.geometry = g;
    s->centroid.width = s->centroid.height = s->w;
    s->centroid.type = SW_PIX_U16;
    s->centroid.dark = s->dark;
    s->centroid.threshold_mode = SW_THRESHOLD_SUBTRACT;
    s->centroid.threshold_kind = SW_THRESHOLD_ABSOLUTE;
    s->centroid.threshold = 3.0 * READ_E;
    /* the random control matrix of one sensor (not for several: wfs_matrix) */
    if (with_cm && !(s->cm = random_matrix((size_t)s->nact * 2 * s->ns, SEED_CM)))
        return 1;
    return 0;
}

static void rtc_params(const sys *s, int fp16, sw_rtc_params *rp)
{
    sw_rtc_params_default(rp);
    rp->centroid = s->centroid;
    rp->recon = SW_RTC_MVM;
    rp->nact = s->nact;
    rp->cm = s->cm;
    rp->fp16 = fp16;
    sw_controller_params_default(&rp->controller);
    rp->controller.nact = s->nact;
    rp->controller.gain = GAIN;
}

/* ---------------------------------------------------------------- one case */

typedef struct result {
    int ngpu, graph, split; /* split: SW_RTC_MULTI_ROWS, _COLUMNS or SPLIT_WFS */
    int nwfs;               /* SPLIT_WFS: the sensors */
    double median, p99, t[SW_RTC_MULTI_T_STAGES], sync;
    double check; /* max |du| / max |u| of the first frame against the reference */
    double ratio; /* the largest |du_a| / its rounding bound (Check): at most 1 */
} result;

/* Sensor j's frame of run k among the pool's (several sensors: each a different one). */
static void wfs_frames(const sys *s, int nwfs, int k, const sw_image **fr)
{
    for (int j = 0; j < nwfs; j++)
        fr[j] = &s->frames[(k + j) % POOL];
}

/* The latency of a plan's runs (frames after warm-up), either kind of plan; nwfs > 0: a plan of
 * that many sensors (sw_rtc_multi_run_wfs). */
static int time_runs(const opts *o, sw_rtc *one, sw_rtc_multi *multi, int nwfs, const sys *s,
                     float *commands, double *median, double *p99)
{
    double *t = malloc((size_t)o->frames * sizeof *t);
    if (!t)
        return fprintf(stderr, "%s: out of memory\n", PROG), 1;
    const sw_image *fr[MAX_WFS];
    for (int k = 0; k < o->warmup + o->frames; k++) {
        const sw_image *f = &s->frames[k % POOL];
        wfs_frames(s, nwfs, k, fr);
        const double t0 = sw_bench_now_us();
        const sw_status st = one    ? sw_rtc_run(one, f, commands, NULL)
                             : nwfs ? sw_rtc_multi_run_wfs(multi, fr, commands, NULL)
                                    : sw_rtc_multi_run(multi, f, commands, NULL);
        const double dt = sw_bench_now_us() - t0;
        if (st != SW_OK) {
            free(t);
            return 2; /* the caller reports */
        }
        if (k >= o->warmup)
            t[k - o->warmup] = dt;
    }
    stats(t, o->frames, median, p99);
    free(t);
    return 0;
}

/* The first frame's commands u and slopes sl of a fresh plan against the reference's (ref: nact
 * commands, then n2 slopes; kept there by the first plan, *have_ref): res->check (max |du| /
 * max |u|) and res->ratio (the largest |du_a| over its bound, Check in the opening comment; the
 * bound is computed only where du_a != 0). cm: the nact x n2 control matrix. */
static void first_check(int32_t nact, int32_t n2, const float *cm, int fp16, const float *u,
                        const float *sl, float *ref, int *have_ref, result *res)
{
    if (!*have_ref) {
        memcpy(ref, u, (size_t)nact * sizeof *u);
        memcpy(ref + nact, sl, (size_t)n2 * sizeof *sl);
        *have_ref = 1;
    }
    const float *rs = ref + nact;
    double dmax = 0.0, umax = 0.0, ratio = 0.0;
    for (int32_t a = 0; a < nact; a++) {
        const double d = fabs((double)u[a] - ref[a]);
        dmax = d > dmax || isnan(d) ? d : dmax;
        umax = fabs(ref[a]) > umax ? fabs(ref[a]) : umax;
        if (d == 0.0)
            continue;
        const double b =
            CHECK_SAFETY * (GAIN * sw_rtc_split_bound(cm + (size_t)a * n2, n2, rs, sl, fp16) +
                            0x1.0p-22 * fabs((double)ref[a])) +
            1e-37;
        ratio = d / b > ratio || isnan(d) ? d / b : ratio;
    }
    res->check = umax > 0.0 ? dmax / umax : (dmax == 0.0 ? 0.0 : INFINITY);
    res->ratio = ratio;
}

/* The Check's verdict on a case (0: passed). */
static int check_verdict(const char *config, const result *res)
{
    if (res->ratio <= 1.0)
        return 0;
    fprintf(stderr,
            "%s: %s: a first-frame command differs from the reference's by %.3g of its rounding "
            "bound (max |du| / max |u| = %.3g)\n",
            PROG, config, res->ratio, res->check);
    return 1;
}

static int multi_case(const opts *o, sw_context *ctx, const sys *s, int fp16, int ngpu, int split,
                      int graph, float *ref, int *have_ref, result *res)
{
    char config[128];
    snprintf(config, sizeof config, "%dx%d %s %d GPU%s%s%s", (int)s->n, (int)s->n,
             fp16 ? "fp16" : "fp32", ngpu, ngpu > 1 ? "s" : "",
             split == SW_RTC_MULTI_COLUMNS ? " columns" : "", graph ? "" : " plain");
    watch(o, config);
    if (!o->json_only)
        fprintf(stderr, "%s: %s ...\n", PROG, config);
    sw_rtc_params rp;
    rtc_params(s, fp16, &rp);
    sw_rtc_multi_params mp;
    sw_rtc_multi_params_default(&mp);
    mp.ndevices = ngpu;
    mp.graph = graph;
    mp.split = split;
    sw_rtc_multi *m = NULL;
    const double c0 = sw_bench_now_us();
    sw_status st = sw_rtc_multi_create(ctx, &rp, &mp, &m);
    const double create_s = 1e-6 * (sw_bench_now_us() - c0);
    if (st != SW_OK)
        return fail(ctx, config, st);
    float *u = malloc((size_t)s->nact * sizeof *u);
    float *sl = malloc((size_t)2 * s->ns * sizeof *sl);
    if (!u || !sl) {
        free(u);
        free(sl);
        sw_rtc_multi_destroy(m);
        return fprintf(stderr, "%s: out of memory\n", PROG), 1;
    }
    memset(res, 0, sizeof *res);
    res->ngpu = ngpu;
    res->split = split;
    res->graph = sw_rtc_multi_graph(m);
    st = sw_rtc_multi_run(m, &s->frames[0], u, sl);
    if (st == SW_OK) {
        first_check(s->nact, 2 * s->ns, s->cm, fp16, u, sl, ref, have_ref, res);
        st = sw_rtc_multi_reset(m);
    }
    int rc = st != SW_OK ? fail(ctx, config, st) : 0;
    if (rc == 0)
        rc = check_verdict(config, res);
    if (rc == 0 && time_runs(o, NULL, m, 0, s, u, &res->median, &res->p99) != 0)
        rc = fail(ctx, config, SW_ECUDA);
    if (rc == 0) {
        st = sw_rtc_multi_profile(m, &s->frames[0], o->profile_reps, res->t);
        if (st != SW_OK)
            rc = fail(ctx, config, st);
    }
    sw_rtc_multi_destroy(m);
    free(u);
    free(sl);
    if (rc != 0)
        return rc;
    double sum = 0.0;
    for (int i = 0; i < SW_RTC_MULTI_T_STAGES; i++)
        sum += res->t[i];
    res->sync = res->median - sum;
    const double bytes = (double)s->nact * 2 * s->ns * (fp16 ? 2.0 : 4.0);
    json_start("rtc_multi", config, ctx);
    printf(",\"split\":\"%s\"", split == SW_RTC_MULTI_COLUMNS ? "columns" : "rows");
    printf(",\"gpus\":%d,\"nccl\":%d,\"graph\":%s,\"lenslets\":%d,\"frame_px\":%d,\"slopes\":%d,"
           "\"nact\":%d,\"precision\":\"%s\",\"matrix_bytes\":%.0f,\"frames\":%d,\"warmup\":%d",
           ngpu, sw_nccl_version(), res->graph ? "true" : "false", (int)(s->n * s->n), (int)s->w,
           (int)(2 * s->ns), (int)s->nact, fp16 ? "fp16" : "fp32", bytes, o->frames, o->warmup);
    json_num("median_us", res->median);
    json_num("p99_us", res->p99);
    json_num("first_frame_max_rel_diff", res->check);
    json_num("first_frame_max_du_over_bound", res->ratio);
    json_num("create_s", create_s);
    printf(",\"NCCL_NVLS_ENABLE\":");
    sw_json_write_string(stdout, getenv("NCCL_NVLS_ENABLE"));
    printf(",\"note\":\"%s\"}\n", RANDOM_NOTE);
    json_start("rtc_multi_stages", config, ctx);
    printf(",\"split\":\"%s\",\"gpus\":%d,\"reps\":%d",
           split == SW_RTC_MULTI_COLUMNS ? "columns" : "rows", ngpu, o->profile_reps);
    json_num("t_centroid_us", res->t[SW_RTC_MULTI_T_CENTROID]);
    json_num("t_bcast_us", res->t[SW_RTC_MULTI_T_BCAST]);
    json_num("t_mvm_us", res->t[SW_RTC_MULTI_T_MVM]);
    json_num("t_gather_us", res->t[SW_RTC_MULTI_T_GATHER]);
    json_num("t_copy_us", res->t[SW_RTC_MULTI_T_COPY]);
    json_num("t_sync_us", res->sync);
    json_num("mvm_GB_per_s_per_gpu", res->t[SW_RTC_MULTI_T_MVM] > 0
                                         ? bytes / ngpu / res->t[SW_RTC_MULTI_T_MVM] / 1e3
                                         : NAN);
    printf("}\n");
    fflush(stdout);
    return 0;
}

/* N sensors of the size's system (sensor j's frames the pool's from j on; the same geometry),
 * one mirror (the size's nact), the stacked random matrix cm (nact x 2 N ns) over ngpu GPUs
 * (sw_rtc_multi_create_wfs: sensor k on GPU k mod ngpu). */
static int wfs_case(const opts *o, sw_context *ctx, const sys *s, int fp16, int ngpu, int graph,
                    const float *cm, float *ref, int *have_ref, result *res)
{
    const int nw = o->nwfs;
    char config[128];
    snprintf(config, sizeof config, "%dx%d %s %d WFS %d GPU%s%s", (int)s->n, (int)s->n,
             fp16 ? "fp16" : "fp32", nw, ngpu, ngpu > 1 ? "s" : "", graph ? "" : " plain");
    watch(o, config);
    if (!o->json_only)
        fprintf(stderr, "%s: %s ...\n", PROG, config);
    sw_rtc_params rp;
    rtc_params(s, fp16, &rp);
    rp.cm = cm;
    sw_centroid_params w[MAX_WFS];
    for (int j = 0; j < nw; j++)
        w[j] = s->centroid;
    sw_rtc_multi_params mp;
    sw_rtc_multi_params_default(&mp);
    mp.ndevices = ngpu;
    mp.graph = graph;
    sw_rtc_multi *m = NULL;
    const double c0 = sw_bench_now_us();
    sw_status st = sw_rtc_multi_create_wfs(ctx, &rp, w, nw, &mp, &m);
    const double create_s = 1e-6 * (sw_bench_now_us() - c0);
    if (st != SW_OK)
        return fail(ctx, config, st);
    const int32_t n2 = 2 * nw * s->ns;
    float *u = malloc((size_t)s->nact * sizeof *u);
    float *sl = malloc((size_t)n2 * sizeof *sl);
    if (!u || !sl) {
        free(u);
        free(sl);
        sw_rtc_multi_destroy(m);
        return fprintf(stderr, "%s: out of memory\n", PROG), 1;
    }
    memset(res, 0, sizeof *res);
    res->ngpu = ngpu;
    res->split = SPLIT_WFS;
    res->nwfs = nw;
    res->graph = sw_rtc_multi_graph(m);
    const sw_image *fr[MAX_WFS];
    wfs_frames(s, nw, 0, fr);
    st = sw_rtc_multi_run_wfs(m, fr, u, sl);
    if (st == SW_OK) {
        first_check(s->nact, n2, cm, fp16, u, sl, ref, have_ref, res);
        st = sw_rtc_multi_reset(m);
    }
    int rc = st != SW_OK ? fail(ctx, config, st) : 0;
    if (rc == 0)
        rc = check_verdict(config, res);
    if (rc == 0 && time_runs(o, NULL, m, nw, s, u, &res->median, &res->p99) != 0)
        rc = fail(ctx, config, SW_ECUDA);
    if (rc == 0) {
        st = sw_rtc_multi_profile_wfs(m, fr, o->profile_reps, res->t);
        if (st != SW_OK)
            rc = fail(ctx, config, st);
    }
    sw_rtc_multi_destroy(m);
    free(u);
    free(sl);
    if (rc != 0)
        return rc;
    double sum = 0.0;
    for (int i = 0; i < SW_RTC_MULTI_T_STAGES; i++)
        sum += res->t[i];
    res->sync = res->median - sum;
    const double bytes = (double)s->nact * n2 * (fp16 ? 2.0 : 4.0);
    json_start("rtc_multi_wfs", config, ctx);
    printf(",\"wfs\":%d,\"gpus\":%d,\"nccl\":%d,\"graph\":%s,\"lenslets_per_wfs\":%d,"
           "\"frame_px\":%d,\"slopes\":%d,\"nact\":%d,\"precision\":\"%s\",\"matrix_bytes\":%.0f,"
           "\"frames\":%d,\"warmup\":%d",
           nw, ngpu, sw_nccl_version(), res->graph ? "true" : "false", (int)(s->n * s->n),
           (int)s->w, (int)n2, (int)s->nact, fp16 ? "fp16" : "fp32", bytes, o->frames, o->warmup);
    json_num("median_us", res->median);
    json_num("p99_us", res->p99);
    json_num("first_frame_max_rel_diff", res->check);
    json_num("first_frame_max_du_over_bound", res->ratio);
    json_num("create_s", create_s);
    json_num("t_centroid_us", res->t[SW_RTC_MULTI_T_CENTROID]);
    json_num("t_mvm_us", res->t[SW_RTC_MULTI_T_MVM]);
    json_num("t_reduce_us", res->t[SW_RTC_MULTI_T_GATHER]);
    json_num("t_copy_us", res->t[SW_RTC_MULTI_T_COPY]);
    json_num("t_sync_us", res->sync);
    json_num("mvm_GB_per_s_per_gpu", res->t[SW_RTC_MULTI_T_MVM] > 0
                                         ? bytes / ngpu / res->t[SW_RTC_MULTI_T_MVM] / 1e3
                                         : NAN);
    printf(",\"NCCL_NVLS_ENABLE\":");
    sw_json_write_string(stdout, getenv("NCCL_NVLS_ENABLE"));
    printf(",\"note\":\"%d sensors of the same geometry, their frames different; %s\"}\n", nw,
           RANDOM_NOTE);
    fflush(stdout);
    return 0;
}

static int single_case(const opts *o, sw_context *ctx, const sys *s, int fp16, float *ref,
                       int *have_ref, result *res)
{
    char config[128];
    snprintf(config, sizeof config, "%dx%d %s sw_rtc", (int)s->n, (int)s->n,
             fp16 ? "fp16" : "fp32");
    watch(o, config);
    if (!o->json_only)
        fprintf(stderr, "%s: %s ...\n", PROG, config);
    sw_rtc_params rp;
    rtc_params(s, fp16, &rp);
    sw_rtc *r = NULL;
    sw_status st = sw_rtc_create(ctx, &rp, &r);
    if (st != SW_OK)
        return fail(ctx, config, st);
    float *u = malloc((size_t)s->nact * sizeof *u);
    float *sl = malloc((size_t)2 * s->ns * sizeof *sl);
    if (!u || !sl) {
        free(u);
        free(sl);
        sw_rtc_destroy(r);
        return fprintf(stderr, "%s: out of memory\n", PROG), 1;
    }
    memset(res, 0, sizeof *res);
    res->ngpu = 1;
    res->graph = 1;
    st = sw_rtc_run(r, &s->frames[0], u, sl);
    if (st == SW_OK) {
        first_check(s->nact, 2 * s->ns, s->cm, fp16, u, sl, ref, have_ref, res);
        st = sw_rtc_reset(r);
    }
    int rc = st != SW_OK ? fail(ctx, config, st) : 0;
    if (rc == 0)
        rc = check_verdict(config, res);
    if (rc == 0 && time_runs(o, r, NULL, 0, s, u, &res->median, &res->p99) != 0)
        rc = fail(ctx, config, SW_ECUDA);
    sw_rtc_destroy(r);
    free(u);
    free(sl);
    if (rc != 0)
        return rc;
    json_start("rtc_single", config, ctx);
    printf(",\"gpus\":1,\"slopes\":%d,\"nact\":%d,\"precision\":\"%s\",\"frames\":%d",
           (int)(2 * s->ns), (int)s->nact, fp16 ? "fp16" : "fp32", o->frames);
    json_num("median_us", res->median);
    json_num("p99_us", res->p99);
    json_num("first_frame_max_rel_diff", res->check);
    json_num("first_frame_max_du_over_bound", res->ratio);
    printf(",\"note\":\"%s\"}\n", RANDOM_NOTE);
    fflush(stdout);
    return 0;
}

/* The model of one size, precision and split over the GPU counts measured (graph runs; one: the
 * 1-GPU result, the rows' for the columns too), with its projection to 8 GPUs. */
static void model(sw_context *ctx, const sys *s, int fp16, int split, const result *r, int nr,
                  const result *one, const result *single)
{
    const double bytes = (double)s->nact * 2 * s->ns * (fp16 ? 2.0 : 4.0);
    const int cols = split == SW_RTC_MULTI_COLUMNS;
    const result *big = &r[nr - 1], *prev = nr > 1 ? &r[nr - 2] : NULL;
    /* bandwidth: from 1 GPU's GEMV, else the largest N's */
    const double bw = one && one->t[SW_RTC_MULTI_T_MVM] > 0
                          ? bytes / one->t[SW_RTC_MULTI_T_MVM]
                          : bytes / big->ngpu / big->t[SW_RTC_MULTI_T_MVM]; /* bytes per us */
    char config[64];
    snprintf(config, sizeof config, "%dx%d %s%s", (int)s->n, (int)s->n, fp16 ? "fp16" : "fp32",
             cols ? " columns" : "");
    json_start("rtc_multi_model", config, ctx);
    printf(",\"split\":\"%s\"", cols ? "columns" : "rows");
    if (cols)
        printf(",\"model\":\"t(N) = t_centroid(N) + bytes(C)/N/B + t_reduce(N) + t_copy + "
               "t_sync(N); t_centroid(8) = t_centroid(N) N / 8 (each GPU its band), t_reduce "
               "(ncclReduce and the update) linear in N - 1\"");
    else
        printf(",\"model\":\"t(N) = t_centroid + bytes(C)/N/B + t_bcast(N) + t_gather(N) + "
               "t_copy + t_sync(N); t_bcast, t_gather linear in N - 1\"");
    json_num("matrix_bytes", bytes);
    json_num("B_GB_per_s", bw / 1e3);
    printf(",\"points\":[");
    for (int i = 0; i < nr; i++) {
        const double *t = r[i].t;
        const double mod = t[SW_RTC_MULTI_T_CENTROID] + bytes / r[i].ngpu / bw +
                           t[SW_RTC_MULTI_T_BCAST] + t[SW_RTC_MULTI_T_GATHER] +
                           t[SW_RTC_MULTI_T_COPY] + r[i].sync;
        printf("%s{\"gpus\":%d", i ? "," : "", r[i].ngpu);
        json_num("measured_median_us", r[i].median);
        json_num("model_us", mod);
        json_num("t_centroid_us", t[SW_RTC_MULTI_T_CENTROID]);
        json_num("t_matrix_us", bytes / r[i].ngpu / bw);
        json_num("t_bcast_us", t[SW_RTC_MULTI_T_BCAST]);
        json_num(cols ? "t_reduce_us" : "t_gather_us", t[SW_RTC_MULTI_T_GATHER]);
        json_num("t_copy_us", t[SW_RTC_MULTI_T_COPY]);
        json_num("t_sync_us", r[i].sync);
        json_num("speedup_vs_1", one ? one->median / r[i].median : NAN);
        json_num("efficiency", one ? one->median / r[i].median / r[i].ngpu : NAN);
        printf("}");
    }
    printf("]");
    /* the projection to 8 GPUs */
    double b8 = big->t[SW_RTC_MULTI_T_BCAST], g8 = big->t[SW_RTC_MULTI_T_GATHER];
    if (prev && big->ngpu > prev->ngpu && prev->ngpu > 1) {
        const double dn = (double)(big->ngpu - prev->ngpu), ahead = 8.0 - big->ngpu;
        b8 += ahead * (big->t[SW_RTC_MULTI_T_BCAST] - prev->t[SW_RTC_MULTI_T_BCAST]) / dn;
        g8 += ahead * (big->t[SW_RTC_MULTI_T_GATHER] - prev->t[SW_RTC_MULTI_T_GATHER]) / dn;
    }
    b8 = b8 > 0 ? b8 : 0;
    g8 = g8 > 0 ? g8 : 0;
    const double c8 =
        cols ? big->t[SW_RTC_MULTI_T_CENTROID] * big->ngpu / 8.0 : big->t[SW_RTC_MULTI_T_CENTROID];
    const double p8 = c8 + bytes / 8.0 / bw + b8 + g8 + big->t[SW_RTC_MULTI_T_COPY] + big->sync;
    json_num("projection_8_us", p8);
    json_num("projection_8_centroid_us", c8);
    json_num("projection_8_bcast_us", b8);
    json_num(cols ? "projection_8_reduce_us" : "projection_8_gather_us", g8);
    json_num("projection_8_matrix_us", bytes / 8.0 / bw);
    if (single)
        json_num("sw_rtc_median_us", single->median);
    printf("}\n");
    fflush(stdout);
}

/* --wfs: the cases of one size, every precision and GPU count (at most N: each GPU one sensor
 * at least), into tab / nt (by precision); the first plan of a precision is the reference of the
 * Check. Returns 1 when any case failed. */
static int wfs_size(const opts *o, sw_context *ctx, const sys *s, result tab[2][4 * MAX_N + 1],
                    int nt[2])
{
    const int64_t n2 = (int64_t)2 * o->nwfs * s->ns;
    if ((int64_t)s->nact * n2 > ((int64_t)1 << 31)) {
        fprintf(stderr,
                "%s: %dx%d, %d sensors: the control matrix (%d x %lld) is past the plan's 2^31 "
                "entries: skipped\n",
                PROG, (int)s->n, (int)s->n, o->nwfs, (int)s->nact, (long long)n2);
        return 0; /* the size asked for does not fit: said, not a failure */
    }
    float *cm = random_matrix((size_t)s->nact * (size_t)n2, SEED_CM ^ (uint64_t)o->nwfs);
    float *ref = malloc(((size_t)s->nact + (size_t)n2) * sizeof *ref);
    if (!cm || !ref) {
        free(cm);
        free(ref);
        return 1;
    }
    int failed = 0;
    for (int pi = 0; pi < o->nprec; pi++) {
        const int fp16 = o->prec[pi];
        int have_ref = 0;
        for (int gi = 0; gi < o->ngpus; gi++) {
            const int gn = o->gpus[gi];
            if (gn > o->nwfs) {
                if (!o->json_only)
                    fprintf(stderr,
                            "%s: %d GPUs for %d sensors: skipped (one sensor per GPU at "
                            "least)\n",
                            PROG, gn, o->nwfs);
                continue;
            }
            result x;
            if (wfs_case(o, ctx, s, fp16, gn, !o->no_graph, cm, ref, &have_ref, &x) != 0) {
                failed = 1;
                continue;
            }
            tab[fp16][nt[fp16]++] = x;
            if (o->plain && gn > 1 && !o->no_graph) {
                if (wfs_case(o, ctx, s, fp16, gn, 0, cm, ref, &have_ref, &x) != 0)
                    failed = 1;
                else
                    tab[fp16][nt[fp16]++] = x;
            }
        }
    }
    free(cm);
    free(ref);
    return failed;
}

int main(int argc, char **argv)
{
    opts o;
    const int prc = parse(argc, argv, &o);
    if (prc >= 0)
        return prc;
    if (o.cpu_backend) {
        fprintf(stderr, "%s: GPU chains only: nothing for --backend cpu\n", PROG);
        return 0;
    }
    if (!getenv("NCCL_NVLS_ENABLE"))
        setenv("NCCL_NVLS_ENABLE", "0", 1); /* NVLink multicast off, before any communicator */
    signal(SIGALRM, on_alarm);
    if (sw_nccl_version() == 0) {
        fprintf(stderr, "%s: built without NCCL: configure with SW_WITH_NCCL=ON (NCCL_ROOT)\n",
                PROG);
        return 1;
    }
    const int visible = sw_cuda_device_count();
    int ng = 0;
    for (int i = 0; i < o.ngpus; i++)
        if (o.gpus[i] <= visible)
            o.gpus[ng++] = o.gpus[i];
        else if (!o.json_only)
            fprintf(stderr, "%s: %d GPUs asked for, %d visible: skipped\n", PROG, o.gpus[i],
                    visible);
    o.ngpus = ng;
    if (ng == 0)
        return fprintf(stderr, "%s: no GPU count fits the %d visible GPUs\n", PROG, visible), 1;
    sw_context_params cp;
    sw_context_params_default(&cp);
    cp.backend = SW_BACKEND_CUDA;
    sw_context *ctx = NULL;
    if (sw_context_create(&cp, &ctx) != SW_OK)
        return fprintf(stderr, "%s: no CUDA context: %s\n", PROG, sw_context_error(NULL)), 1;
    if (!o.json_only)
        fprintf(stderr, "%s: NCCL %d, %d GPUs visible, NCCL_NVLS_ENABLE=%s\n", PROG,
                sw_nccl_version(), visible, getenv("NCCL_NVLS_ENABLE"));

    result table[4][2][4 * MAX_N + 1];
    int ntab[4][2];
    result singles[4][2];
    memset(ntab, 0, sizeof ntab);
    memset(singles, 0, sizeof singles);
    int failed = 0; /* a failing case is reported and the others still run */
    for (int si = 0; si < o.nsizes; si++) {
        sys s;
        char what[64];
        snprintf(what, sizeof what, "%dx%d set-up", o.sizes[si], o.sizes[si]);
        watch(&o, what);
        if (sys_make(ctx, o.sizes[si], &s, o.nwfs == 0) != 0) {
            failed = 1;
            sys_free(&s);
            continue;
        }
        if (o.nwfs > 0) { /* several sensors: their cases only */
            failed |= wfs_size(&o, ctx, &s, table[si], ntab[si]);
            sys_free(&s);
            continue;
        }
        /* the reference's first-frame commands, then its slopes (first_check) */
        float *ref = malloc(((size_t)s.nact + 2 * (size_t)s.ns) * sizeof *ref);
        if (!ref) {
            sys_free(&s);
            failed = 1;
            continue;
        }
        for (int pi = 0; pi < o.nprec; pi++) {
            const int fp16 = o.prec[pi];
            int have_ref = 0;
            if (o.single && single_case(&o, ctx, &s, fp16, ref, &have_ref, &singles[si][fp16]))
                failed = 1;
            result one;
            int have_one = 0;
            for (int sp = 0; sp < o.nsplit; sp++) {
                const int split = o.splits[sp];
                result graphs[MAX_N];
                int nr = 0;
                for (int gi = 0; gi < o.ngpus; gi++) {
                    const int gn = o.gpus[gi];
                    if (split == SW_RTC_MULTI_COLUMNS && gn == 1)
                        continue; /* one GPU: the rows' chain */
                    result x;
                    if (multi_case(&o, ctx, &s, fp16, gn, split, !o.no_graph, ref, &have_ref, &x) !=
                        0) {
                        failed = 1;
                        continue;
                    }
                    graphs[nr++] = x;
                    table[si][fp16][ntab[si][fp16]++] = x;
                    if (gn == 1 && split == SW_RTC_MULTI_ROWS) {
                        one = x;
                        have_one = 1;
                    }
                    if (o.plain && gn > 1 && !o.no_graph) {
                        if (multi_case(&o, ctx, &s, fp16, gn, split, 0, ref, &have_ref, &x) != 0)
                            failed = 1;
                        else
                            table[si][fp16][ntab[si][fp16]++] = x;
                    }
                }
                if (nr > 0)
                    model(ctx, &s, fp16, split, graphs, nr, have_one ? &one : NULL,
                          o.single ? &singles[si][fp16] : NULL);
            }
        }
        free(ref);
        sys_free(&s);
    }
    alarm(0);
    if (!o.json_only) {
        fprintf(stderr, "\n%s: latency frame (host, pinned) -> commands (host), us\n", PROG);
        fprintf(stderr, "%-9s %-5s %-7s %4s %5s %9s %9s %8s %8s %8s %8s %8s %8s %8s\n", "size",
                "prec", "split", "gpus", "graph", "median", "p99", "centroid", "bcast", "mvm",
                "gath/red", "copy", "sync", "speedup");
        for (int si = 0; si < o.nsizes; si++)
            for (int pi = 0; pi < o.nprec; pi++) {
                const int fp16 = o.prec[pi];
                const result *sr = &singles[si][fp16];
                if (o.single && sr->median > 0)
                    fprintf(stderr, "%4dx%-4d %-5s %-7s %4s %5s %9.1f %9.1f\n", o.sizes[si],
                            o.sizes[si], fp16 ? "fp16" : "fp32", "sw_rtc", "1", "yes", sr->median,
                            sr->p99);
                double base = 0.0;
                for (int k = 0; k < ntab[si][fp16]; k++) {
                    const result *x = &table[si][fp16][k];
                    if (x->ngpu == 1)
                        base = x->median;
                    char split[16];
                    if (x->split == SPLIT_WFS)
                        snprintf(split, sizeof split, "%d wfs", x->nwfs);
                    else
                        snprintf(split, sizeof split, "%s",
                                 x->split == SW_RTC_MULTI_COLUMNS ? "columns" : "rows");
                    fprintf(stderr,
                            "%4dx%-4d %-5s %-7s %4d %5s %9.1f %9.1f %8.1f %8.1f %8.1f %8.1f %8.1f "
                            "%8.1f %8.2f\n",
                            o.sizes[si], o.sizes[si], fp16 ? "fp16" : "fp32", split, x->ngpu,
                            x->graph ? "yes" : "no", x->median, x->p99,
                            x->t[SW_RTC_MULTI_T_CENTROID], x->t[SW_RTC_MULTI_T_BCAST],
                            x->t[SW_RTC_MULTI_T_MVM], x->t[SW_RTC_MULTI_T_GATHER],
                            x->t[SW_RTC_MULTI_T_COPY], x->sync, base > 0 ? base / x->median : NAN);
                }
            }
    }
    if (failed)
        fprintf(stderr, "%s: FAILED: at least one case failed (see above)\n", PROG);
    sw_context_destroy(ctx);
    return failed ? 1 : 0;
}
