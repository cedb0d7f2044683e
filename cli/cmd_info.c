/*
 * spotwave info: versions, build, backends, and the device the context actually gets.
 */
#define _GNU_SOURCE

#include "cli.h"
#include "cli_mpi.h"
#include "json.h"

#include <getopt.h>
#include <string.h>

#define SUB "info"

void sw_cmd_info_help(FILE *out)
{
    fprintf(out,
            "Usage: spotwave [GLOBAL OPTIONS] info [--json]\n"
            "\n"
            "Prints the spotwave version and build, whether CUDA is built in, how many CUDA\n"
            "devices are usable, the backend the global options give (and why), and for CUDA the\n"
            "device: name, memory total/free, compute capability, multiprocessors, driver and\n"
            "runtime versions, and the image formats the commands read. Fails (exit 1) when the "
            "requested backend is not usable, e.g.\n"
            "'spotwave --backend cuda info' on a machine without a GPU.\n"
            "\n"
            "Options:\n"
            "  --json       print a JSON object instead of text\n"
            "  -h, --help   print this help and exit\n");
}

/* The image formats the commands read (find, pupil, aberrometry, centroid), by their first
 * bytes: name, what reads it, what it gives beyond pixels. */
static const struct {
    const char *name, *reader, *notes;
} formats[] = {
    {"FITS", "cfitsio", "2-D images and cubes; .gz and tile-compressed .fz too"},
    {"PGM", "spotwave", "binary P5, 8/16-bit"},
    {"CBF", "CBFlib, in a child process",
     "imgCIF/CBF one frame per file (Pilatus); the mini-header's geometry; negative pixels masked"},
    {"TIFF", "libtiff", "8/16/32-bit unsigned and 32-bit float, every page a frame"},
    {"HDF5", "HDF5, walked in a child process; spotwave's chunk decoders",
     "Eiger/NeXus NXmx masters and data files; the NXmx geometry, pixel mask and overload"},
};

/* 12080 -> "12.8"; 0 -> "none". */
static void cuda_version_text(int v, char *buf, size_t size)
{
    if (v <= 0)
        snprintf(buf, size, "none");
    else
        snprintf(buf, size, "%d.%d", v / 1000, (v % 1000) / 10);
}

