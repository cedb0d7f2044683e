/*
 * The walk over an HDF5 file's structure (hdf5_internal.h): which datasets hold the frames, their
 * shapes, types, storage and filters, where every chunk lies, the pixel mask and the overload.
 * It may run in a child process (hdf5.c), so it calls nothing that reports to the caller (no
 * sw_log, no context): warnings and the failure travel in the layout. Every HDF5 call that reads
 * metadata happens here.
 *
 * Checks, before anything is read: every path component is a link that exists; links are hard or
 * soft (HDF5 follows no external link by itself: they are resolved here, beside the master, see
 * io.h); the object is a dataset; its dataspace is simple, of rank 2 or 3, with sane sizes; its
 * type is an unsigned 8/16/32-bit integer of full precision; its storage is not in external raw
 * files; its filters are known, or loadable for the fallback.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/hdf5_internal.h"

#include <math.h>

/* ------------------------------------------------------------------ small helpers */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

typedef struct walk {
    const char *path;
    const h5_walk_opts *o;
    h5_layout *l;
    hid_t lapl;   /* link access: external links are not followed by HDF5 */
    hid_t fapl;   /* file access: no locking                                */
    hid_t master; /* the file as opened                                    */
    uint32_t fcap, bcap;
    uint64_t nchunks;
    uint64_t frame_w, frame_h; /* the frames' size, for the mask's messages */
    char detail[512];
} walk;

static sw_status walk_fail(walk *w, sw_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static sw_status walk_fail(walk *w, sw_status st, const char *fmt, ...)
{
    if (w->l->st == SW_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->l->msg, sizeof w->l->msg, fmt, ap);
        va_end(ap);
        w->l->st = st;
    }
    return w->l->st;
}

static void walk_warn(walk *w, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define MAX_WARNINGS 32 /* kept per walk (the message carries at most 64) */

static void walk_warn(walk *w, const char *fmt, ...)
{
    if (w->l->nwarnings >= MAX_WARNINGS)
        return;
    char buf[SW_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **p = realloc(w->l->warnings, (w->l->nwarnings + 1) * sizeof *p);
    if (!p)
        return;
    w->l->warnings = p;
    if ((p[w->l->nwarnings] = dup_str(buf)) != NULL)
        w->l->nwarnings++;
}

typedef struct err_walk {
    char *buf;
    size_t size;
} err_walk;

static herr_t err_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    err_walk *x = data;
    (void)n;
    if (x->buf[0] == '\0' && e->desc && e->desc[0] != '\0')
        snprintf(x->buf, x->size, "%s", e->desc);
    return 0;
}

/* HDF5's innermost reason for the last failure (and the stack cleared). */
static const char *why_h5(walk *w)
{
    err_walk x = {w->detail, sizeof w->detail};
    w->detail[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, err_cb, &x);
    H5Eclear2(H5E_DEFAULT);
    if (w->detail[0] == '\0')
        snprintf(w->detail, sizeof w->detail, "no reason given by HDF5");
    return w->detail;
}

/* External links are resolved by the walk itself (beside the master, io.h): HDF5 may follow
 * none, at any depth. */
static herr_t deny_external(const char *parent_file, const char *parent_group,
                            const char *child_file, const char *child_object, unsigned *acc_flags,
                            hid_t fapl, void *data)
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

/* 1 when every component of path is a link that exists from loc; 0 when one is missing; -1 when
 * HDF5 fails on the way (a corrupt group, or an external link in the middle). */
static int path_exists(walk *w, hid_t loc, const char *path)
{
    char buf[H5_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf || path[0] != '/')
        return 0;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        if (buf[i - 1] == '/')
            return 0; /* "//" or a trailing "/" */
        char c = buf[i];
        buf[i] = '\0';
        htri_t e = H5Lexists(loc, buf, w->lapl);
        buf[i] = c;
        if (e < 0)
            return -1;
        if (e == 0)
            return 0;
    }
    return 1;
}

static void describe_type(hid_t t, char *buf, size_t size)
{
    size_t bits = H5Tget_size(t) * 8;
    switch (H5Tget_class(t)) {
    case H5T_INTEGER:
        snprintf(buf, size, "%s %zu-bit integers",
                 H5Tget_sign(t) == H5T_SGN_NONE ? "unsigned" : "signed", bits);
        break;
    case H5T_FLOAT: snprintf(buf, size, "%zu-bit floats", bits); break;
    case H5T_STRING: snprintf(buf, size, "strings"); break;
    case H5T_COMPOUND: snprintf(buf, size, "compound records"); break;
    case H5T_ENUM: snprintf(buf, size, "enumerations"); break;
    case H5T_BITFIELD: snprintf(buf, size, "%zu-bit bit fields", bits); break;
    default: snprintf(buf, size, "values of a non-numeric class"); break;
    }
}

static int host_is_little(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* ------------------------------------------------------------------ files and links */

/* Index of the file at path in the layout (added when new: stat for its identity and size).
 * -1 with the failure set (SW_EIO when it cannot be stat'ed). */
static int64_t add_file(walk *w, const char *path, const char *what)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        walk_fail(w, SW_EIO, "%s: cannot open %s (%s)", w->path, what, strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        walk_fail(w, SW_EIO, "%s: %s is not a regular file", w->path, what);
        return -1;
    }
    h5_layout *l = w->l;
    for (uint32_t i = 0; i < l->nfiles; i++)
        if (l->files[i].dev == (uint64_t)sb.st_dev && l->files[i].ino == (uint64_t)sb.st_ino)
            return i;
    if (l->nfiles >= H5_MAX_FILES) {
        walk_fail(w, SW_EFORMAT, "%s: more than %d files linked", w->path, H5_MAX_FILES);
        return -1;
    }
    if (l->nfiles == w->fcap) {
        uint32_t cap = w->fcap ? 2 * w->fcap : 4;
        h5_file *f = realloc(l->files, cap * sizeof *f);
        if (!f) {
            walk_fail(w, SW_ENOMEM, "%s: out of memory", w->path);
            return -1;
        }
        l->files = f;
        w->fcap = cap;
    }
    h5_file *f = &l->files[l->nfiles];
    memset(f, 0, sizeof *f);
    f->h5 = -1;
    f->path = dup_str(path);
    if (!f->path) {
        walk_fail(w, SW_ENOMEM, "%s: out of memory", w->path);
        return -1;
    }
    f->dev = (uint64_t)sb.st_dev;
    f->ino = (uint64_t)sb.st_ino;
    f->size = (uint64_t)sb.st_size;
    return l->nfiles++;
}

/* 1 when the relative name has a ".." component. */
static int has_dotdot(const char *s)
{
    for (const char *p = s; *p;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return 1;
        p += n;
        while (*p == '/')
            p++;
    }
    return 0;
}

/* Where the data file of an external link is: beside the master, else in each of link_dirs,
 * else (links_anywhere) as an absolute name. 0 with the path in out; -1 with the failure set. */
static int resolve_external(walk *w, const char *name, const char *file, const char *obj, char *out,
                            size_t out_size)
{
    char looked[1024] = "";
    size_t used = 0;
    if (file[0] == '\0' || strlen(file) >= H5_FILE_MAX) {
        walk_fail(w, SW_EFORMAT, "%s: %s is an external link with an unusable file name", w->path,
                  name);
        return -1;
    }
    if (file[0] == '/') {
        if (!w->o->links_anywhere) {
            walk_fail(w, SW_EFORMAT,
                      "%s: %s is an external link to the absolute path %s:%s: refused (data "
                      "files are looked for beside the master only; the option links_anywhere "
                      "allows more)",
                      w->path, name, file, obj);
            return -1;
        }
        if (access(file, F_OK) == 0) {
            snprintf(out, out_size, "%s", file);
            return 0;
        }
        walk_fail(w, SW_EIO, "%s: %s is an external link to %s:%s, but that data file is missing",
                  w->path, name, file, obj);
        return -1;
    }
    if (!w->o->links_anywhere && has_dotdot(file)) {
        walk_fail(w, SW_EFORMAT,
                  "%s: %s is an external link to %s:%s, which leaves the master's directory "
                  "(\"..\"): refused (the option links_anywhere allows it)",
                  w->path, name, file, obj);
        return -1;
    }
    /* the master's directory, then link_dirs */
    const char *slash = strrchr(w->path, '/');
    int dirlen = slash ? (int)(slash - w->path) + 1 : 0;
    const char *dirs = w->o->link_dirs ? w->o->link_dirs : "";
    for (int pass = 0;; pass++) {
        int n;
        if (pass == 0) {
            n = snprintf(out, out_size, "%.*s%s", dirlen, w->path, file);
        } else {
            if (*dirs == '\0')
                break;
            const char *e = strchr(dirs, ':');
            int len = e ? (int)(e - dirs) : (int)strlen(dirs);
            if (len == 0) {
                dirs += e ? 1 : 0;
                continue;
            }
            n = snprintf(out, out_size, "%.*s%s%s", len, dirs, dirs[len - 1] == '/' ? "" : "/",
                         file);
            dirs = e ? e + 1 : dirs + len;
        }
        if (n < 0 || (size_t)n >= out_size)
            continue;
        if (access(out, F_OK) == 0)
            return 0;
        if (used + 4 < sizeof looked) {
            int k = snprintf(looked + used, sizeof looked - used, "%s%s", used ? ", " : "", out);
            used += k > 0 ? (size_t)k : 0;
            if (used >= sizeof looked)
                used = sizeof looked - 1;
        }
    }
    walk_fail(w, SW_EIO,
              "%s: %s is an external link to %s:%s, but that data file is missing (looked for %s)",
              w->path, name, file, obj, looked);
    return -1;
}

/* Opens an HDF5 file read-only (file index already added). */
static hid_t open_h5(walk *w, const char *path, const char *what)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, w->fapl);
    if (f < 0)
        walk_fail(w, SW_EFORMAT, "%s: %s is not a readable HDF5 file, truncated or corrupt (%s)",
                  w->path, what, why_h5(w));
    return f;
}

/* ------------------------------------------------------------------ one dataset */

/* The fill value as stored, for chunks never written. */
static int read_fill(walk *w, hid_t dcpl, hid_t ftype, h5_dset *d)
{
    memset(d->fill, 0, sizeof d->fill);
    H5D_fill_value_t status;
    if (H5Pfill_value_defined(dcpl, &status) < 0) {
        why_h5(w);
        return 0; /* HDF5's default: zero */
    }
    if (status != H5D_FILL_VALUE_USER_DEFINED)
        return 0;
    uint8_t buf[16] = {0};
    if (H5Tget_size(ftype) > sizeof buf || H5Pget_fill_value(dcpl, ftype, buf) < 0) {
        why_h5(w);
        return 0;
    }
    memcpy(d->fill, buf, d->esize);
    return 0;
}

