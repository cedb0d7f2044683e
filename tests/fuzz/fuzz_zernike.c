/*
 * libFuzzer target: the Zernike coefficient CSV reader (sw_zernike_read_csv). Invariants: a
 * failure leaves the coefficients zeroed; a success has 1 <= count, a count that is OSA index of
 * an order up to SW_ZERNIKE_MAX_ORDER, and finite values.
 */
#include "fuzz_common.h"
#include "spotwave/spotwave.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_file("z.csv", data, size, path, sizeof path);
    sw_zernike_coefs z;
    memset(&z, 0x5A, sizeof z);
    sw_status st = sw_zernike_read_csv(NULL, path, &z);
    if (st != SW_OK) {
        if (z.count != 0 || z.coef_um)
            abort();
        if (st != SW_EFORMAT && st != SW_EIO && st != SW_ENOMEM)
            abort();
        return 0;
    }
    const int32_t most = (SW_ZERNIKE_MAX_ORDER + 1) * (SW_ZERNIKE_MAX_ORDER + 2) / 2;
    if (z.count < 1 || z.count > most || !z.coef_um)
        abort();
    for (int32_t j = 0; j < z.count; j++)
        if (!isfinite(z.coef_um[j]))
            abort();
    sw_zernike_coefs_free(&z);
    return 0;
}
