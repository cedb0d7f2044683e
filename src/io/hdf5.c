/*
 * HDF5 frames in the layout Eiger detectors write (NeXus NXmx), read and written through the HDF5
 * C library (io.h, section "HDF5 (Eiger / NeXus)").
 *
 * Reading: the blocks /entry/data/data_000001, ... (or /entry/data/data, or a named dataset) are
 * opened once and checked (rank, sizes, unsigned integer type, filters loadable); a frame is one
 * hyperslab [index, 0:height, 0:width] of its block read straight into the caller's image (a
 * strided image is described to HDF5 as a selection in a wider memory space, so no copy is made).
 * Compressed chunks are decoded by HDF5 through its filters (bitshuffle/LZ4 from a plugin).
 *
 * HDF5 prints its error stack on stderr by default: every public function here switches that
 * off while it runs (and restores the caller's setting), and failures quote the innermost
 * description of HDF5's error stack in our own message instead.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/io_internal.h"

#include <hdf5.h>
#include <limits.h>
#include <math.h>

#define FILTER_BSHUF    32008 /* bitshuffle (HDF Group registered filter id) */
#define BSHUF_LZ4       2     /* bitshuffle's cd_values[4]: LZ4 after the shuffle */
#define DEFLATE_LEVEL   4     /* gzip level of SW_H5_DEFLATE */
#define MAX_BLOCKS      999999
#define H5_PATH_MAX     1024
#define MASK_SLAB_BYTES (8u << 20) /* pixel mask read in slabs of rows of about this size */

#define PATH_ENTRY      "/entry"
#define PATH_DATA       "/entry/data"
#define PATH_INSTRUMENT "/entry/instrument"
#define PATH_DETECTOR   "/entry/instrument/detector"
#define PATH_SPECIFIC   "/entry/instrument/detector/detectorSpecific"
#define PATH_MASK       PATH_SPECIFIC "/pixel_mask"
#define PATH_CUTOFF     PATH_SPECIFIC "/countrate_correction_count_cutoff"
#define PATH_SATURATION PATH_DETECTOR "/saturation_value"

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

typedef struct h5_walk {
    char *buf;
    size_t size;
} h5_walk;

/* Walking upward, entry 0 is where HDF5 detected the error: the first non-empty description is
 * the most specific one. */
static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    h5_walk *w = data;
    (void)n;
    if (w->buf[0] == '\0' && e->desc && e->desc[0] != '\0')
        snprintf(w->buf, w->size, "%s", e->desc);
    return 0;
}

/* The innermost description on HDF5's error stack, into buf (call right after the failing HDF5
 * call, before any other HDF5 API call clears the stack). */
static const char *h5_detail(char *buf, size_t size)
{
    h5_walk w = {buf, size};
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

/* 1 when every component of path exists as a link from loc (H5Lexists fails, rather than says
 * no, when an intermediate group is missing). */
static int h5_path_exists(hid_t loc, const char *path)
{
    char buf[H5_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return 0;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        if (buf[i - 1] == '/')
            return 0; /* "//" or a trailing "/" */
        char c = buf[i];
        buf[i] = '\0';
        htri_t e = H5Lexists(loc, buf, H5P_DEFAULT);
        buf[i] = c;
        if (e <= 0)
            return 0;
    }
    return 1;
}

/* "signed 16-bit integer", "32-bit float", ... for messages about refused types. */
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

/* The pixel type for an HDF5 type: unsigned 8/16/32-bit integers only. */
static int pixel_type_of(hid_t t, sw_pixel_type *out)
{
    if (H5Tget_class(t) != H5T_INTEGER || H5Tget_sign(t) != H5T_SGN_NONE)
        return 0;
    switch (H5Tget_size(t)) {
    case 1: *out = SW_PIX_U8; return 1;
    case 2: *out = SW_PIX_U16; return 1;
    case 4: *out = SW_PIX_U32; return 1;
    default: return 0;
    }
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

/* ------------------------------------------------------------------ the reader */

typedef struct h5_block {
    hid_t dset;
    int rank;      /* 2 (one frame) or 3 */
    int64_t first; /* index of its first frame across all blocks */
    int64_t frames;
    char *name; /* dataset path, for messages */
} h5_block;

struct sw_h5_reader {
    sw_context *ctx;
    char *path;
    hid_t file;
    h5_block *blocks;
    int32_t nblocks;
    int32_t capacity;
    sw_h5_info info;
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
    for (int32_t i = 0; i < r->nblocks; i++) {
        close_id(&r->blocks[i].dset, H5Dclose);
        free(r->blocks[i].name);
    }
    free(r->blocks);
    close_id(&r->file, H5Fclose);
    free(r->path);
    free(r);
}

/* The directory part of path with a trailing '/', or "" (for resolving external link names). */
static void dir_of(const char *path, char *buf, size_t size)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) + 1 : 0;
    if (n >= size)
        n = 0;
    memcpy(buf, path, n);
    buf[n] = '\0';
}

