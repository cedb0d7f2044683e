/*
 * HDF5 frames in the layout Eiger detectors write (NeXus NXmx), read and written through the HDF5
 * C library (io.h, section "HDF5 (Eiger / NeXus)").
 *
 * Reading (hdf5_internal.h says why it is split this way): the file's structure is walked in a
 * child process (hdf5_walk.c), which sends back the datasets, their shapes, types, filters and
 * the address and size of every chunk (up to H5_LIST_MAX per dataset; beyond, chunks are looked
 * up here when read, with H5Dread_chunk); the frames are then read here with pread and decoded
 * without HDF5 (hdf5_chunks.c: deflate, shuffle, bitshuffle/LZ4 with every size checked). Layouts
 * not decoded here (compact datasets, other filters, virtual datasets) are read through HDF5 as
 * before: one hyperslab [index, 0:height, 0:width] of the block straight into the caller's image.
 *
 * HDF5 prints its error stack on stderr by default: every public function here switches that
 * off while it runs (and restores the caller's setting), and failures quote the innermost
 * description of HDF5's error stack in our own message instead.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/bitshuffle.h"
#include "io/hdf5_internal.h"
#include "io/isolate.h"

#include <limits.h>
#include <math.h>

#define FILTER_BSHUF    H5_FILTER_BSHUF
#define BSHUF_LZ4       H5_BSHUF_LZ4
#define DEFLATE_LEVEL   4 /* gzip level of SW_H5_DEFLATE */
#define MAX_BLOCKS      H5_MAX_BLOCKS
#define MASK_SLAB_BYTES (8u << 20) /* pixel mask read in slabs of rows of about this size */

/* ------------------------------------------------------------------ HDF5 errors, quietly */

/* The caller's automatic error handler, saved while a spotwave call runs with it off. */
typedef struct h5_quiet {
    H5E_auto2_t func;
    void *data;
    int saved;
} h5_quiet;

static void quiet_begin(h5_quiet *q)
{
    q->func = NULL;
    q->data = NULL;
    q->saved = H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data) >= 0;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void quiet_end(const h5_quiet *q)
{
    if (q->saved)
        H5Eset_auto2(H5E_DEFAULT, q->func, q->data);
}

typedef struct h5_errwalk {
    char *buf;
    size_t size;
} h5_errwalk;

/* Walking upward, entry 0 is where HDF5 detected the error: the first non-empty description is
 * the most specific one. */
static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    h5_errwalk *w = data;
    (void)n;
    if (w->buf[0] == '\0' && e->desc && e->desc[0] != '\0')
        snprintf(w->buf, w->size, "%s", e->desc);
    return 0;
}

/* The innermost description on HDF5's error stack, into buf (call right after the failing HDF5
 * call, before any other HDF5 API call clears the stack). */
static const char *h5_detail(char *buf, size_t size)
{
    h5_errwalk w = {buf, size};
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &w);
    if (buf[0] == '\0')
        snprintf(buf, size, "no reason given by HDF5");
    return buf;
}

static void close_id(hid_t *id, herr_t (*fn)(hid_t))
{
    if (*id >= 0)
        fn(*id);
    *id = -1;
}

/* For the fallback's link access: HDF5 follows no external link by itself (io.h). */
static herr_t deny_elink(const char *parent_file, const char *parent_group, const char *child_file,
                         const char *child_object, unsigned *acc_flags, hid_t fapl, void *data)
{
    (void)parent_file;
    (void)parent_group;
    (void)child_file;
    (void)child_object;
    (void)acc_flags;
    (void)fapl;
    (void)data;
    return -1;
}

static hid_t native_type(sw_pixel_type t)
{
    switch (t) {
    case SW_PIX_U8: return H5T_NATIVE_UINT8;
    case SW_PIX_U16: return H5T_NATIVE_UINT16;
    default: return H5T_NATIVE_UINT32;
    }
}

static hid_t file_type(sw_pixel_type t)
{
    switch (t) {
    case SW_PIX_U8: return H5T_STD_U8LE;
    case SW_PIX_U16: return H5T_STD_U16LE;
    default: return H5T_STD_U32LE;
    }
}

/* Where this HDF5 looks for filter plugins, "a:b:c", for messages. */
static void plugin_paths(char *buf, size_t size)
{
    buf[0] = '\0';
    unsigned n = 0;
    if (H5PLsize(&n) < 0)
        n = 0;
    size_t used = 0;
    for (unsigned i = 0; i < n && used + 2 < size; i++) {
        char p[512];
        if (H5PLget(i, p, sizeof p) <= 0)
            continue;
        int k = snprintf(buf + used, size - used, "%s%s", used ? ":" : "", p);
        if (k < 0)
            break;
        used += (size_t)k < size - used ? (size_t)k : size - used - 1;
    }
    if (buf[0] == '\0')
        snprintf(buf, size, "(none)");
}

/* How to get the plugin of a filter that is missing. */
static const char *filter_hint(unsigned id)
{
    switch (id) {
    case 32008:
        return "bitshuffle/LZ4 is the filter Eiger detectors use; on Debian/Ubuntu install the "
               "packages bitshuffle and hdf5-filter-plugin (plugin libh5bshuf.so)";
    case 32004: return "LZ4; on Debian/Ubuntu install the package hdf5-filter-plugin (libh5lz4.so)";
    case 307: return "bzip2; on Debian/Ubuntu install the package hdf5-filter-plugin (libh5bz2.so)";
    case 32000: return "LZF; on Debian/Ubuntu install the package bitshuffle (libh5LZF.so)";
    default:
        return "install an HDF5 filter plugin that provides it (the HDF Group keeps the list of "
               "registered filter ids)";
    }
}

/* 1 when filter id can be loaded here (from a plugin if need be) for the direction asked. */
static int filter_usable(H5Z_filter_t id, unsigned need)
{
    if (H5Zfilter_avail(id) <= 0)
        return 0;
    unsigned cfg = 0;
    if (H5Zget_filter_info(id, &cfg) < 0)
        return 0;
    return (cfg & need) == need;
}

int sw_h5_bitshuffle_available(void)
{
    h5_quiet q;
    quiet_begin(&q);
    int ok = filter_usable(FILTER_BSHUF,
                           H5Z_FILTER_CONFIG_ENCODE_ENABLED | H5Z_FILTER_CONFIG_DECODE_ENABLED);
    H5Eclear2(H5E_DEFAULT);
    quiet_end(&q);
    return ok;
}

/* ------------------------------------------------------------------ options */

void sw_h5_options_default(sw_h5_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->timeout_s = SW_H5_WALK_TIMEOUT;
}

/* ------------------------------------------------------------------ the walk, in a child */

#define WALK_MESSAGE_MAX ((size_t)512 << 20) /* the chunk list of 16 M chunks fits */

/* Built with AddressSanitizer (gcc says so with a macro, clang with __has_feature). */
#if defined(__SANITIZE_ADDRESS__)
#define SW_H5_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SW_H5_SANITIZED 1
#endif
#endif

#ifdef SW_H5_SANITIZED
/* AddressSanitizer's default suppressions in such a build: a memcpy or string call that libhdf5
 * itself makes past a buffer of a corrupt file's message (fuzz_h5 found H5Aexists copying an
 * attribute message past its end: libhdf5's own bug) is not reported, as a crash of libhdf5 in
 * the walk's child is the expected SW_EFORMAT; a report from spotwave's own code still aborts
 * (walk_file). The runtime looks this function up: clang's, which the fuzz targets link, finds
 * it here (the version script exports it); gcc's shared libasan finds only an executable's. */
__attribute__((visibility("default"))) const char *__asan_default_suppressions(void);
const char *__asan_default_suppressions(void)
{
    return "interceptor_via_lib:libhdf5\n";
}
#endif

