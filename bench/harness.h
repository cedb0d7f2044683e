/*
 * spotwave benchmark harness: warm-up, repetitions, robust statistics, one JSON line per case.
 *
 * A benchmark program (bench/bench_<name>.c) parses the common options with
 * sw_bench_parse_args(), creates a context with sw_bench_context(), and calls sw_bench_run() once
 * per case (one operation on one configuration). For each case the harness
 *   1. calls the case's function `warmup` times (not measured);
 *   2. calls it `reps` times, or fewer when the measured time passes `budget_s` (at least
 *      SW_BENCH_MIN_REPS samples), timing each call;
 *   3. prints one JSON line on stdout:
 *        {"bench":"image_convert","config":"u16->f32 2048x2048","backend":"cpu",
 *         "device":"AMD EPYC","threads":2,"median_us":..,"p99_us":..,"min_us":..,"mean_us":..,
 *         "max_us":..,"reps":50,"warmup":3,"throughput":..,"throughput_unit":"GB/s"}
 *      median: the middle sample (mean of the two middle ones for an even count);
 *      p99: nearest rank, the ceil(0.99 n)-th smallest sample (the maximum when n < 100);
 *      throughput: the case's work per call divided by the median time.
 * sw_bench_finish() then prints a human-readable table of all cases on stderr (unless
 * --json-only), so that stdout holds JSON lines only and can be piped to jq or a file.
 *
 * Timing of one sample: the function may measure itself (e.g. with CUDA events in a .cu file)
 * and store microseconds in *measured_us; when it leaves *measured_us negative, the harness
 * uses a monotonic host clock around the call followed by sw_context_synchronize(ctx), so queued
 * GPU work is included. The function gets the sample index (warm-ups count from 0 too) to rotate
 * among several input buffers, so that caches do not flatter the numbers.
 *
 * Common options of every benchmark program:
 *   --backend auto|cpu|cuda   (default auto)      --threads N   CPU threads (0: all cores)
 *   --reps N     measured repetitions (default 50; --quick: 5)
 *   --warmup N   warm-up calls (default 3; --quick: 1)
 *   --budget S   stop measuring a case after S seconds (default 20; --quick: 2)
 *   --quick      small sizes and few repetitions (CI smoke runs)
 *   --json-only  JSON lines on stdout and nothing else (no table, no progress on stderr)
 *   -h, --help
 * Exit codes as the spotwave command: 0, 1 failure while running, 2 usage error.
 */
#ifndef SW_BENCH_HARNESS_H
#define SW_BENCH_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "spotwave/spotwave.h"

#define SW_BENCH_MIN_REPS 3
#define SW_BENCH_MAX_REPS 100000

typedef struct sw_bench_options {
    sw_backend backend;
    int threads;
    int reps;
    int warmup;
    double budget_s;
    int quick;
    int json_only;
} sw_bench_options;

/*
 * Parses the common options (above). `extra_help` (may be NULL) is printed after them in --help.
 * Returns SW_BENCH_CONTINUE to go on, or an exit code for main to return: 0 after --help, 2 on a
 * usage error (a line on stderr). Positional arguments are refused.
 */
#define SW_BENCH_CONTINUE (-1)
int sw_bench_parse_args(int argc, char **argv, const char *prog, const char *extra_help,
                        sw_bench_options *o);

/* Creates the context the options ask for (no log output except warnings and errors, unless
 * --json-only which silences them too). 0 on success; 1 with a line on stderr otherwise. */
int sw_bench_context(const sw_bench_options *o, const char *prog, sw_context **out);

/* sw_bench_context on the CPU backend with o's other options: the CPU side of a program that
 * compares backends. 0 on success; 1 with a line on stderr otherwise. */
int sw_bench_cpu_context(const sw_bench_options *o, const char *prog, sw_context **out);

/* The contexts of a program that compares a GPU with the CPU: the one the options ask for goes
 * to *gpu when it is a CUDA context, with a CPU context in *cpu when want_cpu (else NULL); to
 * *cpu when it is a CPU one, with *gpu NULL. The main context is *gpu when not NULL, else *cpu;
 * both are distinct and the caller destroys both. 0 on success; 1 with a line on stderr (and no
 * context left) otherwise. */
int sw_bench_contexts(const sw_bench_options *o, const char *prog, int want_cpu, sw_context **gpu,
                      sw_context **cpu);

