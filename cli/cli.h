/*
 * The `spotwave` command: what main.c and the subcommand files (cmd_<name>.c) share.
 *
 * The contract (DESIGN.md, "The command"):
 *   spotwave [--backend auto|cpu|cuda] [--threads N] [--quiet] [--verbose] SUBCOMMAND [OPTIONS]
 *   exit 0: success; 1: failure while running (one line on stderr, "spotwave <sub>: <what>");
 *   2: usage error (unknown subcommand or option, bad value; the line names --help).
 * Global options come before the subcommand; everything after it belongs to the subcommand.
 * Reports go to stdout (machine-readable with --json); diagnostics and library log messages go
 * to stderr.
 *
 * Adding a subcommand: write cli/cmd_<name>.c with sw_cmd_<name>() and sw_cmd_<name>_help(),
 * declare both below, and add one row to the table in main.c.
 *
 * The helpers declared here are defined in main.c.
 */
#ifndef SW_CLI_H
#define SW_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "spotwave/spotwave.h"

/* Exit codes of the command. */
enum { SW_EXIT_OK = 0, SW_EXIT_FAIL = 1, SW_EXIT_USAGE = 2 };

/* The global options, parsed by main.c before the subcommand. */
typedef struct sw_cli_globals {
    sw_backend backend; /* --backend (default auto)                                         */
    int threads;        /* --threads N, 0 = library default (all cores)                     */
    int quiet;          /* --quiet: no library log messages (failure lines are still printed) */
    int verbose;        /* --verbose: library log down to debug level                        */
} sw_cli_globals;

/*
 * A subcommand. argv[0] is the subcommand's name; its options follow. Returns an exit code.
 * help() prints the subcommand's usage to `out` (it is what `--help` and `spotwave help NAME`
 * show).
 */
typedef int (*sw_cli_run_fn)(const sw_cli_globals *g, int argc, char **argv);
typedef void (*sw_cli_help_fn)(FILE *out);

