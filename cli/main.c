/*
 * spotwave: the command. Global options, the subcommand table, help, version, exit codes, and
 * the helpers declared in cli.h.
 */
#define _GNU_SOURCE /* getopt_long, clock_gettime, mkdir */

#include "cli.h"
#include "outfiles.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ the subcommands */

typedef struct sw_subcommand {
    const char *name;
    const char *summary;
    sw_cli_run_fn run;
    sw_cli_help_fn help;
} sw_subcommand;

/* One row per subcommand that exists (DESIGN.md's table lists one still to come: bench). */
static const sw_subcommand subcommands[] = {
    {"info", "versions, build, backends and the GPU the context gets", sw_cmd_info,
     sw_cmd_info_help},
    {"demo", "build an example image, write FITS/PGM/PNG, read them back, time the core ops",
     sw_cmd_demo, sw_cmd_demo_help},
    {"sim", "simulated images with known truth: stars (Li et al. 2012), sh, eye", sw_cmd_sim,
     sw_cmd_sim_help},
    {"find", "spots by the DIALS dispersion threshold (Winter et al. 2018)", sw_cmd_find,
     sw_cmd_find_help},
    {"centroid", "Shack-Hartmann centroids and slopes per lenslet (Mocci et al. 2020)",
     sw_cmd_centroid, sw_cmd_centroid_help},
    {"fit", "Zernike fit, wavefront map, refraction from slopes (Mompean et al. 2019)", sw_cmd_fit,
     sw_cmd_fit_help},
    {"pupil", "pupil ellipses on Hartmann-Shack images of eyes (Mompean et al. 2019)", sw_cmd_pupil,
     sw_cmd_pupil_help},
    {"aberrometry", "ocular aberrations and refraction from H-S images (Mompean et al. 2019)",
     sw_cmd_aberrometry, sw_cmd_aberrometry_help},
    {"sabre", "wavefront from slopes: D-SABRE or baselines (Brunner et al. 2018)", sw_cmd_sabre,
     sw_cmd_sabre_help},
    {"loop", "closed adaptive-optics loop simulated (Brunner et al. 2018)", sw_cmd_loop,
     sw_cmd_loop_help},
    {"rtc", "the real-time chain between image streams of an AO bench (Mocci et al. 2020)",
     sw_cmd_rtc, sw_cmd_rtc_help},
    {"calibrate", "interaction and control matrices measured through a bench's image streams",
     sw_cmd_calibrate, sw_cmd_calibrate_help},
    {"stream", "shared-memory image streams (milk/CACAO ImageStreamIO layout)", sw_cmd_stream,
     sw_cmd_stream_help},
};
static const size_t n_subcommands = sizeof subcommands / sizeof subcommands[0];

static const sw_subcommand *find_subcommand(const char *name)
{
    for (size_t i = 0; i < n_subcommands; i++)
        if (strcmp(subcommands[i].name, name) == 0)
            return &subcommands[i];
    return NULL;
}