/*
 * One repetition of the benchmarked operation. `sample` counts calls from 0 (warm-ups
 * included). Store microseconds in *measured_us when the function timed itself; leave it < 0
 * to be timed by the harness. A status other than SW_OK stops the case.
 */
typedef sw_status (*sw_bench_fn)(void *user, int sample, double *measured_us);

typedef struct sw_bench_case {
    const char *bench;  /* benchmark name, e.g. "image_convert"               */
    const char *config; /* configuration, e.g. "u16->f32 2048x2048"           */
    sw_context *ctx;    /* the context (backend, device, synchronisation)     */
    sw_bench_fn fn;
    void *user;
    /* Work per call, for the throughput (first non-zero wins):
     *   bytes > 0: bytes read + written per call -> "GB/s" (10^9 bytes per second);
     *   items > 0: items per call -> "<item_unit>/s" (e.g. "Mpixel/s" with items in Mpixel). */
    double bytes;
    double items;
    const char *item_unit;
} sw_bench_case;

typedef struct sw_bench_result {
    double median_us, p99_us, min_us, mean_us, max_us;
    int reps;
    double throughput; /* 0 when the case gave no work */
    char throughput_unit[32];
} sw_bench_result;

/*
 * Runs one case with the options' warm-up / reps / budget, prints its JSON line and records it
 * for the table. result may be NULL. On failure prints "<prog>: <bench> <config>: <message>" on
 * stderr and returns the status (nothing is recorded).
 */
sw_status sw_bench_run(const sw_bench_options *o, const sw_bench_case *c, sw_bench_result *result);

/* sw_bench_run with a floor: floor_us > 0 is the case's floor in microseconds
 * (sw_bench_floor_case below): the JSON line adds "floor_us", "ratio" (median / floor) and
 * "ratio_p99" (p99 / floor), the table likewise. extra_json (may be NULL): members appended to
 * the JSON line as given (",\"key\":value,..."). */
sw_status sw_bench_run_floor(const sw_bench_options *o, const sw_bench_case *c, double floor_us,
                             const char *extra_json, sw_bench_result *result);

/* Prints the table of all recorded cases on stderr (unless --json-only) and forgets them. */
void sw_bench_finish(const sw_bench_options *o);

/* Statistics of n samples (sorted in place): exposed for the harness' own checks. */
void sw_bench_stats(double *samples, int n, sw_bench_result *out);

/* The device a context computes on: the GPU's name, or the CPU model from /proc/cpuinfo. */
const char *sw_bench_device_name(sw_context *ctx, char *buf, size_t size);

/*
 * The transfer floor of a host-to-host GPU operation that moves in_bytes from pinned host memory
 * to the device and out_bytes back (issue 25):
 *     floor = sync + h2d(in_bytes) + d2h(out_bytes)
 * sync: host clock around one empty kernel launch and cudaStreamSynchronize on the context's
 *       stream (the one synchronisation every host-to-host run pays);
 * h2d, d2h: CUDA-event time of one cudaMemcpyAsync of exactly that many bytes between pinned
 *       host memory and device memory on the same stream (the measured pinned bandwidth at that
 *       size, DMA start included), each direction on its own.
 * sw_bench_floor_case measures the three parts `reps` times (after `warmup`) to get their
 * medians, then runs a case named `bench` whose samples are sync + h2d + d2h measured back to
 * back (its JSON line: the floor's median and p99, plus "sync_us", "h2d_us", "d2h_us",
 * "h2d_GBps", "d2h_GBps" from the part medians). out->floor_us is that case's median: the
 * figure the cases compare against (sw_bench_case.floor_us). Returns 0 on success; 1 on a CPU
 * context, a build without CUDA, or a CUDA failure (a line on stderr; *out zeroed).
 */
typedef struct sw_bench_floor {
    double sync_us, h2d_us, d2h_us; /* medians of the parts */
    double floor_us, p99_us;        /* the floor case's median and p99 */
    double h2d_gbps, d2h_gbps;      /* in_bytes / h2d_us, out_bytes / d2h_us (0 for 0 bytes) */
} sw_bench_floor;

int sw_bench_floor_case(const sw_bench_options *o, const char *bench, const char *config,
                        sw_context *ctx, double in_bytes, double out_bytes, sw_bench_floor *out);

/* Monotonic clock in microseconds. */
double sw_bench_now_us(void);

#endif /* SW_BENCH_HARNESS_H */
