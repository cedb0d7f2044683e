"""Diagnostic: spotwave.find on a CuPy frame vs the same frame from the host (python/tests/
test_gpu.py::test_find_cupy_is_the_numpy_path failed on the H100 with 81 % strong pixels)."""
import numpy as np
import cupy as cp
import spotwave

gpu = spotwave.Context("cuda")
print("ctx stream", hex(gpu.stream), "cupy current", hex(cp.cuda.get_current_stream().ptr))
z = np.zeros(10)
z[4], z[3], z[7] = 0.3, 0.1, -0.05
img, truth, ref = spotwave.sim.sh(grid=(16, 12), pitch=16, zernike=z, pupil_mm=1.3,
                                  read_noise_e=2, seed=4, reference=True, ctx=gpu)
print("img", img.dtype, img.shape, img.strides, img.flags["C_CONTIGUOUS"], img.min(), img.max())
d = cp.asarray(img)
cp.cuda.runtime.deviceSynchronize()
print("device copy equal:", bool((cp.asnumpy(d) == img).all()), d.strides, hex(d.data.ptr))
for label, frame in (("host", img), ("device-synced", d)):
    plan = spotwave.FindPlan(img.shape, img.dtype, ctx=gpu)
    try:
        s = plan(frame)
        print(label, "spots", len(s), plan.stats)
    except Exception as e:
        print(label, "FAILED", e)
strong = np.zeros(img.shape, np.uint8)
plan = spotwave.FindPlan(img.shape, img.dtype, ctx=gpu, max_strong_fraction=0)
plan(img, strong=strong)
print("host strong", int(strong.sum()))
try:
    plan(d, strong=strong)
    print("device strong", int(strong.sum()), plan.stats)
except Exception as e:
    print("device strong FAILED", e)