/* After an external link failed to open: SW_EIO when its file is nowhere HDF5 looks (beside the
 * master, or as given), SW_EFORMAT with HDF5's reason otherwise. */
static sw_status external_link_fail(sw_h5_reader *r, const char *name, const char *target_file,
                                    const char *target_obj, const char *detail)
{
    char dir[H5_PATH_MAX], beside[2 * H5_PATH_MAX];
    dir_of(r->path, dir, sizeof dir);
    snprintf(beside, sizeof beside, "%s%s", target_file[0] == '/' ? "" : dir, target_file);
    if (access(beside, F_OK) != 0 && access(target_file, F_OK) != 0)
        return reader_fail(r, SW_EIO,
                           "%s: %s is an external link to %s:%s, but that data file is missing "
                           "(looked for %s)",
                           r->path, name, target_file, target_obj, beside);
    return reader_fail(r, SW_EFORMAT, "%s: %s: cannot open the linked data %s:%s (%s)", r->path,
                       name, target_file, target_obj, detail);
}

/* Opens the object `name` as a dataset (following soft and external links). */
static sw_status open_dataset(sw_h5_reader *r, const char *name, hid_t *out)
{
    char detail[512];
    *out = -1;
    H5L_info_t li;
    char target_file[H5_PATH_MAX] = "", target_obj[H5_PATH_MAX] = "";
    int external = 0;
    if (H5Lget_info(r->file, name, &li, H5P_DEFAULT) >= 0 && li.type == H5L_TYPE_EXTERNAL &&
        li.u.val_size > 0 && li.u.val_size < 2 * H5_PATH_MAX) {
        char val[2 * H5_PATH_MAX];
        const char *f = NULL, *o = NULL;
        if (H5Lget_val(r->file, name, val, sizeof val, H5P_DEFAULT) >= 0 &&
            H5Lunpack_elink_val(val, li.u.val_size, NULL, &f, &o) >= 0 && f && o) {
            snprintf(target_file, sizeof target_file, "%s", f);
            snprintf(target_obj, sizeof target_obj, "%s", o);
            external = 1;
        }
    }
    hid_t obj = H5Oopen(r->file, name, H5P_DEFAULT);
    if (obj < 0) {
        h5_detail(detail, sizeof detail);
        if (external)
            return external_link_fail(r, name, target_file, target_obj, detail);
        return reader_fail(r, SW_EFORMAT, "%s: cannot open %s (%s)", r->path, name, detail);
    }
    H5I_type_t kind = H5Iget_type(obj);
    if (kind != H5I_DATASET) {
        H5Oclose(obj);
        return reader_fail(r, SW_EFORMAT, "%s: %s is %s, not a dataset of frames", r->path, name,
                           kind == H5I_GROUP ? "a group" : "a named datatype");
    }
    *out = obj;
    return SW_OK;
}