static void print_usage(FILE *out)
{
    fprintf(out, "Usage: spotwave [GLOBAL OPTIONS] SUBCOMMAND [OPTIONS]\n"
                 "\n"
                 "Images of point sources (spots) on GPUs and CPUs.\n"
                 "\n"
                 "Global options (before the subcommand):\n"
                 "  --backend auto|cpu|cuda  where to compute (default auto: the GPU when one is\n"
                 "                           usable, the CPU otherwise)\n"
                 "  --threads N              CPU threads (default 0: all cores)\n"
                 "  --max-memory SIZE        largest memory one step may ask for because of\n"
                 "                           what an input file or option says (512M, 8G,\n"
                 "                           bytes, or unlimited); a larger request fails with\n"
                 "                           exit 1 before anything is allocated. Default:\n"
                 "                           $SPOTWAVE_MAX_MEMORY, else half of the memory this\n"
                 "                           process may use (physical, cgroup, RLIMIT_AS)\n"
                 "  -q, --quiet              no log messages (failures are still reported)\n"
                 "  -v, --verbose            log messages down to debug level\n"
                 "  -h, --help               print this help and exit\n"
                 "  -V, --version            print the version and exit\n"
                 "\n"
                 "Subcommands:\n");
    for (size_t i = 0; i < n_subcommands; i++)
        fprintf(out, "  %-12s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(
        out,
        "  %-12s %s\n"
        "\n"
        "Methods, by paper (each subcommand's --help gives the sections and equations):\n"
        "  Mocci, Busato, Bombieri, Bonora & Muradore 2020, J. Opt. Soc. Am. A 37(10), 1548:\n"
        "    centroid, the lenslet geometry of sim sh\n"
        "  Mompean, Aragon, Prieto & Artal 2019, Future Gener. Comput. Syst. 91, 177:\n"
        "    pupil, fit, aberrometry, sim eye\n"
        "  Brunner, de Visser, Vuik & Verhaegen 2018, J. Opt. Soc. Am. A 35(6), 859:\n"
        "    sabre, loop\n"
        "  Winter et al. 2018, Acta Cryst. D74, 85 (DIALS); G. Winter 2024, \"CUDA Spotfinding\":\n"
        "    find\n"
        "  Li, Zhang, Zheng & Hu 2012, IEEE IPDPS Workshops, 1879:\n"
        "    sim stars\n"
        "  Thibos et al. 2002, J. Opt. Soc. Am. A 19(12), 2329 and 2004, J. Vision 4(4), 329:\n"
        "    the eye population of sim eye, refraction\n"
        "All of them, with the other references: README.md and CITATION.cff.\n"
        "\n"
        "Every subcommand has --help. Exit codes: 0 success, 1 failure while running,\n"
        "2 usage error.\n",
        "help NAME", "help on a subcommand");
}

/* ------------------------------------------------------------------ messages */

int sw_cli_fail(const char *sub, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "spotwave %s: ", sub);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return SW_EXIT_FAIL;
}

int sw_cli_usage(const char *sub, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, sub ? "spotwave %s: " : "spotwave: ", sub);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (sub)
        fprintf(stderr, " (see 'spotwave %s --help')\n", sub);
    else
        fprintf(stderr, " (see 'spotwave --help')\n");
    return SW_EXIT_USAGE;
}

/* ------------------------------------------------------------------ option parsing */

void sw_cli_getopt_reset(void)
{
#if defined(__GLIBC__)
    optind = 0; /* glibc: full re-initialisation */
#else
    optind = 1;
#endif
    opterr = 0;
}

static const char *const global_long_names[] = {"backend", "threads", "max-memory",
                                                "quiet",   "verbose", "version"};

/* Name of the option in argv[optind - 1] when it is a long one: "--name" without "=value". */
static void long_option_text(const char *arg, char *buf, size_t size)
{
    size_t n = strcspn(arg, "=");
    if (n >= size)
        n = size - 1;
    memcpy(buf, arg, n);
    buf[n] = '\0';
}

const char *sw_cli_option_name(char **argv)
{
    static char name[96];
    const char *prev = optind > 0 ? argv[optind - 1] : "";
    if (optarg && prev == optarg && optind >= 2) /* "--name value": the value stands alone */
        prev = argv[optind - 2];
    if (prev[0] == '-' && prev[1] != '-' && prev[1] != '\0') { /* "-x" or "-xVALUE" */
        snprintf(name, sizeof name, "-%c", prev[1]);
        return name;
    }
    long_option_text(prev, name, sizeof name); /* "--name" or "--name=value" */
    return name;
}

