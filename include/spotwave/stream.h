/*
 * spotwave stream: shared-memory image streams in the layout of milk/CACAO's ImageStreamIO
 * (IMAGESTRUCT_VERSION "2.00"), so that spotwave sits between a camera process and a
 * deformable-mirror process on an adaptive-optics bench, and milk's tools (and ImageStreamIO's own
 * C and Python code) open the streams spotwave writes and the other way round.
 *
 * A stream is one file, <dir>/<name>.im.shm, mapped by every process that uses it:
 *   - the metadata (ImageStreamIO's IMAGE_METADATA, 384 bytes on x86-64 / aarch64 Linux):
 *     version, name, axes, data type, image type, timestamps, PIDs, counters cnt0 (frames written)
 *     and cnt1 (last slice written in circular mode), the write flag;
 *   - the data array (x fastest: pixel (x, y, z) at index (z * size[1] + y) * size[0] + x);
 *   - the keywords (name, type 'L' / 'D' / 'S', value, comment);
 *   - the semaphores, process-shared POSIX sem_t inside the file (no named semaphores), one per
 *     reader, and one more (ImageStreamIO's "semlog") posted once per frame;
 *   - per-semaphore reader and writer PIDs, control and status words (semReadPID, semWritePID,
 *     semctrl, semstatus), ImageStreamIO's process-trace entries;
 *   - in circular mode, per-slice acquisition times, write times and counters (atimearray,
 *     writetimearray, cntarray).
 * Each block starts on an 8-byte boundary, in that order; the file's size is their sum, and a
 * stream whose header disagrees with it is refused.
 *
 * Where streams live. dir == NULL: $MILK_SHM_DIR when it is set and names an existing directory,
 * else /milk/shm (ImageStreamIO's compiled-in SHAREDMEMDIR, a tmpfs on milk installations) when
 * it exists, else /tmp: ImageStreamIO's own order, so both find the same file. A given dir is used
 * as it is. On a bench, point MILK_SHM_DIR at a tmpfs (/dev/shm or /milk/shm): a stream on a disk
 * file system works but every page written may reach the disk.
 *
 * Files are created with mode 0666 less the process's umask (ImageStreamIO clears the umask and
 * makes them 0666): processes of other users open a stream only when the umask allows it.
 *
 * Clocks. Timestamps are the clock ImageStreamIO uses, CLOCK_TAI (CLOCK_REALTIME plus the
 * kernel's TAI offset, which is 0 unless an NTP or PTP daemon sets it), as seconds.
 *
 * Writer and readers. One writer per stream. A write sets the write flag, fills the data, stores
 * the circular-buffer slice counters, increments cnt0 (release), clears the flag and then posts
 * every semaphore whose value is below ImageStreamIO's SEMAPHORE_MAXVAL (10). A reader claims a
 * semaphore of its own, waits on it (or spins on cnt0) and copies the newest frame, retrying while
 * the write flag is set or cnt0 moved during the copy. Counters and flags are C11 atomics on the
 * mapping; this is correct between processes on one machine.
 *
 * Re-creation. sw_stream_create replaces an existing file by a new one (new inode), as
 * ImageStreamIO does: a process that had the old stream open keeps a valid mapping of the old,
 * now unlinked file and sees no more frames; sw_stream_stale tells it to open the stream again.
 * A stream opened while it is being created is refused (SW_EFORMAT: the file is still too short,
 * or its version string, written last, is still empty); open it again a moment later.
 *
 * Memory. A stream is mapped, not copied; sw_stream_read and sw_stream_write copy one frame. If
 * another process truncates the file under a mapping, touching it raises SIGBUS (as for any
 * shared mapping); the streams' own writers never truncate, they replace.
 */
#ifndef SPOTWAVE_STREAM_H
#define SPOTWAVE_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include "spotwave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ data types */

