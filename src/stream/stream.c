/*
 * Shared-memory image streams in ImageStreamIO's layout (IMAGESTRUCT_VERSION "2.00").
 *
 * The layout is written here from the published format (milk-org/ImageStreamIO, ImageStruct.h:
 * IMAGE_METADATA, IMAGE_KEYWORD, STREAM_PROC_TRACE, SEMFILEDATA; ImageStreamIO.c:
 * ImageStreamIO_image_sizing for the order of the blocks after the metadata and their 8-byte
 * rounding, ImageStreamIO_createIm_gpu for the initial values, ImageStreamIO_sempost for the
 * capped posts, ImageStreamIO_getsemwaitindex for the reader's semaphore). The byte offsets below
 * are those of gcc's layout of ImageStruct.h on 64-bit Linux; the static assertions keep them.
 */
#define _GNU_SOURCE
#include "spotwave/stream.h"

#include "core/core_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SW_CPU_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define SW_CPU_PAUSE() __asm__ __volatile__("yield")
#else
#define SW_CPU_PAUSE() ((void)0)
#endif

/* ------------------------------------------------------------------ the published layout */

#define ISIO_VERSION         "2.00"      /* IMAGESTRUCT_VERSION */
#define ISIO_DEFAULT_DIR     "/milk/shm" /* SHAREDMEMDIR */
#define ISIO_SEM_DEFAULT     10          /* IMAGE_NB_SEMAPHORE */
#define ISIO_SEM_MAXVAL      10          /* SEMAPHORE_MAXVAL */
#define ISIO_NB_PROCTRACE    10          /* IMAGE_NB_PROCTRACE */
#define ISIO_CIRCULAR_BUFFER 0x1ull
#define ISIO_MATH_DATA       0x2ull
#define ISIO_ZAXIS_TEMPORAL  0x20000ull
#define SW_STREAM_SEM_MAX    1000

typedef struct isio_time {
    int64_t sec, nsec; /* struct timespec on 64-bit Linux */
} isio_time;

/* IMAGE_METADATA. Fields spotwave does not use are laid out all the same. */
typedef struct isio_md {
    char version[32]; /* 0 */
    char name[80];    /* 32 */
    uint8_t naxis;    /* 112 */
    uint8_t pad0[3];
    uint32_t size[3];  /* 116 */
    uint64_t nelement; /* 128 */
    uint8_t datatype;  /* 136 */
    uint8_t pad1[7];
    uint64_t imagetype;       /* 144 */
    isio_time creationtime;   /* 152 */
    isio_time lastaccesstime; /* 168 */
    isio_time atime;          /* 184 */
    isio_time writetime;      /* 200 */
    int32_t creatorPID;       /* 216 */
    int32_t ownerPID;         /* 220 */
    uint8_t shared;           /* 224 */
    uint8_t pad2[7];
    uint64_t inode;  /* 232 */
    int8_t location; /* 240 */
    uint8_t status;  /* 241 */
    uint8_t pad3[6];
    uint64_t flag;   /* 248 */
    uint8_t logflag; /* 256 */
    uint8_t pad4;
    uint16_t sem;         /* 258 */
    uint16_t NBproctrace; /* 260 */
    uint8_t pad5[2];
    uint64_t cnt0; /* 264 */
    uint64_t cnt1; /* 272 */
    uint64_t cnt2; /* 280 */
    uint8_t write; /* 288 */
    uint8_t pad6;
    uint16_t NBkw;    /* 290 */
    uint32_t CBsize;  /* 292 */
    uint32_t CBindex; /* 296 */
    uint8_t pad7[4];
    uint64_t CBcycle;          /* 304 */
    uint64_t imdatamemsize;    /* 312 */
    uint8_t cudaMemHandle[64]; /* 320 */
} isio_md;

_Static_assert(offsetof(isio_md, naxis) == 112, "IMAGE_METADATA.naxis");
_Static_assert(offsetof(isio_md, size) == 116, "IMAGE_METADATA.size");
_Static_assert(offsetof(isio_md, nelement) == 128, "IMAGE_METADATA.nelement");
_Static_assert(offsetof(isio_md, datatype) == 136, "IMAGE_METADATA.datatype");
_Static_assert(offsetof(isio_md, imagetype) == 144, "IMAGE_METADATA.imagetype");
_Static_assert(offsetof(isio_md, creationtime) == 152, "IMAGE_METADATA.creationtime");
_Static_assert(offsetof(isio_md, writetime) == 200, "IMAGE_METADATA.writetime");
_Static_assert(offsetof(isio_md, creatorPID) == 216, "IMAGE_METADATA.creatorPID");
_Static_assert(offsetof(isio_md, shared) == 224, "IMAGE_METADATA.shared");
_Static_assert(offsetof(isio_md, inode) == 232, "IMAGE_METADATA.inode");
_Static_assert(offsetof(isio_md, location) == 240, "IMAGE_METADATA.location");
_Static_assert(offsetof(isio_md, flag) == 248, "IMAGE_METADATA.flag");
_Static_assert(offsetof(isio_md, sem) == 258, "IMAGE_METADATA.sem");
_Static_assert(offsetof(isio_md, NBproctrace) == 260, "IMAGE_METADATA.NBproctrace");
_Static_assert(offsetof(isio_md, cnt0) == 264, "IMAGE_METADATA.cnt0");
_Static_assert(offsetof(isio_md, cnt1) == 272, "IMAGE_METADATA.cnt1");
_Static_assert(offsetof(isio_md, write) == 288, "IMAGE_METADATA.write");
_Static_assert(offsetof(isio_md, NBkw) == 290, "IMAGE_METADATA.NBkw");
_Static_assert(offsetof(isio_md, CBsize) == 292, "IMAGE_METADATA.CBsize");
_Static_assert(offsetof(isio_md, CBcycle) == 304, "IMAGE_METADATA.CBcycle");
_Static_assert(offsetof(isio_md, imdatamemsize) == 312, "IMAGE_METADATA.imdatamemsize");
_Static_assert(offsetof(isio_md, cudaMemHandle) == 320, "IMAGE_METADATA.cudaMemHandle");
_Static_assert(sizeof(isio_md) == 384, "sizeof(IMAGE_METADATA)");
_Static_assert(sizeof(pid_t) == 4 && sizeof(ino_t) == 8, "pid_t / ino_t sizes");
_Static_assert(sizeof(struct timespec) == 16, "struct timespec");
_Static_assert(sizeof(sem_t) == 32, "sem_t (SEMFILEDATA)");