static double gib(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

typedef struct info_report {
    const char *version;
    const char *build;
    int cuda_built;
    int cuda_devices;
    const char *mpi; /* the MPI library the command was built with, or NULL */
    char nccl[64];   /* NCCL's version (sw_rtc_multi), empty in a build without NCCL */
    char cpu[256];
    int threads;
    sw_backend requested;
    sw_backend backend;
    const char *reason;
    int have_device;
    sw_device_info dev;
    char data_dir[4096]; /* sw_data_dir, or why it was not found */
} info_report;

static void print_text(const info_report *r)
{
    char drv[32], rt[32];
    printf("spotwave %s\n", r->version);
    printf("build:         %s\n", r->build);
    printf("CUDA support:  %s\n", r->cuda_built ? "yes" : "no (CPU-only build)");
    printf("CUDA devices:  %d\n", r->cuda_devices);
    printf("MPI support:   %s\n", r->mpi ? r->mpi : "no (built without MPI)");
    if (r->nccl[0])
        printf("NCCL support:  yes (NCCL %s: the real-time chain over several GPUs)\n", r->nccl);
    else
        printf("NCCL support:  no (built without NCCL)\n");
    printf("CPU:           %s (%d thread%s used)\n", r->cpu, r->threads,
           r->threads == 1 ? "" : "s");
    printf("backend:       %s (requested: %s)\n", sw_backend_string(r->backend),
           sw_backend_string(r->requested));
    printf("reason:        %s\n", r->reason);
    printf("data files:    %s\n", r->data_dir);
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        printf("%-15s%s (%s): %s\n", i == 0 ? "image formats:" : "", formats[i].name,
               formats[i].reader, formats[i].notes);
    if (r->have_device) {
        const sw_device_info *d = &r->dev;
        cuda_version_text(d->driver_version, drv, sizeof drv);
        cuda_version_text(d->runtime_version, rt, sizeof rt);
        printf("device:        %d: %s\n", d->ordinal, d->name);
        printf("memory:        %.2f GiB total, %.2f GiB free\n", gib(d->total_memory),
               gib(d->free_memory));
        printf("compute:       capability %d.%d, %d multiprocessors\n", d->cc_major, d->cc_minor,
               d->multiprocessors);
        printf("CUDA versions: driver %s, runtime %s\n", drv, rt);
    }
}

static void print_json(const info_report *r)
{
    char drv[32], rt[32], cc[32];
    cJSON *j = cJSON_CreateObject();
    sw_cli_json_string(j, "version", r->version);
    sw_cli_json_string(j, "build", r->build);
    cJSON_AddBoolToObject(j, "cuda_built", r->cuda_built);
    sw_cli_json_int(j, "cuda_devices", r->cuda_devices);
    sw_cli_json_string(j, "mpi", r->mpi);
    sw_cli_json_string(j, "nccl", r->nccl[0] ? r->nccl : NULL);
    sw_cli_json_string(j, "cpu", r->cpu);
    sw_cli_json_int(j, "threads", r->threads);
    sw_cli_json_string(j, "backend_requested", sw_backend_string(r->requested));
    sw_cli_json_string(j, "backend", sw_backend_string(r->backend));
    sw_cli_json_string(j, "backend_reason", r->reason);
    sw_cli_json_string(j, "data_dir", r->data_dir);
    cJSON *fmts = cJSON_AddArrayToObject(j, "image_formats");
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        cJSON *f = cJSON_CreateObject();
        sw_cli_json_string(f, "name", formats[i].name);
        sw_cli_json_string(f, "reader", formats[i].reader);
        sw_cli_json_string(f, "notes", formats[i].notes);
        cJSON_AddItemToArray(fmts, f);
    }
    if (!r->have_device) {
        cJSON_AddNullToObject(j, "device");
    } else {
        const sw_device_info *d = &r->dev;
        cuda_version_text(d->driver_version, drv, sizeof drv);
        cuda_version_text(d->runtime_version, rt, sizeof rt);
        snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
        cJSON *dev = cJSON_AddObjectToObject(j, "device");
        sw_cli_json_int(dev, "ordinal", d->ordinal);
        sw_cli_json_string(dev, "name", d->name);
        sw_cli_json_int(dev, "memory_total_bytes", (int64_t)d->total_memory);
        sw_cli_json_int(dev, "memory_free_bytes", (int64_t)d->free_memory);
        sw_cli_json_fixed(dev, "memory_total_gib", gib(d->total_memory), 3);
        sw_cli_json_fixed(dev, "memory_free_gib", gib(d->free_memory), 3);
        sw_cli_json_string(dev, "compute_capability", cc);
        sw_cli_json_int(dev, "multiprocessors", d->multiprocessors);
        sw_cli_json_string(dev, "driver_version", drv);
        sw_cli_json_string(dev, "runtime_version", rt);
    }
    sw_cli_json_print(j);
}

int sw_cmd_info(const sw_cli_globals *g, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int json = 0, c;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(SUB, argc, argv, "h", longopts)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'h': sw_cmd_info_help(stdout); return SW_EXIT_OK;
        default: return SW_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return sw_cli_usage(SUB, "unexpected argument '%s'", argv[optind]);

    sw_context *ctx = NULL;
    int rc = sw_cli_context(g, SUB, &ctx);
    if (rc != SW_EXIT_OK)
        return rc;

    info_report r;
    memset(&r, 0, sizeof r);
    r.version = sw_version();
    r.build = sw_build_info();
    r.cuda_built = sw_built_with_cuda();
    r.cuda_devices = sw_cuda_device_count();
    r.mpi = sw_cli_mpi_library();
    const int nccl = sw_nccl_version();
    if (nccl >
        0) /* NCCL_VERSION(X, Y, Z) = X 10000 + Y 100 + Z from 2.9 on, X 1000 + Y 100 + Z before */
        snprintf(r.nccl, sizeof r.nccl, "%d.%d.%d", nccl >= 20900 ? nccl / 10000 : nccl / 1000,
                 nccl >= 20900 ? nccl / 100 % 100 : nccl / 100 % 10, nccl % 100);
    sw_cpu_name(r.cpu, sizeof r.cpu);
    r.threads = sw_context_threads(ctx);
    r.requested = g->backend;
    r.backend = sw_context_backend(ctx);
    r.reason = sw_context_backend_reason(ctx);
    if (sw_data_dir(ctx, r.data_dir, sizeof r.data_dir) != SW_OK)
        snprintf(r.data_dir, sizeof r.data_dir, "not found: %s", sw_context_error(ctx));
    if (r.backend == SW_BACKEND_CUDA) {
        sw_status st = sw_context_device_info(ctx, &r.dev);
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "cannot query the CUDA device: %s", sw_context_error(ctx));
            sw_context_destroy(ctx);
            return rc;
        }
        r.have_device = 1;
    }
    if (json)
        print_json(&r);
    else
        print_text(&r);
    sw_context_destroy(ctx);
    return SW_EXIT_OK;
}