/* Refuses a dataset compressed with a filter this HDF5 cannot load; sets *compressed. */
static sw_status check_filters(sw_h5_reader *r, const char *name, hid_t dset, int *compressed)
{
    char detail[512];
    hid_t dcpl = H5Dget_create_plist(dset);
    if (dcpl < 0)
        return reader_fail(r, SW_EFORMAT, "%s: %s: cannot read the storage properties (%s)",
                           r->path, name, h5_detail(detail, sizeof detail));
    int n = H5Pget_nfilters(dcpl);
    if (n < 0) {
        H5Pclose(dcpl);
        return reader_fail(r, SW_EFORMAT, "%s: %s: cannot read the filter pipeline (%s)", r->path,
                           name, h5_detail(detail, sizeof detail));
    }
    *compressed = n > 0;
    for (int i = 0; i < n; i++) {
        unsigned flags = 0, cd[16], config = 0;
        size_t ncd = 16;
        char fname[256] = "";
        H5Z_filter_t id =
            H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof fname, fname, &config);
        if (id < 0) {
            H5Pclose(dcpl);
            return reader_fail(r, SW_EFORMAT, "%s: %s: cannot read filter %d of its pipeline (%s)",
                               r->path, name, i, h5_detail(detail, sizeof detail));
        }
        if (!filter_usable(id, H5Z_FILTER_CONFIG_DECODE_ENABLED)) {
            H5Eclear2(H5E_DEFAULT);
            char paths[1024];
            plugin_paths(paths, sizeof paths);
            H5Pclose(dcpl);
            return reader_fail(
                r, SW_EUNSUPPORTED,
                "%s: %s is compressed with HDF5 filter %d (\"%s\"), which this HDF5 cannot "
                "load: %s, or set HDF5_PLUGIN_PATH to the folder that holds the plugin "
                "(searched: %s)",
                r->path, name, (int)id, fname[0] ? fname : "no name stored",
                filter_hint((unsigned)id), paths);
        }
    }
    H5Pclose(dcpl);
    return SW_OK;
}

/* Opens and checks one block and appends it. */
static sw_status add_block(sw_h5_reader *r, const char *name)
{
    char detail[512];
    if (r->nblocks == r->capacity) {
        int32_t cap = r->capacity ? 2 * r->capacity : 8;
        h5_block *b = realloc(r->blocks, (size_t)cap * sizeof *b);
        if (!b)
            return reader_fail(r, SW_ENOMEM, "%s: out of memory", r->path);
        r->blocks = b;
        r->capacity = cap;
    }
    h5_block *b = &r->blocks[r->nblocks];
    memset(b, 0, sizeof *b);
    b->dset = -1;
    sw_status st = open_dataset(r, name, &b->dset);
    if (st != SW_OK)
        return st;
    b->name = dup_string(name);
    r->nblocks++; /* from here on reader_free closes it */
    if (!b->name)
        return reader_fail(r, SW_ENOMEM, "%s: out of memory", r->path);

    hid_t space = H5Dget_space(b->dset);
    if (space < 0)
        return reader_fail(r, SW_EFORMAT, "%s: %s: cannot read the dataspace (%s)", r->path, name,
                           h5_detail(detail, sizeof detail));
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t dims[H5S_MAX_RANK];
    if (rank > 0 && rank <= H5S_MAX_RANK)
        H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    if (rank != 2 && rank != 3)
        return reader_fail(r, SW_EFORMAT,
                           "%s: %s has rank %d: frames are expected as a rank-3 dataset [frames, "
                           "height, width] (or rank 2 for one frame)",
                           r->path, name, rank < 0 ? 0 : rank);
    b->rank = rank;
    b->frames = rank == 3 ? (int64_t)dims[0] : 1;
    hsize_t h = dims[rank - 2], w = dims[rank - 1];
    if (h == 0 || w == 0)
        return reader_fail(r, SW_EFORMAT, "%s: %s is empty (%llu x %llu pixels)", r->path, name,
                           (unsigned long long)w, (unsigned long long)h);
    if (rank == 3 && dims[0] > (hsize_t)1 << 40)
        return reader_fail(r, SW_EFORMAT, "%s: %s claims an absurd %llu frames", r->path, name,
                           (unsigned long long)dims[0]);
    if (h > SW_IMAGE_MAX_DIM || w > SW_IMAGE_MAX_DIM ||
        (long long)(h * w) > (long long)SW_IMAGE_MAX_PIXELS)
        return reader_fail(r, SW_EFORMAT,
                           "%s: %s has absurd frames of %llu x %llu pixels (at most %d per side "
                           "and %lld in all)",
                           r->path, name, (unsigned long long)w, (unsigned long long)h,
                           SW_IMAGE_MAX_DIM, (long long)SW_IMAGE_MAX_PIXELS);

    hid_t t = H5Dget_type(b->dset);
    if (t < 0)
        return reader_fail(r, SW_EFORMAT, "%s: %s: cannot read the datatype (%s)", r->path, name,
                           h5_detail(detail, sizeof detail));
    sw_pixel_type pt;
    int ok = pixel_type_of(t, &pt);
    char tdesc[64];
    describe_type(t, tdesc, sizeof tdesc);
    H5Tclose(t);
    if (!ok)
        return reader_fail(r, SW_EFORMAT,
                           "%s: %s holds %s: spotwave reads frames of unsigned 8, 16 or 32-bit "
                           "integers (as detectors count)",
                           r->path, name, tdesc);

    int compressed = 0;
    st = check_filters(r, name, b->dset, &compressed);
    if (st != SW_OK)
        return st;

    sw_h5_info *in = &r->info;
    if (r->nblocks == 1) {
        in->width = (int32_t)w;
        in->height = (int32_t)h;
        in->type = pt;
    } else if ((int32_t)w != in->width || (int32_t)h != in->height || pt != in->type) {
        return reader_fail(r, SW_EFORMAT,
                           "%s: mismatched blocks: %s has %llu x %llu %s frames but %s has "
                           "%d x %d %s frames",
                           r->path, name, (unsigned long long)w, (unsigned long long)h,
                           sw_pixel_type_string(pt), r->blocks[0].name, (int)in->width,
                           (int)in->height, sw_pixel_type_string(in->type));
    }
    b->first = in->frames;
    in->frames += b->frames;
    in->blocks = r->nblocks;
    in->compressed |= compressed;
    return SW_OK;
}

