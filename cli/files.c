/*
 * The files a subcommand reads and writes (cli.h, "inputs and outputs").
 *
 * Two promises to the user:
 *  1. An output never replaces an input or another output. Every path given is compared, before
 *     any work, with every other: the same file (device and inode, so links and "./x" count) or
 *     the same resolved name (realpath of the folder plus the name, for files not yet there).
 *  2. Outputs land all or nothing. Each file is written into a staging folder beside its final
 *     place (".spotwave-XXXXXX", made new by mkdtemp for each run, in the same folder, so the
 *     final rename stays inside one file system); only when the subcommand has succeeded is every
 *     final place checked, then every staged file (synced by its writer) renamed over it, the
 *     folder synced after. A failed run removes the staging folders and leaves every file as it
 *     was. A run killed outright leaves a hidden staging folder behind, never a half-written
 *     output, and no later run uses it. Files a library writer creates beside an output (an HDF5
 *     master's linked data files) are staged with it and moved with it. An output that is a
 *     symbolic link is written to the file it points to.
 */
#define _GNU_SOURCE /* realpath, mkdtemp */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct cli_file {
    int output;     /* 1: written by the run, 0: read */
    char *option;   /* "--out", "image", ... (for messages) */
    char *path;     /* as given */
    char *resolved; /* realpath(folder) + "/" + name; NULL: no such folder */
    int exists;     /* stat succeeded */
    dev_t dev;      /* when it exists */
    ino_t ino;
    char *staged; /* outputs: the name it is written under (in the staging folder), once asked */
} cli_file;

typedef struct cli_stage {
    char *dir;   /* the output folder (resolved) */
    char *stage; /* dir + "/.spotwave-XXXXXX" (mkdtemp) */
} cli_stage;

static struct {
    const char *sub;
    cli_file *f; /* every path named, in order */
    int n, cap;
    cli_stage *s; /* one staging folder per output folder */
    int ns, scap;
    int overflow; /* out of memory while naming: sw_cli_files_check refuses */
    int keep;     /* sw_cli_files_keep: move the outputs into place whatever the exit code */
} g_files;

/* "spotwave <sub>: <message>" on stderr; returns code. */
static int report(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int report(int code, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "spotwave %s: ", g_files.sub ? g_files.sub : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Splits path into its folder ("." when none) and its last name. */
static void split_path(const char *path, char *dir, size_t dn, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, dn, ".");
        *base = path;
    } else if (slash == path) {
        snprintf(dir, dn, "/");
        *base = slash + 1;
    } else {
        snprintf(dir, dn, "%.*s", (int)(slash - path), path);
        *base = slash + 1;
    }
}

/* realpath(folder of path) + "/" + name, or NULL when the folder cannot be resolved. */
static char *resolve(const char *path)
{
    char dir[PATH_MAX];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    char *rd = realpath(dir, NULL);
    if (!rd)
        return NULL;
    size_t n = strlen(rd) + strlen(base) + 2;
    char *r = malloc(n);
    if (r)
        snprintf(r, n, "%s%s%s", rd, strcmp(rd, "/") == 0 ? "" : "/", base);
    free(rd);
    return r;
}

static void file_free(cli_file *f)
{
    free(f->option);
    free(f->path);
    free(f->resolved);
    free(f->staged);
    memset(f, 0, sizeof *f);
}

void sw_cli_files_begin(const char *sub)
{
    for (int i = 0; i < g_files.n; i++)
        file_free(&g_files.f[i]);
    for (int i = 0; i < g_files.ns; i++) {
        free(g_files.s[i].dir);
        free(g_files.s[i].stage);
    }
    free(g_files.f);
    free(g_files.s);
    memset(&g_files, 0, sizeof g_files);
    g_files.sub = sub;
}

static cli_file *add(int output, const char *option, const char *path)
{
    if (!path || !*path || strcmp(path, "-") == 0)
        return NULL;
    if (g_files.n == g_files.cap) {
        int cap = g_files.cap ? 2 * g_files.cap : 16;
        cli_file *nf = realloc(g_files.f, (size_t)cap * sizeof *nf);
        if (!nf) {
            g_files.overflow = 1;
            return NULL;
        }
        g_files.f = nf;
        g_files.cap = cap;
    }
    cli_file *f = &g_files.f[g_files.n];
    memset(f, 0, sizeof *f);
    f->output = output;
    f->option = dup_str(option ? option : "file");
    f->path = dup_str(path);
    if (!f->option || !f->path) {
        file_free(f);
        g_files.overflow = 1;
        return NULL;
    }
    f->resolved = resolve(path);
    struct stat sb;
    if (output && lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        /* an output that is a symbolic link: write the file it points to (staged beside that
         * file), so the link stays a link, as a plain write through it would have left it */
        char *target = realpath(path, NULL);
        if (target) {
            free(f->resolved);
            f->resolved = target;
        }
    }
    if (stat(path, &sb) == 0) {
        f->exists = 1;
        f->dev = sb.st_dev;
        f->ino = sb.st_ino;
    }
    g_files.n++;
    return f;
}

