/*
 * Connected components, component moments and 3-D links of the find stage on the CPU
 * (find_label.c, contracts in find_internal.h):
 *   - hand-drawn masks against the labels drawn with them (a letter per component; its root is
 *     the letter's first pixel in raster order): a ring with a hole, a spiral, touching
 *     diagonals (4- against 8-connectivity), U shapes whose arms meet late (also with the root in
 *     the right arm), combs and snakes taller than a labelling strip, single pixels, full and
 *     empty frames, components on the image edges (and pixels at both ends of consecutive rows,
 *     neighbours in memory but not in the image);
 *   - the moments, bounding box and peak (ties: first in raster order) of components against
 *     values worked out by hand, also across strips;
 *   - more components than the table holds: SW_ERANGE, nothing written past the capacity;
 *   - links on 3-D stacks (a spot over 3 frames; spots merging, splitting, in crossed root order)
 *     against pairs written out by hand, and the links' capacity;
 *   - random masks of many sizes and densities against a breadth-first flood fill written here,
 *     with the moments summed here in exact integers, and random links against all pairs;
 *   - the same bits with 1, 2 and 5 threads when the sums round (large u32 values).
 */
#include "testutil.h"

#include "find/find_internal.h"

#include <stdlib.h>
#include <string.h>

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static sw_find_plan *make_plan(sw_context *ctx, int32_t w, int32_t h, sw_pixel_type t, int conn,
                               int32_t max_components)
{
    sw_find_params p;
    sw_find_params_default(&p, w, h, t);
    p.connectivity = conn;
    p.max_components = max_components;
    sw_find_plan *plan = NULL;
    if (sw_find_create(ctx, &p, &plan) != SW_OK)
        fail_msg("sw_find_create %d x %d: %s", w, h, sw_context_error(ctx));
    return plan;
}

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

/* A drawn mask: '.' is background, any other character a strong pixel of the component that
 * character names. expect[i] = the component's root (its first pixel in raster order), -1 for
 * background. */
typedef struct pic {
    int32_t w, h;
    uint8_t *strong;
    int32_t *expect;
    int ncomp;
} pic;

static pic pic_parse(const char *const *rows, int32_t h)
{
    pic p;
    p.h = h;
    p.w = (int32_t)strlen(rows[0]);
    p.strong = malloc((size_t)p.w * (size_t)h);
    p.expect = malloc((size_t)p.w * (size_t)h * sizeof(int32_t));
    assert_non_null(p.strong);
    assert_non_null(p.expect);
    int32_t first[256];
    for (int k = 0; k < 256; k++)
        first[k] = -1;
    p.ncomp = 0;
    for (int32_t y = 0; y < h; y++) {
        assert_int_equal((int32_t)strlen(rows[y]), p.w);
        for (int32_t x = 0; x < p.w; x++) {
            const int32_t i = y * p.w + x;
            const unsigned char c = (unsigned char)rows[y][x];
            p.strong[i] = c != '.';
            if (c == '.') {
                p.expect[i] = -1;
                continue;
            }
            if (first[c] < 0) {
                first[c] = i;
                p.ncomp++;
            }
            p.expect[i] = first[c];
        }
    }
    return p;
}

static void pic_free(pic *p)
{
    free(p->strong);
    free(p->expect);
}

/* A u16 frame with value(i) = 1 + (i * 7919) % 1000. */
static sw_image value_frame(int32_t w, int32_t h)
{
    sw_image f;
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U16, &f), SW_OK);
    for (int32_t y = 0; y < h; y++) {
        uint16_t *r = sw_image_row(&f, y);
        for (int32_t x = 0; x < w; x++)
            r[x] = (uint16_t)(1 + ((int64_t)(y * w + x) * 7919) % 1000);
    }
    return f;
}

/* The component table of a frame against its labels, recomputed here in exact integers:
 * roots increasing and equal to the set of labels' roots, npix, bbox, peak (first in raster
 * order) exactly; the sums exactly too (integers below 2^53 add exactly in any order). */