/* ImageStreamIO's _DATATYPE_ codes (the values are the file's). */
typedef enum sw_stream_type {
    SW_STREAM_U8 = 1,
    SW_STREAM_I8 = 2,
    SW_STREAM_U16 = 3,
    SW_STREAM_I16 = 4,
    SW_STREAM_U32 = 5,
    SW_STREAM_I32 = 6,
    SW_STREAM_U64 = 7,
    SW_STREAM_I64 = 8,
    SW_STREAM_F32 = 9,
    SW_STREAM_F64 = 10,
    SW_STREAM_CF32 = 11, /* complex: two f32 (re, im) */
    SW_STREAM_CF64 = 12, /* complex: two f64 (re, im) */
    SW_STREAM_F16 = 13   /* IEEE 754 half precision, stored as 16 bits */
} sw_stream_type;

/* Bytes per element (1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 2); 0 for an unknown type. */
size_t sw_stream_type_size(sw_stream_type t);
/* "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64", "cf32", "cf64", "f16";
 * "?" for an unknown type. */
const char *sw_stream_type_string(sw_stream_type t);
/* Parses the names above, NumPy's ("uint8", "int16", "float32", "float64", "complex64",
 * "complex128", "float16", ...) and ImageStreamIO's ("UINT8", "FLT32", "FLOAT", "DOUBLE",
 * "CPLX32", ...), case-insensitive. SW_EINVAL for anything else. */
sw_status sw_stream_type_parse(const char *text, sw_stream_type *out);
/* The stream type of a spotwave pixel type (u8, u16, u32, f32); 0 for an unknown one. */
sw_stream_type sw_stream_type_from_pixel(sw_pixel_type t);
/* The spotwave pixel type of a stream type; SW_EUNSUPPORTED (with a message) for the types
 * spotwave images do not have (signed, 64-bit, complex, half). */
sw_status sw_stream_type_to_pixel(sw_stream_type t, sw_pixel_type *out);

/* ------------------------------------------------------------------ create, open, close */

#define SW_STREAM_NAME_MAX 80 /* ImageStreamIO's STRINGMAXLEN_IMAGE_NAME, with the final '\0' */

typedef struct sw_stream_params {
    const char *name; /* stream name (file <dir>/<name>.im.shm): [A-Za-z0-9_.-], 1..79 chars,
                         not starting with '.' or '-'                                         */
    int32_t naxis;    /* 1..3                                                                 */
    uint32_t size[3]; /* size[0] = width (x, fastest), size[1] = height, size[2] = depth      */
    sw_stream_type type;
    int32_t semaphores; /* 0: ImageStreamIO's default (10); at most 1000                       */
    int32_t keywords;   /* keyword slots (0: none); at most 65535                              */
    int32_t circular;   /* 1: naxis 3 is a circular buffer of size[2] slices (ImageStreamIO's
                           CIRCULAR_BUFFER | ZAXIS_TEMPORAL): each write fills the next slice and
                           cnt1 is the last slice written                                       */
} sw_stream_params;

/* naxis 2, 1 x 1, f32, semaphores 0 (ten), keywords 0, not circular, name NULL. */
void sw_stream_params_default(sw_stream_params *p);

typedef struct sw_stream sw_stream;

/* Resolves the stream directory as described above (dir given: dir itself) into buf, without a
 * trailing slash. SW_EINVAL when it does not fit. */
sw_status sw_stream_dir(sw_context *ctx, const char *dir, char *buf, size_t size);

/* Creates the stream (replacing any file of that name: see "Re-creation" above), zero-filled,
 * cnt0 = cnt1 = 0, every keyword slot unused, and maps it. SW_EINVAL for a bad name or
 * parameters, SW_EIO when the file cannot be made (the message names it and says why),
 * SW_ENOMEM above the context's memory limit. */
sw_status sw_stream_create(sw_context *ctx, const char *dir, const sw_stream_params *p,
                           sw_stream **out);
/* Opens and maps an existing stream. The header is checked: the version string ("2.00"), naxis
 * 1..3, each used axis >= 1, the data type, nelement = the product of the axes, the data's byte
 * size, a CPU-memory stream (location -1; GPU streams are SW_EUNSUPPORTED), the semaphore,
 * keyword and process-trace counts, and the total size against the file's size. A header that
 * does not check out is SW_EFORMAT with a message naming the field; a missing file SW_EIO. */
