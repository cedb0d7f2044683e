/*
 * The --json reports of the `spotwave` command: each subcommand builds a cJSON object
 * (Debian's libcjson) and prints it with sw_cli_json_print, so every report is written the
 * same way. Numbers go in as text printed here, not as cJSON numbers: cJSON prints a double with
 * 15 digits whenever that reads back within its tolerance, which loses the last bits, and whole
 * numbers through a double. So a double is "%.17g" (reads back bit-exact), a field with a fixed
 * number of decimals (timings) "%.Nf", a whole number exact; non-finite values are null.
 */
#ifndef SW_CLI_JSON_H
#define SW_CLI_JSON_H

#include <cjson/cJSON.h>
#include <stdint.h>

/* Prints the report on stdout (cJSON_Print, then a newline) and deletes it. 0, or -1 when cJSON
 * ran out of memory (nothing printed). */
int sw_cli_json_print(cJSON *report);

/* A string item (for arrays): s escaped as sw_json_write_string (spotwave/io.h) does, so invalid
 * UTF-8 becomes \ufffd; null when s is NULL. NULL when out of memory. */
cJSON *sw_cli_json_str(const char *s);
/* Adds key: sw_cli_json_str(s). */
cJSON *sw_cli_json_string(cJSON *obj, const char *key, const char *s);
/* Adds key: a whole number, written exactly (cJSON's numbers are doubles). */
cJSON *sw_cli_json_int(cJSON *obj, const char *key, int64_t v);
cJSON *sw_cli_json_u64(cJSON *obj, const char *key, uint64_t v);
/* A number item (for arrays): v with "%.17g", or null when v is not finite. */
cJSON *sw_cli_json_num(double v);
/* Adds key: v with "%.17g" (bit-exact), or null when v is not finite. */
cJSON *sw_cli_json_double(cJSON *obj, const char *key, double v);
/* Adds key: v with printf's "%.<decimals>f", or null when v is not finite. */
cJSON *sw_cli_json_fixed(cJSON *obj, const char *key, double v, int decimals);
/* Adds key: v with printf's "%.<digits>g", or null when v is not finite. */
cJSON *sw_cli_json_sig(cJSON *obj, const char *key, double v, int digits);
/* Adds key: an array of the n whole numbers v. */
cJSON *sw_cli_json_int_array(cJSON *obj, const char *key, const int64_t *v, int n);

#endif /* SW_CLI_JSON_H */