/* IMAGE_KEYWORD */
typedef struct isio_kw {
    char name[16]; /* 0 */
    char type;     /* 16: 'N' unused, 'L', 'D', 'S' */
    uint8_t pad[7];
    union {
        int64_t numl;
        double numf;
        char valstr[16];
    } value;          /* 24 */
    uint64_t cnt;     /* 40: incremented at each write */
    char comment[80]; /* 48 */
} isio_kw;
_Static_assert(offsetof(isio_kw, value) == 24 && offsetof(isio_kw, cnt) == 40, "IMAGE_KEYWORD");
_Static_assert(sizeof(isio_kw) == 128, "sizeof(IMAGE_KEYWORD)");

/* STREAM_PROC_TRACE */
typedef struct isio_proctrace {
    int32_t triggermode;
    int32_t procwrite_PID;
    uint64_t trigger_inode;
    isio_time ts_procstart;
    isio_time ts_streamupdate;
    int32_t trigsemindex;
    int32_t triggerstatus;
    uint64_t cnt0;
} isio_proctrace;
_Static_assert(sizeof(isio_proctrace) == 64, "sizeof(STREAM_PROC_TRACE)");

#define CBFRAMEMD_SIZE 48 /* sizeof(CBFRAMEMD): cnt0, cnt1, atime, writetime */

static uint64_t round8(uint64_t x)
{
    return (x + 7) & ~(uint64_t)7;
}

/* Offsets of the blocks after the metadata (ImageStreamIO_image_sizing's order). */
typedef struct isio_layout {
    uint64_t data, kw, sem, semlog, readpid, writepid, semctrl, semstatus, proctrace;
    uint64_t atimes, wtimes, cnts; /* 0 when there are no per-slice arrays */
    uint64_t cb_md, cb_data, total;
} isio_layout;

/* 0 on success; -1 when a size overflows. */
static int layout_compute(uint64_t datamem, uint32_t nkw, uint32_t nsem, uint32_t nproc, int arrays,
                          uint32_t depth, uint32_t cbsize, isio_layout *L)
{
    if (datamem > (UINT64_MAX >> 2) || (cbsize && datamem > (UINT64_MAX >> 2) / cbsize))
        return -1;
    uint64_t o = round8(sizeof(isio_md));
    L->data = o;
    o += round8(datamem);
    L->kw = o;
    o += round8(sizeof(isio_kw) * (uint64_t)nkw);
    L->sem = o;
    o += round8(sizeof(sem_t) * (uint64_t)nsem);
    L->semlog = o;
    o += round8(sizeof(sem_t));
    L->readpid = o;
    o += round8(4 * (uint64_t)nsem);
    L->writepid = o;
    o += round8(4 * (uint64_t)nsem);
    L->semctrl = o;
    o += round8(4 * (uint64_t)nsem);
    L->semstatus = o;
    o += round8(4 * (uint64_t)nsem);
    L->proctrace = o;
    o += round8(sizeof(isio_proctrace) * (uint64_t)nproc);
    L->atimes = L->wtimes = L->cnts = 0;
    if (arrays) {
        L->atimes = o;
        o += round8(16 * (uint64_t)depth);
        L->wtimes = o;
        o += round8(16 * (uint64_t)depth);
        L->cnts = o;
        o += round8(8 * (uint64_t)depth);
    }
    L->cb_md = o;
    o += round8((uint64_t)CBFRAMEMD_SIZE * cbsize);
    L->cb_data = o;
    if (cbsize > 0)
        o += round8(datamem * cbsize);
    L->total = o;
    return 0;
}

/* ------------------------------------------------------------------ the handle */

struct sw_stream {
    sw_context *ctx;
    char path[PATH_MAX];
    uint8_t *map;
    size_t map_size;
    uint64_t ino; /* of the file mapped */
    uint64_t dev;
    isio_md *md;
    isio_layout L;
    int circular; /* (imagetype & 0xF) == CIRCULAR_BUFFER */
    int arrays;   /* the per-slice time / counter arrays exist */
    uint32_t depth;
    size_t frame_bytes;
    size_t slice_bytes;
    int writing;     /* a write_begin is open */
    uint32_t wslice; /* its slice */
};

#define MD_ATOMIC_U64(p) ((_Atomic uint64_t *)(void *)(p))
#define MD_ATOMIC_U8(p)  ((_Atomic uint8_t *)(void *)(p))
#define MD_ATOMIC_I32(p) ((_Atomic int32_t *)(void *)(p))

static sem_t *sem_at(const sw_stream *s, int32_t i)
{
    return (sem_t *)(void *)(s->map + s->L.sem + sizeof(sem_t) * (size_t)i);
}

static int32_t *readpid_at(const sw_stream *s, int32_t i)
{
    return (int32_t *)(void *)(s->map + s->L.readpid) + i;
}

static int32_t *writepid_at(const sw_stream *s, int32_t i)
{
    return (int32_t *)(void *)(s->map + s->L.writepid) + i;
}

static isio_kw *kw_at(const sw_stream *s, int32_t i)
{
    return (isio_kw *)(void *)(s->map + s->L.kw) + i;
}

/* ------------------------------------------------------------------ clocks */

#ifdef CLOCK_TAI
#define SW_STREAM_CLOCK CLOCK_TAI
#else
#define SW_STREAM_CLOCK CLOCK_REALTIME
#endif

static isio_time stream_now(void)
{
    struct timespec ts;
    clock_gettime(SW_STREAM_CLOCK, &ts);
    isio_time t = {(int64_t)ts.tv_sec, (int64_t)ts.tv_nsec};
    return t;
}

static double time_seconds(isio_time t)
{
    return (double)t.sec + 1e-9 * (double)t.nsec;
}

double sw_stream_clock_now(void)
{
    return time_seconds(stream_now());
}

static double monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ types */

size_t sw_stream_type_size(sw_stream_type t)
{
    switch (t) {
    case SW_STREAM_U8:
    case SW_STREAM_I8: return 1;
    case SW_STREAM_U16:
    case SW_STREAM_I16:
    case SW_STREAM_F16: return 2;
    case SW_STREAM_U32:
    case SW_STREAM_I32:
    case SW_STREAM_F32: return 4;
    case SW_STREAM_U64:
    case SW_STREAM_I64:
    case SW_STREAM_F64:
    case SW_STREAM_CF32: return 8;
    case SW_STREAM_CF64: return 16;
    }
    return 0;
}

static const struct {
    sw_stream_type t;
    const char *name, *numpy, *isio, *isio7;
} type_names[] = {
    {SW_STREAM_U8, "u8", "uint8", "UINT8", "UI8"},
    {SW_STREAM_I8, "i8", "int8", "INT8", "SI8"},
    {SW_STREAM_U16, "u16", "uint16", "UINT16", "UI16"},
    {SW_STREAM_I16, "i16", "int16", "INT16", "SI16"},
    {SW_STREAM_U32, "u32", "uint32", "UINT32", "UI32"},
    {SW_STREAM_I32, "i32", "int32", "INT32", "SI32"},
    {SW_STREAM_U64, "u64", "uint64", "UINT64", "UI64"},
    {SW_STREAM_I64, "i64", "int64", "INT64", "SI64"},
    {SW_STREAM_F32, "f32", "float32", "FLT32", "FLOAT"},
    {SW_STREAM_F64, "f64", "float64", "FLT64", "DOUBLE"},
    {SW_STREAM_CF32, "cf32", "complex64", "CPLX32", "CFLOAT"},
    {SW_STREAM_CF64, "cf64", "complex128", "CPLX64", "CDOUBLE"},
    {SW_STREAM_F16, "f16", "float16", "FLT16", "HALF"},
};