/* Is the pipeline one decoded here? Sets d->filters. 1 yes, 0 no (fallback), -1 refused. */
static int own_pipeline(walk *w, const char *name, hid_t dcpl, int n, h5_dset *d)
{
    int own = n <= H5_MAX_FILTERS;
    for (int i = 0; i < n; i++) {
        unsigned flags = 0, cd[16] = {0}, config = 0;
        size_t ncd = 16;
        char fname[256] = "";
        H5Z_filter_t id =
            H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof fname, fname, &config);
        if (id < 0) {
            walk_fail(w, SW_EFORMAT, "%s: %s: cannot read filter %d of its pipeline (%s)", w->path,
                      name, i, why_h5(w));
            return -1;
        }
        if (ncd > 16)
            ncd = 16;
        if (i < H5_MAX_FILTERS) {
            h5_filter *f = &d->filters[i];
            f->id = (uint32_t)id;
            f->ncd = (uint32_t)(ncd < 5 ? ncd : 5);
            for (uint32_t k = 0; k < f->ncd; k++)
                f->cd[k] = cd[k];
        }
        if (id == H5_FILTER_DEFLATE || id == H5_FILTER_SHUFFLE)
            continue;
        if (id == H5_FILTER_BSHUF) {
            /* cd: {major, minor, element size, block size, compression} */
            if (ncd < 3 || cd[2] != d->esize) {
                walk_fail(w, SW_EFORMAT,
                          "%s: %s: bitshuffle's parameters name %s-byte elements but the "
                          "dataset holds %u-byte values",
                          w->path, name, ncd < 3 ? "no" : "other than", (unsigned)d->esize);
                return -1;
            }
            if (ncd > 3 && cd[3] % 8 != 0) {
                walk_fail(w, SW_EFORMAT,
                          "%s: %s: bitshuffle's block size %u is not a multiple of 8", w->path,
                          name, cd[3]);
                return -1;
            }
            if (ncd > 4 && cd[4] != 0 && cd[4] != H5_BSHUF_LZ4)
                own = 0; /* zstd (3) and anything newer: the plugin */
            continue;
        }
        own = 0;
    }
    if (own)
        d->nfilters = (uint32_t)n;
    return own;
}

/* Lists every chunk's address and size (by coordinate: one B-tree look-up each). */
static int list_chunks(walk *w, const char *name, hid_t dset, h5_dset *d)
{
    uint64_t total = d->grid[0] * d->grid[1] * d->grid[2];
    if (d->grid[0] && total / d->grid[0] != d->grid[1] * d->grid[2]) {
        walk_fail(w, SW_EFORMAT, "%s: %s: absurd chunk count", w->path, name);
        return -1;
    }
    if (total > H5_MAX_CHUNKS - w->nchunks) {
        walk_fail(w, SW_EFORMAT,
                  "%s: %s: %llu chunks (more than the %llu spotwave lists in one file set)",
                  w->path, name, (unsigned long long)total, (unsigned long long)H5_MAX_CHUNKS);
        return -1;
    }
    w->nchunks += total;
    d->chunks = malloc((total ? total : 1) * sizeof *d->chunks);
    if (!d->chunks) {
        walk_fail(w, SW_ENOMEM, "%s: %s: out of memory listing %llu chunks", w->path, name,
                  (unsigned long long)total);
        return -1;
    }
    uint64_t i = 0, absent = 0;
    for (uint64_t a = 0; a < d->grid[0]; a++)
        for (uint64_t b = 0; b < d->grid[1]; b++)
            for (uint64_t c = 0; c < d->grid[2]; c++, i++) {
                hsize_t off3[3] = {a * d->cdim[0], b * d->cdim[1], c * d->cdim[2]};
                const hsize_t *off = d->rank == 3 ? off3 : off3 + 1;
                unsigned mask = 0;
                haddr_t addr = HADDR_UNDEF;
                hsize_t size = 0;
                if (H5Dget_chunk_info_by_coord(dset, off, &mask, &addr, &size) < 0) {
                    walk_fail(w, SW_EFORMAT, "%s: %s: cannot find chunk %llu (%s)", w->path, name,
                              (unsigned long long)i, why_h5(w));
                    return -1;
                }
                h5_chunk *ch = &d->chunks[i];
                if (addr == HADDR_UNDEF || size == 0) {
                    ch->addr = H5_ADDR_NONE;
                    ch->size = 0;
                    ch->mask = 0;
                    absent++;
                } else {
                    ch->addr = (uint64_t)addr;
                    ch->size = (uint64_t)size;
                    ch->mask = mask;
                }
            }
    if (absent)
        walk_warn(w,
                  "%s: %s: %llu of its %llu chunks were never written; they read as the fill value",
                  w->path, name, (unsigned long long)absent, (unsigned long long)total);
    return 0;
}

/*
 * Describes the dataset obj of file fi (open as file) into d, named name in messages. For frames
 * (mask = 0) the type must be an unsigned 8/16/32-bit integer; for the mask any integer.
 * Returns SW_OK, or the failure (set in the layout unless soft: then only in why).
 */
static sw_status describe(walk *w, hid_t file, uint32_t fi, const char *name, const char *obj,
                          int mask, h5_dset *d, char *why, size_t why_size)
{
    sw_status st = SW_OK;
    hid_t o = -1, space = -1, type = -1, dcpl = -1;
    char tdesc[64];
    why[0] = '\0';
#define DFAIL(code, ...)                                                                           \
    do {                                                                                           \
        snprintf(why, why_size, __VA_ARGS__);                                                      \
        st = (code);                                                                               \
        goto done;                                                                                 \
    } while (0)

    memset(d, 0, sizeof *d);
    d->hd = -1;
    d->file = fi;
    d->name = dup_str(name);
    d->obj = dup_str(obj);
    if (!d->name || !d->obj)
        DFAIL(SW_ENOMEM, "%s: out of memory", w->path);
    o = H5Oopen(file, obj, w->lapl);
    if (o < 0)
        DFAIL(SW_EFORMAT, "%s: cannot open %s (%s)", w->path, name, why_h5(w));
    H5I_type_t kind = H5Iget_type(o);
    if (kind != H5I_DATASET)
        DFAIL(SW_EFORMAT, "%s: %s is %s, not a dataset%s", w->path, name,
              kind == H5I_GROUP ? "a group" : "a named datatype", mask ? "" : " of frames");

    space = H5Dget_space(o);
    if (space < 0)
        DFAIL(SW_EFORMAT, "%s: %s: cannot read the dataspace (%s)", w->path, name, why_h5(w));
    H5S_class_t sc = H5Sget_simple_extent_type(space);
    int rank = sc == H5S_SIMPLE ? H5Sget_simple_extent_ndims(space) : 0;
    hsize_t dims[H5S_MAX_RANK] = {0};
    if (rank > 0 && rank <= H5S_MAX_RANK && H5Sget_simple_extent_dims(space, dims, NULL) < 0)
        DFAIL(SW_EFORMAT, "%s: %s: cannot read the dataspace (%s)", w->path, name, why_h5(w));
    if (mask) {
        if (rank != 2)
            DFAIL(SW_EFORMAT,
                  "%s: wrong pixel mask shape: %s is of rank %d but the frames are %llu x %llu",
                  w->path, name, rank < 0 ? 0 : rank, (unsigned long long)w->frame_w,
                  (unsigned long long)w->frame_h);
        if ((uint64_t)dims[0] != w->frame_h || (uint64_t)dims[1] != w->frame_w)
            DFAIL(SW_EFORMAT,
                  "%s: wrong pixel mask shape: %s is %llu x %llu pixels but the frames are %llu x "
                  "%llu",
                  w->path, name, (unsigned long long)dims[1], (unsigned long long)dims[0],
                  (unsigned long long)w->frame_w, (unsigned long long)w->frame_h);
    } else if (rank != 2 && rank != 3) {
        DFAIL(SW_EFORMAT,
              "%s: %s has rank %d: frames are expected as a rank-3 dataset [frames, height, "
              "width] (or rank 2 for one frame)",
              w->path, name, rank < 0 ? 0 : rank);
    }
    d->rank = (uint32_t)rank;
    d->dims[0] = rank == 3 ? (uint64_t)dims[0] : 1;
    d->dims[1] = (uint64_t)dims[rank - 2];
    d->dims[2] = (uint64_t)dims[rank - 1];
    const uint64_t h = d->dims[1], wd = d->dims[2];
    if (!mask) {
        if (h == 0 || wd == 0)
            DFAIL(SW_EFORMAT, "%s: %s is empty (%llu x %llu pixels)", w->path, name,
                  (unsigned long long)wd, (unsigned long long)h);
        if (d->dims[0] > (uint64_t)1 << 40)
            DFAIL(SW_EFORMAT, "%s: %s claims an absurd %llu frames", w->path, name,
                  (unsigned long long)d->dims[0]);
        if (h > SW_IMAGE_MAX_DIM || wd > SW_IMAGE_MAX_DIM ||
            (long long)(h * wd) > (long long)SW_IMAGE_MAX_PIXELS)
            DFAIL(SW_EFORMAT,
                  "%s: %s has absurd frames of %llu x %llu pixels (at most %d per side and %lld "
                  "in all)",
                  w->path, name, (unsigned long long)wd, (unsigned long long)h, SW_IMAGE_MAX_DIM,
                  (long long)SW_IMAGE_MAX_PIXELS);
    }

    type = H5Dget_type(o);
    if (type < 0)
        DFAIL(SW_EFORMAT, "%s: %s: cannot read the datatype (%s)", w->path, name, why_h5(w));
    describe_type(type, tdesc, sizeof tdesc);
    H5T_class_t tc = H5Tget_class(type);
    size_t es = H5Tget_size(type);
    if (mask) {
        if (tc != H5T_INTEGER || es < 1 || es > 8)
            DFAIL(SW_EFORMAT, "%s: %s holds %s: a pixel mask holds integers", w->path, name, tdesc);
    } else if (tc != H5T_INTEGER || H5Tget_sign(type) != H5T_SGN_NONE ||
               (es != 1 && es != 2 && es != 4)) {
        DFAIL(SW_EFORMAT,
              "%s: %s holds %s: spotwave reads frames of unsigned 8, 16 or 32-bit integers (as "
              "detectors count)",
              w->path, name, tdesc);
    }
    d->esize = (uint32_t)es;
    H5T_order_t order = H5Tget_order(type);
    d->swap = es > 1 && (order == H5T_ORDER_BE) == host_is_little();
    /* values that are not plain bytes in one order (padding bits, an offset, VAX order) go
     * through HDF5's conversion */
    int plain = (order == H5T_ORDER_LE || order == H5T_ORDER_BE || es == 1) &&
                H5Tget_precision(type) == 8 * es && H5Tget_offset(type) == 0;

    dcpl = H5Dget_create_plist(o);
    if (dcpl < 0)
        DFAIL(SW_EFORMAT, "%s: %s: cannot read the storage properties (%s)", w->path, name,
              why_h5(w));
    int next = H5Pget_external_count(dcpl);
    if (next != 0)
        DFAIL(SW_EFORMAT,
              "%s: %s keeps its values in %d external raw file%s, which spotwave does not read "
              "(they could be any file)",
              w->path, name, next < 0 ? 0 : next, next == 1 ? "" : "s");
    read_fill(w, dcpl, type, d);
    int nf = H5Pget_nfilters(dcpl);
    if (nf < 0)
        DFAIL(SW_EFORMAT, "%s: %s: cannot read the filter pipeline (%s)", w->path, name, why_h5(w));
    d->filtered = nf > 0;
    H5D_layout_t lay = H5Pget_layout(dcpl);
    d->layout = H5_LAYOUT_HDF5;
    if (lay == H5D_VIRTUAL && !w->o->links_anywhere)
        DFAIL(SW_EFORMAT,
              "%s: %s is a virtual dataset, whose source files could be anywhere: refused (the "
              "option links_anywhere allows it)",
              w->path, name);
    if (lay == H5D_CONTIGUOUS && nf == 0 && plain) {
        haddr_t a = H5Dget_offset(o);
        d->layout = H5_LAYOUT_CONTIG;
        d->addr = a == HADDR_UNDEF ? H5_ADDR_NONE : (uint64_t)a;
        H5Eclear2(H5E_DEFAULT);
    } else if (lay == H5D_CHUNKED) {
        hsize_t cd[H5S_MAX_RANK] = {0};
        int cr = H5Pget_chunk(dcpl, H5S_MAX_RANK, cd);
        if (cr != rank)
            DFAIL(SW_EFORMAT, "%s: %s: chunks of rank %d in a dataset of rank %d (%s)", w->path,
                  name, cr, rank, cr < 0 ? why_h5(w) : "corrupt");
        d->cdim[0] = rank == 3 ? (uint64_t)cd[0] : 1;
        d->cdim[1] = (uint64_t)cd[rank - 2];
        d->cdim[2] = (uint64_t)cd[rank - 1];
        for (int k = 0; k < 3; k++)
            if (d->cdim[k] == 0 || d->cdim[k] > ((uint64_t)1 << 32))
                DFAIL(SW_EFORMAT, "%s: %s: absurd chunk shape", w->path, name);
        if (d->cdim[0] * d->cdim[1] > H5_MAX_CHUNK_BYTES ||
            d->cdim[0] * d->cdim[1] * d->cdim[2] > H5_MAX_CHUNK_BYTES / es)
            DFAIL(SW_EFORMAT, "%s: %s: chunks of %llu x %llu x %llu values (more than %llu bytes)",
                  w->path, name, (unsigned long long)d->cdim[0], (unsigned long long)d->cdim[1],
                  (unsigned long long)d->cdim[2], (unsigned long long)H5_MAX_CHUNK_BYTES);
        for (int k = 0; k < 3; k++)
            d->grid[k] = (d->dims[k] + d->cdim[k] - 1) / d->cdim[k];
        int own = own_pipeline(w, name, dcpl, nf, d);
        if (own < 0) {
            st = w->l->st;
            snprintf(why, why_size, "%s", w->l->msg);
            goto done;
        }
        if (own && plain) {
            d->layout = H5_LAYOUT_CHUNKED;
            const uint64_t cells = d->grid[0] * d->grid[1] * d->grid[2];
            if (d->grid[0] && cells / d->grid[0] == d->grid[1] * d->grid[2] &&
                cells <= H5_LIST_MAX) {
                d->listed = 1;
                if (list_chunks(w, name, o, d) < 0) {
                    st = w->l->st;
                    snprintf(why, why_size, "%s", w->l->msg);
                    goto done;
                }
            } else {
                /* looked up when read; the whole index is walked once here, where a fault in
                 * it is harmless */
                hsize_t count = 0;
                if (H5Dget_num_chunks(o, space, &count) < 0)
                    DFAIL(SW_EFORMAT, "%s: %s: cannot read the chunk index (%s)", w->path, name,
                          why_h5(w));
                if ((uint64_t)count > cells)
                    DFAIL(SW_EFORMAT, "%s: %s: %llu chunks indexed for a grid of %llu", w->path,
                          name, (unsigned long long)count, (unsigned long long)cells);
                if ((uint64_t)count < cells)
                    walk_warn(w,
                              "%s: %s: %llu of its %llu chunks were never written; they read "
                              "as the fill value",
                              w->path, name, (unsigned long long)(cells - count),
                              (unsigned long long)cells);
            }
        }
    }
    if (d->layout == H5_LAYOUT_HDF5) {
        d->nfilters = 0;
        /* the fallback: every filter must load here */
        for (int i = 0; i < nf; i++) {
            unsigned flags = 0, cdv[16], config = 0;
            size_t ncd = 16;
            char fname[256] = "";
            H5Z_filter_t id =
                H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cdv, sizeof fname, fname, &config);
            if (id < 0)
                DFAIL(SW_EFORMAT, "%s: %s: cannot read filter %d of its pipeline (%s)", w->path,
                      name, i, why_h5(w));
            unsigned cfg = 0;
            if (H5Zfilter_avail(id) <= 0 || H5Zget_filter_info(id, &cfg) < 0 ||
                !(cfg & H5Z_FILTER_CONFIG_DECODE_ENABLED)) {
                H5Eclear2(H5E_DEFAULT);
                /* the message is completed by hdf5.c (filter hint, plugin paths) */
                snprintf(why, why_size, "%u\n%s", (unsigned)id,
                         fname[0] ? fname : "no name stored");
                st = SW_EUNSUPPORTED;
                goto done;
            }
        }
    }
