/*
 * Internals of the HDF5 reader (io.h, "HDF5 (Eiger / NeXus)"), shared by
 *   hdf5.c         the public functions: options, the reader, the writer
 *   hdf5_walk.c    the walk over the file's structure, which may run in a child process, and the
 *                  message it sends back (every size in it checked again on arrival)
 *   hdf5_chunks.c  reading and decoding stored chunks without HDF5 (deflate, shuffle,
 *                  bitshuffle and bitshuffle/LZ4), every size checked before it is used
 *
 * Why a child: Debian's libhdf5 (1.10.8) reads its own metadata (B-trees, heaps, object headers)
 * with too few checks, and one flipped byte in a file can make it read outside its buffers and
 * die (found with a fuzzer: a segmentation fault inside H5Lexists), or loop. Nothing outside the
 * library can check those structures first, so every call that walks them runs in a forked child;
 * a crash or a hang there becomes SW_EFORMAT with a message. What the walk finds (datasets,
 * shapes, types, filters, the address and size of every chunk) comes back as plain numbers, and
 * the frames are then read with pread and decoded here: the parent calls HDF5 only for the
 * layouts it does not decode itself (the "fallback": compact datasets, other filters, virtual
 * datasets).
 */
#ifndef SW_IO_HDF5_INTERNAL_H
#define SW_IO_HDF5_INTERNAL_H

#include "io/io_internal.h"

#include <hdf5.h>

#define H5_PATH_MAX        1024                /* paths inside a file                            */
#define H5_FILE_MAX        4096                /* file names (the master's, a data file's)       */
#define H5_ADDR_NONE       UINT64_MAX          /* a chunk (or contiguous data) never written */
#define H5_MAX_FILTERS     4                   /* filters in a pipeline decoded here */
#define H5_MAX_CHUNK_BYTES ((uint64_t)1 << 28) /* a chunk's decoded size, at most */
#define H5_MAX_CHUNKS      ((uint64_t)1 << 24) /* chunks listed in one open, at most */
/* Chunks of one dataset listed by the walk, at most: HDF5 1.10's H5Dget_chunk_info_by_coord
 * walks the whole chunk index for every call (20000 chunks take 1.6 s), so a dataset with more
 * chunks has its index walked once in the child (H5Dget_num_chunks) and its chunks looked up
 * when read (H5Dget_chunk_storage_size, H5Dread_chunk: one B-tree descent each), here. */
#define H5_LIST_MAX       4096
#define H5_MAX_BLOCKS     999999
#define H5_MAX_MODULES    1024 /* NXdetector_module groups read, at most             */
#define H5_MAX_LINKS_SEEN 4096 /* links of the detector group looked at for them      */
#define H5_MAX_FILES      (H5_MAX_BLOCKS + 1)

#define H5_FILTER_DEFLATE 1
#define H5_FILTER_SHUFFLE 2
#define H5_FILTER_BSHUF   32008
#define H5_BSHUF_LZ4      2 /* bitshuffle's cd_values[4]: LZ4 after the shuffle */

#define PATH_ENTRY      "/entry"
#define PATH_DATA       "/entry/data"
#define PATH_INSTRUMENT "/entry/instrument"
#define PATH_DETECTOR   "/entry/instrument/detector"
#define PATH_SPECIFIC   "/entry/instrument/detector/detectorSpecific"
#define PATH_MASK       PATH_SPECIFIC "/pixel_mask"
#define PATH_CUTOFF     PATH_SPECIFIC "/countrate_correction_count_cutoff"
#define PATH_SATURATION PATH_DETECTOR "/saturation_value"
/* NXmx geometry (Bernstein et al. 2020, IUCrJ 7, 784-792) */
#define PATH_WAVELENGTH PATH_INSTRUMENT "/beam/incident_wavelength"
#define PATH_DISTANCE   PATH_DETECTOR "/detector_distance"
#define PATH_BEAM_X     PATH_DETECTOR "/beam_center_x"
#define PATH_BEAM_Y     PATH_DETECTOR "/beam_center_y"
#define PATH_PIXEL_X    PATH_DETECTOR "/x_pixel_size"
#define PATH_PIXEL_Y    PATH_DETECTOR "/y_pixel_size"
#define PATH_COUNT_TIME PATH_DETECTOR "/count_time"

/* How a dataset's values are read. */
enum {
    H5_LAYOUT_CONTIG = 0,  /* one contiguous run of raw values: pread                  */
    H5_LAYOUT_CHUNKED = 1, /* chunks with filters decoded here: pread and decode        */
    H5_LAYOUT_HDF5 = 2     /* anything else: H5Dread in this process (the fallback)     */
};

typedef struct h5_filter {
    uint32_t id, ncd, cd[5];
} h5_filter;

typedef struct h5_chunk {
    uint64_t addr, size; /* H5_ADDR_NONE and 0: never written (fill value) */
    uint32_t mask;       /* bit i set: filter i was skipped for this chunk */
} h5_chunk;

/* A file the datasets live in: its path as opened, and what it was when the walk saw it. */
typedef struct h5_file {
    char *path;
    uint64_t dev, ino, size;
    hid_t h5; /* fallback reads only: opened on first use */
} h5_file;

/* A dataset of frames (or the pixel mask), as the walk found it. Shapes are [frames, height,
 * width]; a rank-2 dataset is one frame. */