/* Reads a numeric scalar (or one-element) dataset as a double: 1 read, 0 absent, -1 unusable. */
static int read_scalar(hid_t file, const char *path, double *out)
{
    if (!h5_path_exists(file, path))
        return 0;
    hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
    if (d < 0)
        return -1;
    int res = -1;
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    if (s >= 0 && t >= 0 && H5Sget_simple_extent_npoints(s) == 1 &&
        (H5Tget_class(t) == H5T_INTEGER || H5Tget_class(t) == H5T_FLOAT)) {
        double v = 0.0;
        if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0) {
            *out = v;
            res = 1;
        }
    }
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    H5Dclose(d);
    return res;
}

/* The overload: the Eiger count cut-off, else the NeXus saturation value; 0 when neither says. */
static void read_overload(sw_h5_reader *r)
{
    static const char *const paths[2] = {PATH_CUTOFF, PATH_SATURATION};
    for (int i = 0; i < 2; i++) {
        double v = 0.0;
        int got = read_scalar(r->file, paths[i], &v);
        H5Eclear2(H5E_DEFAULT);
        if (got == 1 && isfinite(v) && v > 0.0) {
            r->info.overload = v;
            return;
        }
        if (got != 0)
            sw_log(r->ctx, SW_LOG_WARN,
                   "%s: %s is not a usable overload (not one positive number): ignored", r->path,
                   paths[i]);
    }
}

/* 1 when path exists and is a dataset. */
static int dataset_exists(hid_t file, const char *path)
{
    if (!h5_path_exists(file, path))
        return 0;
    hid_t o = H5Oopen(file, path, H5P_DEFAULT);
    if (o < 0)
        return 0;
    int is = H5Iget_type(o) == H5I_DATASET;
    H5Oclose(o);
    return is;
}

static sw_status find_blocks(sw_h5_reader *r, const char *dataset)
{
    if (dataset) {
        if (!h5_path_exists(r->file, dataset))
            return reader_fail(r, SW_EFORMAT, "%s: no dataset %s in the file", r->path, dataset);
        return add_block(r, dataset);
    }
    int have_group = h5_path_exists(r->file, PATH_DATA);
    if (have_group) {
        char name[64];
        for (int i = 1; i <= MAX_BLOCKS; i++) {
            snprintf(name, sizeof name, PATH_DATA "/data_%06d", i);
            if (H5Lexists(r->file, name, H5P_DEFAULT) <= 0)
                break;
            sw_status st = add_block(r, name);
            if (st != SW_OK)
                return st;
        }
        if (r->nblocks > 0)
            return SW_OK;
        if (H5Lexists(r->file, PATH_DATA "/data", H5P_DEFAULT) > 0)
            return add_block(r, PATH_DATA "/data");
    }
    H5Eclear2(H5E_DEFAULT);
    return reader_fail(r, SW_EFORMAT,
                       "%s: no frames found: looked for %s/data_000001, data_000002, ... (an "
                       "Eiger master) and %s/data (an Eiger data file)%s; name the dataset "
                       "explicitly if the frames are elsewhere",
                       r->path, PATH_DATA, PATH_DATA,
                       have_group ? "" : ", but the file has no " PATH_DATA " group");
}

