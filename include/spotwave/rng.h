/*
 * spotwave RNG: a counter-based generator (Random123's Philox4x32-10) that gives the same
 * numbers from C on the host and from CUDA kernels, so a seed gives the same noise on the CPU and
 * on the GPU.
 *
 * Paper: Salmon J. K., Moraes M. A., Dror R. O., Shaw D. E. 2011, "Parallel random numbers: as
 * easy as 1, 2, 3", SC'11 (Philox).
 *
 * A random draw is a pure function of (seed, stream, index):
 *   seed   - the user's seed (64 bits, the Philox key);
 *   stream - what the numbers are for (e.g. SW_RNG_STREAM_PIXEL_NOISE), 64 bits;
 *   index  - which element (pixel, star, frame...), 64 bits.
 * Each call returns four independent 32-bit words; no state is carried, so any thread can draw
 * its own numbers in any order.
 *
 * Header-only. In a .cu file the functions are __device__; in C they are static inline.
 */
#ifndef SPOTWAVE_RNG_H
#define SPOTWAVE_RNG_H

#include <stdint.h>
#include <math.h>
#include <Random123/philox.h>

#if defined(__CUDACC__)
#define SW_RNG_FN __device__ static inline
#else
#define SW_RNG_FN static inline
#endif

/* Streams used by spotwave itself; users may take any value >= SW_RNG_STREAM_USER. */
enum {
    SW_RNG_STREAM_TEST = 0,
    SW_RNG_STREAM_PIXEL_NOISE = 1,
    SW_RNG_STREAM_POSITIONS = 2,
    SW_RNG_STREAM_MAGNITUDES = 3,
    SW_RNG_STREAM_READ_NOISE = 4,
    SW_RNG_STREAM_SCREEN = 5,       /* FFT phase screens: Fourier coefficients            */
    SW_RNG_STREAM_SUBHARMONICS = 6, /* FFT phase screens: subharmonic coefficients        */
    SW_RNG_STREAM_INFINITE = 7,     /* infinite phase screens: new rows                   */
    SW_RNG_STREAM_EYE = 8,          /* synthetic eyes: aberrations drawn from a population */
    SW_RNG_STREAM_ARTEFACTS = 9,    /* synthetic eyes: reflections, brightness, tear film */
    SW_RNG_STREAM_PUPIL = 10,       /* pupil tracker: the RANSAC random numbers           */
    SW_RNG_STREAM_USER = 1024
};

typedef struct sw_rng4 {
    uint32_t v[4];
} sw_rng4;

/* Philox4x32-10 of counter (index lo, index hi, stream lo, stream hi) under key (seed lo, hi). */
SW_RNG_FN sw_rng4 sw_rng_draw(uint64_t seed, uint64_t stream, uint64_t index)
{
    philox4x32_ctr_t ctr = {
        {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)}};
    philox4x32_key_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    philox4x32_ctr_t r = philox4x32_R(10, ctr, key);
    sw_rng4 out = {{r.v[0], r.v[1], r.v[2], r.v[3]}};
    return out;
}

/* A uniform float in the open interval (0, 1) from one word: (top 23 bits + 0.5) / 2^23.
 * (23, not 24, bits: 2^24 - 0.5 is not a float and would round up to 1.) */
SW_RNG_FN float sw_rng_u01f(uint32_t w)
{
    return ((float)(w >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

/* A uniform double in (0, 1) from two words: (top 52 bits + 0.5) / 2^52 (exact in a double). */
SW_RNG_FN double sw_rng_u01(uint32_t hi, uint32_t lo)
{
    uint64_t x = (((uint64_t)hi << 32) | lo) >> 12;
    return ((double)x + 0.5) * (1.0 / 4503599627370496.0);
}

/* Two independent standard normals from the four words (Box-Muller in double precision). */
SW_RNG_FN void sw_rng_normal2(sw_rng4 r, double *z0, double *z1)
{
    double u1 = sw_rng_u01(r.v[0], r.v[1]);
    double u2 = sw_rng_u01(r.v[2], r.v[3]);
    double rad = sqrt(-2.0 * log(u1));
    double ang = 6.283185307179586476925286766559 * u2;
    *z0 = rad * cos(ang);
    *z1 = rad * sin(ang);
}

#endif /* SPOTWAVE_RNG_H */