/* Memory the walk's child may take beyond what it inherits: a corrupt size in a file makes
 * libhdf5 allocate (and fill) gigabytes; with this limit the allocation fails instead. */
#define WALK_MEMORY ((size_t)2 << 30)

typedef struct walk_job {
    const char *path;
    const h5_walk_opts *wo;
} walk_job;

/* The walk and its layout packed into a message (isolate.h's work: run in the child). */
static int walk_message(void *arg, uint8_t **msg, size_t *size)
{
    const walk_job *j = arg;
    h5_layout w;
    h5_walk(j->path, j->wo, &w);
    *msg = h5_layout_pack(&w, size);
    h5_layout_free(&w);
    return *msg ? 0 : -1;
}

/*
 * The walk over path, in a child process (isolate.h) unless in_process (or fork fails: then here,
 * with a warning): *l is the layout, checked on arrival. A child that crashes, fails or takes
 * longer than timeout seconds gives SW_EFORMAT with the reason in l->msg.
 */
static sw_status walk_file(sw_context *ctx, const char *path, const h5_walk_opts *wo,
                           double timeout, int in_process, h5_layout *l)
{
    walk_job job = {path, wo};
    uint8_t *msg = NULL;
    size_t size = 0;
    int rc;
    sw_isolated r;
    memset(&r, 0, sizeof r);
    if (in_process) {
        rc = walk_message(&job, &msg, &size) == 0 ? 0 : -2;
    } else {
        rc = sw_isolated_run(walk_message, &job, timeout > 0.0 ? timeout : SW_H5_WALK_TIMEOUT,
                             WALK_MEMORY, WALK_MESSAGE_MAX, &r);
        if (r.in_process)
            sw_log(ctx, SW_LOG_WARN,
                   "%s: cannot start the isolated HDF5 walk (no fork or pipe): walked here", path);
#ifdef SW_H5_SANITIZED
        /* HDF5's own faults end the child with a signal; an exit code other than the walk's own
         * (3: out of memory, 4: the pipe failed) is a sanitizer's report about spotwave's code in
         * the child: make it a failure the tests and fuzzers see. */
        if (rc == -1 && r.exit_code > 0 && r.exit_code != 3 && r.exit_code != 4) {
            fprintf(stderr, "HDF5 walk child of %s: %s\n", path, r.stderr_tail);
            abort();
        }
#endif
        msg = r.msg;
        size = r.size;
    }
    if (rc != 0) {
        free(msg);
        memset(l, 0, sizeof *l);
        l->mask.hd = -1;
        l->st = rc == -2 ? SW_ENOMEM : SW_EFORMAT;
        if (rc == -2)
            snprintf(l->msg, sizeof l->msg, "%s: out of memory reading the file's structure", path);
        else
            snprintf(l->msg, sizeof l->msg,
                     "%s: reading the file's structure: %s (the file is "
                     "corrupt, or HDF5 failed on it)",
                     path, r.why);
        return l->st;
    }
    sw_status st = h5_layout_unpack(msg, size, l);
    free(msg);
    if (st != SW_OK && l->msg[0] != '\0' && strncmp(l->msg, path, strlen(path)) != 0 &&
        st == SW_EFORMAT) {
        /* a message that does not hold together: say so with the file's name */
        char m[SW_ERROR_MAX];
        snprintf(m, sizeof m, "%s", l->msg);
        snprintf(l->msg, sizeof l->msg, "%.300s: corrupt structure (%.700s)", path, m);
    }
    return st;
}

/* ------------------------------------------------------------------ the reader */

struct sw_h5_reader {
    sw_context *ctx;
    char *path;
    h5_layout l;
    sw_h5_info info;
    int links_anywhere;
    int fd;           /* the open file of the last own read, or -1 */
    uint32_t fd_file; /* ... its index                               */
    h5_scratch scratch;
    uint8_t *cache; /* a decoded chunk that covers several frames   */
    size_t cache_cap;
    int64_t cache_id;
    const h5_dset *cache_owner;
    char error[SW_ERROR_MAX];
};