int sw_cli_getopt(const char *sub, int argc, char **argv, const char *shortopts,
                  const struct option *longopts)
{
    char optstring[128];
    snprintf(optstring, sizeof optstring, ":%s", shortopts);
    opterr = 0;
    int c = getopt_long(argc, argv, optstring, longopts, NULL);
    if (c != '?' && c != ':')
        return c;

    const char *prev = (optind > 0 && optind <= argc) ? argv[optind - 1] : "";
    int prev_is_long = strncmp(prev, "--", 2) == 0;
    char name[96];
    if (c == ':') {
        if (prev_is_long) {
            long_option_text(prev, name, sizeof name);
            sw_cli_usage(sub, "option '%s' needs a value", name);
        } else {
            sw_cli_usage(sub, "option '-%c' needs a value", optopt);
        }
        return SW_CLI_OPT_ERROR;
    }
    /* c == '?': an unknown option, or a value given to an option that takes none. */
    if (optopt != 0 && prev_is_long && strchr(prev, '=')) {
        long_option_text(prev, name, sizeof name);
        for (const struct option *o = longopts; o && o->name; o++) {
            if (o->val == optopt && o->has_arg == no_argument && strcmp(o->name, name + 2) == 0) {
                sw_cli_usage(sub, "option '%s' takes no value", name);
                return SW_CLI_OPT_ERROR;
            }
        }
    }
    if (optopt == 0 || optopt > UCHAR_MAX) {
        long_option_text(prev, name, sizeof name);
        for (size_t i = 0; i < sizeof global_long_names / sizeof global_long_names[0]; i++) {
            if (prev_is_long && strcmp(name + 2, global_long_names[i]) == 0) {
                sw_cli_usage(sub, "'%s' is a global option: it goes before the subcommand", name);
                return SW_CLI_OPT_ERROR;
            }
        }
        sw_cli_usage(sub, "unknown option '%s'", name);
    } else {
        sw_cli_usage(sub, "unknown option '-%c'", optopt);
    }
    return SW_CLI_OPT_ERROR;
}

