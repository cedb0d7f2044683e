/*
 * The transfer floor of host-to-host GPU runs (harness.h, sw_bench_floor_case): one empty kernel
 * and a stream synchronisation timed by the host clock, and pinned copies of given sizes in each
 * direction timed by CUDA events, all on the context's stream.
 */
extern "C" {
#include "harness.h"
}

#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__global__ void sw_bench_empty_kernel()
{
}

typedef struct floor_job {
    cudaStream_t s;
    void *host, *dev;
    size_t in, out;
    cudaEvent_t e0, e1;
    double *sync, *h2d, *d2h; /* the parts' samples (phase 1), or NULL (phase 2) */
    int n;
} floor_job;

/* The event time of one copy of `bytes` (0 when there is none), microseconds; < 0 on failure. */
static double timed_copy(floor_job *j, size_t bytes, cudaMemcpyKind kind)
{
    if (bytes == 0)
        return 0.0;
    void *dst = kind == cudaMemcpyHostToDevice ? j->dev : j->host;
    const void *src = kind == cudaMemcpyHostToDevice ? j->host : j->dev;
    float ms = 0.0f;
    if (cudaEventRecord(j->e0, j->s) != cudaSuccess ||
        cudaMemcpyAsync(dst, src, bytes, kind, j->s) != cudaSuccess ||
        cudaEventRecord(j->e1, j->s) != cudaSuccess || cudaEventSynchronize(j->e1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, j->e0, j->e1) != cudaSuccess)
        return -1.0;
    return 1e3 * (double)ms;
}

/* One sample of each part; 0 on success. */
static int parts(floor_job *j, double *sync, double *h2d, double *d2h)
{
    const double t0 = sw_bench_now_us();
    sw_bench_empty_kernel<<<1, 1, 0, j->s>>>();
    if (cudaGetLastError() != cudaSuccess || cudaStreamSynchronize(j->s) != cudaSuccess)
        return 1;
    *sync = sw_bench_now_us() - t0;
    *h2d = timed_copy(j, j->in, cudaMemcpyHostToDevice);
    *d2h = timed_copy(j, j->out, cudaMemcpyDeviceToHost);
    return *h2d < 0 || *d2h < 0;
}

static sw_status floor_sample(void *user, int sample, double *measured_us)
{
    (void)sample;
    floor_job *j = (floor_job *)user;
    double a, b, c;
    if (parts(j, &a, &b, &c))
        return SW_ECUDA;
    *measured_us = a + b + c;
    return SW_OK;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

extern "C" int sw_bench_floor_case(const sw_bench_options *o, const char *bench, const char *config,
                                   sw_context *ctx, double in_bytes, double out_bytes,
                                   sw_bench_floor *out)
{
    memset(out, 0, sizeof *out);
    if (sw_context_backend(ctx) != SW_BACKEND_CUDA)
        return 1;
    floor_job j;
    memset(&j, 0, sizeof j);
    j.s = (cudaStream_t)sw_context_stream(ctx);
    j.in = (size_t)in_bytes;
    j.out = (size_t)out_bytes;
    const size_t big = (j.in > j.out ? j.in : j.out) + 1;
    const int n = o->reps > 0 ? o->reps : 1;
    double *v = (double *)malloc(3 * (size_t)n * sizeof(double));
    int rc = 1;
    if (!v || cudaHostAlloc(&j.host, big, cudaHostAllocDefault) != cudaSuccess ||
        cudaMalloc(&j.dev, big) != cudaSuccess || cudaEventCreate(&j.e0) != cudaSuccess ||
        cudaEventCreate(&j.e1) != cudaSuccess) {
        fprintf(stderr, "bench %s %s: cannot set up the floor measurement: %s\n", bench,
                config ? config : "", cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    memset(j.host, 0x5a, big);
    /* phase 1: the parts' medians */
    for (int i = 0; i < o->warmup + n; i++) {
        double a, b, c;
        if (parts(&j, &a, &b, &c)) {
            fprintf(stderr, "bench %s %s: the floor measurement failed: %s\n", bench,
                    config ? config : "", cudaGetErrorString(cudaGetLastError()));
            goto done;
        }
        if (i >= o->warmup) {
            v[i - o->warmup] = a;
            v[n + i - o->warmup] = b;
            v[2 * n + i - o->warmup] = c;
        }
    }
    out->sync_us = median(v, n);
    out->h2d_us = median(v + n, n);
    out->d2h_us = median(v + 2 * n, n);
    out->h2d_gbps = out->h2d_us > 0 ? in_bytes / out->h2d_us * 1e-3 : 0.0;
    out->d2h_gbps = out->d2h_us > 0 ? out_bytes / out->d2h_us * 1e-3 : 0.0;
    {
        /* phase 2: the floor as a case of its own (median and p99 of the sums) */
        char extra[320];
        snprintf(extra, sizeof extra,
                 ",\"sync_us\":%.4g,\"h2d_us\":%.4g,\"d2h_us\":%.4g,\"h2d_bytes\":%.0f,"
                 "\"d2h_bytes\":%.0f,\"h2d_GBps\":%.4g,\"d2h_GBps\":%.4g",
                 out->sync_us, out->h2d_us, out->d2h_us, in_bytes, out_bytes, out->h2d_gbps,
                 out->d2h_gbps);
        sw_bench_case c;
        memset(&c, 0, sizeof c);
        c.bench = bench;
        c.config = config;
        c.ctx = ctx;
        c.fn = floor_sample;
        c.user = &j;
        c.bytes = in_bytes + out_bytes;
        sw_bench_result r;
        if (sw_bench_run_floor(o, &c, 0.0, extra, &r) != SW_OK)
            goto done;
        out->floor_us = r.median_us;
        out->p99_us = r.p99_us;
    }
    rc = 0;
done:
    if (j.e0)
        cudaEventDestroy(j.e0);
    if (j.e1)
        cudaEventDestroy(j.e1);
    cudaFree(j.dev);
    cudaFreeHost(j.host);
    free(v);
    if (rc)
        memset(out, 0, sizeof *out);
    return rc;
}