const char *sw_stream_type_string(sw_stream_type t)
{
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
        if (type_names[i].t == t)
            return type_names[i].name;
    return "?";
}

sw_status sw_stream_type_parse(const char *text, sw_stream_type *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "stream type: no text given");
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++) {
        if (!strcasecmp(text, type_names[i].name) || !strcasecmp(text, type_names[i].numpy) ||
            !strcasecmp(text, type_names[i].isio) || !strcasecmp(text, type_names[i].isio7)) {
            *out = type_names[i].t;
            return SW_OK;
        }
    }
    return sw_fail(NULL, SW_EINVAL,
                   "stream type '%s' is not one of u8 i8 u16 i16 u32 i32 u64 i64 f16 f32 f64 "
                   "cf32 cf64",
                   text);
}

sw_stream_type sw_stream_type_from_pixel(sw_pixel_type t)
{
    switch (t) {
    case SW_PIX_U8: return SW_STREAM_U8;
    case SW_PIX_U16: return SW_STREAM_U16;
    case SW_PIX_U32: return SW_STREAM_U32;
    case SW_PIX_F32: return SW_STREAM_F32;
    }
    return (sw_stream_type)0;
}

sw_status sw_stream_type_to_pixel(sw_stream_type t, sw_pixel_type *out)
{
    switch (t) {
    case SW_STREAM_U8: *out = SW_PIX_U8; return SW_OK;
    case SW_STREAM_U16: *out = SW_PIX_U16; return SW_OK;
    case SW_STREAM_U32: *out = SW_PIX_U32; return SW_OK;
    case SW_STREAM_F32: *out = SW_PIX_F32; return SW_OK;
    default: break;
    }
    return sw_fail(NULL, SW_EUNSUPPORTED,
                   "stream type %s has no spotwave pixel type (u8, u16, u32 and f32 have)",
                   sw_stream_type_string(t));
}

/* ------------------------------------------------------------------ names and paths */

void sw_stream_params_default(sw_stream_params *p)
{
    memset(p, 0, sizeof *p);
    p->naxis = 2;
    p->size[0] = p->size[1] = p->size[2] = 1;
    p->type = SW_STREAM_F32;
}

static sw_status check_name(sw_context *ctx, const char *name)
{
    if (!name || !name[0])
        return sw_fail(ctx, SW_EINVAL, "stream name: none given");
    size_t n = strlen(name);
    if (n >= SW_STREAM_NAME_MAX)
        return sw_fail(ctx, SW_EINVAL, "stream name '%.40s...' is %zu characters long (at most %d)",
                       name, n, SW_STREAM_NAME_MAX - 1);
    if (name[0] == '.' || name[0] == '-')
        return sw_fail(ctx, SW_EINVAL, "stream name '%s' must not start with '%c'", name, name[0]);
    for (size_t i = 0; i < n; i++) {
        const char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return sw_fail(ctx, SW_EINVAL,
                           "stream name '%s' has the character '%c' (allowed: letters, digits, "
                           "'_', '.', '-')",
                           name, c);
    }
    return SW_OK;
}

static int dir_exists(const char *d)
{
    DIR *h = opendir(d);
    if (!h)
        return 0;
    closedir(h);
    return 1;
}

sw_status sw_stream_dir(sw_context *ctx, const char *dir, char *buf, size_t size)
{
    if (!buf || size == 0)
        return sw_fail(ctx, SW_EINVAL, "sw_stream_dir: no buffer");
    const char *d = dir;
    if (!d || !d[0]) {
        const char *env = getenv("MILK_SHM_DIR");
        if (env && env[0] && dir_exists(env))
            d = env;
        else {
            if (env && env[0])
                sw_log(ctx, SW_LOG_WARN,
                       "MILK_SHM_DIR='%s' is not a directory: streams go to %s (as ImageStreamIO "
                       "does)",
                       env, dir_exists(ISIO_DEFAULT_DIR) ? ISIO_DEFAULT_DIR : "/tmp");
            d = dir_exists(ISIO_DEFAULT_DIR) ? ISIO_DEFAULT_DIR : "/tmp";
        }
    }
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/')
        n--;
    if (n + 1 > size)
        return sw_fail(ctx, SW_EINVAL, "stream directory '%s' is too long", d);
    memcpy(buf, d, n);
    buf[n] = '\0';
    return SW_OK;
}

static sw_status stream_file(sw_context *ctx, const char *dir, const char *name, char *path,
                             size_t size)
{
    SW_TRY(check_name(ctx, name));
    char d[PATH_MAX];
    SW_TRY(sw_stream_dir(ctx, dir, d, sizeof d));
    int k = snprintf(path, size, "%s/%s.im.shm", d, name);
    if (k < 0 || (size_t)k >= size)
        return sw_fail(ctx, SW_EINVAL, "stream path %s/%s.im.shm is too long", d, name);
    return SW_OK;
}

/* ------------------------------------------------------------------ create */

static sw_status check_params(sw_context *ctx, const sw_stream_params *p)
{
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "stream parameters: none given");
    SW_TRY(check_name(ctx, p->name));
    if (p->naxis < 1 || p->naxis > 3)
        return sw_fail(ctx, SW_EINVAL, "stream '%s': naxis %d is not 1, 2 or 3", p->name,
                       (int)p->naxis);
    for (int a = 0; a < p->naxis; a++)
        if (p->size[a] < 1)
            return sw_fail(ctx, SW_EINVAL, "stream '%s': size[%d] is 0", p->name, a);
    if (sw_stream_type_size(p->type) == 0)
        return sw_fail(ctx, SW_EINVAL, "stream '%s': unknown data type %d", p->name, (int)p->type);
    if (p->semaphores < 0 || p->semaphores > SW_STREAM_SEM_MAX)
        return sw_fail(ctx, SW_EINVAL, "stream '%s': %d semaphores (0..%d)", p->name,
                       (int)p->semaphores, SW_STREAM_SEM_MAX);
    if (p->keywords < 0 || p->keywords > 65535)
        return sw_fail(ctx, SW_EINVAL, "stream '%s': %d keyword slots (0..65535)", p->name,
                       (int)p->keywords);
    if (p->circular != 0 && p->circular != 1)
        return sw_fail(ctx, SW_EINVAL, "stream '%s': circular is %d (0 or 1)", p->name,
                       (int)p->circular);
    if (p->circular && p->naxis != 3)
        return sw_fail(ctx, SW_EINVAL,
                       "stream '%s': a circular buffer needs 3 axes (slices along the third), "
                       "not %d",
                       p->name, (int)p->naxis);
    return SW_OK;
}