/* Records a failure in the reader (for sw_h5_reader_error) and in its context. */
static sw_status reader_fail(sw_h5_reader *r, sw_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static sw_status reader_fail(sw_h5_reader *r, sw_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
    return sw_fail(r->ctx, st, "%s", r->error);
}

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

static void reader_free(sw_h5_reader *r)
{
    if (r->fd >= 0)
        close(r->fd);
    h5_layout_free(&r->l);
    h5_scratch_free(&r->scratch);
    free(r->cache);
    free(r->path);
    free(r);
}

/* The walk's EUNSUPPORTED message "path\nname\nid\nfilter name" as a sentence with a hint. */
static void unsupported_message(sw_h5_reader *r, const char *raw)
{
    char buf[SW_ERROR_MAX], *part[4] = {NULL, NULL, NULL, NULL};
    snprintf(buf, sizeof buf, "%s", raw);
    char *s = buf;
    for (int i = 0; i < 4 && s; i++) {
        part[i] = s;
        s = strchr(s, '\n');
        if (s)
            *s++ = '\0';
    }
    if (!part[3]) {
        reader_fail(r, SW_EUNSUPPORTED, "%s", raw);
        return;
    }
    char paths[1024];
    plugin_paths(paths, sizeof paths);
    unsigned id = (unsigned)strtoul(part[2], NULL, 10);
    reader_fail(r, SW_EUNSUPPORTED,
                "%s: %s is compressed with HDF5 filter %u (\"%s\"), which this HDF5 cannot load: "
                "%s, or set HDF5_PLUGIN_PATH to the folder that holds the plugin (searched: %s)",
                part[0], part[1], id, part[3], filter_hint(id), paths);
}

sw_status sw_h5_open_ex(sw_context *ctx, const char *path, const sw_h5_options *opts,
                        sw_h5_reader **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: out is NULL");
    *out = NULL;
    if (!path || !path[0])
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: no file name given");
    sw_h5_options o;
    sw_h5_options_default(&o);
    if (opts)
        o = *opts;
    if (o.dataset && !o.dataset[0])
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: %s: empty dataset name", path);
    if (o.dataset && strlen(o.dataset) + 1 >= H5_PATH_MAX)
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: %s: dataset name too long", path);
    char dset[H5_PATH_MAX];
    if (o.dataset) {
        /* paths inside the file start at its root */
        snprintf(dset, sizeof dset, "%s%s", o.dataset[0] == '/' ? "" : "/", o.dataset);
        o.dataset = dset;
    }
    if (!isfinite(o.timeout_s) || o.timeout_s < 0.0)
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: %s: timeout %g s is not >= 0", path,
                       o.timeout_s);
    if (strlen(path) >= H5_FILE_MAX)
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: %s: file name too long", path);
    if (o.threads < 0)
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: %s: %d threads (0: the context's)", path,
                       o.threads);

    /* Existence and readability first, so those are SW_EIO with the system's reason. */
    struct stat sb;
    if (stat(path, &sb) != 0)
        return sw_fail(ctx, SW_EIO, "%s: cannot open the file (%s)", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return sw_fail(ctx, SW_EIO, "%s: is a directory, not an HDF5 file", path);
    /* (a FIFO or a device would block or never end) */
    if (!S_ISREG(sb.st_mode))
        return sw_fail(ctx, SW_EIO, "%s: not a regular file", path);
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return sw_fail(ctx, SW_EIO, "%s: cannot open the file (%s)", path, strerror(errno));
    close(fd);

    sw_h5_reader *r = calloc(1, sizeof *r);
    if (!r)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    r->ctx = ctx;
    r->fd = -1;
    r->cache_id = -1;
    r->links_anywhere = o.links_anywhere != 0;
    r->scratch.threads = o.threads > 0 ? o.threads : sw_context_threads(ctx);
    r->l.mask.hd = -1;
    r->path = dup_string(path);
    if (!r->path) {
        free(r);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    }
    h5_walk_opts wo = {o.dataset, o.link_dirs, o.links_anywhere != 0};
    sw_status st = walk_file(ctx, path, &wo, o.timeout_s, o.in_process, &r->l);
    for (uint32_t i = 0; i < r->l.nwarnings; i++)
        sw_log(ctx, SW_LOG_WARN, "%s", r->l.warnings[i]);
    if (st == SW_EUNSUPPORTED && strchr(r->l.msg, '\n'))
        unsupported_message(r, r->l.msg);
    else if (st != SW_OK)
        reader_fail(r, st, "%s", r->l.msg);
    if (st != SW_OK) {
        reader_free(r);
        return st;
    }
    sw_h5_info *in = &r->info;
    const h5_dset *b0 = &r->l.blocks[0];
    in->width = (int32_t)b0->dims[2];
    in->height = (int32_t)b0->dims[1];
    in->type = b0->esize == 1 ? SW_PIX_U8 : b0->esize == 2 ? SW_PIX_U16 : SW_PIX_U32;
    in->blocks = (int32_t)r->l.nblocks;
    for (uint32_t i = 0; i < r->l.nblocks; i++) {
        in->frames += (int64_t)r->l.blocks[i].dims[0];
        in->compressed |= r->l.blocks[i].filtered != 0;
    }
    in->overload = r->l.overload;
    in->has_pixel_mask = r->l.has_mask;
    r->error[0] = '\0';
    *out = r;
    return SW_OK;
}

sw_status sw_h5_open(sw_context *ctx, const char *path, const char *dataset, sw_h5_reader **out)
{
    sw_h5_options o;
    sw_h5_options_default(&o);
    o.dataset = dataset;
    if (dataset && !dataset[0]) {
        if (out)
            *out = NULL;
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: %s: empty dataset name", path ? path : "");
    }
    return sw_h5_open_ex(ctx, path, &o, out);
}

sw_status sw_h5_get_info(const sw_h5_reader *r, sw_h5_info *info)
{
    if (!r || !info)
        return sw_fail(r ? r->ctx : NULL, SW_EINVAL, "sw_h5_get_info: %s is NULL",
                       r ? "info" : "the reader");
    *info = r->info;
    return SW_OK;
}

sw_status sw_h5_read_geometry(const sw_h5_reader *r, sw_diffraction_geometry *g)
{
    if (!g)
        return sw_error_set(NULL, SW_EINVAL, "sw_h5_read_geometry: NULL geometry");
    sw_diffraction_geometry_init(g);
    if (!r)
        return sw_error_set(NULL, SW_EINVAL, "sw_h5_read_geometry: NULL reader");
    *g = r->l.geom;
    return SW_OK;
}

sw_status sw_h5_read_modules(const sw_h5_reader *r, sw_diffraction_module *out, int32_t max,
                             int32_t *count)
{
    if (count)
        *count = 0;
    if (!r || !count || max < 0 || (max > 0 && !out))
        return sw_error_set(NULL, SW_EINVAL, "sw_h5_read_modules: NULL argument or max < 0");
    *count = (int32_t)r->l.nmodules;
    for (int32_t k = 0; k < max && k < *count; k++)
        out[k] = r->l.modules[k];
    return SW_OK;
}

int32_t sw_h5_file_count(const sw_h5_reader *r)
{
    return r ? (int32_t)r->l.nfiles : 0;
}

const char *sw_h5_file_path(const sw_h5_reader *r, int32_t k)
{
    return r && k >= 0 && (uint32_t)k < r->l.nfiles ? r->l.files[k].path : NULL;
}

const char *sw_h5_reader_error(const sw_h5_reader *r)
{
    return r ? r->error : "";
}

/* The open descriptor of file fi (one kept at a time), checked to be the file the walk saw. */
static int reader_fd(sw_h5_reader *r, uint32_t fi, char *why, size_t why_size)
{
    if (r->fd >= 0 && r->fd_file == fi)
        return r->fd;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    const h5_file *f = &r->l.files[fi];
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_size, "cannot open %s (%s)", f->path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_dev != f->dev || (uint64_t)sb.st_ino != f->ino ||
        (uint64_t)sb.st_size != f->size) {
        close(fd);
        snprintf(why, why_size, "%s has changed since it was opened", f->path);
        return -1;
    }
    r->fd = fd;
    r->fd_file = fi;
    return fd;
}

/* The fallback: d opened through HDF5 in this process (its file too), on first use. */
static hid_t fallback_dataset(sw_h5_reader *r, h5_dset *d, char *why, size_t why_size)
{
    char detail[512];
    if (d->hd >= 0)
        return d->hd;
    h5_file *f = &r->l.files[d->file];
    if (f->h5 < 0) {
        struct stat sb;
        if (stat(f->path, &sb) != 0 || (uint64_t)sb.st_dev != f->dev ||
            (uint64_t)sb.st_ino != f->ino) {
            snprintf(why, why_size, "%s has changed since it was opened", f->path);
            return -1;
        }
        hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
        if (fapl >= 0)
            H5Pset_file_locking(fapl, 0, 1);
#endif
        f->h5 = H5Fopen(f->path, H5F_ACC_RDONLY, fapl >= 0 ? fapl : H5P_DEFAULT);
        if (fapl >= 0)
            H5Pclose(fapl);
        if (f->h5 < 0) {
            snprintf(why, why_size, "cannot open %s (%s)", f->path,
                     h5_detail(detail, sizeof detail));
            return -1;
        }
    }
    hid_t lapl = H5Pcreate(H5P_LINK_ACCESS);
    if (lapl >= 0 && !r->links_anywhere)
        H5Pset_elink_cb(lapl, deny_elink, NULL);
    d->hd = H5Oopen(f->h5, d->obj, lapl >= 0 ? lapl : H5P_DEFAULT);
    if (d->hd < 0)
        snprintf(why, why_size, "cannot open %s (%s)", d->name, h5_detail(detail, sizeof detail));
    if (lapl >= 0)
        H5Pclose(lapl);
    return d->hd;
}

/* Chunks looked up when read (datasets with more than H5_LIST_MAX of them): the stored bytes
 * through H5Dread_chunk, its size checked before anything is allocated. */
typedef struct fetch_ctx {
    sw_h5_reader *r;
    h5_dset *d;
} fetch_ctx;

