/*
 * A folder watched for image files as a detector writes them (cli.h, "following a folder"): the
 * folder listed every poll, a file taken once its size and modification time have stayed the
 * same from one poll to the next (or at once when it was renamed into place: then it is complete
 * on the next poll too), files taken in name order, each once.
 */
#define _GNU_SOURCE /* fnmatch's FNM_CASEFOLD */

#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A file seen in the folder. */
typedef struct follow_entry {
    char *name;
    long long size, mtime_ns; /* at the last poll that saw it */
    int stable;               /* the last two polls saw the same size and time */
    int taken;                /* given to the caller (or skipped: it is not a regular file) */
    int seen;                 /* seen by the current poll */
} follow_entry;

struct sw_cli_follow {
    char *dir;
    char *pattern; /* NULL: the image names (SW_CLI_FOLLOW_IMAGES) */
    double poll_s;
    follow_entry *e; /* sorted by name */
    size_t n, cap;
    char *path; /* the last file given */
    size_t path_cap;
    dev_t skip_dev[8]; /* files never taken (the run's own outputs) */
    ino_t skip_ino[8];
    int nskip;
    double last_poll;
};

/* The image names a folder is followed for by default: what spotwave reads (the case of the
 * extension does not matter). Eiger data files (name_data_000001.h5) are read through their
 * master and are not taken on their own. */
static const char *const image_patterns[] = {"*.cbf",     "*.tif",  "*.tiff", "*.h5",  "*.hdf5",
                                             "*.nxs",     "*.fits", "*.fit",  "*.fts", "*.fits.gz",
                                             "*.fits.fz", "*.fz",   "*.pgm"};

static int wanted(const sw_cli_follow *f, const char *name)
{
    if (name[0] == '.') /* hidden: writers' temporary names, spotwave's staging folders */
        return 0;
    if (f->pattern)
        return fnmatch(f->pattern, name, 0) == 0;
    if (fnmatch("*_data_[0-9][0-9][0-9][0-9][0-9][0-9].h5", name, 0) == 0)
        return 0;
    for (size_t i = 0; i < sizeof image_patterns / sizeof image_patterns[0]; i++)
        if (fnmatch(image_patterns[i], name, FNM_CASEFOLD) == 0)
            return 1;
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const follow_entry *)a)->name, ((const follow_entry *)b)->name);
}

/* The entry named name among the first n (sorted) ones, or NULL. */
static follow_entry *lookup(sw_cli_follow *f, size_t n, const char *name)
{
    follow_entry key;
    memset(&key, 0, sizeof key);
    key.name = (char *)(uintptr_t)name;
    return n ? bsearch(&key, f->e, n, sizeof *f->e, cmp_entry) : NULL;
}

int sw_cli_follow_open(const char *sub, const char *dir, const char *pattern, double poll_s,
                       sw_cli_follow **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return sw_cli_fail(sub, "--follow '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return sw_cli_fail(sub, "--follow '%s' is not a folder", dir);
    sw_cli_follow *f = calloc(1, sizeof *f);
    if (!f)
        return sw_cli_fail(sub, "out of memory");
    f->dir = strdup(dir);
    f->pattern = pattern ? strdup(pattern) : NULL;
    f->poll_s = poll_s;
    f->last_poll = -1e300;
    if (!f->dir || (pattern && !f->pattern)) {
        sw_cli_follow_close(f);
        return sw_cli_fail(sub, "out of memory");
    }
    *out = f;
    return SW_EXIT_OK;
}

void sw_cli_follow_skip(sw_cli_follow *f, const char *path)
{
    struct stat sb;
    if (!f || !path || f->nskip >= 8 || stat(path, &sb) != 0)
        return;
    f->skip_dev[f->nskip] = sb.st_dev;
    f->skip_ino[f->nskip] = sb.st_ino;
    f->nskip++;
}

void sw_cli_follow_close(sw_cli_follow *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->e[i].name);
    free(f->e);
    free(f->dir);
    free(f->pattern);
    free(f->path);
    free(f);
}

/* dir + "/" + name into f->path. */
static int set_path(sw_cli_follow *f, const char *name)
{
    size_t need = strlen(f->dir) + strlen(name) + 2;
    if (need > f->path_cap) {
        char *p = realloc(f->path, need);
        if (!p)
            return -1;
        f->path = p;
        f->path_cap = need;
    }
    snprintf(f->path, need, "%s/%s", f->dir, name);
    return 0;
}

