/*
 * libFuzzer target: the loop configuration file (`spotwave loop --config`), parsed by
 * cli/cmd_loop.c's build_config over cli/config.c's reader (sw_cli_config_read). The command's
 * readers are static functions of the command, so this file includes cli/cmd_loop.c (a shim) and
 * links the rest of the command from sw_cli_fuzz (tests/CMakeLists.txt). Invariants: the result is
 * an exit code (0, 1, 2); on success frames > warmup, every double setting is finite, the gain is
 * within 0..GAIN_MAX, the file holds no NUL byte and no key twice (checked here by a scan of our
 * own: the text before
 * '#', split at the first '=', trimmed).
 */
#include "../../cli/cmd_loop.c"

#include "fuzz_common.h"

#include <ctype.h>

/* Blanks off both ends, in place. */
static char *trim_blanks(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* 1 when some key of the table is set on two lines of data[0, size). */
static int has_repeated_key(const uint8_t *data, size_t size)
{
    int seen[sizeof keys / sizeof keys[0]] = {0};
    size_t start = 0;
    while (start < size) {
        size_t end = start;
        while (end < size && data[end] != '\n')
            end++;
        char buf[SW_CLI_CONFIG_LINE + 1];
        size_t n = end - start < SW_CLI_CONFIG_LINE ? end - start : SW_CLI_CONFIG_LINE;
        memcpy(buf, data + start, n);
        buf[n] = '\0';
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        char *eq = strchr(buf, '=');
        if (eq) {
            *eq = '\0';
            const key_def *k = find_key(trim_blanks(buf));
            if (k && seen[k - keys]++)
                return 1;
        }
        start = end + 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_file("loop.cfg", data, size, path, sizeof path);
    loop_opts o;
    memset(&o, 0, sizeof o);
    o.sub = SUB;
    o.config = path;
    int rc = build_config(&o);
    if (rc != SW_EXIT_OK && rc != SW_EXIT_FAIL && rc != SW_EXIT_USAGE)
        abort();
    if (rc == SW_EXIT_OK) {
        if (o.frames <= o.p.warmup)
            abort();
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            if (keys[i].type == KT_DOUBLE &&
                !isfinite(*(const double *)(const void *)((const char *)&o.p + keys[i].offset)))
                abort();
        if (!(o.p.controller.gain >= 0.0 && o.p.controller.gain <= GAIN_MAX))
            abort();
        if (memchr(data, '\0', size) || has_repeated_key(data, size))
            abort();
    }
    return 0;
}