static void check_table(const int32_t *labels, const sw_image *f, int32_t w, int32_t h,
                        const sw_find_comp *comps, int64_t n)
{
    const int64_t np = (int64_t)w * h;
    int64_t *id = malloc((size_t)np * sizeof(int64_t));
    assert_non_null(id);
    for (int64_t i = 0; i < np; i++)
        id[i] = -1;
    for (int64_t k = 0; k < n; k++) {
        assert_true(comps[k].root >= 0 && comps[k].root < np);
        if (k > 0)
            assert_true(comps[k].root > comps[k - 1].root);
        id[comps[k].root] = k;
    }
    typedef struct ref {
        int64_t s, sx, sy, sxx, syy, npix;
        int32_t x0, x1, y0, y1, px, py;
        uint32_t peak;
    } ref;
    ref *r = calloc((size_t)(n > 0 ? n : 1), sizeof(ref));
    assert_non_null(r);
    for (int64_t k = 0; k < n; k++) {
        r[k].x0 = r[k].y0 = INT32_MAX;
        r[k].x1 = r[k].y1 = -1;
    }
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            const int64_t i = (int64_t)y * w + x;
            if (labels[i] < 0) {
                assert_int_equal(labels[i], -1);
                continue;
            }
            assert_true(labels[i] <= i); /* the root is the smallest index */
            const int64_t k = id[labels[i]];
            if (k < 0)
                fail_msg("pixel (%d, %d): label %d is no root of the table", x, y, labels[i]);
            assert_int_equal(labels[labels[i]], labels[i]);
            const int64_t v = (int64_t)sw_image_get(f, x, y);
            const int64_t dx = x - (int32_t)(comps[k].root % w),
                          dy = y - (int32_t)(comps[k].root / w);
            ref *q = &r[k];
            q->s += v;
            q->sx += v * dx;
            q->sy += v * dy;
            q->sxx += v * dx * dx;
            q->syy += v * dy * dy;
            if (q->npix == 0 || (uint32_t)v > q->peak) {
                q->peak = (uint32_t)v;
                q->px = x;
                q->py = y;
            }
            q->npix++;
            if (x < q->x0)
                q->x0 = x;
            if (x + 1 > q->x1)
                q->x1 = x + 1;
            if (y < q->y0)
                q->y0 = y;
            if (y + 1 > q->y1)
                q->y1 = y + 1;
        }
    for (int64_t k = 0; k < n; k++) {
        const sw_find_comp *c = &comps[k];
        const ref *q = &r[k];
        if (c->npix != q->npix || c->x0 != q->x0 || c->x1 != q->x1 || c->y0 != q->y0 ||
            c->y1 != q->y1 || c->peak != q->peak || c->peak_x != q->px || c->peak_y != q->py)
            fail_msg("component %lld (root %lld): npix %lld/%lld bbox [%d,%d)x[%d,%d) vs "
                     "[%d,%d)x[%d,%d) peak %u at (%d,%d) vs %u at (%d,%d)",
                     (long long)k, (long long)c->root, (long long)c->npix, (long long)q->npix,
                     c->x0, c->x1, c->y0, c->y1, q->x0, q->x1, q->y0, q->y1, c->peak, c->peak_x,
                     c->peak_y, q->peak, q->px, q->py);
        assert_true(c->sum_i == (double)q->s);
        assert_true(c->sum_ix == (double)q->sx);
        assert_true(c->sum_iy == (double)q->sy);
        assert_true(c->sum_ixx == (double)q->sxx);
        assert_true(c->sum_iyy == (double)q->syy);
        assert_true(q->npix > 0);
    }
    free(r);
    free(id);
}

/* Labels a drawn mask with connectivity conn and checks labels and table. */
static void check_pic(const char *const *rows, int32_t h, int conn)
{
    pic p = pic_parse(rows, h);
    sw_find_plan *plan = make_plan(cpu, p.w, p.h, SW_PIX_U16, conn, 4096);
    sw_image f = value_frame(p.w, p.h);
    const size_t np = (size_t)p.w * (size_t)p.h;
    int32_t *labels = malloc(np * sizeof(int32_t));
    sw_find_comp *comps = malloc(4096 * sizeof(sw_find_comp));
    assert_non_null(labels);
    assert_non_null(comps);
    int64_t n = -1;
    if (sw_find_label_cpu(plan, p.strong, &f, labels, comps, 4096, &n) != SW_OK)
        fail_msg("sw_find_label_cpu: %s", sw_context_error(cpu));
    for (int32_t y = 0; y < p.h; y++)
        for (int32_t x = 0; x < p.w; x++) {
            const size_t i = (size_t)y * (size_t)p.w + (size_t)x;
            if (labels[i] != p.expect[i])
                fail_msg("%d-connectivity, %d x %d: pixel (%d, %d) labelled %d, drawn %d", conn,
                         p.w, p.h, x, y, labels[i], p.expect[i]);
        }
    assert_int_equal(n, p.ncomp);
    check_table(labels, &f, p.w, p.h, comps, n);
    free(labels);
    free(comps);
    sw_image_free(&f);
    sw_find_destroy(plan);
    pic_free(&p);
}

#define NROWS(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------------ drawn masks */

static void test_ring_and_spiral(void **state)
{
    (void)state;
    static const char *const ring[] = {
        "..........", "..aaaaaa..", "..a....a..", "..a.bb.a..",
        "..a....a..", "..aaaaaa..", "..........",
    };
    check_pic(ring, NROWS(ring), 4);
    check_pic(ring, NROWS(ring), 8);
    static const char *const spiral[] = {
        "aaaaaaaaa", "........a", ".aaaaaa.a", ".a....a.a", ".a.aa.a.a",
        ".a.a..a.a", ".a.aaaa.a", ".a......a", ".aaaaaaaa",
    };
    check_pic(spiral, NROWS(spiral), 4);
    check_pic(spiral, NROWS(spiral), 8);
    /* a spiral whose outer arm runs back along the frame's bottom */
    static const char *const spiral2[] = {
        "...........", ".aaaaaaaaa.", ".a.......a.", ".a.aaaaa.a.", ".a.a...a.a.",
        ".a.a.aaa.a.", ".a.a.....a.", ".a.aaaaaaa.", ".a.........", ".aaaaaaaaaa",
    };
    check_pic(spiral2, NROWS(spiral2), 4);
}

static void test_diagonals(void **state)
{
    (void)state;
    static const char *const d4[] = {
        "aa....", "aa....", "..bb..", "..bb.c", "....d.",
    };
    static const char *const d8[] = {
        "aa....", "aa....", "..aa..", "..aa.a", "....a.",
    };
    pic a = pic_parse(d4, NROWS(d4)), b = pic_parse(d8, NROWS(d8));
    assert_memory_equal(a.strong, b.strong, (size_t)a.w * (size_t)a.h); /* the same mask */
    pic_free(&a);
    pic_free(&b);
    check_pic(d4, NROWS(d4), 4);
    check_pic(d8, NROWS(d8), 8);

    /* an anti-diagonal: up-right joins only in 8-connectivity; a V whose arms meet below */
    static const char *const v4[] = {
        "a...b...c", ".d.e...f.", "..g...h..", "...i.j...", "....k....",
    };
    static const char *const v8[] = {
        "a...a...a", ".a.a...a.", "..a...a..", "...a.a...", "....a....",
    };
    check_pic(v4, NROWS(v4), 4);
    check_pic(v8, NROWS(v8), 8);
    /* the checkerboard: every pixel alone in 4-connectivity, one component in 8 */
    static const char *const c4[] = {
        "a.b.c.d",
        ".e.f.g.",
        "h.i.j.k",
        ".l.m.n.",
    };
    static const char *const c8[] = {
        "a.a.a.a",
        ".a.a.a.",
        "a.a.a.a",
        ".a.a.a.",
    };
    check_pic(c4, NROWS(c4), 4);
    check_pic(c8, NROWS(c8), 8);
}

