/*
 * The find stage on the GPU (find_cuda.cu, find_threshold_cuda.cu, find_label_cuda.cu) against
 * the CPU (find.c and its CPU parts), one plan per backend from the same parameters, on the same
 * frames (rendered once on the CPU by the star simulator, seed 004):
 *   - star fields (u16, and f32 with NaN / Inf pixels, u8 and u32 copies), both algorithms, both
 *     GPU window sums (SW_FIND_WINDOW_BRUTE and TILED), 4- and 8-connectivity, a mask and a gain
 *     map, odd window sizes: the same spots (count, npix, bounding boxes, peaks exactly; x, y, z,
 *     variances and intensity within 1e-9 relative), the same stats and the same strong masks;
 *   - frames in host memory (plain and pinned) and in device memory (sw_image_alloc_device +
 *     sw_image_copy);
 *   - sw_find_sequence in 2-D and 3-D (a spot persisting over three frames, one in a single
 *     frame), with the strong masks handed to the callback;
 *   - max_strong_fraction (SW_ERANGE naming the frame) and frames that do not fit the plan.
 * Skips (77) when no GPU is usable.
 */
#include "find_testutil.h"
#include "testutil.h"

#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* ---------------------------------------------------------------- helpers */

static sw_image alloc_host(int32_t w, int32_t h, sw_pixel_type t)
{
    sw_image img;
    if (sw_image_alloc(NULL, w, h, t, &img) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(NULL));
    return img;
}

/* Stars over a Poisson sky (find_testutil.h star_frame_on), on the test's CPU context. */
static sw_image star_frame(int32_t w, int32_t h, const sw_stars *stars, double sigma, double sky,
                           uint64_t seed, sw_pixel_type t)
{
    return star_frame_on(cpu, w, h, stars, sigma, sky, seed, t);
}

/* n random stars (seed) with noise (noise_seed). */
static sw_image random_field2(int32_t w, int32_t h, int64_t n, uint64_t seed, uint64_t noise_seed,
                              sw_pixel_type t)
{
    sw_stars s;
    assert_int_equal(sw_stars_random(cpu, n, w, h, 4.0, 10.5, 1e6, 0.0, seed, &s), SW_OK);
    sw_image f = star_frame(w, h, &s, 1.25, 10.0, noise_seed, t);
    sw_stars_free(&s);
    return f;
}

static sw_image random_field(int32_t w, int32_t h, int64_t n, uint64_t seed, sw_pixel_type t)
{
    sw_stars s;
    assert_int_equal(sw_stars_random(cpu, n, w, h, 4.0, 10.5, 1e6, 0.0, seed, &s), SW_OK);
    sw_image f = star_frame(w, h, &s, 1.25, 10.0, seed + 1, t);
    sw_stars_free(&s);
    return f;
}

static sw_find_plan *make_plan(sw_context *ctx, const sw_find_params *p)
{
    sw_find_plan *plan = NULL;
    if (sw_find_create(ctx, p, &plan) != SW_OK)
        fail_msg("sw_find_create (%s): %s", sw_backend_string(sw_context_backend(ctx)),
                 sw_context_error(ctx));
    return plan;
}

static void run_frame(sw_context *ctx, sw_find_plan *plan, const sw_image *frame, int64_t z,
                      sw_spot_list *l, sw_image *strong, sw_find_stats *st)
{
    if (sw_find_run(plan, frame, z, l, strong, st) != SW_OK)
        fail_msg("sw_find_run (%s): %s", sw_backend_string(sw_context_backend(ctx)),
                 sw_context_error(ctx));
}

/* |a - b| <= 1e-9 relative (absolute below 1). */
static void assert_close(double a, double b, const char *what, int64_t i)
{
    if (!(fabs(a - b) <= 1e-9 * fmax(1.0, fmax(fabs(a), fabs(b)))))
        fail_msg("spot %lld: %s %.17g (CPU) vs %.17g (GPU)", (long long)i, what, a, b);
}

