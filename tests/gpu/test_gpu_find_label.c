/*
 * Connected components, component tables and 3-D links of the find stage on the GPU
 * (find_label_cuda.cu) against the CPU's (find_label.c), one plan per backend:
 *   - labels identical, pixel for pixel (both name a component by its smallest linear index);
 *   - component tables equal: roots, npix, bounding boxes and peaks exactly, the moment sums to
 *     1e-9 relative (the GPU adds with atomics in any order);
 *   - links between two frames equal, pair for pair;
 * on random masks (independent pixels from 1 % to 90 %, the 60 % one percolating, and random
 * discs), 4- and 8-connectivity, frames of 1037 x 771, 4148 x 64, single rows and columns, and u8,
 * u16, u32 and f32 values; on drawn masks against the labels drawn with them; and more
 * components than the table holds (the call's capacity or the plan's max_components): SW_ERANGE
 * from both, the labels still equal. Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "find/find_internal.h"

#include <stdlib.h>
#include <string.h>

#ifdef SW_HAVE_CUDA

#include <cuda_runtime_api.h>

static sw_context *gpu;
static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

/* ------------------------------------------------------------------ helpers */

#define CU_OK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            fail_msg("%s: %s", #call, cudaGetErrorString(e_));                                     \
    } while (0)

/* splitmix64 */
static uint64_t rnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rnd_u01(uint64_t *s)
{
    return (double)(rnd_next(s) >> 11) * 0x1.0p-53;
}

static sw_find_plan *make_plan(sw_context *ctx, int32_t w, int32_t h, sw_pixel_type t, int conn,
                               int32_t max_components)
{
    sw_find_params p;
    sw_find_params_default(&p, w, h, t);
    p.connectivity = conn;
    p.max_components = max_components;
    sw_find_plan *plan = NULL;
    if (sw_find_create(ctx, &p, &plan) != SW_OK)
        fail_msg("sw_find_create %d x %d on %s: %s", w, h,
                 sw_backend_string(sw_context_backend(ctx)), sw_context_error(ctx));
    return plan;
}

/* Everything one size needs on both sides. */
typedef struct rig {
    int32_t w, h;
    int64_t np, cap;
    sw_find_plan *pc, *pg;  /* CPU and GPU plans */
    sw_image frame, dframe; /* host and device copies of the values */
    uint8_t *d_strong;
    int32_t *d_labels[2];
    int32_t *lc[2], *lg[2]; /* host labels from the CPU and from the GPU */
    sw_find_comp *cc, *cg;
    int32_t *pairs_c, *pairs_g;
} rig;

static void rig_open(rig *r, int32_t w, int32_t h, sw_pixel_type t, int conn, int32_t maxc,
                     uint64_t seed)
{
    memset(r, 0, sizeof(*r));
    r->w = w;
    r->h = h;
    r->np = (int64_t)w * h;
    r->cap = maxc;
    r->pc = make_plan(cpu, w, h, t, conn, maxc);
    r->pg = make_plan(gpu, w, h, t, conn, maxc);
    r->frame = sw_test_random_image(w, h, t, seed);
    if (t == SW_PIX_F32) /* counts of 0 .. 1e6 with fractions (f32 frames are rounded) */
        for (int32_t y = 0; y < h; y++)
            for (int32_t x = 0; x < w; x++) {
                float *v = (float *)sw_image_row(&r->frame, y) + x;
                *v = fabsf(*v) * 100.0f;
            }
    assert_int_equal(sw_image_alloc_device(gpu, w, h, t, &r->dframe), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &r->frame, &r->dframe), SW_OK);
    CU_OK(cudaMalloc((void **)&r->d_strong, (size_t)r->np));
    for (int k = 0; k < 2; k++) {
        CU_OK(cudaMalloc((void **)&r->d_labels[k], (size_t)r->np * sizeof(int32_t)));
        r->lc[k] = malloc((size_t)r->np * sizeof(int32_t));
        r->lg[k] = malloc((size_t)r->np * sizeof(int32_t));
        assert_true(r->lc[k] && r->lg[k]);
    }
    r->cc = malloc((size_t)maxc * sizeof(sw_find_comp));
    r->cg = malloc((size_t)maxc * sizeof(sw_find_comp));
    r->pairs_c = malloc((size_t)r->np * 2 * sizeof(int32_t));
    r->pairs_g = malloc((size_t)r->np * 2 * sizeof(int32_t));
    assert_true(r->cc && r->cg && r->pairs_c && r->pairs_g);
}