static void test_late_merges(void **state)
{
    (void)state;
    static const char *const u[] = {
        "a...a",
        "a...a",
        "a...a",
        "aaaaa",
    };
    check_pic(u, NROWS(u), 4);
    check_pic(u, NROWS(u), 8);
    /* the root is in the right arm (its top comes first in raster order) */
    static const char *const u2[] = {
        "......a.", ".a....a.", ".a..a.a.", ".a..a.a.", ".aaaaaa.", "........",
    };
    check_pic(u2, NROWS(u2), 4);
    check_pic(u2, NROWS(u2), 8);
    /* a comb whose teeth join from right to left, and a staircase */
    static const char *const comb[] = {
        "a.a.a.a.a.a", "a.a.a.a.a.a", "a.a.a.a.aaa", "a.a.a.aaaaa",
        "a.a.aaaaaaa", "aaaaaaaaaaa", "...........", "bbbbbbbbbbb",
    };
    check_pic(comb, NROWS(comb), 4);
    check_pic(comb, NROWS(comb), 8);
    /* two staircases that meet at the bottom */
    static const char *const stairs[] = {
        "a.....a", "aa...aa", ".aa.aa.", "..aaa..", "b......",
    };
    check_pic(stairs, NROWS(stairs), 4);
    check_pic(stairs, NROWS(stairs), 8);
}

/* Masks taller than a labelling strip (64 rows): arms that meet only several strips below, a
 * snake that crosses strip borders back and forth, a full frame. */
static void test_tall(void **state)
{
    (void)state;
    enum { W = 9, H = 200 };
    static char buf[H][W + 1];
    const char *rows[H];
    for (int c = 0; c < 4; c++) {
        for (int y = 0; y < H; y++) {
            for (int x = 0; x < W; x++) {
                char ch = '.';
                switch (c) {
                case 0: /* a U: arms at x = 1 and 6 from the top, joined at row 190 */
                    if ((x == 1 || x == 6) && y <= 190)
                        ch = 'a';
                    if (y == 190 && x >= 1 && x <= 6)
                        ch = 'a';
                    if (x == 8 && y > 10)
                        ch = 'b';
                    break;
                case 1: /* the right arm starts first (holds the root), the left one ends below */
                    if (x == 6 && y <= 150)
                        ch = 'a';
                    if (x == 2 && y >= 3 && y <= 150)
                        ch = 'a';
                    if (y == 150 && x >= 2 && x <= 6)
                        ch = 'a';
                    if (x == 4 && y >= 20 && y < 140)
                        ch = 'b';
                    break;
                case 2: /* a snake: columns 0, 2, 4, 6, 8 joined alternately at the bottom and
                           the top */
                    if (x % 2 == 0 && y >= 1 && y <= 198)
                        ch = 'a';
                    if ((y == 198 && (x == 1 || x == 5)) || (y == 1 && (x == 3 || x == 7)))
                        ch = 'a';
                    break;
                default: /* full */ ch = 'a';
                }
                buf[y][x] = ch;
            }
            buf[y][W] = '\0';
            rows[y] = buf[y];
        }
        check_pic(rows, H, 4);
        check_pic(rows, H, 8);
    }
    /* a zigzag of diagonal steps, x = |y mod 16 - 8|: one component in 8-connectivity (joined
     * across strip borders by diagonal neighbours only), one per pixel in 4-connectivity */
    for (int conn = 4; conn <= 8; conn += 4) {
        for (int y = 0; y < H; y++) {
            memset(buf[y], '.', W);
            buf[y][W] = '\0';
            buf[y][abs(y % 16 - 8)] = conn == 8 ? 'a' : (char)(48 + y); /* 48 + y: never '.' */
            rows[y] = buf[y];
        }
        check_pic(rows, H, conn);
    }
}

static void test_edges_and_singles(void **state)
{
    (void)state;
    /* pixels at the two ends of a row, or at the end of one row and the start of the next, are
     * neighbours in memory only: left, up-left and up-right must not wrap around */
    static const char *const wrap_l[] = {"....a", "b....", "....c", "d...."};
    static const char *const wrap_ur[] = {".....", "a...b", ".....", "c...d"};
    static const char *const wrap_ul[] = {"....a", ".....", "b....", "....c", ".....", "d...."};
    for (int conn = 4; conn <= 8; conn += 4) {
        check_pic(wrap_l, NROWS(wrap_l), conn);
        check_pic(wrap_ur, NROWS(wrap_ur), conn);
        check_pic(wrap_ul, NROWS(wrap_ul), conn);
    }
    /* components on every edge and corner */
    static const char *const edge4[] = {
        "aaaaaa.", "a.....b", "a.c.d.b", "a.....b", "..eee.b",
    };
    static const char *const edge8[] = {
        "aaaaaa.", "a.....a", "a.c.d.a", "a.....a", "..eee.a",
    };
    check_pic(edge4, NROWS(edge4), 4);
    check_pic(edge8, NROWS(edge8), 8);
    static const char *const one[] = {"a"};
    check_pic(one, 1, 4);
    static const char *const none[] = {"."};
    check_pic(none, 1, 8);
    static const char *const row[] = {"aa.b.cc.dddd.e"};
    check_pic(row, 1, 4);
    check_pic(row, 1, 8);
    static const char *const col[] = {"a", "a", ".", "b", ".", "c", "c"};
    check_pic(col, NROWS(col), 4);
    check_pic(col, NROWS(col), 8);
    static const char *const full[] = {"aaaa", "aaaa", "aaaa"};
    check_pic(full, NROWS(full), 4);
    static const char *const empty[] = {"....", "....", "...."};
    check_pic(empty, NROWS(empty), 4);
    check_pic(empty, NROWS(empty), 8);
}

