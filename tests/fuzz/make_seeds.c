/*
 * Writes the binary seed corpora of the HDF5 fuzz targets (tests/fuzz/README.md): every layout
 * spotwave's writer makes, small.
 *   corpus/h5/          one file each: compression none / deflate / bitshuffle-LZ4 (when the
 *                       plugin loads) x u8 / u16 / u32, one or several blocks, with and without
 *                       a pixel mask and an overload
 *   corpus/h5_linked/   a master and its data files, packed as fuzz_common.h's fuzz_split reads
 *   corpus/bitshuffle/  chunks from spotwave's encoder with fuzz_bitshuffle's 3-byte prefix
 *   corpus/h5_layout/   the walk's message for a file of corpus/h5, then that file
 * Usage: make_seeds <corpus folder>. Built with the fuzz targets (-DSW_FUZZ=ON); the seeds are
 * kept in git, so this only needs running when the writer's layouts change.
 */
#define _POSIX_C_SOURCE 200809L

#include "spotwave/spotwave.h"

#include "io/bitshuffle.h"
#include "io/hdf5_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned char *slurp(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        exit(1);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n + 1);
    if (!b || fread(b, 1, *n, f) != *n)
        exit(1);
    fclose(f);
    return b;
}

static void spit(const char *p, const void *b, size_t n)
{
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0)
        exit(1);
}