/* The CPU's spots (c) and the GPU's (g): the same list. */
static void compare_lists(const sw_spot_list *c, const sw_spot_list *g, const char *what)
{
    if (c->count != g->count)
        fail_msg("%s: %lld spots on the CPU, %lld on the GPU", what, (long long)c->count,
                 (long long)g->count);
    for (int64_t i = 0; i < c->count; i++) {
        const sw_spot *a = &c->spots[i], *b = &g->spots[i];
        if (a->npix != b->npix || a->x0 != b->x0 || a->x1 != b->x1 || a->y0 != b->y0 ||
            a->y1 != b->y1 || a->z0 != b->z0 || a->z1 != b->z1 || a->peak_x != b->peak_x ||
            a->peak_y != b->peak_y || a->peak_z != b->peak_z || a->peak != b->peak)
            fail_msg("%s: spot %lld: npix %lld/%lld, box [%d,%d)x[%d,%d)x[%lld,%lld) vs "
                     "[%d,%d)x[%d,%d)x[%lld,%lld), peak (%d,%d,%lld)=%g vs (%d,%d,%lld)=%g",
                     what, (long long)i, (long long)a->npix, (long long)b->npix, a->x0, a->x1,
                     a->y0, a->y1, (long long)a->z0, (long long)a->z1, b->x0, b->x1, b->y0, b->y1,
                     (long long)b->z0, (long long)b->z1, a->peak_x, a->peak_y, (long long)a->peak_z,
                     a->peak, b->peak_x, b->peak_y, (long long)b->peak_z, b->peak);
        assert_close(a->x, b->x, "x", i);
        assert_close(a->y, b->y, "y", i);
        assert_close(a->z, b->z, "z", i);
        assert_close(a->intensity, b->intensity, "intensity", i);
        assert_close(a->x_var, b->x_var, "x_var", i);
        assert_close(a->y_var, b->y_var, "y_var", i);
        assert_close(a->z_var, b->z_var, "z_var", i);
    }
}

static void compare_stats(const sw_find_stats *a, const sw_find_stats *b, const char *what)
{
    if (memcmp(a, b, sizeof *a) != 0)
        fail_msg("%s: stats differ: frames %lld/%lld valid %lld/%lld strong %lld/%lld components "
                 "%lld/%lld spots %lld/%lld rejected %lld,%lld,%lld / %lld,%lld,%lld",
                 what, (long long)a->frames, (long long)b->frames, (long long)a->valid_pixels,
                 (long long)b->valid_pixels, (long long)a->strong_pixels,
                 (long long)b->strong_pixels, (long long)a->components, (long long)b->components,
                 (long long)a->spots, (long long)b->spots, (long long)a->rejected_small,
                 (long long)a->rejected_large, (long long)a->rejected_separation,
                 (long long)b->rejected_small, (long long)b->rejected_large,
                 (long long)b->rejected_separation);
}

static void compare_masks(const sw_image *a, const sw_image *b, const char *what)
{
    if (sw_image_equal(a, b))
        return;
    int64_t n = 0;
    for (int32_t y = 0; y < a->height; y++)
        for (int32_t x = 0; x < a->width; x++)
            n += sw_image_get(a, x, y) != sw_image_get(b, x, y);
    fail_msg("%s: the strong masks differ in %lld pixels", what, (long long)n);
}

static const sw_find_algorithm ALGOS[2] = {SW_FIND_DISPERSION, SW_FIND_DISPERSION_EXTENDED};
static const sw_find_window WINDOWS[3] = {SW_FIND_WINDOW_BRUTE, SW_FIND_WINDOW_TILED,
                                          SW_FIND_WINDOW_AUTO};

static const char *window_name(sw_find_window w)
{
    return w == SW_FIND_WINDOW_BRUTE ? "brute" : w == SW_FIND_WINDOW_TILED ? "tiled" : "auto";
}

