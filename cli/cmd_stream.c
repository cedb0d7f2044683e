/*
 * spotwave stream: shared-memory image streams in milk/CACAO's ImageStreamIO layout, for people
 * at the bench: write a frame from a file into a stream, save a stream's frame to a file, show a
 * stream's header, counters and keywords, remove a stream (include/spotwave/stream.h).
 */
#define _GNU_SOURCE

#include "cli.h"
#include "json.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUB "stream"

void sw_cmd_stream_help(FILE *out)
{
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] stream ACTION NAME [OPTIONS]\n"
        "\n"
        "Shared-memory image streams in the layout of milk/CACAO's ImageStreamIO (version\n"
        "2.00): the files <dir>/<NAME>.im.shm that cameras, real-time computers and\n"
        "deformable mirrors on adaptive-optics benches share, with a semaphore per reader that\n"
        "wakes it when a frame lands. milk's tools and ImageStreamIO's Python module open the\n"
        "streams spotwave writes, and spotwave opens theirs.\n"
        "\n"
        "Streams live in $MILK_SHM_DIR when it names a directory, else /milk/shm when it\n"
        "exists, else /tmp (ImageStreamIO's own order); --dir overrides them.\n"
        "\n"
        "Actions:\n"
        "  write NAME IMAGE   put frame 0 (or --frame N) of IMAGE (FITS, PGM, CBF, TIFF or\n"
        "                     HDF5, as `find` reads them) into the stream: created when it\n"
        "                     does not exist or has another size or type, else written as its\n"
        "                     next frame (cnt0 + 1, every semaphore posted)\n"
        "  read NAME --out IMAGE\n"
        "                     the current frame to IMAGE (.fits/.fit/.fts: FITS, any\n"
        "                     spotwave pixel type; .pgm: 8 or 16-bit): types other than u8,\n"
        "                     u16, u32 and f32 are written as f32 (complex streams are\n"
        "                     refused); a 3-axis stream that is not a circular buffer is\n"
        "                     written as a FITS cube; a circular buffer gives its last slice\n"
        "  info NAME          the header, counters, times and keywords\n"
        "  rm NAME            remove the stream's file (processes that have it open keep\n"
        "                     their mapping)\n"
        "\n"
        "Options:\n"
        "  --dir DIR          the streams' directory (instead of MILK_SHM_DIR / the default)\n"
        "  --type T           write: the stream's data type when it is created: u8 i8 u16 i16\n"
        "                     u32 i32 u64 i64 f32 f64 (NumPy and ImageStreamIO names too);\n"
        "                     default: the image's pixel type. Pixels are converted (rounded\n"
        "                     and clamped to an integer type's range)\n"
        "  --frame N          write: which frame of IMAGE (default 0)\n"
        "  --keywords N       write: keyword slots of a stream it creates (default 16)\n"
        "  --wait SECONDS     read: first wait for a new frame (cnt0 moving), at most SECONDS;\n"
        "                     exit 1 when none comes\n"
        "  --json             info: a JSON object\n"
        "  -h, --help         print this help and exit\n"
        "\n"
        "Examples:\n"
        "  spotwave stream write camera frame.fits --type u16\n"
        "  spotwave stream info camera --json\n"
        "  spotwave stream read dmcmd --out dm.fits --wait 2\n");
}

enum { OPT_DIR = 1000, OPT_TYPE, OPT_FRAME, OPT_KEYWORDS, OPT_WAIT, OPT_JSON, OPT_OUT };

typedef struct stream_opts {
    const char *dir;
    const char *type;
    long frame;
    long keywords;
    double wait;
    int json;
    const char *out;
} stream_opts;

/* ------------------------------------------------------------------ conversion */

/* A pixel of a spotwave image as a double. */
static double pixel_at(const sw_image *img, int32_t x, int32_t y)
{
    const void *row = sw_image_row(img, y);
    switch (img->type) {
    case SW_PIX_U8: return ((const uint8_t *)row)[x];
    case SW_PIX_U16: return ((const uint16_t *)row)[x];
    case SW_PIX_U32: return ((const uint32_t *)row)[x];
    case SW_PIX_F32: return ((const float *)row)[x];
    }
    return 0;
}