static void put_le32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    fwrite(b, 1, 4, f);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds <corpus folder>\n");
        return 2;
    }
    const char *root = argv[1];
    char dir[1024], path[1200], tmp[1200];
    const char *sub[3] = {"h5", "h5_linked", "bitshuffle"};
    for (int i = 0; i < 3; i++) {
        snprintf(dir, sizeof dir, "%s/%s", root, sub[i]);
        mkdir(dir, 0755);
    }
    char work[] = "/tmp/swseeds-XXXXXX";
    if (!mkdtemp(work))
        return 1;
    const sw_pixel_type types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32};
    const char *tname[3] = {"u8", "u16", "u32"};
    const sw_h5_compression comps[3] = {SW_H5_NONE, SW_H5_DEFLATE, SW_H5_BSLZ4};
    const char *cname[3] = {"none", "deflate", "bslz4"};
    const int bs = sw_h5_bitshuffle_available();
    int written = 0;
    for (int c = 0; c < 3; c++) {
        if (comps[c] == SW_H5_BSLZ4 && !bs) {
            fprintf(stderr, "make_seeds: no bitshuffle plugin: bslz4 seeds skipped\n");
            continue;
        }
        for (int t = 0; t < 3; t++)
            for (int v = 0; v < 2; v++) {
                /* v 0: 3 frames in one block; v 1: 3 frames in blocks of 2, mask, overload */
                const int w = 9, h = 5, n = 3;
                sw_image fr[3];
                for (int k = 0; k < n; k++) {
                    if (sw_image_alloc(NULL, w, h, types[t], &fr[k]) != SW_OK)
                        return 1;
                    const size_t ps = sw_pixel_size(types[t]);
                    for (int y = 0; y < h; y++)
                        for (int x = 0; x < w; x++) {
                            uint32_t val = (uint32_t)((x * 3 + y * 5 + k) % 7) +
                                           (x == 4 && y == 2 ? 200u : 0u);
                            uint8_t *p = (uint8_t *)sw_image_row(&fr[k], y) + (size_t)x * ps;
                            if (ps == 1)
                                *p = (uint8_t)val;
                            else if (ps == 2)
                                *(uint16_t *)(void *)p = (uint16_t)val;
                            else
                                *(uint32_t *)(void *)p = val;
                        }
                }
                uint8_t valid[45];
                for (int i = 0; i < w * h; i++)
                    valid[i] = i % 11 != 3;
                for (int linked = 0; linked < 2; linked++) {
                    snprintf(tmp, sizeof tmp, "%s/f_master.h5", work);
                    sw_status st = (linked ? sw_h5_write_linked : sw_h5_write)(
                        NULL, tmp, fr, n, v ? 2 : 0, comps[c], v ? valid : NULL, v ? 4000.0 : 0.0);
                    if (st != SW_OK) {
                        fprintf(stderr, "make_seeds: %s\n", sw_context_error(NULL));
                        return 1;
                    }
                    size_t mn;
                    unsigned char *m = slurp(tmp, &mn);
                    if (!linked) {
                        snprintf(path, sizeof path, "%s/h5/%s_%s_%s.h5", root, cname[c], tname[t],
                                 v ? "blocks_mask" : "one_block");
                        spit(path, m, mn);
                    } else {
                        snprintf(path, sizeof path, "%s/h5_linked/%s_%s_%s.bin", root, cname[c],
                                 tname[t], v ? "blocks_mask" : "one_block");
                        FILE *f = fopen(path, "wb");
                        if (!f)
                            return 1;
                        /* master, data 1, data 2 (each but the last length-prefixed), data 3 */
                        put_le32(f, (uint32_t)mn);
                        fwrite(m, 1, mn, f);
                        for (int b = 1; b <= 3; b++) {
                            size_t dn = 0;
                            unsigned char *d = NULL;
                            snprintf(tmp, sizeof tmp, "%s/f_data_%06d.h5", work, b);
                            if (access(tmp, F_OK) == 0) {
                                d = slurp(tmp, &dn);
                                unlink(tmp);
                            }
                            if (b < 3)
                                put_le32(f, (uint32_t)dn);
                            if (dn)
                                fwrite(d, 1, dn, f);
                            free(d);
                        }
                        fclose(f);
                    }
                    free(m);
                    snprintf(tmp, sizeof tmp, "%s/f_master.h5", work);
                    unlink(tmp);
                    written++;
                }
                for (int k = 0; k < n; k++)
                    sw_image_free(&fr[k]);
            }
    }
    /* chunks for the decoder alone: sizes with whole blocks, a short block and a tail */
    const size_t counts[4] = {1, 37, 700, 4103}, ess[3] = {1, 2, 4};
    for (int ci = 0; ci < 4; ci++)
        for (int ei = 0; ei < 3; ei++) {
            size_t es = ess[ei], size = counts[ci] * es;
            uint8_t *in = malloc(size);
            size_t cap = sw_bshuf_lz4_bound(size, es, 0);
            uint8_t *enc = malloc(cap + 3);
            if (!in || !enc)
                return 1;
            for (size_t i = 0; i < size; i++)
                in[i] = (uint8_t)(i % 13 == 0 ? i * 7 : i % 3);
            enc[0] = (uint8_t)(ei == 0 ? 0 : ei == 1 ? 1 : 2);
            enc[1] = (uint8_t)(counts[ci] & 0xFF);
            enc[2] = (uint8_t)(counts[ci] >> 8);
            size_t m = sw_bshuf_encode_lz4(in, size, enc + 3, cap, es, 0);
            if (m == 0)
                return 1;
            snprintf(path, sizeof path, "%s/bitshuffle/lz4_%zux%zu.bin", root, counts[ci], es);
            spit(path, enc, m + 3);
            free(in);
            free(enc);
        }
    /* the walk's messages for the single-file seeds, each with its file (fuzz_h5_layout) */
    snprintf(dir, sizeof dir, "%s/h5_layout", root);
    mkdir(dir, 0755);
    int layouts = 0;
    for (int c = 0; c < 3; c++)
        for (int t = 0; t < 3; t++) {
            snprintf(path, sizeof path, "%s/h5/%s_%s_blocks_mask.h5", root, cname[c], tname[t]);
            if (access(path, F_OK) != 0)
                continue;
            h5_walk_opts wo = {NULL, NULL, 0};
            h5_layout l;
            h5_walk(path, &wo, &l);
            size_t mn = 0, fn = 0;
            uint8_t *m = h5_layout_pack(&l, &mn);
            h5_layout_free(&l);
            unsigned char *fb = slurp(path, &fn);
            if (!m)
                return 1;
            snprintf(tmp, sizeof tmp, "%s/h5_layout/%s_%s.bin", root, cname[c], tname[t]);
            FILE *f = fopen(tmp, "wb");
            if (!f)
                return 1;
            put_le32(f, (uint32_t)mn);
            fwrite(m, 1, mn, f);
            fwrite(fb, 1, fn, f);
            fclose(f);
            free(m);
            free(fb);
            layouts++;
        }
    rmdir(work);
    printf("make_seeds: %d HDF5 seeds, 12 chunks and %d layouts written under %s\n", written,
           layouts, root);
    return 0;
}