sw_status sw_stream_open(sw_context *ctx, const char *dir, const char *name, sw_stream **out);
/* Unmaps (NULL is ignored). Does not remove the file; releases no semaphore (see below). */
void sw_stream_close(sw_stream *s);
/* Removes <dir>/<name>.im.shm. SW_EIO when it does not exist or cannot be removed. Processes
 * that have it open keep their (now unlinked) mapping. */
sw_status sw_stream_remove(sw_context *ctx, const char *dir, const char *name);
/* The file's path. */
const char *sw_stream_path(const sw_stream *s);
/* 1 when the file at sw_stream_path is no longer the one mapped (removed or re-created since
 * this process opened it: open it again), 0 when it still is. */
int sw_stream_stale(const sw_stream *s);

typedef struct sw_stream_info {
    char name[SW_STREAM_NAME_MAX];
    int32_t naxis;
    uint32_t size[3];
    sw_stream_type type;
    int32_t semaphores;
    int32_t keywords; /* slots */
    int32_t circular;
    uint64_t cnt0, cnt1;
    int write_flag;
    double creation_time, write_time, access_time; /* seconds on the streams' clock (CLOCK_TAI) */
    int32_t owner_pid;  /* ImageStreamIO's ownerPID (0: unset); creator_pid below */
    size_t frame_bytes; /* the bytes of one write: the whole array, or one slice in circular mode */
    /* additions to the brief's struct */
    int32_t creator_pid;
    uint64_t image_type;   /* ImageStreamIO's imagetype bits (CIRCULAR_BUFFER 0x1, ...) */
    double acquire_time;   /* ImageStreamIO's atime */
    uint64_t file_bytes;   /* size of the file */
    int32_t keywords_used; /* slots in use */
} sw_stream_info;

/* A snapshot of the header (fields read one by one: counters may move between them). */
sw_status sw_stream_get_info(const sw_stream *s, sw_stream_info *out);

/* The data array in the mapping (slice 0). */
void *sw_stream_data(sw_stream *s);
/* Slice z of a 3-axis stream (z < size[2]); NULL when out of range. Slice 0 of others. */
void *sw_stream_slice(sw_stream *s, uint32_t z);
/* Wraps slice z (of a 2-axis stream: z = 0) as a host sw_image view (owned = 0) when the type is
 * a spotwave pixel type (SW_EUNSUPPORTED otherwise). A 1-axis stream is one row. */
sw_status sw_stream_wrap_image(sw_stream *s, uint32_t z, sw_image *out);
/* Atomic (acquire) load of cnt0, the number of frames written. */
uint64_t sw_stream_cnt0(const sw_stream *s);
/* Atomic (acquire) load of cnt1 (circular mode: the last slice written). */
uint64_t sw_stream_cnt1(const sw_stream *s);
/* Seconds on the streams' clock now (CLOCK_TAI), to compare with the info's times. */
double sw_stream_clock_now(void);

/* ------------------------------------------------------------------ writer */

/* Copies `bytes` (= the info's frame_bytes) into the stream and publishes it: write flag set,
 * memcpy (circular: into slice (cnt1 + 1) % depth, then cnt1, cntarray, atimearray and
 * writetimearray of that slice), writetime and atime, cnt0 + 1 (release), write flag cleared,
 * then every semaphore posted (each capped at 10, as ImageStreamIO) and the log semaphore.
 * SW_EINVAL for a wrong size or while a sw_stream_write_begin is open. */
sw_status sw_stream_write(sw_stream *s, const void *data, size_t bytes);
/* Zero-copy writer: begin sets the write flag and gives the slot to fill (the array, or the next
 * slice in circular mode); end publishes it as sw_stream_write does. */
sw_status sw_stream_write_begin(sw_stream *s, void **slot);
sw_status sw_stream_write_end(sw_stream *s);

/* ------------------------------------------------------------------ readers */

typedef enum sw_stream_wait_mode {
    SW_STREAM_WAIT_SEM = 0, /* sleep on the reader's semaphore                      */
    SW_STREAM_WAIT_SPIN = 1 /* poll cnt0 with a pause instruction (a core of its own) */
} sw_stream_wait_mode;