int sw_cli_parse_long(const char *text, long min, long max, long *out)
{
    if (!text || !*text)
        return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int sw_cli_parse_double(const char *text, double *out)
{
    if (!text || !*text)
        return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

int sw_cli_parse_list(const char *text, double *v, int n)
{
    char buf[256];
    if (!text || strlen(text) >= sizeof buf)
        return -1;
    strcpy(buf, text);
    char *p = buf;
    for (int i = 0; i < n; i++) {
        char *comma = strchr(p, ',');
        if ((i < n - 1) != (comma != NULL))
            return -1;
        if (comma)
            *comma = '\0';
        if (sw_cli_parse_double(p, &v[i]) != 0)
            return -1;
        p = comma ? comma + 1 : p;
    }
    return 0;
}

int sw_cli_parse_pair(const char *text, double *a, double *b)
{
    double v[2];
    if (sw_cli_parse_list(text, v, 2) != 0)
        return -1;
    *a = v[0];
    *b = v[1];
    return 0;
}

int sw_cli_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

int sw_cli_out_open(const char *sub, sw_cli_out *o, const char *path)
{
    memset(o, 0, sizeof *o);
    if (!path || strcmp(path, "-") == 0) {
        o->f = stdout;
        return SW_EXIT_OK;
    }
    /* written in the staging folder; main.c moves it into place when the run succeeds */
    path = sw_cli_file_staged("output", path);
    if (!path)
        return SW_EXIT_FAIL;
    o->path = path;
    sw_status st = sw_text_file_open(NULL, path, &o->f, &o->tmp);
    if (st != SW_OK)
        return sw_cli_fail(sub, "%s", sw_cli_lib_error(NULL, st));
    return SW_EXIT_OK;
}

int sw_cli_out_close(const char *sub, sw_cli_out *o, int ok)
{
    if (!o->f)
        return SW_EXIT_OK;
    FILE *f = o->f;
    o->f = NULL;
    if (!o->path) {
        if (ok && (fflush(stdout) != 0 || ferror(stdout)))
            return sw_cli_fail(sub, "cannot write to standard output: %s", strerror(errno));
        return SW_EXIT_OK;
    }
    char *tmp = o->tmp;
    o->tmp = NULL;
    if (!ok) {
        sw_text_file_abort(tmp, f);
        return SW_EXIT_OK;
    }
    sw_status st = sw_text_file_commit(NULL, o->path, tmp, f);
    return st == SW_OK ? SW_EXIT_OK : sw_cli_fail(sub, "%s", sw_cli_lib_error(NULL, st));
}

const char *sw_cli_lib_error(sw_context *ctx, sw_status st)
{
    const char *m = sw_context_error(ctx);
    return (m && *m) ? m : sw_status_string(st);
}

int sw_cli_parse_u64(const char *text, uint64_t *out)
{
    if (!text || !*text || *text == '-' || *text == '+' || *text == ' ')
        return -1;
    /* Decimal, or hex after 0x / 0X. Not base 0: a leading 0 would make "010" octal (8). */
    int base = 10;
    const char *digits = text;
    if (text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        base = 16;
        digits = text + 2;
    }
    /* strtoull accepts a sign, blanks and (base 16) a second 0x prefix: refuse them. */
    if (!isxdigit((unsigned char)digits[0]) ||
        (base == 16 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')))
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(digits, &end, base);
    if (errno != 0 || end == digits || *end != '\0')
        return -1;
    *out = (uint64_t)v;
    return 0;
}

int sw_cli_parse_size(const char *text, int32_t *w, int32_t *h)
{
    if (!text)
        return -1;
    const char *sep = strpbrk(text, "xX,");
    if (!sep || sep == text)
        return -1;
    char first[32];
    size_t n = (size_t)(sep - text);
    if (n >= sizeof first)
        return -1;
    memcpy(first, text, n);
    first[n] = '\0';
    long a, b;
    if (sw_cli_parse_long(first, 1, SW_IMAGE_MAX_DIM, &a) != 0 ||
        sw_cli_parse_long(sep + 1, 1, SW_IMAGE_MAX_DIM, &b) != 0)
        return -1;
    if ((long long)a * b > SW_IMAGE_MAX_PIXELS)
        return -1;
    *w = (int32_t)a;
    *h = (int32_t)b;
    return 0;
}

/* ------------------------------------------------------------------ context and log */

static void log_to_stderr(sw_log_level level, const char *message, void *user)
{
    (void)user;
    fprintf(stderr, "spotwave: %s: %s\n", sw_log_level_string(level), message);
}

int sw_cli_context(const sw_cli_globals *g, const char *sub, sw_context **out)
{
    sw_context_params p;
    sw_context_params_default(&p);
    p.backend = g->backend;
    p.threads = g->threads;
    p.device = g->device;
    p.log = g->quiet ? NULL : log_to_stderr;
    p.log_user = NULL;
    p.log_level = g->verbose ? SW_LOG_DEBUG : SW_LOG_WARN;
    *out = NULL;
    sw_status st = sw_context_create(&p, out);
    if (st != SW_OK) {
        const char *msg = sw_context_error(NULL);
        *out = NULL;
        return sw_cli_fail(sub, "cannot use the %s backend: %s", sw_backend_string(g->backend),
                           (msg && *msg) ? msg : sw_status_string(st));
    }
    if (g->max_memory)
        sw_context_set_memory_limit(*out, g->max_memory);
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ small utilities */

double sw_cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

volatile int sw_cli_stop;

static void on_stop_signal(int sig)
{
    (void)sig;
    sw_cli_stop = 1;
}

void sw_cli_catch_stop(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART; /* file reads and writes go on; the waits see the flag */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int sw_cli_is_hdf5(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return n == sizeof head && memcmp(head, sig, sizeof sig) == 0;
}

void sw_cli_progress_start(sw_cli_progress *p, const char *sub, int on, int quiet, int64_t frames)
{
    p->sub = sub;
    p->on = on == 1 || (on < 0 && !quiet && frames > 1 && isatty(2));
    p->t_start = sw_cli_now();
    p->t_last = 0.0;
}

void sw_cli_progress_update(sw_cli_progress *p, int64_t done, int64_t total)
{
    if (!p->on || total <= 0)
        return;
    double now = sw_cli_now();
    if (done < total && now - p->t_last < 0.1)
        return;
    p->t_last = now;
    const int width = 30;
    int fill = (int)((double)width * (double)done / (double)total);
    fprintf(stderr, "\rspotwave %s: [", p->sub);
    for (int i = 0; i < width; i++)
        fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %lld/%lld frames, %.1f frames/s", (long long)done, (long long)total,
            (double)done / fmax(now - p->t_start, 1e-9));
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

void sw_cli_progress_open_ended(sw_cli_progress *p, int64_t done, int64_t files, int waiting,
                                int last)
{
    if (!p->on)
        return;
    double now = sw_cli_now();
    if (!last && now - p->t_last < 0.1)
        return;
    p->t_last = now;
    /* the line is rewritten in place: trailing blanks clear a longer one before it */
    fprintf(stderr, "\rspotwave %s: %lld frames from %lld files, %.1f frames/s%s        ", p->sub,
            (long long)done, (long long)files, (double)done / fmax(now - p->t_start, 1e-9),
            waiting && !last ? ", waiting" : "");
    if (last)
        fputc('\n', stderr);
    fflush(stderr);
}

int sw_cli_mkdir_p(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = n == 0 ? ENOENT : ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return -1;
    struct stat sb;
    if (stat(buf, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ main */

enum { OPT_BACKEND = 256, OPT_THREADS, OPT_MAX_MEMORY };

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"max-memory", required_argument, NULL, OPT_MAX_MEMORY},
        {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    sw_cli_globals g = {SW_BACKEND_AUTO, 0, 0, 0, 0, 0};
    long v;
    sw_cli_set_command_line(argc, argv); /* for the HISTORY of the FITS files written */

    opterr = 0;
    int c;
    /* '+': stop at the first non-option (the subcommand); ':': report missing values. */
    while ((c = getopt_long(argc, argv, "+:qvhV", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_BACKEND:
            if (sw_backend_parse(optarg, &g.backend) != SW_OK)
                return sw_cli_usage(NULL, "--backend: '%s' is not one of auto, cpu, cuda", optarg);
            break;
        case OPT_THREADS:
            if (sw_cli_parse_long(optarg, 0, 4096, &v) != 0)
                return sw_cli_usage(NULL, "--threads: '%s' is not a whole number in 0..4096",
                                    optarg);
            g.threads = (int)v;
            break;
        case OPT_MAX_MEMORY:
            if (sw_memory_size_parse(optarg, &g.max_memory) != SW_OK)
                return sw_cli_usage(NULL,
                                    "--max-memory: '%s' is not a size (512M, 8G, a number of "
                                    "bytes, or unlimited)",
                                    optarg);
            break;
        case 'q': g.quiet = 1; break;
        case 'v': g.verbose = 1; break;
        case 'h': print_usage(stdout); return SW_EXIT_OK;
        case 'V': printf("spotwave %s\n", sw_version()); return SW_EXIT_OK;
        case ':': {
            const char *prev = argv[optind - 1];
            if (strncmp(prev, "--", 2) == 0)
                return sw_cli_usage(NULL, "option '%s' needs a value", prev);
            return sw_cli_usage(NULL, "option '-%c' needs a value", optopt);
        }
        default: {
            const char *prev = argv[optind - 1];
            if (optopt == 0 || optopt > UCHAR_MAX || strncmp(prev, "--", 2) == 0) {
                char name[96];
                long_option_text(prev, name, sizeof name);
                return sw_cli_usage(NULL, "unknown option '%s'", name);
            }
            return sw_cli_usage(NULL, "unknown option '-%c'", optopt);
        }
        }
    }
    if (g.quiet && g.verbose)
        return sw_cli_usage(NULL, "--quiet and --verbose cannot be used together");
    /* The limit of the library's calls made without a context follows the same setting. */
    const char *env = getenv("SPOTWAVE_MAX_MEMORY");
    uint64_t env_bytes;
    if (!g.max_memory && env && *env && sw_memory_size_parse(env, &env_bytes) != SW_OK)
        return sw_cli_usage(NULL,
                            "SPOTWAVE_MAX_MEMORY='%s' is not a size (512M, 8G, a number of "
                            "bytes, or unlimited)",
                            env);
    if (g.max_memory) {
        char text[32];
        if (g.max_memory == UINT64_MAX)
            snprintf(text, sizeof text, "unlimited");
        else
            snprintf(text, sizeof text, "%llu", (unsigned long long)g.max_memory);
        setenv("SPOTWAVE_MAX_MEMORY", text, 1);
    }
    if (optind >= argc)
        return sw_cli_usage(NULL, "no subcommand given");

    const char *name = argv[optind];
    int rc;
    if (strcmp(name, "help") == 0) {
        if (optind + 1 >= argc) {
            print_usage(stdout);
            rc = SW_EXIT_OK;
        } else if (optind + 2 < argc) {
            return sw_cli_usage(NULL, "help takes one subcommand name");
        } else {
            const sw_subcommand *s = find_subcommand(argv[optind + 1]);
            if (!s)
                return sw_cli_usage(NULL, "unknown subcommand '%s'", argv[optind + 1]);
            s->help(stdout);
            rc = SW_EXIT_OK;
        }
    } else {
        const sw_subcommand *s = find_subcommand(name);
        if (!s)
            return sw_cli_usage(NULL, "unknown subcommand '%s'", name);
        sw_cli_files_begin(name);
        rc = sw_cli_files_end(s->run(&g, argc - optind, argv + optind));
    }

    /* A report that could not be written (full disk, closed pipe) is a failure. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "spotwave %s: cannot write to standard output: %s\n", name,
                strerror(errno));
        return SW_EXIT_FAIL;
    }
    return rc;
}

/*
 * Reads a FITS (2-D or cube; also gzip-compressed, .fits.gz, and tile-compressed, .fz: io.h), PGM,
 * CBF or TIFF image into frames, telling the formats apart by their first bytes; 32-bit integer
 * frames are converted to float when u32_to_f32 is set. `what` names the file in messages.
 */
int sw_cli_read_frames(sw_context *ctx, const char *sub, const char *what, const char *path,
                       int u32_to_f32, sw_frames *out)
{
    return sw_cli_read_frames_ex(ctx, sub, what, path, u32_to_f32, out, NULL, NULL);
}

int sw_cli_read_frames_ex(sw_context *ctx, const char *sub, const char *what, const char *path,
                          int u32_to_f32, sw_frames *out, uint8_t **valid,
                          sw_diffraction_geometry *geom)
{
    memset(out, 0, sizeof *out);
    if (valid)
        *valid = NULL;
    if (geom)
        sw_diffraction_geometry_init(geom);
    FILE *f = fopen(path, "rb");
    if (!f)
        return sw_cli_fail(sub, "%s '%s': %s", what, path, strerror(errno));
    char magic[6] = {0};
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    sw_status st;
    if ((n == 6 && memcmp(magic, "SIMPLE", 6) == 0) ||
        (n >= 2 && (unsigned char)magic[0] == 0x1F && (unsigned char)magic[1] == 0x8B)) {
        st = sw_fits_read(ctx, path, out);
    } else if (n >= 2 && magic[0] == 'P' && magic[1] == '5') {
        out->frames = calloc(1, sizeof *out->frames);
        if (!out->frames)
            return sw_cli_fail(sub, "out of memory");
        st = sw_pgm_read(ctx, path, &out->frames[0]);
        if (st == SW_OK)
            out->count = 1;
        else
            sw_frames_free(out);
    } else if (n == 6 && memcmp(magic, "###CBF", 6) == 0) {
        st = sw_cbf_read_frames(ctx, path, out, valid, geom);
    } else if (n >= 4 && (memcmp(magic, "II*\0", 4) == 0 || memcmp(magic, "MM\0*", 4) == 0 ||
                          memcmp(magic, "II+\0", 4) == 0 || memcmp(magic, "MM\0+", 4) == 0)) {
        st = sw_tiff_read(ctx, path, out);
    } else {
        return sw_cli_fail(sub,
                           "%s '%s' is none of FITS (plain, .gz or .fz), binary PGM (P5), CBF "
                           "(\"###CBF\") or TIFF",
                           what, path);
    }
    if (st != SW_OK)
        return sw_cli_fail(sub, "%s", sw_cli_lib_error(ctx, st));
    for (int32_t i = 0; i < out->count; i++) {
        sw_image *img = &out->frames[i];
        if (!u32_to_f32 || img->type != SW_PIX_U32)
            continue;
        sw_image f32;
        st = sw_image_alloc(ctx, img->width, img->height, SW_PIX_F32, &f32);
        if (st == SW_OK && (st = sw_image_convert(ctx, img, &f32, 1.0, 0.0, NULL)) != SW_OK)
            sw_image_free(&f32);
        if (st != SW_OK) {
            sw_frames_free(out);
            return sw_cli_fail(sub, "%s '%s': %s", what, path, sw_cli_lib_error(ctx, st));
        }
        sw_image_free(img);
        *img = f32;
    }
    return SW_EXIT_OK;
}
