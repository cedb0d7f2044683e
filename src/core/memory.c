/*
 * The memory budget of core.h: the default limit, the size syntax, the per-context limit and the
 * check made before every allocation whose size comes from the input.
 */
#define _GNU_SOURCE /* sysconf's _SC_PHYS_PAGES */

#include "core/core_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#define FALLBACK_LIMIT (1ull << 30) /* when the system says nothing of its memory */

/* The parse of sw_memory_size_parse without a message: 0, or -1 for text that is not a size. */
static int parse_size(const char *text, uint64_t *out)
{
    if (strcasecmp(text, "unlimited") == 0) {
        *out = UINT64_MAX;
        return 0;
    }
    /* digits [. digits] [K|M|G|T [i] [B]] or [B]: strtod would take hex, exponents, inf, nan */
    const char *p = text;
    int digits = 0;
    while (isdigit((unsigned char)*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            p++;
            digits++;
        }
    }
    if (digits == 0 || digits > 40)
        return -1;
    char num[64];
    memcpy(num, text, (size_t)(p - text));
    num[p - text] = '\0';
    double scale = 1.0;
    switch (toupper((unsigned char)*p)) {
    case 'K': scale = 1024.0; break;
    case 'M': scale = 1024.0 * 1024.0; break;
    case 'G': scale = 1024.0 * 1024.0 * 1024.0; break;
    case 'T': scale = 1024.0 * 1024.0 * 1024.0 * 1024.0; break;
    default: break;
    }
    if (scale > 1.0) {
        p++;
        if (*p == 'i' || *p == 'I')
            p++;
    }
    if (*p == 'b' || *p == 'B')
        p++;
    if (*p != '\0')
        return -1;
    errno = 0;
    const double v = strtod(num, NULL) * scale;
    /* 2^64 as a double is exact; the largest double below it converts safely */
    if (errno != 0 || !isfinite(v) || v >= 18446744073709551616.0)
        return -1;
    const uint64_t b = (uint64_t)ceil(v);
    if (b == 0)
        return -1;
    *out = b;
    return 0;
}

sw_status sw_memory_size_parse(const char *text, uint64_t *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "sw_memory_size_parse: NULL argument");
    if (parse_size(text, out) == 0)
        return SW_OK;
    return sw_fail(NULL, SW_EINVAL,
                   "'%.64s' is not a memory size (a number of bytes with an optional K, M, G or T "
                   "suffix, e.g. 512M, 8G; or unlimited)",
                   text);
}

/* The cgroup v2 limit of this process's group, 0 when there is none or it cannot be read. */
static uint64_t cgroup_limit(void)
{
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (!f)
        return 0;
    char buf[64] = {0};
    const int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || !isdigit((unsigned char)buf[0])) /* "max": no limit */
        return 0;
    char *end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(buf, &end, 10);
    return errno == 0 && v > 0 ? (uint64_t)v : 0;
}

static uint64_t system_default(void)
{
    uint64_t avail = 0;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        avail = (uint64_t)pages * (uint64_t)page;
    const uint64_t cg = cgroup_limit();
    if (cg > 0 && (avail == 0 || cg < avail))
        avail = cg;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (avail == 0 || (uint64_t)rl.rlim_cur < avail))
        avail = (uint64_t)rl.rlim_cur;
    return avail > 0 ? avail / 2 : FALLBACK_LIMIT;
}

uint64_t sw_memory_limit_default(void)
{
    const char *env = getenv("SPOTWAVE_MAX_MEMORY");
    uint64_t b;
    if (env && *env && parse_size(env, &b) == 0)
        return b;
    return system_default();
}

const char *sw_memory_env_invalid(void)
{
    const char *env = getenv("SPOTWAVE_MAX_MEMORY");
    uint64_t b;
    return env && *env && parse_size(env, &b) != 0 ? env : NULL;
}

sw_status sw_context_set_memory_limit(sw_context *ctx, uint64_t bytes)
{
    if (!ctx)
        return sw_fail(NULL, SW_EINVAL, "sw_context_set_memory_limit: context is NULL");
    ctx->memory_limit = bytes ? bytes : sw_memory_limit_default();
    return SW_OK;
}

uint64_t sw_context_memory_limit(const sw_context *ctx)
{
    return ctx ? ctx->memory_limit : sw_memory_limit_default();
}

const char *sw_memory_size_string(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes == UINT64_MAX) {
        snprintf(buf, size, "unlimited");
        return buf;
    }
    if (bytes < 1024) {
        snprintf(buf, size, "%llu bytes", (unsigned long long)bytes);
        return buf;
    }
    double v = (double)bytes / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, size, "%.3g %s", v, units[u]);
    return buf;
}

sw_status sw_memory_check(sw_context *ctx, uint64_t count, uint64_t size, const char *fmt, ...)
{
    const uint64_t limit = sw_context_memory_limit(ctx);
    const int overflow = count != 0 && size > UINT64_MAX / count;
    const uint64_t bytes = overflow ? UINT64_MAX : count * size;
    if (!overflow && bytes <= limit)
        return SW_OK;
    char what[512], need[32], lim[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt ? fmt : "a request", ap);
    va_end(ap);
    sw_memory_size_string(limit, lim, sizeof lim);
    if (overflow)
        return sw_fail(ctx, SW_ENOMEM,
                       "%s: needs %llu x %llu bytes, more than 2^64, above the memory limit of %s "
                       "(the input is absurd or damaged)",
                       what, (unsigned long long)count, (unsigned long long)size, lim);
    return sw_fail(ctx, SW_ENOMEM,
                   "%s: needs %s (%llu bytes), above the memory limit of %s; raise it with "
                   "spotwave --max-memory SIZE, SPOTWAVE_MAX_MEMORY=SIZE or "
                   "sw_context_set_memory_limit()",
                   what, sw_memory_size_string(bytes, need, sizeof need), (unsigned long long)bytes,
                   lim);
}