/* Fills the handle's derived fields from its mapped header (already checked). */
static void handle_setup(sw_stream *s)
{
    const isio_md *md = s->md;
    s->circular = (md->imagetype & 0xFull) == ISIO_CIRCULAR_BUFFER && md->naxis == 3;
    s->arrays = (md->imagetype & 0xF000Full) == (ISIO_CIRCULAR_BUFFER | ISIO_ZAXIS_TEMPORAL);
    s->depth = md->naxis == 3 ? md->size[2] : 1;
    s->slice_bytes = (size_t)md->size[0] * (md->naxis >= 2 ? md->size[1] : 1) *
                     sw_stream_type_size((sw_stream_type)md->datatype);
    s->frame_bytes = s->circular ? s->slice_bytes : (size_t)md->imdatamemsize;
}

static void init_semaphores(sw_stream *s)
{
    const int32_t n = s->md->sem;
    for (int32_t i = 0; i < n; i++) {
        sem_init(sem_at(s, i), 1, 0);
        *readpid_at(s, i) = -1;
        *writepid_at(s, i) = -1;
    }
    sem_init((sem_t *)(void *)(s->map + s->L.semlog), 1, 0);
    isio_proctrace *pt = (isio_proctrace *)(void *)(s->map + s->L.proctrace);
    for (uint32_t i = 0; i < s->md->NBproctrace; i++)
        pt[i].trigsemindex = -1;
    for (uint32_t i = 0; i < s->md->NBkw; i++)
        kw_at(s, (int32_t)i)->type = 'N';
}

sw_status sw_stream_create(sw_context *ctx, const char *dir, const sw_stream_params *p,
                           sw_stream **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_stream_create: out is NULL");
    *out = NULL;
    SW_TRY(check_params(ctx, p));
    const uint32_t nsem = p->semaphores ? (uint32_t)p->semaphores : ISIO_SEM_DEFAULT;
    const uint32_t sz[3] = {p->size[0], p->naxis >= 2 ? p->size[1] : 0,
                            p->naxis >= 3 ? p->size[2] : 0};
    uint64_t nelement = sz[0];
    for (int a = 1; a < p->naxis; a++) {
        if (nelement > UINT64_MAX / sz[a])
            return sw_fail(ctx, SW_EINVAL, "stream '%s': too many elements", p->name);
        nelement *= sz[a];
    }
    const size_t esize = sw_stream_type_size(p->type);
    if (nelement > (UINT64_MAX >> 8) / esize)
        return sw_fail(ctx, SW_EINVAL, "stream '%s': too many elements", p->name);
    const uint64_t datamem = nelement * esize;
    isio_layout L;
    if (layout_compute(datamem, (uint32_t)p->keywords, nsem, ISIO_NB_PROCTRACE, p->circular, sz[2],
                       0, &L) != 0 ||
        L.total > (uint64_t)SIZE_MAX / 2)
        return sw_fail(ctx, SW_EINVAL, "stream '%s': too large", p->name);
    SW_TRY(sw_memory_check(ctx, 1, L.total, "the stream %s of %u x %u x %u %s", p->name,
                           (unsigned)sz[0], (unsigned)(sz[1] ? sz[1] : 1),
                           (unsigned)(sz[2] ? sz[2] : 1), sw_stream_type_string(p->type)));

    sw_stream *s = calloc(1, sizeof *s);
    if (!s)
        return sw_fail(ctx, SW_ENOMEM, "stream '%s': no memory for the handle", p->name);
    s->ctx = ctx;
    sw_status st = stream_file(ctx, dir, p->name, s->path, sizeof s->path);
    if (st != SW_OK) {
        free(s);
        return st;
    }
    /* A new file (new inode) even when one exists: processes mapping the old one keep it. */
    int fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) {
        unlink(s->path);
        fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    }
    if (fd < 0) {
        st = sw_fail(ctx, SW_EIO, "stream '%s': cannot create %s: %s", p->name, s->path,
                     strerror(errno));
        free(s);
        return st;
    }
    if (ftruncate(fd, (off_t)L.total) != 0) {
        st = sw_fail(ctx, SW_EIO, "stream '%s': cannot size %s to %llu bytes: %s", p->name, s->path,
                     (unsigned long long)L.total, strerror(errno));
        goto fail_fd;
    }
    /* Reserve the pages now (tmpfs): a full /dev/shm is an error here, not a SIGBUS later. */
    int fe = posix_fallocate(fd, 0, (off_t)L.total);
    if (fe != 0 && fe != EOPNOTSUPP && fe != EINVAL) {
        st = sw_fail(ctx, SW_EIO, "stream '%s': cannot reserve %llu bytes for %s: %s", p->name,
                     (unsigned long long)L.total, s->path, strerror(fe));
        goto fail_fd;
    }
    struct stat fs;
    if (fstat(fd, &fs) != 0) {
        st = sw_fail(ctx, SW_EIO, "stream '%s': cannot stat %s: %s", p->name, s->path,
                     strerror(errno));
        goto fail_fd;
    }
    void *m = mmap(NULL, (size_t)L.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        st = sw_fail(ctx, SW_EIO, "stream '%s': cannot map %s: %s", p->name, s->path,
                     strerror(errno));
        goto fail_fd;
    }
    close(fd);
    s->map = m;
    s->map_size = (size_t)L.total;
    s->ino = (uint64_t)fs.st_ino;
    s->dev = (uint64_t)fs.st_dev;
    s->L = L;
    s->md = (isio_md *)m;

    isio_md *md = s->md;
    snprintf(md->name, sizeof md->name, "%s", p->name);
    md->naxis = (uint8_t)p->naxis;
    memcpy(md->size, sz, sizeof sz);
    md->nelement = nelement;
    md->datatype = (uint8_t)p->type;
    md->imagetype = p->circular ? (ISIO_CIRCULAR_BUFFER | ISIO_ZAXIS_TEMPORAL) : ISIO_MATH_DATA;
    md->creationtime = md->lastaccesstime = stream_now();
    md->creatorPID = (int32_t)getpid();
    md->ownerPID = 0;
    md->shared = 1;
    md->inode = (uint64_t)fs.st_ino;
    md->location = -1;
    md->sem = (uint16_t)nsem;
    md->NBproctrace = ISIO_NB_PROCTRACE;
    md->NBkw = (uint16_t)p->keywords;
    md->imdatamemsize = datamem;
    handle_setup(s);
    init_semaphores(s);
    /* The version last (release), as ImageStreamIO: a half-made stream is refused by readers. */
    atomic_thread_fence(memory_order_release);
    memcpy(md->version, ISIO_VERSION, sizeof ISIO_VERSION);
    *out = s;
    return SW_OK;