/*
 * One frame through the CPU and through the GPU with every window implementation, as a host
 * frame (plain), a pinned host frame and a device frame: the same spots, stats and masks.
 */
static void check_frame(const sw_find_params *p0, const sw_image *frame, const char *label)
{
    const int32_t w = frame->width, h = frame->height;
    sw_find_params p = *p0;
    p.width = w;
    p.height = h;
    p.type = frame->type;

    sw_find_plan *cp = make_plan(cpu, &p);
    sw_spot_list ref = {0};
    sw_find_stats ref_st = {0};
    sw_image ref_mask = alloc_host(w, h, SW_PIX_U8);
    run_frame(cpu, cp, frame, 3, &ref, &ref_mask, &ref_st);
    sw_find_destroy(cp);

    sw_image pinned, dev;
    assert_int_equal(sw_image_alloc(gpu, w, h, frame->type, &pinned), SW_OK);
    assert_int_equal(sw_image_copy(gpu, frame, &pinned), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, w, h, frame->type, &dev), SW_OK);
    assert_int_equal(sw_image_copy(gpu, frame, &dev), SW_OK);
    const sw_image *inputs[3] = {frame, &pinned, &dev};
    const char *input_names[3] = {"host", "pinned", "device"};

    for (int wi = 0; wi < 3; wi++) {
        p.window = WINDOWS[wi];
        sw_find_plan *gp = make_plan(gpu, &p);
        for (int k = 0; k < 3; k++) {
            char what[256];
            snprintf(what, sizeof what, "%s, %s, window %s, %d-connected, %s frame", label,
                     sw_find_algorithm_string(p.algorithm), window_name(p.window), p.connectivity,
                     input_names[k]);
            sw_spot_list got = {0};
            sw_find_stats st = {0};
            sw_image mask = alloc_host(w, h, SW_PIX_U8);
            memset(mask.data, 0xAB, mask.stride * (size_t)h);
            run_frame(gpu, gp, inputs[k], 3, &got, &mask, &st);
            compare_masks(&ref_mask, &mask, what);
            compare_stats(&ref_st, &st, what);
            compare_lists(&ref, &got, what);
            /* Again on the same plan, without a mask and stats: the same spots. */
            sw_spot_list got2 = {0};
            run_frame(gpu, gp, inputs[k], 3, &got2, NULL, NULL);
            strncat(what, ", run again", sizeof what - strlen(what) - 1);
            compare_lists(&ref, &got2, what);
            sw_spot_list_free(&got);
            sw_spot_list_free(&got2);
            sw_image_free(&mask);
        }
        sw_find_destroy(gp);
    }
    sw_image_free(&pinned);
    sw_image_free(&dev);
    sw_image_free(&ref_mask);
    sw_spot_list_free(&ref);
}

/* ---------------------------------------------------------------- single frames */

/* The planted star field of the CPU tests (512 x 512, u16), every configuration. */
static void test_star_field(void **state)
{
    (void)state;
    sw_image f = random_field(512, 512, 120, 102, SW_PIX_U16);
    for (int a = 0; a < 2; a++)
        for (int conn = 4; conn <= 8; conn += 4) {
            sw_find_params p;
            sw_find_params_default(&p, 512, 512, SW_PIX_U16);
            p.algorithm = ALGOS[a];
            p.connectivity = conn;
            check_frame(&p, &f, "star field");
        }
    sw_image_free(&f);
}

/*
 * Odd sizes (not a multiple of any tile), odd windows, the whole window as min_local, a global
 * threshold, a mask and a varying gain map, sigmas other than the defaults, filters off; and
 * kernels at the largest half-size.
 */
