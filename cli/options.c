/*
 * Option values checked and stored in one place, with one wording for every subcommand: each
 * helper parses the text of an option (name as the user wrote it, for the message), stores it on
 * success and returns SW_EXIT_OK, or prints "spotwave <sub>: <name>: '<text>' is not <...>" and
 * returns SW_EXIT_USAGE (cli.h, "option values").
 */
#include "cli.h"

#include <limits.h>

int sw_cli_opt_long(const char *sub, const char *name, const char *arg, long min, long max, long *v)
{
    if (sw_cli_parse_long(arg, min, max, v) != 0)
        return sw_cli_usage(sub, "%s: '%s' is not a whole number in %ld..%ld", name, arg, min, max);
    return SW_EXIT_OK;
}

int sw_cli_opt_int(const char *sub, const char *name, const char *arg, long min, long max,
                   int32_t *v)
{
    long x;
    int rc = sw_cli_opt_long(sub, name, arg, min, max, &x);
    if (rc == SW_EXIT_OK)
        *v = (int32_t)x;
    return rc;
}

int sw_cli_opt_double(const char *sub, const char *name, const char *arg, sw_cli_bound bound,
                      const char *what, double *v)
{
    double x;
    if (sw_cli_parse_double(arg, &x) != 0 || (bound == SW_CLI_POSITIVE && !(x > 0)) ||
        (bound == SW_CLI_NONNEG && !(x >= 0)))
        return sw_cli_usage(sub, "%s: '%s' is not %s", name, arg, what);
    *v = x;
    return SW_EXIT_OK;
}

int sw_cli_opt_grid(const char *sub, const char *name, const char *arg, int32_t *nx, int32_t *ny)
{
    if (sw_cli_parse_size(arg, nx, ny) != 0)
        return sw_cli_usage(sub, "%s: '%s' is not NXxNY lenslets", name, arg);
    return SW_EXIT_OK;
}

int sw_cli_opt_size(const char *sub, const char *name, const char *arg, int32_t *w, int32_t *h)
{
    if (sw_cli_parse_size(arg, w, h) != 0)
        return sw_cli_usage(sub, "%s: '%s' is not WIDTHxHEIGHT with both in 1..%d", name, arg,
                            SW_IMAGE_MAX_DIM);
    return SW_EXIT_OK;
}

int sw_cli_opt_pair(const char *sub, const char *name, const char *arg, const char *what, double *a,
                    double *b)
{
    if (sw_cli_parse_pair(arg, a, b) != 0)
        return sw_cli_usage(sub, "%s: '%s' is not %s", name, arg, what);
    return SW_EXIT_OK;
}

int sw_cli_opt_at_least(const char *sub, const char *name, const char *arg, long min,
                        const char *what, long *v)
{
    if (sw_cli_parse_long(arg, min, LONG_MAX, v) != 0)
        return sw_cli_usage(sub, "%s: '%s' is not %s", name, arg, what);
    return SW_EXIT_OK;
}

int sw_cli_opt_file(const char *sub, const char *name, const char *arg, const char **v)
{
    if (!*arg)
        return sw_cli_usage(sub, "%s: the file name is empty", name);
    *v = arg;
    return SW_EXIT_OK;
}

int sw_cli_opt_u64(const char *sub, const char *name, const char *arg, uint64_t *v)
{
    if (sw_cli_parse_u64(arg, v) != 0)
        return sw_cli_usage(sub, "%s: '%s' is not an unsigned 64-bit integer", name, arg);
    return SW_EXIT_OK;
}
