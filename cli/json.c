/* The --json reports (json.h). */
#define _GNU_SOURCE /* open_memstream */

#include "json.h"

#include "spotwave/io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int sw_cli_json_print(cJSON *report)
{
    char *text = report ? cJSON_Print(report) : NULL;
    cJSON_Delete(report);
    if (!text)
        return -1;
    /* cJSON indents with tabs and writes "key":<tab>value; print two spaces per level and
     * "key": value, as the reports always looked. Safe: a tab inside a JSON string is always
     * escaped (\t), so every literal tab is layout. */
    for (const char *c = text; *c; c++) {
        if (*c != '\t')
            fputc(*c, stdout);
        else if (c > text && c[-1] == ':')
            fputc(' ', stdout);
        else
            fputs("  ", stdout);
    }
    fputc('\n', stdout);
    cJSON_free(text);
    return 0;
}

cJSON *sw_cli_json_str(const char *s)
{
    /* The literal as the library writes it (sw_json_write_string): cJSON would pass invalid
     * UTF-8 in a file name through, and the report would not be JSON. */
    if (!s)
        return cJSON_CreateNull();
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return NULL;
    sw_json_write_string(f, s);
    int bad = ferror(f);
    cJSON *item = (fclose(f) == 0 && !bad) ? cJSON_CreateRaw(text) : NULL;
    free(text);
    return item;
}

cJSON *sw_cli_json_string(cJSON *obj, const char *key, const char *s)
{
    cJSON *item = sw_cli_json_str(s);
    if (item && !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        item = NULL;
    }
    return item;
}

cJSON *sw_cli_json_int(cJSON *obj, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return cJSON_AddRawToObject(obj, key, buf);
}

cJSON *sw_cli_json_u64(cJSON *obj, const char *key, uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return cJSON_AddRawToObject(obj, key, buf);
}

static cJSON *add_formatted(cJSON *obj, const char *key, double v, const char *fmt, int prec)
{
    char buf[64];
    if (!isfinite(v))
        return cJSON_AddNullToObject(obj, key);
    snprintf(buf, sizeof buf, fmt, prec, v);
    return cJSON_AddRawToObject(obj, key, buf);
}

cJSON *sw_cli_json_fixed(cJSON *obj, const char *key, double v, int decimals)
{
    return add_formatted(obj, key, v, "%.*f", decimals);
}

cJSON *sw_cli_json_num(double v)
{
    char buf[32];
    if (!isfinite(v))
        return cJSON_CreateNull();
    snprintf(buf, sizeof buf, "%.17g", v);
    return cJSON_CreateRaw(buf);
}

cJSON *sw_cli_json_double(cJSON *obj, const char *key, double v)
{
    return add_formatted(obj, key, v, "%.*g", 17);
}

cJSON *sw_cli_json_sig(cJSON *obj, const char *key, double v, int digits)
{
    return add_formatted(obj, key, v, "%.*g", digits);
}

cJSON *sw_cli_json_int_array(cJSON *obj, const char *key, const int64_t *v, int n)
{
    char buf[32];
    cJSON *a = cJSON_AddArrayToObject(obj, key);
    for (int i = 0; a && i < n; i++) {
        snprintf(buf, sizeof buf, "%lld", (long long)v[i]);
        cJSON_AddItemToArray(a, cJSON_CreateRaw(buf));
    }
    return a;
}
