/*
 * spotwave benchmark harness (see harness.h for the contract and the output format).
 */
#define _GNU_SOURCE /* getopt_long, clock_gettime */

#include "harness.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ clock and statistics */

double sw_bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void sw_bench_stats(double *samples, int n, sw_bench_result *out)
{
    memset(out, 0, sizeof *out);
    if (n <= 0)
        return;
    qsort(samples, (size_t)n, sizeof *samples, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += samples[i];
    out->reps = n;
    out->min_us = samples[0];
    out->max_us = samples[n - 1];
    out->mean_us = sum / n;
    out->median_us = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
    /* p99, nearest rank: the smallest sample with at least 99 % of the samples <= it. */
    int rank = (int)ceil(0.99 * n);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    out->p99_us = samples[rank - 1];
}

/* ------------------------------------------------------------------ device name and JSON */

const char *sw_bench_device_name(sw_context *ctx, char *buf, size_t size)
{
    if (ctx && sw_context_backend(ctx) == SW_BACKEND_CUDA) {
        sw_device_info d;
        if (sw_context_device_info(ctx, &d) == SW_OK) {
            snprintf(buf, size, "%s", d.name);
            return buf;
        }
        snprintf(buf, size, "unknown CUDA device");
        return buf;
    }
    return sw_cpu_name(buf, size);
}

/* A finite number for JSON (NaN/Inf are not JSON). */
static void json_number(FILE *out, double v)
{
    if (isfinite(v))
        fprintf(out, "%.6g", v);
    else
        fputs("null", out);
}

/* ------------------------------------------------------------------ options and context */

static void print_help(FILE *out, const char *prog, const char *extra_help)
{
    fprintf(out,
            "Usage: %s [OPTIONS]\n"
            "\n"
            "Prints one JSON line per case on stdout and a table on stderr.\n"
            "\n"
            "Options:\n"
            "  --backend auto|cpu|cuda  where to compute (default auto)\n"
            "  --threads N              CPU threads (default 0: all cores)\n"
            "  --reps N                 measured repetitions per case (default 50; quick: 5)\n"
            "  --warmup N               warm-up calls per case (default 3; quick: 1)\n"
            "  --budget S               stop measuring a case after S seconds (default 20;\n"
            "                           quick: 2), keeping at least %d samples\n"
            "  --quick                  small sizes, few repetitions (CI smoke runs)\n"
            "  --json-only              JSON lines only: no table, no log on stderr\n"
            "  -h, --help               print this help and exit\n",
            prog, SW_BENCH_MIN_REPS);
    if (extra_help)
        fprintf(out, "\n%s", extra_help);
}

static int parse_int(const char *text, long min, long max, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

static int usage(const char *prog, const char *what, const char *value)
{
    fprintf(stderr, "%s: %s '%s' (see '%s --help')\n", prog, what, value ? value : "", prog);
    return 2;
}

int sw_bench_parse_args(int argc, char **argv, const char *prog, const char *extra_help,
                        sw_bench_options *o)
{
    enum {
        OPT_BACKEND = 256,
        OPT_THREADS,
        OPT_REPS,
        OPT_WARMUP,
        OPT_BUDGET,
        OPT_QUICK,
        OPT_JSON_ONLY
    };
    static const struct option longopts[] = {
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"reps", required_argument, NULL, OPT_REPS},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"budget", required_argument, NULL, OPT_BUDGET},
        {"quick", no_argument, NULL, OPT_QUICK},
        {"json-only", no_argument, NULL, OPT_JSON_ONLY},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int reps = -1, warmup = -1;
    double budget = -1;
    memset(o, 0, sizeof *o);
    o->backend = SW_BACKEND_AUTO;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_BACKEND:
            if (sw_backend_parse(optarg, &o->backend) != SW_OK)
                return usage(prog, "--backend: not one of auto, cpu, cuda:", optarg);
            break;
        case OPT_THREADS:
            if (parse_int(optarg, 0, 4096, &o->threads))
                return usage(prog, "--threads: not a whole number in 0..4096:", optarg);
            break;
        case OPT_REPS:
            if (parse_int(optarg, SW_BENCH_MIN_REPS, SW_BENCH_MAX_REPS, &reps))
                return usage(prog, "--reps: not a whole number in 3..100000:", optarg);
            break;
        case OPT_WARMUP:
            if (parse_int(optarg, 0, SW_BENCH_MAX_REPS, &warmup))
                return usage(prog, "--warmup: not a whole number in 0..100000:", optarg);
            break;
        case OPT_BUDGET: {
            char *end = NULL;
            errno = 0;
            budget = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(budget > 0) || !isfinite(budget))
                return usage(prog, "--budget: not a positive number of seconds:", optarg);
            break;
        }
        case OPT_QUICK: o->quick = 1; break;
        case OPT_JSON_ONLY: o->json_only = 1; break;
        case 'h': print_help(stdout, prog, extra_help); return 0;
        case ':': return usage(prog, "option needs a value:", argv[optind - 1]);
        default: return usage(prog, "unknown option", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage(prog, "unexpected argument", argv[optind]);
    o->reps = reps > 0 ? reps : (o->quick ? 5 : 50);
    o->warmup = warmup >= 0 ? warmup : (o->quick ? 1 : 3);
    o->budget_s = budget > 0 ? budget : (o->quick ? 2.0 : 20.0);
    return SW_BENCH_CONTINUE;
}

static void log_to_stderr(sw_log_level level, const char *message, void *user)
{
    fprintf(stderr, "%s: %s: %s\n", (const char *)user, sw_log_level_string(level), message);
}

int sw_bench_context(const sw_bench_options *o, const char *prog, sw_context **out)
{
    sw_context_params p;
    sw_context_params_default(&p);
    p.backend = o->backend;
    p.threads = o->threads;
    p.log = o->json_only ? NULL : log_to_stderr;
    p.log_user = (void *)prog;
    p.log_level = SW_LOG_WARN;
    *out = NULL;
    sw_status st = sw_context_create(&p, out);
    if (st != SW_OK) {
        const char *m = sw_context_error(NULL);
        fprintf(stderr, "%s: cannot use the %s backend: %s\n", prog, sw_backend_string(o->backend),
                (m && *m) ? m : sw_status_string(st));
        *out = NULL;
        return 1;
    }
    return 0;
}

int sw_bench_cpu_context(const sw_bench_options *o, const char *prog, sw_context **out)
{
    sw_bench_options c = *o;
    c.backend = SW_BACKEND_CPU;
    return sw_bench_context(&c, prog, out);
}

int sw_bench_contexts(const sw_bench_options *o, const char *prog, int want_cpu, sw_context **gpu,
                      sw_context **cpu)
{
    sw_context *ctx = NULL;
    *gpu = *cpu = NULL;
    if (sw_bench_context(o, prog, &ctx) != 0)
        return 1;
    if (sw_context_backend(ctx) != SW_BACKEND_CUDA) {
        *cpu = ctx;
        return 0;
    }
    if (want_cpu && sw_bench_cpu_context(o, prog, cpu) != 0) {
        sw_context_destroy(ctx);
        return 1;
    }
    *gpu = ctx;
    return 0;
}

/* ------------------------------------------------------------------ running a case */

typedef struct bench_record {
    char bench[64];
    char config[96];
    char backend[8];
    char device[256];
    int threads;
    sw_bench_result r;
    double floor_us; /* 0: none */
} bench_record;

static bench_record *records;
static int n_records, cap_records;

static void record_result(const sw_bench_case *c, const char *device, const sw_bench_result *r,
                          double floor_us)
{
    if (n_records == cap_records) {
        int cap = cap_records ? 2 * cap_records : 16;
        bench_record *p = realloc(records, (size_t)cap * sizeof *p);
        if (!p)
            return; /* the JSON line is already out; the table just misses this row */
        records = p;
        cap_records = cap;
    }
    bench_record *e = &records[n_records++];
    snprintf(e->bench, sizeof e->bench, "%s", c->bench);
    snprintf(e->config, sizeof e->config, "%s", c->config ? c->config : "");
    snprintf(e->backend, sizeof e->backend, "%s", sw_backend_string(sw_context_backend(c->ctx)));
    snprintf(e->device, sizeof e->device, "%s", device);
    e->threads = sw_context_threads(c->ctx);
    e->r = *r;
    e->floor_us = floor_us;
}

static sw_status case_fail(const sw_bench_case *c, sw_status st)
{
    const char *m = c->ctx ? sw_context_error(c->ctx) : "";
    fprintf(stderr, "bench %s %s: %s\n", c->bench ? c->bench : "?", c->config ? c->config : "",
            (m && *m) ? m : sw_status_string(st));
    return st;
}

/* One call, timed: the function's own measurement, or the host clock around call + sync. */
static sw_status one_sample(const sw_bench_case *c, int sample, double *us)
{
    double measured = -1.0;
    double t0 = sw_bench_now_us();
    sw_status st = c->fn(c->user, sample, &measured);
    if (st == SW_OK)
        st = sw_context_synchronize(c->ctx);
    double t1 = sw_bench_now_us();
    *us = measured >= 0 ? measured : t1 - t0;
    return st;
}

sw_status sw_bench_run(const sw_bench_options *o, const sw_bench_case *c, sw_bench_result *result)
{
    return sw_bench_run_floor(o, c, 0.0, NULL, result);
}

sw_status sw_bench_run_floor(const sw_bench_options *o, const sw_bench_case *c, double floor_us,
                             const char *extra_json, sw_bench_result *result)
{
    if (!c) {
        fprintf(stderr, "bench: no case given\n");
        return SW_EINVAL;
    }
    if (!c->fn || !c->ctx || !c->bench || o->reps < 1)
        return case_fail(c, SW_EINVAL);
    double *samples = malloc((size_t)o->reps * sizeof *samples);
    if (!samples)
        return case_fail(c, SW_ENOMEM);

    sw_status st = SW_OK;
    double us;
    int sample = 0;
    for (int i = 0; i < o->warmup; i++, sample++) {
        st = one_sample(c, sample, &us);
        if (st != SW_OK) {
            free(samples);
            return case_fail(c, st);
        }
    }
    int n = 0;
    double start = sw_bench_now_us();
    while (n < o->reps) {
        st = one_sample(c, sample++, &samples[n]);
        if (st != SW_OK) {
            free(samples);
            return case_fail(c, st);
        }
        n++;
        if (n >= SW_BENCH_MIN_REPS && sw_bench_now_us() - start > 1e6 * o->budget_s)
            break;
    }

    sw_bench_result r;
    sw_bench_stats(samples, n, &r);
    free(samples);
    double seconds = r.median_us * 1e-6;
    if (c->bytes > 0 && seconds > 0) {
        r.throughput = c->bytes / seconds / 1e9;
        snprintf(r.throughput_unit, sizeof r.throughput_unit, "GB/s");
    } else if (c->items > 0 && seconds > 0) {
        r.throughput = c->items / seconds;
        snprintf(r.throughput_unit, sizeof r.throughput_unit, "%s/s",
                 c->item_unit ? c->item_unit : "items");
    }

    char device[256];
    sw_bench_device_name(c->ctx, device, sizeof device);
    printf("{\"bench\":");
    sw_json_write_string(stdout, c->bench ? c->bench : "");
    printf(",\"config\":");
    sw_json_write_string(stdout, c->config ? c->config : "");
    printf(",\"backend\":");
    sw_json_write_string(stdout, sw_backend_string(sw_context_backend(c->ctx)));
    printf(",\"device\":");
    sw_json_write_string(stdout, device);
    printf(",\"threads\":%d,\"median_us\":", sw_context_threads(c->ctx));
    json_number(stdout, r.median_us);
    printf(",\"p99_us\":");
    json_number(stdout, r.p99_us);
    printf(",\"min_us\":");
    json_number(stdout, r.min_us);
    printf(",\"mean_us\":");
    json_number(stdout, r.mean_us);
    printf(",\"max_us\":");
    json_number(stdout, r.max_us);
    printf(",\"reps\":%d,\"warmup\":%d,\"throughput\":", r.reps, o->warmup);
    if (r.throughput_unit[0]) {
        json_number(stdout, r.throughput);
        printf(",\"throughput_unit\":");
        sw_json_write_string(stdout, r.throughput_unit);
    } else {
        printf("null,\"throughput_unit\":null");
    }
    if (floor_us > 0) {
        printf(",\"floor_us\":");
        json_number(stdout, floor_us);
        printf(",\"ratio\":");
        json_number(stdout, r.median_us / floor_us);
        printf(",\"ratio_p99\":");
        json_number(stdout, r.p99_us / floor_us);
    }
    if (extra_json)
        fputs(extra_json, stdout);
    printf("}\n");
    fflush(stdout);

    record_result(c, device, &r, floor_us);
    if (result)
        *result = r;
    return SW_OK;
}

#ifndef SW_HAVE_CUDA
int sw_bench_floor_case(const sw_bench_options *o, const char *bench, const char *config,
                        sw_context *ctx, double in_bytes, double out_bytes, sw_bench_floor *out)
{
    (void)o;
    (void)bench;
    (void)config;
    (void)ctx;
    (void)in_bytes;
    (void)out_bytes;
    memset(out, 0, sizeof *out);
    return 1; /* no GPU: no transfer floor (floor_cuda.cu in CUDA builds) */
}
#endif

void sw_bench_finish(const sw_bench_options *o)
{
    if (!o->json_only && n_records > 0) {
        const char *last_device = "";
        fprintf(stderr, "\n");
        for (int i = 0; i < n_records; i++) {
            const bench_record *e = &records[i];
            if (strcmp(e->device, last_device) != 0) {
                fprintf(stderr, "# device: %s (%s backend, %d CPU threads)\n", e->device,
                        e->backend, e->threads);
                fprintf(stderr, "%-16s %-26s %-5s %11s %11s %11s %6s %12s\n", "bench", "config",
                        "back", "median_us", "p99_us", "min_us", "reps", "throughput");
                last_device = e->device;
            }
            fprintf(stderr, "%-16s %-26s %-5s %11.1f %11.1f %11.1f %6d %7.2f %s", e->bench,
                    e->config, e->backend, e->r.median_us, e->r.p99_us, e->r.min_us, e->r.reps,
                    e->r.throughput, e->r.throughput_unit);
            if (e->floor_us > 0)
                fprintf(stderr, "   floor %.1f us, ratio %.2f (p99 %.2f)", e->floor_us,
                        e->r.median_us / e->floor_us, e->r.p99_us / e->floor_us);
            fprintf(stderr, "\n");
        }
    }
    free(records);
    records = NULL;
    n_records = cap_records = 0;
}