/* ------------------------------------------------------------------ moments by hand */

static void label_frame(sw_find_plan *plan, const uint8_t *strong, const sw_image *f,
                        int32_t *labels, sw_find_comp *comps, int64_t cap, int64_t *n)
{
    if (sw_find_label_cpu(plan, strong, f, labels, comps, cap, n) != SW_OK)
        fail_msg("sw_find_label_cpu: %s", sw_context_error(plan->ctx));
}

static void test_moments_by_hand(void **state)
{
    (void)state;
    /* 8 x 5, u16. Component A: a 2 x 2 block at (3, 2) with 1 2 / 3 4. Component B: (2, 0),
     * (1, 1), (2, 1), (0, 2), (1, 2) with 5, 7, 7, 1, 2 (root (2, 0), two peaks of 7). C: one
     * pixel (7, 4) of value 0. */
    enum { W = 8, H = 5 };
    static const char *const rows[] = {
        "..b.....", ".bb.....", "bb.aa...", "...aa...", ".......c",
    };
    pic p = pic_parse(rows, H);
    sw_image f;
    assert_int_equal(sw_image_alloc(NULL, W, H, SW_PIX_U16, &f), SW_OK);
    const int v[][3] = {{3, 2, 1}, {4, 2, 2}, {3, 3, 3}, {4, 3, 4}, {2, 0, 5},
                        {1, 1, 7}, {2, 1, 7}, {0, 2, 1}, {1, 2, 2}, {7, 4, 0}};
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++)
        ((uint16_t *)sw_image_row(&f, v[k][1]))[v[k][0]] = (uint16_t)v[k][2];
    /* strong pixels are the drawn ones; a bright background pixel must not count */
    ((uint16_t *)sw_image_row(&f, 0))[0] = 60000;
    sw_find_plan *plan = make_plan(cpu, W, H, SW_PIX_U16, 4, 16);
    int32_t labels[W * H];
    sw_find_comp c[16];
    int64_t n = 0;
    label_frame(plan, p.strong, &f, labels, c, 16, &n);
    assert_int_equal(n, 3);
    /* B (root 2), A (root 19), C (root 39) */
    assert_int_equal(c[0].root, 2);
    assert_int_equal(c[1].root, 2 * W + 3);
    assert_int_equal(c[2].root, 4 * W + 7);
    /* B: I = 22; I dx = 0 - 7 + 0 - 2 - 2; I dy = 0 + 7 + 7 + 2 + 4; I dx^2 = 7 + 4 + 2;
     * I dy^2 = 7 + 7 + 4 + 8 */
    assert_true(c[0].sum_i == 22.0);
    assert_true(c[0].sum_ix == -11.0);
    assert_true(c[0].sum_iy == 20.0);
    assert_true(c[0].sum_ixx == 13.0);
    assert_true(c[0].sum_iyy == 26.0);
    assert_int_equal(c[0].npix, 5);
    assert_int_equal(c[0].x0, 0);
    assert_int_equal(c[0].x1, 3);
    assert_int_equal(c[0].y0, 0);
    assert_int_equal(c[0].y1, 3);
    assert_int_equal(c[0].peak, 7);
    assert_int_equal(c[0].peak_x, 1); /* the first 7 in raster order */
    assert_int_equal(c[0].peak_y, 1);
    /* A: I = 10; I dx = 2 + 4; I dy = 3 + 4; squares alike */
    assert_true(c[1].sum_i == 10.0);
    assert_true(c[1].sum_ix == 6.0);
    assert_true(c[1].sum_iy == 7.0);
    assert_true(c[1].sum_ixx == 6.0);
    assert_true(c[1].sum_iyy == 7.0);
    assert_int_equal(c[1].npix, 4);
    assert_int_equal(c[1].x0, 3);
    assert_int_equal(c[1].x1, 5);
    assert_int_equal(c[1].y0, 2);
    assert_int_equal(c[1].y1, 4);
    assert_int_equal(c[1].peak, 4);
    assert_int_equal(c[1].peak_x, 4);
    assert_int_equal(c[1].peak_y, 3);
    /* C: a pixel of value 0 is still a component with its peak at itself */
    assert_true(c[2].sum_i == 0.0);
    assert_int_equal(c[2].npix, 1);
    assert_int_equal(c[2].peak, 0);
    assert_int_equal(c[2].peak_x, 7);
    assert_int_equal(c[2].peak_y, 4);
    assert_int_equal(c[2].x0, 7);
    assert_int_equal(c[2].x1, 8);
    assert_int_equal(c[2].y0, 4);
    assert_int_equal(c[2].y1, 5);
    sw_find_destroy(plan);
    sw_image_free(&f);

    /* f32 frames: values rounded to counts (2.4 -> 2, 2.5 -> 3, -3 -> 0) */
    assert_int_equal(sw_image_alloc(NULL, W, H, SW_PIX_F32, &f), SW_OK);
    ((float *)sw_image_row(&f, 2))[3] = 2.4f;
    ((float *)sw_image_row(&f, 2))[4] = 2.5f;
    ((float *)sw_image_row(&f, 3))[3] = -3.0f;
    ((float *)sw_image_row(&f, 3))[4] = 1.0f;
    plan = make_plan(cpu, W, H, SW_PIX_F32, 4, 16);
    label_frame(plan, p.strong, &f, labels, c, 16, &n);
    assert_int_equal(n, 3);
    assert_true(c[1].sum_i == 6.0);
    assert_true(c[1].sum_ix == 4.0); /* 3 at dx = 1, 1 at dx = 1 */
    assert_true(c[1].sum_iy == 1.0);
    assert_int_equal(c[1].peak, 3);
    assert_int_equal(c[1].peak_x, 4);
    assert_int_equal(c[1].peak_y, 2);
    sw_find_destroy(plan);
    sw_image_free(&f);
    pic_free(&p);
}