done:
#undef DFAIL
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (type >= 0)
        H5Tclose(type);
    if (space >= 0)
        H5Sclose(space);
    if (o >= 0)
        H5Oclose(o);
    H5Eclear2(H5E_DEFAULT);
    return st;
}

/* ------------------------------------------------------------------ blocks */

static sw_status add_block(walk *w, const char *name)
{
    h5_layout *l = w->l;
    char why[SW_ERROR_MAX];
    if (l->nblocks == w->bcap) {
        uint32_t cap = w->bcap ? 2 * w->bcap : 8;
        h5_dset *b = realloc(l->blocks, cap * sizeof *b);
        if (!b)
            return walk_fail(w, SW_ENOMEM, "%s: out of memory", w->path);
        l->blocks = b;
        w->bcap = cap;
    }
    /* Where the block lives: an external link is resolved here; anything else stays in the
     * master (soft links followed by HDF5 inside it). */
    H5L_info_t li;
    if (H5Lget_info(w->master, name, &li, w->lapl) < 0)
        return walk_fail(w, SW_EFORMAT, "%s: cannot read the link %s (%s)", w->path, name,
                         why_h5(w));
    hid_t file = w->master;
    uint32_t fi = 0;
    char obj[H5_PATH_MAX], shown[H5_FILE_MAX + 2 * H5_PATH_MAX + 8];
    snprintf(obj, sizeof obj, "%s", name);
    snprintf(shown, sizeof shown, "%s", name);
    if (li.type == H5L_TYPE_EXTERNAL) {
        char val[H5_FILE_MAX + H5_PATH_MAX + 8], target[2 * H5_FILE_MAX];
        const char *tf = NULL, *to = NULL;
        if (li.u.val_size == 0 || li.u.val_size > sizeof val ||
            H5Lget_val(w->master, name, val, li.u.val_size, w->lapl) < 0 ||
            H5Lunpack_elink_val(val, li.u.val_size, NULL, &tf, &to) < 0 || !tf || !to ||
            strlen(to) >= H5_PATH_MAX || to[0] == '\0') {
            H5Eclear2(H5E_DEFAULT);
            return walk_fail(w, SW_EFORMAT, "%s: %s is an external link that cannot be read",
                             w->path, name);
        }
        if (resolve_external(w, name, tf, to, target, sizeof target) < 0)
            return l->st;
        char what[2 * H5_FILE_MAX + H5_PATH_MAX];
        snprintf(what, sizeof what, "the data file %s (external link %s)", target, name);
        int64_t idx = add_file(w, target, what);
        if (idx < 0)
            return l->st;
        fi = (uint32_t)idx;
        file = open_h5(w, target, what);
        if (file < 0)
            return l->st;
        snprintf(obj, sizeof obj, "%s%s", to[0] == '/' ? "" : "/", to);
        snprintf(shown, sizeof shown, "%s (%s:%s)", name, tf, obj);
    } else if (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT) {
        return walk_fail(w, SW_EFORMAT, "%s: %s is a link of a user-defined type (%d)", w->path,
                         name, (int)li.type);
    }
    h5_dset *b = &l->blocks[l->nblocks];
    sw_status st = describe(w, file, fi, shown, obj, 0, b, why, sizeof why);
    if (file != w->master)
        H5Fclose(file);
    H5Eclear2(H5E_DEFAULT);
    l->nblocks++; /* from here on h5_layout_free frees it */
    if (st == SW_EUNSUPPORTED) {
        /* why: "<id>\n<name>" */
        return walk_fail(w, SW_EUNSUPPORTED, "%s\n%s\n%s", w->path, shown, why);
    }
    if (st != SW_OK)
        return walk_fail(w, st, "%s", why);
    const h5_dset *b0 = &l->blocks[0];
    if (l->nblocks > 1 &&
        (b->dims[1] != b0->dims[1] || b->dims[2] != b0->dims[2] || b->esize != b0->esize))
        return walk_fail(w, SW_EFORMAT,
                         "%s: mismatched blocks: %s has %llu x %llu u%u frames but %s has "
                         "%llu x %llu u%u frames",
                         w->path, b->name, (unsigned long long)b->dims[2],
                         (unsigned long long)b->dims[1], 8 * b->esize, b0->name,
                         (unsigned long long)b0->dims[2], (unsigned long long)b0->dims[1],
                         8 * b0->esize);
    return SW_OK;
}

static sw_status find_blocks(walk *w)
{
    const char *dataset = w->o->dataset;
    if (dataset) {
        int e = path_exists(w, w->master, dataset);
        if (e <= 0) {
            if (e < 0)
                return walk_fail(w, SW_EFORMAT, "%s: cannot look up %s (%s)", w->path, dataset,
                                 why_h5(w));
            return walk_fail(w, SW_EFORMAT, "%s: no dataset %s in the file", w->path, dataset);
        }
        return add_block(w, dataset);
    }
    int have_group = path_exists(w, w->master, PATH_DATA);
    if (have_group < 0)
        return walk_fail(w, SW_EFORMAT, "%s: cannot look up %s, corrupt (%s)", w->path, PATH_DATA,
                         why_h5(w));
    if (have_group) {
        char name[64];
        for (int i = 1; i <= H5_MAX_BLOCKS; i++) {
            snprintf(name, sizeof name, PATH_DATA "/data_%06d", i);
            htri_t e = H5Lexists(w->master, name, w->lapl);
            if (e < 0)
                return walk_fail(w, SW_EFORMAT, "%s: cannot look up %s, corrupt (%s)", w->path,
                                 name, why_h5(w));
            if (e == 0)
                break;
            if (add_block(w, name) != SW_OK)
                return w->l->st;
        }
        if (w->l->nblocks > 0)
            return SW_OK;
        htri_t e = H5Lexists(w->master, PATH_DATA "/data", w->lapl);
        if (e < 0)
            return walk_fail(w, SW_EFORMAT, "%s: cannot look up %s/data, corrupt (%s)", w->path,
                             PATH_DATA, why_h5(w));
        if (e > 0)
            return add_block(w, PATH_DATA "/data");
    }
    return walk_fail(w, SW_EFORMAT,
                     "%s: no frames found: looked for %s/data_000001, data_000002, ... (an Eiger "
                     "master) and %s/data (an Eiger data file)%s; name the dataset explicitly if "
                     "the frames are elsewhere",
                     w->path, PATH_DATA, PATH_DATA,
                     have_group ? "" : ", but the file has no " PATH_DATA " group");
}