static void test_odd_params(void **state)
{
    (void)state;
    const int32_t w = 333, h = 171;
    sw_image f = random_field(w, h, 60, 301, SW_PIX_U16);
    uint8_t *mask = malloc((size_t)w * h);
    float *gm = malloc((size_t)w * h * sizeof(float));
    assert_non_null(mask);
    assert_non_null(gm);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            mask[(size_t)y * w + x] = !(x == 100 || (x > 10 && x < 14 && y > 60 && y < 90));
            gm[(size_t)y * w + x] = 0.8f + 0.4f * (float)((x * 31 + y * 17) % 97) / 97.0f;
        }
    const int32_t kernels[4][2] = {{2, 4}, {1, 1}, {5, 2}, {SW_FIND_MAX_KERNEL, 3}};
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 4; k++) {
            sw_find_params p;
            sw_find_params_default(&p, w, h, SW_PIX_U16);
            p.algorithm = ALGOS[a];
            p.kernel_x = kernels[k][0];
            p.kernel_y = kernels[k][1];
            p.min_local = k == 0 ? 0 : 2;
            p.sigma_background = k == 1 ? 3.0 : 4.5;
            p.sigma_strong = 2.5;
            p.global_threshold = k == 2 ? 15.0 : 0.0;
            p.mask = mask;
            p.gain_map = k % 2 == 0 ? gm : NULL;
            p.gain = 1.1;
            p.connectivity = k % 2 == 0 ? 8 : 4;
            p.min_spot_size = k == 3 ? 0 : 2;
            p.max_spot_size = 0;
            p.max_separation = 0;
            p.max_strong_fraction = 0;
            check_frame(&p, &f, "odd parameters");
        }
    free(mask);
    free(gm);
    sw_image_free(&f);
}

/* u8, u32 and f32 frames (f32 with NaN and +-Inf pixels, over a bright star too; values off
 * whole counts, which are rounded); saturated pixels; an all-zero frame; hand-made spots at the
 * frame's corners and edges. */
static void test_types_and_edges(void **state)
{
    (void)state;
    const int32_t w = 200, h = 150;
    sw_image u16 = random_field(w, h, 50, 401, SW_PIX_U16);
    sw_image u32 = alloc_host(w, h, SW_PIX_U32);
    sw_image f32 = alloc_host(w, h, SW_PIX_F32);
    sw_image u8 = alloc_host(w, h, SW_PIX_U8);
    assert_int_equal(sw_image_convert(cpu, &u16, &u32, 1.0, 0.0, NULL), SW_OK);
    assert_int_equal(sw_image_convert(cpu, &u16, &f32, 1.0, 0.3, NULL), SW_OK);
    assert_int_equal(sw_image_convert(cpu, &u16, &u8, 0.25, 0.0, NULL), SW_OK);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++)
            if (x == 77 || (x * 7 + y * 13) % 41 == 0)
                set_px(&f32, x, y,
                       (x + y) % 3 == 0   ? INFINITY
                       : (x + y) % 3 == 1 ? -INFINITY
                                          : NAN);
    /* Saturated pixels and spots touching the corners and edges of the u16 frame. */
    set_px(&u16, 40, 40, 65535);
    set_px(&u16, 41, 40, 65534);
    const int32_t spots[6][2] = {{0, 0},         {w - 1, 0}, {0, h - 1},
                                 {w - 1, h - 1}, {w / 2, 0}, {0, h / 2}};
    for (int k = 0; k < 6; k++)
        for (int dy = -1; dy <= 1; dy++)
            for (int dx = -1; dx <= 1; dx++) {
                int32_t x = spots[k][0] + dx, y = spots[k][1] + dy;
                if (x >= 0 && y >= 0 && x < w && y < h)
                    set_px(&u16, x, y, dx == 0 && dy == 0 ? 3000 : 1500);
            }
    sw_image zero = alloc_host(w, h, SW_PIX_U16);
    const sw_image *frames[5] = {&u16, &u32, &f32, &u8, &zero};
    const char *names[5] = {"u16 with edges", "u32", "f32 with NaN", "u8", "zero"};
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 5; k++) {
            sw_find_params p;
            sw_find_params_default(&p, w, h, frames[k]->type);
            p.algorithm = ALGOS[a];
            p.connectivity = k % 2 ? 8 : 4;
            p.min_spot_size = 1;
            check_frame(&p, frames[k], names[k]);
        }
    sw_image_free(&u16);
    sw_image_free(&u32);
    sw_image_free(&f32);
    sw_image_free(&u8);
    sw_image_free(&zero);
}

