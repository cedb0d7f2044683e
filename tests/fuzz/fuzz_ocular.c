/*
 * libFuzzer target: the ocular population files (sw_ocular_population_load): the input split in
 * two (fuzz_common.h), thibos2002_pupil6.0mm_stats.csv then ..._cov.csv, in a folder of their
 * own. Invariants: a failure leaves the population zeroed; a success has count terms, finite
 * means, sd >= 0, a symmetric covariance and a lower-triangular factor L with L L^T = cov.
 */
#include "fuzz_common.h"
#include "spotwave/spotwave.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    fuzz_split(data, size, 2, part, len);
    char path[1024];
    fuzz_file("thibos2002_pupil6.0mm_stats.csv", part[0], len[0], path, sizeof path);
    fuzz_file("thibos2002_pupil6.0mm_cov.csv", part[1], len[1], path, sizeof path);
    sw_ocular_population p;
    memset(&p, 0x5A, sizeof p);
    sw_status st = sw_ocular_population_load(NULL, fuzz_dir(), 6.0, &p);
    if (st != SW_OK) {
        if (p.count != 0 || p.mean_um || p.sd_um || p.cov_um2 || p.chol)
            abort();
        if (st != SW_EFORMAT && st != SW_EIO && st != SW_ENOMEM)
            abort();
        return 0;
    }
    const int32_t n = p.count;
    if (n < 1 || !p.mean_um || !p.sd_um || !p.cov_um2 || !p.chol)
        abort();
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(p.mean_um[i]) || !(p.sd_um[i] >= 0.0))
            abort();
        for (int32_t j = 0; j < n; j++) {
            double c = p.cov_um2[(size_t)i * n + j];
            if (!isfinite(c) ||
                fabs(c - p.cov_um2[(size_t)j * n + i]) > 1e-9 * (fabs(c) + 1e-300) * 10)
                abort();
            if (j > i && p.chol[(size_t)i * n + j] != 0.0)
                abort();
            double llt = 0.0;
            for (int32_t k = 0; k <= (i < j ? i : j); k++)
                llt += p.chol[(size_t)i * n + k] * p.chol[(size_t)j * n + k];
            if (!(fabs(llt - c) <=
                  1e-6 * (fabs(p.cov_um2[(size_t)i * n + i]) + fabs(p.cov_um2[(size_t)j * n + j])) +
                      1e-12))
                abort();
        }
    }
    sw_ocular_population_free(&p);
    return 0;
}