fail_fd:
    close(fd);
    unlink(s->path);
    free(s);
    return st;
}

/* ------------------------------------------------------------------ open */

static sw_status bad(sw_context *ctx, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static sw_status bad(sw_context *ctx, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sw_fail(ctx, SW_EFORMAT, "stream %s: %s", path, msg);
}

/* Checks a header of file_size bytes; fills L. */
static sw_status check_header(sw_context *ctx, const char *path, const isio_md *md,
                              uint64_t file_size, isio_layout *L)
{
    char ver[33];
    memcpy(ver, md->version, 32);
    ver[32] = '\0';
    if (strcmp(ver, ISIO_VERSION) != 0) {
        for (char *c = ver; *c; c++)
            if (*c < 32 || *c > 126)
                *c = '?';
        return bad(ctx, path,
                   "version '%s' is not ImageStreamIO's \"%s\" (an older or newer layout, a "
                   "stream still being created, or not a stream)",
                   ver, ISIO_VERSION);
    }
    if (md->naxis < 1 || md->naxis > 3)
        return bad(ctx, path, "naxis is %d (1, 2 or 3)", md->naxis);
    uint64_t n = 1;
    for (int a = 0; a < md->naxis; a++) {
        if (md->size[a] < 1)
            return bad(ctx, path, "size[%d] is 0 with naxis %d", a, md->naxis);
        if (n > UINT64_MAX / md->size[a])
            return bad(ctx, path, "the sizes' product overflows 64 bits");
        n *= md->size[a];
    }
    const size_t es = sw_stream_type_size((sw_stream_type)md->datatype);
    if (es == 0)
        return bad(ctx, path, "datatype %d is not one of ImageStreamIO's (1..13)", md->datatype);
    if (n > UINT64_MAX / es)
        return bad(ctx, path, "nelement x %zu bytes overflows 64 bits", es);
    if (md->nelement != n)
        return bad(ctx, path, "nelement %llu is not the product of the sizes (%llu)",
                   (unsigned long long)md->nelement, (unsigned long long)n);
    if (md->imdatamemsize != n * es)
        return bad(ctx, path, "imdatamemsize %llu is not nelement x %zu bytes (%llu)",
                   (unsigned long long)md->imdatamemsize, es, (unsigned long long)(n * es));
    if (md->shared != 1)
        return bad(ctx, path, "shared is %d (1 for a shared-memory stream)", md->shared);
    if (md->location != -1) {
        sw_fail(ctx, SW_EUNSUPPORTED,
                "stream %s: its data live in GPU memory (location %d): not supported", path,
                md->location);
        return SW_EUNSUPPORTED;
    }
    if ((md->imagetype & 0xF000Full) == ISIO_CIRCULAR_BUFFER && md->naxis != 3)
        return bad(ctx, path, "imagetype is a circular buffer but naxis is %d (3 needed)",
                   md->naxis);
    if (md->sem > SW_STREAM_SEM_MAX)
        return bad(ctx, path, "sem is %d (at most %d)", md->sem, SW_STREAM_SEM_MAX);
    if (md->NBproctrace > 1000)
        return bad(ctx, path, "NBproctrace is %d (at most 1000)", md->NBproctrace);
    if (md->CBsize > 1000000)
        return bad(ctx, path, "CBsize is %u (at most 10^6)", md->CBsize);
    const int arrays = (md->imagetype & 0xF000Full) == (ISIO_CIRCULAR_BUFFER | ISIO_ZAXIS_TEMPORAL);
    if (layout_compute(md->imdatamemsize, md->NBkw, md->sem, md->NBproctrace, arrays,
                       md->naxis == 3 ? md->size[2] : 0, md->CBsize, L) != 0)
        return bad(ctx, path, "sizes overflow");
    if (L->total != file_size)
        return bad(ctx, path,
                   "the header (%u x %u x %u %s, %d keywords, %d semaphores, %d trace entries%s, "
                   "CBsize %u) needs %llu bytes but the file has %llu",
                   md->size[0], md->naxis >= 2 ? md->size[1] : 1, md->naxis >= 3 ? md->size[2] : 1,
                   sw_stream_type_string((sw_stream_type)md->datatype), md->NBkw, md->sem,
                   md->NBproctrace, arrays ? ", per-slice arrays" : "", md->CBsize,
                   (unsigned long long)L->total, (unsigned long long)file_size);
    return SW_OK;
}

sw_status sw_stream_open(sw_context *ctx, const char *dir, const char *name, sw_stream **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_stream_open: out is NULL");
    *out = NULL;
    sw_stream *s = calloc(1, sizeof *s);
    if (!s)
        return sw_fail(ctx, SW_ENOMEM, "stream '%s': no memory for the handle", name);
    s->ctx = ctx;
    sw_status st = stream_file(ctx, dir, name, s->path, sizeof s->path);
    if (st != SW_OK) {
        free(s);
        return st;
    }
    int fd = open(s->path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        st =
            sw_fail(ctx, SW_EIO, "stream '%s': cannot open %s: %s", name, s->path, strerror(errno));
        free(s);
        return st;
    }
    struct stat fs;
    if (fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode)) {
        st = sw_fail(ctx, SW_EIO, "stream '%s': %s is not a regular file", name, s->path);
        goto fail_fd;
    }
    if ((uint64_t)fs.st_size <= sizeof(isio_md)) {
        st = bad(ctx, s->path, "the file has %lld bytes, less than a header (%zu)",
                 (long long)fs.st_size, sizeof(isio_md) + 1);
        goto fail_fd;
    }
    if ((uint64_t)fs.st_size > (uint64_t)SIZE_MAX / 2) {
        st = bad(ctx, s->path, "the file is too large to map");
        goto fail_fd;
    }
    void *m = mmap(NULL, (size_t)fs.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        st = sw_fail(ctx, SW_EIO, "stream '%s': cannot map %s: %s", name, s->path, strerror(errno));
        goto fail_fd;
    }
    close(fd);
    s->map = m;
    s->map_size = (size_t)fs.st_size;
    s->ino = (uint64_t)fs.st_ino;
    s->dev = (uint64_t)fs.st_dev;
    s->md = (isio_md *)m;
    atomic_thread_fence(memory_order_acquire);
    st = check_header(ctx, s->path, s->md, (uint64_t)fs.st_size, &s->L);
    if (st != SW_OK) {
        munmap(s->map, s->map_size);
        free(s);
        return st;
    }
    handle_setup(s);
    *out = s;
    return SW_OK;

fail_fd:
    close(fd);
    free(s);
    return st;
}