void sw_cli_file_in(const char *option, const char *path)
{
    add(0, option, path);
}

void sw_cli_file_out(const char *option, const char *path)
{
    add(1, option, path);
}

static int same_file(const cli_file *a, const cli_file *b)
{
    if (a->exists && b->exists)
        return a->dev == b->dev && a->ino == b->ino;
    return a->resolved && b->resolved && strcmp(a->resolved, b->resolved) == 0;
}

/* The problem with output k, or SW_EXIT_OK. Prints "spotwave <sub>: <why>" and returns `code` when
 * it names an input or an earlier output, SW_EXIT_FAIL when it cannot be written (a folder, a
 * device, a missing or read-only folder: failures of the run, as a failed write always was). */
static int check_one(int k, int code)
{
    const cli_file *o = &g_files.f[k];
    for (int i = 0; i < g_files.n; i++) {
        const cli_file *p = &g_files.f[i];
        if (i == k || (p->output && i > k) || !same_file(o, p))
            continue;
        if (!p->output)
            return report(code,
                          "%s '%s' names the input '%s' (%s): it would be replaced; write "
                          "to another file",
                          o->option, o->path, p->path, p->option);
        return report(code, "%s '%s' and %s '%s' name the same file; give each its own", p->option,
                      p->path, o->option, o->path);
    }
    struct stat sb;
    if (o->exists && stat(o->path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return report(SW_EXIT_FAIL, "%s '%s' is a folder; give a file name", o->option,
                          o->path);
        if (!S_ISREG(sb.st_mode))
            return report(SW_EXIT_FAIL,
                          "%s '%s' is not a regular file (spotwave writes a new file and "
                          "renames it into place); leave the option out to skip this output",
                          o->option, o->path);
    }
    char dir[PATH_MAX];
    const char *base;
    split_path(o->path, dir, sizeof dir, &base);
    if (!*base)
        return report(SW_EXIT_FAIL, "%s '%s' ends in '/'; give a file name", o->option, o->path);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return report(SW_EXIT_FAIL, "%s '%s': the folder '%s' does not exist", o->option, o->path,
                      dir);
    if (access(dir, W_OK | X_OK) != 0)
        return report(SW_EXIT_FAIL, "%s '%s': cannot write in the folder '%s' (%s)", o->option,
                      o->path, dir, strerror(errno));
    return SW_EXIT_OK;
}

int sw_cli_files_check(void)
{
    if (g_files.overflow)
        return report(SW_EXIT_USAGE, "out of memory while checking the file names");
    for (int k = 0; k < g_files.n; k++) {
        if (!g_files.f[k].output)
            continue;
        int rc = check_one(k, SW_EXIT_USAGE);
        if (rc != SW_EXIT_OK)
            return rc;
    }
    return SW_EXIT_OK;
}

/* The staging folder for outputs in `dir` (resolved), created on first use. */
static const char *stage_for(const char *dir)
{
    for (int i = 0; i < g_files.ns; i++)
        if (strcmp(g_files.s[i].dir, dir) == 0)
            return g_files.s[i].stage;
    if (g_files.ns == g_files.scap) {
        int cap = g_files.scap ? 2 * g_files.scap : 4;
        cli_stage *ns = realloc(g_files.s, (size_t)cap * sizeof *ns);
        if (!ns)
            return NULL;
        g_files.s = ns;
        g_files.scap = cap;
    }
    size_t n = strlen(dir) + 48;
    char *stage = malloc(n);
    char *d = dup_str(dir);
    if (!stage || !d) {
        free(stage);
        free(d);
        return NULL;
    }
    /* a new folder of its own (never one a killed run left behind with the same pid: what is in
     * the folder is what gets moved into place) */
    snprintf(stage, n, "%s%s.spotwave-XXXXXX", dir, strcmp(dir, "/") == 0 ? "" : "/");
    if (!mkdtemp(stage)) {
        sw_cli_fail(g_files.sub, "cannot create the staging folder '%s': %s", stage,
                    strerror(errno));
        free(stage);
        free(d);
        return NULL;
    }
    g_files.s[g_files.ns].dir = d;
    g_files.s[g_files.ns].stage = stage;
    g_files.ns++;
    return stage;
}

const char *sw_cli_file_staged(const char *option, const char *path)
{
    if (!path || strcmp(path, "-") == 0)
        return path;
    int k = -1;
    for (int i = 0; i < g_files.n && k < 0; i++)
        if (g_files.f[i].output && strcmp(g_files.f[i].path, path) == 0)
            k = i;
    if (k < 0) {
        /* A name made during the run (a map per frame, a prefix's files): checked now, before
         * it is written; nothing has been renamed into place yet, so refusing harms nothing. */
        if (!add(1, option, path))
            return report(SW_EXIT_FAIL, "out of memory"), NULL;
        k = g_files.n - 1;
        if (check_one(k, SW_EXIT_FAIL) != SW_EXIT_OK) {
            file_free(&g_files.f[k]);
            g_files.n--;
            return NULL;
        }
    }
    cli_file *f = &g_files.f[k];
    if (f->staged)
        return f->staged;
    if (!f->resolved) {
        f->resolved = resolve(f->path);
        if (!f->resolved) {
            sw_cli_fail(g_files.sub, "%s '%s': its folder cannot be found", f->option, f->path);
            return NULL;
        }
    }
    const char *slash = strrchr(f->resolved, '/');
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash == f->resolved ? 1 : (int)(slash - f->resolved),
             f->resolved);
    const char *stage = stage_for(dir);
    if (!stage)
        return NULL;
    size_t n = strlen(stage) + strlen(slash) + 1;
    f->staged = malloc(n);
    if (!f->staged)
        return NULL;
    snprintf(f->staged, n, "%s%s", stage, slash);
    return f->staged;
}