/* A column 200 px tall (across four strips) with equal peaks in two strips: the first wins. */
static void test_moments_across_strips(void **state)
{
    (void)state;
    enum { W = 5, H = 200 };
    uint8_t strong[W * H];
    memset(strong, 0, sizeof(strong));
    sw_image f;
    assert_int_equal(sw_image_alloc(NULL, W, H, SW_PIX_U16, &f), SW_OK);
    for (int y = 3; y < H; y++) {
        strong[y * W + 2] = 1;
        ((uint16_t *)sw_image_row(&f, y))[2] = (uint16_t)(y == 100 || y == 150 ? 9 : 1);
    }
    strong[199 * W + 3] = 1; /* a foot at the bottom right */
    ((uint16_t *)sw_image_row(&f, 199))[3] = 2;
    for (int conn = 4; conn <= 8; conn += 4) {
        sw_find_plan *plan = make_plan(cpu, W, H, SW_PIX_U16, conn, 16);
        int32_t labels[W * H];
        sw_find_comp c[16];
        int64_t n = 0;
        label_frame(plan, strong, &f, labels, c, 16, &n);
        assert_int_equal(n, 1);
        assert_int_equal(c[0].root, 3 * W + 2);
        assert_int_equal(c[0].npix, 198);
        assert_int_equal(c[0].peak, 9);
        assert_int_equal(c[0].peak_x, 2);
        assert_int_equal(c[0].peak_y, 100);
        assert_int_equal(c[0].x0, 2);
        assert_int_equal(c[0].x1, 4);
        assert_int_equal(c[0].y0, 3);
        assert_int_equal(c[0].y1, 200);
        /* I = 197 rows of 1 with two 9s, plus the foot's 2 */
        double si = 0, sy = 0, syy = 0;
        for (int y = 3; y < H; y++) {
            const double v = (y == 100 || y == 150) ? 9 : 1;
            si += v;
            sy += v * (y - 3);
            syy += v * (y - 3) * (y - 3);
        }
        si += 2;
        sy += 2 * 196;
        syy += 2.0 * 196 * 196;
        assert_true(c[0].sum_i == si);
        assert_true(c[0].sum_ix == 2.0); /* only the foot is off the root's column */
        assert_true(c[0].sum_ixx == 2.0);
        assert_true(c[0].sum_iy == sy);
        assert_true(c[0].sum_iyy == syy);
        for (int y = 0; y < H; y++)
            assert_int_equal(labels[y * W + 2], y >= 3 ? 3 * W + 2 : -1);
        sw_find_destroy(plan);
    }
    sw_image_free(&f);
}

/* ------------------------------------------------------------------ capacity */

static void test_capacity(void **state)
{
    (void)state;
    enum { W = 10, H = 10 };
    uint8_t strong[W * H];
    for (int i = 0; i < W * H; i++)
        strong[i] = ((i / W) + (i % W)) % 2 == 0; /* 50 single pixels in 4-connectivity */
    sw_image f = value_frame(W, H);
    sw_find_plan *plan = make_plan(cpu, W, H, SW_PIX_U16, 4, 64);
    int32_t labels[W * H], ok_labels[W * H];
    sw_find_comp c[51];
    int64_t n = 0;
    label_frame(plan, strong, &f, ok_labels, c, 50, &n);
    assert_int_equal(n, 50);

    memset(c, 0xA5, sizeof(c));
    sw_find_comp guard;
    memset(&guard, 0xA5, sizeof(guard));
    n = 123;
    assert_int_equal(sw_find_label_cpu(plan, strong, &f, labels, c, 49, &n), SW_ERANGE);
    assert_true(strstr(sw_context_error(cpu), "50") != NULL); /* says how many */
    assert_int_equal(n, 0);
    assert_memory_equal(&c[49], &guard, sizeof(guard)); /* nothing past the capacity */
    assert_memory_equal(labels, ok_labels, sizeof(labels));
    /* capacity 0 with no component at all is fine */
    uint8_t none[W * H];
    memset(none, 0, sizeof(none));
    assert_int_equal(sw_find_label_cpu(plan, none, &f, labels, NULL, 0, &n), SW_OK);
    assert_int_equal(n, 0);
    /* 8-connectivity: the same mask is one component */
    sw_find_destroy(plan);
    plan = make_plan(cpu, W, H, SW_PIX_U16, 8, 64);
    label_frame(plan, strong, &f, labels, c, 1, &n);
    assert_int_equal(n, 1);
    assert_int_equal(c[0].npix, 50);
    sw_find_destroy(plan);
    sw_image_free(&f);
}