/* Claims a semaphore for this reader: the first whose semReadPID is 0, -1 (ImageStreamIO's
 * "free") or a process that no longer exists, taken with an atomic compare-and-swap so that two
 * readers never get the same one, and marked with this process's PID. *index = -1 and SW_ERANGE
 * when all are held. Unlike ImageStreamIO's getsemwaitindex, a second claim from the same
 * process gets another semaphore (two readers in one process do not share). */
sw_status sw_stream_claim_semaphore(sw_stream *s, int32_t *index);
/* Gives the semaphore back (semReadPID = -1) if this process holds it. */
void sw_stream_release_semaphore(sw_stream *s, int32_t index);
/* Semaphores held by live readers (semReadPID naming a running process): a writer can wait for
 * its readers to be there before it starts. */
int32_t sw_stream_readers(const sw_stream *s);
/* Drains the semaphore (sem_trywait until it would block): before a loop starts, so that posts
 * of old frames do not wake it. */
void sw_stream_flush_semaphore(sw_stream *s, int32_t index);

/* The semaphore's value (posts not yet waited for, at most 10); -1 for a bad index. */
int32_t sw_stream_semaphore_value(const sw_stream *s, int32_t index);

/*
 * Waits until cnt0 > after. SEM: sem_clockwait on semaphore `index` (CLOCK_MONOTONIC), then cnt0
 * is checked again (a post of an older frame does not end the wait); SPIN: cnt0 is polled (index
 * is not used). timeout_s < 0: no limit; 0: one check; > 0: seconds. With stop != NULL the wait
 * sleeps at most 50 ms at a time and returns SW_ECANCELED as soon as *stop is nonzero (set it from
 * a SIGINT handler). EINTR is retried. SW_OK with *cnt0 (optional) set to the counter seen;
 * SW_ETIMEDOUT when the time ran out; SW_EINVAL for a bad index in SEM mode.
 */
sw_status sw_stream_wait(sw_stream *s, sw_stream_wait_mode mode, int32_t index, uint64_t after,
                         double timeout_s, const volatile int *stop, uint64_t *cnt0);

/* A consistent copy of the newest frame (circular mode: of slice cnt1) into dst (bytes =
 * frame_bytes): retried while the write flag is set or cnt0 changed during the copy. *cnt0
 * (optional) is the counter of the frame copied. SW_EIO when the write flag stays set for a second
 * (a writer that died mid-frame). */
sw_status sw_stream_read(sw_stream *s, void *dst, size_t bytes, uint64_t *cnt0);

/* ------------------------------------------------------------------ keywords */

/* ImageStreamIO's IMAGE_KEYWORD: name (1..15 characters here), type 'L' (int64), 'D' (double) or
 * 'S' (a string of up to 15 characters), comment (up to 79 characters; NULL = ""). Setting a name
 * already present overwrites it (and its type), else the first unused slot is taken; SW_ERANGE
 * when none is left, SW_EINVAL for a name, string or comment too long. Keywords are not guarded
 * against a reader reading while they are written: set them between frames. */
sw_status sw_stream_keyword_set_int(sw_stream *s, const char *name, int64_t v, const char *comment);
sw_status sw_stream_keyword_set_double(sw_stream *s, const char *name, double v,
                                       const char *comment);
sw_status sw_stream_keyword_set_string(sw_stream *s, const char *name, const char *v,
                                       const char *comment);
/* Keyword slots in use (type 'L', 'D' or 'S'). */
int32_t sw_stream_keyword_count(const sw_stream *s);
/* The i-th keyword in use (0 <= i < sw_stream_keyword_count), in slot order. Any output may be
 * NULL; of iv / dv / sv only the one of its type is set (the others zeroed). SW_ERANGE for a bad i.
 */
sw_status sw_stream_keyword_get(const sw_stream *s, int32_t i, char name[17], char *type,
                                int64_t *iv, double *dv, char sv[17], char comment[81]);
/* Index (for sw_stream_keyword_get) of the keyword called name, or -1. */
int32_t sw_stream_keyword_find(const sw_stream *s, const char *name);

#ifdef __cplusplus
}
#endif

#endif