/* Syncs a folder's entries (the renames into it) to disk. */
static void sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

enum { STAGE_CHECK, STAGE_MOVE, STAGE_REMOVE };

/* A staged file's final place `to` may be taken: not an input (a file a writer added beside an
 * output, such as an HDF5 master's data files, was not named before) and not a folder. */
static int target_ok(const char *to)
{
    struct stat sb;
    if (lstat(to, &sb) != 0)
        return 1;
    if (S_ISDIR(sb.st_mode)) {
        report(SW_EXIT_FAIL, "cannot write '%s': it is a folder", to);
        return 0;
    }
    if (stat(to, &sb) != 0)
        return 1;
    for (int i = 0; i < g_files.n; i++) {
        const cli_file *f = &g_files.f[i];
        if (!f->output && f->exists && f->dev == sb.st_dev && f->ino == sb.st_ino) {
            report(SW_EXIT_FAIL, "the output '%s' would replace the input '%s' (%s)", to, f->path,
                   f->option);
            return 0;
        }
    }
    return 1;
}

/* One pass over a staging folder: check every file's final place, move every file into it, or
 * remove every file (and then the folder). Returns 0, or -1 when a check or a move failed. */
static int stage_pass(const cli_stage *s, int what)
{
    DIR *d = opendir(s->stage);
    if (!d)
        return what == STAGE_REMOVE ? 0 : -1;
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char from[PATH_MAX], to[PATH_MAX];
        if (snprintf(from, sizeof from, "%s/%s", s->stage, e->d_name) >= (int)sizeof from ||
            snprintf(to, sizeof to, "%s%s%s", s->dir, strcmp(s->dir, "/") == 0 ? "" : "/",
                     e->d_name) >= (int)sizeof to) {
            bad = 1;
            continue;
        }
        if (what == STAGE_REMOVE) {
            unlink(from);
        } else if (what == STAGE_CHECK) {
            bad |= !target_ok(to);
        } else if (rename(from, to) != 0) {
            report(SW_EXIT_FAIL, "cannot move '%s' into place: %s", to, strerror(errno));
            bad = 1;
        }
    }
    closedir(d);
    if (what == STAGE_MOVE && !bad)
        sync_dir(s->dir); /* the renames themselves */
    if (what == STAGE_REMOVE || (what == STAGE_MOVE && !bad))
        rmdir(s->stage);
    return bad ? -1 : 0;
}

void sw_cli_files_keep(void)
{
    g_files.keep = 1;
}

int sw_cli_files_end(int rc)
{
    const int exit_code = rc;
    if (g_files.keep)
        rc = SW_EXIT_OK;
    /* Every staged file is complete and on disk before any is renamed: the library's writers and
     * plot.c sync and close each file before returning (io_internal.h's sw_io_tmp_rename). Every
     * final place is checked before the first rename, so a refusal moves nothing. */
    for (int i = 0; rc == SW_EXIT_OK && i < g_files.ns; i++)
        if (stage_pass(&g_files.s[i], STAGE_CHECK) != 0)
            rc = SW_EXIT_FAIL;
    for (int i = 0; rc == SW_EXIT_OK && i < g_files.ns; i++)
        if (stage_pass(&g_files.s[i], STAGE_MOVE) != 0)
            rc = SW_EXIT_FAIL; /* a rename within one file system failed: rare, and reported */
    for (int i = 0; i < g_files.ns; i++)
        stage_pass(&g_files.s[i], STAGE_REMOVE); /* what is left after a failure */
    sw_cli_files_begin(g_files.sub);
    return rc == SW_EXIT_OK ? exit_code : rc;
}