static double clampr(double v, double lo, double hi)
{
    v = nearbyint(v);
    return v < lo ? lo : v > hi ? hi : v;
}

/* Stores v at element i of an array of type t (integers rounded and clamped; NaN -> 0). */
static void store(void *dst, size_t i, sw_stream_type t, double v)
{
    if (isnan(v) && t != SW_STREAM_F32 && t != SW_STREAM_F64)
        v = 0;
    switch (t) {
    case SW_STREAM_U8: ((uint8_t *)dst)[i] = (uint8_t)clampr(v, 0, 255); break;
    case SW_STREAM_I8: ((int8_t *)dst)[i] = (int8_t)clampr(v, -128, 127); break;
    case SW_STREAM_U16: ((uint16_t *)dst)[i] = (uint16_t)clampr(v, 0, 65535); break;
    case SW_STREAM_I16: ((int16_t *)dst)[i] = (int16_t)clampr(v, -32768, 32767); break;
    case SW_STREAM_U32: ((uint32_t *)dst)[i] = (uint32_t)clampr(v, 0, 4294967295.0); break;
    case SW_STREAM_I32:
        ((int32_t *)dst)[i] = (int32_t)clampr(v, -2147483648.0, 2147483647.0);
        break;
    case SW_STREAM_U64:
        ((uint64_t *)dst)[i] = (uint64_t)clampr(v, 0, 18446744073709549568.0);
        break;
    case SW_STREAM_I64:
        ((int64_t *)dst)[i] = (int64_t)clampr(v, -9223372036854775808.0, 9223372036854774784.0);
        break;
    case SW_STREAM_F32: ((float *)dst)[i] = (float)v; break;
    case SW_STREAM_F64: ((double *)dst)[i] = v; break;
    default: break;
    }
}

/* Element i of an array of type t as a double (complex and half: not handled here). */
static double load(const void *src, size_t i, sw_stream_type t)
{
    switch (t) {
    case SW_STREAM_U8: return ((const uint8_t *)src)[i];
    case SW_STREAM_I8: return ((const int8_t *)src)[i];
    case SW_STREAM_U16: return ((const uint16_t *)src)[i];
    case SW_STREAM_I16: return ((const int16_t *)src)[i];
    case SW_STREAM_U32: return ((const uint32_t *)src)[i];
    case SW_STREAM_I32: return ((const int32_t *)src)[i];
    case SW_STREAM_U64: return (double)((const uint64_t *)src)[i];
    case SW_STREAM_I64: return (double)((const int64_t *)src)[i];
    case SW_STREAM_F32: return ((const float *)src)[i];
    case SW_STREAM_F64: return ((const double *)src)[i];
    default: return 0;
    }
}

/* ------------------------------------------------------------------ write */