/* ---------------------------------------------------------------- sequences */

typedef struct seq_source {
    const sw_image *frames; /* frames[index - base] */
    int64_t base, nframes;
    int64_t nstrong;
    sw_image masks[8];
    int64_t mask_index[8];
    int64_t nprogress, last_done;
} seq_source;

static sw_status seq_read(void *user, int64_t index, sw_image *dst)
{
    seq_source *s = user;
    if (index < s->base || index >= s->base + s->nframes)
        return sw_error_set(NULL, SW_EINVAL, "test source: frame %lld was not asked for",
                            (long long)index);
    const sw_image *src = &s->frames[index - s->base];
    if (dst->width != src->width || dst->height != src->height || dst->type != src->type ||
        dst->memory == SW_MEM_DEVICE)
        return sw_error_set(NULL, SW_EINVAL, "test source: destination of the wrong kind");
    size_t row = (size_t)src->width * sw_pixel_size(src->type);
    for (int32_t y = 0; y < src->height; y++)
        memcpy(sw_image_row(dst, y), sw_image_row(src, y), row);
    return SW_OK;
}

static sw_status seq_strong(void *user, int64_t index, const sw_image *mask)
{
    seq_source *s = user;
    if (mask->memory == SW_MEM_DEVICE || mask->type != SW_PIX_U8)
        return sw_error_set(NULL, SW_EINVAL, "test sink: the mask is not a host u8 image");
    if (s->nstrong < 8) {
        sw_image *c = &s->masks[s->nstrong];
        s->mask_index[s->nstrong] = index;
        if (sw_image_alloc(NULL, mask->width, mask->height, SW_PIX_U8, c) != SW_OK ||
            sw_image_copy(NULL, mask, c) != SW_OK)
            return sw_error_set(NULL, SW_ENOMEM, "test sink: copy failed");
    }
    s->nstrong++;
    return SW_OK;
}

static void seq_progress(void *user, int64_t done, int64_t total)
{
    seq_source *s = user;
    (void)total;
    s->nprogress++;
    s->last_done = done;
}

static void seq_free(seq_source *s)
{
    for (int i = 0; i < 8; i++)
        sw_image_free(&s->masks[i]);
}

/* A sequence on both backends: the same spots, stats and masks. */
static void check_sequence(const sw_find_params *p, const sw_image *frames, int64_t n, int64_t base,
                           int three_d, const char *label)
{
    sw_spot_list ref = {0}, got = {0};
    sw_find_stats ref_st = {0}, st = {0};
    seq_source cs = {.frames = frames, .base = base, .nframes = n};
    seq_source gs = {.frames = frames, .base = base, .nframes = n};
    sw_find_source csrc = {seq_read, seq_strong, seq_progress, &cs};
    sw_find_source gsrc = {seq_read, seq_strong, seq_progress, &gs};
    sw_find_plan *cp = make_plan(cpu, p);
    if (sw_find_sequence(cp, base, n, &csrc, three_d, &ref, &ref_st) != SW_OK)
        fail_msg("%s: CPU sequence: %s", label, sw_context_error(cpu));
    sw_find_destroy(cp);
    sw_find_plan *gp = make_plan(gpu, p);
    if (sw_find_sequence(gp, base, n, &gsrc, three_d, &got, &st) != SW_OK)
        fail_msg("%s: GPU sequence: %s", label, sw_context_error(gpu));
    char what[256];
    snprintf(what, sizeof what, "%s, %s, window %s, %d-connected, %s", label,
             sw_find_algorithm_string(p->algorithm), window_name(p->window), p->connectivity,
             three_d ? "3-D" : "2-D");
    compare_lists(&ref, &got, what);
    compare_stats(&ref_st, &st, what);
    assert_int_equal(gs.nstrong, n);
    assert_int_equal(gs.nprogress, n);
    assert_int_equal(gs.last_done, n);
    for (int64_t i = 0; i < n && i < 8; i++) {
        assert_int_equal(gs.mask_index[i], base + i);
        compare_masks(&cs.masks[i], &gs.masks[i], what);
    }
    /* 2-D: the GPU sequence equals the GPU frame by frame. */
    if (!three_d) {
        sw_spot_list one = {0};
        for (int64_t i = 0; i < n; i++)
            run_frame(gpu, gp, &frames[i], base + i, &one, NULL, NULL);
        compare_lists(&ref, &one, what);
        sw_spot_list_free(&one);
    }
    sw_find_destroy(gp);
    seq_free(&cs);
    seq_free(&gs);
    sw_spot_list_free(&ref);
    sw_spot_list_free(&got);
}