static void rig_close(rig *r)
{
    sw_find_destroy(r->pc);
    sw_find_destroy(r->pg);
    sw_image_free(&r->frame);
    sw_image_free(&r->dframe);
    cudaFree(r->d_strong);
    for (int k = 0; k < 2; k++) {
        cudaFree(r->d_labels[k]);
        free(r->lc[k]);
        free(r->lg[k]);
    }
    free(r->cc);
    free(r->cg);
    free(r->pairs_c);
    free(r->pairs_g);
}

static void near_rel(const char *what, int64_t k, double a, double b, double scale)
{
    if (!(fabs(a - b) <= 1e-9 * scale + 1e-300))
        fail_msg("component %lld: %s %.17g (CPU) vs %.17g (GPU)", (long long)k, what, a, b);
}

/* Labels the mask into slot k on both backends (capacity cap) and checks that they agree.
 * Returns the status (the same from both). */
static sw_status label_both(rig *r, const uint8_t *strong, int k, int64_t cap, const char *what)
{
    int64_t nc = -1, ng = -1;
    sw_status sc = sw_find_label_cpu(r->pc, strong, &r->frame, r->lc[k], r->cc, cap, &nc);
    CU_OK(cudaMemcpy(r->d_strong, strong, (size_t)r->np, cudaMemcpyHostToDevice));
    CU_OK(cudaDeviceSynchronize());
    sw_status sg = sw_find_label_gpu(r->pg, r->d_strong, &r->dframe, r->d_labels[k], r->cg, cap,
                                     &ng, sw_context_stream(gpu));
    if (sc != sg)
        fail_msg("%s: CPU says %s (%s), GPU says %s (%s)", what, sw_status_string(sc),
                 sw_context_error(cpu), sw_status_string(sg), sw_context_error(gpu));
    if (sg != SW_OK && sg != SW_ERANGE)
        fail_msg("%s: %s", what, sw_context_error(gpu));
    CU_OK(cudaMemcpy(r->lg[k], r->d_labels[k], (size_t)r->np * sizeof(int32_t),
                     cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < r->np; i++)
        if (r->lc[k][i] != r->lg[k][i])
            fail_msg("%s: pixel (%lld, %lld): CPU label %d, GPU label %d", what,
                     (long long)(i % r->w), (long long)(i / r->w), r->lc[k][i], r->lg[k][i]);
    if (sc != SW_OK)
        return sc;
    if (nc != ng)
        fail_msg("%s: %lld components on the CPU, %lld on the GPU", what, (long long)nc,
                 (long long)ng);
    for (int64_t j = 0; j < nc; j++) {
        const sw_find_comp *a = &r->cc[j], *b = &r->cg[j];
        if (a->root != b->root || a->npix != b->npix || a->x0 != b->x0 || a->x1 != b->x1 ||
            a->y0 != b->y0 || a->y1 != b->y1 || a->peak != b->peak || a->peak_x != b->peak_x ||
            a->peak_y != b->peak_y)
            fail_msg("%s: component %lld: CPU root %lld npix %lld bbox [%d,%d)x[%d,%d) peak %u "
                     "(%d,%d); GPU root %lld npix %lld bbox [%d,%d)x[%d,%d) peak %u (%d,%d)",
                     what, (long long)j, (long long)a->root, (long long)a->npix, a->x0, a->x1,
                     a->y0, a->y1, a->peak, a->peak_x, a->peak_y, (long long)b->root,
                     (long long)b->npix, b->x0, b->x1, b->y0, b->y1, b->peak, b->peak_x, b->peak_y);
        /* the first moments' terms are bounded by sqrt(sum I * sum I d^2) (Cauchy-Schwarz) */
        near_rel("sum_i", j, a->sum_i, b->sum_i, fabs(a->sum_i));
        near_rel("sum_ixx", j, a->sum_ixx, b->sum_ixx, fabs(a->sum_ixx));
        near_rel("sum_iyy", j, a->sum_iyy, b->sum_iyy, fabs(a->sum_iyy));
        near_rel("sum_ix", j, a->sum_ix, b->sum_ix, sqrt(fabs(a->sum_i * a->sum_ixx)));
        near_rel("sum_iy", j, a->sum_iy, b->sum_iy, sqrt(fabs(a->sum_i * a->sum_iyy)));
    }
    return SW_OK;
}

/* Links between slots 0 and 1 on both backends. */
static void links_both(rig *r, const char *what)
{
    int64_t nc = -1, ng = -1;
    if (sw_find_links_cpu(r->pc, r->lc[0], r->lc[1], r->pairs_c, r->np, &nc) != SW_OK)
        fail_msg("%s: CPU links: %s", what, sw_context_error(cpu));
    if (sw_find_links_gpu(r->pg, r->d_labels[0], r->d_labels[1], r->pairs_g, r->np, &ng,
                          sw_context_stream(gpu)) != SW_OK)
        fail_msg("%s: GPU links: %s", what, sw_context_error(gpu));
    if (nc != ng)
        fail_msg("%s: %lld links on the CPU, %lld on the GPU", what, (long long)nc, (long long)ng);
    for (int64_t k = 0; k < nc; k++)
        if (r->pairs_c[2 * k] != r->pairs_g[2 * k] ||
            r->pairs_c[2 * k + 1] != r->pairs_g[2 * k + 1])
            fail_msg("%s: link %lld: CPU (%d, %d), GPU (%d, %d)", what, (long long)k,
                     r->pairs_c[2 * k], r->pairs_c[2 * k + 1], r->pairs_g[2 * k],
                     r->pairs_g[2 * k + 1]);
    /* one pair less room: SW_ERANGE from both */
    if (nc > 0) {
        int64_t n;
        assert_int_equal(sw_find_links_cpu(r->pc, r->lc[0], r->lc[1], r->pairs_c, nc - 1, &n),
                         SW_ERANGE);
        assert_int_equal(sw_find_links_gpu(r->pg, r->d_labels[0], r->d_labels[1], r->pairs_g,
                                           nc - 1, &n, sw_context_stream(gpu)),
                         SW_ERANGE);
    }
}

static void random_mask(uint64_t *rs, uint8_t *s, int32_t w, int32_t h, double density, int blobs)
{
    const int64_t np = (int64_t)w * h;
    if (!blobs) {
        for (int64_t i = 0; i < np; i++)
            s[i] = rnd_u01(rs) < density;
        return;
    }
    /* discs of radius 0.5 .. 8 px until the density is about reached */
    memset(s, 0, (size_t)np);
    int64_t on = 0;
    for (int k = 0; k < 1000000 && on < density * (double)np; k++) {
        const double cx = rnd_u01(rs) * w, cy = rnd_u01(rs) * h, r = 0.5 + 7.5 * rnd_u01(rs);
        for (int32_t y = (int32_t)(cy - r - 1); y <= (int32_t)(cy + r + 1); y++)
            for (int32_t x = (int32_t)(cx - r - 1); x <= (int32_t)(cx + r + 1); x++)
                if (x >= 0 && x < w && y >= 0 && y < h &&
                    (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r && !s[y * w + x]) {
                    s[y * w + x] = 1;
                    on++;
                }
    }
}

/* ------------------------------------------------------------------ random masks */

static void run_random(int32_t w, int32_t h, sw_pixel_type t, uint64_t seed)
{
    static const double dens[] = {0.01, 0.1, 0.3, 0.5, 0.6, 0.9};
    const int64_t np = (int64_t)w * h;
    uint8_t *s0 = malloc((size_t)np), *s1 = malloc((size_t)np);
    assert_true(s0 && s1);
    uint64_t rs = seed;
    for (int conn = 4; conn <= 8; conn += 4) {
        rig r;
        rig_open(&r, w, h, t, conn, (int32_t)(np / 2 + 2), seed);
        for (size_t di = 0; di < sizeof(dens) / sizeof(dens[0]); di++)
            for (int blobs = 0; blobs <= 1; blobs++) {
                char what[160];
                snprintf(what, sizeof(what), "%d x %d %s, %d-connectivity, density %.2f%s", w, h,
                         sw_pixel_type_string(t), conn, dens[di], blobs ? " (discs)" : "");
                random_mask(&rs, s0, w, h, dens[di], blobs);
                /* the second frame: the first one shifted by a pixel, with some pixels flipped */
                for (int64_t i = 0; i < np; i++) {
                    s1[i] = (i % w) > 0 ? s0[i - 1] : 0;
                    if (rnd_u01(&rs) < 0.05)
                        s1[i] ^= 1;
                }
                assert_int_equal(label_both(&r, s0, 0, r.cap, what), SW_OK);
                assert_int_equal(label_both(&r, s1, 1, r.cap, what), SW_OK);
                links_both(&r, what);
            }
        rig_close(&r);
    }
    free(s0);
    free(s1);
}

static void test_random_1037x771(void **state)
{
    (void)state;
    run_random(1037, 771, SW_PIX_U16, 1);
}

static void test_random_4148x64(void **state)
{
    (void)state;
    run_random(4148, 64, SW_PIX_U16, 2);
}

static void test_random_shapes_and_types(void **state)
{
    (void)state;
    run_random(1, 700, SW_PIX_U16, 3);
    run_random(700, 1, SW_PIX_U16, 4);
    run_random(3, 3, SW_PIX_U8, 5);
    run_random(65, 129, SW_PIX_U8, 6);
    run_random(200, 150, SW_PIX_U32, 7);
    run_random(201, 151, SW_PIX_F32, 8);
}

/* ------------------------------------------------------------------ drawn masks */

/* '.' background; any other character names a component whose root is its first pixel. */
static void check_drawn(const char *const *rows, int32_t h, int conn)
{
    const int32_t w = (int32_t)strlen(rows[0]);
    const int64_t np = (int64_t)w * h;
    uint8_t *s = malloc((size_t)np);
    int32_t *expect = malloc((size_t)np * sizeof(int32_t));
    assert_true(s && expect);
    int32_t first[256];
    for (int k = 0; k < 256; k++)
        first[k] = -1;
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            const unsigned char c = (unsigned char)rows[y][x];
            const int32_t i = y * w + x;
            s[i] = c != '.';
            if (c != '.' && first[c] < 0)
                first[c] = i;
            expect[i] = c == '.' ? -1 : first[c];
        }
    rig r;
    rig_open(&r, w, h, SW_PIX_U16, conn, 4096, 11);
    char what[64];
    snprintf(what, sizeof(what), "drawn %d x %d, %d-connectivity", w, h, conn);
    assert_int_equal(label_both(&r, s, 0, r.cap, what), SW_OK);
    assert_memory_equal(r.lg[0], expect, (size_t)np * sizeof(int32_t));
    rig_close(&r);
    free(s);
    free(expect);
}

#define NROWS(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

static void test_drawn(void **state)
{
    (void)state;
    static const char *const ring[] = {
        "..........", "..aaaaaa..", "..a....a..", "..a.bb.a..",
        "..a....a..", "..aaaaaa..", "..........",
    };
    static const char *const spiral[] = {
        "aaaaaaaaa", "........a", ".aaaaaa.a", ".a....a.a", ".a.aa.a.a",
        ".a.a..a.a", ".a.aaaa.a", ".a......a", ".aaaaaaaa",
    };
    static const char *const u2[] = {
        "......a.", ".a....a.", ".a..a.a.", ".a..a.a.", ".aaaaaa.", "........",
    };
    static const char *const d4[] = {"aa....", "aa....", "..bb..", "..bb.c", "....d."};
    static const char *const d8[] = {"aa....", "aa....", "..aa..", "..aa.a", "....a."};
    static const char *const v8[] = {
        "a...a...a", ".a.a...a.", "..a...a..", "...a.a...", "....a....",
    };
    static const char *const c4[] = {"a.b.c.d", ".e.f.g.", "h.i.j.k", ".l.m.n."};
    static const char *const c8[] = {"a.a.a.a", ".a.a.a.", "a.a.a.a", ".a.a.a."};
    static const char *const wrap_l[] = {"....a", "b....", "....c", "d...."};
    static const char *const wrap_ur[] = {".....", "a...b", ".....", "c...d"};
    static const char *const wrap_ul[] = {"....a", ".....", "b....", "....c", ".....", "d...."};
    static const char *const full[] = {"aaaa", "aaaa", "aaaa"};
    static const char *const empty[] = {"....", "...."};
    static const char *const one[] = {"a"};
    for (int conn = 4; conn <= 8; conn += 4) {
        check_drawn(ring, NROWS(ring), conn);
        check_drawn(spiral, NROWS(spiral), conn);
        check_drawn(u2, NROWS(u2), conn);
        check_drawn(wrap_l, NROWS(wrap_l), conn);
        check_drawn(wrap_ur, NROWS(wrap_ur), conn);
        check_drawn(wrap_ul, NROWS(wrap_ul), conn);
        check_drawn(full, NROWS(full), conn);
        check_drawn(empty, NROWS(empty), conn);
        check_drawn(one, 1, conn);
    }
    check_drawn(d4, NROWS(d4), 4);
    check_drawn(d8, NROWS(d8), 8);
    check_drawn(v8, NROWS(v8), 8);
    check_drawn(c4, NROWS(c4), 4);
    check_drawn(c8, NROWS(c8), 8);

    /* a full 1037 x 771 frame: one component of every pixel (the most contended atomics) */
    rig r;
    rig_open(&r, 1037, 771, SW_PIX_U16, 4, 16, 12);
    uint8_t *s = malloc((size_t)r.np);
    assert_non_null(s);
    memset(s, 1, (size_t)r.np);
    assert_int_equal(label_both(&r, s, 0, r.cap, "full frame"), SW_OK);
    assert_int_equal(r.cg[0].root, 0);
    assert_int_equal(r.cg[0].npix, r.np);
    memset(s, 0, (size_t)r.np);
    assert_int_equal(label_both(&r, s, 1, r.cap, "empty frame"), SW_OK);
    free(s);
    rig_close(&r);
}

/* ------------------------------------------------------------------ capacity */

static void test_capacity(void **state)
{
    (void)state;
    /* 4-connected checkerboard of 64 x 64: 2048 single pixels */
    enum { W = 64, H = 64 };
    uint8_t s[W * H];
    for (int i = 0; i < W * H; i++)
        s[i] = ((i / W) + (i % W)) % 2 == 0;
    rig r;
    rig_open(&r, W, H, SW_PIX_U16, 4, 2048, 13);
    assert_int_equal(label_both(&r, s, 0, 2048, "2048 components, room for 2048"), SW_OK);
    /* the call's capacity too small */
    assert_int_equal(label_both(&r, s, 0, 2047, "2048 components, room for 2047"), SW_ERANGE);
    assert_true(strstr(sw_context_error(gpu), "2048") != NULL);
    rig_close(&r);
    /* the plan's max_components too small (the GPU's table), the call's capacity large */
    rig_open(&r, W, H, SW_PIX_U16, 4, 100, 13);
    free(r.cc);
    free(r.cg);
    r.cc = malloc(4096 * sizeof(sw_find_comp));
    r.cg = malloc(4096 * sizeof(sw_find_comp));
    assert_true(r.cc && r.cg);
    int64_t n = 0;
    assert_int_equal(sw_find_label_cpu(r.pc, s, &r.frame, r.lc[0], r.cc, 100, &n), SW_ERANGE);
    CU_OK(cudaMemcpy(r.d_strong, s, sizeof(s), cudaMemcpyHostToDevice));
    CU_OK(cudaDeviceSynchronize());
    assert_int_equal(sw_find_label_gpu(r.pg, r.d_strong, &r.dframe, r.d_labels[0], r.cg, 4096, &n,
                                       sw_context_stream(gpu)),
                     SW_ERANGE);
    /* and after an overflow, a frame that fits works again */
    uint8_t few[W * H];
    memset(few, 0, sizeof(few));
    few[5] = few[700] = few[W * H - 1] = 1;
    assert_int_equal(label_both(&r, few, 0, 100, "3 components after an overflow"), SW_OK);
    rig_close(&r);
}

/* ------------------------------------------------------------------ main */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drawn),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_random_shapes_and_types),
        cmocka_unit_test(test_random_4148x64),
        cmocka_unit_test(test_random_1037x771),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#else /* no CUDA in this build */

#include <stdio.h>

int main(void)
{
    printf("SKIP: spotwave was built without CUDA\n");
    return 77;
}

#endif