static int fetch_chunk(void *user, uint64_t ci, h5_scratch *s, size_t *size, uint32_t *mask,
                       int *absent, char *why, size_t why_size)
{
    fetch_ctx *f = user;
    h5_dset *d = f->d;
    char detail[512];
    int rc = -1;
    h5_quiet q;
    quiet_begin(&q);
    hid_t hd = fallback_dataset(f->r, d, why, why_size);
    if (hd >= 0) {
        const uint64_t g2 = ci % d->grid[2], g1 = ci / d->grid[2] % d->grid[1],
                       g0 = ci / (d->grid[2] * d->grid[1]);
        hsize_t off3[3] = {g0 * d->cdim[0], g1 * d->cdim[1], g2 * d->cdim[2]};
        const hsize_t *off = d->rank == 3 ? off3 : off3 + 1;
        hsize_t stored = 0;
        uint32_t fm = 0;
        int got = H5Dget_chunk_storage_size(hd, off, &stored) >= 0;
        if (!got) {
            /* a chunk never written fails here: told apart by the (slower, whole-index)
             * look-up by coordinate */
            h5_detail(detail, sizeof detail);
            H5Eclear2(H5E_DEFAULT);
            unsigned m2 = 0;
            haddr_t a2 = 0;
            hsize_t s2 = 0;
            if (H5Dget_chunk_info_by_coord(hd, off, &m2, &a2, &s2) >= 0 &&
                (a2 == HADDR_UNDEF || s2 == 0)) {
                got = 1;
                stored = 0;
            }
        }
        if (!got) {
            snprintf(why, why_size, "cannot look chunk %llu up (%s)", (unsigned long long)ci,
                     detail);
        } else if (stored == 0) {
            *absent = 1;
            rc = 0;
        } else if (stored > h5_chunk_stored_max(d)) {
            snprintf(why, why_size, "chunk %llu claims %llu stored bytes for %llu decoded ones",
                     (unsigned long long)ci, (unsigned long long)stored,
                     (unsigned long long)h5_chunk_bytes(d));
        } else if (h5_scratch_raw(s, (size_t)stored) < 0) {
            snprintf(why, why_size, "out of memory (%llu bytes)", (unsigned long long)stored);
        } else if (H5Dread_chunk(hd, H5P_DEFAULT, off, &fm, s->raw) < 0) {
            snprintf(why, why_size, "cannot read chunk %llu (%s)", (unsigned long long)ci,
                     h5_detail(detail, sizeof detail));
        } else {
            *size = (size_t)stored;
            *mask = fm;
            rc = 0;
        }
    }
    H5Eclear2(H5E_DEFAULT);
    quiet_end(&q);
    return rc;
}

/* Fallback: frame k of b into dst (one hyperslab read, converted by HDF5). */
static int fallback_frame(sw_h5_reader *r, h5_dset *b, int64_t k, sw_image *dst, char *why,
                          size_t why_size)
{
    hid_t ds = fallback_dataset(r, b, why, why_size);
    if (ds < 0)
        return -1;
    const sw_h5_info *in = &r->info;
    hid_t fspace = -1, mspace = -1;
    int bad = 1;
    fspace = H5Dget_space(ds);
    if (fspace >= 0) {
        hsize_t start[3] = {(hsize_t)k, 0, 0};
        hsize_t count[3] = {1, (hsize_t)in->height, (hsize_t)in->width};
        herr_t e = b->rank == 3
                       ? H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL)
                       : H5Sselect_all(fspace);
        /* The caller's rows as a [height, stride / pixel] memory space, the image its left part. */
        hsize_t mdims[2] = {(hsize_t)in->height, dst->stride / sw_pixel_size(in->type)};
        hsize_t mstart[2] = {0, 0};
        hsize_t mcount[2] = {(hsize_t)in->height, (hsize_t)in->width};
        if (e >= 0)
            mspace = H5Screate_simple(2, mdims, NULL);
        if (mspace >= 0 && mdims[1] != mcount[1])
            e = H5Sselect_hyperslab(mspace, H5S_SELECT_SET, mstart, NULL, mcount, NULL);
        if (e >= 0 && mspace >= 0 &&
            H5Dread(ds, native_type(in->type), mspace, fspace, H5P_DEFAULT, dst->data) >= 0)
            bad = 0;
    }
    if (bad) {
        char detail[512];
        snprintf(why, why_size, "%s", h5_detail(detail, sizeof detail));
    }
    close_id(&mspace, H5Sclose);
    close_id(&fspace, H5Sclose);
    return bad ? -1 : 0;
}

/* Values of esize bytes in the other byte order, in place (rows of n values, stride apart). */
static void swap_rows(uint8_t *p, size_t rows, size_t n, size_t stride, size_t esize)
{
    for (size_t y = 0; y < rows; y++) {
        uint8_t *q = p + y * stride;
        for (size_t i = 0; i < n; i++, q += esize)
            for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
                uint8_t t = q[a];
                q[a] = q[b];
                q[b] = t;
            }
    }
}

/* The block holding frame index: the last one whose first frame is <= index (a block of no
 * frames shares its first index with the next block, which is then the one taken). */
static h5_dset *block_of(const sw_h5_reader *r, int64_t index)
{
    int32_t lo = 0, hi = (int32_t)r->l.nblocks - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (r->l.blocks[mid].first <= index)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &r->l.blocks[lo];
}

/* ---------------------------------------------------------------- stored chunks of a frame */

/* A block whose frames sw_h5_read_frame_chunks returns as stored chunks: listed chunks through
 * bitshuffle with LZ4 alone, in the machine's byte order, each chunk one frame's full rows, the
 * frame's height a whole number of chunks. */
static int chunks_raw(const h5_dset *d, const sw_h5_info *in)
{
    const h5_filter *f = &d->filters[0];
    return d->layout == H5_LAYOUT_CHUNKED && d->listed && !d->swap && d->nfilters == 1 &&
           f->id == H5_FILTER_BSHUF && f->ncd > 4 && f->cd[4] == H5_BSHUF_LZ4 &&
           d->esize == sw_pixel_size(in->type) && d->cdim[0] == 1 &&
           d->cdim[2] == (uint64_t)in->width && d->cdim[1] > 0 &&
           (uint64_t)in->height % d->cdim[1] == 0;
}

/* The largest stored size accepted for a chunk of d: what the encoder can write at most with the
 * block size the filter was given. */
static uint64_t chunk_raw_bound(const h5_dset *d)
{
    const h5_filter *f = &d->filters[0];
    return sw_bshuf_lz4_bound((size_t)h5_chunk_bytes(d), d->esize, f->ncd > 3 ? f->cd[3] : 0);
}

sw_status sw_h5_frame_chunks_limits(const sw_h5_reader *r, size_t *bytes, int64_t *chunks)
{
    if (!r || !bytes || !chunks)
        return sw_fail(NULL, SW_EINVAL, "sw_h5_frame_chunks_limits: an argument is NULL");
    *bytes = 0;
    *chunks = 0;
    size_t most = 0;
    int64_t per = 0;
    for (uint32_t i = 0; i < r->l.nblocks; i++) {
        const h5_dset *d = &r->l.blocks[i];
        if (d->dims[0] == 0)
            continue;
        if (!chunks_raw(d, &r->info))
            return SW_OK; /* a block read otherwise: *chunks = 0 */
        const uint64_t bound = chunk_raw_bound(d), rows = d->grid[1];
        for (uint64_t k = 0; k < d->dims[0]; k++) {
            uint64_t sum = 0;
            for (uint64_t gy = 0; gy < rows; gy++) {
                const h5_chunk *c = &d->chunks[k * rows + gy];
                sum += c->size < bound ? c->size : bound;
            }
            if (sum > most)
                most = (size_t)sum;
        }
        if ((int64_t)rows > per)
            per = (int64_t)rows;
    }
    *bytes = most;
    *chunks = per;
    return SW_OK;
}

