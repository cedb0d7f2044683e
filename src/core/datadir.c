/*
 * sw_data_dir: where the data files are at run time (core.h gives the order). An installed
 * command and library find share/spotwave beside themselves, so a prefix can be moved whole.
 */
#define _GNU_SOURCE /* dladdr */

#include "core_internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SW_DATA_DIR
#define SW_DATA_DIR "data"
#endif
#ifndef SW_BUILD_DIR
#define SW_BUILD_DIR "/nonexistent"
#endif
#ifndef SW_INSTALL_DATA_DIR
#define SW_INSTALL_DATA_DIR "/usr/local/share/spotwave"
#endif

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The folder holding the code of this function: libspotwave.so's, or the executable's when the
 * static archive was linked into it. Empty when neither can be told. */
static void own_folder(char *buf, size_t size)
{
    buf[0] = '\0';
    char path[PATH_MAX] = "";
    Dl_info info;
    if (dladdr((void *)&sw_data_dir, &info) && info.dli_fname && strchr(info.dli_fname, '/') &&
        strstr(info.dli_fname, ".so")) {
        if (!realpath(info.dli_fname, path))
            path[0] = '\0';
    }
    if (!path[0]) {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0)
            return;
        path[n] = '\0';
    }
    char *slash = strrchr(path, '/');
    if (!slash)
        return;
    *slash = '\0';
    if ((size_t)snprintf(buf, size, "%s", path) >= size)
        buf[0] = '\0';
}

sw_status sw_data_dir(sw_context *ctx, char *buf, size_t size)
{
    if (!buf || size == 0)
        return sw_fail(ctx, SW_EINVAL, "sw_data_dir: NULL or empty buffer");
    const char *env = getenv("SPOTWAVE_DATA_DIR");
    if (env && *env) {
        if ((size_t)snprintf(buf, size, "%s", env) >= size)
            return sw_fail(ctx, SW_EINVAL, "SPOTWAVE_DATA_DIR '%s' is too long", env);
        return SW_OK;
    }
    char own[PATH_MAX];
    own_folder(own, sizeof own);
    char cand[5][PATH_MAX + 32];
    int n = 0;
    /* A program of the build tree (tests, the command before it is installed) uses the data of
     * the source tree it was built from, not an older installed copy. */
    if (own[0] && strncmp(own, SW_BUILD_DIR, strlen(SW_BUILD_DIR)) == 0)
        snprintf(cand[n++], sizeof cand[0], "%s", SW_DATA_DIR);
    if (own[0]) {
        snprintf(cand[n++], sizeof cand[0], "%s/../share/spotwave", own);
        snprintf(cand[n++], sizeof cand[0], "%s/data", own);
    }
    snprintf(cand[n++], sizeof cand[0], "%s", SW_INSTALL_DATA_DIR);
    snprintf(cand[n++], sizeof cand[0], "%s", SW_DATA_DIR);
    for (int i = 0; i < n; i++) {
        if (!is_dir(cand[i]))
            continue;
        char real[PATH_MAX];
        const char *found = realpath(cand[i], real) ? real : cand[i];
        if ((size_t)snprintf(buf, size, "%s", found) >= size)
            return sw_fail(ctx, SW_EINVAL, "data folder '%s' is too long", found);
        return SW_OK;
    }
    char looked[5 * (PATH_MAX + 34)] = "";
    for (int i = 0; i < n; i++) {
        strcat(looked, i ? ", " : "");
        strcat(looked, cand[i]);
    }
    return sw_fail(ctx, SW_EIO,
                   "spotwave's data files were not found (looked in %s); set SPOTWAVE_DATA_DIR "
                   "to the folder that holds ocular/",
                   looked);
}
