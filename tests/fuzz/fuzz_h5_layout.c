/*
 * libFuzzer target: the parent's side of the HDF5 reader on its own: the walk's message as it
 * arrives from the child (h5_layout_unpack, which must refuse anything that does not hold
 * together) and, for a message it accepts, every frame of every block read from a file of the
 * input's remaining bytes through h5_read_plane (pread, chunk grids, the filter pipelines). The
 * fuzz_h5 targets reach this code only through what libhdf5 makes of a file, and the walk's own
 * coverage (in its child) is invisible to libFuzzer; here the layout itself is fuzzed.
 * Input: the message, split from the file bytes as fuzz_common.h says. Seeds: the walk's
 * messages for the HDF5 seeds with their files (make_seeds.c). Invariants: unpack gives SW_OK or
 * SW_EFORMAT / SW_ENOMEM with the layout emptied, and the modules it accepts lie inside the frames
 * without overlapping; reads (bitshuffle/LZ4 blocks on two threads) give 0 or -1 with a reason
 * and write nothing outside the plane (padding sentinel).
 */
#include "fuzz_common.h"
#include "io/hdf5_internal.h"

#include <fcntl.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    fuzz_split(data, size, 2, part, len);
    h5_layout l;
    sw_status st = h5_layout_unpack(part[0], len[0], &l);
    if (st != SW_OK) {
        if (l.nblocks != 0 || l.blocks || l.files || l.nfiles != 0)
            abort();
        if (st != SW_EFORMAT && st != SW_ENOMEM && st != SW_EIO && st != SW_EUNSUPPORTED &&
            st != SW_EINVAL)
            abort();
        if (l.msg[0] == '\0' && (st == SW_EFORMAT || st == SW_ENOMEM))
            abort();
        h5_layout_free(&l);
        return 0;
    }
    char path[1024];
    fuzz_file("data.bin", part[1], len[1], path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        abort();
    /* the modules accepted: inside the frames, apart, orientations of unit axes */
    for (uint32_t m = 0; m < l.nmodules; m++) {
        const sw_diffraction_module *md = &l.modules[m];
        if (md->x0 < 0 || md->y0 < 0 || md->width < 1 || md->height < 1 ||
            (uint64_t)md->x0 + (uint64_t)md->width > l.blocks[0].dims[2] ||
            (uint64_t)md->y0 + (uint64_t)md->height > l.blocks[0].dims[1])
            abort();
        for (uint32_t o = 0; o < m; o++) {
            const sw_diffraction_module *q = &l.modules[o];
            if (md->x0 < q->x0 + q->width && q->x0 < md->x0 + md->width &&
                md->y0 < q->y0 + q->height && q->y0 < md->y0 + md->height)
                abort();
        }
        if (md->orientation && !(md->pixel_x_mm > 0.0 && md->pixel_y_mm > 0.0))
            abort();
    }
    h5_scratch s = {NULL, NULL, 0, 0, 2}; /* bitshuffle/LZ4 blocks on two threads */
    uint8_t *cache = NULL;
    size_t cache_cap = 0;
    int64_t cache_id = -1;
    const h5_dset *owner = NULL;
    char why[SW_ERROR_MAX];
    for (uint32_t b = 0; b < l.nblocks + (l.mask_ok ? 1u : 0u); b++) {
        const h5_dset *d = b < l.nblocks ? &l.blocks[b] : &l.mask;
        if (d->layout == H5_LAYOUT_HDF5 || (d->layout == H5_LAYOUT_CHUNKED && !d->listed))
            continue; /* read through HDF5 */
        const size_t row = (size_t)d->dims[2] * d->esize, stride = row + 16;
        if ((uint64_t)stride * d->dims[1] > ((uint64_t)32 << 20))
            continue;
        uint8_t *plane = malloc(stride * (size_t)d->dims[1]);
        if (!plane)
            abort();
        h5_source src = {fd, l.files[d->file].size, NULL, NULL};
        for (uint64_t k = 0; k < d->dims[0] && k < 4; k++) {
            memset(plane, 0xC3, stride * (size_t)d->dims[1]);
            int rc = h5_read_plane(d, &src, (int64_t)k, plane, stride, &s, &cache, &cache_cap,
                                   &cache_id, &owner, why, sizeof why);
            if (rc != 0 && (rc != -1 || why[0] == '\0'))
                abort();
            for (uint64_t y = 0; y < d->dims[1]; y++)
                for (size_t i = row; i < stride; i++)
                    if (plane[(size_t)y * stride + i] != 0xC3)
                        abort();
        }
        free(plane);
    }
    free(cache);
    h5_scratch_free(&s);
    close(fd);
    h5_layout_free(&l);
    return 0;
}
