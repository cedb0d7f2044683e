/*
 * The `spotwave` command: what main.c and the subcommand files (cmd_<name>.c) share.
 *
 * The contract (DESIGN.md, "The command"):
 *   spotwave [--backend auto|cpu|cuda] [--threads N] [--max-memory SIZE] [--quiet] [--verbose]
 *            SUBCOMMAND [OPTIONS]
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
    sw_backend backend;  /* --backend (default auto)                                          */
    int threads;         /* --threads N, 0 = library default (all cores)                      */
    int quiet;           /* --quiet: no library log messages (failure lines are still printed) */
    int verbose;         /* --verbose: library log down to debug level                         */
    uint64_t max_memory; /* --max-memory SIZE in bytes; 0: the library's default (core.h)      */
    int device;          /* CUDA device of the context (0; an MPI rank's own: cli_mpi.h)      */
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
int sw_cmd_aberrometry(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_aberrometry_help(FILE *out);
int sw_cmd_sabre(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_sabre_help(FILE *out);
int sw_cmd_loop(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_loop_help(FILE *out);
int sw_cmd_rtc(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_rtc_help(FILE *out);
int sw_cmd_calibrate(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_calibrate_help(FILE *out);
/* `spotwave sim bench` (cmd_sim_bench.c) */
int sw_cmd_sim_bench(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_sim_bench_help(FILE *out);
/* The closed-loop simulator's configuration as `spotwave loop` builds it (cmd_loop.c): its
 * defaults, the file config (NULL: none), then the n "KEY=VALUE" texts of sets, with the loop's
 * checks (messages for sub). SW_EXIT_OK with *p and *frames, or the exit code after its line. */
int sw_cli_loop_config(const char *sub, const char *config, int n, char *const *sets,
                       sw_loop_params *p, long *frames);
int sw_cmd_stream(const sw_cli_globals *g, int argc, char **argv);
void sw_cmd_stream_help(FILE *out);

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

/* ------------------------------------------------------------------ option values (options.c)
 *
 * Each parses an option's text `arg` (`name` is the option as written, "--pitch", for the
 * message), stores it and returns SW_EXIT_OK, or prints the usage line
 * "spotwave <sub>: <name>: '<arg>' is not <...>" and returns SW_EXIT_USAGE; *v is untouched then.
 */

/* "... is not a whole number in MIN..MAX". */
int sw_cli_opt_long(const char *sub, const char *name, const char *arg, long min, long max,
                    long *v);
int sw_cli_opt_int(const char *sub, const char *name, const char *arg, long min, long max,
                   int32_t *v);
/* Which finite numbers sw_cli_opt_double takes. */
typedef enum { SW_CLI_ANY, SW_CLI_POSITIVE, SW_CLI_NONNEG } sw_cli_bound;
/* A finite number within bound; "... is not <what>" ("a positive length", "a number >= 0"). */
int sw_cli_opt_double(const char *sub, const char *name, const char *arg, sw_cli_bound bound,
                      const char *what, double *v);
/* A lenslet grid "NXxNY" (sw_cli_parse_size): "... is not NXxNY lenslets". */
int sw_cli_opt_grid(const char *sub, const char *name, const char *arg, int32_t *nx, int32_t *ny);
/* An image size "WxH": "... is not WIDTHxHEIGHT with both in 1..SW_IMAGE_MAX_DIM". */
int sw_cli_opt_size(const char *sub, const char *name, const char *arg, int32_t *w, int32_t *h);
/* "A,B" (sw_cli_parse_pair): "... is not <what>" ("X0,Y0 in pixels"). */
int sw_cli_opt_pair(const char *sub, const char *name, const char *arg, const char *what, double *a,
                    double *b);

/* A whole number >= min: "... is not <what>" ("a count >= 1", "a frame number >= 0"). */
int sw_cli_opt_at_least(const char *sub, const char *name, const char *arg, long min,
                        const char *what, long *v);
/* An unsigned 64-bit integer (sw_cli_parse_u64; seeds): "... is not an unsigned 64-bit integer". */
int sw_cli_opt_u64(const char *sub, const char *name, const char *arg, uint64_t *v);
/* A file name (any text but the empty one): "<name>: the file name is empty". */
int sw_cli_opt_file(const char *sub, const char *name, const char *arg, const char **v);

/* ------------------------------------------------------------------ inputs and outputs
 * (files.c). Every subcommand names the files it reads and writes, then checks them before any
 * work: an output that names an input or another output is refused with exit 2; one that cannot be
 * written (a folder, a device, a missing or read-only folder) with exit 1. Outputs are written
 * under sw_cli_staged names and land all or nothing: main.c moves them into place (synced) when the
 * subcommand returns 0 and removes them otherwise. NULL, "" and "-" (standard input/output) are
 * ignored everywhere. */

/* Forgets every file named so far (main.c, before the subcommand runs). */
void sw_cli_files_begin(const char *sub);
/* A file the run reads (option: how the user named it: "--config", "image"). */
void sw_cli_file_in(const char *option, const char *path);
/* A file the run writes. */
void sw_cli_file_out(const char *option, const char *path);
/* Compares every output with every input and every other output, and checks its folder.
 * SW_EXIT_OK, or SW_EXIT_USAGE / SW_EXIT_FAIL after one line on stderr. */
int sw_cli_files_check(void);
/* The name to write output `path` under now (in a staging folder beside it). A name not given to
 * sw_cli_output before (made during the run: a map per frame) is checked here; NULL then after a
 * failure line on stderr (exit 1: nothing has been moved into place yet). "-" and NULL come back
 * unchanged. */
const char *sw_cli_file_staged(const char *option, const char *path);
/* The outputs are complete although the run will exit non-zero (loop --strict after a warning):
 * sw_cli_files_end moves them into place all the same. */
void sw_cli_files_keep(void);
/* main.c, after the subcommand: with rc 0 (or after sw_cli_files_keep) moves every staged file into
 * place (each synced, then the folder), otherwise removes them. Returns rc, or SW_EXIT_FAIL when a
 * move failed. */
int sw_cli_files_end(int rc);

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
 * Reads a FITS image (2-D or a cube of frames), a binary PGM, a CBF (every array a frame) or a TIFF
 * (every page a frame) into frames, telling the formats apart by their first bytes; with
 * u32_to_f32, 32-bit integer frames are converted to float. `what` names the file in messages
 * ("image", "reference image"). SW_EXIT_OK, or a failure line for sub.
 */
int sw_cli_read_frames(sw_context *ctx, const char *sub, const char *what, const char *path,
                       int u32_to_f32, sw_frames *out);
/* The same, and what the file says beyond its pixels (either may be NULL): *valid the pixels a
 * CBF marks negative (bad pixels, module gaps) as 0 among 1s (malloc'ed; NULL when none), *geom
 * the geometry a CBF mini-header gives (have = 0 for the other formats). */
int sw_cli_read_frames_ex(sw_context *ctx, const char *sub, const char *what, const char *path,
                          int u32_to_f32, sw_frames *out, uint8_t **valid,
                          sw_diffraction_geometry *geom);

/* ------------------------------------------------------------------ several inputs as one
 * frame sequence (inputs.c; used by find and pupil) */

/* One input file: its frames in memory (FITS, PGM) or an open HDF5 reader. */
typedef struct sw_cli_input {
    const char *path;
    sw_frames frames; /* FITS/PGM: every frame, read at open */
    sw_h5_reader *h5; /* HDF5: the open reader, NULL otherwise */
    int64_t nframes;
    int64_t start;                /* global index of its first frame */
    sw_diffraction_geometry geom; /* what the file's header says of the experiment (have = 0:
                                     nothing; FITS, PGM and TIFF carry none; CBF: the Pilatus
                                     mini-header; HDF5: the NXmx fields, sw_h5_read_geometry) */
    uint8_t *valid; /* CBF: its negative pixels as 0 among 1s (width * height), or NULL */
    int chunked;    /* HDF5 read as stored chunks throughout (sw_cli_inputs_chunk_limits) */
} sw_cli_input;

/* Several input files, their frames numbered from 0 across all of them in order. */
typedef struct sw_cli_inputs {
    sw_cli_input *in;
    int n;
    int64_t total; /* frames over all inputs */
    int32_t width, height;
    sw_pixel_type type;
    int h5_no_ctx;  /* the HDF5 readers were opened without the context (SW_CLI_INPUTS_THREAD) */
    sw_image h5buf; /* sw_cli_inputs_frame's buffer for HDF5 frames (allocated with ctx) */
    uint8_t *valid; /* every input's valid mask ANDed (width * height), NULL when none has one */
} sw_cli_inputs;

/* sw_cli_inputs_open flags. THREAD: frames are read on another thread with sw_cli_inputs_read
 * (the pipeline's reader thread): the HDF5 readers are opened without the context (io.h) and no
 * frame buffer is allocated. Otherwise the readers use ctx, and sw_cli_inputs_frame reads HDF5
 * frames into a buffer allocated with ctx (pinned on CUDA). */
enum { SW_CLI_INPUTS_THREAD = 1 };

/* Called by sw_cli_inputs_open for each HDF5 input right after it is opened (before its size is
 * checked against the others): a command's own use of the file (pixel masks, overload values).
 * Returns SW_EXIT_OK, or an exit code after printing its failure line (the open then stops). */
typedef int (*sw_cli_inputs_h5_fn)(void *user, sw_cli_input *in, const sw_h5_info *info);

/*
 * Opens paths[0..n-1] (HDF5 told apart by sw_cli_is_hdf5, dataset NULL = automatic; FITS/PGM
 * through sw_cli_read_frames) and checks that they share one size and pixel type. on_h5 may be
 * NULL. SW_EXIT_OK, or a failure line for sub; call sw_cli_inputs_free in both cases (*out is
 * cleared first).
 */
int sw_cli_inputs_open(sw_context *ctx, const char *sub, char *const *paths, int n,
                       const char *dataset, int flags, sw_cli_inputs_h5_fn on_h5, void *user,
                       sw_cli_inputs *out);
/* The frames a run asks for: first, and count (< 0: all from first). SW_EXIT_OK with *count_out,
 * or a failure line for sub when they are not all in the inputs. */
int sw_cli_inputs_range(const char *sub, const sw_cli_inputs *in, int64_t first, int64_t count,
                        int64_t *count_out);
/* Frame `index` (global, in 0..total-1), for the calling thread: a frame in memory, or read from
 * HDF5 into the inputs' buffer (valid until the next call). SW_EXIT_OK or a failure line. */
int sw_cli_inputs_frame(sw_context *ctx, const char *sub, sw_cli_inputs *in, int64_t index,
                        const sw_image **out);
/* The same without printing: the failure's status, its message on ctx (for MPI ranks, which
 * report a failed frame with their rank). */
sw_status sw_cli_inputs_frame_status(sw_context *ctx, sw_cli_inputs *in, int64_t index,
                                     const sw_image **out);
/* Frame `index` copied into dst (of the inputs' size and type; any stride). Uses no context: for
 * a pipeline's reader thread with SW_CLI_INPUTS_THREAD. */
sw_status sw_cli_inputs_read(sw_cli_inputs *in, int64_t index, sw_image *dst);
/* Frame index as stored bitshuffle/LZ4 chunks (sw_h5_read_frame_chunks; *nchunks = 0 for a
 * frame that is not, or not from an input that sw_cli_inputs_chunk_limits found read as chunks
 * throughout): the chunk source of sw_find_sequence_chunks. Safe on several threads at once. */
sw_status sw_cli_inputs_read_chunks(sw_cli_inputs *in, int64_t index, void *buf, size_t cap,
                                    sw_find_chunk *chunks, int64_t max_chunks, int64_t *nchunks);
/* The room sw_cli_inputs_read_chunks needs over all inputs (*cap bytes, *max_chunks chunks; 0
 * when none is read as chunks), and which inputs it reads as chunks; returns 1 when every input
 * is an HDF5 file read as chunks. */
int sw_cli_inputs_chunk_limits(sw_cli_inputs *in, size_t *cap, int64_t *max_chunks);
void sw_cli_inputs_free(sw_cli_inputs *in);
/* The experiment's geometry as the first input's header gives it (nothing known: have = 0). */
void sw_cli_inputs_geometry(const sw_cli_inputs *in, sw_diffraction_geometry *g);
/* Where the external links of HDF5 inputs may lead (io.h's sw_h5_options): dirs ("a:b"; by
 * default only beside the master) and anywhere (1: absolute targets and ".."). NULL / -1 leave a
 * setting as it is. Set before sw_cli_inputs_open (the --h5-link-dirs and --h5-links-anywhere
 * options). */
void sw_cli_inputs_h5_links(const char *dirs, int anywhere);
/* Their --help lines, for the commands that read HDF5 (find, pupil, aberrometry). */
#define SW_CLI_H5_LINKS_HELP                                                                       \
    "  --h5-link-dirs DIRS    folders (\"a:b\") where an HDF5 master's external links may\n"       \
    "                         find their data files after the master's own folder; by\n"           \
    "                         default only files beside the master are opened\n"                   \
    "  --h5-links-anywhere    also follow links to absolute paths and through '..' (and\n"         \
    "                         virtual datasets): for files you trust\n"

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

/* ------------------------------------------------------------------ configuration files
 * (config.c): `key = value` lines, '#' comments, as loop, sim bench and rtc read them. */

#define SW_CLI_CONFIG_LINE    1024 /* longest line */
#define SW_CLI_CONFIG_UNKNOWN 1    /* sw_cli_config_set_fn: not a key of this file */

/* Sets key `name` from `value`: 0, SW_CLI_CONFIG_UNKNOWN, or -1 with what the key takes in
 * want ("a whole number in 1..64"). value NULL only asks whether the key is known (0 / UNKNOWN,
 * nothing set). */
typedef int (*sw_cli_config_set_fn)(void *user, const char *name, const char *value, char *want,
                                    size_t wsize);
/* Reads the file through set. SW_EXIT_OK; SW_EXIT_FAIL when it cannot be read; a usage error
 * "FILE:LINE: what" for a bad line (a NUL byte, too long, not key = value, no key, no value, an
 * unknown or repeated key, a refused value). */
int sw_cli_config_read(const char *sub, const char *path, sw_cli_config_set_fn set, void *user);
/* --set KEY=VALUE: the key (blanks trimmed, shorter than size) into name and *value after the
 * '=' (leading blanks skipped; a pointer into text). SW_EXIT_OK or a usage error. */
int sw_cli_split_set(const char *sub, const char *text, char *name, size_t size,
                     const char **value);

/* ------------------------------------------------------------------ small utilities */

/* Seconds from a monotonic clock (for timings). */
double sw_cli_now(void);

/* Long-running subcommands (rtc, calibrate, sim bench): after sw_cli_catch_stop, SIGINT and
 * SIGTERM set sw_cli_stop (they no longer end the process): the command finishes the frame in hand
 * and leaves its files and streams whole. */
extern volatile int sw_cli_stop;
void sw_cli_catch_stop(void);

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
/* The same for a run whose length is not known (find --follow): "spotwave <sub>: k frames from
 * m files, r frames/s" and ", waiting" while waiting is set; last: the final update (then a
 * newline). */
void sw_cli_progress_open_ended(sw_cli_progress *p, int64_t done, int64_t files, int waiting,
                                int last);

/* ------------------------------------------------------------------ following a folder
 *
 * find --follow: the image files a detector writes into a folder, taken as they land. The folder
 * is listed every poll_s seconds; a file is complete, and taken, once two polls have seen the
 * same size (> 0) and modification time (a file renamed into place is complete the same way);
 * complete files are taken in name order (strcmp: zero-padded numbers sort as numbers), each
 * once, even when a later one sorts before an earlier one. Names starting with '.' (writers'
 * temporary names) and anything but regular files are never taken. Without a pattern the names
 * taken are those of the formats spotwave reads (*.cbf, *.tif, *.tiff, *.h5, *.hdf5, *.nxs,
 * *.fits, *.fit, *.fts, *.fits.gz, *.fz, *.pgm; any case), except Eiger data files
 * (*_data_NNNNNN.h5: read through their master); with one, the names fnmatch(3) matches. */
typedef struct sw_cli_follow sw_cli_follow;
/* SW_EXIT_OK, or a failure line for sub (not a folder, out of memory). */
int sw_cli_follow_open(const char *sub, const char *dir, const char *pattern, double poll_s,
                       sw_cli_follow **out);
/* A file that is never taken (the run's own output, once it exists). At most 8. */
void sw_cli_follow_skip(sw_cli_follow *f, const char *path);
/* Waits for the next complete file: 1 with *path (the folder + "/" + its name, valid until the
 * next call), 0 when no file completed within idle_s seconds (0: wait for ever) or sw_cli_stop
 * was set, -1 after a failure line (the folder cannot be read). waiting(user), when not NULL, is
 * called while waiting (for a progress line). */
int sw_cli_follow_next(const char *sub, sw_cli_follow *f, double idle_s, void (*waiting)(void *),
                       void *user, const char **path);
void sw_cli_follow_close(sw_cli_follow *f); /* NULL is ignored */

/* JSON string literals: sw_json_write_string() (spotwave/io.h). */

/* Creates a directory and its missing parents (mode 0777 & ~umask). 0 on success, -1 with
 * errno set otherwise; an existing directory is success. */
int sw_cli_mkdir_p(const char *path);

/* ------------------------------------------------------------------ given pupils (given_pupil.c)
 */

/* `pupil` and `aberrometry`: --pupil-center X,Y with --pupil-radius-px R, or --pupil-ellipse
 * X,Y,A,B,ANGLE, once per eye (a radius given once serves both), gathered while parsing. */
typedef struct sw_cli_given {
    int n_center, n_radius, n_ellipse;
    double center[2][2], radius[2];
    sw_pupil_shape ellipse[2];
} sw_cli_given;

enum { SW_CLI_GIVEN_CENTER, SW_CLI_GIVEN_RADIUS, SW_CLI_GIVEN_ELLIPSE };

/* Takes one of the options (kind SW_CLI_GIVEN_*) into g; SW_EXIT_OK or a usage error. */
int sw_cli_given_option(const char *sub, const char *name, int kind, const char *arg,
                        sw_cli_given *g);
/* After parsing: nothing given leaves p alone; otherwise checks that every one of n_eyes eyes
 * has a centre and a radius, or an ellipse (not both forms), and sets p->given and
 * p->given_pupil. SW_EXIT_OK or a usage error. */
int sw_cli_given_finish(const char *sub, const sw_cli_given *g, int n_eyes, sw_pupil_params *p);
/* The options' lines for --help. */
extern const char sw_cli_given_help[];
/* --pupil-method auto|glow|spots as pupil.h's spots_fallback (1, 0, 2); -1 for anything else. */
int sw_cli_pupil_method(const char *arg);
const char *sw_cli_pupil_method_name(int spots_fallback);

#endif /* SW_CLI_H */
