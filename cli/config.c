/*
 * `key = value` configuration files, as `spotwave loop`, `spotwave sim bench` and `spotwave rtc`
 * read them (cli.h, sw_cli_config_read): one setting per line, '#' starts a comment, blanks around
 * keys and values ignored, blank lines skipped. Every problem is a usage error that names the file
 * and line: a NUL byte, a line longer than SW_CLI_CONFIG_LINE characters, a line that is not
 * key = value, no key, no value, an unknown key, a key given twice, a value the key refuses.
 */
#define _GNU_SOURCE

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KEYS 256 /* distinct keys one file may set */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/*
 * Reads one line of at most SW_CLI_CONFIG_LINE characters (its newline not counted) into buf
 * (SW_CLI_CONFIG_LINE + 1 bytes), without its newline. Returns 1 for a line, 0 at the end of the
 * file, -1 for a longer line (the rest of it is not read); *nul is the 1-based column of the
 * first NUL byte, 0 for none.
 */
static int read_line(FILE *f, char *buf, size_t *nul)
{
    size_t n = 0;
    int c, any = 0;
    *nul = 0;
    while ((c = getc(f)) != EOF) {
        any = 1;
        if (c == '\n')
            break;
        if (n == SW_CLI_CONFIG_LINE)
            return -1;
        if (c == '\0' && *nul == 0)
            *nul = n + 1;
        buf[n++] = (char)c;
    }
    buf[n] = '\0';
    return any;
}

typedef struct seen_key {
    char *name;
    long line;
} seen_key;

int sw_cli_config_read(const char *sub, const char *path, sw_cli_config_set_fn set, void *user)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return sw_cli_fail(sub, "cannot read the configuration '%s': %s", path, strerror(errno));
    char line[SW_CLI_CONFIG_LINE + 1];
    seen_key seen[MAX_KEYS];
    int nseen = 0, rc = SW_EXIT_OK, got;
    long lineno = 0;
    size_t nul;
    while (rc == SW_EXIT_OK && (got = read_line(f, line, &nul)) != 0) {
        lineno++;
        if (got < 0) {
            rc = sw_cli_usage(sub, "%s:%ld: longer than %d characters", path, lineno,
                              SW_CLI_CONFIG_LINE);
            break;
        }
        if (nul) {
            rc =
                sw_cli_usage(sub, "%s:%ld: a NUL byte (column %zu): the configuration must be text",
                             path, lineno, nul);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *text = trim(line);
        if (!*text)
            continue;
        char *eq = strchr(text, '=');
        if (!eq) {
            rc = sw_cli_usage(sub, "%s:%ld: '%s' is not key = value", path, lineno, text);
            break;
        }
        *eq = '\0';
        char *name = trim(text), *value = trim(eq + 1);
        if (!*name) {
            rc = sw_cli_usage(sub, "%s:%ld: no key before '='", path, lineno);
            break;
        }
        const seen_key *before = NULL;
        for (int i = 0; i < nseen && !before; i++)
            if (strcmp(seen[i].name, name) == 0)
                before = &seen[i];
        char want[160] = "a value";
        if (before) {
            rc = sw_cli_usage(sub, "%s:%ld: key '%s' repeated (first at line %ld)", path, lineno,
                              name, before->line);
            break;
        }
        if (!*value) {
            /* an unknown key is named as such before its missing value */
            if (set(user, name, NULL, want, sizeof want) == SW_CLI_CONFIG_UNKNOWN)
                rc = sw_cli_usage(sub, "%s:%ld: unknown key '%s'", path, lineno, name);
            else
                rc = sw_cli_usage(sub, "%s:%ld: %s has no value", path, lineno, name);
            break;
        }
        const int r = set(user, name, value, want, sizeof want);
        if (r == SW_CLI_CONFIG_UNKNOWN)
            rc = sw_cli_usage(sub, "%s:%ld: unknown key '%s'", path, lineno, name);
        else if (r != 0)
            rc = sw_cli_usage(sub, "%s:%ld: %s: '%s' is not %s", path, lineno, name, value, want);
        else if (nseen == MAX_KEYS)
            rc = sw_cli_usage(sub, "%s:%ld: more than %d keys", path, lineno, MAX_KEYS);
        else if (!(seen[nseen].name = strdup(name)))
            rc = sw_cli_fail(sub, "out of memory");
        else
            seen[nseen++].line = lineno;
    }
    if (rc == SW_EXIT_OK && ferror(f))
        rc = sw_cli_fail(sub, "cannot read the configuration '%s': %s", path, strerror(errno));
    fclose(f);
    for (int i = 0; i < nseen; i++)
        free(seen[i].name);
    return rc;
}

int sw_cli_split_set(const char *sub, const char *text, char *name, size_t size, const char **value)
{
    const char *eq = strchr(text, '=');
    size_t n = eq ? (size_t)(eq - text) : 0;
    while (n > 0 && isspace((unsigned char)text[n - 1]))
        n--;
    if (!eq || n == 0 || n >= size)
        return sw_cli_usage(sub, "--set: '%s' is not KEY=VALUE", text);
    memcpy(name, text, n);
    name[n] = '\0';
    const char *v = eq + 1;
    while (isspace((unsigned char)*v))
        v++;
    *value = v;
    return SW_EXIT_OK;
}