/* The string attribute `name` of obj (fixed or variable length, of at most size - 1 characters)
 * into buf; "" when absent or unusable. Type, rank and size checked before reading. */
static void read_str_attr(hid_t obj, const char *name, char *buf, size_t size)
{
    buf[0] = '\0';
    if (H5Aexists(obj, name) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return;
    }
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) {
        H5Eclear2(H5E_DEFAULT);
        return;
    }
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a), mt = -1;
    if (t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_STRING &&
        H5Sget_simple_extent_npoints(sp) == 1) {
        if (H5Tis_variable_str(t) > 0) {
            mt = H5Tcopy(H5T_C_S1);
            char *p = NULL;
            if (mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &p) >= 0 && p) {
                snprintf(buf, size, "%s", p);
                H5free_memory(p);
            }
        } else {
            size_t n = H5Tget_size(t);
            char tmp[H5_PATH_MAX];
            mt = H5Tcopy(H5T_C_S1);
            if (n > 0 && n < sizeof tmp && mt >= 0 && H5Tset_size(mt, n) >= 0 &&
                H5Tset_strpad(mt, H5T_STR_NULLPAD) >= 0 && H5Aread(a, mt, tmp) >= 0) {
                tmp[n] = '\0';
                snprintf(buf, size, "%.*s", (int)(size - 1), tmp);
            }
        }
    }
    if (mt >= 0)
        H5Tclose(mt);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    H5Eclear2(H5E_DEFAULT);
    for (size_t i = 0; buf[i]; i++) /* printable ASCII only: it may reach messages */
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7F)
            buf[i] = '?';
}

static void read_units(hid_t obj, char *buf, size_t size)
{
    read_str_attr(obj, "units", buf, size);
}

/* A numeric attribute of exactly three values (NeXus's vector, offset) into v: 1, or 0 when
 * absent or unusable. */