void sw_stream_close(sw_stream *s)
{
    if (!s)
        return;
    if (s->map)
        munmap(s->map, s->map_size);
    free(s);
}

sw_status sw_stream_remove(sw_context *ctx, const char *dir, const char *name)
{
    char path[PATH_MAX];
    SW_TRY(stream_file(ctx, dir, name, path, sizeof path));
    if (unlink(path) != 0)
        return sw_fail(ctx, SW_EIO, "stream '%s': cannot remove %s: %s", name, path,
                       strerror(errno));
    return SW_OK;
}

const char *sw_stream_path(const sw_stream *s)
{
    return s ? s->path : "";
}

int sw_stream_stale(const sw_stream *s)
{
    struct stat fs;
    if (stat(s->path, &fs) != 0)
        return 1;
    return (uint64_t)fs.st_ino != s->ino || (uint64_t)fs.st_dev != s->dev;
}

/* ------------------------------------------------------------------ header, data */

uint64_t sw_stream_cnt0(const sw_stream *s)
{
    return atomic_load_explicit(MD_ATOMIC_U64(&s->md->cnt0), memory_order_acquire);
}

uint64_t sw_stream_cnt1(const sw_stream *s)
{
    return atomic_load_explicit(MD_ATOMIC_U64(&s->md->cnt1), memory_order_acquire);
}

static int32_t keywords_used(const sw_stream *s)
{
    int32_t n = 0;
    for (int32_t i = 0; i < (int32_t)s->md->NBkw; i++) {
        const char t = kw_at(s, i)->type;
        n += (t == 'L' || t == 'D' || t == 'S');
    }
    return n;
}

sw_status sw_stream_get_info(const sw_stream *s, sw_stream_info *out)
{
    if (!s || !out)
        return sw_fail(NULL, SW_EINVAL, "sw_stream_get_info: NULL argument");
    const isio_md *md = s->md;
    memset(out, 0, sizeof *out);
    memcpy(out->name, md->name, sizeof out->name - 1);
    out->naxis = md->naxis;
    for (int a = 0; a < 3; a++)
        out->size[a] = a < md->naxis ? md->size[a] : 1;
    out->type = (sw_stream_type)md->datatype;
    out->semaphores = md->sem;
    out->keywords = md->NBkw;
    out->circular = s->circular;
    out->cnt0 = sw_stream_cnt0(s);
    out->cnt1 = sw_stream_cnt1(s);
    out->write_flag = atomic_load_explicit(MD_ATOMIC_U8(&md->write), memory_order_acquire);
    out->creation_time = time_seconds(md->creationtime);
    out->write_time = time_seconds(md->writetime);
    out->access_time = time_seconds(md->lastaccesstime);
    out->acquire_time = time_seconds(md->atime);
    out->owner_pid = md->ownerPID;
    out->creator_pid = md->creatorPID;
    out->frame_bytes = s->frame_bytes;
    out->image_type = md->imagetype;
    out->file_bytes = s->map_size;
    out->keywords_used = keywords_used(s);
    return SW_OK;
}

void *sw_stream_data(sw_stream *s)
{
    return s ? s->map + s->L.data : NULL;
}

void *sw_stream_slice(sw_stream *s, uint32_t z)
{
    if (!s || z >= s->depth)
        return NULL;
    if (s->md->naxis < 3)
        return s->map + s->L.data;
    return s->map + s->L.data + (size_t)z * s->slice_bytes;
}

sw_status sw_stream_wrap_image(sw_stream *s, uint32_t z, sw_image *out)
{
    if (!s || !out)
        return sw_fail(NULL, SW_EINVAL, "sw_stream_wrap_image: NULL argument");
    sw_pixel_type pt;
    if (sw_stream_type_to_pixel((sw_stream_type)s->md->datatype, &pt) != SW_OK)
        return sw_fail(s->ctx, SW_EUNSUPPORTED, "stream %s: %s", s->path, sw_context_error(NULL));
    void *p = sw_stream_slice(s, z);
    if (!p)
        return sw_fail(s->ctx, SW_ERANGE, "stream %s: slice %u of %u", s->path, (unsigned)z,
                       (unsigned)s->depth);
    const uint32_t w = s->md->size[0], h = s->md->naxis >= 2 ? s->md->size[1] : 1;
    if (w > SW_IMAGE_MAX_DIM || h > SW_IMAGE_MAX_DIM)
        return sw_fail(s->ctx, SW_ERANGE, "stream %s: %u x %u is larger than an image may be",
                       s->path, (unsigned)w, (unsigned)h);
    return sw_image_wrap(p, (int32_t)w, (int32_t)h, (size_t)w * sw_pixel_size(pt), pt, SW_MEM_HOST,
                         out);
}

/* ------------------------------------------------------------------ writer */

sw_status sw_stream_write_begin(sw_stream *s, void **slot)
{
    if (!s || !slot)
        return sw_fail(NULL, SW_EINVAL, "sw_stream_write_begin: NULL argument");
    if (s->writing)
        return sw_fail(s->ctx, SW_EINVAL, "stream %s: a write is already open", s->path);
    uint32_t z = 0;
    if (s->circular)
        z = (uint32_t)((sw_stream_cnt1(s) + 1) % s->depth);
    atomic_store_explicit(MD_ATOMIC_U8(&s->md->write), 1, memory_order_relaxed);
    /* The flag before any byte of the frame (readers check it after their copy). */
    atomic_thread_fence(memory_order_release);
    s->writing = 1;
    s->wslice = z;
    *slot = s->map + s->L.data + (size_t)z * (s->circular ? s->slice_bytes : 0);
    return SW_OK;
}

static void post_all(sw_stream *s)
{
    const int32_t pid = (int32_t)getpid();
    for (int32_t i = 0; i < (int32_t)s->md->sem; i++) {
        sem_t *sem = sem_at(s, i);
        int v = 0;
        if (sem_getvalue(sem, &v) == 0 && v < ISIO_SEM_MAXVAL) {
            sem_post(sem);
            atomic_store_explicit(MD_ATOMIC_I32(writepid_at(s, i)), pid, memory_order_relaxed);
        }
    }
    sem_t *log = (sem_t *)(void *)(s->map + s->L.semlog);
    int v = 0;
    if (sem_getvalue(log, &v) == 0 && v < ISIO_SEM_MAXVAL)
        sem_post(log);
}