int sw_cmd_info(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_info_help(FILE *out);
int sw_cmd_demo(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_demo_help(FILE *out);
int sw_cmd_sim(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_sim_help(FILE *out);
int sw_cmd_centroid(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_centroid_help(FILE *out);
int sw_cmd_fit(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_fit_help(FILE *out);
int sw_cmd_find(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_find_help(FILE *out);
int sw_cmd_pupil(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_pupil_help(FILE *out);

/* ------------------------------------------------------------------ messages and exit codes */

/* Prints "spotwave <sub>: <message>" on stderr and returns SW_EXIT_FAIL (1). */
int sw_cli_fail(const char *sub, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prints "spotwave <sub>: <message> (see 'spotwave <sub> --help')" on stderr and returns
 * SW_EXIT_USAGE (2). sub may be NULL for the command itself. */
int sw_cli_usage(const char *sub, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ------------------------------------------------------------------ option parsing */

/*
 * getopt_long for a subcommand's own options, with uniform error handling. Call
 * sw_cli_getopt_reset() once before the first call. Returns the option's value, -1 when the
 * options are done (positional arguments start at optind), or SW_CLI_OPT_ERROR after printing a
 * usage line (the caller returns SW_EXIT_USAGE). shortopts is given without a leading ':'.
 * GNU argument permutation applies: options and positional arguments may be mixed.
 */
#define SW_CLI_OPT_ERROR (-2)
struct option;
void sw_cli_getopt_reset(void);
/* The option sw_cli_getopt returned last, as the user wrote it ("--name" or "-x", without its
 * value), for messages. A static buffer, valid until the next call. */
const char *sw_cli_option_name(char **argv);
int sw_cli_getopt(const char *sub, int argc, char **argv, const char *shortopts,
                  const struct option *longopts);

/* Parses a whole decimal integer in [min, max]. 0 on success, -1 otherwise (out untouched). */
int sw_cli_parse_long(const char *text, long min, long max, long *out);
/* Parses a whole unsigned 64-bit integer: decimal ("010" is ten, not octal), or hex after 0x or
 * 0X. No sign, blanks or other text. 0 / -1. */
int sw_cli_parse_u64(const char *text, uint64_t *out);
/* Parses "WxH" (also "W,H"), both in 1..SW_IMAGE_MAX_DIM. 0 / -1. */
int sw_cli_parse_size(const char *text, int32_t *w, int32_t *h);
/* Parses one finite number (strtod, the whole text). 0 / -1. */
int sw_cli_parse_double(const char *text, double *out);
/* Parses exactly n comma-separated finite numbers into v. 0 / -1. */
int sw_cli_parse_list(const char *text, double *v, int n);
/* "A,B": two finite numbers. 0 / -1. */
int sw_cli_parse_pair(const char *text, double *a, double *b);
/* 1 when s ends with suffix, ignoring case (file name extensions). */
int sw_cli_ends_with(const char *s, const char *suffix);

/* ------------------------------------------------------------------ output tables */

/* A table being written: standard output, or a temporary file renamed into place at the end so
 * that a failed run leaves no half-written file. */
typedef struct sw_cli_out {
    FILE *f;
    const char *path; /* NULL: standard output */
    char *tmp;        /* the temporary name (io.h's sw_text_file_open) */
} sw_cli_out;

/* Opens path ("-" or NULL: standard output). SW_EXIT_OK, or a failure line for sub. */
int sw_cli_out_open(const char *sub, sw_cli_out *o, const char *path);
/* Closes the file, renaming it into place when ok, discarding it otherwise. */
int sw_cli_out_close(const char *sub, sw_cli_out *o, int ok);

/*
 * Reads a FITS image (2-D or a cube of frames) or a binary PGM into frames, telling the formats
 * apart by their first bytes; with u32_to_f32, 32-bit integer frames are converted to float.
 * `what` names the file in messages ("image", "reference image"). SW_EXIT_OK, or a failure line
 * for sub.
 */
int sw_cli_read_frames(sw_context *ctx, const char *sub, const char *what, const char *path,
                       int u32_to_f32, sw_frames *out);

/* The library's message for a failed call on ctx, or the status's name when it left none. */
const char *sw_cli_lib_error(sw_context *ctx, sw_status st);

/* ------------------------------------------------------------------ context */

/*
 * Creates the context the global options ask for, with the stderr log callback (prefix
 * "spotwave: <level>: "; nothing with --quiet; debug and up with --verbose; warnings and
 * errors otherwise). On failure prints one line ("spotwave <sub>: cannot use the <backend>
 * backend: <reason>") and returns SW_EXIT_FAIL; SW_EXIT_OK and *out otherwise.
 */
int sw_cli_context(const sw_cli_globals *g, const char *sub, sw_context **out);

/* ------------------------------------------------------------------ small utilities */

/* Seconds from a monotonic clock (for timings). */
double sw_cli_now(void);

/* 1 when the file starts with the HDF5 signature (a superblock at offset 0, as Eiger and h5py
 * write them), 0 otherwise or when it cannot be read. */
int sw_cli_is_hdf5(const char *path);

/* A progress bar on stderr for runs over many frames: "spotwave <sub>: [####....] k/n frames,
 * r frames/s", at most ten updates a second, and the last one (then a newline). */
typedef struct sw_cli_progress {
    const char *sub;
    int on; /* 0: sw_cli_progress_update does nothing */
    double t_start, t_last;
} sw_cli_progress;

/* Starts the clock. on: 1 / 0 forced (--progress / --no-progress), < 0 automatic (on when
 * stderr is a terminal, the run has more than one frame and --quiet is not given). */
void sw_cli_progress_start(sw_cli_progress *p, const char *sub, int on, int quiet, int64_t frames);
void sw_cli_progress_update(sw_cli_progress *p, int64_t done, int64_t total);

/* JSON string literals: sw_json_write_string() (spotwave/io.h). */

/* Creates a directory and its missing parents (mode 0777 & ~umask). 0 on success, -1 with
 * errno set otherwise; an existing directory is success. */
int sw_cli_mkdir_p(const char *path);

#endif /* SW_CLI_H */