/* One listing of the folder: new names added, every untaken file's size and time compared
 * with the last poll's. 0, or -1 (errno) when the folder cannot be read. */
static int poll_dir(sw_cli_follow *f)
{
    DIR *d = opendir(f->dir);
    if (!d)
        return -1;
    for (size_t i = 0; i < f->n; i++)
        f->e[i].seen = 0;
    size_t old_n = f->n;
    struct dirent *de;
    int bad = 0;
    while ((de = readdir(d)) != NULL && !bad) {
        if (!wanted(f, de->d_name))
            continue;
        follow_entry *e = lookup(f, old_n, de->d_name);
        if (e && e->taken)
            continue;
        /* new names go after the sorted part until the listing ends (a name appears once in a
         * listing), sorted in after it */
        if (!e) {
            if (f->n == f->cap) {
                size_t cap = f->cap ? 2 * f->cap : 64;
                follow_entry *ne = realloc(f->e, cap * sizeof *ne);
                if (!ne) {
                    bad = 1;
                    break;
                }
                f->e = ne;
                f->cap = cap;
            }
            e = &f->e[f->n];
            memset(e, 0, sizeof *e);
            e->name = strdup(de->d_name);
            if (!e->name) {
                bad = 1;
                break;
            }
            e->size = -1;
            f->n++;
        }
        struct stat sb;
        if (set_path(f, e->name) != 0) {
            bad = 1;
            break;
        }
        if (stat(f->path, &sb) != 0) { /* gone again (a writer's rename) */
            e->size = -1;
            e->stable = 0;
            continue;
        }
        e->seen = 1;
        int skip = !S_ISREG(sb.st_mode);
        for (int k = 0; k < f->nskip; k++)
            skip |= sb.st_dev == f->skip_dev[k] && sb.st_ino == f->skip_ino[k];
        if (skip) {
            e->taken = 1;
            continue;
        }
        const long long mt = (long long)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
        e->stable = sb.st_size > 0 && e->size == (long long)sb.st_size && e->mtime_ns == mt;
        e->size = (long long)sb.st_size;
        e->mtime_ns = mt;
    }
    closedir(d);
    if (bad) {
        errno = ENOMEM;
        return -1;
    }
    if (f->n != old_n)
        qsort(f->e, f->n, sizeof *f->e, cmp_entry);
    /* a file no longer listed starts over when it comes back */
    for (size_t i = 0; i < f->n; i++)
        if (!f->e[i].seen && !f->e[i].taken) {
            f->e[i].size = -1;
            f->e[i].stable = 0;
        }
    return 0;
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !sw_cli_stop)
        ;
}

int sw_cli_follow_next(const char *sub, sw_cli_follow *f, double idle_s, void (*waiting)(void *),
                       void *user, const char **path)
{
    *path = NULL;
    const double t0 = sw_cli_now();
    for (;;) {
        if (sw_cli_stop)
            return 0;
        /* the first complete file in name order among those of the last poll */
        for (size_t i = 0; i < f->n; i++) {
            follow_entry *e = &f->e[i];
            if (!e->taken && e->stable) {
                e->taken = 1;
                if (set_path(f, e->name) != 0) {
                    sw_cli_fail(sub, "out of memory");
                    return -1;
                }
                *path = f->path;
                return 1;
            }
        }
        const double now = sw_cli_now();
        if (idle_s > 0 && now - t0 >= idle_s)
            return 0;
        /* polls poll_s apart: the sizes compared are poll_s apart at least */
        const double wait = f->last_poll + f->poll_s - now;
        if (wait > 0) {
            if (waiting)
                waiting(user);
            /* short naps, so that a stop or the idle limit is seen soon */
            double step = wait < 0.05 ? wait : 0.05;
            if (idle_s > 0 && t0 + idle_s - now < step)
                step = t0 + idle_s - now > 0 ? t0 + idle_s - now : 0;
            nap(step);
            continue;
        }
        f->last_poll = sw_cli_now();
        if (poll_dir(f) != 0) {
            sw_cli_fail(sub, "--follow: cannot read the folder '%s': %s", f->dir, strerror(errno));
            return -1;
        }
    }
}
