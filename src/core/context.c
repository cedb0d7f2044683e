/*
 * The context: backend choice (AUTO/CPU/CUDA), device, stream, threads and log callback.
 */
#include "core/core_internal.h"

#include <pthread.h>
#ifdef SW_HAVE_CUDA
#include "core/core_cuda.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef SW_HAVE_OPENMP
#include <omp.h>
#endif

void sw_context_params_default(sw_context_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->backend = SW_BACKEND_AUTO;
    p->device = 0;
    p->threads = 0;
    p->log = NULL;
    p->log_user = NULL;
    p->log_level = SW_LOG_INFO;
}

static int default_threads(void)
{
#ifdef SW_HAVE_OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

sw_status sw_context_create(const sw_context_params *params, sw_context **out)
{
    if (!out)
        return sw_fail(NULL, SW_EINVAL, "sw_context_create: out is NULL");
    *out = NULL;
    sw_context_params p;
    if (params)
        p = *params;
    else
        sw_context_params_default(&p);
    if (p.backend != SW_BACKEND_AUTO && p.backend != SW_BACKEND_CPU && p.backend != SW_BACKEND_CUDA)
        return sw_fail(NULL, SW_EINVAL, "unknown backend code %d", (int)p.backend);
    if (p.threads < 0 || p.threads > 4096)
        return sw_fail(NULL, SW_EINVAL, "threads = %d: expected 0 (all cores) to 4096", p.threads);
    if (p.device < 0)
        return sw_fail(NULL, SW_EINVAL, "device = %d: expected a CUDA device ordinal >= 0",
                       p.device);

    sw_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return sw_fail(NULL, SW_ENOMEM, "out of memory creating the context");
    ctx->device = p.device;
    ctx->threads = p.threads > 0 ? p.threads : default_threads();
    ctx->log = p.log;
    ctx->log_user = p.log_user;
    ctx->log_level = p.log_level;
    ctx->backend = SW_BACKEND_CPU;
    ctx->memory_limit = sw_memory_limit_default();
    const char *env = sw_memory_env_invalid();
    if (env)
        sw_log(ctx, SW_LOG_WARN,
               "SPOTWAVE_MAX_MEMORY='%.64s' is not a size (512M, 8G, bytes, unlimited): ignored",
               env);

    if (p.backend == SW_BACKEND_CPU) {
        snprintf(ctx->reason, sizeof ctx->reason, "CPU backend requested (%d threads)",
                 ctx->threads);
    } else {
#ifdef SW_HAVE_CUDA
        sw_status st = sw_cuda_context_init(ctx);
        if (st == SW_OK) {
            ctx->backend = SW_BACKEND_CUDA;
            ctx->error[0] = '\0';
        } else if (p.backend == SW_BACKEND_CUDA) {
            sw_fail(NULL, st, "CUDA backend requested but not usable: %s", ctx->error);
            free(ctx);
            return st;
        } else {
            snprintf(ctx->reason, sizeof ctx->reason, "%.200s: CPU backend used (%d threads)",
                     ctx->error, ctx->threads);
            ctx->error[0] = '\0';
        }
#else
        if (p.backend == SW_BACKEND_CUDA) {
            free(ctx);
            return sw_fail(NULL, SW_ENODEV,
                           "CUDA backend requested but this spotwave was built without CUDA "
                           "(no nvcc at configure time)");
        }
        snprintf(ctx->reason, sizeof ctx->reason,
                 "built without CUDA: CPU backend used (%d threads)", ctx->threads);
#endif
    }
    sw_log(ctx, SW_LOG_INFO, "backend %s: %s", sw_backend_string(ctx->backend), ctx->reason);
    *out = ctx;
    return SW_OK;
}

void sw_context_destroy(sw_context *ctx)
{
    if (!ctx)
        return;
#ifdef SW_HAVE_CUDA
    if (ctx->backend == SW_BACKEND_CUDA)
        sw_cuda_context_release(ctx);
#endif
    free(ctx);
}

sw_backend sw_context_backend(const sw_context *ctx)
{
    return ctx ? ctx->backend : SW_BACKEND_CPU;
}

const char *sw_context_backend_reason(const sw_context *ctx)
{
    return ctx ? ctx->reason : "no context: CPU";
}

int sw_context_threads(const sw_context *ctx)
{
    return ctx ? ctx->threads : default_threads();
}

/* Reads the first of a few known keys from /proc/cpuinfo (x86: "model name"; Arm: "Model"...). */
const char *sw_cpu_name(char *buf, size_t size)
{
    static const char *const keys[] = {"model name", "Model", "cpu model", "Hardware"};
    snprintf(buf, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return buf;
    char line[512];
    int found = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0] && !found; k++) {
        rewind(f);
        while (fgets(line, sizeof line, f)) {
            size_t klen = strlen(keys[k]);
            if (strncmp(line, keys[k], klen) != 0)
                continue;
            const char *q = line + klen;
            while (*q == ' ' || *q == '\t')
                q++;
            if (*q != ':')
                continue;
            q++;
            while (*q == ' ' || *q == '\t')
                q++;
            snprintf(buf, size, "%s", q);
            buf[strcspn(buf, "\r\n")] = '\0';
            found = buf[0] != '\0';
            break;
        }
    }
    fclose(f);
    if (!found)
        snprintf(buf, size, "unknown CPU");
    return buf;
}