/* ------------------------------------------------------------------ links */

/* Labels each drawn frame and checks the links between consecutive ones against `want`
 * (npairs[k] pairs for frames k, k + 1, in order). */
static void check_links(const char *const *frames[], int nframes, int32_t h, int conn,
                        const int32_t *const want[], const int64_t *nwant)
{
    pic p[4];
    assert_true(nframes <= 4);
    for (int k = 0; k < nframes; k++)
        p[k] = pic_parse(frames[k], h);
    const int32_t w = p[0].w;
    sw_find_plan *plan = make_plan(cpu, w, h, SW_PIX_U16, conn, 256);
    sw_image f = value_frame(w, h);
    int32_t *labels[4];
    sw_find_comp c[256];
    for (int k = 0; k < nframes; k++) {
        labels[k] = malloc((size_t)w * (size_t)h * sizeof(int32_t));
        assert_non_null(labels[k]);
        int64_t n = 0;
        label_frame(plan, p[k].strong, &f, labels[k], c, 256, &n);
        assert_memory_equal(labels[k], p[k].expect, (size_t)w * (size_t)h * sizeof(int32_t));
    }
    for (int k = 0; k + 1 < nframes; k++) {
        int32_t pairs[2 * 64];
        int64_t np = -1;
        if (sw_find_links_cpu(plan, labels[k], labels[k + 1], pairs, 64, &np) != SW_OK)
            fail_msg("sw_find_links_cpu: %s", sw_context_error(cpu));
        if (np != nwant[k])
            fail_msg("frames %d-%d: %lld links, expected %lld", k, k + 1, (long long)np,
                     (long long)nwant[k]);
        for (int64_t j = 0; j < np; j++)
            if (pairs[2 * j] != want[k][2 * j] || pairs[2 * j + 1] != want[k][2 * j + 1])
                fail_msg("frames %d-%d: link %lld is (%d, %d), expected (%d, %d)", k, k + 1,
                         (long long)j, pairs[2 * j], pairs[2 * j + 1], want[k][2 * j],
                         want[k][2 * j + 1]);
        if (nwant[k] > 0) { /* one pair too few room: SW_ERANGE */
            assert_int_equal(
                sw_find_links_cpu(plan, labels[k], labels[k + 1], pairs, nwant[k] - 1, &np),
                SW_ERANGE);
        }
    }
    for (int k = 0; k < nframes; k++) {
        free(labels[k]);
        pic_free(&p[k]);
    }
    sw_image_free(&f);
    sw_find_destroy(plan);
}

static void test_links(void **state)
{
    (void)state;
    /* a spot over three frames, drifting; a second spot in frame 2 touches nothing before */
    static const char *const s0[] = {
        "........", "..aa....", "..aa....", "........", "........", "........",
    };
    static const char *const s1[] = {
        "........", "...bb...", "...bb...", "...b....", "........", "........",
    };
    static const char *const s2[] = {
        "........", "........", "...cc...", "...cc...", "........", "..d.....",
    };
    const char *const *spot[] = {s0, s1, s2};
    static const int32_t l01[] = {1 * 8 + 2, 1 * 8 + 3};
    static const int32_t l12[] = {1 * 8 + 3, 2 * 8 + 3};
    const int32_t *const want[] = {l01, l12};
    const int64_t nwant[] = {1, 1};
    check_links(spot, 3, 6, 4, want, nwant);
    check_links(spot, 3, 6, 8, want, nwant);

    /* two spots merge in the second frame, and split again in the third */
    static const char *const m0[] = {
        ".a...b..",
        ".a...b..",
        "........",
    };
    static const char *const m1[] = {
        "........",
        ".ccccc..",
        "........",
    };
    static const char *const m2[] = {
        "........",
        ".d...e..",
        ".d...e..",
    };
    const char *const *merge[] = {m0, m1, m2};
    static const int32_t k01[] = {1, 9, 5, 9};
    static const int32_t k12[] = {9, 9, 9, 13};
    const int32_t *const want2[] = {k01, k12};
    const int64_t nwant2[] = {2, 2};
    check_links(merge, 3, 3, 4, want2, nwant2);

    /* roots in crossed order: the prev root that comes first meets the later cur root; a
     * component overlapping over many rows and runs gives one pair */
    static const char *const x0[] = {
        ".a......", ".a......", ".a...b..", ".a...b..", "........", "ffffff..", "f.f.f...",
    };
    static const char *const x1[] = {
        ".....c..", ".....c..", ".....c..", ".d......", "........", "gggggg..", "g.g.gg..",
    };
    const char *const *crossed[] = {x0, x1};
    static const int32_t c01[] = {1, 25, 21, 5, 40, 40};
    const int32_t *const want3[] = {c01};
    const int64_t nwant3[] = {3};
    check_links(crossed, 2, 7, 4, want3, nwant3);
    check_links(crossed, 2, 7, 8, want3, nwant3);

    /* nothing strong in both frames: no link */
    static const char *const e0[] = {"aa..", "...."};
    static const char *const e1[] = {"..bb", "cc.."};
    const char *const *disjoint[] = {e0, e1};
    const int32_t *const want4[] = {NULL};
    const int64_t nwant4[] = {0};
    check_links(disjoint, 2, 2, 4, want4, nwant4);
}

/* ------------------------------------------------------------------ random masks */

/* Breadth-first flood fill from every unvisited strong pixel in raster order: the seed is the
 * component's smallest index, which names it. Returns the number of components. */