static int do_write(sw_context *ctx, const stream_opts *o, const char *name, const char *path)
{
    sw_cli_inputs in;
    char *paths[1] = {(char *)path};
    int rc = sw_cli_inputs_open(ctx, SUB, paths, 1, NULL, 0, NULL, NULL, &in);
    if (rc != SW_EXIT_OK) {
        sw_cli_inputs_free(&in);
        return rc;
    }
    if (o->frame >= in.total) {
        int64_t total = in.total;
        sw_cli_inputs_free(&in);
        return sw_cli_fail(SUB, "--frame %ld: %s has %lld frame(s)", o->frame, path,
                           (long long)total);
    }
    const sw_image *img = NULL;
    if ((rc = sw_cli_inputs_frame(ctx, SUB, &in, o->frame, &img)) != SW_EXIT_OK) {
        sw_cli_inputs_free(&in);
        return rc;
    }
    sw_stream_type t = sw_stream_type_from_pixel(img->type);
    if (o->type && sw_stream_type_parse(o->type, &t) != SW_OK) {
        sw_cli_inputs_free(&in);
        return sw_cli_usage(SUB, "--type: %s", sw_context_error(NULL));
    }
    if (t == SW_STREAM_CF32 || t == SW_STREAM_CF64 || t == SW_STREAM_F16) {
        sw_cli_inputs_free(&in);
        return sw_cli_usage(SUB, "--type %s: images are written as real numbers (not %s)", o->type,
                            o->type);
    }
    /* the stream as it is, if any, and whether it fits */
    sw_stream *s = NULL;
    sw_stream_info info;
    int create = 1;
    if (sw_stream_open(ctx, o->dir, name, &s) == SW_OK) {
        sw_stream_get_info(s, &info);
        const uint32_t h = info.naxis >= 2 ? info.size[1] : 1;
        if (!info.circular && info.naxis <= 2 && info.size[0] == (uint32_t)img->width &&
            h == (uint32_t)img->height && (!o->type || info.type == t)) {
            create = 0;
            t = info.type;
        } else if (info.circular && info.size[0] == (uint32_t)img->width &&
                   info.size[1] == (uint32_t)img->height && (!o->type || info.type == t)) {
            create = 0; /* the next slice of the circular buffer */
            t = info.type;
        }
        if (create) {
            sw_stream_close(s);
            s = NULL;
        }
    }
    if (create) {
        sw_stream_params p;
        sw_stream_params_default(&p);
        p.name = name;
        p.naxis = 2;
        p.size[0] = (uint32_t)img->width;
        p.size[1] = (uint32_t)img->height;
        p.type = t;
        p.keywords = (int32_t)o->keywords;
        sw_status st = sw_stream_create(ctx, o->dir, &p, &s);
        if (st != SW_OK) {
            sw_cli_inputs_free(&in);
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        }
    }
    void *slot = NULL;
    sw_status st = sw_stream_write_begin(s, &slot);
    if (st == SW_OK) {
        size_t i = 0;
        for (int32_t y = 0; y < img->height; y++)
            for (int32_t x = 0; x < img->width; x++)
                store(slot, i++, t, pixel_at(img, x, y));
        st = sw_stream_write_end(s);
    }
    sw_stream_get_info(s, &info);
    sw_cli_inputs_free(&in);
    if (st != SW_OK) {
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        sw_stream_close(s);
        return rc;
    }
    fprintf(stderr, "spotwave stream: %s %s (%u x %u %s), frame %llu\n",
            create ? "created" : "wrote", sw_stream_path(s), (unsigned)info.size[0],
            (unsigned)info.size[1], sw_stream_type_string(info.type),
            (unsigned long long)info.cnt0);
    sw_stream_close(s);
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ read */

static int do_read(sw_context *ctx, const stream_opts *o, const char *name)
{
    sw_stream *s = NULL;
    sw_status st = sw_stream_open(ctx, o->dir, name, &s);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    sw_stream_info info;
    sw_stream_get_info(s, &info);
    int rc = SW_EXIT_OK;
    if (info.type == SW_STREAM_CF32 || info.type == SW_STREAM_CF64 || info.type == SW_STREAM_F16) {
        rc = sw_cli_fail(SUB, "stream %s holds %s data: not written to image files", name,
                         sw_stream_type_string(info.type));
        goto done;
    }
    const int fits = !sw_cli_ends_with(o->out, ".pgm");
    const uint32_t w = info.size[0], h = info.naxis >= 2 ? info.size[1] : 1;
    const uint32_t frames = (info.naxis == 3 && !info.circular) ? info.size[2] : 1;
    if (w > SW_IMAGE_MAX_DIM || h > SW_IMAGE_MAX_DIM) {
        rc = sw_cli_fail(SUB, "stream %s: %u x %u is larger than spotwave images may be", name,
                         (unsigned)w, (unsigned)h);
        goto done;
    }
    if (!fits && frames > 1) {
        rc = sw_cli_fail(SUB, "stream %s has %u slices: write it to a FITS file", name,
                         (unsigned)frames);
        goto done;
    }
    if (o->wait > 0) {
        int32_t k = -1;
        const uint64_t now = sw_stream_cnt0(s);
        sw_stream_wait_mode mode = SW_STREAM_WAIT_SEM;
        if (sw_stream_claim_semaphore(s, &k) != SW_OK)
            mode = SW_STREAM_WAIT_SPIN; /* every semaphore is held: poll */
        else
            sw_stream_flush_semaphore(s, k);
        st = sw_stream_wait(s, mode, k, now, o->wait, NULL, NULL);
        if (k >= 0)
            sw_stream_release_semaphore(s, k);
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
            goto done;
        }
    }
    uint8_t *raw = malloc(info.frame_bytes);
    if (!raw) {
        rc = sw_cli_fail(SUB, "out of memory for a frame of %zu bytes", info.frame_bytes);
        goto done;
    }
    uint64_t c0 = 0;
    if ((st = sw_stream_read(s, raw, info.frame_bytes, &c0)) != SW_OK) {
        free(raw);
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    sw_pixel_type pt;
    if (sw_stream_type_to_pixel(info.type, &pt) != SW_OK)
        pt = SW_PIX_F32;
    if (!fits && pt != SW_PIX_U8 && pt != SW_PIX_U16) {
        free(raw);
        rc = sw_cli_fail(SUB, "stream %s holds %s pixels: PGM takes 8 or 16 bits; write FITS", name,
                         sw_stream_type_string(info.type));
        goto done;
    }
    sw_image *imgs = calloc(frames, sizeof *imgs);
    int ok = imgs != NULL;
    for (uint32_t f = 0; ok && f < frames; f++) {
        if (sw_image_alloc(ctx, (int32_t)w, (int32_t)h, pt, &imgs[f]) != SW_OK) {
            ok = 0;
            break;
        }
        size_t i = (size_t)f * w * h;
        for (uint32_t y = 0; y < h; y++) {
            void *row = sw_image_row(&imgs[f], (int32_t)y);
            if (sw_stream_type_from_pixel(pt) == info.type) {
                memcpy(row, raw + i * sw_stream_type_size(info.type),
                       (size_t)w * sw_pixel_size(pt));
                i += w;
            } else {
                for (uint32_t x = 0; x < w; x++)
                    ((float *)row)[x] = (float)load(raw, i++, info.type);
            }
        }
    }
    free(raw);
    if (!ok) {
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, SW_ENOMEM));
    } else {
        const char *staged = sw_cli_file_staged("--out", o->out);
        if (!staged)
            rc = SW_EXIT_FAIL;
        else {
            st = fits ? sw_fits_write(ctx, staged, imgs, (int32_t)frames)
                      : sw_pgm_write(ctx, staged, &imgs[0]);
            if (st != SW_OK)
                rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
            else
                fprintf(stderr, "spotwave stream: frame %llu of %s -> %s\n", (unsigned long long)c0,
                        sw_stream_path(s), o->out);
        }
    }
    for (uint32_t f = 0; imgs && f < frames; f++)
        sw_image_free(&imgs[f]);
    free(imgs);