sw_status sw_h5_read_frame_chunks(sw_h5_reader *r, int64_t index, void *buf, size_t cap,
                                  sw_find_chunk *chunks, int64_t max_chunks, int64_t *nchunks)
{
    if (!r || !buf || !chunks || !nchunks)
        return sw_fail(NULL, SW_EINVAL, "sw_h5_read_frame_chunks: an argument is NULL");
    *nchunks = 0;
    const sw_h5_info *in = &r->info;
    if (index < 0 || index >= in->frames)
        return sw_fail(NULL, SW_EINVAL, "%s: frame %lld out of range: the file has %lld frames",
                       r->path, (long long)index, (long long)in->frames);
    const h5_dset *b = block_of(r, index);
    if (!chunks_raw(b, in))
        return SW_OK;
    const uint64_t k = (uint64_t)(index - b->first), rows = b->grid[1];
    const uint64_t bound = chunk_raw_bound(b), bytes = h5_chunk_bytes(b);
    const h5_chunk *c = &b->chunks[k * rows];
    uint64_t total = 0;
    for (uint64_t gy = 0; gy < rows; gy++) {
        if (c[gy].addr == H5_ADDR_NONE || c[gy].mask != 0)
            return SW_OK; /* never written, or stored without the filter: not raw */
        if (c[gy].size > bound)
            return sw_fail(NULL, SW_EFORMAT,
                           "%s: cannot read frame %lld: chunk %llu stores %llu bytes, more than "
                           "bitshuffle/LZ4 can give for its %llu (at most %llu)",
                           r->path, (long long)index, (unsigned long long)gy + 1,
                           (unsigned long long)c[gy].size, (unsigned long long)bytes,
                           (unsigned long long)bound);
        total += c[gy].size;
    }
    if ((int64_t)rows > max_chunks || total > cap)
        return sw_fail(NULL, SW_EINVAL,
                       "%s: frame %lld has %llu chunks of %llu stored bytes in all, but room was "
                       "given for %lld chunks and %zu bytes (sw_h5_frame_chunks_limits)",
                       r->path, (long long)index, (unsigned long long)rows,
                       (unsigned long long)total, (long long)max_chunks, cap);
    /* a descriptor of this call's own: calls from several threads do not share one */
    const h5_file *f = &r->l.files[b->file];
    char why[SW_ERROR_MAX] = "";
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0)
        snprintf(why, sizeof why, "cannot open %s (%s)", f->path, strerror(errno));
    else if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_dev != f->dev ||
             (uint64_t)sb.st_ino != f->ino || (uint64_t)sb.st_size != f->size)
        snprintf(why, sizeof why, "%s has changed since it was opened", f->path);
    uint64_t at = 0;
    for (uint64_t gy = 0; gy < rows && !why[0]; gy++) {
        if (c[gy].addr > f->size || c[gy].size > f->size - c[gy].addr) {
            snprintf(why, sizeof why, "chunk at byte %llu (%llu bytes) lies beyond the file's end",
                     (unsigned long long)c[gy].addr, (unsigned long long)c[gy].size);
            break;
        }
        size_t got = 0;
        while (got < c[gy].size && !why[0]) {
            ssize_t n = pread(fd, (uint8_t *)buf + at + got, (size_t)c[gy].size - got,
                              (off_t)(c[gy].addr + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                snprintf(why, sizeof why, "%s at byte %llu",
                         n < 0 ? strerror(errno) : "the file ends",
                         (unsigned long long)(c[gy].addr + got));
            else
                got += (size_t)n;
        }
        chunks[gy] = (sw_find_chunk){at, c[gy].size, gy * bytes, bytes};
        at += c[gy].size;
    }
    if (fd >= 0)
        close(fd);
    if (why[0])
        return sw_fail(NULL, SW_EFORMAT,
                       "%s: cannot read frame %lld (frame %lld of %s): the data is corrupt or "
                       "truncated (%s)",
                       r->path, (long long)index, (long long)k, b->name, why);
    *nchunks = (int64_t)rows;
    return SW_OK;
}

sw_status sw_h5_read_frame(sw_h5_reader *r, int64_t index, sw_image *dst)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "sw_h5_read_frame: the reader is NULL");
    const sw_h5_info *in = &r->info;
    if (index < 0 || index >= in->frames)
        return reader_fail(r, SW_EINVAL, "%s: frame %lld out of range: the file has %lld frames",
                           r->path, (long long)index, (long long)in->frames);
    if (!dst)
        return reader_fail(r, SW_EINVAL, "%s: no destination image (NULL)", r->path);
    sw_status st = sw_image_check(NULL, dst);
    if (st != SW_OK)
        return reader_fail(r, st, "%s: destination image: %s", r->path, sw_context_error(NULL));
    if (dst->memory == SW_MEM_DEVICE)
        return reader_fail(r, SW_EINVAL,
                           "%s: the destination image is in GPU device memory; frames are read "
                           "into host memory",
                           r->path);
    if (dst->width != in->width || dst->height != in->height || dst->type != in->type)
        return reader_fail(r, SW_EINVAL,
                           "%s: the destination image is %dx%d %s but the file's frames are "
                           "%dx%d %s",
                           r->path, (int)dst->width, (int)dst->height,
                           sw_pixel_type_string(dst->type), (int)in->width, (int)in->height,
                           sw_pixel_type_string(in->type));

    h5_dset *b = block_of(r, index);
    int64_t k = index - b->first;
    char why[SW_ERROR_MAX] = "";
    int bad;
    if (b->layout == H5_LAYOUT_HDF5) {
        h5_quiet q;
        quiet_begin(&q);
        bad = fallback_frame(r, b, k, dst, why, sizeof why) < 0;
        H5Eclear2(H5E_DEFAULT);
        quiet_end(&q);
    } else {
        fetch_ctx fc = {r, b};
        h5_source src = {-1, r->l.files[b->file].size, fetch_chunk, &fc};
        const int by_fd = b->layout == H5_LAYOUT_CONTIG || b->listed;
        if (by_fd)
            src.fd = reader_fd(r, b->file, why, sizeof why);
        bad = (by_fd && src.fd < 0) ||
              h5_read_plane(b, &src, k, dst->data, dst->stride, &r->scratch, &r->cache,
                            &r->cache_cap, &r->cache_id, &r->cache_owner, why, sizeof why) < 0;
        if (!bad && b->swap)
            swap_rows(dst->data, (size_t)in->height, (size_t)in->width, dst->stride, b->esize);
    }
    if (bad)
        return reader_fail(r, SW_EFORMAT,
                           "%s: cannot read frame %lld (frame %lld of %s): the data is corrupt or "
                           "truncated (%s)",
                           r->path, (long long)index, (long long)k, b->name, why);
    return SW_OK;
}

/* Fallback: the mask read through HDF5 as int64 in slabs of rows (any integer type converts
 * without wrapping; a non-zero value, any bit of Eiger's mask, marks a bad pixel). */
static int fallback_mask(sw_h5_reader *r, h5_dset *m, uint8_t *valid, char *why, size_t why_size)
{
    const int32_t w = r->info.width, h = r->info.height;
    hid_t d = fallback_dataset(r, m, why, why_size);
    if (d < 0)
        return -1;
    int rc = 0;
    hid_t fspace = H5Dget_space(d), mspace = -1;
    int64_t rows = (int64_t)(MASK_SLAB_BYTES / (sizeof(int64_t) * (size_t)w));
    if (rows < 1)
        rows = 1;
    if (rows > h)
        rows = h;
    int64_t *buf = malloc((size_t)rows * (size_t)w * sizeof *buf);
    if (!buf || fspace < 0) {
        snprintf(why, why_size, "%s", buf ? "cannot read the dataspace" : "out of memory");
        rc = -1;
    }
    for (int64_t y0 = 0; rc == 0 && y0 < h; y0 += rows) {
        int64_t n = h - y0 < rows ? h - y0 : rows;
        hsize_t start[2] = {(hsize_t)y0, 0}, count[2] = {(hsize_t)n, (hsize_t)w};
        close_id(&mspace, H5Sclose);
        mspace = H5Screate_simple(2, count, NULL);
        if (mspace < 0 ||
            H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dread(d, H5T_NATIVE_INT64, mspace, fspace, H5P_DEFAULT, buf) < 0) {
            char detail[512];
            snprintf(why, why_size, "%s", h5_detail(detail, sizeof detail));
            rc = -1;
            break;
        }
        uint8_t *out = valid + (size_t)y0 * (size_t)w;
        for (size_t i = 0; i < (size_t)n * (size_t)w; i++)
            out[i] = buf[i] == 0;
    }
    free(buf);
    close_id(&mspace, H5Sclose);
    close_id(&fspace, H5Sclose);
    return rc;
}