static int64_t flood(const uint8_t *s, int32_t w, int32_t h, int conn8, int32_t *out,
                     int32_t *queue)
{
    const int64_t np = (int64_t)w * h;
    for (int64_t i = 0; i < np; i++)
        out[i] = s[i] ? -2 : -1;
    int64_t ncomp = 0;
    for (int64_t seed = 0; seed < np; seed++) {
        if (out[seed] != -2)
            continue;
        ncomp++;
        int64_t head = 0, tail = 0;
        out[seed] = (int32_t)seed;
        queue[tail++] = (int32_t)seed;
        while (head < tail) {
            const int32_t p = queue[head++];
            const int32_t px = p % w, py = p / w;
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++) {
                    if ((dx == 0 && dy == 0) || (!conn8 && dx != 0 && dy != 0))
                        continue;
                    const int32_t qx = px + dx, qy = py + dy;
                    if (qx < 0 || qx >= w || qy < 0 || qy >= h)
                        continue;
                    const int32_t q = qy * w + qx;
                    if (out[q] == -2) {
                        out[q] = (int32_t)seed;
                        queue[tail++] = q;
                    }
                }
        }
    }
    return ncomp;
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* All pairs (prev, cur) over the pixels labelled in both, sorted and unique. */
static int64_t all_pairs(const int32_t *a, const int32_t *b, int64_t np, uint64_t *keys)
{
    int64_t m = 0;
    for (int64_t i = 0; i < np; i++)
        if (a[i] >= 0 && b[i] >= 0)
            keys[m++] = (uint64_t)a[i] << 32 | (uint32_t)b[i];
    qsort(keys, (size_t)m, sizeof(uint64_t), cmp_u64);
    int64_t u = 0;
    for (int64_t k = 0; k < m; k++)
        if (u == 0 || keys[k] != keys[u - 1])
            keys[u++] = keys[k];
    return u;
}

static void random_mask(uint64_t *rs, uint8_t *s, int32_t w, int32_t h, double density, int blobs)
{
    const int64_t np = (int64_t)w * h;
    if (!blobs) {
        for (int64_t i = 0; i < np; i++)
            s[i] = rnd_u01(rs) < density;
        return;
    }
    /* discs of radius 0.5 .. 6 px until the density is about reached */
    memset(s, 0, (size_t)np);
    int64_t on = 0;
    for (int k = 0; k < 100000 && on < density * (double)np; k++) {
        const double cx = rnd_u01(rs) * w, cy = rnd_u01(rs) * h, r = 0.5 + 5.5 * rnd_u01(rs);
        for (int32_t y = (int32_t)(cy - r - 1); y <= (int32_t)(cy + r + 1); y++)
            for (int32_t x = (int32_t)(cx - r - 1); x <= (int32_t)(cx + r + 1); x++)
                if (x >= 0 && x < w && y >= 0 && y < h &&
                    (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r && !s[y * w + x]) {
                    s[y * w + x] = 1;
                    on++;
                }
    }
}

static void test_random_masks(void **state)
{
    (void)state;
    static const int32_t sizes[][2] = {{1, 1},    {1, 300},   {300, 1}, {2, 150},
                                       {150, 2},  {3, 3},     {64, 64}, {65, 65},
                                       {63, 129}, {257, 301}, {129, 7}, {31, 200}};
    static const double dens[] = {0.02, 0.3, 0.5, 0.6, 0.75, 0.95};
    uint64_t rs = 20240611;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        const int32_t w = sizes[si][0], h = sizes[si][1];
        const int64_t np = (int64_t)w * h;
        uint8_t *s0 = malloc((size_t)np), *s1 = malloc((size_t)np);
        int32_t *ref = malloc((size_t)np * sizeof(int32_t));
        int32_t *queue = malloc((size_t)np * sizeof(int32_t));
        int32_t *lab0 = malloc((size_t)np * sizeof(int32_t));
        int32_t *lab1 = malloc((size_t)np * sizeof(int32_t));
        uint64_t *keys = malloc((size_t)np * sizeof(uint64_t));
        const int64_t cap = np / 2 + 2;
        sw_find_comp *comps = malloc((size_t)cap * sizeof(sw_find_comp));
        int32_t *pairs = malloc((size_t)np * 2 * sizeof(int32_t));
        assert_true(s0 && s1 && ref && queue && lab0 && lab1 && keys && comps && pairs);
        sw_image f = sw_test_random_image(w, h, SW_PIX_U16, 77 + si);
        for (int conn = 4; conn <= 8; conn += 4) {
            sw_find_plan *plan = make_plan(cpu, w, h, SW_PIX_U16, conn, (int32_t)cap);
            for (size_t di = 0; di < sizeof(dens) / sizeof(dens[0]); di++)
                for (int blobs = 0; blobs <= 1; blobs++) {
                    random_mask(&rs, s0, w, h, dens[di], blobs);
                    random_mask(&rs, s1, w, h, dens[di], blobs);
                    int64_t n0 = 0, n1 = 0;
                    label_frame(plan, s0, &f, lab0, comps, cap, &n0);
                    const int64_t nref = flood(s0, w, h, conn == 8, ref, queue);
                    for (int64_t i = 0; i < np; i++)
                        if (lab0[i] != ref[i])
                            fail_msg("%d x %d, %d-conn, density %.2f%s: pixel (%lld, %lld) "
                                     "labelled %d, flood fill %d",
                                     w, h, conn, dens[di], blobs ? " (discs)" : "",
                                     (long long)(i % w), (long long)(i / w), lab0[i], ref[i]);
                    assert_int_equal(n0, nref);
                    check_table(lab0, &f, w, h, comps, n0);
                    /* links to a second frame */
                    label_frame(plan, s1, &f, lab1, comps, cap, &n1);
                    const int64_t u = all_pairs(lab0, lab1, np, keys);
                    int64_t npairs = -1;
                    if (sw_find_links_cpu(plan, lab0, lab1, pairs, np, &npairs) != SW_OK)
                        fail_msg("links: %s", sw_context_error(cpu));
                    assert_int_equal(npairs, u);
                    for (int64_t k = 0; k < u; k++) {
                        assert_int_equal(pairs[2 * k], (int32_t)(keys[k] >> 32));
                        assert_int_equal(pairs[2 * k + 1], (int32_t)(uint32_t)keys[k]);
                    }
                }
            sw_find_destroy(plan);
        }
        sw_image_free(&f);
        free(s0);
        free(s1);
        free(ref);
        free(queue);
        free(lab0);
        free(lab1);
        free(keys);
        free(comps);
        free(pairs);
    }
}