static void test_sequences(void **state)
{
    (void)state;
    /* Star fields: frames 0-2 the same stars (which join in 3-D) with different noise, then
     * two other fields. */
    const int32_t w = 256, h = 192;
    enum { N = 5 };
    sw_image frames[N];
    for (int i = 0; i < N; i++)
        frames[i] = random_field2(w, h, 40, i < 3 ? 500 : 510 + i, 520 + i, SW_PIX_U16);
    /* 3-D scene: A in frames 1-3, B in frame 2 only, on noise (as in the CPU test). */
    sw_image scene[6];
    for (int i = 0; i < 6; i++) {
        sw_stars s;
        assert_int_equal(sw_stars_alloc(cpu, 2, &s), SW_OK);
        s.x[0] = 20.3, s.y[0] = 30.6, s.flux[0] = (i >= 1 && i <= 3) ? 5000.0 : 0.0;
        s.x[1] = 45.2, s.y[1] = 12.7, s.flux[1] = i == 2 ? 5000.0 : 0.0;
        scene[i] = star_frame(64, 64, &s, 1.2, 10.0, 900 + i, SW_PIX_U16);
        sw_stars_free(&s);
    }
    for (int a = 0; a < 2; a++)
        for (int wi = 0; wi < 2; wi++)
            for (int conn = 4; conn <= 8; conn += 4) {
                sw_find_params p;
                sw_find_params_default(&p, w, h, SW_PIX_U16);
                p.algorithm = ALGOS[a];
                p.window = WINDOWS[wi];
                p.connectivity = conn;
                check_sequence(&p, frames, N, 20, 0, "star fields");
                check_sequence(&p, frames, N, 20, 1, "star fields");
                sw_find_params q = p;
                q.width = q.height = 64;
                check_sequence(&q, scene, 6, 0, 0, "3-D scene");
                check_sequence(&q, scene, 6, 0, 1, "3-D scene");
            }
    /* The 3-D scene on the GPU by itself: A spans [1, 4), B [2, 3). */
    sw_find_params p;
    sw_find_params_default(&p, 64, 64, SW_PIX_U16);
    sw_find_plan *gp = make_plan(gpu, &p);
    seq_source s = {.frames = scene, .base = 0, .nframes = 6};
    sw_find_source src = {seq_read, NULL, NULL, &s};
    sw_spot_list l = {0};
    assert_int_equal(sw_find_sequence(gp, 0, 6, &src, 1, &l, NULL), SW_OK);
    assert_int_equal(l.count, 2);
    assert_int_equal(l.spots[0].z0, 1);
    assert_int_equal(l.spots[0].z1, 4);
    assert_near(l.spots[0].z, 2.0, 0.05);
    assert_int_equal(l.spots[1].z0, 2);
    assert_int_equal(l.spots[1].z1, 3);
    sw_spot_list_free(&l);
    assert_int_equal(sw_find_sequence(gp, 0, 6, &src, 0, &l, NULL), SW_OK);
    assert_int_equal(l.count, 4);
    sw_spot_list_free(&l);
    sw_find_destroy(gp);
    for (int i = 0; i < N; i++)
        sw_image_free(&frames[i]);
    for (int i = 0; i < 6; i++)
        sw_image_free(&scene[i]);
}