sw_status sw_h5_read_pixel_mask(sw_h5_reader *r, uint8_t *valid)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "sw_h5_read_pixel_mask: the reader is NULL");
    if (!valid)
        return reader_fail(r, SW_EINVAL, "%s: no buffer for the pixel mask (NULL)", r->path);
    if (!r->l.has_mask)
        return reader_fail(r, SW_EFORMAT, "%s: the file has no pixel mask (%s)", r->path,
                           PATH_MASK);
    if (!r->l.mask_ok)
        return reader_fail(r, SW_EFORMAT, "%s", r->l.mask_msg);
    h5_dset *m = &r->l.mask;
    const size_t w = (size_t)r->info.width, h = (size_t)r->info.height, es = m->esize;
    char why[SW_ERROR_MAX] = "";
    int bad;
    if (m->layout == H5_LAYOUT_HDF5) {
        h5_quiet q;
        quiet_begin(&q);
        bad = fallback_mask(r, m, valid, why, sizeof why) < 0;
        H5Eclear2(H5E_DEFAULT);
        quiet_end(&q);
    } else {
        if (sw_memory_check(r->ctx, (uint64_t)w * h, es, "%s: the %zu x %zu pixel mask", r->path, w,
                            h) != SW_OK) {
            char msg[SW_ERROR_MAX];
            snprintf(msg, sizeof msg, "%s", sw_context_error(r->ctx));
            return reader_fail(r, SW_ENOMEM, "%s", msg);
        }
        uint8_t *raw = malloc(w * h * es);
        if (!raw)
            return reader_fail(r, SW_ENOMEM, "%s: out of memory reading the pixel mask", r->path);
        fetch_ctx fc = {r, m};
        h5_source src = {-1, r->l.files[m->file].size, fetch_chunk, &fc};
        const int by_fd = m->layout == H5_LAYOUT_CONTIG || m->listed;
        if (by_fd)
            src.fd = reader_fd(r, m->file, why, sizeof why);
        bad = (by_fd && src.fd < 0) ||
              h5_read_plane(m, &src, 0, raw, w * es, &r->scratch, &r->cache, &r->cache_cap,
                            &r->cache_id, &r->cache_owner, why, sizeof why) < 0;
        /* non-zero in any byte (either byte order) marks a bad pixel */
        for (size_t i = 0; !bad && i < w * h; i++) {
            uint8_t any = 0;
            for (size_t j = 0; j < es; j++)
                any |= raw[i * es + j];
            valid[i] = any == 0;
        }
        free(raw);
    }
    if (bad)
        return reader_fail(r, SW_EFORMAT, "%s: cannot read %s, corrupt or truncated (%s)", r->path,
                           PATH_MASK, why);
    return SW_OK;
}

void sw_h5_close(sw_h5_reader *r)
{
    if (!r)
        return;
    h5_quiet q;
    quiet_begin(&q);
    reader_free(r);
    H5Eclear2(H5E_DEFAULT);
    quiet_end(&q);
}

/* ------------------------------------------------------------------ writing */

typedef struct h5_write_job {
    sw_context *ctx;
    const char *path;
    const sw_image *frames;
    int32_t count;
    int32_t per_block;
    int32_t nblocks;
    sw_h5_compression comp;
    const uint8_t *valid;
    double overload;
    char detail[512];
} h5_write_job;

/* Wraps a failing HDF5 call in the writer: keeps HDF5's reason for the message. */
#define H5W_CHECK(job, cond, whatmsg)                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            h5_detail((job)->detail, sizeof(job)->detail);                                         \
            *what = (whatmsg);                                                                     \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static int set_string_attr(hid_t loc, const char *name, const char *value)
{
    /* A fixed-length, nul-terminated ASCII string, as NeXus writers store NX_class. */
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0)
        return -1;
    int res = -1;
    hid_t s = H5Screate(H5S_SCALAR), a = -1;
    if (s >= 0 && H5Tset_size(t, strlen(value) + 1) >= 0 &&
        H5Tset_strpad(t, H5T_STR_NULLTERM) >= 0) {
        a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
        if (a >= 0 && H5Awrite(a, t, value) >= 0)
            res = 0;
    }
    if (a >= 0)
        H5Aclose(a);
    if (s >= 0)
        H5Sclose(s);
    H5Tclose(t);
    return res;
}

static int set_int_attr(hid_t loc, const char *name, int64_t value)
{
    hid_t s = H5Screate(H5S_SCALAR);
    if (s < 0)
        return -1;
    int res = -1;
    hid_t a = H5Acreate2(loc, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0 && H5Awrite(a, H5T_NATIVE_INT64, &value) >= 0)
        res = 0;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    return res;
}

/* A group with its NX_class attribute. */
static hid_t make_group(hid_t loc, const char *name, const char *nx_class)
{
    hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g >= 0 && set_string_attr(g, "NX_class", nx_class) < 0) {
        H5Gclose(g);
        return -1;
    }
    return g;
}

/* A scalar dataset: uint32 when v is a whole number that fits, float64 otherwise. */
static int write_scalar(hid_t loc, const char *name, double v)
{
    int whole = v >= 0.0 && v <= 4294967295.0 && v == floor(v);
    hid_t s = H5Screate(H5S_SCALAR);
    if (s < 0)
        return -1;
    int res = -1;
    hid_t d = H5Dcreate2(loc, name, whole ? H5T_STD_U32LE : H5T_IEEE_F64LE, s, H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT);
    if (d >= 0) {
        uint32_t u = whole ? (uint32_t)v : 0u;
        herr_t e = whole ? H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, &u)
                         : H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v);
        if (e >= 0)
            res = 0;
        H5Dclose(d);
    }
    H5Sclose(s);
    return res;
}

/* Chunk one frame ([1, h, w] for frames, [h, w] for the mask) and the filters of comp. */
static hid_t make_dcpl(int rank, const hsize_t *chunk, sw_h5_compression comp)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (dcpl < 0)
        return -1;
    int ok = H5Pset_chunk(dcpl, rank, chunk) >= 0;
    if (ok && comp == SW_H5_BSLZ4) {
        /* The user's part of bitshuffle's parameters: block size 0 (the filter chooses) and
         * compression 2 (LZ4). The filter's set_local step puts three values in front (its
         * version major, minor and the element size), so the file holds {major, minor, size, 0,
         * 2}: Eiger's {0, 0, 0, 0, 2} with the reserved slots filled in. (Passing all five
         * values here would shift them too and turn LZ4 off.) */
        const unsigned cd[2] = {0, BSHUF_LZ4};
        ok = H5Pset_filter(dcpl, FILTER_BSHUF, H5Z_FLAG_MANDATORY, 2, cd) >= 0;
    } else if (ok && comp == SW_H5_DEFLATE) {
        ok = H5Pset_shuffle(dcpl) >= 0 && H5Pset_deflate(dcpl, DEFLATE_LEVEL) >= 0;
    }
    if (!ok) {
        H5Pclose(dcpl);
        return -1;
    }
    return dcpl;
}