/* Large u32 values over big components: the sums round, yet 1, 2 and 5 threads give the same
 * bits, and the sums agree with long double ones to 1e-11. */
static void test_threads_same_bits(void **state)
{
    (void)state;
    enum { W = 301, H = 333 };
    const int64_t np = (int64_t)W * H;
    uint8_t *s = malloc((size_t)np);
    uint64_t rs = 99;
    assert_non_null(s);
    sw_image f;
    assert_int_equal(sw_image_alloc(NULL, W, H, SW_PIX_U32, &f), SW_OK);
    for (int32_t y = 0; y < H; y++)
        for (int32_t x = 0; x < W; x++)
            ((uint32_t *)sw_image_row(&f, y))[x] = 0x40000000u + (uint32_t)(rnd_next(&rs) >> 34);
    const int threads[3] = {1, 2, 5};
    for (int conn = 4; conn <= 8; conn += 4) {
        random_mask(&rs, s, W, H, 0.7, 0);
        sw_find_comp *c[3];
        int32_t *lab[3];
        int64_t n[3];
        for (int t = 0; t < 3; t++) {
            sw_context *ctx = sw_test_cpu_context(threads[t]);
            sw_find_plan *plan = make_plan(ctx, W, H, SW_PIX_U32, conn, (int32_t)(np / 2 + 2));
            c[t] = malloc((size_t)(np / 2 + 2) * sizeof(sw_find_comp));
            lab[t] = malloc((size_t)np * sizeof(int32_t));
            assert_true(c[t] && lab[t]);
            label_frame(plan, s, &f, lab[t], c[t], np / 2 + 2, &n[t]);
            sw_find_destroy(plan);
            sw_context_destroy(ctx);
        }
        for (int t = 1; t < 3; t++) {
            assert_int_equal(n[t], n[0]);
            assert_memory_equal(lab[t], lab[0], (size_t)np * sizeof(int32_t));
            assert_memory_equal(c[t], c[0], (size_t)n[0] * sizeof(sw_find_comp));
        }
        /* the largest component spans every strip; its sums against long double ones */
        int64_t big = 0;
        for (int64_t k = 1; k < n[0]; k++)
            if (c[0][k].npix > c[0][big].npix)
                big = k;
        assert_true(c[0][big].y1 - c[0][big].y0 > 200);
        long double si = 0, sx = 0, sy = 0, sxx = 0, syy = 0;
        const int32_t root = (int32_t)c[0][big].root, rx = root % W, ry = root / W;
        for (int64_t i = 0; i < np; i++)
            if (lab[0][i] == root) {
                const long double v = ((uint32_t *)sw_image_row(&f, (int32_t)(i / W)))[i % W];
                const long double dx = (long double)(i % W - rx), dy = (long double)(i / W - ry);
                si += v;
                sx += v * dx;
                sy += v * dy;
                sxx += v * dx * dx;
                syy += v * dy * dy;
            }
        assert_near(c[0][big].sum_i, (double)si, 1e-11 * fabs((double)si));
        assert_near(c[0][big].sum_ix, (double)sx, 1e-11 * fabs((double)sxx));
        assert_near(c[0][big].sum_iy, (double)sy, 1e-11 * fabs((double)syy));
        assert_near(c[0][big].sum_ixx, (double)sxx, 1e-11 * fabs((double)sxx));
        assert_near(c[0][big].sum_iyy, (double)syy, 1e-11 * fabs((double)syy));
        for (int t = 0; t < 3; t++) {
            free(c[t]);
            free(lab[t]);
        }
    }
    sw_image_free(&f);
    free(s);
}

static void test_bad_input(void **state)
{
    (void)state;
    sw_find_plan *plan = make_plan(cpu, 8, 8, SW_PIX_U16, 4, 16);
    uint8_t s[64] = {0};
    int32_t labels[64];
    sw_find_comp c[16];
    int64_t n;
    sw_image f = value_frame(8, 8), g = value_frame(8, 7);
    assert_int_equal(sw_find_label_cpu(plan, NULL, &f, labels, c, 16, &n), SW_EINVAL);
    assert_int_equal(sw_find_label_cpu(plan, s, &g, labels, c, 16, &n), SW_EINVAL);
    assert_int_equal(sw_find_links_cpu(plan, labels, NULL, NULL, 0, &n), SW_EINVAL);
    sw_image_free(&f);
    sw_image_free(&g);
    sw_find_destroy(plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_and_spiral),
        cmocka_unit_test(test_diagonals),
        cmocka_unit_test(test_late_merges),
        cmocka_unit_test(test_tall),
        cmocka_unit_test(test_edges_and_singles),
        cmocka_unit_test(test_moments_by_hand),
        cmocka_unit_test(test_moments_across_strips),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_links),
        cmocka_unit_test(test_random_masks),
        cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