int sw_cuda_device_count(void)
{
#ifdef SW_HAVE_CUDA
    return sw_cuda_device_count_reason(NULL, 0);
#else
    return 0;
#endif
}

sw_status sw_context_device_info(sw_context *ctx, sw_device_info *out)
{
    if (!ctx || !out)
        return sw_fail(ctx, SW_EINVAL, "sw_context_device_info: NULL argument");
    memset(out, 0, sizeof *out);
#ifdef SW_HAVE_CUDA
    if (ctx->backend == SW_BACKEND_CUDA)
        return sw_cuda_device_info(ctx, out);
#endif
    return sw_fail(ctx, SW_ENODEV, "the context runs on the CPU: no device information");
}

sw_status sw_context_synchronize(sw_context *ctx)
{
    if (!ctx)
        return sw_fail(NULL, SW_EINVAL, "sw_context_synchronize: context is NULL");
#ifdef SW_HAVE_CUDA
    if (ctx->backend == SW_BACKEND_CUDA)
        return sw_cuda_synchronize(ctx);
#endif
    return SW_OK;
}

void *sw_context_stream(const sw_context *ctx)
{
    return ctx ? ctx->stream : NULL;
}

void *sw_host_alloc(sw_context *ctx, size_t bytes, int pinned)
{
    (void)ctx;
#ifdef SW_HAVE_CUDA
    if (pinned)
        return sw_cuda_host_alloc(bytes);
#else
    (void)pinned;
#endif
    return calloc(1, bytes ? bytes : 1);
}

sw_status sw_host_register(sw_context *ctx, void *p, size_t bytes)
{
    if (!ctx || !p || !bytes)
        return sw_fail(ctx, SW_EINVAL, "sw_host_register: NULL context or memory, or 0 bytes");
#ifdef SW_HAVE_CUDA
    if (ctx->backend == SW_BACKEND_CUDA)
        return sw_cuda_host_register(ctx, p, bytes);
#endif
    return SW_OK;
}

void sw_host_unregister(sw_context *ctx, void *p)
{
#ifdef SW_HAVE_CUDA
    if (ctx && ctx->backend == SW_BACKEND_CUDA)
        sw_cuda_host_unregister(p);
#else
    (void)ctx;
    (void)p;
#endif
}

void sw_host_free(void *p, int pinned)
{
#ifdef SW_HAVE_CUDA
    if (pinned) {
        sw_cuda_host_free(p);
        return;
    }
#else
    (void)pinned;
#endif
    free(p);
}

/* ------------------------------------------------------------------ FFTW planner lock */

static pthread_mutex_t fftw_planner_mutex = PTHREAD_MUTEX_INITIALIZER;

void sw_fftw_planner_lock(void)
{
    pthread_mutex_lock(&fftw_planner_mutex);
}

void sw_fftw_planner_unlock(void)
{
    pthread_mutex_unlock(&fftw_planner_mutex);
}