sw_status sw_h5_open(sw_context *ctx, const char *path, const char *dataset, sw_h5_reader **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: out is NULL");
    *out = NULL;
    if (!path || !path[0])
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: no file name given");
    if (dataset && !dataset[0])
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: %s: empty dataset name", path);
    if (dataset && strlen(dataset) >= H5_PATH_MAX)
        return sw_fail(ctx, SW_EINVAL, "sw_h5_open: %s: dataset name too long", path);

    /* Existence and readability first, so those are SW_EIO with the system's reason. */
    struct stat sb;
    if (stat(path, &sb) != 0)
        return sw_fail(ctx, SW_EIO, "%s: cannot open the file (%s)", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return sw_fail(ctx, SW_EIO, "%s: is a directory, not an HDF5 file", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return sw_fail(ctx, SW_EIO, "%s: cannot open the file (%s)", path, strerror(errno));
    close(fd);

    sw_h5_reader *r = calloc(1, sizeof *r);
    if (!r)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    r->ctx = ctx;
    r->file = -1;
    r->path = dup_string(path);
    if (!r->path) {
        free(r);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    }

    h5_quiet q;
    quiet_begin(&q);
    char detail[512];
    sw_status st = SW_OK;
    htri_t is = H5Fis_hdf5(path);
    if (is == 0) {
        st = reader_fail(r, SW_EFORMAT, "%s: not an HDF5 file (no HDF5 signature found)", path);
        goto done;
    }
    if (is < 0) {
        st = reader_fail(r, SW_EFORMAT, "%s: not a readable HDF5 file (%s)", path,
                         h5_detail(detail, sizeof detail));
        goto done;
    }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
    /* Reading needs no lock, and some cluster file systems refuse flock(). */
    if (fapl >= 0)
        H5Pset_file_locking(fapl, 0, 1);
#endif
    r->file = H5Fopen(path, H5F_ACC_RDONLY, fapl >= 0 ? fapl : H5P_DEFAULT);
    if (r->file < 0)
        h5_detail(detail, sizeof detail);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (r->file < 0) {
        st = reader_fail(r, SW_EFORMAT, "%s: not a readable HDF5 file, truncated or corrupt (%s)",
                         path, detail);
        goto done;
    }
    st = find_blocks(r, dataset);
    if (st != SW_OK)
        goto done;
    if (r->info.frames < 1) {
        st = reader_fail(r, SW_EFORMAT, "%s: %s holds no frames", path, r->blocks[0].name);
        goto done;
    }
    r->info.has_pixel_mask = dataset_exists(r->file, PATH_MASK);
    read_overload(r);
    H5Eclear2(H5E_DEFAULT);
    r->error[0] = '\0';
done:
    quiet_end(&q);
    if (st != SW_OK) {
        reader_free(r);
        return st;
    }
    *out = r;
    return SW_OK;
}

sw_status sw_h5_get_info(const sw_h5_reader *r, sw_h5_info *info)
{
    if (!r || !info)
        return sw_fail(r ? r->ctx : NULL, SW_EINVAL, "sw_h5_get_info: %s is NULL",
                       r ? "info" : "the reader");
    *info = r->info;
    return SW_OK;
}

const char *sw_h5_reader_error(const sw_h5_reader *r)
{
    return r ? r->error : "";
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

    /* The block holding the frame: the last one whose first frame is <= index (a block of no
     * frames shares its first index with the next block, which is then the one taken). */
    int32_t lo = 0, hi = r->nblocks - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (r->blocks[mid].first <= index)
            lo = mid;
        else
            hi = mid - 1;
    }
    const h5_block *b = &r->blocks[lo];
    int64_t k = index - b->first;

    h5_quiet q;
    quiet_begin(&q);
    char detail[512] = "";
    hid_t fspace = -1, mspace = -1;
    int bad = 1;
    fspace = H5Dget_space(b->dset);
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
            H5Dread(b->dset, native_type(in->type), mspace, fspace, H5P_DEFAULT, dst->data) >= 0)
            bad = 0;
    }
    if (bad)
        h5_detail(detail, sizeof detail);
    close_id(&mspace, H5Sclose);
    close_id(&fspace, H5Sclose);
    H5Eclear2(H5E_DEFAULT);
    quiet_end(&q);
    if (bad)
        return reader_fail(r, SW_EFORMAT,
                           "%s: cannot read frame %lld (frame %lld of %s): the data is corrupt or "
                           "truncated (%s)",
                           r->path, (long long)index, (long long)k, b->name, detail);
    return SW_OK;
}

