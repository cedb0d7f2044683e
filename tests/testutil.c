#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include "spotwave/rng.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[512];

static void remove_tmpdir(void)
{
    if (tmpdir[0]) {
        char cmd[1100];
        /* chmod first: read-only directories (sw_test_readonly_dir) would keep their files */
        snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' && rm -rf '%s'", tmpdir, tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    }
}

const char *sw_test_tmpdir(void)
{
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/spotwave-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(remove_tmpdir);
    }
    return tmpdir;
}

const char *sw_test_path(const char *name)
{
    static char buf[8][768];
    static int next;
    char *p = buf[next];
    next = (next + 1) % 8;
    snprintf(p, sizeof buf[0], "%s/%s", sw_test_tmpdir(), name);
    return p;
}

void sw_test_fill_random(sw_image *img, uint64_t seed)
{
    for (int32_t y = 0; y < img->height; y++) {
        void *row = sw_image_row(img, y);
        for (int32_t x = 0; x < img->width; x++) {
            sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_TEST, (uint64_t)y * img->width + x);
            switch (img->type) {
            case SW_PIX_U8: ((uint8_t *)row)[x] = (uint8_t)r.v[0]; break;
            case SW_PIX_U16: ((uint16_t *)row)[x] = (uint16_t)r.v[0]; break;
            case SW_PIX_U32: ((uint32_t *)row)[x] = r.v[0]; break;
            case SW_PIX_F32:
                ((float *)row)[x] = (float)(sw_rng_u01(r.v[0], r.v[1]) * 2e4 - 1e4);
                break;
            }
        }
    }
}

sw_context *sw_test_cpu_context(int threads)
{
    sw_context_params p;
    sw_context_params_default(&p);
    p.backend = SW_BACKEND_CPU;
    p.threads = threads;
    sw_context *ctx = NULL;
    if (sw_context_create(&p, &ctx) != SW_OK) {
        printf("cannot create a CPU context: %s\n", sw_context_error(NULL));
        exit(1);
    }
    return ctx;
}

sw_context *sw_test_cuda_context_or_skip(void)
{
    sw_context_params p;
    sw_context_params_default(&p);
    p.backend = SW_BACKEND_CUDA;
    sw_context *ctx = NULL;
    if (sw_context_create(&p, &ctx) != SW_OK) {
        printf("SKIP: no usable GPU: %s\n", sw_context_error(NULL));
        exit(77);
    }
    return ctx;
}

void sw_test_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (size)
        assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

sw_image sw_test_random_image(int32_t w, int32_t h, sw_pixel_type t, uint64_t seed)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, w, h, t, &img), SW_OK);
    sw_test_fill_random(&img, seed);
    return img;
}

void *sw_test_read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *size = (size_t)n;
    return buf;
}

int sw_test_file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

const char *sw_test_readonly_dir(const char *name)
{
    if (geteuid() == 0)
        return NULL;
    const char *path = sw_test_path(name);
    assert_int_equal(mkdir(path, 0555), 0);
    return path;
}

int sw_test_count_temp_files(void)
{
    DIR *d = opendir(sw_test_tmpdir());
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp."))
            n++;
    closedir(d);
    return n;
}