static int read_vec_attr(hid_t obj, const char *name, double v[3])
{
    if (H5Aexists(obj, name) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    int ok = 0;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    if (t >= 0 && sp >= 0 && (H5Tget_class(t) == H5T_FLOAT || H5Tget_class(t) == H5T_INTEGER) &&
        H5Sget_simple_extent_npoints(sp) == 3 && H5Sget_simple_extent_ndims(sp) <= 2) {
        double tmp[3];
        if (H5Aread(a, H5T_NATIVE_DOUBLE, tmp) >= 0 && isfinite(tmp[0]) && isfinite(tmp[1]) &&
            isfinite(tmp[2])) {
            memcpy(v, tmp, sizeof tmp);
            ok = 1;
        }
    }
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

/* A numeric dataset of exactly `count` values without filters or external storage (1-D unless
 * count is 1), integer only when `integer` is set, read as mem_type into buf (and its "units"
 * attribute when units is not NULL): 1 read, 0 absent, -1 unusable. */
static int read_plain_numbers(walk *w, const char *path, hid_t mem_type, int integer,
                              hssize_t count, void *buf, char *units, size_t usize)
{
    if (units)
        units[0] = '\0';
    int e = path_exists(w, w->master, path);
    if (e <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return e;
    }
    hid_t d = H5Oopen(w->master, path, w->lapl);
    if (d < 0) {
        H5Eclear2(H5E_DEFAULT);
        return -1;
    }
    int res = -1;
    if (H5Iget_type(d) == H5I_DATASET) {
        hid_t s = H5Dget_space(d), t = H5Dget_type(d), p = H5Dget_create_plist(d);
        const H5T_class_t c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
        if (s >= 0 && t >= 0 && p >= 0 && H5Pget_nfilters(p) == 0 &&
            H5Pget_external_count(p) == 0 && H5Sget_simple_extent_npoints(s) == count &&
            (count == 1 || H5Sget_simple_extent_ndims(s) == 1) &&
            (c == H5T_INTEGER || (!integer && c == H5T_FLOAT)) &&
            H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0) {
            res = 1;
            if (units)
                read_units(d, units, usize);
        }
        if (p >= 0)
            H5Pclose(p);
        if (t >= 0)
            H5Tclose(t);
        if (s >= 0)
            H5Sclose(s);
    }
    H5Oclose(d);
    H5Eclear2(H5E_DEFAULT);
    return res;
}

/* A numeric scalar (or one-element) dataset without filters, as a double (and its "units"
 * attribute when units is not NULL): 1 read, 0 absent, -1 unusable. */
static int read_scalar_units(walk *w, const char *path, double *out, char *units, size_t usize)
{
    double v = 0.0;
    const int res = read_plain_numbers(w, path, H5T_NATIVE_DOUBLE, 0, 1, &v, units, usize);
    if (res == 1)
        *out = v;
    return res;
}

static int read_scalar(walk *w, const char *path, double *out)
{
    return read_scalar_units(w, path, out, NULL, 0);
}

#define NX_PI 3.14159265358979323846

/* One NeXus transformation (NXtransformations member): a numeric scalar with its attributes. */
typedef struct nx_transform {
    double value;        /* in its units (mm or degrees after conversion)              */
    int rotation;        /* 1: rotation by value degrees about vector; 0: translation  */
    double vector[3];    /* unit                                                       */
    double offset_mm[3]; /* 0 when absent                                              */
    char depends_on[H5_PATH_MAX];
} nx_transform;

static double mm_per(const char *u, double dflt);

/* Reads the transformation at path (absolute): 1, or 0 when it is not a usable one (why says). */
static int read_transform(walk *w, const char *path, nx_transform *t, char *why, size_t ws)
{
    memset(t, 0, sizeof *t);
    char units[64];
    if (read_scalar_units(w, path, &t->value, units, sizeof units) != 1) {
        snprintf(why, ws, "%s is not one number", path);
        return 0;
    }
    hid_t d = H5Oopen(w->master, path, w->lapl);
    if (d < 0) {
        H5Eclear2(H5E_DEFAULT);
        snprintf(why, ws, "%s does not open", path);
        return 0;
    }
    char type[32], ounits[64];
    read_str_attr(d, "transformation_type", type, sizeof type);
    read_str_attr(d, "offset_units", ounits, sizeof ounits);
    read_str_attr(d, "depends_on", t->depends_on, sizeof t->depends_on);
    int have_vec = read_vec_attr(d, "vector", t->vector);
    double off[3] = {0.0, 0.0, 0.0};
    int have_off = read_vec_attr(d, "offset", off);
    H5Oclose(d);
    H5Eclear2(H5E_DEFAULT);
    double n = sqrt(t->vector[0] * t->vector[0] + t->vector[1] * t->vector[1] +
                    t->vector[2] * t->vector[2]);
    if (!have_vec || !(n > 0.0) || !isfinite(n)) {
        snprintf(why, ws, "%s has no usable vector attribute", path);
        return 0;
    }
    for (int i = 0; i < 3; i++)
        t->vector[i] /= n;
    if (strcmp(type, "rotation") == 0) {
        t->rotation = 1;
        if (units[0] && strcmp(units, "deg") != 0 && strcmp(units, "degree") != 0 &&
            strcmp(units, "degrees") != 0) {
            if (strcmp(units, "rad") == 0 || strcmp(units, "radian") == 0 ||
                strcmp(units, "radians") == 0)
                t->value *= 180.0 / NX_PI;
            else {
                snprintf(why, ws, "%s: rotation units '%s'", path, units);
                return 0;
            }
        }
    } else if (strcmp(type, "translation") == 0) {
        double f = mm_per(units, 1000.0);
        if (!(f > 0.0)) {
            snprintf(why, ws, "%s: translation units '%s'", path, units);
            return 0;
        }
        t->value *= f;
    } else {
        snprintf(why, ws, "%s: transformation_type '%s'", path, type);
        return 0;
    }
    if (have_off) {
        double f = mm_per(ounits[0] ? ounits : units, 1000.0);
        if (t->rotation && !ounits[0])
            f = 1000.0; /* a rotation's offset without offset_units: metres */
        if (!(f > 0.0)) {
            snprintf(why, ws, "%s: offset units '%s'", path, ounits);
            return 0;
        }
        for (int i = 0; i < 3; i++)
            t->offset_mm[i] = off[i] * f;
    }
    if (!isfinite(t->value) || !isfinite(t->offset_mm[0]) || !isfinite(t->offset_mm[1]) ||
        !isfinite(t->offset_mm[2])) {
        snprintf(why, ws, "%s: values not finite", path);
        return 0;
    }
    return 1;
}

/* v rotated by deg degrees about the unit axis a (Rodrigues). */
static void rotate(double v[3], const double a[3], double deg)
{
    const double th = deg * NX_PI / 180.0, c = cos(th), s = sin(th);
    const double d = a[0] * v[0] + a[1] * v[1] + a[2] * v[2];
    const double x[3] = {a[1] * v[2] - a[2] * v[1], a[2] * v[0] - a[0] * v[2],
                         a[0] * v[1] - a[1] * v[0]};
    for (int i = 0; i < 3; i++)
        v[i] = v[i] * c + x[i] * s + a[i] * d * (1.0 - c);
}

/* The absolute path `dep` names, seen from the object at `from` (NeXus allows paths relative to
 * the object's group): 1, or 0 when it does not fit. */
static int resolve_dep(const char *from, const char *dep, char *out, size_t size)
{
    if (dep[0] == '/')
        return snprintf(out, size, "%s", dep) < (int)size;
    const char *slash = strrchr(from, '/');
    if (!slash)
        return 0;
    return snprintf(out, size, "%.*s/%s", (int)(slash - from), from, dep) < (int)size;
}

/* A module's placement: the centre of its first pixel, its directions, its pixel size. */
typedef struct nx_place {
    double origin[3], fast[3], slow[3];
    double px, py;
} nx_place;

/*
 * The NXmx orientation of the module group at mpath (io.h, sw_h5_read_geometry):
 * fast_pixel_direction and slow_pixel_direction, their vectors and the depends_on chain they
 * share (translations and rotations, at most 16), applied to the first pixel's corner and to the
 * two directions. 1 with *pl; 0 when the module has no pixel directions; -1 when they are there
 * but unusable (a chain that loops or breaks, directions that are not perpendicular), with the
 * reason in why.
 */
static int module_place(walk *w, const char *mpath, nx_place *pl, char *why, size_t ws)
{
    char fpath[H5_PATH_MAX], spath[H5_PATH_MAX];
    if (snprintf(fpath, sizeof fpath, "%s/fast_pixel_direction", mpath) >= (int)sizeof fpath ||
        snprintf(spath, sizeof spath, "%s/slow_pixel_direction", mpath) >= (int)sizeof spath)
        return 0;
    if (path_exists(w, w->master, fpath) <= 0 || path_exists(w, w->master, spath) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    nx_transform f, sl;
    if (!read_transform(w, fpath, &f, why, ws) || !read_transform(w, spath, &sl, why, ws))
        return -1;
    if (f.rotation || sl.rotation || !(f.value > 0.0) || !(sl.value > 0.0)) {
        snprintf(why, ws, "the pixel directions are not translations by a positive pixel size");
        return -1;
    }
    char fdep[H5_PATH_MAX], sdep[H5_PATH_MAX];
    if (!resolve_dep(fpath, f.depends_on, fdep, sizeof fdep) ||
        !resolve_dep(spath, sl.depends_on, sdep, sizeof sdep) || strcmp(fdep, sdep) != 0) {
        snprintf(why, ws, "the fast and slow directions do not depend on one transformation");
        return -1;
    }
    /* the first pixel's corner and the two directions, carried out along the chain */
    double p[3] = {f.offset_mm[0] + sl.offset_mm[0], f.offset_mm[1] + sl.offset_mm[1],
                   f.offset_mm[2] + sl.offset_mm[2]};
    double fast[3] = {f.vector[0], f.vector[1], f.vector[2]};
    double slow[3] = {sl.vector[0], sl.vector[1], sl.vector[2]};
    char cur[H5_PATH_MAX];
    snprintf(cur, sizeof cur, "%s", fdep);
    int steps = 0;
    while (strcmp(cur, ".") != 0 && cur[0] != '\0') {
        if (++steps > 16) {
            snprintf(why, ws, "its depends_on chain is longer than 16 (or loops)");
            return -1;
        }
        nx_transform t;
        if (!read_transform(w, cur, &t, why, ws))
            return -1;
        if (t.rotation) {
            rotate(p, t.vector, t.value);
            rotate(fast, t.vector, t.value);
            rotate(slow, t.vector, t.value);
        } else {
            for (int i = 0; i < 3; i++)
                p[i] += t.value * t.vector[i];
        }
        for (int i = 0; i < 3; i++)
            p[i] += t.offset_mm[i];
        if (strcmp(t.depends_on, ".") == 0 || t.depends_on[0] == '\0')
            break;
        char next[H5_PATH_MAX];
        if (!resolve_dep(cur, t.depends_on, next, sizeof next)) {
            snprintf(why, ws, "%.900s depends on a path too long", cur);
            return -1;
        }
        snprintf(cur, sizeof cur, "%s", next);
    }
    /* spotwave's origin is the centre of pixel (0,0): half a pixel in from the corner */
    for (int i = 0; i < 3; i++) {
        pl->origin[i] = p[i] + 0.5 * f.value * fast[i] + 0.5 * sl.value * slow[i];
        pl->fast[i] = fast[i];
        pl->slow[i] = slow[i];
    }
    pl->px = f.value;
    pl->py = sl.value;
    const double dot = fast[0] * slow[0] + fast[1] * slow[1] + fast[2] * slow[2];
    if (fabs(dot) > 1e-6 || !isfinite(pl->origin[0]) || !isfinite(pl->origin[1]) ||
        !isfinite(pl->origin[2])) {
        snprintf(why, ws, "the pixel directions are not perpendicular");
        return -1;
    }
    return 1;
}

/*
 * The detector's orientation: that of its module ".../detector/module" (the one module Eiger
 * masters describe), when it can be used; anything else leaves the orientation out, with a
 * warning when something was there.
 */
static void read_orientation(walk *w, sw_diffraction_geometry *g)
{
    char why[H5_PATH_MAX + 128] = "";
    nx_place pl;
    const int got = module_place(w, PATH_DETECTOR "/module", &pl, why, sizeof why);
    if (got < 0)
        walk_warn(w, "%s: the module orientation is not used: %s", w->path, why);
    if (got <= 0)
        return;
    memcpy(g->origin_mm, pl.origin, sizeof g->origin_mm);
    memcpy(g->fast, pl.fast, sizeof g->fast);
    memcpy(g->slow, pl.slow, sizeof g->slow);
    g->orientation = 1;
    g->have |= SW_DG_ORIENTATION;
    if (!(g->have & SW_DG_PIXEL)) { /* the directions' values are the pixel size */
        g->pixel_x_mm = pl.px;
        g->pixel_y_mm = pl.py;
        g->have |= SW_DG_PIXEL;
    }
}

/* A numeric dataset of exactly two integers without filters (NXmx's data_origin, data_size) into
 * v: 1, 0 absent, -1 unusable (another count, a float, a filter, a value beyond int32). */
static int read_int_pair(walk *w, const char *path, int64_t v[2])
{
    long long tmp[2] = {0, 0};
    const int res = read_plain_numbers(w, path, H5T_NATIVE_LLONG, 1, 2, tmp, NULL, 0);
    if (res != 1)
        return res;
    if (tmp[0] < INT32_MIN || tmp[0] > INT32_MAX || tmp[1] < INT32_MIN || tmp[1] > INT32_MAX)
        return -1;
    v[0] = tmp[0];
    v[1] = tmp[1];
    return 1;
}

/*
 * The detector's modules (io.h, sw_h5_read_modules): every group under /entry/instrument/detector
 * (hard links, in name order) whose NX_class is NXdetector_module, with data_origin and data_size
 * of two integers (slow, fast), each rectangle inside the frame and apart from the others; each
 * with its orientation when module_place gives one. Modules that do not hold together are all
 * left out, with a warning.
 */
static void read_modules(walk *w)
{
    h5_layout *l = w->l;
    if (path_exists(w, w->master, PATH_DETECTOR) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return;
    }
    hid_t det = H5Oopen(w->master, PATH_DETECTOR, w->lapl);
    H5G_info_t gi;
    if (det < 0 || H5Iget_type(det) != H5I_GROUP || H5Gget_info(det, &gi) < 0) {
        if (det >= 0)
            H5Oclose(det);
        H5Eclear2(H5E_DEFAULT);
        return;
    }
    char why[H5_PATH_MAX + 192] = "";
    const uint64_t frame_h = l->blocks[0].dims[1], frame_w = l->blocks[0].dims[2];
    const hsize_t nlinks = gi.nlinks < H5_MAX_LINKS_SEEN ? gi.nlinks : H5_MAX_LINKS_SEEN;
    for (hsize_t i = 0; i < nlinks && !why[0]; i++) {
        char name[256], mpath[H5_PATH_MAX];
        ssize_t len =
            H5Lget_name_by_idx(det, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, w->lapl);
        H5L_info_t li;
        if (len <= 0 || (size_t)len >= sizeof name || H5Lget_info(det, name, &li, w->lapl) < 0 ||
            li.type != H5L_TYPE_HARD) {
            H5Eclear2(H5E_DEFAULT);
            continue;
        }
        snprintf(mpath, sizeof mpath, "%s/%s", PATH_DETECTOR, name);
        hid_t m = H5Oopen(det, name, w->lapl);
        char cls[64] = "";
        if (m >= 0) {
            if (H5Iget_type(m) == H5I_GROUP)
                read_str_attr(m, "NX_class", cls, sizeof cls);
            H5Oclose(m);
        }
        H5Eclear2(H5E_DEFAULT);
        if (strcmp(cls, "NXdetector_module") != 0)
            continue;
        if (l->nmodules >= H5_MAX_MODULES) {
            snprintf(why, sizeof why, "more than %d modules", H5_MAX_MODULES);
            break;
        }
        if (!l->modules && !(l->modules = malloc(H5_MAX_MODULES * sizeof *l->modules))) {
            snprintf(why, sizeof why, "out of memory");
            break;
        }
        char p1[H5_PATH_MAX + 16], p2[H5_PATH_MAX + 16];
        snprintf(p1, sizeof p1, "%s/data_origin", mpath);
        snprintf(p2, sizeof p2, "%s/data_size", mpath);
        int64_t org[2], size[2];
        if (read_int_pair(w, p1, org) != 1 || read_int_pair(w, p2, size) != 1) {
            snprintf(why, sizeof why,
                     "%.300s has no data_origin and data_size of two integers (slow, fast)", mpath);
            break;
        }
        sw_diffraction_module *md = &l->modules[l->nmodules];
        memset(md, 0, sizeof *md);
        md->y0 = (int32_t)org[0];
        md->x0 = (int32_t)org[1];
        md->height = (int32_t)size[0];
        md->width = (int32_t)size[1];
        if (md->x0 < 0 || md->y0 < 0 || md->width < 1 || md->height < 1 ||
            (uint64_t)md->x0 + (uint64_t)md->width > frame_w ||
            (uint64_t)md->y0 + (uint64_t)md->height > frame_h) {
            snprintf(why, sizeof why,
                     "%.300s (%d x %d px at %d, %d) does not lie inside the %llu x %llu frames",
                     mpath, (int)md->width, (int)md->height, (int)md->x0, (int)md->y0,
                     (unsigned long long)frame_w, (unsigned long long)frame_h);
            break;
        }
        for (uint32_t k = 0; k < l->nmodules && !why[0]; k++) {
            const sw_diffraction_module *o = &l->modules[k];
            if (md->x0 < o->x0 + o->width && o->x0 < md->x0 + md->width &&
                md->y0 < o->y0 + o->height && o->y0 < md->y0 + md->height)
                snprintf(why, sizeof why, "%.300s overlaps module %u", mpath, (unsigned)k);
        }
        if (why[0])
            break;
        nx_place pl;
        char pwhy[H5_PATH_MAX + 128] = "";
        const int got = module_place(w, mpath, &pl, pwhy, sizeof pwhy);
        if (got < 0)
            walk_warn(w, "%s: %s's orientation is not used: %s", w->path, mpath, pwhy);
        if (got > 0) {
            /* where frame pixel (0,0) would lie on the module's plane */
            md->orientation = 1;
            for (int c = 0; c < 3; c++) {
                md->origin_mm[c] =
                    pl.origin[c] - md->x0 * pl.px * pl.fast[c] - md->y0 * pl.py * pl.slow[c];
                md->fast[c] = pl.fast[c];
                md->slow[c] = pl.slow[c];
            }
            md->pixel_x_mm = pl.px;
            md->pixel_y_mm = pl.py;
        }
        l->nmodules++;
    }
    H5Oclose(det);
    H5Eclear2(H5E_DEFAULT);
    if (why[0]) {
        walk_warn(w, "%s: the detector's modules are not used: %s", w->path, why);
        l->nmodules = 0;
    }
}

/* Millimetres per unit of a length ("m", "mm", "um", ...); dflt when there is no unit; 0 when
 * the unit is not a length spotwave knows. */
static double mm_per(const char *u, double dflt)
{
    static const struct {
        const char *name;
        double mm;
    } t[] = {{"m", 1000.0},      {"metre", 1000.0}, {"meter", 1000.0},   {"metres", 1000.0},
             {"meters", 1000.0}, {"mm", 1.0},       {"millimetre", 1.0}, {"millimeter", 1.0},
             {"um", 1e-3},       {"micron", 1e-3},  {"microns", 1e-3},   {"cm", 10.0}};
    if (!u[0])
        return dflt;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(u, t[i].name) == 0)
            return t[i].mm;
    return 0.0;
}

/* Ångströms per unit of a wavelength; 1 when there is no unit (NXmx's customary unit). */
static double angstrom_per(const char *u)
{
    if (!u[0] || strcmp(u, "angstrom") == 0 || strcmp(u, "Angstrom") == 0 ||
        strcmp(u, "angstroms") == 0 || strcmp(u, "Angstroms") == 0 || strcmp(u, "A") == 0 ||
        strcmp(u, "\xC3\x85") == 0)
        return 1.0;
    if (strcmp(u, "nm") == 0)
        return 10.0;
    if (strcmp(u, "m") == 0)
        return 1e10;
    return 0.0;
}

/*
 * The NXmx geometry (io.h, sw_h5_read_geometry): each field only when its dataset is a numeric
 * scalar with a finite value and a unit spotwave knows; a field that is there but unusable is a
 * warning.
 */
static void read_geometry(walk *w)
{
    sw_diffraction_geometry *g = &w->l->geom;
    sw_diffraction_geometry_init(g);
    char u[64], u2[64];
    double v, v2, f;
    int got = read_scalar_units(w, PATH_WAVELENGTH, &v, u, sizeof u);
    if (got == 1 && (f = angstrom_per(u)) > 0.0 && isfinite(v * f) && v * f > 0.0) {
        g->wavelength_a = v * f;
        g->have |= SW_DG_WAVELENGTH;
    } else if (got != 0) {
        walk_warn(w, "%s: %s (units '%s') is not a usable wavelength: ignored", w->path,
                  PATH_WAVELENGTH, u);
    }
    got = read_scalar_units(w, PATH_DISTANCE, &v, u, sizeof u);
    if (got == 1 && (f = mm_per(u, 1000.0)) > 0.0 && isfinite(v * f) && v * f > 0.0) {
        g->distance_mm = v * f;
        g->have |= SW_DG_DISTANCE;
    } else if (got != 0) {
        walk_warn(w, "%s: %s (units '%s') is not a usable distance: ignored", w->path,
                  PATH_DISTANCE, u);
    }
    int gx = read_scalar_units(w, PATH_PIXEL_X, &v, u, sizeof u);
    int gy = read_scalar_units(w, PATH_PIXEL_Y, &v2, u2, sizeof u2);
    double fx = mm_per(u, 1000.0), fy = mm_per(u2, 1000.0);
    if (gx == 1 && gy == 1 && fx > 0.0 && fy > 0.0 && isfinite(v * fx) && isfinite(v2 * fy) &&
        v * fx > 0.0 && v2 * fy > 0.0) {
        g->pixel_x_mm = v * fx;
        g->pixel_y_mm = v2 * fy;
        g->have |= SW_DG_PIXEL;
    } else if (gx != 0 || gy != 0) {
        walk_warn(w, "%s: %s and %s are not a usable pixel size: ignored", w->path, PATH_PIXEL_X,
                  PATH_PIXEL_Y);
    }
    gx = read_scalar_units(w, PATH_BEAM_X, &v, u, sizeof u);
    gy = read_scalar_units(w, PATH_BEAM_Y, &v2, u2, sizeof u2);
    if (gx == 1 && gy == 1 && isfinite(v) && isfinite(v2)) {
        /* pixels (NXmx's unit, and the default); a length only with the pixel size */
        int px = (!u[0] || strncmp(u, "pixel", 5) == 0) && (!u2[0] || strncmp(u2, "pixel", 5) == 0);
        double lx = mm_per(u, 0.0), ly = mm_per(u2, 0.0);
        if (!px && lx > 0.0 && ly > 0.0 && (g->have & SW_DG_PIXEL)) {
            v = v * lx / g->pixel_x_mm;
            v2 = v2 * ly / g->pixel_y_mm;
            px = 1;
        }
        if (px && fabs(v) < 1e7 && fabs(v2) < 1e7) {
            /* edges at whole numbers, as DIALS reads NXmx: pixel centres at +0.5 */
            g->beam_x_px = v - 0.5;
            g->beam_y_px = v2 - 0.5;
            g->have |= SW_DG_BEAM;
        } else {
            walk_warn(w, "%s: the beam centre (units '%s', '%s') is not usable: ignored", w->path,
                      u, u2);
        }
    } else if (gx != 0 || gy != 0) {
        walk_warn(w, "%s: %s and %s are not a usable beam centre: ignored", w->path, PATH_BEAM_X,
                  PATH_BEAM_Y);
    }
    got = read_scalar_units(w, PATH_COUNT_TIME, &v, u, sizeof u);
    if (got == 1 &&
        (!u[0] || strcmp(u, "s") == 0 || strcmp(u, "second") == 0 || strcmp(u, "seconds") == 0) &&
        isfinite(v) && v > 0.0) {
        g->exposure_s = v;
        g->have |= SW_DG_EXPOSURE;
    }
    if (w->l->overload > 0.0) {
        g->overload = w->l->overload;
        g->have |= SW_DG_OVERLOAD;
    }
    read_orientation(w, g);
    read_modules(w);
}

static void read_overload(walk *w)
{
    static const char *const paths[2] = {PATH_CUTOFF, PATH_SATURATION};
    for (int i = 0; i < 2; i++) {
        double v = 0.0;
        int got = read_scalar(w, paths[i], &v);
        if (got == 1 && isfinite(v) && v > 0.0) {
            w->l->overload = v;
            return;
        }
        if (got != 0)
            walk_warn(w, "%s: %s is not a usable overload (not one positive number): ignored",
                      w->path, paths[i]);
    }
}

static void find_mask(walk *w)
{
    h5_layout *l = w->l;
    int e = path_exists(w, w->master, PATH_MASK);
    H5Eclear2(H5E_DEFAULT);
    if (e <= 0)
        return;
    hid_t o = H5Oopen(w->master, PATH_MASK, w->lapl);
    if (o < 0) {
        H5Eclear2(H5E_DEFAULT);
        return;
    }
    int is = H5Iget_type(o) == H5I_DATASET;
    H5Oclose(o);
    if (!is)
        return;
    l->has_mask = 1;
    w->frame_h = l->blocks[0].dims[1];
    w->frame_w = l->blocks[0].dims[2];
    sw_status st = describe(w, w->master, 0, PATH_MASK, PATH_MASK, 1, &l->mask, l->mask_msg,
                            sizeof l->mask_msg);
    if (st == SW_EUNSUPPORTED) {
        char id[32] = "", *nl = strchr(l->mask_msg, '\n');
        if (nl)
            *nl = '\0';
        snprintf(id, sizeof id, "%.31s", l->mask_msg);
        snprintf(l->mask_msg, sizeof l->mask_msg,
                 "%s: %s is compressed with HDF5 filter %s, which this HDF5 cannot load", w->path,
                 PATH_MASK, id);
    }
    if (st == SW_OK) {
        l->mask_ok = 1;
    } else {
        if (st == SW_ENOMEM && l->st == SW_OK)
            walk_fail(w, SW_ENOMEM, "%s", l->mask_msg);
        h5_dset_free(&l->mask);
        memset(&l->mask, 0, sizeof l->mask);
        l->mask.hd = -1;
        /* a failure inside describe may have set the layout's own: the mask's is not fatal */
        if (l->st != SW_ENOMEM) {
            l->st = SW_OK;
            l->msg[0] = '\0';
        }
    }
}

void h5_walk(const char *path, const h5_walk_opts *o, h5_layout *out)
{
    memset(out, 0, sizeof *out);
    out->mask.hd = -1;
    walk w;
    memset(&w, 0, sizeof w);
    w.path = path;
    w.o = o;
    w.l = out;
    w.master = w.lapl = w.fapl = -1;

    H5E_auto2_t func = NULL;
    void *data = NULL;
    int saved = H5Eget_auto2(H5E_DEFAULT, &func, &data) >= 0;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

    w.lapl = H5Pcreate(H5P_LINK_ACCESS);
    w.fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (w.lapl < 0 || w.fapl < 0 || H5Pset_elink_cb(w.lapl, deny_external, NULL) < 0) {
        walk_fail(&w, SW_ENOMEM, "%s: HDF5 cannot set up (%s)", path, why_h5(&w));
        goto out;
    }
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
    /* Reading needs no lock, and some cluster file systems refuse flock(). */
    H5Pset_file_locking(w.fapl, 0, 1);
#endif
    if (add_file(&w, path, "the file") < 0)
        goto out;
    htri_t is = H5Fis_hdf5(path);
    if (is == 0) {
        walk_fail(&w, SW_EFORMAT, "%s: not an HDF5 file (no HDF5 signature found)", path);
        goto out;
    }
    if (is < 0) {
        walk_fail(&w, SW_EFORMAT, "%s: not a readable HDF5 file (%s)", path, why_h5(&w));
        goto out;
    }
    w.master = H5Fopen(path, H5F_ACC_RDONLY, w.fapl);
    if (w.master < 0) {
        walk_fail(&w, SW_EFORMAT, "%s: not a readable HDF5 file, truncated or corrupt (%s)", path,
                  why_h5(&w));
        goto out;
    }
    if (find_blocks(&w) != SW_OK)
        goto out;
    uint64_t frames = 0;
    for (uint32_t i = 0; i < out->nblocks; i++) {
        out->blocks[i].first = (int64_t)frames;
        frames += out->blocks[i].dims[0];
    }
    if (frames < 1) {
        walk_fail(&w, SW_EFORMAT, "%s: %s holds no frames", path, out->blocks[0].name);
        goto out;
    }
    if (frames > (uint64_t)1 << 40) {
        walk_fail(&w, SW_EFORMAT, "%s: an absurd %llu frames in all", path,
                  (unsigned long long)frames);
        goto out;
    }
    find_mask(&w);
    read_overload(&w);
    read_geometry(&w);
out:
    if (w.master >= 0)
        H5Fclose(w.master);
    if (w.lapl >= 0)
        H5Pclose(w.lapl);
    if (w.fapl >= 0)
        H5Pclose(w.fapl);
    H5Eclear2(H5E_DEFAULT);
    if (saved)
        H5Eset_auto2(H5E_DEFAULT, func, data);
}

/* ------------------------------------------------------------------ freeing */

void h5_dset_free(h5_dset *d)
{
    if (d->hd >= 0)
        H5Dclose(d->hd);
    d->hd = -1;
    free(d->name);
    free(d->obj);
    free(d->chunks);
    d->name = d->obj = NULL;
    d->chunks = NULL;
}

void h5_layout_free(h5_layout *l)
{
    for (uint32_t i = 0; i < l->nblocks; i++)
        h5_dset_free(&l->blocks[i]);
    free(l->blocks);
    h5_dset_free(&l->mask);
    for (uint32_t i = 0; i < l->nfiles; i++) {
        if (l->files[i].h5 >= 0)
            H5Fclose(l->files[i].h5);
        free(l->files[i].path);
    }
    free(l->files);
    for (uint32_t i = 0; i < l->nwarnings; i++)
        free(l->warnings[i]);
    free(l->warnings);
    free(l->modules);
    l->modules = NULL;
    l->nmodules = 0;
    l->blocks = NULL;
    l->files = NULL;
    l->warnings = NULL;
    l->nblocks = l->nfiles = l->nwarnings = 0;
}

/* ------------------------------------------------------------------ the message */

#define MSG_MAGIC 0x3548574Du /* "MWH5" */

typedef struct pack {
    uint8_t *p;
    size_t n, cap;
    int oom;
} pack;

static void put(pack *k, const void *v, size_t n)
{
    if (k->oom)
        return;
    if (k->n + n > k->cap) {
        size_t cap = k->cap ? k->cap : 4096;
        while (cap < k->n + n)
            cap *= 2;
        uint8_t *p = realloc(k->p, cap);
        if (!p) {
            k->oom = 1;
            return;
        }
        k->p = p;
        k->cap = cap;
    }
    memcpy(k->p + k->n, v, n);
    k->n += n;
}

static void put32(pack *k, uint32_t v)
{
    put(k, &v, 4);
}

static void put64(pack *k, uint64_t v)
{
    put(k, &v, 8);
}

static void putstr(pack *k, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    put32(k, (uint32_t)n);
    put(k, s ? s : "", n);
}

static void put_dset(pack *k, const h5_dset *d)
{
    putstr(k, d->name);
    putstr(k, d->obj);
    put32(k, d->file);
    put32(k, d->rank);
    for (int i = 0; i < 3; i++)
        put64(k, d->dims[i]);
    put32(k, d->esize);
    put32(k, d->swap);
    put32(k, d->layout);
    put32(k, d->filtered);
    put(k, d->fill, 8);
    put64(k, d->addr);
    for (int i = 0; i < 3; i++)
        put64(k, d->cdim[i]);
    for (int i = 0; i < 3; i++)
        put64(k, d->grid[i]);
    put32(k, d->listed);
    put32(k, d->nfilters);
    for (uint32_t i = 0; i < d->nfilters && i < H5_MAX_FILTERS; i++) {
        put32(k, d->filters[i].id);
        put32(k, d->filters[i].ncd);
        for (int j = 0; j < 5; j++)
            put32(k, d->filters[i].cd[j]);
    }
    uint64_t nc =
        d->layout == H5_LAYOUT_CHUNKED && d->listed ? d->grid[0] * d->grid[1] * d->grid[2] : 0;
    put64(k, nc);
    for (uint64_t i = 0; i < nc; i++) {
        put64(k, d->chunks[i].addr);
        put64(k, d->chunks[i].size);
        put32(k, d->chunks[i].mask);
    }
}

uint8_t *h5_layout_pack(const h5_layout *l, size_t *size)
{
    pack k = {NULL, 0, 0, 0};
    put32(&k, MSG_MAGIC);
    put32(&k, (uint32_t)l->st);
    putstr(&k, l->msg);
    put32(&k, l->nwarnings);
    for (uint32_t i = 0; i < l->nwarnings; i++)
        putstr(&k, l->warnings[i]);
    if (l->st == SW_OK) {
        put32(&k, l->nfiles);
        for (uint32_t i = 0; i < l->nfiles; i++) {
            putstr(&k, l->files[i].path);
            put64(&k, l->files[i].dev);
            put64(&k, l->files[i].ino);
            put64(&k, l->files[i].size);
        }
        put32(&k, l->nblocks);
        for (uint32_t i = 0; i < l->nblocks; i++)
            put_dset(&k, &l->blocks[i]);
        put32(&k, (uint32_t)l->has_mask);
        put32(&k, (uint32_t)l->mask_ok);
        putstr(&k, l->mask_msg);
        if (l->mask_ok)
            put_dset(&k, &l->mask);
        uint64_t ov;
        memcpy(&ov, &l->overload, 8);
        put64(&k, ov);
        const double g[7] = {l->geom.wavelength_a, l->geom.distance_mm, l->geom.beam_x_px,
                             l->geom.beam_y_px,    l->geom.pixel_x_mm,  l->geom.pixel_y_mm,
                             l->geom.exposure_s};
        put32(&k, l->geom.have);
        for (int i = 0; i < 7; i++) {
            memcpy(&ov, &g[i], 8);
            put64(&k, ov);
        }
        for (int i = 0; i < 9; i++) {
            const double v = i < 3   ? l->geom.origin_mm[i]
                             : i < 6 ? l->geom.fast[i - 3]
                                     : l->geom.slow[i - 6];
            memcpy(&ov, &v, 8);
            put64(&k, ov);
        }
        put32(&k, l->nmodules);
        for (uint32_t m = 0; m < l->nmodules; m++) {
            const sw_diffraction_module *md = &l->modules[m];
            put32(&k, (uint32_t)md->x0);
            put32(&k, (uint32_t)md->y0);
            put32(&k, (uint32_t)md->width);
            put32(&k, (uint32_t)md->height);
            put32(&k, (uint32_t)md->orientation);
            const double v[11] = {md->origin_mm[0], md->origin_mm[1], md->origin_mm[2], md->fast[0],
                                  md->fast[1],      md->fast[2],      md->slow[0],      md->slow[1],
                                  md->slow[2],      md->pixel_x_mm,   md->pixel_y_mm};
            for (int i = 0; i < 11; i++) {
                memcpy(&ov, &v[i], 8);
                put64(&k, ov);
            }
        }
    }
    if (k.oom) {
        free(k.p);
        return NULL;
    }
    *size = k.n;
    return k.p;
}

typedef struct unpack {
    const uint8_t *p;
    size_t n, pos;
    int bad;
} unpack;

static void get(unpack *u, void *v, size_t n)
{
    if (u->bad || n > u->n - u->pos) {
        u->bad = 1;
        memset(v, 0, n);
        return;
    }
    memcpy(v, u->p + u->pos, n);
    u->pos += n;
}

static uint32_t get32(unpack *u)
{
    uint32_t v;
    get(u, &v, 4);
    return v;
}

static uint64_t get64(unpack *u)
{
    uint64_t v;
    get(u, &v, 8);
    return v;
}

/* A string of at most max bytes (malloc'ed); NULL and bad set otherwise. */
static char *getstr(unpack *u, size_t max)
{
    uint32_t n = get32(u);
    if (u->bad || n > max || n > u->n - u->pos || memchr(u->p + u->pos, 0, n)) {
        u->bad = 1;
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        u->bad = 2;
        return NULL;
    }
    memcpy(s, u->p + u->pos, n);
    s[n] = '\0';
    u->pos += n;
    return s;
}

static int get_dset(unpack *u, h5_dset *d, const h5_layout *l, int mask, char *why, size_t ws)
{
    memset(d, 0, sizeof d[0]);
    d->hd = -1;
    d->name = getstr(u, H5_FILE_MAX + 3 * H5_PATH_MAX);
    d->obj = getstr(u, 2 * H5_PATH_MAX);
    d->file = get32(u);
    d->rank = get32(u);
    for (int i = 0; i < 3; i++)
        d->dims[i] = get64(u);
    d->esize = get32(u);
    d->swap = get32(u);
    d->layout = get32(u);
    d->filtered = get32(u);
    get(u, d->fill, 8);
    d->addr = get64(u);
    for (int i = 0; i < 3; i++)
        d->cdim[i] = get64(u);
    for (int i = 0; i < 3; i++)
        d->grid[i] = get64(u);
    d->listed = get32(u);
    d->nfilters = get32(u);
    if (u->bad) {
        snprintf(why, ws, "truncated");
        return -1;
    }
    if (d->file >= l->nfiles || (d->rank != 2 && d->rank != 3) || d->swap > 1 ||
        d->layout > H5_LAYOUT_HDF5 || d->nfilters > H5_MAX_FILTERS || d->listed > 1) {
        snprintf(why, ws, "a dataset's description is out of range");
        return -1;
    }
    if (mask ? (d->esize < 1 || d->esize > 8) : (d->esize != 1 && d->esize != 2 && d->esize != 4)) {
        snprintf(why, ws, "a value size of %u bytes", d->esize);
        return -1;
    }
    if ((d->rank == 2 && d->dims[0] != 1) || d->dims[0] > (uint64_t)1 << 40 || d->dims[1] == 0 ||
        d->dims[2] == 0 || d->dims[1] > SW_IMAGE_MAX_DIM || d->dims[2] > SW_IMAGE_MAX_DIM ||
        d->dims[1] * d->dims[2] > (uint64_t)SW_IMAGE_MAX_PIXELS) {
        snprintf(why, ws, "a dataset of absurd shape");
        return -1;
    }
    for (uint32_t i = 0; i < d->nfilters; i++) {
        d->filters[i].id = get32(u);
        d->filters[i].ncd = get32(u);
        for (int j = 0; j < 5; j++)
            d->filters[i].cd[j] = get32(u);
        if (d->filters[i].ncd > 5) {
            snprintf(why, ws, "a filter with %u parameters", d->filters[i].ncd);
            return -1;
        }
    }
    uint64_t nc = get64(u);
    if (u->bad) {
        snprintf(why, ws, "truncated");
        return -1;
    }
    const uint64_t fsize = l->files[d->file].size;
    if (d->layout == H5_LAYOUT_CONTIG) {
        const uint64_t total = d->dims[0] * d->dims[1] * d->dims[2] * d->esize;
        if (d->dims[0] && total / d->dims[0] != d->dims[1] * d->dims[2] * d->esize) {
            snprintf(why, ws, "a contiguous dataset of absurd size");
            return -1;
        }
        if (d->addr != H5_ADDR_NONE && (d->addr > fsize || total > fsize - d->addr)) {
            snprintf(why, ws,
                     "%s: its %llu bytes at byte %llu lie beyond the end of %s (%llu bytes): "
                     "truncated",
                     d->name, (unsigned long long)total, (unsigned long long)d->addr,
                     l->files[d->file].path, (unsigned long long)fsize);
            return -1;
        }
        if (nc != 0) {
            snprintf(why, ws, "chunks listed for a contiguous dataset");
            return -1;
        }
        return 0;
    }
    if (d->layout == H5_LAYOUT_HDF5)
        return nc == 0 ? 0 : (snprintf(why, ws, "chunks listed for the fallback"), -1);
    /* chunked: the grid must be what the shapes say, the chunk bounded, every chunk in the file */
    for (int i = 0; i < 3; i++)
        if (d->cdim[i] == 0 || d->cdim[i] > ((uint64_t)1 << 32) ||
            d->grid[i] != (d->dims[i] + d->cdim[i] - 1) / d->cdim[i]) {
            snprintf(why, ws, "%s: a chunk shape that does not fit its dataset", d->name);
            return -1;
        }
    if (d->cdim[0] * d->cdim[1] > H5_MAX_CHUNK_BYTES ||
        d->cdim[0] * d->cdim[1] * d->cdim[2] > H5_MAX_CHUNK_BYTES / d->esize) {
        snprintf(why, ws, "%s: chunks beyond %llu bytes", d->name,
                 (unsigned long long)H5_MAX_CHUNK_BYTES);
        return -1;
    }
    const uint64_t cells = d->grid[0] * d->grid[1] * d->grid[2];
    if (d->grid[0] && cells / d->grid[0] != d->grid[1] * d->grid[2]) {
        snprintf(why, ws, "%s: an absurd chunk grid", d->name);
        return -1;
    }
    if (!d->listed) {
        if (nc != 0 || cells <= H5_LIST_MAX) {
            snprintf(why, ws, "%s: chunks neither listed nor to be looked up", d->name);
            return -1;
        }
        return 0;
    }
    if (cells != nc || nc > H5_LIST_MAX || nc > (u->n - u->pos) / 20) {
        snprintf(why, ws, "%s: %llu chunks listed for a grid of %llu", d->name,
                 (unsigned long long)nc, (unsigned long long)cells);
        return -1;
    }
    d->chunks = malloc((nc ? nc : 1) * sizeof *d->chunks);
    if (!d->chunks) {
        snprintf(why, ws, "out of memory");
        return -2;
    }
    /* stored bytes: at most the decoded size with room for any filter's growth */
    const uint64_t cbytes = h5_chunk_bytes(d), most = h5_chunk_stored_max(d);
    for (uint64_t i = 0; i < nc; i++) {
        h5_chunk *c = &d->chunks[i];
        c->addr = get64(u);
        c->size = get64(u);
        c->mask = get32(u);
        if (c->addr == H5_ADDR_NONE) {
            if (c->size != 0) {
                snprintf(why, ws, "%s: chunk %llu is unwritten but has a size", d->name,
                         (unsigned long long)i);
                return -1;
            }
            continue;
        }
        if (c->size == 0 || c->addr > fsize || c->size > fsize - c->addr) {
            snprintf(why, ws,
                     "%s: chunk %llu (%llu bytes at byte %llu) lies beyond the end of %s (%llu "
                     "bytes): truncated or corrupt",
                     d->name, (unsigned long long)i, (unsigned long long)c->size,
                     (unsigned long long)c->addr, l->files[d->file].path,
                     (unsigned long long)fsize);
            return -1;
        }
        if (c->size > most) {
            snprintf(why, ws,
                     "%s: chunk %llu claims %llu stored bytes for %llu decoded ones: corrupt",
                     d->name, (unsigned long long)i, (unsigned long long)c->size,
                     (unsigned long long)cbytes);
            return -1;
        }
    }
    if (u->bad) {
        snprintf(why, ws, "truncated");
        return -1;
    }
    return 0;
}

sw_status h5_layout_unpack(const uint8_t *buf, size_t size, h5_layout *l)
{
    memset(l, 0, sizeof *l);
    l->mask.hd = -1;
    unpack u = {buf, size, 0, 0};
    char why[SW_ERROR_MAX] = "";
    if (get32(&u) != MSG_MAGIC)
        goto bad;
    uint32_t st = get32(&u);
    char *msg = getstr(&u, SW_ERROR_MAX - 1);
    if (!msg)
        goto bad;
    snprintf(l->msg, sizeof l->msg, "%s", msg);
    free(msg);
    uint32_t nw = get32(&u);
    if (u.bad || nw > 64)
        goto bad;
    if (nw) {
        l->warnings = calloc(nw, sizeof *l->warnings);
        if (!l->warnings)
            goto oom;
        for (uint32_t i = 0; i < nw; i++) {
            l->warnings[i] = getstr(&u, SW_ERROR_MAX - 1);
            if (!l->warnings[i])
                goto bad;
            l->nwarnings++;
        }
    }
    if (st != SW_OK) {
        if (st != SW_EFORMAT && st != SW_EIO && st != SW_EUNSUPPORTED && st != SW_ENOMEM &&
            st != SW_EINVAL)
            goto bad;
        l->st = (sw_status)st;
        if (l->msg[0] == '\0')
            snprintf(l->msg, sizeof l->msg,
                     "the file's structure could not be read (no reason "
                     "given)");
        return l->st;
    }
    uint32_t nf = get32(&u);
    if (u.bad || nf < 1 || nf > H5_MAX_FILES || nf > (u.n - u.pos) / 28)
        goto bad;
    l->files = calloc(nf, sizeof *l->files);
    if (!l->files)
        goto oom;
    for (uint32_t i = 0; i < nf; i++) {
        h5_file *f = &l->files[i];
        f->h5 = -1;
        f->path = getstr(&u, 2 * H5_FILE_MAX);
        l->nfiles++; /* from here on h5_layout_free frees its path */
        f->dev = get64(&u);
        f->ino = get64(&u);
        f->size = get64(&u);
        if (!f->path || u.bad)
            goto bad;
    }
    uint32_t nb = get32(&u);
    if (u.bad || nb < 1 || nb > H5_MAX_BLOCKS || nb > (u.n - u.pos) / 64)
        goto bad;
    l->blocks = calloc(nb, sizeof *l->blocks);
    if (!l->blocks)
        goto oom;
    uint64_t frames = 0;
    for (uint32_t i = 0; i < nb; i++) {
        h5_dset *d = &l->blocks[i];
        int rc = get_dset(&u, d, l, 0, why, sizeof why);
        l->nblocks++;
        if (rc == -2)
            goto oom;
        if (rc < 0)
            goto bad;
        if (d->dims[1] != l->blocks[0].dims[1] || d->dims[2] != l->blocks[0].dims[2] ||
            d->esize != l->blocks[0].esize) {
            snprintf(why, sizeof why, "blocks of different shapes");
            goto bad;
        }
        d->first = (int64_t)frames;
        frames += d->dims[0];
    }
    if (frames < 1 || frames > (uint64_t)1 << 40) {
        snprintf(why, sizeof why, "%llu frames", (unsigned long long)frames);
        goto bad;
    }
    l->has_mask = get32(&u) != 0;
    l->mask_ok = get32(&u) != 0;
    msg = getstr(&u, SW_ERROR_MAX - 1);
    if (!msg)
        goto bad;
    snprintf(l->mask_msg, sizeof l->mask_msg, "%s", msg);
    free(msg);
    if (l->mask_ok) {
        int rc = get_dset(&u, &l->mask, l, 1, why, sizeof why);
        if (rc == -2)
            goto oom;
        if (rc < 0 || l->mask.rank != 2 || l->mask.dims[1] != l->blocks[0].dims[1] ||
            l->mask.dims[2] != l->blocks[0].dims[2])
            goto bad;
    }
    uint64_t ov = get64(&u);
    memcpy(&l->overload, &ov, 8);
    if (u.bad || !(l->overload >= 0.0) || !isfinite(l->overload))
        goto bad;
    /* the geometry: only the bits the walk sets, every value finite, lengths positive */
    sw_diffraction_geometry *g = &l->geom;
    sw_diffraction_geometry_init(g);
    uint32_t have = get32(&u);
    double gv[16];
    for (int i = 0; i < 16; i++) {
        ov = get64(&u);
        memcpy(&gv[i], &ov, 8);
        if (!isfinite(gv[i]))
            goto bad;
    }
    const uint32_t known = SW_DG_WAVELENGTH | SW_DG_DISTANCE | SW_DG_BEAM | SW_DG_PIXEL |
                           SW_DG_OVERLOAD | SW_DG_EXPOSURE | SW_DG_ORIENTATION;
    /* the modules: inside the frame, apart, orientations of unit axes and positive pixels (a
     * message that ends before them has none) */
    const uint32_t nmod = u.pos == u.n ? 0 : get32(&u);
    if (u.bad || nmod > H5_MAX_MODULES)
        goto bad;
    if (nmod > 0 && !(l->modules = malloc(nmod * sizeof *l->modules)))
        goto oom;
    for (uint32_t m = 0; m < nmod; m++) {
        sw_diffraction_module *md = &l->modules[m];
        memset(md, 0, sizeof *md);
        const uint32_t x0 = get32(&u), y0 = get32(&u), mw = get32(&u), mh = get32(&u);
        const uint32_t orient = get32(&u);
        double mv[11];
        for (int i = 0; i < 11; i++) {
            ov = get64(&u);
            memcpy(&mv[i], &ov, 8);
            if (!isfinite(mv[i]))
                goto bad;
        }
        if (u.bad || orient > 1 || mw < 1 || mh < 1 || x0 > l->blocks[0].dims[2] ||
            mw > l->blocks[0].dims[2] - x0 || y0 > l->blocks[0].dims[1] ||
            mh > l->blocks[0].dims[1] - y0)
            goto bad;
        md->x0 = (int32_t)x0;
        md->y0 = (int32_t)y0;
        md->width = (int32_t)mw;
        md->height = (int32_t)mh;
        md->orientation = (int)orient;
        for (uint32_t o = 0; o < m; o++) {
            const sw_diffraction_module *q = &l->modules[o];
            if (md->x0 < q->x0 + q->width && q->x0 < md->x0 + md->width &&
                md->y0 < q->y0 + q->height && q->y0 < md->y0 + md->height)
                goto bad;
        }
        if (orient) {
            for (int i = 0; i < 3; i++) {
                md->origin_mm[i] = mv[i];
                md->fast[i] = mv[3 + i];
                md->slow[i] = mv[6 + i];
            }
            md->pixel_x_mm = mv[9];
            md->pixel_y_mm = mv[10];
            const double nfa = mv[3] * mv[3] + mv[4] * mv[4] + mv[5] * mv[5];
            const double nsl = mv[6] * mv[6] + mv[7] * mv[7] + mv[8] * mv[8];
            if (!(fabs(nfa - 1.0) < 1e-6) || !(fabs(nsl - 1.0) < 1e-6) || !(mv[9] > 0.0) ||
                !(mv[10] > 0.0))
                goto bad;
        }
        l->nmodules = m + 1;
    }
    if (u.bad || u.pos != u.n || (have & ~known) || ((have & SW_DG_WAVELENGTH) && !(gv[0] > 0.0)) ||
        ((have & SW_DG_DISTANCE) && !(gv[1] > 0.0)) ||
        ((have & SW_DG_PIXEL) && !(gv[4] > 0.0 && gv[5] > 0.0)) ||
        ((have & SW_DG_EXPOSURE) && !(gv[6] > 0.0)) ||
        ((have & SW_DG_OVERLOAD) && !(l->overload > 0.0)))
        goto bad;
    g->have = have;
    if (have & SW_DG_WAVELENGTH)
        g->wavelength_a = gv[0];
    if (have & SW_DG_DISTANCE)
        g->distance_mm = gv[1];
    if (have & SW_DG_BEAM) {
        g->beam_x_px = gv[2];
        g->beam_y_px = gv[3];
    }
    if (have & SW_DG_PIXEL) {
        g->pixel_x_mm = gv[4];
        g->pixel_y_mm = gv[5];
    }
    if (have & SW_DG_EXPOSURE)
        g->exposure_s = gv[6];
    if (have & SW_DG_OVERLOAD)
        g->overload = l->overload;
    if (have & SW_DG_ORIENTATION) {
        g->orientation = 1;
        for (int i = 0; i < 3; i++) {
            g->origin_mm[i] = gv[7 + i];
            g->fast[i] = gv[10 + i];
            g->slow[i] = gv[13 + i];
        }
        const double nfast =
            g->fast[0] * g->fast[0] + g->fast[1] * g->fast[1] + g->fast[2] * g->fast[2];
        const double nslow =
            g->slow[0] * g->slow[0] + g->slow[1] * g->slow[1] + g->slow[2] * g->slow[2];
        if (!(fabs(nfast - 1.0) < 1e-6) || !(fabs(nslow - 1.0) < 1e-6))
            goto bad;
    }
    l->st = SW_OK;
    return SW_OK;
oom:
    h5_layout_free(l);
    l->st = SW_ENOMEM;
    snprintf(l->msg, sizeof l->msg, "out of memory");
    return l->st;
bad:
    h5_layout_free(l);
    l->st = SW_EFORMAT;
    if (why[0])
        snprintf(l->msg, sizeof l->msg, "%s", why);
    else
        snprintf(l->msg, sizeof l->msg, "the description of the file does not hold together");
    return l->st;
}
