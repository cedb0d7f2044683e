/*
 * Status codes, error messages, logging, version and build information.
 */
#include "core/core_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#ifndef SW_VERSION_TEXT
#define SW_VERSION_TEXT "2.0.0"
#endif

/* The message of the last failure of calls made without a context, per thread. */
static _Thread_local char thread_error[SW_ERROR_MAX];

const char *sw_status_string(sw_status st)
{
    switch (st) {
    case SW_OK: return "success";
    case SW_EINVAL: return "invalid argument";
    case SW_ENOMEM: return "out of memory";
    case SW_EIO: return "input/output error";
    case SW_EFORMAT: return "malformed or unsupported data";
    case SW_ECUDA: return "CUDA error";
    case SW_ENODEV: return "no usable device";
    case SW_EUNSUPPORTED: return "not supported";
    case SW_ERANGE: return "value out of range";
    case SW_EINTERNAL: return "internal error";
    case SW_ETIMEDOUT: return "timed out";
    case SW_ECANCELED: return "stopped";
    }
    return "unknown status";
}

const char *sw_log_level_string(sw_log_level level)
{
    switch (level) {
    case SW_LOG_DEBUG: return "debug";
    case SW_LOG_INFO: return "info";
    case SW_LOG_WARN: return "warn";
    case SW_LOG_ERROR: return "error";
    }
    return "?";
}

sw_status sw_fail(sw_context *ctx, sw_status st, const char *fmt, ...)
{
    char *buf = ctx ? ctx->error : thread_error;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, SW_ERROR_MAX, fmt, ap);
    va_end(ap);
    if (ctx)
        sw_log(ctx, SW_LOG_DEBUG, "%s (%s)", buf, sw_status_string(st));
    /* Keep the thread's copy too, so sw_context_error(NULL) always has the latest failure. */
    if (ctx)
        memcpy(thread_error, ctx->error, SW_ERROR_MAX);
    return st;
}

sw_status sw_error_set(sw_context *ctx, sw_status st, const char *fmt, ...)
{
    char msg[SW_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt ? fmt : "", ap);
    va_end(ap);
    return sw_fail(ctx, st, "%s", msg);
}

void sw_log(const sw_context *ctx, sw_log_level level, const char *fmt, ...)
{
    if (!ctx || !ctx->log || level < ctx->log_level)
        return;
    char buf[SW_ERROR_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ctx->log(level, buf, ctx->log_user);
}

const char *sw_context_error(const sw_context *ctx)
{
    return ctx ? ctx->error : thread_error;
}

const char *sw_version(void)
{
    return SW_VERSION_TEXT;
}

int sw_built_with_cuda(void)
{
#ifdef SW_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

const char *sw_build_info(void)
{
    return "spotwave " SW_VERSION_TEXT "; " SW_COMPILER_TEXT
#ifdef SW_HAVE_CUDA
           "; CUDA " SW_CUDA_TEXT " (sm_" SW_CUDA_ARCH_TEXT ")"
#else
           "; CUDA off (CPU-only build)"
#endif
#ifdef SW_HAVE_OPENMP
           "; OpenMP"
#endif
           "; cfitsio, libpng, Random123 Philox4x32-10";
}

const char *sw_backend_string(sw_backend b)
{
    switch (b) {
    case SW_BACKEND_AUTO: return "auto";
    case SW_BACKEND_CPU: return "cpu";
    case SW_BACKEND_CUDA: return "cuda";
    }
    return "?";
}

sw_status sw_backend_parse(const char *text, sw_backend *out)
{
    static const sw_backend all[] = {SW_BACKEND_AUTO, SW_BACKEND_CPU, SW_BACKEND_CUDA};
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "backend: missing value");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcasecmp(text, sw_backend_string(all[i])) == 0) {
            *out = all[i];
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL, "unknown backend '%s' (expected auto, cpu or cuda)", text);
}

size_t sw_pixel_size(sw_pixel_type t)
{
    switch (t) {
    case SW_PIX_U8: return 1;
    case SW_PIX_U16: return 2;
    case SW_PIX_U32: return 4;
    case SW_PIX_F32: return 4;
    }
    return 0;
}

const char *sw_pixel_type_string(sw_pixel_type t)
{
    switch (t) {
    case SW_PIX_U8: return "u8";
    case SW_PIX_U16: return "u16";
    case SW_PIX_U32: return "u32";
    case SW_PIX_F32: return "f32";
    }
    return "?";
}

sw_status sw_pixel_type_parse(const char *text, sw_pixel_type *out)
{
    static const struct {
        const char *name;
        sw_pixel_type type;
    } names[] = {{"u8", SW_PIX_U8},   {"8", SW_PIX_U8},   {"u16", SW_PIX_U16}, {"16", SW_PIX_U16},
                 {"u32", SW_PIX_U32}, {"32", SW_PIX_U32}, {"f32", SW_PIX_F32}, {"32f", SW_PIX_F32}};
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "pixel type: missing value");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(text, names[i].name) == 0) {
            *out = names[i].type;
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL, "unknown pixel type '%s' (expected u8, u16, u32 or f32)", text);
}
