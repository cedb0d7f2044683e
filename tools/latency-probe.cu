// Latency floor of the host <-> GPU round trip on the machine at hand, for reading the real-time
// chain's figures (bench_loop --latency): medians over 2000 repetitions (after 200 warm-ups) of
// the pieces a frame-to-commands run is made of. Not part of the library.
//   nvcc -O2 -arch=sm_90 tools/latency-probe.cu -o /tmp/latency-probe && /tmp/latency-probe
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__global__ void empty_kernel()
{
}

__global__ void touch(const unsigned short *in, size_t n, float *out)
{
    float s = 0.0f;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        s += in[i];
    if (s == -1.0f)
        out[0] = s;
}

template <typename F> static double median_us(F f)
{
    std::vector<double> t;
    for (int i = 0; i < 2200; i++) {
        auto a = std::chrono::steady_clock::now();
        f();
        auto b = std::chrono::steady_clock::now();
        if (i >= 200)
            t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main()
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t big = 1600 * 1600 * 2;
    void *h, *d, *hc, *dc;
    CK(cudaHostAlloc(&h, big, cudaHostAllocDefault));
    CK(cudaMalloc(&d, big));
    CK(cudaHostAlloc(&hc, 1 << 20, cudaHostAllocDefault));
    CK(cudaMalloc(&dc, 1 << 20));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < 5; k++)
        empty_kernel<<<1, 32, 0, s>>>();
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));

    std::printf("empty kernel + sync            %7.1f us\n", median_us([&] {
                    empty_kernel<<<1, 32, 0, s>>>();
                    cudaStreamSynchronize(s);
                }));
    std::printf("graph of 5 empty kernels + sync %6.1f us\n", median_us([&] {
                    cudaGraphLaunch(ge, s);
                    cudaStreamSynchronize(s);
                }));
    const size_t sizes[] = {240 * 240 * 2, 640 * 640 * 2, big};
    for (size_t n : sizes)
        std::printf("H2D %8zu B + sync           %7.1f us\n", n, median_us([&] {
                        cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s);
                        cudaStreamSynchronize(s);
                    }));
    std::printf("D2H %8d B + sync           %7.1f us\n", 26244, median_us([&] {
                    cudaMemcpyAsync(hc, dc, 26244, cudaMemcpyDeviceToHost, s);
                    cudaStreamSynchronize(s);
                }));
    for (size_t n : sizes)
        std::printf("H2D %8zu B, read, D2H 26 kB %6.1f us\n", n, median_us([&] {
                        cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s);
                        touch<<<264, 256, 0, s>>>((const unsigned short *)d, n / 2, (float *)dc);
                        cudaMemcpyAsync(hc, dc, 26244, cudaMemcpyDeviceToHost, s);
                        cudaStreamSynchronize(s);
                    }));
    unsigned short *hm;
    CK(cudaHostGetDevicePointer((void **)&hm, h, 0));
    for (size_t n : sizes)
        std::printf("mapped read %8zu B + sync    %7.1f us\n", n, median_us([&] {
                        touch<<<264, 256, 0, s>>>(hm, n / 2, (float *)dc);
                        cudaStreamSynchronize(s);
                    }));
    return 0;
}