sw_status sw_stream_write_end(sw_stream *s)
{
    if (!s)
        return sw_fail(NULL, SW_EINVAL, "sw_stream_write_end: NULL stream");
    if (!s->writing)
        return sw_fail(s->ctx, SW_EINVAL, "stream %s: no write is open", s->path);
    isio_md *md = s->md;
    const isio_time now = stream_now();
    const uint64_t c = atomic_load_explicit(MD_ATOMIC_U64(&md->cnt0), memory_order_relaxed) + 1;
    if (s->circular) {
        if (s->arrays) {
            ((isio_time *)(void *)(s->map + s->L.atimes))[s->wslice] = now;
            ((isio_time *)(void *)(s->map + s->L.wtimes))[s->wslice] = now;
            ((uint64_t *)(void *)(s->map + s->L.cnts))[s->wslice] = c;
        }
        atomic_store_explicit(MD_ATOMIC_U64(&md->cnt1), s->wslice, memory_order_relaxed);
    }
    md->writetime = now;
    md->atime = now;
    atomic_store_explicit(MD_ATOMIC_U64(&md->cnt0), c, memory_order_release);
    atomic_store_explicit(MD_ATOMIC_U8(&md->write), 0, memory_order_release);
    s->writing = 0;
    post_all(s);
    return SW_OK;
}

sw_status sw_stream_write(sw_stream *s, const void *data, size_t bytes)
{
    if (!s || !data)
        return sw_fail(NULL, SW_EINVAL, "sw_stream_write: NULL argument");
    if (bytes != s->frame_bytes)
        return sw_fail(s->ctx, SW_EINVAL, "stream %s: a frame is %zu bytes, not %zu", s->path,
                       s->frame_bytes, bytes);
    void *slot;
    SW_TRY(sw_stream_write_begin(s, &slot));
    memcpy(slot, data, bytes);
    return sw_stream_write_end(s);
}

/* ------------------------------------------------------------------ readers */

static int pid_alive(int32_t pid)
{
    if (pid <= 0)
        return 0;
    return !(kill((pid_t)pid, 0) != 0 && errno == ESRCH);
}

sw_status sw_stream_claim_semaphore(sw_stream *s, int32_t *index)
{
    if (!s || !index)
        return sw_fail(NULL, SW_EINVAL, "sw_stream_claim_semaphore: NULL argument");
    const int32_t me = (int32_t)getpid();
    for (int32_t i = 0; i < (int32_t)s->md->sem; i++) {
        _Atomic int32_t *slot = MD_ATOMIC_I32(readpid_at(s, i));
        int32_t cur = atomic_load_explicit(slot, memory_order_acquire);
        if (cur > 0 && (cur == me || pid_alive(cur)))
            continue;
        if (atomic_compare_exchange_strong(slot, &cur, me)) {
            *index = i;
            return SW_OK;
        }
    }
    *index = -1;
    return sw_fail(s->ctx, SW_ERANGE,
                   "stream %s: all %d semaphores are held by live readers (create it with more)",
                   s->path, (int)s->md->sem);
}

int32_t sw_stream_readers(const sw_stream *s)
{
    if (!s)
        return 0;
    int32_t n = 0;
    for (int32_t i = 0; i < (int32_t)s->md->sem; i++) {
        const int32_t cur =
            atomic_load_explicit(MD_ATOMIC_I32(readpid_at(s, i)), memory_order_acquire);
        n += cur > 0 && pid_alive(cur);
    }
    return n;
}

void sw_stream_release_semaphore(sw_stream *s, int32_t index)
{
    if (!s || index < 0 || index >= (int32_t)s->md->sem)
        return;
    int32_t me = (int32_t)getpid();
    atomic_compare_exchange_strong(MD_ATOMIC_I32(readpid_at(s, index)), &me, -1);
}

void sw_stream_flush_semaphore(sw_stream *s, int32_t index)
{
    if (!s || index < 0 || index >= (int32_t)s->md->sem)
        return;
    for (int k = 0; k < 1 << 20; k++) {
        if (sem_trywait(sem_at(s, index)) != 0 && errno != EINTR)
            break;
    }
}

int32_t sw_stream_semaphore_value(const sw_stream *s, int32_t index)
{
    if (!s || index < 0 || index >= (int32_t)s->md->sem)
        return -1;
    int v = 0;
    if (sem_getvalue(sem_at(s, index), &v) != 0)
        return -1;
    return v;
}