sw_status sw_h5_read_pixel_mask(sw_h5_reader *r, uint8_t *valid)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "sw_h5_read_pixel_mask: the reader is NULL");
    if (!valid)
        return reader_fail(r, SW_EINVAL, "%s: no buffer for the pixel mask (NULL)", r->path);
    if (!r->info.has_pixel_mask)
        return reader_fail(r, SW_EFORMAT, "%s: the file has no pixel mask (%s)", r->path,
                           PATH_MASK);
    const int32_t w = r->info.width, h = r->info.height;
    h5_quiet q;
    quiet_begin(&q);
    char detail[512] = "";
    sw_status st = SW_OK;
    hid_t d = -1, fspace = -1, mspace = -1, t = -1;
    int64_t *buf = NULL;
    d = H5Dopen2(r->file, PATH_MASK, H5P_DEFAULT);
    if (d < 0) {
        st = reader_fail(r, SW_EFORMAT, "%s: cannot open %s (%s)", r->path, PATH_MASK,
                         h5_detail(detail, sizeof detail));
        goto done;
    }
    fspace = H5Dget_space(d);
    t = H5Dget_type(d);
    int rank = fspace >= 0 ? H5Sget_simple_extent_ndims(fspace) : -1;
    hsize_t dims[H5S_MAX_RANK] = {0};
    if (rank > 0 && rank <= H5S_MAX_RANK)
        H5Sget_simple_extent_dims(fspace, dims, NULL);
    if (rank != 2 || dims[0] != (hsize_t)h || dims[1] != (hsize_t)w) {
        char shape[96] = "";
        if (rank == 2)
            snprintf(shape, sizeof shape, "%llu x %llu pixels", (unsigned long long)dims[1],
                     (unsigned long long)dims[0]);
        else
            snprintf(shape, sizeof shape, "of rank %d", rank < 0 ? 0 : rank);
        st = reader_fail(r, SW_EFORMAT,
                         "%s: wrong pixel mask shape: %s is %s but the frames are %d x %d", r->path,
                         PATH_MASK, shape, (int)w, (int)h);
        goto done;
    }
    if (t < 0 || H5Tget_class(t) != H5T_INTEGER) {
        char tdesc[64] = "an unreadable type";
        if (t >= 0)
            describe_type(t, tdesc, sizeof tdesc);
        st = reader_fail(r, SW_EFORMAT, "%s: %s holds %s: a pixel mask holds integers", r->path,
                         PATH_MASK, tdesc);
        goto done;
    }
    /* Read as int64 in slabs of rows: any integer type converts without wrapping, and a
     * non-zero value (any bit of Eiger's mask) marks a bad pixel. */
    int64_t rows = (int64_t)(MASK_SLAB_BYTES / (sizeof(int64_t) * (size_t)w));
    if (rows < 1)
        rows = 1;
    if (rows > h)
        rows = h;
    buf = malloc((size_t)rows * (size_t)w * sizeof *buf);
    if (!buf) {
        st = reader_fail(r, SW_ENOMEM, "%s: out of memory reading the pixel mask", r->path);
        goto done;
    }
    for (int64_t y0 = 0; y0 < h; y0 += rows) {
        int64_t n = h - y0 < rows ? h - y0 : rows;
        hsize_t start[2] = {(hsize_t)y0, 0}, count[2] = {(hsize_t)n, (hsize_t)w};
        close_id(&mspace, H5Sclose);
        mspace = H5Screate_simple(2, count, NULL);
        if (mspace < 0 ||
            H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dread(d, H5T_NATIVE_INT64, mspace, fspace, H5P_DEFAULT, buf) < 0) {
            st = reader_fail(r, SW_EFORMAT, "%s: cannot read %s, corrupt or truncated (%s)",
                             r->path, PATH_MASK, h5_detail(detail, sizeof detail));
            goto done;
        }
        uint8_t *out = valid + (size_t)y0 * (size_t)w;
        for (size_t i = 0; i < (size_t)n * (size_t)w; i++)
            out[i] = buf[i] == 0;
    }
done:
    free(buf);
    close_id(&t, H5Tclose);
    close_id(&mspace, H5Sclose);
    close_id(&fspace, H5Sclose);
    close_id(&d, H5Dclose);
    H5Eclear2(H5E_DEFAULT);
    quiet_end(&q);
    return st;
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