/* Writes block b (frames b * per_block ...) as dataset `name` under loc. */
static int write_block(h5_write_job *job, hid_t loc, const char *name, int32_t b, const char **what)
{
    const sw_image *f0 = &job->frames[0];
    int32_t first = b * job->per_block;
    int32_t n = job->count - first < job->per_block ? job->count - first : job->per_block;
    size_t psize = sw_pixel_size(f0->type);
    hid_t space = -1, dcpl = -1, dset = -1, mspace = -1;
    hsize_t dims[3] = {(hsize_t)n, (hsize_t)f0->height, (hsize_t)f0->width};
    hsize_t chunk[3] = {1, (hsize_t)f0->height, (hsize_t)f0->width};
    space = H5Screate_simple(3, dims, NULL);
    H5W_CHECK(job, space >= 0, "cannot describe the frames");
    dcpl = make_dcpl(3, chunk, job->comp);
    H5W_CHECK(job, dcpl >= 0, "cannot set up chunking and compression");
    dset = H5Dcreate2(loc, name, file_type(f0->type), space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5W_CHECK(job, dset >= 0, "cannot create the frames dataset");
    for (int32_t k = 0; k < n; k++) {
        const sw_image *img = &job->frames[first + k];
        hsize_t start[3] = {(hsize_t)k, 0, 0};
        hsize_t mdims[2] = {(hsize_t)img->height, img->stride / psize};
        hsize_t mcount[2] = {(hsize_t)img->height, (hsize_t)img->width};
        hsize_t mstart[2] = {0, 0};
        H5W_CHECK(job, H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, chunk, NULL) >= 0,
                  "cannot select a frame");
        mspace = H5Screate_simple(2, mdims, NULL);
        H5W_CHECK(job, mspace >= 0, "cannot describe a frame in memory");
        if (mdims[1] != mcount[1])
            H5W_CHECK(job,
                      H5Sselect_hyperslab(mspace, H5S_SELECT_SET, mstart, NULL, mcount, NULL) >= 0,
                      "cannot describe a frame in memory");
        H5W_CHECK(
            job, H5Dwrite(dset, native_type(img->type), mspace, space, H5P_DEFAULT, img->data) >= 0,
            "cannot write the frames");
        close_id(&mspace, H5Sclose);
    }
    /* Eiger numbers the frames of every data file 1-based across the series. */
    H5W_CHECK(job, set_int_attr(dset, "image_nr_low", (int64_t)first + 1) >= 0,
              "cannot write image_nr_low");
    H5W_CHECK(job, set_int_attr(dset, "image_nr_high", (int64_t)first + n) >= 0,
              "cannot write image_nr_high");
    close_id(&dset, H5Dclose);
    close_id(&dcpl, H5Pclose);
    close_id(&space, H5Sclose);
    return 0;
fail:
    close_id(&mspace, H5Sclose);
    close_id(&dset, H5Dclose);
    close_id(&dcpl, H5Pclose);
    close_id(&space, H5Sclose);
    return -1;
}

/* /entry/instrument/detector(/detectorSpecific) with the mask, the overload and the sizes. */
static int write_instrument(h5_write_job *job, hid_t entry, const char **what)
{
    const sw_image *f0 = &job->frames[0];
    hid_t inst = -1, det = -1, spec = -1, s = -1, dcpl = -1, d = -1;
    uint32_t *mask = NULL;
    inst = make_group(entry, "instrument", "NXinstrument");
    H5W_CHECK(job, inst >= 0, "cannot create /entry/instrument");
    det = make_group(inst, "detector", "NXdetector");
    H5W_CHECK(job, det >= 0, "cannot create /entry/instrument/detector");
    spec = make_group(det, "detectorSpecific", "NXcollection");
    H5W_CHECK(job, spec >= 0, "cannot create " PATH_SPECIFIC);
    H5W_CHECK(job, write_scalar(spec, "x_pixels_in_detector", f0->width) >= 0,
              "cannot write x_pixels_in_detector");
    H5W_CHECK(job, write_scalar(spec, "y_pixels_in_detector", f0->height) >= 0,
              "cannot write y_pixels_in_detector");
    H5W_CHECK(job, write_scalar(spec, "nimages", job->count) >= 0, "cannot write nimages");
    if (job->overload > 0.0) {
        H5W_CHECK(job, write_scalar(spec, "countrate_correction_count_cutoff", job->overload) >= 0,
                  "cannot write the overload");
        H5W_CHECK(job, write_scalar(det, "saturation_value", job->overload) >= 0,
                  "cannot write the overload");
    }
    if (job->valid) {
        size_t np = (size_t)f0->width * (size_t)f0->height;
        mask = malloc(np * sizeof *mask);
        if (!mask) {
            snprintf(job->detail, sizeof job->detail, "out of memory");
            *what = "cannot write the pixel mask";
            goto fail;
        }
        for (size_t i = 0; i < np; i++)
            mask[i] = job->valid[i] ? 0u : 1u;
        hsize_t dims[2] = {(hsize_t)f0->height, (hsize_t)f0->width};
        s = H5Screate_simple(2, dims, NULL);
        H5W_CHECK(job, s >= 0, "cannot describe the pixel mask");
        dcpl = job->comp == SW_H5_NONE ? H5Pcreate(H5P_DATASET_CREATE)
                                       : make_dcpl(2, dims, SW_H5_DEFLATE);
        H5W_CHECK(job, dcpl >= 0, "cannot set up the pixel mask's storage");
        d = H5Dcreate2(spec, "pixel_mask", H5T_STD_U32LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5W_CHECK(job, d >= 0, "cannot create the pixel mask");
        H5W_CHECK(job, H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, mask) >= 0,
                  "cannot write the pixel mask");
    }
    free(mask);
    close_id(&d, H5Dclose);
    close_id(&dcpl, H5Pclose);
    close_id(&s, H5Sclose);
    close_id(&spec, H5Gclose);
    close_id(&det, H5Gclose);
    close_id(&inst, H5Gclose);
    return 0;
fail:
    free(mask);
    close_id(&d, H5Dclose);
    close_id(&dcpl, H5Pclose);
    close_id(&s, H5Sclose);
    close_id(&spec, H5Gclose);
    close_id(&det, H5Gclose);
    close_id(&inst, H5Gclose);
    return -1;
}

/* The file name (without directory) of data file b + 1 of a linked set, and its full path. */
static void data_file_names(const char *path, int32_t b, char *base, size_t bsize, char *full,
                            size_t fsize)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t dirlen = (size_t)(name - path);
    size_t n = strlen(name);
    static const char *const exts[4] = {".h5", ".hdf5", ".hdf", ".nxs"};
    for (int i = 0; i < 4; i++) {
        size_t e = strlen(exts[i]);
        if (n > e && strcmp(name + n - e, exts[i]) == 0) {
            n -= e;
            break;
        }
    }
    if (n > 7 && strncmp(name + n - 7, "_master", 7) == 0)
        n -= 7;
    snprintf(base, bsize, "%.*s_data_%06d.h5", (int)n, name, (int)b + 1);
    snprintf(full, fsize, "%.*s%s", (int)dirlen, path, base);
}

/* Creates the temporary file for `final` with HDF5 (truncating the reserved name). */
static hid_t create_tmp_h5(h5_write_job *job, const char *final, char **tmp, sw_status *st)
{
    int fd;
    *st = sw_io_tmp_create(job->ctx, final, tmp, &fd);
    if (*st != SW_OK)
        return -1;
    close(fd);
    hid_t f = H5Fcreate(*tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        h5_detail(job->detail, sizeof job->detail);
        unlink(*tmp);
        free(*tmp);
        *tmp = NULL;
        *st = sw_fail(job->ctx, SW_EIO, "%s: cannot create the HDF5 file (%s)", final, job->detail);
    }
    return f;
}

/* Closes a written file; SW_EIO (with HDF5's reason) when the final flush fails. */
static sw_status close_written(h5_write_job *job, hid_t *file, const char *final)
{
    herr_t e = H5Fclose(*file);
    *file = -1;
    if (e < 0)
        return sw_fail(job->ctx, SW_EIO, "%s: cannot finish the file (%s)", final,
                       h5_detail(job->detail, sizeof job->detail));
    return SW_OK;
}