done:
    sw_stream_close(s);
    return rc;
}

/* ------------------------------------------------------------------ info */

static int do_info(sw_context *ctx, const stream_opts *o, const char *name)
{
    sw_stream *s = NULL;
    sw_status st = sw_stream_open(ctx, o->dir, name, &s);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    sw_stream_info in;
    sw_stream_get_info(s, &in);
    const int32_t nk = sw_stream_keyword_count(s);
    if (o->json) {
        cJSON *r = cJSON_CreateObject();
        sw_cli_json_string(r, "name", in.name);
        sw_cli_json_string(r, "path", sw_stream_path(s));
        sw_cli_json_string(r, "version", "2.00");
        int64_t size[3] = {in.size[0], in.size[1], in.size[2]};
        sw_cli_json_int(r, "naxis", in.naxis);
        sw_cli_json_int_array(r, "size", size, in.naxis);
        sw_cli_json_string(r, "type", sw_stream_type_string(in.type));
        sw_cli_json_int(r, "type_code", (int64_t)in.type);
        sw_cli_json_int(r, "circular", in.circular);
        sw_cli_json_u64(r, "image_type", in.image_type);
        sw_cli_json_u64(r, "cnt0", in.cnt0);
        sw_cli_json_u64(r, "cnt1", in.cnt1);
        sw_cli_json_int(r, "write_flag", in.write_flag);
        sw_cli_json_int(r, "semaphores", in.semaphores);
        sw_cli_json_int(r, "keyword_slots", in.keywords);
        sw_cli_json_int(r, "creator_pid", in.creator_pid);
        sw_cli_json_int(r, "owner_pid", in.owner_pid);
        sw_cli_json_double(r, "creation_time", in.creation_time);
        sw_cli_json_double(r, "write_time", in.write_time);
        sw_cli_json_double(r, "acquire_time", in.acquire_time);
        sw_cli_json_double(r, "access_time", in.access_time);
        sw_cli_json_u64(r, "frame_bytes", in.frame_bytes);
        sw_cli_json_u64(r, "file_bytes", in.file_bytes);
        cJSON *kws = cJSON_AddArrayToObject(r, "keywords");
        for (int32_t i = 0; i < nk; i++) {
            char kn[17], sv[17], cm[81], ty;
            int64_t iv;
            double dv;
            if (sw_stream_keyword_get(s, i, kn, &ty, &iv, &dv, sv, cm) != SW_OK)
                continue;
            cJSON *k = cJSON_CreateObject();
            sw_cli_json_string(k, "name", kn);
            char tys[2] = {ty, 0};
            sw_cli_json_string(k, "type", tys);
            if (ty == 'L')
                sw_cli_json_int(k, "value", iv);
            else if (ty == 'D')
                sw_cli_json_double(k, "value", dv);
            else
                sw_cli_json_string(k, "value", sv);
            sw_cli_json_string(k, "comment", cm);
            cJSON_AddItemToArray(kws, k);
        }
        sw_stream_close(s);
        return sw_cli_json_print(r) == 0 ? SW_EXIT_OK : sw_cli_fail(SUB, "out of memory");
    }
    printf("stream:      %s\n", in.name);
    printf("file:        %s (%llu bytes, ImageStreamIO 2.00)\n", sw_stream_path(s),
           (unsigned long long)in.file_bytes);
    printf("size:        %u", (unsigned)in.size[0]);
    for (int a = 1; a < in.naxis; a++)
        printf(" x %u", (unsigned)in.size[a]);
    printf(" %s%s\n", sw_stream_type_string(in.type), in.circular ? " (circular buffer)" : "");
    printf("cnt0:        %llu\n", (unsigned long long)in.cnt0);
    if (in.circular)
        printf("cnt1:        %llu (last slice written)\n", (unsigned long long)in.cnt1);
    printf("write flag:  %d\n", in.write_flag);
    printf("semaphores:  %d\n", (int)in.semaphores);
    const double now = sw_stream_clock_now();
    printf("created:     %.6f (%.1f s ago) by pid %d\n", in.creation_time, now - in.creation_time,
           (int)in.creator_pid);
    if (in.cnt0 > 0)
        printf("last write:  %.6f (%.3f s ago)\n", in.write_time, now - in.write_time);
    printf("keywords:    %d of %d slots\n", (int)nk, (int)in.keywords);
    for (int32_t i = 0; i < nk; i++) {
        char kn[17], sv[17], cm[81], ty;
        int64_t iv;
        double dv;
        if (sw_stream_keyword_get(s, i, kn, &ty, &iv, &dv, sv, cm) != SW_OK)
            continue;
        if (ty == 'L')
            printf("  %-16s %lld", kn, (long long)iv);
        else if (ty == 'D')
            printf("  %-16s %.17g", kn, dv);
        else
            printf("  %-16s '%s'", kn, sv);
        printf("%s%s\n", cm[0] ? "  / " : "", cm);
    }
    sw_stream_close(s);
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ the command */

int sw_cmd_stream(const sw_cli_globals *g, int argc, char **argv)
{
    static const struct option longopts[] = {{"dir", required_argument, NULL, OPT_DIR},
                                             {"type", required_argument, NULL, OPT_TYPE},
                                             {"frame", required_argument, NULL, OPT_FRAME},
                                             {"keywords", required_argument, NULL, OPT_KEYWORDS},
                                             {"wait", required_argument, NULL, OPT_WAIT},
                                             {"json", no_argument, NULL, OPT_JSON},
                                             {"out", required_argument, NULL, OPT_OUT},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    stream_opts o = {0};
    o.keywords = 16;
    sw_cli_getopt_reset();
    int c;
    while ((c = sw_cli_getopt(SUB, argc, argv, "ho:", longopts)) != -1) {
        const char *opt = sw_cli_option_name(argv);
        switch (c) {
        case 'h': sw_cmd_stream_help(stdout); return SW_EXIT_OK;
        case OPT_DIR:
            if (sw_cli_opt_file(SUB, opt, optarg, &o.dir) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_TYPE: o.type = optarg; break;
        case OPT_FRAME:
            if (sw_cli_opt_at_least(SUB, opt, optarg, 0, "a frame number >= 0", &o.frame) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_KEYWORDS:
            if (sw_cli_opt_long(SUB, opt, optarg, 0, 65535, &o.keywords) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_WAIT:
            if (sw_cli_opt_double(SUB, opt, optarg, SW_CLI_POSITIVE, "a positive number of seconds",
                                  &o.wait) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_JSON: o.json = 1; break;
        case 'o':
        case OPT_OUT:
            if (sw_cli_opt_file(SUB, opt, optarg, &o.out) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        default: return SW_EXIT_USAGE;
        }
    }
    const int npos = argc - optind;
    if (npos < 1)
        return sw_cli_usage(SUB, "which action? (write, read, info, rm)");
    const char *action = argv[optind];
    const char *name = npos >= 2 ? argv[optind + 1] : NULL;
    const int want = strcmp(action, "write") == 0 ? 3 : 2;
    if (strcmp(action, "write") && strcmp(action, "read") && strcmp(action, "info") &&
        strcmp(action, "rm"))
        return sw_cli_usage(SUB, "unknown action '%s' (write, read, info, rm)", action);
    if (npos != want)
        return sw_cli_usage(SUB, "%s takes %s", action,
                            want == 3 ? "NAME IMAGE" : "one stream NAME");
    if (o.type && strcmp(action, "write"))
        return sw_cli_usage(SUB, "--type is for write");
    if (o.wait > 0 && strcmp(action, "read"))
        return sw_cli_usage(SUB, "--wait is for read");
    if (o.json && strcmp(action, "info"))
        return sw_cli_usage(SUB, "--json is for info");
    if (!strcmp(action, "read") && !o.out)
        return sw_cli_usage(SUB, "read needs --out IMAGE");
    if (o.out && strcmp(action, "read"))
        return sw_cli_usage(SUB, "--out is for read");
    if (!strcmp(action, "read") && !sw_cli_ends_with(o.out, ".pgm") &&
        !sw_cli_ends_with(o.out, ".fits") && !sw_cli_ends_with(o.out, ".fit") &&
        !sw_cli_ends_with(o.out, ".fts"))
        return sw_cli_usage(SUB, "--out %s: name a .fits or .pgm file", o.out);
    if (!strcmp(action, "write"))
        sw_cli_file_in("image", argv[optind + 2]);
    sw_cli_file_out("--out", o.out);
    int rc = sw_cli_files_check();
    if (rc != SW_EXIT_OK)
        return rc;

    sw_context *ctx = NULL;
    if ((rc = sw_cli_context(g, SUB, &ctx)) != SW_EXIT_OK)
        return rc;
    if (!strcmp(action, "write"))
        rc = do_write(ctx, &o, name, argv[optind + 2]);
    else if (!strcmp(action, "read"))
        rc = do_read(ctx, &o, name);
    else if (!strcmp(action, "info"))
        rc = do_info(ctx, &o, name);
    else {
        sw_status st = sw_stream_remove(ctx, o.dir, name);
        rc = st == SW_OK ? SW_EXIT_OK : sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    }
    sw_context_destroy(ctx);
    return rc;
}