typedef struct h5_dset {
    char *name;        /* as the caller or the layout names it, for messages                */
    char *obj;         /* its path inside files[file]                                       */
    uint32_t file;     /* index into the reader's files                                     */
    uint32_t rank;     /* 2 or 3                                                            */
    uint64_t dims[3];  /* [frames, height, width]                                           */
    uint32_t esize;    /* bytes per value                                                   */
    uint32_t swap;     /* stored in the other byte order                                    */
    uint32_t layout;   /* H5_LAYOUT_*                                                       */
    uint32_t filtered; /* goes through any filter                                           */
    uint8_t fill[8];   /* the fill value as stored (esize bytes), for chunks never written  */
    uint64_t addr;     /* contiguous: the file offset of the first value                    */
    uint64_t cdim[3];  /* chunked: the chunk shape as [frames, height, width]               */
    uint64_t grid[3];  /* chunks along each dimension                                       */
    uint32_t nfilters; /* chunked: the pipeline, in the order it was applied when writing   */
    h5_filter filters[H5_MAX_FILTERS];
    uint32_t listed;  /* chunked: 1 when chunks[] lists them all; 0: looked up when read     */
    h5_chunk *chunks; /* grid[0] * grid[1] * grid[2], row-major (when listed)              */
    int64_t first;    /* frames: index of its first frame across the blocks                */
    hid_t hd;         /* fallback reads only: opened on first use                          */
} h5_dset;

/* The walk's result (also what a failure says, in st and msg). */
typedef struct h5_layout {
    sw_status st;
    char msg[SW_ERROR_MAX];
    h5_file *files;
    uint32_t nfiles;
    h5_dset *blocks;
    uint32_t nblocks;
    int has_mask;                /* the mask dataset exists                                     */
    int mask_ok;                 /* ... and has the frames' shape and an integer type            */
    h5_dset mask;                /* when mask_ok                                                 */
    char mask_msg[SW_ERROR_MAX]; /* why not, when has_mask && !mask_ok            */
    double overload;
    sw_diffraction_geometry geom;   /* the NXmx fields found (have bits)                       */
    sw_diffraction_module *modules; /* the detector's NXdetector_module groups (malloc'ed)    */
    uint32_t nmodules;
    char **warnings;
    uint32_t nwarnings;
} h5_layout;

/* Options as sw_h5_open_ex takes them, after defaults. */
typedef struct h5_walk_opts {
    const char *dataset;   /* NULL: automatic          */
    const char *link_dirs; /* NULL or "a:b"            */
    int links_anywhere;
} h5_walk_opts;

/* The walk over path's structure, in this process: fills *out (free with h5_layout_free). */
void h5_walk(const char *path, const h5_walk_opts *o, h5_layout *out);
/* Serialises a layout into a malloc'ed message (*size bytes), or NULL when out of memory. */
uint8_t *h5_layout_pack(const h5_layout *l, size_t *size);
/* Reads a message back into *out, checking every count and size against each other and against
 * the files' sizes; SW_EFORMAT with the reason in out->msg when it does not hold together. */
sw_status h5_layout_unpack(const uint8_t *buf, size_t size, h5_layout *out);
void h5_layout_free(h5_layout *l);
void h5_dset_free(h5_dset *d);

/* Bytes of one decoded chunk of d. */
static inline uint64_t h5_chunk_bytes(const h5_dset *d)
{
    return d->cdim[0] * d->cdim[1] * d->cdim[2] * d->esize;
}

/* Scratch buffers for decoding, reused across calls, and the threads that may decode one chunk
 * (bitshuffle/LZ4 blocks in parallel; 0 or 1: this thread alone). */
typedef struct h5_scratch {
    uint8_t *raw, *work;
    size_t raw_cap, work_cap;
    int threads;
} h5_scratch;
void h5_scratch_free(h5_scratch *s);
/* Makes s->raw hold at least n bytes: 0, or -1 out of memory. */
int h5_scratch_raw(h5_scratch *s, size_t n);

/*
 * Decodes the stored chunk (stored bytes in in) of d through its pipeline, skipping the filters
 * masked off, into out (h5_chunk_bytes(d) bytes). 0, or -1 with the reason in why.
 */
int h5_decode_chunk(const h5_dset *d, const uint8_t *in, size_t in_size, uint32_t mask,
                    uint8_t *out, h5_scratch *s, char *why, size_t why_size);

/* Where stored chunks come from: pread on fd (contiguous data, listed chunks), or fetch (chunks
 * looked up when read): fetch puts chunk ci's stored bytes in s->raw (*size of them, its filter
 * mask in *mask), or sets *absent for a chunk never written; 0, or -1 with the reason. */
typedef struct h5_source {
    int fd;
    uint64_t file_size;
    int (*fetch)(void *user, uint64_t ci, h5_scratch *s, size_t *size, uint32_t *mask, int *absent,
                 char *why, size_t why_size);
    void *user;
} h5_source;

/*
 * Reads plane k (0-based frame within d) into dst: height rows of width values of d->esize bytes
 * each, rows dst_stride bytes apart, values as stored (byte order not yet swapped). Chunks that
 * cover several frames are decoded once and kept in *cache (*cache_id and *cache_owner say
 * which: pass one cache per reader, -1 and NULL initially).
 */
int h5_read_plane(const h5_dset *d, const h5_source *src, int64_t k, uint8_t *dst,
                  size_t dst_stride, h5_scratch *s, uint8_t **cache, size_t *cache_cap,
                  int64_t *cache_id, const h5_dset **cache_owner, char *why, size_t why_size);

/* The largest stored size accepted for a chunk of d (its decoded size and room for any filter's
 * growth): beyond it the chunk is corrupt. */
static inline uint64_t h5_chunk_stored_max(const h5_dset *d)
{
    const uint64_t b = h5_chunk_bytes(d);
    return b + b / 4 + ((uint64_t)1 << 20);
}

#endif /* SW_IO_HDF5_INTERNAL_H */