static sw_status write_files(h5_write_job *job, int linked)
{
    sw_context *ctx = job->ctx;
    const char *path = job->path;
    int32_t nb = job->nblocks;
    char **tmps = calloc((size_t)nb + 1, sizeof *tmps); /* [0, nb): data files; [nb]: master */
    if (!tmps)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    size_t fsize = strlen(path) + 32;
    char *full = malloc(fsize);
    if (!full) {
        free(tmps);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    }
    char base[H5_PATH_MAX], name[64];
    const char *whatv = "cannot write the file";
    const char **what = &whatv;
    const char *failed_file = path;
    sw_status st = SW_OK;
    hid_t file = -1, entry = -1, data = -1;

    if (linked) {
        for (int32_t b = 0; b < nb; b++) {
            data_file_names(path, b, base, sizeof base, full, fsize);
            failed_file = full;
            file = create_tmp_h5(job, full, &tmps[b], &st);
            if (file < 0)
                goto out;
            entry = make_group(file, "entry", "NXentry");
            H5W_CHECK(job, entry >= 0, "cannot create /entry");
            data = make_group(entry, "data", "NXdata");
            H5W_CHECK(job, data >= 0, "cannot create /entry/data");
            if (write_block(job, data, "data", b, what) < 0)
                goto fail;
            close_id(&data, H5Gclose);
            close_id(&entry, H5Gclose);
            st = close_written(job, &file, full);
            if (st != SW_OK)
                goto out;
        }
    }
    failed_file = path;
    file = create_tmp_h5(job, path, &tmps[nb], &st);
    if (file < 0)
        goto out;
    entry = make_group(file, "entry", "NXentry");
    H5W_CHECK(job, entry >= 0, "cannot create /entry");
    data = make_group(entry, "data", "NXdata");
    H5W_CHECK(job, data >= 0, "cannot create /entry/data");
    for (int32_t b = 0; b < nb; b++) {
        snprintf(name, sizeof name, "data_%06d", (int)b + 1);
        if (linked) {
            data_file_names(path, b, base, sizeof base, full, fsize);
            H5W_CHECK(job,
                      H5Lcreate_external(base, "/entry/data/data", data, name, H5P_DEFAULT,
                                         H5P_DEFAULT) >= 0,
                      "cannot create the external link to a data file");
        } else if (write_block(job, data, name, b, what) < 0) {
            goto fail;
        }
    }
    if (write_instrument(job, entry, what) < 0)
        goto fail;
    close_id(&data, H5Gclose);
    close_id(&entry, H5Gclose);
    st = close_written(job, &file, path);
    if (st != SW_OK)
        goto out;

    /* Everything is written: data files into place first, the master last. */
    for (int32_t b = 0; linked && b < nb; b++) {
        data_file_names(path, b, base, sizeof base, full, fsize);
        st = sw_io_tmp_rename(ctx, full, tmps[b]); /* frees (and on failure removes) tmps[b] */
        tmps[b] = NULL;
        if (st != SW_OK)
            goto out;
    }
    st = sw_io_tmp_rename(ctx, path, tmps[nb]);
    tmps[nb] = NULL;
    goto out;

fail:
    st = sw_fail(ctx, SW_EIO, "%s: %s (%s)", failed_file, *what, job->detail);
out:
    close_id(&data, H5Gclose);
    close_id(&entry, H5Gclose);
    close_id(&file, H5Fclose);
    for (int32_t b = 0; b <= nb; b++) {
        if (tmps[b]) {
            unlink(tmps[b]);
            free(tmps[b]);
        }
    }
    free(tmps);
    free(full);
    return st;
}

static sw_status h5_write(sw_context *ctx, const char *path, const sw_image *frames, int32_t count,
                          int32_t frames_per_block, sw_h5_compression comp, const uint8_t *valid,
                          double overload, int linked)
{
    if (!path || !path[0])
        return sw_fail(ctx, SW_EINVAL, "sw_h5_write: no file name given");
    if (!frames)
        return sw_fail(ctx, SW_EINVAL, "%s: no frames given (NULL)", path);
    if (count < 1)
        return sw_fail(ctx, SW_EINVAL, "%s: frame count %d is not positive", path, (int)count);
    if (frames_per_block < 0)
        return sw_fail(ctx, SW_EINVAL, "%s: frames per block %d is negative (0 = all in one)", path,
                       (int)frames_per_block);
    if (comp != SW_H5_NONE && comp != SW_H5_BSLZ4 && comp != SW_H5_DEFLATE)
        return sw_fail(ctx, SW_EINVAL, "%s: unknown compression %d", path, (int)comp);
    if (!isfinite(overload) || overload < 0.0)
        return sw_fail(ctx, SW_EINVAL, "%s: overload %g is not a finite value >= 0 (0 = none)",
                       path, overload);
    for (int32_t i = 0; i < count; i++) {
        sw_status st = sw_io_check_write_image(ctx, path, &frames[i]);
        if (st != SW_OK)
            return st;
        if (frames[i].width != frames[0].width || frames[i].height != frames[0].height ||
            frames[i].type != frames[0].type)
            return sw_fail(ctx, SW_EINVAL,
                           "%s: frame %d is %dx%d %s but frame 0 is %dx%d %s: all frames must "
                           "match",
                           path, (int)i, (int)frames[i].width, (int)frames[i].height,
                           sw_pixel_type_string(frames[i].type), (int)frames[0].width,
                           (int)frames[0].height, sw_pixel_type_string(frames[0].type));
    }
    if (frames[0].type == SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL,
                       "%s: f32 frames: Eiger files hold unsigned integer counts; convert the "
                       "frames to u8, u16 or u32 first (sw_image_convert)",
                       path);
    int32_t per = frames_per_block == 0 ? count : frames_per_block;
    int32_t nb = (int32_t)(((int64_t)count + per - 1) / per);
    if (nb > MAX_BLOCKS)
        return sw_fail(ctx, SW_EINVAL, "%s: %d blocks of %d frames: at most %d blocks", path,
                       (int)nb, (int)per, MAX_BLOCKS);
    if (strlen(path) + 32 >= H5_PATH_MAX)
        return sw_fail(ctx, SW_EINVAL, "%s: file name too long", path);

    h5_quiet q;
    quiet_begin(&q);
    sw_status st = SW_OK;
    if (comp == SW_H5_BSLZ4 && !filter_usable(FILTER_BSHUF, H5Z_FILTER_CONFIG_ENCODE_ENABLED |
                                                                H5Z_FILTER_CONFIG_DECODE_ENABLED)) {
        H5Eclear2(H5E_DEFAULT);
        char paths[1024];
        plugin_paths(paths, sizeof paths);
        st = sw_fail(ctx, SW_EUNSUPPORTED,
                     "%s: bitshuffle/LZ4 compression (HDF5 filter 32008) is not available: "
                     "install the Debian/Ubuntu packages bitshuffle and hdf5-filter-plugin, or set "
                     "HDF5_PLUGIN_PATH to the folder holding libh5bshuf.so (searched: %s); or "
                     "write with deflate or no compression",
                     path, paths);
    } else {
        h5_write_job job = {ctx, path, frames, count, per, nb, comp, valid, overload, ""};
        st = write_files(&job, linked);
    }
    H5Eclear2(H5E_DEFAULT);
    quiet_end(&q);
    return st;
}

sw_status sw_h5_write(sw_context *ctx, const char *path, const sw_image *frames, int32_t count,
                      int32_t frames_per_block, sw_h5_compression comp, const uint8_t *valid,
                      double overload)
{
    return h5_write(ctx, path, frames, count, frames_per_block, comp, valid, overload, 0);
}

sw_status sw_h5_write_linked(sw_context *ctx, const char *path, const sw_image *frames,
                             int32_t count, int32_t frames_per_block, sw_h5_compression comp,
                             const uint8_t *valid, double overload)
{
    return h5_write(ctx, path, frames, count, frames_per_block, comp, valid, overload, 1);
}