static struct timespec abs_monotonic(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

sw_status sw_stream_wait(sw_stream *s, sw_stream_wait_mode mode, int32_t index, uint64_t after,
                         double timeout_s, const volatile int *stop, uint64_t *cnt0)
{
    if (!s)
        return sw_fail(NULL, SW_EINVAL, "sw_stream_wait: NULL stream");
    if (mode != SW_STREAM_WAIT_SEM && mode != SW_STREAM_WAIT_SPIN)
        return sw_fail(s->ctx, SW_EINVAL, "stream %s: wait mode %d", s->path, (int)mode);
    if (mode == SW_STREAM_WAIT_SEM && (index < 0 || index >= (int32_t)s->md->sem))
        return sw_fail(s->ctx, SW_EINVAL, "stream %s: semaphore %d does not exist (0..%d)", s->path,
                       (int)index, (int)s->md->sem - 1);
    const double t0 = monotonic_now();
    const double deadline = timeout_s < 0 ? -1.0 : t0 + timeout_s;
    uint64_t c;
    unsigned spins = 0;
    for (;;) {
        c = sw_stream_cnt0(s);
        if (c > after) {
            if (cnt0)
                *cnt0 = c;
            return SW_OK;
        }
        if (stop && *stop)
            return sw_fail(s->ctx, SW_ECANCELED, "stream %s: wait stopped", s->path);
        if (timeout_s == 0)
            break;
        if (mode == SW_STREAM_WAIT_SPIN) {
            SW_CPU_PAUSE();
            if ((++spins & 1023) == 0 && deadline >= 0 && monotonic_now() >= deadline)
                break;
            continue;
        }
        const double now = monotonic_now();
        if (deadline >= 0 && now >= deadline)
            break;
        double until = deadline < 0 ? now + 3600.0 : deadline;
        if (stop && until > now + 0.05)
            until = now + 0.05;
        const struct timespec ts = abs_monotonic(until);
        if (sem_clockwait(sem_at(s, index), CLOCK_MONOTONIC, &ts) != 0 && errno != ETIMEDOUT &&
            errno != EINTR)
            return sw_fail(s->ctx, SW_EIO, "stream %s: waiting on semaphore %d: %s", s->path,
                           (int)index, strerror(errno));
    }
    if (cnt0)
        *cnt0 = c;
    return sw_fail(s->ctx, SW_ETIMEDOUT, "stream %s: no frame after %llu within %g s", s->path,
                   (unsigned long long)after, timeout_s);
}

sw_status sw_stream_read(sw_stream *s, void *dst, size_t bytes, uint64_t *cnt0)
{
    if (!s || !dst)
        return sw_fail(NULL, SW_EINVAL, "sw_stream_read: NULL argument");
    if (bytes != s->frame_bytes)
        return sw_fail(s->ctx, SW_EINVAL, "stream %s: a frame is %zu bytes, not %zu", s->path,
                       s->frame_bytes, bytes);
    isio_md *md = s->md;
    double since = -1;
    for (unsigned tries = 0;; tries++) {
        const uint64_t c1 = atomic_load_explicit(MD_ATOMIC_U64(&md->cnt0), memory_order_acquire);
        const uint8_t w1 = atomic_load_explicit(MD_ATOMIC_U8(&md->write), memory_order_acquire);
        if (!w1) {
            size_t off = 0;
            if (s->circular)
                off = (size_t)(sw_stream_cnt1(s) % s->depth) * s->slice_bytes;
            memcpy(dst, s->map + s->L.data + off, bytes);
            /* The copy before the second look at the flag and the counter. */
            atomic_thread_fence(memory_order_acquire);
            const uint8_t w2 = atomic_load_explicit(MD_ATOMIC_U8(&md->write), memory_order_acquire);
            const uint64_t c2 =
                atomic_load_explicit(MD_ATOMIC_U64(&md->cnt0), memory_order_acquire);
            if (!w2 && c1 == c2) {
                if (cnt0)
                    *cnt0 = c1;
                return SW_OK;
            }
        }
        SW_CPU_PAUSE();
        if ((tries & 255) == 255) {
            const double now = monotonic_now();
            if (since < 0)
                since = now;
            else if (now - since > 1.0)
                return sw_fail(s->ctx, SW_EIO,
                               "stream %s: the write flag stayed set for a second (a writer "
                               "stopped in the middle of a frame?)",
                               s->path);
            if (tries > 4096)
                sched_yield();
        }
    }
}

/* ------------------------------------------------------------------ keywords */

static sw_status kw_slot(sw_stream *s, const char *name, const char *comment, isio_kw **out)
{
    if (!s || !name)
        return sw_fail(NULL, SW_EINVAL, "stream keyword: NULL argument");
    const size_t n = strlen(name);
    if (n < 1 || n > 15)
        return sw_fail(s->ctx, SW_EINVAL, "stream keyword name '%s': 1 to 15 characters", name);
    if (comment && strlen(comment) > 79)
        return sw_fail(s->ctx, SW_EINVAL, "stream keyword %s: the comment is longer than 79", name);
    isio_kw *free_slot = NULL;
    for (int32_t i = 0; i < (int32_t)s->md->NBkw; i++) {
        isio_kw *k = kw_at(s, i);
        const int used = k->type == 'L' || k->type == 'D' || k->type == 'S';
        if (used && strncmp(k->name, name, 16) == 0) {
            *out = k;
            return SW_OK;
        }
        if (!used && !free_slot)
            free_slot = k;
    }
    if (!free_slot)
        return sw_fail(s->ctx, SW_ERANGE, "stream %s: all %d keyword slots are used (keyword %s)",
                       s->path, (int)s->md->NBkw, name);
    *out = free_slot;
    return SW_OK;
}

static void kw_finish(isio_kw *k, const char *name, char type, const char *comment)
{
    memset(k->name, 0, sizeof k->name);
    memcpy(k->name, name, strlen(name));
    memset(k->comment, 0, sizeof k->comment);
    if (comment)
        memcpy(k->comment, comment, strlen(comment));
    k->cnt++;
    k->type = type;
}

sw_status sw_stream_keyword_set_int(sw_stream *s, const char *name, int64_t v, const char *comment)
{
    isio_kw *k;
    SW_TRY(kw_slot(s, name, comment, &k));
    memset(&k->value, 0, sizeof k->value);
    k->value.numl = v;
    kw_finish(k, name, 'L', comment);
    return SW_OK;
}

sw_status sw_stream_keyword_set_double(sw_stream *s, const char *name, double v,
                                       const char *comment)
{
    isio_kw *k;
    SW_TRY(kw_slot(s, name, comment, &k));
    memset(&k->value, 0, sizeof k->value);
    k->value.numf = v;
    kw_finish(k, name, 'D', comment);
    return SW_OK;
}

sw_status sw_stream_keyword_set_string(sw_stream *s, const char *name, const char *v,
                                       const char *comment)
{
    if (!v)
        return sw_fail(s ? s->ctx : NULL, SW_EINVAL, "stream keyword: NULL string");
    if (strlen(v) > 15)
        return sw_fail(s ? s->ctx : NULL, SW_EINVAL,
                       "stream keyword %s: the string '%s' is longer than 15 characters",
                       name ? name : "?", v);
    isio_kw *k;
    SW_TRY(kw_slot(s, name, comment, &k));
    memset(&k->value, 0, sizeof k->value);
    memcpy(k->value.valstr, v, strlen(v));
    kw_finish(k, name, 'S', comment);
    return SW_OK;
}

int32_t sw_stream_keyword_count(const sw_stream *s)
{
    return s ? keywords_used(s) : 0;
}

static const isio_kw *kw_used_at(const sw_stream *s, int32_t i)
{
    int32_t n = 0;
    for (int32_t j = 0; j < (int32_t)s->md->NBkw; j++) {
        const isio_kw *k = kw_at(s, j);
        if (k->type == 'L' || k->type == 'D' || k->type == 'S') {
            if (n == i)
                return k;
            n++;
        }
    }
    return NULL;
}

sw_status sw_stream_keyword_get(const sw_stream *s, int32_t i, char name[17], char *type,
                                int64_t *iv, double *dv, char sv[17], char comment[81])
{
    if (!s)
        return sw_fail(NULL, SW_EINVAL, "sw_stream_keyword_get: NULL stream");
    const isio_kw *k = i >= 0 ? kw_used_at(s, i) : NULL;
    if (!k)
        return sw_fail(s->ctx, SW_ERANGE, "stream %s: no keyword %d (%d in use)", s->path, (int)i,
                       (int)keywords_used(s));
    isio_kw c;
    memcpy(&c, k, sizeof c);
    if (name) {
        memcpy(name, c.name, 16);
        name[16] = '\0';
    }
    if (type)
        *type = c.type;
    if (iv)
        *iv = c.type == 'L' ? c.value.numl : 0;
    if (dv)
        *dv = c.type == 'D' ? c.value.numf : 0.0;
    if (sv) {
        memset(sv, 0, 17);
        if (c.type == 'S')
            memcpy(sv, c.value.valstr, 16);
    }
    if (comment) {
        memcpy(comment, c.comment, 80);
        comment[80] = '\0';
    }
    return SW_OK;
}

int32_t sw_stream_keyword_find(const sw_stream *s, const char *name)
{
    if (!s || !name)
        return -1;
    int32_t n = 0;
    for (int32_t j = 0; j < (int32_t)s->md->NBkw; j++) {
        const isio_kw *k = kw_at(s, j);
        if (k->type == 'L' || k->type == 'D' || k->type == 'S') {
            if (strncmp(k->name, name, 16) == 0)
                return n;
            n++;
        }
    }
    return -1;
}