/* ---------------------------------------------------------------- errors */

static void test_errors(void **state)
{
    (void)state;
    const int32_t w = 96, h = 80;
    /* Bright texture everywhere: SW_ERANGE naming the frame, on both backends. */
    sw_image tex = alloc_host(w, h, SW_PIX_U16);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            sw_rng4 r = sw_rng_draw(77, SW_RNG_STREAM_TEST, (uint64_t)(y * w + x));
            set_px(&tex, x, y, (double)(r.v[0] % 60001u));
        }
    sw_image dev;
    assert_int_equal(sw_image_alloc_device(gpu, w, h, SW_PIX_U16, &dev), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &tex, &dev), SW_OK);
    for (int a = 0; a < 2; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, SW_PIX_U16);
        p.algorithm = ALGOS[a];
        sw_find_plan *gp = make_plan(gpu, &p);
        sw_spot_list l = {0};
        for (int k = 0; k < 2; k++) {
            assert_int_equal(sw_find_run(gp, k ? &dev : &tex, 7, &l, NULL, NULL), SW_ERANGE);
            if (!strstr(sw_context_error(gpu), "frame 7 "))
                fail_msg("the message does not name frame 7: %s", sw_context_error(gpu));
            assert_int_equal(l.count, 0);
        }
        /* The plan still works after the error: a star field gives the CPU's spots. */
        sw_image f = random_field(w, h, 10, 600, SW_PIX_U16);
        sw_find_plan *cp = make_plan(cpu, &p);
        sw_spot_list ref = {0}, got = {0};
        run_frame(cpu, cp, &f, 0, &ref, NULL, NULL);
        run_frame(gpu, gp, &f, 0, &got, NULL, NULL);
        compare_lists(&ref, &got, "after SW_ERANGE");
        sw_spot_list_free(&ref);
        sw_spot_list_free(&got);
        sw_find_destroy(cp);
        sw_image_free(&f);

        /* Frames that do not fit: SW_EINVAL, nothing appended. */
        sw_image small_dev, wrong_type;
        assert_int_equal(sw_image_alloc_device(gpu, w - 1, h, SW_PIX_U16, &small_dev), SW_OK);
        assert_int_equal(sw_image_alloc_device(gpu, w, h, SW_PIX_U8, &wrong_type), SW_OK);
        assert_int_equal(sw_find_run(gp, &small_dev, 0, &l, NULL, NULL), SW_EINVAL);
        assert_int_equal(sw_find_run(gp, &wrong_type, 0, &l, NULL, NULL), SW_EINVAL);
        sw_image mask_dev;
        assert_int_equal(sw_image_alloc_device(gpu, w, h, SW_PIX_U8, &mask_dev), SW_OK);
        assert_int_equal(sw_find_run(gp, &dev, 0, &l, &mask_dev, NULL), SW_EINVAL);
        assert_int_equal(l.count, 0);
        sw_image_free(&small_dev);
        sw_image_free(&wrong_type);
        sw_image_free(&mask_dev);
        sw_find_destroy(gp);
    }
    /* A device frame on a CPU plan: SW_EINVAL. */
    sw_find_params p;
    sw_find_params_default(&p, w, h, SW_PIX_U16);
    sw_find_plan *cp = make_plan(cpu, &p);
    sw_spot_list l = {0};
    assert_int_equal(sw_find_run(cp, &dev, 0, &l, NULL, NULL), SW_EINVAL);
    sw_find_destroy(cp);
    sw_image_free(&dev);
    sw_image_free(&tex);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_star_field),      cmocka_unit_test(test_odd_params),
        cmocka_unit_test(test_types_and_edges), cmocka_unit_test(test_sequences),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
